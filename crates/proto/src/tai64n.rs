//! TAI64N timestamps, as carried (encrypted) in handshake initiations.
//!
//! A responder accepts an initiation only if its timestamp is greater than
//! every earlier one from the same peer, which stops replayed initiations.
//! Only one sender's timestamps are ever compared with each other, so the
//! exact epoch matters less than monotonicity; fjord uses wireguard-go's
//! base (2^62 + 10 seconds) and rounds nanoseconds down to 2^24 ns so the
//! timestamp does not reveal precise time.
//!
//! A fjord initiator fills the whitened low bits with [`FJORD_MARK`]: the
//! responder, which alone can decrypt the timestamp, learns that the
//! initiator speaks fjord's session extensions ([`crate::negotiation`]).
//! wireguard-go and kernel WireGuard always send zeros there, so they are
//! never taken for fjord; an implementation that does not whiten matches
//! the mark by chance once in 2^24 handshakes, and then receives one offer
//! it drops as a malformed packet. The mark is constant, so timestamps of
//! one sender still compare in time order.

use std::time::Duration;

/// Length of an encoded timestamp.
pub const TAI64N_LEN: usize = 12;

const TAI64_BASE_SECS: u64 = 0x4000_0000_0000_000a;
/// Nanosecond precision kept in timestamps (about 16.8 ms).
const WHITENER_MASK: u32 = 0x0100_0000 - 1;
const NANOS_PER_SEC: u32 = 1_000_000_000;
/// What a fjord initiator writes into the whitened bits ("fjo").
pub const FJORD_MARK: u32 = 0x0066_6a6f;

/// A TAI64N label; compares as WireGuard compares them (bytewise, big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tai64N([u8; TAI64N_LEN]);

impl Tai64N {
    /// The timestamp for `since_unix_epoch` of wall-clock time.
    pub fn from_unix(since_unix_epoch: Duration) -> Self {
        Self::from_parts(
            TAI64_BASE_SECS.wrapping_add(since_unix_epoch.as_secs()),
            since_unix_epoch.subsec_nanos() & !WHITENER_MASK,
        )
    }

    fn from_parts(secs: u64, nanos: u32) -> Self {
        let mut bytes = [0u8; TAI64N_LEN];
        bytes[..8].copy_from_slice(&secs.to_be_bytes());
        bytes[8..].copy_from_slice(&nanos.to_be_bytes());
        Self(bytes)
    }

    /// The same timestamp marked as sent by fjord.
    pub fn with_fjord_mark(self) -> Self {
        let mut bytes = self.0;
        let nanos = (self.nanos() & !WHITENER_MASK) | FJORD_MARK;
        bytes[8..].copy_from_slice(&nanos.to_be_bytes());
        Self(bytes)
    }

    /// This timestamp, or if it is not later than `previous` (two
    /// initiations within one whitening step, or a clock stepped back),
    /// the first whitened step after `previous`, with this timestamp's
    /// low bits (its fjord mark). A responder takes an initiation whose
    /// timestamp is not later than the last it accepted for a replay.
    pub fn later_than(self, previous: Tai64N) -> Self {
        if self > previous {
            return self;
        }
        let secs = previous.secs();
        let step = (previous.nanos() & !WHITENER_MASK) + WHITENER_MASK + 1;
        let (secs, nanos) = if step >= NANOS_PER_SEC {
            (secs.wrapping_add(1), 0)
        } else {
            (secs, step)
        };
        Self::from_parts(secs, nanos | (self.nanos() & WHITENER_MASK))
    }

    /// Whether the sender marked itself as fjord.
    pub fn has_fjord_mark(&self) -> bool {
        self.nanos() & WHITENER_MASK == FJORD_MARK
    }

    fn secs(&self) -> u64 {
        let [a, b, c, d, e, f, g, h, ..] = self.0;
        u64::from_be_bytes([a, b, c, d, e, f, g, h])
    }

    fn nanos(&self) -> u32 {
        u32::from_be_bytes([self.0[8], self.0[9], self.0[10], self.0[11]])
    }

    pub fn from_bytes(bytes: [u8; TAI64N_LEN]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; TAI64N_LEN] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_big_endian_seconds_then_nanoseconds() {
        let stamp = Tai64N::from_unix(Duration::new(1, 0x0300_0001));
        assert_eq!(
            &stamp.as_bytes()[..8],
            &0x4000_0000_0000_000bu64.to_be_bytes()
        );
        assert_eq!(&stamp.as_bytes()[8..], &0x0300_0000u32.to_be_bytes());
    }

    #[test]
    fn later_times_compare_greater() {
        let a = Tai64N::from_unix(Duration::new(100, 0));
        let b = Tai64N::from_unix(Duration::new(100, 20_000_000));
        let c = Tai64N::from_unix(Duration::new(101, 0));
        assert!(a < b && b < c);
        // Within one whitening step the label does not change.
        assert_eq!(a, Tai64N::from_unix(Duration::new(100, 1_000)));
    }

    #[test]
    fn a_stamp_not_later_than_the_previous_moves_one_step_past_it() {
        let first = Tai64N::from_unix(Duration::new(100, 0)).with_fjord_mark();
        let same_step = Tai64N::from_unix(Duration::new(100, 1_000)).with_fjord_mark();
        let next = same_step.later_than(first);
        assert!(next > first && next.has_fjord_mark());
        assert_eq!(
            next,
            Tai64N::from_unix(Duration::new(100, 0x0100_0000)).with_fjord_mark()
        );
        // A later stamp is kept as it is.
        let later = Tai64N::from_unix(Duration::new(101, 0)).with_fjord_mark();
        assert_eq!(later.later_than(first), later);
        // The last step of a second carries into the next second.
        let last_step = Tai64N::from_unix(Duration::new(100, 999_999_999));
        let carried = last_step.later_than(last_step);
        assert!(carried > last_step);
        assert_eq!(carried, Tai64N::from_unix(Duration::new(101, 0)));
        // A clock stepped back still stamps past what was sent.
        let earlier = Tai64N::from_unix(Duration::new(50, 0));
        assert!(earlier.later_than(later) > later);
    }

    #[test]
    fn the_fjord_mark_keeps_time_order_and_is_recognised() {
        let a = Tai64N::from_unix(Duration::new(100, 0)).with_fjord_mark();
        let b = Tai64N::from_unix(Duration::new(100, 20_000_000)).with_fjord_mark();
        assert!(a < b);
        assert!(a.has_fjord_mark() && b.has_fjord_mark());
        // What wireguard-go and the kernel send: whitened, unmarked.
        assert!(!Tai64N::from_unix(Duration::new(100, 20_000_000)).has_fjord_mark());
        assert_eq!(&a.as_bytes()[..8], &0x4000_0000_0000_006eu64.to_be_bytes());
    }
}
