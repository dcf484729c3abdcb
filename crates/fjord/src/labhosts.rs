//! `fjord lab … --hosts lab.toml`: the lab between real hosts over SSH,
//! and the worker the lab runs on them (`fjord lab worker …`).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Subcommand;
use fjord_lab::remote::{self, Inventory, RemoteRunError, RemoteRunOptions};
use fjord_lab::report;
use fjord_lab::run::default_out_dir;
use fjord_lab::suites::Suite;

use crate::up::UsageError;

/// What the lab asks of its worker on a host.
#[derive(Subcommand)]
pub enum WorkerJob {
    /// Receive a TCP bulk transfer: print `ready`, then the report (JSON).
    TcpSink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 1)]
        streams: usize,
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
    /// Send a TCP bulk transfer, then print the report (JSON).
    TcpSource {
        #[arg(long)]
        to: SocketAddr,
        #[arg(long)]
        bytes: u64,
        #[arg(long, default_value_t = 1)]
        streams: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        #[arg(long, default_value_t = 60)]
        timeout_secs: u64,
    },
    /// Receive one UDP trial: print `ready`, `warm` once a warm-up frame
    /// arrived, and the report (JSON) once drained after `sent` on stdin.
    UdpSink {
        #[arg(long)]
        listen: SocketAddr,
        #[command(flatten)]
        trial: UdpTrialArgs,
    },
    /// Send one UDP trial once `warm` is read on stdin, then print the
    /// report (JSON).
    UdpSource {
        #[arg(long)]
        to: SocketAddr,
        #[command(flatten)]
        trial: UdpTrialArgs,
    },
}

/// One UDP trial, as both its ends take it.
#[derive(clap::Args)]
pub struct UdpTrialArgs {
    /// `rate:FRAMES_PER_SEC:MS` or `flood:MS`.
    #[arg(long)]
    offer: String,
    #[arg(long)]
    frame_size: usize,
    /// The trial's stream number: frames of other trials do not count.
    #[arg(long)]
    stream: u16,
    #[arg(long, default_value_t = 500)]
    drain_ms: u64,
}

impl UdpTrialArgs {
    fn trial(&self) -> remote::worker::UdpTrial<'_> {
        remote::worker::UdpTrial {
            offer: &self.offer,
            frame_size: self.frame_size,
            stream: self.stream,
            drain: Duration::from_millis(self.drain_ms),
        }
    }
}

pub fn work(job: WorkerJob) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    match job {
        WorkerJob::TcpSink {
            listen,
            streams,
            timeout_secs,
        } => {
            remote::worker::tcp_sink(listen, streams, Duration::from_secs(timeout_secs), &mut out)?
        }
        WorkerJob::TcpSource {
            to,
            bytes,
            streams,
            seed,
            timeout_secs,
        } => remote::worker::tcp_source(
            to,
            bytes,
            streams,
            seed,
            Duration::from_secs(timeout_secs),
            &mut out,
        )?,
        WorkerJob::UdpSink { listen, trial } => {
            remote::worker::udp_sink(&trial.trial(), listen, &mut out)?
        }
        WorkerJob::UdpSource { to, trial } => {
            remote::worker::udp_source(&trial.trial(), to, &mut out)?
        }
    }
    Ok(())
}

fn inventory(path: &Path) -> Result<Inventory, UsageError> {
    Inventory::load(path).map_err(|error| UsageError(error.to_string()))
}

/// The lab's own binary, which goes to every host.
fn own_binary() -> anyhow::Result<PathBuf> {
    std::env::current_exe().map_err(|error| anyhow::anyhow!("finding the lab's binary: {error}"))
}

/// `fjord lab run --hosts FILE …`.
pub fn run(
    inventory_path: &Path,
    suites: Vec<Suite>,
    systems: &str,
    rounds: u32,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let inventory = inventory(inventory_path)?;
    // Unknown names are refused here as between namespaces.
    let systems: Vec<String> = fjord_lab::systems::select(systems)
        .map_err(UsageError)?
        .iter()
        .map(|system| system.name().to_string())
        .collect();
    let summary = remote::run::run(RemoteRunOptions {
        inventory,
        suites,
        systems,
        rounds,
        out_dir: out.unwrap_or_else(default_out_dir),
        binary: own_binary()?,
    })
    .map_err(|error| match error {
        RemoteRunError::Refused(why) => anyhow::Error::new(UsageError(why)),
        other => anyhow::Error::new(other),
    })?;
    println!("{}", report::terminal_summary(&summary.record));
    println!(
        "results: {}/results.json, report.md, report.html",
        summary.out_dir.display()
    );
    if summary.interrupted {
        anyhow::bail!("interrupted; the results above are partial");
    }
    Ok(())
}

/// `fjord lab install-peers --hosts FILE`: the lab's own install, run on
/// every host by the lab's binary brought there.
pub fn install_peers(inventory_path: &Path, dry_run: bool) -> anyhow::Result<()> {
    let inventory = inventory(inventory_path)?;
    let reports = remote::run::install_peers(&inventory, &own_binary()?, dry_run)?;
    let mut failed = Vec::new();
    for report in reports {
        println!("host {}:", report.host);
        for line in report.output.lines() {
            println!("  {line}");
        }
        if let Some(error) = report.error {
            println!("  {error}");
            failed.push(report.host);
        }
    }
    if !failed.is_empty() {
        anyhow::bail!("installing failed on host(s) {}", failed.join(", "));
    }
    Ok(())
}
