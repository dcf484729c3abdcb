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
//!
//! A burst spins if it came after [`QUIET_BEFORE_SPIN`] of silence (a
//! wakeup after a long sleep is the dear one) or once it has lasted
//! [`SUSTAINED_BURST`] (a stream, whose packets keep coming): short bursts
//! that recur within a couple of milliseconds, such as pings every 1 ms,
//! gained nothing from spinning here and paid for it in CPU.

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
/// The silence before a burst for that burst to spin.
// Pings through fjord in the lab (quick latency suite, medians of 6 runs,
// spinning after every burst against `--no-busy-poll`): every 10 and
// 200 ms spinning saved 21-49 µs a round trip (0.221 against 0.270 ms,
// 0.231 against 0.252 ms); every 1 ms it saved nothing (0.142 against
// 0.133 ms, within the runs' spread) and took the two tunnel ends from
// 12 % to 21-24 % of a core. With this gate (and [`SUSTAINED_BURST`])
// a 1 ms pace costs 14 %, its round trips 0.138 ms (0.140 spinning).
pub const QUIET_BEFORE_SPIN: Duration = Duration::from_millis(2);
/// How long a burst lasts before it spins whatever came before it.
// Without it a stream that paused once (a hiccup of the sender or of the
// scheduler on a busy machine) slept between its packets from then on:
// the quick suite's 1,518-byte zero-loss rate fell from 39.6k to 32.9k
// frames/s (medians of 4 runs).
pub const SUSTAINED_BURST: Duration = Duration::from_millis(1);

/// Decides, before each wait for events, whether to sleep or to poll and
/// return at once.
#[derive(Debug)]
pub struct BusyPoll {
    window: Duration,
    last_traffic: Option<Instant>,
    /// When the burst in progress started.
    burst_started: Option<Instant>,
    /// Whether the burst in progress came after [`QUIET_BEFORE_SPIN`] of
    /// silence.
    burst_after_quiet: bool,
    spin_time: TimeShare,
}

impl BusyPoll {
    /// A zero window turns busy polling off.
    pub fn with_window(now: Instant, window: Duration) -> Self {
        Self {
            window,
            last_traffic: None,
            burst_started: None,
            burst_after_quiet: false,
            spin_time: TimeShare::new(now, SPIN_SHARE, MAX_CREDIT),
        }
    }

    /// Packets were read or written. Traffic after the window has run out
    /// starts a new burst.
    pub fn traffic(&mut self, now: Instant) {
        let silence = self
            .last_traffic
            .map(|last| now.saturating_duration_since(last));
        if silence.is_none_or(|silence| silence >= self.window) {
            self.burst_started = Some(now);
            self.burst_after_quiet = silence.is_none_or(|silence| silence >= QUIET_BEFORE_SPIN);
        }
        self.last_traffic = Some(now);
    }

    /// Whether the next wait should return at once instead of sleeping.
    pub fn should_spin(&mut self, now: Instant) -> bool {
        let sustained = self
            .burst_started
            .is_some_and(|started| now.saturating_duration_since(started) >= SUSTAINED_BURST);
        (self.burst_after_quiet || sustained)
            && self.spin_time.allows(now)
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
    fn a_burst_soon_after_the_last_sleeps_between_its_packets() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        busy.traffic(start);
        // One ping a millisecond: each request comes well after the last
        // reply's window, but long before a vCPU becomes dear to wake.
        let next = start + Duration::from_millis(1);
        busy.traffic(next);
        assert!(!busy.should_spin(next + us(10)));
        let reply = next + us(150);
        busy.traffic(reply);
        assert!(!busy.should_spin(reply + us(10)), "the same burst");
    }

    #[test]
    fn a_burst_after_quiet_spins_until_its_last_packet_is_a_window_old() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        busy.traffic(start);
        let request = start + QUIET_BEFORE_SPIN;
        busy.traffic(request);
        assert!(busy.should_spin(request + us(100)), "awaiting the reply");
        let reply = request + us(150);
        busy.traffic(reply);
        assert!(busy.should_spin(reply + SPIN_WINDOW - us(1)));
        assert!(!busy.should_spin(reply + SPIN_WINDOW));
    }

    #[test]
    fn a_stream_spins_again_once_it_has_lasted() {
        let start = Instant::now();
        let mut busy = BusyPoll::with_window(start, SPIN_WINDOW);
        busy.traffic(start);
        // A pause that ends the window, too short to count as quiet.
        let resumed = start + Duration::from_millis(1);
        let mut now = resumed;
        while now < resumed + SUSTAINED_BURST {
            busy.traffic(now);
            assert!(!busy.should_spin(now + us(5)), "a short burst");
            now += us(20);
        }
        busy.traffic(now);
        assert!(busy.should_spin(now + us(5)), "a stream");
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
