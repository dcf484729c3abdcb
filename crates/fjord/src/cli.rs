//! The command line's definition, apart from what runs it (`main.rs`), so
//! that the man page and the shell completions (`fjord manpage`, `fjord
//! completions`) are generated from the same clap definition that parses.
//!
//! Each subcommand lists only what it takes: the options of a running
//! tunnel ([`TunnelArgs`]) belong to `up` and to the bare `fjord [-f]
//! IFACE` form that wg-quick starts, and are written once and flattened
//! into both.

use std::path::PathBuf;

use clap::{Args, CommandFactory, Parser, Subcommand, ValueEnum};

use crate::config::{CipherSetting, CompressionSetting, MetricsAddress};

/// Read by `--test-rekey-divisor` when it is not given.
pub const REKEY_DIVISOR_ENV: &str = "FJORD_TEST_REKEY_DIVISOR";

#[derive(Parser)]
#[command(
    name = "fjord",
    version,
    about = "A fast WireGuard-compatible VPN for Linux, with a measurement lab"
)]
#[command(
    after_help = "Started as `fjord [-f] IFACE` (the way wg-quick starts a userspace implementation),\nfjord creates IFACE, serves the wg configuration protocol on /var/run/wireguard/IFACE.sock,\nand runs in the background unless -f is given or WG_PROCESS_FOREGROUND=1."
)]
pub struct Cli {
    /// With `fjord IFACE`: stay in the foreground.
    #[arg(short, long)]
    pub foreground: bool,
    /// With `fjord IFACE` (and, before a subcommand, for `up` where it does
    /// not give its own).
    #[command(flatten)]
    pub tunnel: TunnelArgs,
    #[command(subcommand)]
    pub command: Command,
}

/// The options of a running tunnel: `up` and `fjord IFACE`.
#[derive(Args, Debug, Clone, Default)]
pub struct TunnelArgs {
    /// Threads that share the encryption and decryption of large batches
    /// [default: one per two CPUs]. One keeps everything on one thread;
    /// more lift one tunnel, even one TCP flow, past what one core can
    /// encrypt, if there are cores to spare.
    #[arg(long, env = "FJORD_THREADS",
          value_parser = clap::value_parser!(u16).range(1..=256))]
    pub threads: Option<u16>,
    /// The data cipher offered to other fjord nodes (over the config
    /// file's `Cipher`): `auto` (AES-256-GCM with a fjord peer that offers
    /// it too, where this CPU has hardware AES) or `chacha20-poly1305`
    /// (WireGuard's cipher with every peer). WireGuard peers always get
    /// ChaCha20-Poly1305 [default: auto]
    #[arg(long, env = "FJORD_CIPHER", value_parser = parse_cipher)]
    pub cipher: Option<CipherSetting>,
    /// Compression of data to other fjord nodes (over the config file's
    /// `Compression`): `off`, `lz4` or `zstd` (per packet, with each fjord
    /// peer that enables it too; for low-entropy traffic on slow links).
    /// Off by default because packet sizes then leak secrets mixed with
    /// attacker-controlled data. WireGuard peers never get compressed data
    /// [default: off]
    #[arg(long, env = "FJORD_COMPRESSION", value_parser = parse_compression)]
    pub compression: Option<CompressionSetting>,
    /// For tests only: run the rekey cycle N times faster (sessions
    /// rekeyed every 120/N s, handshakes retried every 5/N s). A peer on
    /// the standard timers would refuse the extra initiations as a flood:
    /// never on a real tunnel. Hidden from --help.
    #[arg(long, hide = true, env = REKEY_DIVISOR_ENV,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub test_rekey_divisor: Option<u32>,
    /// Once the interface is set up, run as USER, keeping only
    /// CAP_NET_ADMIN (socket marks and buffers, and removing routing rules
    /// at shutdown).
    #[arg(long, env = "FJORD_USER", value_name = "USER")]
    pub user: Option<String>,
    /// Serve Prometheus metrics at http://ADDR:PORT/metrics (over the
    /// config file's `Metrics`), e.g. 127.0.0.1:9587. No authentication:
    /// keep it on loopback [default: off]
    #[arg(long, env = "FJORD_METRICS", value_name = "ADDR:PORT",
          value_parser = parse_metrics)]
    pub metrics: Option<MetricsAddress>,
    /// How log lines are written to stderr: `text` (one event a line,
    /// coloured only on a terminal) or `json` (one JSON object a line, for
    /// log shippers) [default: text]
    #[arg(long, env = "FJORD_LOG_FORMAT", value_enum)]
    pub log_format: Option<LogFormat>,
}

impl TunnelArgs {
    /// These options, each taken from `fallback` where not given here
    /// (`fjord --threads 2 up wg0.conf`, as older fjord versions took it).
    pub fn or(self, fallback: Self) -> Self {
        Self {
            threads: self.threads.or(fallback.threads),
            cipher: self.cipher.or(fallback.cipher),
            compression: self.compression.or(fallback.compression),
            test_rekey_divisor: self.test_rekey_divisor.or(fallback.test_rekey_divisor),
            user: self.user.or(fallback.user),
            metrics: self.metrics.or(fallback.metrics),
            log_format: self.log_format.or(fallback.log_format),
        }
    }
}

/// The shape of log lines on stderr.
#[derive(ValueEnum, Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable, one event a line; ANSI colour only on a terminal.
    #[default]
    Text,
    /// One JSON object a line (time, level, message and fields).
    Json,
}

#[derive(Subcommand)]
pub enum Command {
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
        #[command(flatten)]
        tunnel: TunnelArgs,
    },
    /// A fjord mesh network: its key, and certificates for its members.
    #[command(subcommand)]
    Network(crate::networkcmd::NetworkCommand),
    /// The measurement lab: compare fjord with bare links and other VPNs.
    #[cfg(feature = "lab")]
    #[command(subcommand)]
    Lab(crate::labcmd::LabCommand),
    /// Re-read the file of `fjord up` for IFACE and apply what changed,
    /// keeping every unchanged peer's session (as SIGHUP does; prints what
    /// changed, or why the file was refused and nothing changed).
    Reload {
        /// The interface, e.g. wg0.
        interface: String,
    },
    /// Show interfaces, peers, handshakes and transfer (like `wg show`).
    Show {
        /// Interface to show; all when omitted.
        interface: Option<String>,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Print a completion script for SHELL (bash, zsh or fish) on stdout.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Write the man pages (fjord.1 and one per subcommand) into DIR, or
    /// print fjord.1 on stdout without DIR. For packaging.
    #[command(hide = true)]
    Manpage {
        /// Directory to write the pages into.
        dir: Option<PathBuf>,
    },
    /// `fjord IFACE`: create IFACE and wait for `wg` to configure it.
    #[command(external_subcommand)]
    Interface(Vec<String>),
}

/// The shells `fjord completions` writes scripts for.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

impl From<CompletionShell> for clap_complete::Shell {
    fn from(shell: CompletionShell) -> Self {
        match shell {
            CompletionShell::Bash => Self::Bash,
            CompletionShell::Zsh => Self::Zsh,
            CompletionShell::Fish => Self::Fish,
        }
    }
}

/// The clap definition of the whole command line.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Writes `shell`'s completion script for `fjord` to `out`.
pub fn write_completions(shell: CompletionShell, out: &mut dyn std::io::Write) {
    clap_complete::generate(
        clap_complete::Shell::from(shell),
        &mut command(),
        "fjord",
        out,
    );
}

/// Writes fjord.1 to `out`.
pub fn write_manpage(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(command()).render(out)
}

/// Writes fjord.1 and a page for each visible subcommand (fjord-up.1,
/// fjord-network-sign.1, …) into `dir`.
pub fn write_manpages(dir: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command(), dir)
}

fn parse_metrics(text: &str) -> Result<MetricsAddress, String> {
    text.parse()
        .map_err(|error: crate::config::ValueError| error.to_string())
}

fn parse_cipher(text: &str) -> Result<CipherSetting, String> {
    text.parse()
        .map_err(|_| format!("expected {}", CipherSetting::EXPECTED))
}

fn parse_compression(text: &str) -> Result<CompressionSetting, String> {
    text.parse()
        .map_err(|_| format!("expected {}", CompressionSetting::EXPECTED))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definition_is_consistent() {
        command().debug_assert();
    }
}
