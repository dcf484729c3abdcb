//! WireGuard's timer rules, as deadlines that the caller's clock drives.
//!
//! Events (what happened) set or clear deadlines; [`Timers::expired`] tells
//! which deadlines passed. The rules, from the whitepaper §6 and
//! wireguard-go's `timers.go`:
//!
//! | timer | set when | cleared when | on expiry |
//! |---|---|---|---|
//! | retransmit handshake | initiation sent (5 s + jitter) | handshake complete | new initiation; give up after 90 s |
//! | send keepalive | data received (10 s) | any authenticated packet sent | send a keepalive |
//! | new handshake | data sent (15 s + jitter), unless pending | any authenticated packet received | new initiation |
//! | zero key material | session derived (540 s) | — | forget all sessions |
//! | persistent keepalive | any authenticated packet sent or received | — | send a keepalive |

use std::time::{Duration, Instant};

/// Start a new handshake after a session has sent this many messages.
pub const REKEY_AFTER_MESSAGES: u64 = 1 << 60;
/// Never send or accept more than this many messages in one session.
pub const REJECT_AFTER_MESSAGES: u64 = u64::MAX - (1 << 13);
/// The initiator starts a new handshake when its session is this old.
pub const REKEY_AFTER_TIME: Duration = Duration::from_secs(120);
/// A session is unusable after this long.
pub const REJECT_AFTER_TIME: Duration = Duration::from_secs(180);
/// Give up handshaking (and drop staged packets) after trying this long.
pub const REKEY_ATTEMPT_TIME: Duration = Duration::from_secs(90);
/// Wait this long for a handshake response before retrying; also the
/// minimum gap between two initiations to one peer.
pub const REKEY_TIMEOUT: Duration = Duration::from_secs(5);
/// Send a keepalive if we received data but sent nothing for this long.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Upper bound of the random jitter added to handshake timers.
pub const MAX_TIMER_JITTER: Duration = Duration::from_millis(333);
/// Number of retransmissions before giving up.
pub const MAX_TIMER_HANDSHAKES: u32 =
    (REKEY_ATTEMPT_TIME.as_secs() / REKEY_TIMEOUT.as_secs()) as u32;
/// A responder consumes at most one initiation per peer in this interval.
pub const HANDSHAKE_INITIATION_RATE: Duration = Duration::from_millis(20);

/// The durations of the timer rules, which a [`crate::Device`] reads from
/// one place. [`Timing::default`] is WireGuard's (the constants above),
/// and the only sensible choice against a real peer.
/// [`Timing::fast_rekeys`] runs the rekey cycle faster, for tests that
/// need thirty rekeys in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub(crate) rekey_after_time: Duration,
    pub(crate) reject_after_time: Duration,
    pub(crate) rekey_attempt_time: Duration,
    pub(crate) rekey_timeout: Duration,
    pub(crate) keepalive_timeout: Duration,
    pub(crate) max_timer_jitter: Duration,
    pub(crate) handshake_initiation_rate: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Self::STANDARD
    }
}

impl Timing {
    /// WireGuard's durations.
    pub const STANDARD: Timing = Timing {
        rekey_after_time: REKEY_AFTER_TIME,
        reject_after_time: REJECT_AFTER_TIME,
        rekey_attempt_time: REKEY_ATTEMPT_TIME,
        rekey_timeout: REKEY_TIMEOUT,
        keepalive_timeout: KEEPALIVE_TIMEOUT,
        max_timer_jitter: MAX_TIMER_JITTER,
        handshake_initiation_rate: HANDSHAKE_INITIATION_RATE,
    };

    /// WireGuard's timers with the rekey cycle run `divisor` times faster
    /// (0 counts as 1): the rekey age, the handshake retry and give-up
    /// times, their jitter and the responder's initiation rate are divided
    /// by it. 250 rekeys every 480 ms and retries a lost handshake after
    /// 20 ms. Sessions still live 180 s and keepalives still follow 10 s
    /// of silence: divided too, a session would outlive its rekey age by
    /// 240 ms instead of a minute, and a test machine that stalls a
    /// daemon for longer (seen: 500 ms, with other builds on two cores)
    /// would expire sessions under packets that had arrived in time.
    pub fn fast_rekeys(divisor: u32) -> Self {
        let divisor = divisor.max(1);
        let standard = Self::STANDARD;
        Self {
            rekey_after_time: standard.rekey_after_time / divisor,
            rekey_attempt_time: standard.rekey_attempt_time / divisor,
            rekey_timeout: standard.rekey_timeout / divisor,
            max_timer_jitter: standard.max_timer_jitter / divisor,
            handshake_initiation_rate: standard.handshake_initiation_rate / divisor,
            ..standard
        }
    }

    /// The age at which an initiator rekeys its session.
    pub fn rekey_after_time(&self) -> Duration {
        self.rekey_after_time
    }

    /// The age at which a session is refused.
    pub fn reject_after_time(&self) -> Duration {
        self.reject_after_time
    }

    /// How long to wait for a handshake response before retrying.
    pub fn rekey_timeout(&self) -> Duration {
        self.rekey_timeout
    }

    /// How long received data may go unanswered before a keepalive.
    pub fn keepalive_timeout(&self) -> Duration {
        self.keepalive_timeout
    }

    /// Retransmissions of one handshake before giving up (18 for WireGuard).
    pub fn max_handshake_attempts(&self) -> u32 {
        let attempts = self.rekey_attempt_time.as_nanos() / self.rekey_timeout.as_nanos().max(1);
        u32::try_from(attempts).unwrap_or(u32::MAX)
    }
}

/// A zero persistent-keepalive interval means off, as in wg(8); kept as an
/// interval it would put the deadline at every `now` and spin the driver.
fn nonzero(interval: Option<Duration>) -> Option<Duration> {
    interval.filter(|every| !every.is_zero())
}

/// Deadlines that passed, as returned by [`Timers::expired`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Expired {
    pub retransmit_handshake: bool,
    pub send_keepalive: bool,
    pub new_handshake: bool,
    pub zero_key_material: bool,
    pub persistent_keepalive: bool,
}

/// In declaration order (`repr(C)`): the deadlines every data packet
/// reads or moves first, in one cache line with `armed`.
#[derive(Debug, Default, Clone)]
#[repr(C)]
pub struct Timers {
    send_keepalive: Option<Instant>,
    new_handshake: Option<Instant>,
    persistent_keepalive_interval: Option<Duration>,
    need_another_keepalive: bool,
    handshake_attempts: u32,
    /// The earliest deadline armed, or moved earlier, since the owner last
    /// called [`Timers::take_armed`]. A deadline that only moves later (the
    /// persistent keepalive, on every packet) or goes away is left out: a
    /// deadline queue that already holds an earlier entry fires early and
    /// finds out. So the data path tells the queue nothing in the common
    /// case, instead of recomputing the minimum on every packet.
    armed: Option<Instant>,
    persistent_keepalive: Option<Instant>,
    retransmit_handshake: Option<Instant>,
    zero_key_material: Option<Instant>,
}

/// Sets `slot` to `deadline`, noting it in `armed` when the queue may not
/// know it yet: `slot` was empty, or the deadline moves earlier.
fn arm(slot: &mut Option<Instant>, deadline: Instant, armed: &mut Option<Instant>) {
    if slot.is_none_or(|previous| deadline < previous) {
        *armed = Some(armed.map_or(deadline, |earliest| earliest.min(deadline)));
    }
    *slot = Some(deadline);
}

impl Timers {
    pub fn new(persistent_keepalive_interval: Option<Duration>) -> Self {
        Self {
            persistent_keepalive_interval: nonzero(persistent_keepalive_interval),
            ..Self::default()
        }
    }

    pub fn persistent_keepalive_interval(&self) -> Option<Duration> {
        self.persistent_keepalive_interval
    }

    pub fn set_persistent_keepalive_interval(&mut self, now: Instant, interval: Option<Duration>) {
        let interval = nonzero(interval);
        self.persistent_keepalive_interval = interval;
        match interval {
            Some(every) => arm(&mut self.persistent_keepalive, now + every, &mut self.armed),
            None => self.persistent_keepalive = None,
        }
    }

    /// A data packet (not a keepalive) was sent.
    pub fn data_sent(&mut self, now: Instant, jitter: Duration, timing: &Timing) {
        if self.new_handshake.is_none() {
            let deadline = now + timing.keepalive_timeout + timing.rekey_timeout + jitter;
            arm(&mut self.new_handshake, deadline, &mut self.armed);
        }
    }

    pub fn new_handshake_pending(&self) -> bool {
        self.new_handshake.is_some()
    }

    /// A data packet (not a keepalive) was received.
    pub fn data_received(&mut self, now: Instant, timing: &Timing) {
        if self.send_keepalive.is_none() {
            arm(
                &mut self.send_keepalive,
                now + timing.keepalive_timeout,
                &mut self.armed,
            );
        } else {
            self.need_another_keepalive = true;
        }
    }

    pub fn any_authenticated_packet_sent(&mut self) {
        self.send_keepalive = None;
    }

    pub fn any_authenticated_packet_received(&mut self) {
        self.new_handshake = None;
    }

    /// Any authenticated packet went either way: restart the persistent keepalive.
    pub fn any_authenticated_packet_traversal(&mut self, now: Instant) {
        if let Some(every) = self.persistent_keepalive_interval {
            arm(&mut self.persistent_keepalive, now + every, &mut self.armed);
        }
    }

    pub fn handshake_initiated(&mut self, now: Instant, jitter: Duration, timing: &Timing) {
        let deadline = now + timing.rekey_timeout + jitter;
        arm(&mut self.retransmit_handshake, deadline, &mut self.armed);
    }

    pub fn handshake_complete(&mut self) {
        self.retransmit_handshake = None;
        self.handshake_attempts = 0;
    }

    pub fn session_derived(&mut self, now: Instant, timing: &Timing) {
        let deadline = now + timing.reject_after_time * 3;
        arm(&mut self.zero_key_material, deadline, &mut self.armed);
    }

    /// A fresh (not retried) handshake starts counting attempts anew.
    pub fn reset_handshake_attempts(&mut self) {
        self.handshake_attempts = 0;
    }

    /// Counts a retransmission; `false` once the attempts are used up.
    pub fn retry_handshake(&mut self, timing: &Timing) -> bool {
        if self.handshake_attempts >= timing.max_handshake_attempts() {
            return false;
        }
        self.handshake_attempts += 1;
        true
    }

    /// Handshaking failed for good: stop keepalives and schedule key erasure.
    pub fn handshake_abandoned(&mut self, now: Instant, timing: &Timing) {
        self.retransmit_handshake = None;
        self.send_keepalive = None;
        self.handshake_attempts = 0;
        if self.zero_key_material.is_none() {
            let deadline = now + timing.reject_after_time * 3;
            arm(&mut self.zero_key_material, deadline, &mut self.armed);
        }
    }

    /// Everything was forgotten (keys zeroed or peer reset).
    pub fn clear(&mut self) {
        let interval = self.persistent_keepalive_interval;
        *self = Self::new(interval);
    }

    /// The earliest pending deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.retransmit_handshake,
            self.send_keepalive,
            self.new_handshake,
            self.zero_key_material,
            self.persistent_keepalive,
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The earliest deadline armed or moved earlier since the last call
    /// (see the `armed` field): what a deadline queue that holds an entry
    /// for this peer must still be told. A queue without one (its entry
    /// fired) needs [`Timers::next_deadline`] instead.
    pub fn take_armed(&mut self) -> Option<Instant> {
        self.armed.take()
    }

    /// Takes every deadline at or before `now`, re-arming the keepalive
    /// when data arrived while one was pending.
    pub fn expired(&mut self, now: Instant, timing: &Timing) -> Expired {
        let take = |slot: &mut Option<Instant>| match *slot {
            Some(deadline) if deadline <= now => {
                *slot = None;
                true
            }
            _ => false,
        };
        let expired = Expired {
            retransmit_handshake: take(&mut self.retransmit_handshake),
            send_keepalive: take(&mut self.send_keepalive),
            new_handshake: take(&mut self.new_handshake),
            zero_key_material: take(&mut self.zero_key_material),
            persistent_keepalive: take(&mut self.persistent_keepalive),
        };
        if expired.send_keepalive && self.need_another_keepalive {
            self.need_another_keepalive = false;
            arm(
                &mut self.send_keepalive,
                now + timing.keepalive_timeout,
                &mut self.armed,
            );
        }
        expired
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const STANDARD: Timing = Timing::STANDARD;

    #[derive(Debug, Clone)]
    enum Step {
        DataSent,
        DataReceived,
        PacketSent,
        PacketReceived,
        Traversal,
        HandshakeInitiated,
        HandshakeComplete,
        SessionDerived,
        Abandoned,
        Clear,
        SetKeepalive(Option<u8>),
        /// Time moves on by this many seconds.
        Advance(u8),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            1 => Just(Step::DataSent),
            1 => Just(Step::DataReceived),
            1 => Just(Step::PacketSent),
            1 => Just(Step::PacketReceived),
            1 => Just(Step::Traversal),
            1 => Just(Step::HandshakeInitiated),
            1 => Just(Step::HandshakeComplete),
            1 => Just(Step::SessionDerived),
            1 => Just(Step::Abandoned),
            1 => Just(Step::Clear),
            1 => proptest::option::of(0..40u8).prop_map(Step::SetKeepalive),
            3 => (0..30u8).prop_map(Step::Advance),
        ]
    }

    proptest! {
        /// A deadline queue fed only `take_armed` between firings (and
        /// every deadline when its entry fires) never holds an entry later
        /// than the earliest real deadline, so no timer fires late.
        #[test]
        fn armed_deadlines_keep_a_queue_entry_early_enough(
            steps in proptest::collection::vec(step(), 1..120),
        ) {
            let mut now = Instant::now();
            let mut timers = Timers::new(None);
            let mut scheduled: Option<Instant> = None;
            for step in steps {
                match step {
                    Step::DataSent => timers.data_sent(now, Duration::ZERO, &STANDARD),
                    Step::DataReceived => timers.data_received(now, &STANDARD),
                    Step::PacketSent => timers.any_authenticated_packet_sent(),
                    Step::PacketReceived => timers.any_authenticated_packet_received(),
                    Step::Traversal => timers.any_authenticated_packet_traversal(now),
                    Step::HandshakeInitiated => timers.handshake_initiated(now, Duration::ZERO, &STANDARD),
                    Step::HandshakeComplete => timers.handshake_complete(),
                    Step::SessionDerived => timers.session_derived(now, &STANDARD),
                    Step::Abandoned => timers.handshake_abandoned(now, &STANDARD),
                    Step::Clear => timers.clear(),
                    Step::SetKeepalive(every) => timers.set_persistent_keepalive_interval(
                        now,
                        every.map(|s| Duration::from_secs(s.into())),
                    ),
                    Step::Advance(seconds) => {
                        now += Duration::from_secs(seconds.into());
                        if scheduled.is_some_and(|entry| entry <= now) {
                            timers.expired(now, &STANDARD);
                            timers.take_armed();
                            scheduled = timers.next_deadline();
                        }
                    }
                }
                if let Some(armed) = timers.take_armed() {
                    scheduled = Some(scheduled.map_or(armed, |entry| entry.min(armed)));
                }
                if let Some(real) = timers.next_deadline() {
                    prop_assert!(scheduled.is_some_and(|entry| entry <= real));
                }
            }
        }
    }

    #[test]
    fn fast_rekeys_speed_up_the_rekey_cycle_only() {
        let fast = Timing::fast_rekeys(250);
        assert_eq!(fast.rekey_after_time(), Duration::from_millis(480));
        assert_eq!(fast.rekey_timeout(), Duration::from_millis(20));
        assert_eq!(fast.max_handshake_attempts(), MAX_TIMER_HANDSHAKES);
        assert_eq!(fast.reject_after_time(), REJECT_AFTER_TIME);
        assert_eq!(fast.keepalive_timeout(), KEEPALIVE_TIMEOUT);
        assert_eq!(Timing::fast_rekeys(0), Timing::default());
        assert_eq!(Timing::fast_rekeys(1), Timing::default());
    }

    #[test]
    fn keepalive_follows_received_data_unless_we_sent() {
        let t0 = Instant::now();
        let mut timers = Timers::new(None);
        timers.data_received(t0, &STANDARD);
        assert_eq!(timers.next_deadline(), Some(t0 + KEEPALIVE_TIMEOUT));
        assert_eq!(
            timers.expired(t0 + KEEPALIVE_TIMEOUT - Duration::from_millis(1), &STANDARD),
            Expired::default()
        );
        assert!(
            timers
                .expired(t0 + KEEPALIVE_TIMEOUT, &STANDARD)
                .send_keepalive
        );

        timers.data_received(t0, &STANDARD);
        timers.any_authenticated_packet_sent();
        assert_eq!(timers.next_deadline(), None);
    }

    #[test]
    fn unanswered_data_triggers_a_new_handshake() {
        let t0 = Instant::now();
        let mut timers = Timers::new(None);
        timers.data_sent(t0, Duration::ZERO, &STANDARD);
        timers.data_sent(t0 + Duration::from_secs(3), Duration::ZERO, &STANDARD);
        let deadline = t0 + KEEPALIVE_TIMEOUT + REKEY_TIMEOUT;
        assert_eq!(timers.next_deadline(), Some(deadline));
        assert!(timers.expired(deadline, &STANDARD).new_handshake);

        timers.data_sent(t0, Duration::ZERO, &STANDARD);
        timers.any_authenticated_packet_received();
        assert_eq!(timers.next_deadline(), None);
    }

    #[test]
    fn retransmissions_are_bounded() {
        let mut timers = Timers::new(None);
        for _ in 0..MAX_TIMER_HANDSHAKES {
            assert!(timers.retry_handshake(&STANDARD));
        }
        assert!(!timers.retry_handshake(&STANDARD));
        assert_eq!(MAX_TIMER_HANDSHAKES, 18);
    }

    #[test]
    fn persistent_keepalive_restarts_on_traffic() {
        let t0 = Instant::now();
        let every = Duration::from_secs(25);
        let mut timers = Timers::new(Some(every));
        timers.any_authenticated_packet_traversal(t0);
        timers.any_authenticated_packet_traversal(t0 + Duration::from_secs(10));
        assert_eq!(timers.next_deadline(), Some(t0 + Duration::from_secs(35)));
        assert!(
            timers
                .expired(t0 + Duration::from_secs(35), &STANDARD)
                .persistent_keepalive
        );
    }

    #[test]
    fn another_keepalive_when_data_kept_coming() {
        let t0 = Instant::now();
        let mut timers = Timers::new(None);
        timers.data_received(t0, &STANDARD);
        timers.data_received(t0 + Duration::from_secs(1), &STANDARD);
        assert!(
            timers
                .expired(t0 + KEEPALIVE_TIMEOUT, &STANDARD)
                .send_keepalive
        );
        assert_eq!(timers.next_deadline(), Some(t0 + KEEPALIVE_TIMEOUT * 2));
    }
}
