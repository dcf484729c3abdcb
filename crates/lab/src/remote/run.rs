//! A lab run across the inventory's hosts: connect to each, bring the
//! lab's binary, describe the host; then for each round, suite and
//! system bring the system up between the left and right hosts, run the
//! suite, take it down; clean every host up; write the same record and
//! reports as a run in namespaces, with the hosts' facts added.
//!
//! A lost host (ssh's own failure) ends the run: every other host is
//! cleaned up before the error, which names the lost host, is returned.
//! Any other failure fails that system's suite, as between namespaces.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Instant, SystemTime};

use super::facts;
use super::host::RemoteHost;
use super::inventory::{Inventory, Role};
use super::quick;
use super::ssh::RemoteError;
use super::systems::RemoteSystem;
use crate::progress::Progress;
use crate::report;
use crate::results::{
    HostFacts, Measurement, RunRecord, SCHEMA_VERSION, SystemOutcome, SystemStatus,
};
use crate::run::{RunSummary, rfc3339};
use crate::suites::Suite;

#[derive(Debug, thiserror::Error)]
pub enum RemoteRunError {
    /// The run cannot go as asked (a suite refused across hosts).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Remote(#[from] RemoteError),
    #[error("{operation} {path}: {source}")]
    Local {
        operation: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub struct RemoteRunOptions {
    pub inventory: Inventory,
    pub suites: Vec<Suite>,
    /// System names, bare first.
    pub systems: Vec<String>,
    pub rounds: u32,
    pub out_dir: PathBuf,
    /// The lab's own binary, brought to every host.
    pub binary: PathBuf,
}

/// Whether `suites` may run across the hosts of `inventory`: floods only
/// where it allows them, and only the suites the lab drives there. A
/// flood is unbounded load: handshake floods, overload at an unbounded
/// rate for the whole trial. The quick suite's zero-loss searches are
/// not: paced trials of a second or two, and one 1-second probe as fast
/// as the sender goes that only sets where the search starts.
pub fn check_suites(inventory: &Inventory, suites: &[Suite]) -> Result<(), String> {
    for suite in suites {
        let floods = matches!(suite, Suite::Attack | Suite::Throughput);
        if floods && !inventory.allow_floods {
            return Err(format!(
                "the {} suite floods the network between the hosts (handshake floods, or \
                 overload at an unbounded rate); across hosts the lab runs it only where \
                 {} says allow_floods = true",
                suite.name(),
                inventory.path.display()
            ));
        }
        if *suite != Suite::Quick {
            return Err(format!(
                "the {} suite does not run across hosts yet; the quick suite does",
                suite.name()
            ));
        }
    }
    Ok(())
}

/// The hosts of a run; dropping it cleans every one up.
struct Hosts {
    left: RemoteHost,
    right: RemoteHost,
    router: Option<RemoteHost>,
}

impl Hosts {
    fn all(&self) -> impl Iterator<Item = &RemoteHost> {
        [&self.left, &self.right].into_iter().chain(&self.router)
    }
}

/// The run's private directory for ssh control sockets, removed on drop.
struct ControlDir(PathBuf);

impl ControlDir {
    fn create() -> Result<Self, RemoteRunError> {
        use std::os::unix::fs::DirBuilderExt as _;
        // Short: a control socket's path must fit a Unix socket address.
        let path = std::env::temp_dir().join(format!("fjlab-{}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .map_err(|source| RemoteRunError::Local {
                operation: "creating the ssh control directory",
                path: path.clone(),
                source,
            })?;
        Ok(Self(path))
    }
}

impl Drop for ControlDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn set_up(
    inventory: &Inventory,
    role: Role,
    control: &Path,
    binary: &Path,
    check_tools: bool,
) -> Result<Option<RemoteHost>, RemoteError> {
    let Some(host) = inventory.host(role) else {
        return Ok(None);
    };
    let index = inventory
        .hosts
        .iter()
        .position(|other| other.name == host.name)
        .unwrap_or(0);
    let control_path = control.join(format!("c{index}"));
    let hint = format!(
        "fjord lab install-peers --hosts {}",
        inventory.path.display()
    );
    RemoteHost::set_up(
        host,
        &control_path,
        inventory.ssh_config.as_deref(),
        binary,
        check_tools.then_some(hint.as_str()),
    )
    .map(Some)
}

pub fn run(options: RemoteRunOptions) -> Result<RunSummary, RemoteRunError> {
    check_suites(&options.inventory, &options.suites).map_err(RemoteRunError::Refused)?;
    let interrupted = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal ends the process at once, as between namespaces.
        let registered =
            signal_hook::flag::register_conditional_shutdown(signal, 130, interrupted.clone())
                .and_then(|_| signal_hook::flag::register(signal, interrupted.clone()));
        registered.map_err(|source| RemoteRunError::Local {
            operation: "watching for Ctrl-C",
            path: PathBuf::new(),
            source,
        })?;
    }
    let local = |operation, path: &Path| {
        let path = path.to_path_buf();
        move |source| RemoteRunError::Local {
            operation,
            path,
            source,
        }
    };
    std::fs::create_dir_all(&options.out_dir).map_err(local("creating", &options.out_dir))?;
    let started = Instant::now();
    let started_at = rfc3339(SystemTime::now());
    let inventory = &options.inventory;
    let control = ControlDir::create()?;

    let (left, right, router) = (
        set_up(inventory, Role::Left, &control.0, &options.binary, true)?,
        set_up(inventory, Role::Right, &control.0, &options.binary, true)?,
        set_up(inventory, Role::Router, &control.0, &options.binary, true)?,
    );
    let (Some(left), Some(right)) = (left, right) else {
        return Err(RemoteRunError::Refused(
            "the inventory needs a left and a right host".into(),
        ));
    };
    let mut hosts = Hosts {
        left,
        right,
        router,
    };
    for host in hosts.all() {
        report_sweep(host);
        eprintln!(
            "host {}: ready in {:.2} s ({})",
            host.name(),
            host.setup_time.as_secs_f64(),
            host.binary()
        );
    }

    let mut host_facts: Vec<HostFacts> = Vec::new();
    for host in hosts.all() {
        let mut found = facts::gather(host)?;
        found.setup_secs = host.setup_time.as_secs_f64();
        host_facts.push(found);
    }
    let mut outcomes: BTreeMap<String, SystemOutcome> = BTreeMap::new();
    let mut runnable = Vec::new();
    for name in &options.systems {
        let Some(system) = RemoteSystem::named(name) else {
            outcomes.insert(
                name.clone(),
                outcome(
                    name,
                    SystemStatus::Skipped,
                    Some("not driven across hosts yet (bare and fjord are)".into()),
                    None,
                ),
            );
            continue;
        };
        let mut versions = Vec::new();
        for (host, facts) in [&hosts.left, &hosts.right].into_iter().zip(&mut host_facts) {
            let version = system.version(host)?;
            facts.systems.insert(name.clone(), version.clone());
            versions.push(version);
        }
        versions.dedup();
        outcomes.insert(
            name.clone(),
            outcome(name, SystemStatus::Ran, None, Some(versions.join(" / "))),
        );
        runnable.push(system);
    }

    let rounds = options.rounds.max(1);
    let total = options
        .suites
        .iter()
        .map(|suite| suite.steps(true) * runnable.len() as u64)
        .sum::<u64>()
        * u64::from(rounds);
    let progress = Progress::new(total).stop_on(interrupted.clone());
    let mut by_round: Vec<Vec<Measurement>> = Vec::new();
    'rounds: for round in 1..=rounds {
        if rounds > 1 {
            progress.line(&format!("round {round} of {rounds}"));
        }
        let mut measurements = Vec::new();
        for _suite in &options.suites {
            for system in &runnable {
                if interrupted.load(Ordering::Relaxed) {
                    progress.line("interrupted: cleaning up and writing what was measured");
                    by_round.push(measurements);
                    break 'rounds;
                }
                match run_one(*system, &mut hosts, inventory, &progress) {
                    Ok(rows) => measurements.extend(rows),
                    Err(error) if error.is_lost() => {
                        progress.finish();
                        return Err(error.into());
                    }
                    Err(error) => {
                        progress.line(&format!(
                            "{} could not run the quick suite: {error}",
                            system.name()
                        ));
                        progress.skip(Suite::Quick.steps(true));
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

    let teardown = Instant::now();
    let mut cleanup_error = None;
    for host in [&mut hosts.left, &mut hosts.right]
        .into_iter()
        .chain(hosts.router.as_mut())
    {
        if let Err(error) = host.clean_up() {
            cleanup_error.get_or_insert(error);
        }
    }
    eprintln!(
        "hosts cleaned up in {:.2} s",
        teardown.elapsed().as_secs_f64()
    );
    if let Some(error) = cleanup_error {
        return Err(error.into());
    }

    let mut record = RunRecord {
        schema_version: SCHEMA_VERSION,
        fjord_version: env!("CARGO_PKG_VERSION").to_string(),
        started_at,
        duration_secs: started.elapsed().as_secs_f64(),
        rounds,
        machine: crate::run::machine(),
        suites: options
            .suites
            .iter()
            .map(|suite| suite.name().to_string())
            .collect(),
        systems: options
            .systems
            .iter()
            .filter_map(|name| outcomes.remove(name))
            .collect(),
        measurements: crate::rounds::merge(by_round),
        hosts: host_facts,
    };
    record.compute_ratios();
    report::write_reports(&record, &options.out_dir)
        .map_err(local("writing results to", &options.out_dir))?;
    Ok(RunSummary {
        record,
        out_dir: options.out_dir,
        interrupted: interrupted.load(Ordering::Relaxed),
    })
}

/// Says what the sweep of earlier runs' leftovers did on `host`.
fn report_sweep(host: &RemoteHost) {
    for line in &host.swept {
        eprintln!("host {}: {line}", host.name());
    }
}

/// What `fjord lab install-peers` said on one host.
pub struct InstallReport {
    pub host: String,
    pub output: String,
    /// Set when it failed there.
    pub error: Option<RemoteError>,
}

/// Runs the lab's own install (`fjord lab install-peers`) on every host
/// of `inventory`, with the lab's `binary` brought there; a host that
/// cannot be reached fails before any is changed.
pub fn install_peers(
    inventory: &Inventory,
    binary: &Path,
    dry_run: bool,
) -> Result<Vec<InstallReport>, RemoteRunError> {
    let control = ControlDir::create()?;
    let mut hosts = Vec::new();
    for role in [Role::Left, Role::Right, Role::Router] {
        // Installing is what brings the tools: none is required yet.
        hosts.extend(set_up(inventory, role, &control.0, binary, false)?);
    }
    let mut reports = Vec::new();
    for host in &hosts {
        report_sweep(host);
        let mut words = vec![host.binary(), "lab", "install-peers"];
        if dry_run {
            words.push("--dry-run");
        }
        let (output, error) = match host.run(&words) {
            Ok(output) => (output, None),
            Err(error) => (String::new(), Some(error)),
        };
        reports.push(InstallReport {
            host: host.name().to_string(),
            output,
            error,
        });
    }
    Ok(reports)
}

/// The quick suite on `system` between the left and right hosts.
fn run_one(
    system: RemoteSystem,
    hosts: &mut Hosts,
    inventory: &Inventory,
    progress: &Progress,
) -> Result<Vec<Measurement>, RemoteError> {
    progress.line(&format!(
        "{}: bringing the tunnel up between {} and {}",
        system.name(),
        hosts.left.name(),
        hosts.right.name()
    ));
    let tunnel = system.start(&mut hosts.left, &mut hosts.right, &inventory.overlay)?;
    let rows = quick::run(&hosts.left, &hosts.right, &tunnel, system.name(), progress);
    let stopped = tunnel.stop(&hosts.left, &hosts.right);
    let rows = rows?;
    stopped?;
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
