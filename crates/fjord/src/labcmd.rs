//! `fjord lab …`: the command line of the measurement lab.

use std::path::{Path, PathBuf};

use clap::Subcommand;
use fjord_lab::run::{RunOptions, default_out_dir};
use fjord_lab::suites::Suite;
use fjord_lab::{report, systems};

use crate::up::UsageError;

/// Systems of `fjord lab quick` when none are named.
const QUICK_SYSTEMS: &str = "bare,fjord";
/// A week: longer soaks are surely a typo.
const MAX_SOAK_MINUTES: f64 = 7.0 * 24.0 * 60.0;

#[derive(Subcommand)]
pub enum LabCommand {
    /// A few-minute overview of bare and fjord (TCP throughput, 64- and
    /// 1518-byte frame rates, RTT) on two hosts joined by veth.
    Quick {
        /// Systems to compare (comma-separated); see `fjord lab list`.
        #[arg(long, default_value = QUICK_SYSTEMS)]
        systems: String,
        /// Directory for results.json, report.md and report.html
        /// (default: lab-runs/<time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Threads for every fjord tunnel this starts (`--threads` of
        /// `fjord up`) [default: fjord's, one per two CPUs].
        #[arg(long, env = "FJORD_THREADS",
              value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: Option<u16>,
    },
    /// Run suites for systems.
    Run {
        /// Suites to run (comma-separated); see `fjord lab list`.
        #[arg(long = "suite", required = true)]
        suites: String,
        /// Systems to compare (comma-separated); bare is added first if missing.
        #[arg(long, default_value = QUICK_SYSTEMS)]
        systems: String,
        /// Shorter trials and fewer points.
        #[arg(long)]
        quick: bool,
        /// How long the soak suite runs, in minutes (default 60, 5 with
        /// --quick); it restarts a side every sixth of that, at most every
        /// 10 minutes.
        #[arg(long, value_name = "MINUTES")]
        soak_minutes: Option<f64>,
        /// TCP congestion control for every host of the run (for example
        /// cubic or bbr; default: the machine's). TCP's answer to loss is
        /// most of what the loss suite measures.
        #[arg(long, value_name = "NAME")]
        congestion_control: Option<String>,
        /// Run every suite on every system N times, interleaved (bare,
        /// the systems, then all again), and report each figure as the
        /// median of its rounds, with their range. One run of one system
        /// can be 20–30 % off on a small or shared machine; this takes N
        /// times as long.
        #[arg(long, value_name = "N", default_value_t = 1,
              value_parser = clap::value_parser!(u32).range(1..=i64::from(fjord_lab::rounds::MAX_ROUNDS)))]
        rounds: u32,
        /// Directory for the results (default: lab-runs/<time>).
        #[arg(long)]
        out: Option<PathBuf>,
        /// Threads for every fjord tunnel this starts (`--threads` of
        /// `fjord up`) [default: fjord's, one per two CPUs].
        #[arg(long, env = "FJORD_THREADS",
              value_parser = clap::value_parser!(u16).range(1..=256))]
        threads: Option<u16>,
        /// Run between the real hosts of this inventory (TOML), over SSH,
        /// instead of between network namespaces on this machine.
        #[arg(long, value_name = "FILE")]
        hosts: Option<PathBuf>,
    },
    /// Re-render report.md and report.html from a run's results.json;
    /// or merge several runs (other hosts, other days) into one report,
    /// every column "system (run label)".
    Report {
        /// The run directory; several are merged into --out. `DIR=LABEL`
        /// labels a run's columns (default: the directory's name).
        #[arg(required = true, value_name = "DIR[=LABEL]")]
        runs: Vec<PathBuf>,
        /// Where a merge writes report.md, report.html and merged.json
        /// (needed with several runs; never a run's own directory).
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// A run's label in a merge, once per run in order (like DIR=LABEL).
        #[arg(long = "label", value_name = "LABEL")]
        labels: Vec<String>,
    },
    /// Install the peers to compare (wireguard-go, boringtun, vpncloud,
    /// OpenVPN, OpenSSH, strongSwan) and the tools the lab uses.
    InstallPeers {
        /// Show what would be installed, install nothing.
        #[arg(long)]
        dry_run: bool,
        /// Install on every host of this inventory (over SSH) instead of here.
        #[arg(long, value_name = "FILE")]
        hosts: Option<PathBuf>,
    },
    /// One end of a traffic generator, run by the lab on a host over SSH.
    #[command(hide = true)]
    Worker {
        #[command(subcommand)]
        job: crate::labhosts::WorkerJob,
    },
    /// List suites and systems, and which systems are installed.
    List,
    /// The lab's `relay` system at one end: an unencrypted TUN-to-UDP relay,
    /// the floor of userspace tunnelling. Lab use only: it authenticates
    /// nothing.
    #[command(hide = true)]
    Relay {
        /// The TUN device to create.
        #[arg(long)]
        tun: String,
        /// UDP address to receive on.
        #[arg(long)]
        listen: std::net::SocketAddr,
        /// The other relay's UDP address.
        #[arg(long)]
        peer: std::net::SocketAddr,
    },
}

/// Runs a lab command; `fallback_threads` is `--threads` for every fjord
/// it starts where the command gives none (`fjord --threads 2 lab quick`;
/// `None`: fjord's default).
pub fn run(command: LabCommand, fallback_threads: Option<u16>) -> anyhow::Result<()> {
    // The lab's fjord system is this very binary unless $FJORD_BIN says otherwise.
    if let Ok(me) = std::env::current_exe() {
        fjord_lab::systems::wireguard::use_fjord_binary(me);
    }
    let use_threads = |threads: Option<u16>| {
        if let Some(threads) = threads.or(fallback_threads) {
            fjord_lab::systems::wireguard::use_fjord_threads(threads);
        }
    };
    match command {
        LabCommand::Quick {
            systems,
            out,
            threads,
        } => {
            use_threads(threads);
            run_suites(vec![Suite::Quick], &systems, true, 1, out)
        }
        LabCommand::Run {
            suites,
            systems,
            quick,
            soak_minutes,
            congestion_control,
            rounds,
            out,
            threads,
            hosts,
        } => {
            use_threads(threads);
            let suites = Suite::parse_list(&suites).map_err(UsageError)?;
            if let Some(inventory) = hosts {
                if congestion_control.is_some() || soak_minutes.is_some() {
                    return Err(UsageError(
                        "--congestion-control and --soak-minutes apply to runs in namespaces, \
                         not to --hosts"
                            .into(),
                    )
                    .into());
                }
                let systems = with_bare_first(&systems);
                return crate::labhosts::run(&inventory, suites, &systems, rounds, out);
            }
            if let Some(name) = congestion_control {
                fjord_lab::netns::use_congestion_control(&name).map_err(UsageError)?;
            }
            if let Some(minutes) = soak_minutes {
                if !(minutes.is_finite() && minutes > 0.0 && minutes <= MAX_SOAK_MINUTES) {
                    return Err(UsageError(format!(
                        "--soak-minutes {minutes}: give minutes above 0 and at most {MAX_SOAK_MINUTES}"
                    ))
                    .into());
                }
                fjord_lab::suites::soak::use_duration(std::time::Duration::from_secs_f64(
                    minutes * 60.0,
                ));
            }
            run_suites(suites, &systems, quick, rounds, out)
        }
        LabCommand::Report { runs, out, labels } => match (runs.as_slice(), out) {
            ([dir], None) if labels.is_empty() => rerender(dir),
            ([_], _) => Err(UsageError(
                "--out and --label are for merging two or more runs; \
                 `fjord lab report DIR` rewrites DIR's own reports"
                    .into(),
            )
            .into()),
            (_, None) => Err(UsageError(format!(
                "merging {} runs needs --out DIR, a directory of its own for the merged report",
                runs.len()
            ))
            .into()),
            (_, Some(out)) => merge_runs(&runs, &labels, &out),
        },
        LabCommand::InstallPeers {
            dry_run,
            hosts: Some(inventory),
        } => crate::labhosts::install_peers(&inventory, dry_run),
        LabCommand::InstallPeers {
            dry_run,
            hosts: None,
        } => install(dry_run),
        LabCommand::Worker { job } => crate::labhosts::work(job),
        LabCommand::List => {
            print!("{}", list());
            Ok(())
        }
        LabCommand::Relay { tun, listen, peer } => {
            let config = fjord_lab::relay::RelayConfig { tun, listen, peer };
            Err(anyhow::Error::new(fjord_lab::relay::run(&config)).context("relay"))
        }
    }
}

fn run_suites(
    suites: Vec<Suite>,
    systems: &str,
    quick: bool,
    rounds: u32,
    out: Option<PathBuf>,
) -> anyhow::Result<()> {
    let systems = systems::select(&with_bare_first(systems)).map_err(UsageError)?;
    if !fjord_sys::process::is_root() {
        return Err(UsageError(
            "fjord lab builds network namespaces and needs root; run it with sudo".into(),
        )
        .into());
    }
    let out_dir = out.unwrap_or_else(default_out_dir);
    let summary = fjord_lab::run::run(RunOptions {
        suites,
        systems,
        quick,
        rounds,
        out_dir,
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

/// `systems` with bare added first if missing: every figure's reference.
fn with_bare_first(systems: &str) -> String {
    if systems.split(',').any(|name| name.trim() == "bare") {
        systems.to_string()
    } else {
        format!("bare,{systems}")
    }
}

fn rerender(dir: &Path) -> anyhow::Result<()> {
    use report::merge::{self, WriteMergedError};
    let usage = |error: &dyn std::fmt::Display| UsageError(error.to_string());
    // A merge's own directory (`--out` of an earlier merge) is drawn again
    // from its merged.json.
    if let Some(merged) = merge::load_merged(dir).map_err(|error| usage(&error))? {
        match merge::write_merged_reports(&merged, dir) {
            Ok(()) => {}
            Err(WriteMergedError::Refused(error)) => return Err(usage(&error).into()),
            Err(WriteMergedError::Io(error)) => return Err(error.into()),
        }
        println!(
            "rewrote {}/report.md and report.html, a merge of {} runs",
            dir.display(),
            merged.runs.len()
        );
        return Ok(());
    }
    let record = report::load_record(dir).map_err(|error| UsageError(error.to_string()))?;
    report::write_reports(&record, dir)?;
    println!("{}", report::terminal_summary(&record));
    println!("rewrote {}/report.md and report.html", dir.display());
    Ok(())
}

/// `fjord lab report A B … --out DIR`: one report of several runs.
fn merge_runs(args: &[PathBuf], labels: &[String], out: &Path) -> anyhow::Result<()> {
    use report::merge::{self, WriteMergedError};
    let usage = |error: &dyn std::fmt::Display| UsageError(error.to_string());
    let runs = merge::runs_to_merge(args, labels).map_err(|error| usage(&error))?;
    let merged = merge::merge(&runs).map_err(|error| usage(&error))?;
    match merge::write_merged_reports(&merged, out) {
        Ok(()) => {}
        Err(WriteMergedError::Refused(error)) => return Err(usage(&error).into()),
        Err(WriteMergedError::Io(error)) => return Err(error.into()),
    }
    let labels: Vec<&str> = merged.runs.iter().map(|r| r.label.as_str()).collect();
    println!(
        "merged {} runs ({}) into {}/report.md, report.html and {}",
        labels.len(),
        labels.join(", "),
        out.display(),
        merge::MERGED_FILE
    );
    Ok(())
}

fn install(dry_run: bool) -> anyhow::Result<()> {
    let steps = fjord_lab::install::plan();
    if steps.is_empty() {
        println!("every peer and tool is already installed");
        return Ok(());
    }
    if dry_run {
        for step in &steps {
            println!("{step}");
        }
        return Ok(());
    }
    if !fjord_sys::process::is_root() {
        return Err(UsageError("installing packages needs root; run it with sudo".into()).into());
    }
    let summary = fjord_lab::install::run(steps, fjord_lab::install::Progress::Auto);
    print!("{summary}");
    if !summary.succeeded() {
        anyhow::bail!("some installs failed (see above)");
    }
    Ok(())
}

fn list() -> String {
    let mut text = String::from("suites:\n");
    for suite in Suite::ALL {
        text.push_str(&format!("  {:<11} {}\n", suite.name(), suite.description()));
    }
    text.push_str("\nsystems:\n");
    for system in systems::all() {
        let state = match system.check() {
            Ok(version) => format!("installed ({version})"),
            Err(how) => format!("not installed: {how}"),
        };
        text.push_str(&format!(
            "  {:<14} {}\n  {:<14} {state}\n",
            system.name(),
            system.description(),
            ""
        ));
    }
    text
}
