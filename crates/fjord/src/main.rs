//! The `fjord` command line. Exit codes: 0 success, 1 runtime failure,
//! 2 bad input (command line, config file, permissions, not root).

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use fjord::cli::{Cli, Command, LogFormat, REKEY_DIVISOR_ENV, TunnelArgs};
use fjord::keycmd;
use fjord::up::{DataOffer, UpOptions, UsageError};
use fjord_proto::Timing;

fn main() -> ExitCode {
    let cli = Cli::parse();
    // `up`'s own options, each over the same option given before it.
    let tunnel = match &cli.command {
        Command::Up { tunnel, .. } => tunnel.clone().or(cli.tunnel.clone()),
        _ => cli.tunnel.clone(),
    };
    init_logging(
        default_log_level(&cli.command),
        tunnel.log_format.unwrap_or_default(),
    );
    let foreground =
        cli.foreground || std::env::var("WG_PROCESS_FOREGROUND").is_ok_and(|v| v == "1");
    match run(cli.command, foreground, tunnel) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            if let Some(io) = error.downcast_ref::<io::Error>()
                && io.kind() == io::ErrorKind::BrokenPipe
            {
                return ExitCode::SUCCESS;
            }
            eprintln!("fjord: {error:#}");
            if error.downcast_ref::<UsageError>().is_some() {
                ExitCode::from(2)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The lab prints its own progress; its libraries' logs are for debugging.
fn default_log_level(command: &Command) -> &'static str {
    match command {
        #[cfg(feature = "lab")]
        Command::Lab(_) => "warn",
        _ => "info",
    }
}

/// Logs go to stderr, one event a line: coloured only on a terminal (under
/// systemd, journald gets plain lines), or as JSON objects.
fn init_logging(default_level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FJORD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_target(false);
    match format {
        LogFormat::Text => builder
            .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
            .init(),
        LogFormat::Json => builder.json().with_ansi(false).init(),
    }
}

/// The protocol timers `--test-rekey-divisor` asks for.
fn timing(tunnel: &TunnelArgs) -> Timing {
    match tunnel.test_rekey_divisor {
        Some(divisor) => {
            tracing::warn!(
                "rekeying {divisor} times as often, for testing (--test-rekey-divisor / {REKEY_DIVISOR_ENV}); peers on standard timers will refuse the extra handshakes"
            );
            Timing::fast_rekeys(divisor)
        }
        None => Timing::default(),
    }
}

fn require_root(what: &str) -> anyhow::Result<()> {
    if !fjord_sys::process::is_root() {
        return Err(UsageError(format!(
            "{what} needs root (CAP_NET_ADMIN); run it with sudo"
        ))
        .into());
    }
    Ok(())
}

fn run(command: Command, foreground: bool, tunnel: TunnelArgs) -> anyhow::Result<()> {
    let user = tunnel.user.as_deref();
    let resolve_user = || user.map(fjord::privilege::resolve_user).transpose();
    let threads = tunnel
        .threads
        .map_or_else(fjord_net::default_threads, usize::from);
    let stdout = io::stdout();
    match command {
        Command::Genkey => {
            if keycmd::output_is_world_accessible(&stdout) {
                eprint!("{}", keycmd::WORLD_ACCESSIBLE_WARNING);
            }
            key_command(keycmd::genkey(&mut stdout.lock()))
        }
        Command::Genpsk => key_command(keycmd::genpsk(&mut stdout.lock())),
        Command::Pubkey => key_command(keycmd::pubkey(&mut io::stdin().lock(), &mut stdout.lock())),
        Command::Up {
            config,
            no_offload,
            no_busy_poll,
            tunnel: _,
        } => {
            let user = resolve_user()?;
            require_root("fjord up")?;
            let options = UpOptions {
                no_offload,
                no_busy_poll,
                threads,
                timing: timing(&tunnel),
                cipher: tunnel.cipher,
                compression: tunnel.compression,
                user,
                metrics: tunnel.metrics,
            };
            fjord::up::up(&config, &options)
        }
        Command::Interface(args) => {
            let [name] = args.as_slice() else {
                return Err(UsageError(format!(
                    "unknown command '{}'; to create an interface run `fjord [-f] IFACE` with one name",
                    args.join(" ")
                ))
                .into());
            };
            let user = resolve_user()?;
            require_root("creating an interface")?;
            fjord::userspace::run_interface(
                name,
                foreground,
                threads,
                timing(&tunnel),
                DataOffer {
                    cipher: tunnel.cipher.unwrap_or_default(),
                    compression: tunnel.compression.unwrap_or_default(),
                },
                user.as_ref(),
                tunnel.metrics,
            )
        }
        Command::Network(command) => fjord::networkcmd::run(command, &mut stdout.lock()),
        #[cfg(feature = "lab")]
        Command::Lab(command) => fjord::labcmd::run(command, tunnel.threads),
        Command::Reload { interface } => {
            require_root("fjord reload")?;
            match fjord::uapi::reload(&interface)? {
                Ok(summary) => {
                    writeln!(stdout.lock(), "{interface}: reloaded: {summary}")?;
                    Ok(())
                }
                Err(reason) => Err(UsageError(format!("{interface}: {reason}")).into()),
            }
        }
        Command::Show { interface, json } => {
            require_root("fjord show")?;
            let text = fjord::show::show(interface.as_deref(), json)?;
            stdout.lock().write_all(text.as_bytes())?;
            Ok(())
        }
        Command::Completions { shell } => {
            fjord::cli::write_completions(shell, &mut stdout.lock());
            Ok(())
        }
        Command::Manpage { dir: Some(dir) } => Ok(fjord::cli::write_manpages(&dir)?),
        Command::Manpage { dir: None } => Ok(fjord::cli::write_manpage(&mut stdout.lock())?),
    }
}

fn key_command(result: Result<(), keycmd::KeyCommandError>) -> anyhow::Result<()> {
    match result {
        Ok(()) => Ok(()),
        Err(error)
            if error
                .io_error()
                .is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe) =>
        {
            Ok(())
        }
        Err(
            error @ (keycmd::KeyCommandError::InvalidPrivateKey
            | keycmd::KeyCommandError::TrailingCharacters),
        ) => Err(UsageError(error.to_string()).into()),
        Err(error) => Err(error.into()),
    }
}
