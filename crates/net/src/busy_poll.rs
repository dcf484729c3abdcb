//! Brief busy polling after traffic, on a CPU budget.
//!
//! On a virtual machine most of a tunnel's added round trip is the cost of
//! waking a halted vCPU: measured here about 50 µs per wakeup, three per
//! ping through the tunnel, against a few µs of work. A reply usually comes
//! back within a round trip of the request, so after each burst of traffic
//! the worker keeps polling without sleeping for [`SPIN_WINDOW`]; the reply
//! then finds it awake. Spinning yields the CPU to every other runnable
//! task between polls, and its time is capped at [`SPIN_SHARE`] of wall time
//! so that steady moderate traffic cannot turn it into a busy loop.

use std::time::{Duration, Instant};

use crate::time_share::TimeShare;

/// How long after the last traffic the worker keeps polling: about one
/// tunnel round trip here.
pub const SPIN_WINDOW: Duration = Duration::from_micros(250);
/// Largest share of wall time spent spinning, over any stretch of time
/// longer than [`MAX_CREDIT`] allows to be saved up.
// One tenth: at one ping per millisecond a reply comes back about 75 µs
// after the request left, and the initiator's spin must last that long.
// A twentieth (50 µs per ms) ran out first, so each reply woke a halted
// vCPU: 0.135 ms round trips through fjord against 0.078 ms now (the
// lab's latency suite); spinning then costs about 3 % of a core per side.
pub const SPIN_SHARE: u32 = 10;
/// Spin time that idle periods can save up.
const MAX_CREDIT: Duration = Duration::from_millis(1);

/// Decides, before each wait for events, whether to sleep or to poll and
/// return at once.
#[derive(Debug)]
pub struct BusyPoll {
    window: Duration,
    last_traffic: Option<Instant>,
    spin_time: TimeShare,
}

impl BusyPoll {
    /// A zero window turns busy polling off.
    pub fn with_window(now: Instant, window: Duration) -> Self {
        Self {
            window,
            last_traffic: None,
            spin_time: TimeShare::new(now, SPIN_SHARE, MAX_CREDIT),
        }
    }

    /// Packets were read or written.
    pub fn traffic(&mut self, now: Instant) {
        self.last_traffic = Some(now);
    }

    /// Whether the next wait should return at once instead of sleeping.
    pub fn should_spin(&mut self, now: Instant) -> bool {
        self.spin_time.allows(now)
            && self
                .last_traffic
                .is_some_and(|last| now.saturating_duration_since(last) < self.window)
    }

    /// A poll that returned nothing took `spent`.
    pub fn spent(&mut self, spent: Duration) {
        self.spin_time.spent(spent);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(micros: u64) -> Duration {
        Duration::from_micros(micros)
    }

    #[test]
    fn spins_only_within_the_window_after_traffic() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        assert!(!busy.should_spin(start), "no traffic yet");
        busy.traffic(start);
        assert!(busy.should_spin(start + us(10)));
        assert!(busy.should_spin(start + SPIN_WINDOW - us(1)));
        assert!(!busy.should_spin(start + SPIN_WINDOW));
    }

    #[test]
    fn a_zero_window_never_spins() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, Duration::ZERO);
        busy.traffic(start);
        assert!(!busy.should_spin(start));
    }

    #[test]
    fn steady_traffic_spins_at_most_the_budgeted_share() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        // Traffic every 100 µs, and every empty poll takes 10 µs: without
        // the budget this would spin all the time.
        let mut spun = Duration::ZERO;
        let mut now = start;
        let end = start + Duration::from_secs(1);
        while now < end {
            if now.duration_since(start).as_micros().is_multiple_of(100) {
                busy.traffic(now);
            }
            if busy.should_spin(now) {
                busy.spent(us(10));
                spun += us(10);
            }
            now += us(10);
        }
        let limit = Duration::from_secs(1) / SPIN_SHARE + MAX_CREDIT + us(10);
        assert!(spun <= limit, "spun {spun:?}, limit {limit:?}");
        assert!(spun >= limit / 2, "spun only {spun:?}");
    }

    #[test]
    fn idle_time_restores_the_budget() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        busy.traffic(start);
        busy.spent(MAX_CREDIT);
        assert!(!busy.should_spin(start), "budget used up");
        let later = start + MAX_CREDIT * SPIN_SHARE;
        busy.traffic(later);
        assert!(busy.should_spin(later));
    }
}
