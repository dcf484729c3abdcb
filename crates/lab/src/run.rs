//! A lab run: for each suite and each system, build fresh hosts, bring the
//! system up, run the suite, take everything down; then write the record
//! and the reports. Bare runs first in every suite, so every figure has
//! its reference from the same run.
//!
//! With `--rounds N` all of that runs N times over, every system once
//! per round, and each figure is the median of its rounds'
//! ([`crate::rounds`]).
//!
//! Ctrl-C (or SIGTERM) finishes the current step, cleans up and writes
//! what was measured; a second one exits at once. Namespaces left by a
//! crashed run are removed at the next start.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::netns;
use crate::progress::Progress;
use crate::report;
use crate::results::{
    Machine, Measurement, RunRecord, SCHEMA_VERSION, SystemOutcome, SystemStatus,
};
use crate::suites::{Context, Setup, Suite};
use crate::systems::{System, SystemError};
use crate::topology::TwoHosts;

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("the lab builds network namespaces and needs root; run it with sudo")]
    NotRoot,
    #[error("writing results to {path}: {source}")]
    Output {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("could not watch for Ctrl-C: {0}")]
    Signals(#[source] std::io::Error),
}

pub struct RunOptions {
    pub suites: Vec<Suite>,
    pub systems: Vec<Box<dyn System>>,
    /// Shorter trials and fewer points.
    pub quick: bool,
    /// Every suite on every system this many times, interleaved
    /// ([`crate::rounds`]); at least 1.
    pub rounds: u32,
    pub out_dir: PathBuf,
}

/// The finished run.
pub struct RunSummary {
    pub record: RunRecord,
    pub out_dir: PathBuf,
    pub interrupted: bool,
}

/// `lab-runs/<UTC time>` under the current directory.
pub fn default_out_dir() -> PathBuf {
    let stamp = rfc3339(SystemTime::now()).replace(':', "-");
    PathBuf::from("lab-runs").join(stamp)
}

pub fn run(options: RunOptions) -> Result<RunSummary, RunError> {
    if !netns::is_root() {
        return Err(RunError::NotRoot);
    }
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal while the flag is set ends the process at once.
        signal_hook::flag::register_conditional_shutdown(signal, 130, interrupted.clone())
            .map_err(RunError::Signals)?;
        signal_hook::flag::register(signal, interrupted.clone()).map_err(RunError::Signals)?;
    }
    let output = |source, path: &Path| RunError::Output {
        path: path.to_path_buf(),
        source,
    };
    std::fs::create_dir_all(&options.out_dir).map_err(|e| output(e, &options.out_dir))?;
    let started = Instant::now();
    let started_at = rfc3339(SystemTime::now());

    for stale in netns::remove_stale() {
        eprintln!("removed namespace {stale} left by an earlier run");
    }

    let mut outcomes: BTreeMap<String, SystemOutcome> = BTreeMap::new();
    let mut runnable: Vec<&dyn System> = Vec::new();
    for system in &options.systems {
        match system.check() {
            Ok(version) => {
                outcomes.insert(
                    system.name().to_string(),
                    outcome(system.name(), SystemStatus::Ran, None, Some(version)),
                );
                runnable.push(system.as_ref());
            }
            Err(how) => {
                eprintln!("skipping {}: {how}", system.name());
                outcomes.insert(
                    system.name().to_string(),
                    outcome(system.name(), SystemStatus::Skipped, Some(how), None),
                );
            }
        }
    }

    let rounds = options.rounds.max(1);
    let total: u64 = options
        .suites
        .iter()
        .map(|suite| suite.steps(options.quick) * runnable.len() as u64)
        .sum::<u64>()
        * u64::from(rounds);
    let progress = Progress::new(total).stop_on(interrupted.clone());
    // Absolute: daemons that change directory read their files from here
    // (sshd refuses a relative host key path).
    let workdir = std::path::absolute(&options.out_dir)
        .map_err(|e| output(e, &options.out_dir))?
        .join("work");
    let mut by_round: Vec<Vec<Measurement>> = Vec::new();
    'rounds: for round in 1..=rounds {
        if rounds > 1 {
            progress.line(&format!("round {round} of {rounds}"));
        }
        let mut measurements = Vec::new();
        for suite in &options.suites {
            for system in &runnable {
                if interrupted.load(Ordering::Relaxed) {
                    progress.line("interrupted: cleaning up and writing what was measured");
                    by_round.push(measurements);
                    break 'rounds;
                }
                let steps = suite.steps(options.quick);
                let name = match rounds {
                    1 => format!("{}-{}", suite.name(), system.name()),
                    _ => format!("{}-{}-{round}", suite.name(), system.name()),
                };
                match run_one(
                    *suite,
                    *system,
                    options.quick,
                    &progress,
                    &workdir.join(name),
                ) {
                    Ok(rows) => measurements.extend(rows),
                    Err(error) => {
                        progress.line(&format!(
                            "{} could not run the {} suite: {error}",
                            system.name(),
                            suite.name()
                        ));
                        progress.skip(steps);
                        if let Some(entry) = outcomes.get_mut(system.name()) {
                            entry.status = SystemStatus::Failed;
                            entry.reason = Some(error.to_string());
                        }
                    }
                }
            }
        }
        by_round.push(measurements);
    }
    progress.finish();
    let _ = std::fs::remove_dir_all(&workdir);

    let mut record = RunRecord {
        schema_version: SCHEMA_VERSION,
        fjord_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        duration_secs: started.elapsed().as_secs_f64(),
        rounds,
        machine: machine(),
        suites: options
            .suites
            .iter()
            .map(|s| s.name().to_string())
            .collect(),
        systems: options
            .systems
            .iter()
            .filter_map(|s| outcomes.remove(s.name()))
            .collect(),
        // One round's rows come back as they are.
        measurements: crate::rounds::merge(by_round),
        hosts: Vec::new(),
    };
    record.compute_ratios();
    report::write_reports(&record, &options.out_dir).map_err(|e| output(e, &options.out_dir))?;
    Ok(RunSummary {
        record,
        out_dir: options.out_dir,
        interrupted: interrupted.load(Ordering::Relaxed),
    })
}

/// One suite on one system, on hosts built for it alone.
fn run_one(
    suite: Suite,
    system: &dyn System,
    quick: bool,
    progress: &Progress,
    workdir: &Path,
) -> Result<Vec<Measurement>, SystemError> {
    let failed = |detail: String| SystemError::StartFailed {
        system: system.name().to_string(),
        detail,
    };
    std::fs::create_dir_all(workdir).map_err(|e| failed(format!("work directory: {e}")))?;
    if suite.builds_own_hosts() {
        let setup = Setup {
            system,
            progress,
            workdir,
        };
        return Ok(suite.run_on_own_hosts(&setup, quick));
    }
    let hosts = if suite.needs_emulator() {
        TwoHosts::with_middle()
    } else {
        TwoHosts::direct()
    }
    .map_err(|e| failed(format!("building hosts: {e}")))?;
    progress.line(&format!(
        "{}: bringing the tunnel up for the {} suite",
        system.name(),
        suite.name()
    ));
    let mut context_emulator = None;
    if suite.needs_emulator() {
        let middle = hosts
            .middle
            .as_ref()
            .ok_or_else(|| failed("no middle namespace".into()))?;
        let link = suite.idle_link();
        let emulator = crate::emulator::Emulator::start(
            middle,
            crate::topology::MIDDLE_LEFT_LINK,
            crate::topology::MIDDLE_RIGHT_LINK,
            link.clone(),
            link,
        )
        .map_err(|e| failed(format!("starting the link emulator: {e}")))?;
        context_emulator = Some(emulator);
    }
    let running = system.start(&hosts, workdir)?;
    let mut context = Context {
        hosts: &hosts,
        system: running.as_ref(),
        system_name: system.name(),
        quick,
        progress,
        emulator: context_emulator,
    };
    let rows = suite.run(&mut context);
    if let Some(emulator) = context.emulator.take() {
        let _ = emulator.stop();
    }
    drop(running);
    drop(hosts);
    Ok(rows)
}

fn outcome(
    name: &str,
    status: SystemStatus,
    reason: Option<String>,
    version: Option<String>,
) -> SystemOutcome {
    SystemOutcome {
        name: name.to_string(),
        status,
        reason,
        version,
    }
}

/// The machine the run is controlled from.
pub(crate) fn machine() -> Machine {
    let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find(|line| line.starts_with("model name"))
                .and_then(|line| line.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_default();
    Machine {
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        cpu_model,
    }
}

/// `2026-11-22T01:13:00Z` for `time` (UTC, whole seconds).
pub fn rfc3339(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let days = (secs / 86_400) as i64;
    let (hour, minute, second) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Days since 1970-01-01 to a civil date (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}Z")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn formats_utc_times() {
        assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(951_782_400)),
            "2000-02-29T00:00:00Z"
        );
        assert_eq!(
            rfc3339(UNIX_EPOCH + Duration::from_secs(1_795_310_974)),
            "2026-11-22T01:29:34Z"
        );
    }
}
