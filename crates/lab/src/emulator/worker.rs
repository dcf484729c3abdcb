//! The emulator's thread loop: drive one or two pumps until told to stop.
//!
//! Each round sends what is due, reads what is waiting (if a read is due),
//! sends again (a frame may be due at once), publishes counters every
//! [`PUBLISH_INTERVAL`], then sleeps in `ppoll` until the earliest of: the
//! next release, the next deferred read, an ingress becoming readable
//! (only watched when a read is due), or [`MAX_IDLE`] (to see the stop
//! flag).
//!
//! A thread wakes some time after its timer expires (scheduling latency,
//! 50–150 µs on these VMs). The loop measures that latency (a moving
//! average of its timed wakeups) and sets its timer that much ahead of the
//! next release plus the release slack; once awake it sends every frame due
//! within half the latency, since it could not wake again sooner. Frames
//! so leave within the slack plus about half a wakeup latency of their
//! release, instead of always a full latency late — without spinning.

use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fjord_sys::poll::wait_readable;
use fjord_sys::thread;

use super::pump::{Clock, Direction, Pump};
use super::{Shared, ThreadPriority};

/// Longest sleep, so a stop request is seen within this.
const MAX_IDLE: Duration = Duration::from_millis(10);

/// How often counters are published for [`super::RunningEmulator::stats`].
const PUBLISH_INTERVAL: Duration = Duration::from_millis(2);

/// Batches one read may take before the pump sends again.
const BATCHES_PER_READ: usize = 8;

/// Largest wakeup latency taken into account; longer ones (the thread
/// was descheduled) are not expected to recur.
const MAX_LEAD: Duration = Duration::from_micros(500);

/// Wakeups in a row on a readable ingress that yielded nothing, after
/// which the loop stops watching the ingress and polls it every
/// [`QUIET_POLL`] instead: a real-time thread must never spin.
const MAX_EMPTY_WAKEUPS: u32 = 16;
const QUIET_POLL: Duration = Duration::from_millis(1);

/// The kernel's timer slack for the worker threads (it ignores it for
/// real-time ones anyway).
const KERNEL_TIMER_SLACK: Duration = Duration::from_nanos(1);

/// Shortest timed sleep; keeps a deadline that has almost come from
/// turning the loop into a spin.
const MIN_SLEEP: Duration = Duration::from_micros(1);

/// How a worker thread sets itself up.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Tuning {
    pub(crate) release_slack: Duration,
    pub(crate) priority: ThreadPriority,
}

/// Runs `pumps` until `stop` is set. `worker` indexes this thread's CPU
/// time slot in `shared`.
pub(crate) fn run(
    mut pumps: Vec<Pump>,
    clock: Clock,
    stop: Arc<AtomicBool>,
    shared: Arc<Shared>,
    worker: usize,
    tuning: Tuning,
) -> io::Result<()> {
    // The loop applies the release slack itself; the kernel's own slack
    // (ordinary threads only) would come on top, unmeasured.
    if let Err(error) = thread::set_thread_timer_slack(KERNEL_TIMER_SLACK) {
        tracing::warn!(%error, "could not set the timer slack; releases may be later");
    }
    let prioritised = match tuning.priority {
        ThreadPriority::Inherit => Ok(()),
        ThreadPriority::Nice(nice) => thread::set_thread_nice(nice),
        ThreadPriority::Realtime(priority) => thread::set_thread_realtime(priority),
    };
    if let Err(error) = prioritised {
        tracing::warn!(%error, priority = ?tuning.priority, "could not raise the emulator's priority");
    }
    shared.register_thread();
    let result = drive(
        &mut pumps,
        &clock,
        &stop,
        &shared,
        worker,
        tuning.release_slack,
    );
    for pump in &mut pumps {
        pump.publish(shared.link_stats(pump.direction));
    }
    shared.record_cpu(worker);
    result
}

/// Moving average of how late timed wakeups come.
#[derive(Debug, Default)]
struct WakeupLatency {
    average: Duration,
}

impl WakeupLatency {
    fn observe(&mut self, latency: Duration) {
        // Weight 1/16: follows a change within a few dozen wakeups.
        self.average = (self.average * 15 + latency.min(MAX_LEAD)) / 16;
    }
}

fn drive(
    pumps: &mut [Pump],
    clock: &Clock,
    stop: &AtomicBool,
    shared: &Shared,
    worker: usize,
    release_slack: Duration,
) -> io::Result<()> {
    let mut last_publish = Duration::ZERO;
    let mut latency = WakeupLatency::default();
    let (mut woke_readable, mut empty_wakeups) = (false, 0u32);
    while !stop.load(Ordering::Acquire) {
        let now = clock.now();
        let horizon = now + latency.average / 2;
        for pump in pumps.iter_mut() {
            pump.send_due(now, horizon)?;
        }
        let mut read_any = false;
        for pump in pumps.iter_mut() {
            if pump.wants_read(now) {
                read_any |= pump.read(clock, BATCHES_PER_READ)? > 0;
            }
        }
        if read_any {
            empty_wakeups = 0;
        } else if woke_readable {
            empty_wakeups += 1;
            if empty_wakeups == MAX_EMPTY_WAKEUPS {
                tracing::warn!(
                    "ingress reports readable but yields no frames; polling it less often"
                );
            }
        }
        let now = clock.now();
        let horizon = now + latency.average / 2;
        for pump in pumps.iter_mut() {
            pump.send_due(now, horizon)?;
        }
        if now >= last_publish + PUBLISH_INTERVAL {
            for pump in pumps.iter_mut() {
                pump.publish(shared.link_stats(pump.direction));
            }
            shared.record_cpu(worker);
            last_publish = now;
        }
        let quiet = empty_wakeups >= MAX_EMPTY_WAKEUPS;
        woke_readable = sleep(pumps, clock, &mut latency, release_slack, quiet)?;
    }
    Ok(())
}

/// Sleeps until something is due (a release plus `release_slack`, less the
/// wakeup `latency`), watching the ingress of pumps whose read is due
/// unless `quiet`; learns the latency from timed wakeups. Returns whether
/// an ingress woke it.
fn sleep(
    pumps: &[Pump],
    clock: &Clock,
    latency: &mut WakeupLatency,
    release_slack: Duration,
    quiet: bool,
) -> io::Result<bool> {
    let now = clock.now();
    let mut wake = now + if quiet { QUIET_POLL } else { MAX_IDLE };
    let mut watched: [Option<BorrowedFd<'_>>; 2] = [None, None];
    for (pump, slot) in pumps.iter().zip(watched.iter_mut()) {
        if let Some(at) = pump.next_send() {
            wake = wake.min((at + release_slack).saturating_sub(latency.average));
        }
        if pump.wants_read(now) && !quiet {
            *slot = Some(pump.ingress().as_fd());
        } else if let Some(at) = pump.deferred_read(now) {
            wake = wake.min(at);
        }
    }
    let wake = wake.max(now + MIN_SLEEP);
    let timeout = Some(wake - now);
    let ready = match watched {
        [Some(a), Some(b)] => wait_readable([a, b], timeout)?
            .iter()
            .any(|fd| fd.is_ready()),
        [Some(fd), None] | [None, Some(fd)] => wait_readable([fd], timeout)?[0].is_ready(),
        [None, None] => {
            let [] = wait_readable([], timeout)?;
            false
        }
    };
    if !ready {
        latency.observe(clock.now().saturating_sub(wake));
    }
    Ok(ready)
}

impl Shared {
    fn link_stats(&self, direction: Direction) -> &std::sync::Mutex<super::LinkStats> {
        match direction {
            Direction::LeftToRight => &self.left_to_right,
            Direction::RightToLeft => &self.right_to_left,
        }
    }

    fn record_cpu(&self, worker: usize) {
        if let Some(slot) = self.cpu_nanos.get(worker) {
            let cpu = thread::thread_cpu_time();
            slot.store(
                u64::try_from(cpu.as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
        }
    }

    /// Records this thread's ID (from `/proc/thread-self`) so callers can
    /// check that it is gone after stop.
    fn register_thread(&self) {
        let id = std::fs::read_link("/proc/thread-self")
            .ok()
            .and_then(|path| path.file_name()?.to_str()?.parse::<u32>().ok());
        if let (Some(id), Ok(mut ids)) = (id, self.thread_ids.lock()) {
            ids.push(id);
        }
    }
}
