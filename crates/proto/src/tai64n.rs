//! TAI64N timestamps, as carried (encrypted) in handshake initiations.
//!
//! A responder accepts an initiation only if its timestamp is greater than
//! every earlier one from the same peer, which stops replayed initiations.
//! Only one sender's timestamps are ever compared with each other, so the
//! exact epoch matters less than monotonicity; fjord uses wireguard-go's
//! base (2^62 + 10 seconds) and rounds nanoseconds down to 2^24 ns so the
//! timestamp does not reveal precise time.

use std::time::Duration;

/// Length of an encoded timestamp.
pub const TAI64N_LEN: usize = 12;

const TAI64_BASE_SECS: u64 = 0x4000_0000_0000_000a;
/// Nanosecond precision kept in timestamps (about 16.8 ms).
const WHITENER_MASK: u32 = 0x0100_0000 - 1;

/// A TAI64N label; compares as WireGuard compares them (bytewise, big-endian).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Tai64N([u8; TAI64N_LEN]);

impl Tai64N {
    /// The timestamp for `since_unix_epoch` of wall-clock time.
    pub fn from_unix(since_unix_epoch: Duration) -> Self {
        let secs = TAI64_BASE_SECS.wrapping_add(since_unix_epoch.as_secs());
        let nanos = since_unix_epoch.subsec_nanos() & !WHITENER_MASK;
        let mut bytes = [0u8; TAI64N_LEN];
        bytes[..8].copy_from_slice(&secs.to_be_bytes());
        bytes[8..].copy_from_slice(&nanos.to_be_bytes());
        Self(bytes)
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
}
