//! The `fjord` command line. Exit codes: 0 success, 1 runtime failure,
//! 2 bad input (command line, config file, permissions, not root).

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use fjord::config::{CipherSetting, CompressionSetting, MetricsAddress};
use fjord::keycmd;
use fjord::up::{DataOffer, UpOptions, UsageError};
use fjord_proto::Timing;

#[derive(Parser)]
#[command(
    name = "fjord",
    version,
    about = "A fast WireGuard-compatible VPN for Linux, with a measurement lab"
)]
#[command(
    after_help = "Started as `fjord [-f] IFACE` (the way wg-quick starts a userspace implementation),\nfjord creates IFACE, serves the wg configuration protocol on /var/run/wireguard/IFACE.sock,\nand runs in the background unless -f is given or WG_PROCESS_FOREGROUND=1."
)]
struct Cli {
    /// With `fjord IFACE`: stay in the foreground.
    #[arg(short, long, global = true)]
    foreground: bool,
    /// Threads that share the encryption and decryption of large batches,
    /// for `up`, `fjord IFACE` and the fjord tunnels `fjord lab` starts
    /// [default: one per two CPUs]. One keeps
    /// everything on one thread; more lift one tunnel, even one TCP flow,
    /// past what one core can encrypt, if there are cores to spare.
    #[arg(long, global = true, env = "FJORD_THREADS",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    threads: Option<u16>,
    /// The data cipher offered to other fjord nodes, for `up` and `fjord
    /// IFACE` (over the config file's `Cipher`): `auto` (AES-256-GCM with
    /// a fjord peer that offers it too, where this CPU has hardware AES)
    /// or `chacha20-poly1305` (WireGuard's cipher with every peer).
    /// WireGuard peers always get ChaCha20-Poly1305 [default: auto]
    #[arg(long, global = true, env = "FJORD_CIPHER", value_parser = parse_cipher)]
    cipher: Option<CipherSetting>,
    /// Compression of data to other fjord nodes, for `up` and `fjord
    /// IFACE` (over the config file's `Compression`): `off`, `lz4` or
    /// `zstd` (per packet, with each fjord peer that enables it too; for
    /// low-entropy traffic on slow links). Off by default because packet
    /// sizes then leak secrets mixed with attacker-controlled data.
    /// WireGuard peers never get compressed data [default: off]
    #[arg(long, global = true, env = "FJORD_COMPRESSION", value_parser = parse_compression)]
    compression: Option<CompressionSetting>,
    /// For tests only: run the rekey cycle N times faster (sessions
    /// rekeyed every 120/N s, handshakes retried every 5/N s). A peer on
    /// the standard timers would refuse the extra initiations as a flood:
    /// never on a real tunnel. Hidden from --help.
    #[arg(long, global = true, hide = true, env = REKEY_DIVISOR_ENV,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    test_rekey_divisor: Option<u32>,
    /// For `up` and `fjord IFACE`: once the interface is set up, run as
    /// USER, keeping only CAP_NET_ADMIN (socket marks and buffers, and
    /// removing routing rules at shutdown).
    #[arg(long, global = true, env = "FJORD_USER", value_name = "USER")]
    user: Option<String>,
    /// For `up` and `fjord IFACE`: serve Prometheus metrics at
    /// http://ADDR:PORT/metrics (over the config file's `Metrics`), e.g.
    /// 127.0.0.1:9587. No authentication: keep it on loopback [default: off]
    #[arg(long, global = true, env = "FJORD_METRICS", value_name = "ADDR:PORT",
          value_parser = parse_metrics)]
    metrics: Option<MetricsAddress>,
    #[command(subcommand)]
    command: Command,
}

const REKEY_DIVISOR_ENV: &str = "FJORD_TEST_REKEY_DIVISOR";

#[derive(Subcommand)]
enum Command {
    /// Print a new private key (like `wg genkey`).
    Genkey,
    /// Read a private key on stdin, print its public key (like `wg pubkey`).
    Pubkey,
    /// Print a new preshared key (like `wg genpsk`).
    Genpsk,
    /// Bring up the interface described by a wg-quick style file and run it
    /// in the foreground until SIGINT/SIGTERM (interface name = file stem).
    Up {
        /// Path to the configuration file, e.g. /etc/wireguard/wg0.conf.
        config: PathBuf,
        /// Do not use TUN or UDP segmentation offloads.
        #[arg(long)]
        no_offload: bool,
        /// Always sleep when idle instead of polling for 250 µs after
        /// traffic (saves up to 5 % of a core; adds about 0.1 ms per round trip).
        #[arg(long)]
        no_busy_poll: bool,
    },
    /// A fjord mesh network: its key, and certificates for its members.
    #[command(subcommand)]
    Network(fjord::networkcmd::NetworkCommand),
    /// The measurement lab: compare fjord with bare links and other VPNs.
    #[command(subcommand)]
    Lab(fjord::labcmd::LabCommand),
    /// `fjord IFACE`: create IFACE and wait for `wg` to configure it.
    #[command(external_subcommand)]
    Interface(Vec<String>),
    /// Show interfaces, peers, handshakes and transfer (like `wg show`).
    Show {
        /// Interface to show; all when omitted.
        interface: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // The lab prints its own progress; its libraries' logs are for debugging.
    init_logging(if matches!(cli.command, Command::Lab(_)) {
        "warn"
    } else {
        "info"
    });
    let foreground =
        cli.foreground || std::env::var("WG_PROCESS_FOREGROUND").is_ok_and(|v| v == "1");
    let timing = match cli.test_rekey_divisor {
        Some(divisor) => {
            tracing::warn!(
                "rekeying {divisor} times as often, for testing (--test-rekey-divisor / {REKEY_DIVISOR_ENV}); peers on standard timers will refuse the extra handshakes"
            );
            Timing::fast_rekeys(divisor)
        }
        None => Timing::default(),
    };
    let protocol = Protocol {
        timing,
        cipher: cli.cipher,
        compression: cli.compression,
        metrics: cli.metrics,
    };
    match run(
        cli.command,
        foreground,
        cli.threads,
        protocol,
        cli.user.as_deref(),
    ) {
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

fn init_logging(default_level: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("FJORD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_level));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(io::stderr)
        .with_ansi(io::IsTerminal::is_terminal(&io::stderr()))
        .with_target(false)
        .init();
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

fn parse_cipher(text: &str) -> Result<CipherSetting, String> {
    text.parse()
        .map_err(|_| format!("expected {}", CipherSetting::EXPECTED))
}

fn parse_metrics(text: &str) -> Result<MetricsAddress, String> {
    text.parse()
        .map_err(|error: fjord::config::ValueError| error.to_string())
}

fn parse_compression(text: &str) -> Result<CompressionSetting, String> {
    text.parse()
        .map_err(|_| format!("expected {}", CompressionSetting::EXPECTED))
}

/// The protocol settings the command line gives `up` and `fjord IFACE`.
struct Protocol {
    timing: Timing,
    cipher: Option<CipherSetting>,
    compression: Option<CompressionSetting>,
    /// Not the protocol's, but taken by the same two commands.
    metrics: Option<MetricsAddress>,
}

fn run(
    command: Command,
    foreground: bool,
    chosen_threads: Option<u16>,
    protocol: Protocol,
    user: Option<&str>,
) -> anyhow::Result<()> {
    let stdout = io::stdout();
    let resolve_user = || user.map(fjord::privilege::resolve_user).transpose();
    let threads = chosen_threads.map_or_else(fjord_net::default_threads, usize::from);
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
        } => {
            let user = resolve_user()?;
            require_root("fjord up")?;
            let options = UpOptions {
                no_offload,
                no_busy_poll,
                threads,
                timing: protocol.timing,
                cipher: protocol.cipher,
                compression: protocol.compression,
                user,
                metrics: protocol.metrics,
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
                protocol.timing,
                DataOffer {
                    cipher: protocol.cipher.unwrap_or_default(),
                    compression: protocol.compression.unwrap_or_default(),
                },
                user.as_ref(),
                protocol.metrics,
            )
        }
        Command::Network(command) => fjord::networkcmd::run(command, &mut stdout.lock()),
        Command::Lab(command) => fjord::labcmd::run(command, chosen_threads),
        Command::Show { interface, json } => {
            require_root("fjord show")?;
            let text = fjord::show::show(interface.as_deref(), json)?;
            stdout.lock().write_all(text.as_bytes())?;
            Ok(())
        }
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
