//! What a device does under a handshake flood, decided without I/O.
//!
//! WireGuard's defence is the cookie: above
//! [`UNDER_LOAD_HANDSHAKES_PER_SECOND`] handshake messages a second
//! ([`LoadMeter`]), a handshake without a valid mac2 gets a cookie reply
//! instead of Diffie–Hellman work. A reply is cheap, not free: a MAC, an
//! XChaCha20-Poly1305 seal, randomness and a datagram to send. Against
//! hundreds of thousands of spoofed initiations a second, answering each
//! one took half of fjord's worker, and the tunnels it carries starved.
//!
//! The protocol lets a responder stay silent (the initiator retries), so
//! replies have a budget ([`CookieReplyBudget`]):
//!
//! ```text
//! handshake, under load, no valid mac2
//!   ─ within COOKIE_REPLIES_PER_SECOND (any source)?            ─▶ reply
//!   ─ else from the address of a peer's endpoint, within
//!     PEER_COOKIE_REPLIES_PER_SECOND?                             ─▶ reply
//!   ─ else                                                        ─▶ no reply (counted)
//! ```
//!
//! The second budget is for a configured peer coming back (restarted, or
//! rekeying) while the flood goes on: spoofed sources spend the first
//! budget within milliseconds of each second, but a peer's address is
//! known, so its initiation is still answered, once, and it is back one
//! round trip later. The addresses are a snapshot of the peers' endpoints,
//! taken at most once a second and only while the first budget is spent,
//! so the common path costs no lookup and a flood costs one hash lookup
//! per unanswered handshake. A flood that spoofs a peer's own address can
//! spend the second budget too; it then gets at most that many replies,
//! and established sessions are not affected either way.
//!
//! Both budgets are rate limits with a small burst (a generic cell rate
//! algorithm: one "theoretical arrival time" per limit), so replies are
//! spread over the second instead of spent at its start.

use std::collections::HashSet;
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// Handshake messages per second above which mac2 (a cookie) is required.
pub const UNDER_LOAD_HANDSHAKES_PER_SECOND: u32 = 512;
/// Cookie replies a second to any source. Profiled at about 7 µs each,
/// most of it the kernel's output path (`docs/design.md`), so a flood
/// costs at most about 6 % of a core in replies; more would buy a spoofed
/// source nothing, and a real new initiator retries.
pub const COOKIE_REPLIES_PER_SECOND: u32 = 8_192;
/// Cookie replies a second, past the first budget, to sources at the
/// address of a peer's endpoint.
pub const PEER_COOKIE_REPLIES_PER_SECOND: u32 = 1_024;
/// How long a snapshot of the peers' endpoint addresses is used.
const PEER_ADDRESSES_REFRESH: Duration = Duration::from_secs(1);

/// Counts handshake messages per second to decide when to demand cookies.
#[derive(Debug, Default)]
pub(crate) struct LoadMeter {
    window_start: Option<Instant>,
    in_window: u32,
    previous_window: u32,
    pub(crate) forced: bool,
}

impl LoadMeter {
    /// Counts one handshake message; whether the device is under load.
    pub(crate) fn record(&mut self, now: Instant) -> bool {
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < Duration::from_secs(1) => {}
            start => {
                // Only the window that just ended speaks for the current
                // load: a burst from long ago must not demand cookies now.
                let just_ended = start.is_some_and(|start| {
                    now.saturating_duration_since(start) < Duration::from_secs(2)
                });
                self.previous_window = if just_ended { self.in_window } else { 0 };
                self.in_window = 0;
                self.window_start = Some(now);
            }
        }
        self.in_window = self.in_window.saturating_add(1);
        self.forced || self.in_window.max(self.previous_window) > UNDER_LOAD_HANDSHAKES_PER_SECOND
    }

    /// Whether the device is under load at `now`, counting nothing: what
    /// [`LoadMeter::record`] would say of the windows so far.
    pub(crate) fn is_loaded(&self, now: Instant) -> bool {
        let Some(start) = self.window_start else {
            return self.forced;
        };
        let counted = match now.saturating_duration_since(start) {
            age if age < Duration::from_secs(1) => self.in_window.max(self.previous_window),
            // The window has ended; the next record makes it the last one.
            age if age < Duration::from_secs(2) => self.in_window,
            _ => 0,
        };
        self.forced || counted > UNDER_LOAD_HANDSHAKES_PER_SECOND
    }
}

/// At most `burst` events at once, and one per `interval` after that.
#[derive(Debug)]
struct RateLimit {
    interval: Duration,
    /// How far ahead of `now` the next free moment may run: `burst - 1`
    /// intervals.
    tolerance: Duration,
    /// When the next event would be on time if they all came evenly.
    next_free: Option<Instant>,
}

impl RateLimit {
    fn new(per_second: u32, burst: u32) -> Self {
        let interval = Duration::from_secs(1) / per_second.max(1);
        Self {
            interval,
            tolerance: interval * burst.max(1).saturating_sub(1),
            next_free: None,
        }
    }

    fn allow(&mut self, now: Instant) -> bool {
        let next_free = self.next_free.map_or(now, |next| next.max(now));
        if next_free.saturating_duration_since(now) > self.tolerance {
            return false;
        }
        self.next_free = Some(next_free + self.interval);
        true
    }
}

/// Decides which handshakes that need a cookie get a reply.
#[derive(Debug)]
pub(crate) struct CookieReplyBudget {
    any_source: RateLimit,
    peer_sources: RateLimit,
    /// The peers' endpoint addresses and when they were taken.
    peer_addresses: HashSet<IpAddr>,
    taken: Option<Instant>,
}

impl Default for CookieReplyBudget {
    fn default() -> Self {
        Self {
            // A tenth of a second's worth at once.
            any_source: RateLimit::new(COOKIE_REPLIES_PER_SECOND, COOKIE_REPLIES_PER_SECOND / 10),
            peer_sources: RateLimit::new(
                PEER_COOKIE_REPLIES_PER_SECOND,
                PEER_COOKIE_REPLIES_PER_SECOND / 10,
            ),
            peer_addresses: HashSet::new(),
            taken: None,
        }
    }
}

impl CookieReplyBudget {
    /// Whether a handshake from `source` gets a cookie reply now.
    /// `peer_addresses` lists the peers' endpoint addresses; it is called
    /// only when the snapshot is due, at most once a second.
    pub(crate) fn allow<I>(
        &mut self,
        now: Instant,
        source: IpAddr,
        peer_addresses: impl FnOnce() -> I,
    ) -> bool
    where
        I: IntoIterator<Item = IpAddr>,
    {
        if self.any_source.allow(now) {
            return true;
        }
        let stale = self
            .taken
            .is_none_or(|taken| now.saturating_duration_since(taken) >= PEER_ADDRESSES_REFRESH);
        if stale {
            self.peer_addresses.clear();
            self.peer_addresses.extend(peer_addresses());
            self.taken = Some(now);
        }
        self.peer_addresses.contains(&source) && self.peer_sources.allow(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn micros(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    fn spoofed(n: u32) -> IpAddr {
        IpAddr::V4(Ipv4Addr::from(0xc612_8000 | (n & 0x7fff)))
    }

    const PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));

    #[test]
    fn a_rate_limit_allows_its_burst_then_its_rate() {
        let start = Instant::now();
        let mut limit = RateLimit::new(1_000, 10);
        assert_eq!((0..100).filter(|_| limit.allow(start)).count(), 10);
        // One more each millisecond, none in between.
        assert!(!limit.allow(start + micros(500)));
        assert!(limit.allow(start + micros(1_000)));
        assert!(!limit.allow(start + micros(1_000)));
        // An idle second restores the burst, not more.
        let later = start + Duration::from_secs(1);
        assert_eq!((0..100).filter(|_| limit.allow(later)).count(), 10);
    }

    /// A flood at 300,000 handshakes a second for two seconds, each from
    /// another address: replies stay within the budget of each second.
    #[test]
    fn a_flood_gets_replies_up_to_the_budget() {
        let start = Instant::now();
        let mut budget = CookieReplyBudget::default();
        let mut replies = 0u32;
        for n in 0..600_000u32 {
            let now = start + micros(u64::from(n) * 10 / 3);
            if budget.allow(now, spoofed(n), || [PEER]) {
                replies += 1;
            }
        }
        let most = 2 * COOKIE_REPLIES_PER_SECOND + COOKIE_REPLIES_PER_SECOND / 10;
        assert!(replies <= most, "{replies} replies");
        assert!(
            replies >= 2 * COOKIE_REPLIES_PER_SECOND,
            "{replies} replies"
        );
    }

    /// With the first budget spent by the flood, a handshake from a
    /// peer's address is still answered, and one from a new address is not.
    #[test]
    fn a_peer_address_is_answered_when_the_flood_spent_the_budget() {
        let start = Instant::now();
        let mut budget = CookieReplyBudget::default();
        let mut snapshots = 0;
        let mut n = 0;
        while budget.allow(start, spoofed(n), || {
            snapshots += 1;
            [PEER]
        }) {
            n += 1;
        }
        assert_eq!(
            snapshots, 1,
            "the snapshot is taken once the budget ran out"
        );
        let now = start + micros(10);
        assert!(!budget.allow(now, spoofed(n + 1), || [PEER]));
        assert!(budget.allow(now, PEER, || [PEER]));
        // The snapshot is a second old at most: a peer that moved is
        // known at its new address a second later.
        let moved = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 9));
        assert!(!budget.allow(now, moved, || [moved]));
        let second = start + Duration::from_secs(1);
        while budget.allow(second, spoofed(n), || [moved]) {
            n += 1;
        }
        assert!(budget.allow(second, moved, || [moved]));
        assert!(!budget.allow(second, PEER, || [moved]));
    }

    /// The peers' budget is a budget too: a flood spoofing a peer's own
    /// address gets no more than it.
    #[test]
    fn a_flood_from_a_peer_address_is_bounded_too() {
        let start = Instant::now();
        let mut budget = CookieReplyBudget::default();
        let answered = (0..100_000u64)
            .filter(|n| budget.allow(start + micros(*n), PEER, || [PEER]))
            .count() as u32;
        // A tenth of a second of both budgets, and their bursts.
        let most = (COOKIE_REPLIES_PER_SECOND + PEER_COOKIE_REPLIES_PER_SECOND) / 10 * 2 + 16;
        assert!(answered <= most, "{answered} replies");
    }

    #[test]
    fn load_is_the_rate_of_the_current_or_last_second() {
        let start = Instant::now();
        let mut meter = LoadMeter::default();
        let under = (0..=UNDER_LOAD_HANDSHAKES_PER_SECOND)
            .map(|_| meter.record(start))
            .collect::<Vec<_>>();
        assert!(!under[..UNDER_LOAD_HANDSHAKES_PER_SECOND as usize].contains(&true));
        assert!(under[UNDER_LOAD_HANDSHAKES_PER_SECOND as usize]);
        assert!(meter.is_loaded(start));
        // The next second still counts the busy one.
        assert!(meter.is_loaded(start + Duration::from_millis(1_500)));
        assert!(meter.record(start + Duration::from_millis(1_500)));
        assert!(meter.is_loaded(start + Duration::from_millis(2_400)));
        // After a quiet second, no more.
        assert!(!meter.is_loaded(start + Duration::from_millis(3_500)));
        assert!(!meter.record(start + Duration::from_secs(4)));
        assert!(!meter.is_loaded(start + Duration::from_secs(4)));
    }
}
