//! State every peer needs while it handles an input: our identity,
//! randomness, the receiver-index table, and the outgoing queues.
//! Kept apart from the peer list so a peer can borrow it mutably.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::time::{Duration, Instant};

use crate::compression::{CompressionPolicy, Compressor};
use crate::endpoint::Endpoint;
use crate::handshake::StaticIdentity;
use crate::negotiation::CipherPolicy;
use crate::outcome::{DropCounters, DropReason, Event, PeerId};
use crate::tai64n::Tai64N;
use crate::timers::Timing;

/// Randomness, passed in so tests are deterministic.
pub trait Rng {
    fn fill_bytes(&mut self, dest: &mut [u8]);

    fn next_u32(&mut self) -> u32 {
        let mut bytes = [0u8; 4];
        self.fill_bytes(&mut bytes);
        u32::from_le_bytes(bytes)
    }

    fn bytes32(&mut self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        self.fill_bytes(&mut bytes);
        bytes
    }
}

/// Maps the caller's monotonic clock to wall-clock time, fixed at start:
/// TAI64N stamps and "latest handshake" need wall time, and deriving it
/// from `Instant` keeps stamps monotonic even if the system clock steps.
#[derive(Debug, Clone, Copy)]
pub struct WallClock {
    pub base: Instant,
    pub base_since_epoch: Duration,
}

impl WallClock {
    pub fn since_epoch(&self, now: Instant) -> Duration {
        self.base_since_epoch + now.saturating_duration_since(self.base)
    }
}

/// Receiver index → owning peer. Looked up for every received datagram.
pub(crate) type IndexMap = HashMap<u32, PeerId, BuildHasherDefault<IndexHasher>>;

/// Hashes receiver indices with one multiplication. The indices stored
/// are ours, drawn from the caller's secure random source, so nobody can
/// make them collide: the flooding resistance of the default SipHash buys
/// nothing here and cost about a hundred instructions per received packet.
/// The multiplication spreads the index into the high bits the table uses
/// for its tags.
#[derive(Default)]
pub(crate) struct IndexHasher(u64);

impl Hasher for IndexHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = (self.0.rotate_left(5) ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// A control datagram waiting for `poll_transmit`.
pub(crate) struct Outgoing {
    pub destination: Endpoint,
    pub bytes: Vec<u8>,
}

pub(crate) struct Context {
    /// Our static key; `None` until a private key is configured, during
    /// which every handshake is refused.
    pub identity: Option<StaticIdentity>,
    pub rng: Box<dyn Rng + Send>,
    pub jitter_state: JitterSource,
    /// Receiver index → owning peer, for every index a session or an
    /// in-flight initiation of ours uses.
    pub indices: IndexMap,
    pub transmits: VecDeque<Outgoing>,
    pub events: VecDeque<Event>,
    pub drops: DropCounters,
    pub wall_clock: WallClock,
    pub mtu: usize,
    /// The timer rules' durations (WireGuard's unless a test sped up rekeys).
    pub timing: Timing,
    /// The ciphers new sessions offer fjord peers.
    pub cipher_policy: CipherPolicy,
    /// Whether new sessions offer fjord peers compression.
    pub compression_policy: CompressionPolicy,
    /// Compresses outgoing packets in sessions that agreed on it; built
    /// when a policy turns compression on.
    pub compressor: Option<Box<Compressor>>,
    /// Whether we mark our initiations and negotiate with fjord peers;
    /// off only in tests that play a plain WireGuard peer.
    pub speaks_fjord: bool,
}

impl Context {
    /// A fresh random receiver index registered to `peer`.
    pub fn allocate_index(&mut self, peer: PeerId) -> u32 {
        loop {
            let index = self.rng.next_u32();
            if let std::collections::hash_map::Entry::Vacant(slot) = self.indices.entry(index) {
                slot.insert(peer);
                return index;
            }
        }
    }

    pub fn release_index(&mut self, index: u32) {
        self.indices.remove(&index);
    }

    /// A random delay below the timing's maximum jitter.
    pub fn jitter(&mut self) -> Duration {
        jitter_below(self.timing.max_timer_jitter, self.jitter_state.next())
    }

    /// The timestamp of an initiation sent at `now`, marked as fjord's.
    pub fn timestamp(&self, now: Instant) -> Tai64N {
        let timestamp = Tai64N::from_unix(self.wall_clock.since_epoch(now));
        if self.speaks_fjord {
            timestamp.with_fjord_mark()
        } else {
            timestamp
        }
    }

    pub fn drop(&mut self, reason: DropReason) {
        self.drops.count(reason);
    }

    pub fn send(&mut self, destination: Endpoint, bytes: Vec<u8>) {
        self.transmits.push_back(Outgoing { destination, bytes });
    }
}

/// `random` mapped onto `0..max` (whole milliseconds, as WireGuard's
/// jitter; microseconds when `max` is under ten milliseconds, as with
/// fast test rekeys, so the jitter does not vanish).
fn jitter_below(max: Duration, random: u64) -> Duration {
    let max_ms = max.as_millis() as u64;
    if max_ms >= 10 {
        Duration::from_millis(random % max_ms)
    } else {
        Duration::from_micros(random % (max.as_micros() as u64).max(1))
    }
}

/// Timer jitter only has to keep peers from acting in lockstep, not be
/// secret, and it is drawn on the data path (after a send that follows a
/// receive): a xorshift64* seeded once from the secure generator saves a
/// `getrandom` call per draw.
pub(crate) struct JitterSource(u64);

impl JitterSource {
    pub fn seeded(rng: &mut (dyn Rng + Send)) -> Self {
        let mut seed = [0; 8];
        rng.fill_bytes(&mut seed);
        // Zero is xorshift's one fixed point.
        Self(u64::from_le_bytes(seed) | 1)
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timers::MAX_TIMER_JITTER;

    struct Zeros;

    impl Rng for Zeros {
        fn fill_bytes(&mut self, dest: &mut [u8]) {
            dest.fill(0);
        }
    }

    #[test]
    fn a_short_jitter_stays_below_its_maximum_and_is_not_zero() {
        let mut source = JitterSource::seeded(&mut Zeros);
        let max = Duration::from_micros(1_332);
        let draws: Vec<Duration> = (0..1_000)
            .map(|_| jitter_below(max, source.next()))
            .collect();
        assert!(draws.iter().all(|jitter| *jitter < max));
        assert!(draws.iter().any(|jitter| *jitter > max / 2));
        assert_eq!(jitter_below(Duration::ZERO, 7), Duration::ZERO);
    }

    #[test]
    fn jitter_spreads_over_its_whole_range_even_from_a_zero_seed() {
        let mut source = JitterSource::seeded(&mut Zeros);
        let max = MAX_TIMER_JITTER;
        let mut buckets = [0u32; 10];
        for _ in 0..10_000 {
            let jitter = jitter_below(max, source.next());
            buckets[(jitter.as_nanos() * 10 / max.as_nanos()) as usize] += 1;
        }
        // Each tenth of the range gets roughly its share (1,000).
        assert!(
            buckets.iter().all(|&n| (800..1200).contains(&n)),
            "{buckets:?}"
        );
    }
}
