//! A share of the worker's time for one kind of work: credit that grows
//! with wall time at `1 / share` of it, up to a small saved amount, and
//! shrinks by what the work took (wall or CPU time, as the caller
//! measures it). Busy polling (`busy_poll.rs`) spends at most a tenth
//! of the time spinning; the interface's socket under a handshake flood
//! takes at most an eighth of a core (worker.rs).

use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct TimeShare {
    /// The work's share of time: one `share`th.
    share: u32,
    /// Time that idle periods can save up.
    max_credit: Duration,
    /// Time still allowed, in nanoseconds; negative after work that took
    /// longer than what was left, so that the debt is paid first.
    credit_nanos: i64,
    credit_at: Instant,
}

impl TimeShare {
    /// One `share`th of the time, with `max_credit` saved up to start with.
    pub fn new(now: Instant, share: u32, max_credit: Duration) -> Self {
        Self {
            share: share.max(1),
            max_credit,
            credit_nanos: nanos(max_credit),
            credit_at: now,
        }
    }

    /// Whether the work may run now.
    pub fn allows(&mut self, now: Instant) -> bool {
        self.refill(now);
        self.credit_nanos > 0
    }

    /// The work took `spent`.
    pub fn spent(&mut self, spent: Duration) {
        self.credit_nanos = self.credit_nanos.saturating_sub(nanos(spent));
    }

    /// When the work may run again: `now` if it may now, else once the
    /// debt is paid.
    pub fn allows_at(&mut self, now: Instant) -> Instant {
        self.refill(now);
        if self.credit_nanos > 0 {
            return now;
        }
        let debt = self.credit_nanos.unsigned_abs();
        // One more nanosecond of credit, so that the credit is positive.
        now + Duration::from_nanos(debt.saturating_add(1)) * self.share
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.credit_at);
        self.credit_at = now;
        self.credit_nanos = self
            .credit_nanos
            .saturating_add(nanos(elapsed / self.share))
            .min(nanos(self.max_credit));
    }
}

fn nanos(duration: Duration) -> i64 {
    i64::try_from(duration.as_nanos()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(micros: u64) -> Duration {
        Duration::from_micros(micros)
    }

    /// Work that always wants to run, 50 µs at a time, gets its share of
    /// a second (and what it saved up at the start), no more.
    #[test]
    fn greedy_work_gets_its_share() {
        let start = Instant::now();
        let mut share = TimeShare::new(start, 8, Duration::from_millis(1));
        let mut worked = Duration::ZERO;
        let mut now = start;
        while now < start + Duration::from_secs(1) {
            if share.allows(now) {
                share.spent(us(50));
                worked += us(50);
                now += us(50);
            } else {
                now = share.allows_at(now);
            }
        }
        let most = Duration::from_secs(1) / 8 + Duration::from_millis(1) + us(50);
        assert!(worked <= most, "{worked:?}");
        assert!(worked >= Duration::from_secs(1) / 8, "{worked:?}");
    }

    #[test]
    fn a_debt_is_paid_before_the_work_runs_again() {
        let start = Instant::now();
        let mut share = TimeShare::new(start, 4, us(10));
        assert!(share.allows(start));
        share.spent(us(110));
        assert!(!share.allows(start));
        let next = share.allows_at(start);
        assert_eq!(next, start + us(100) * 4 + Duration::from_nanos(4));
        assert!(!share.allows(next - us(1)));
        assert!(share.allows(next));
        assert_eq!(share.allows_at(next), next);
    }
}
