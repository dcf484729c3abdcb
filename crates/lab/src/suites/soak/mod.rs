//! `soak`: issue 15's soak. An hour (5 minutes with `--quick`; any length
//! with `fjord lab run --soak-minutes N`) of four-stream TCP through the
//! tunnel at full speed, digest-checked transfer after transfer, while the
//! tunnel rekeys again and again and one side restarts every ten minutes.
//!
//! For a WireGuard implementation both hosts run it ([`Pair`]), each
//! knowing the other's endpoint, so a restarted side can speak first.
//! fjord rekeys every 30 s (`--test-rekey-divisor 4`, which shortens the
//! rekey cycle only; more often in a run under 5 minutes, so it still
//! sees ten); the others keep WireGuard's 120 s. At every sixth of the
//! run (every 10 minutes of the hour, at most) the right side, where the
//! transfers arrive, is stopped and started again with the same keys,
//! a second after a transfer started.
//!
//! What the rows give, per system:
//! - `rss_under_load`: per tenth of the run and per side, the median and
//!   the peak of the side's resident size (sampled four times a second)
//!   and the TCP throughput carried.
//! - `rss_growth`: per side, from the peak of its first minute to the
//!   last tenth's peak; the left side over the whole run, the restarted
//!   side from its latest start. Issue 15's target: under 5 %.
//! - `soak_transfers`: transfers, digest mismatches (must be 0) and
//!   failures. A failed transfer is followed by the next one, its retry;
//!   the note says whether it straddled a restart.
//! - `soak_restarts`: from starting the restarted side to the first
//!   ping through the tunnel, under the load.
//! - `soak_rekeys`: handshakes by the two sides' own counts of
//!   initiations computed, less one per restart (fjord only).
//! - `counter_balance`: per direction, bytes one side sent against bytes
//!   the other received, between readings taken with the load held at
//!   every checkpoint and around every restart, and the drops that must
//!   explain the difference ([`counters`]); a side's counters must never
//!   go down within one of its lives.
//!
//! Other systems with tunnel processes get the load and the memory rows
//! of both ends together: no restarts, rekeys or counters. The bare link
//! has no tunnel processes, so nothing to measure.
//!
//! Four streams at full speed take both cores of a small machine for the
//! whole run: every wait is generous ([`load`]), and each checkpoint and
//! restart prints a line, so a slow run shows where it is.

mod counters;
mod load;
mod memory;
mod rows;

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fjord_proto::timers::REKEY_AFTER_TIME;

use super::Setup;
use crate::measure::Row;
use crate::progress::Progress;
use crate::results::Measurement;
use crate::systems::RunningSystem;
use crate::systems::wireguard::{End, Initiator, Pair};
use crate::topology::{RIGHT_OVERLAY, TwoHosts};
use crate::traffic;
use counters::{Ledger, read_quiet};
use load::{Load, Transfer};
use memory::Sampler;

pub use load::STREAMS;

/// Checkpoints per run: rows of the memory table, steps of the progress bar.
pub const CHECKPOINTS: u32 = 10;
const FULL: Duration = Duration::from_secs(60 * 60);
const QUICK: Duration = Duration::from_secs(5 * 60);
const RESTART_INTERVAL: Duration = Duration::from_secs(10 * 60);
const REKEY_INTERVAL: Duration = Duration::from_secs(30);
const WARM_UP: Duration = Duration::from_secs(60);
const TRANSFER_BYTES: u64 = 256 << 20;
/// How long the tunnel may take to carry a ping at the start, and after
/// a restart (under full load on a busy machine).
const PING_LIMIT: Duration = Duration::from_secs(60);
/// How long after the load resumes a restart comes, so that it lands in
/// the middle of a transfer.
const INTO_TRANSFER: Duration = Duration::from_secs(1);
/// The longest a wait sleeps before it looks at Ctrl-C again.
const WAKE_INTERVAL: Duration = Duration::from_secs(1);

/// `--soak-minutes` given to the running `fjord lab`.
static DURATION: OnceLock<Duration> = OnceLock::new();

/// Makes the soak of this run last `duration` (quick or not).
pub fn use_duration(duration: Duration) {
    let _ = DURATION.set(duration);
}

/// How a soak runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub duration: Duration,
    /// A restart of the right side every this long (WireGuard only).
    pub restart_every: Duration,
    /// How often fjord rekeys (through `--test-rekey-divisor`).
    pub rekey_every: Duration,
    /// The first part of a side's life, whose peak memory growth is
    /// measured from.
    pub warm_up: Duration,
    /// Bytes of one transfer, over [`STREAMS`] streams.
    pub transfer_bytes: u64,
}

impl Plan {
    /// The plan for a run of `duration`: five restarts at most 10 minutes
    /// apart, ten rekeys at least, a warm-up of a tenth up to a minute.
    pub fn new(duration: Duration) -> Self {
        Self {
            duration,
            restart_every: RESTART_INTERVAL.min(duration / 6),
            rekey_every: REKEY_INTERVAL.min(duration / 10),
            warm_up: WARM_UP.min(duration / CHECKPOINTS),
            transfer_bytes: TRANSFER_BYTES,
        }
    }

    /// An hour, 5 minutes if `quick`, or what `--soak-minutes` said.
    pub fn standard(quick: bool) -> Self {
        let duration = DURATION
            .get()
            .copied()
            .unwrap_or(if quick { QUICK } else { FULL });
        Self::new(duration)
    }

    /// fjord's `--test-rekey-divisor` for [`Plan::rekey_every`].
    pub fn rekey_divisor(&self) -> u32 {
        let ratio = REKEY_AFTER_TIME.as_secs_f64() / self.rekey_every.as_secs_f64().max(1e-3);
        ratio.round().max(1.0) as u32
    }

    /// When the restarts come, from the start.
    fn restarts(&self) -> VecDeque<Duration> {
        if self.restart_every.is_zero() {
            return VecDeque::new();
        }
        (1..)
            .map(|n| self.restart_every * n)
            .take_while(|at| *at < self.duration)
            .collect()
    }
}

/// Runs the soak for `system` as the standard plan says, on hosts it
/// builds itself.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    run_plan(setup, &Plan::standard(quick))
}

/// Runs the soak for `system` as `plan` says.
pub fn run_plan(setup: &Setup<'_>, plan: &Plan) -> Vec<Measurement> {
    let name = setup.name();
    let failed = |why: String| {
        setup.give_up(&format!("soak: {why}"), u64::from(CHECKPOINTS));
        vec![Row::new("soak", "soak_transfers", name, "transfers").failed(why)]
    };
    let hosts = match TwoHosts::direct() {
        Ok(hosts) => hosts,
        Err(error) => return failed(format!("building the hosts: {error}")),
    };
    let Ok(implementation) = setup.system.wireguard() else {
        let running = match setup.start(&hosts) {
            Ok(running) => running,
            Err(error) => return failed(error.to_string()),
        };
        if running.pids().is_empty() {
            setup.give_up(
                "soak: no tunnel processes, so no memory to measure",
                u64::from(CHECKPOINTS),
            );
            return Vec::new();
        }
        return soak(
            name,
            &mut Tunnel::Other(running),
            &hosts,
            plan,
            setup.progress,
        );
    };
    let faster = implementation.with_fast_rekeys(plan.rekey_divisor());
    let (rekey_every, rekeys) = match &faster {
        Some(_) => {
            let every = REKEY_AFTER_TIME / plan.rekey_divisor();
            (every, format!("rekeys every {:.1} s", every.as_secs_f64()))
        }
        None => (
            REKEY_AFTER_TIME,
            format!("rekeys on WireGuard's own {} s", REKEY_AFTER_TIME.as_secs()),
        ),
    };
    let implementation = faster.as_deref().unwrap_or(implementation);
    let pair = match Pair::start(implementation, &hosts, Initiator::Both, setup.workdir) {
        Ok(pair) => pair,
        Err(why) => return failed(why),
    };
    if let Err(error) = traffic::wait_for_ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), PING_LIMIT) {
        return failed(format!("no ping through the tunnel: {error}"));
    }
    setup.say(&format!(
        "soak: {:.1} min, {rekeys}, the right side restarted every {:.1} min",
        plan.duration.as_secs_f64() / 60.0,
        plan.restart_every.as_secs_f64() / 60.0
    ));
    let mut tunnel = Tunnel::WireGuard {
        pair: Box::new(pair),
        rekey_every,
    };
    soak(name, &mut tunnel, &hosts, plan, setup.progress)
}

/// The tunnel under soak.
enum Tunnel<'a> {
    /// Restarted, rekeyed and counted.
    WireGuard {
        pair: Box<Pair<'a>>,
        rekey_every: Duration,
    },
    /// Memory and transfers only.
    Other(Box<dyn RunningSystem>),
}

/// A group of processes whose memory is one row per tenth.
pub struct Group {
    pub label: &'static str,
    pub restarted: bool,
}

/// The memory group of the restarted side.
const RESTARTED_GROUP: usize = 1;

impl Tunnel<'_> {
    fn groups(&self) -> Vec<(Group, Vec<u32>)> {
        match self {
            Tunnel::WireGuard { pair, .. } => vec![
                (
                    Group {
                        label: "left",
                        restarted: false,
                    },
                    pair.pids(End::Left),
                ),
                (
                    Group {
                        label: "right (restarted)",
                        restarted: true,
                    },
                    pair.pids(End::Right),
                ),
            ],
            Tunnel::Other(running) => vec![(
                Group {
                    label: "both ends",
                    restarted: false,
                },
                running.pids(),
            )],
        }
    }

    fn sink(&self) -> IpAddr {
        match self {
            Tunnel::WireGuard { .. } => IpAddr::V4(RIGHT_OVERLAY),
            Tunnel::Other(running) => running.right_address(),
        }
    }
}

/// One restart of the right side.
pub struct Restart {
    /// When the side was stopped.
    pub stopped: Instant,
    /// Whether a transfer was under way then.
    pub under_load: bool,
    /// From starting the side again to the first ping through the tunnel.
    pub back: Result<Duration, String>,
    /// When the tunnel carried a ping again (or the wait gave up).
    pub settled: Instant,
}

/// What a soak saw.
pub struct Record {
    pub start: Instant,
    /// The end of each tenth reached.
    pub checkpoints: Vec<Instant>,
    pub restarts: Vec<Restart>,
    pub transfers: Vec<Transfer>,
    /// Counter readings (WireGuard only).
    pub ledger: Option<Ledger>,
    pub rekey_every: Option<Duration>,
    /// Readings that failed, with why.
    pub reading_errors: Vec<String>,
    /// Why the soak ended early, if it did.
    pub broken: Option<String>,
}

/// Holds the load and ends the helper threads however the soak ends, so
/// the thread scope never waits on them.
struct Stopper<'a> {
    load: &'a Load,
    sampler: &'a Sampler,
}

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        self.load.stop();
        self.sampler.stop();
    }
}

fn soak(
    name: &str,
    tunnel: &mut Tunnel<'_>,
    hosts: &TwoHosts,
    plan: &Plan,
    progress: &Progress,
) -> Vec<Measurement> {
    let (groups, pids): (Vec<Group>, Vec<Vec<u32>>) = tunnel.groups().into_iter().unzip();
    let sampler = Sampler::new(pids);
    let load = Load::held();
    let sink = tunnel.sink();
    let mut rows = Vec::new();
    let record = std::thread::scope(|scope| {
        let _stopper = Stopper {
            load: &load,
            sampler: &sampler,
        };
        scope.spawn(|| sampler.run());
        scope.spawn(|| load.run(&hosts.left, &hosts.right, sink, plan.transfer_bytes));
        let mut driver = Driver {
            name,
            plan,
            progress,
            load: &load,
            sampler: &sampler,
            lives: [0; 2],
            record: Record {
                start: Instant::now(),
                checkpoints: Vec::new(),
                restarts: Vec::new(),
                transfers: Vec::new(),
                ledger: None,
                rekey_every: None,
                reading_errors: Vec::new(),
                broken: None,
            },
        };
        driver.drive(tunnel, &groups, &mut rows);
        driver.record
    });
    let soaked = rows::Soaked {
        name,
        plan,
        groups: &groups,
        sampler: &sampler,
        record: &record,
    };
    rows.extend(soaked.summary());
    rows
}

/// The soak's schedule: restarts and checkpoints, while the load runs.
struct Driver<'a> {
    name: &'a str,
    plan: &'a Plan,
    progress: &'a Progress,
    load: &'a Load,
    sampler: &'a Sampler,
    /// Restarts of each side so far.
    lives: [u32; 2],
    record: Record,
}

impl Driver<'_> {
    fn drive(&mut self, tunnel: &mut Tunnel<'_>, groups: &[Group], rows: &mut Vec<Measurement>) {
        if let Tunnel::WireGuard { rekey_every, .. } = tunnel {
            self.record.ledger = Some(Ledger::default());
            self.record.rekey_every = Some(*rekey_every);
        }
        if let Tunnel::WireGuard { pair, .. } = tunnel {
            self.read_counters(pair);
        }
        self.record.start = Instant::now();
        self.load.release();
        let start = self.record.start;
        let tenth = self.plan.duration / CHECKPOINTS;
        let mut restarts = match tunnel {
            Tunnel::WireGuard { .. } => self.plan.restarts(),
            Tunnel::Other(_) => VecDeque::new(),
        };
        'checkpoints: for checkpoint in 1..=CHECKPOINTS {
            if self.progress.stopping() || self.record.broken.is_some() {
                break;
            }
            let end = start + tenth * checkpoint;
            self.progress.step(&format!(
                "{}: soak: {STREAMS} TCP streams, tenth {checkpoint} of {:.1} min",
                self.name,
                self.plan.duration.as_secs_f64() / 60.0
            ));
            while let Some(&due) = restarts.front()
                && start + due < end
            {
                restarts.pop_front();
                if !self.sleep_until(start + due) {
                    break 'checkpoints;
                }
                if let Tunnel::WireGuard { pair, .. } = tunnel {
                    self.restart(pair);
                }
                if self.record.broken.is_some() {
                    break 'checkpoints;
                }
            }
            if !self.sleep_until(end) {
                break;
            }
            self.load.hold();
            if let Tunnel::WireGuard { pair, .. } = tunnel {
                self.read_counters(pair);
            }
            self.record.transfers = self.load.transfers();
            if checkpoint < CHECKPOINTS {
                self.load.release();
            }
            let now = Instant::now();
            self.record.checkpoints.push(now);
            let soaked = rows::Soaked {
                name: self.name,
                plan: self.plan,
                groups,
                sampler: self.sampler,
                record: &self.record,
            };
            let tenth_rows = soaked.tenth();
            self.progress.line(&rows::checkpoint_line(
                self.name,
                &tenth_rows,
                &self.record,
                self.plan,
            ));
            rows.extend(tenth_rows);
            self.progress.done();
        }
        // Let the transfer under way finish, so that it is counted too.
        self.load.hold();
        self.record.transfers = self.load.transfers();
    }

    /// Sleeps until `deadline`; `false` if the run is asked to stop.
    fn sleep_until(&self, deadline: Instant) -> bool {
        loop {
            if self.progress.stopping() {
                return false;
            }
            let Some(left) = deadline.checked_duration_since(Instant::now()) else {
                return true;
            };
            std::thread::sleep(left.min(WAKE_INTERVAL));
        }
    }

    /// Reads both sides' counters (the caller holds the load).
    fn read_counters(&mut self, pair: &Pair<'_>) {
        let Some(ledger) = self.record.ledger.as_mut() else {
            return;
        };
        match read_quiet(pair, self.lives) {
            Ok(reading) => ledger.readings.push(reading),
            Err(why) => {
                let minutes = self.record.start.elapsed().as_secs_f64() / 60.0;
                self.record
                    .reading_errors
                    .push(format!("{minutes:.1} min: {why}"));
            }
        }
    }

    /// Stops the right side in the middle of a transfer and starts it
    /// again, with counter readings (the load held) just before and once
    /// the tunnel carries a ping again.
    fn restart(&mut self, pair: &mut Pair<'_>) {
        self.load.hold();
        self.read_counters(pair);
        self.load.release();
        std::thread::sleep(INTO_TRANSFER);
        let under_load = self.load.running();
        let stopped = Instant::now();
        let restarted = pair.restart(End::Right);
        self.lives[1] += 1;
        self.sampler
            .set_pids(RESTARTED_GROUP, pair.pids(End::Right));
        let back = restarted.and_then(|started| {
            traffic::wait_for_ping(
                pair.namespace(End::Left),
                IpAddr::V4(RIGHT_OVERLAY),
                PING_LIMIT,
            )
            .map(|_| started.elapsed())
            .map_err(|error| format!("no ping through the tunnel after the restart: {error}"))
        });
        let minutes = stopped
            .saturating_duration_since(self.record.start)
            .as_secs_f64()
            / 60.0;
        let when = if under_load {
            "a transfer under way"
        } else {
            "between transfers"
        };
        match &back {
            Ok(after) => {
                self.progress.line(&format!(
                    "{}: soak: {minutes:.1} min: right side restarted ({when}); a ping through the tunnel {:.2} s after its start",
                    self.name,
                    after.as_secs_f64()
                ));
                self.load.hold();
                self.read_counters(pair);
                self.load.release();
            }
            Err(why) => {
                self.progress
                    .line(&format!("{}: soak: {minutes:.1} min: {why}", self.name));
                self.record.broken = Some(format!("the restart at {minutes:.1} min: {why}"));
            }
        }
        self.record.restarts.push(Restart {
            stopped,
            under_load,
            back,
            settled: Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_hour_restarts_every_ten_minutes_and_rekeys_every_thirty_seconds() {
        let plan = Plan::new(FULL);
        assert_eq!(plan.restart_every, Duration::from_secs(600));
        let restarts: Vec<u64> = plan.restarts().iter().map(|at| at.as_secs() / 60).collect();
        assert_eq!(restarts, [10, 20, 30, 40, 50]);
        assert_eq!(plan.rekey_divisor(), 4);
        assert_eq!(plan.warm_up, Duration::from_secs(60));
        assert_eq!(plan.duration / CHECKPOINTS, Duration::from_secs(360));
    }

    #[test]
    fn shorter_runs_still_restart_five_times_and_rekey_ten() {
        let quick = Plan::new(QUICK);
        assert_eq!(quick.restarts().len(), 5);
        assert_eq!(quick.restart_every, Duration::from_secs(50));
        assert_eq!(quick.rekey_divisor(), 4);
        assert_eq!(quick.warm_up, Duration::from_secs(30));
        let tiny = Plan::new(Duration::from_secs(30));
        assert_eq!(tiny.restarts().len(), 5);
        assert_eq!(tiny.rekey_divisor(), 40);
        let long = Plan::new(Duration::from_secs(2 * 60 * 60));
        assert_eq!(long.restarts().len(), 11);
    }
}
