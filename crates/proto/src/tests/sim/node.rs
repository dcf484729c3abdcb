//! One simulated host (its `Device`, addresses and what its driver
//! observed), the seeded randomness, and packet-building helpers.

use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use crate::{
    CipherPolicy, CompressionPolicy, DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig,
    DropCounters, DropReason, Event, PeerConfig, PeerId, PresharedKey, PrivateKey, Received, Rng,
    Timing, WallClock,
};

/// The wall-clock time the simulation starts at (Unix seconds).
pub const START_UNIX_SECS: u64 = 1_700_000_000;
/// Tunnel MTU of both devices.
pub const MTU: usize = 1420;

/// Which of the two nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    Alice,
    Bob,
}

pub use Who::{Alice, Bob};

impl Who {
    pub fn other(self) -> Who {
        match self {
            Alice => Bob,
            Bob => Alice,
        }
    }
}

/// SplitMix64: tiny, seeded, and plenty for a test's "randomness".
pub struct SeededRng(u64);

impl SeededRng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

impl Rng for SeededRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// How one node is configured.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The preshared key this node configures for the other.
    pub preshared_key: PresharedKey,
    pub persistent_keepalive: Option<Duration>,
    /// Whether this node is told the other's endpoint up front.
    pub knows_endpoint: bool,
    /// The timer rules' durations (WireGuard's unless a test speeds up rekeys).
    pub timing: Timing,
    /// The ciphers this node offers a fjord peer.
    pub cipher_policy: CipherPolicy,
    /// Whether this node offers a fjord peer compression.
    pub compression_policy: CompressionPolicy,
    /// Plays a plain WireGuard peer (no fjord mark, no offers).
    pub plain_wireguard: bool,
}

impl Default for NodeConfig {
    fn default() -> Self {
        Self {
            preshared_key: PresharedKey::zero(),
            persistent_keepalive: None,
            knows_endpoint: true,
            timing: Timing::default(),
            cipher_policy: CipherPolicy::default(),
            compression_policy: CompressionPolicy::default(),
            plain_wireguard: false,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct PairConfig {
    pub alice: NodeConfig,
    pub bob: NodeConfig,
}

impl PairConfig {
    /// Both nodes on the same timer durations (fast rekeys, say).
    pub fn timing(timing: Timing) -> Self {
        let node = NodeConfig {
            timing,
            ..NodeConfig::default()
        };
        Self {
            alice: node.clone(),
            bob: node,
        }
    }
}

/// One simulated host: its device and what its driver observed.
pub struct Node {
    pub device: Device,
    /// The other node, as this node's device knows it.
    pub peer: PeerId,
    pub addr: SocketAddr,
    pub tunnel_ip: Ipv4Addr,
    /// IP packets the device handed to the TUN side, in order.
    pub delivered: Vec<Vec<u8>>,
    /// Where the device decompresses packets that came compressed (the
    /// driver's buffer, MTU long).
    pub decompressed: Vec<u8>,
    pub keepalives_received: usize,
    /// Every `Received` outcome, in order.
    pub outcomes: Vec<Received>,
    pub events: Vec<(Instant, Event)>,
    key_seed: u8,
    rng_seed: u64,
    config: NodeConfig,
    /// `Dropped` outcomes seen by the driver, to check against `drops()`.
    pub(in crate::tests) observed_drops: DropCounters,
}

impl Node {
    pub(super) fn new(
        who: Who,
        config: NodeConfig,
        other_addr: SocketAddr,
        epoch: Instant,
    ) -> Self {
        let (key_seed, rng_seed, addr, tunnel_ip) = match who {
            Alice => (1, 0xa11ce, alice_addr(), Ipv4Addr::new(10, 0, 0, 1)),
            Bob => (2, 0xb0b, bob_addr(), Ipv4Addr::new(10, 0, 0, 2)),
        };
        let mut node = Self {
            device: new_device(key_seed, rng_seed, epoch, wall_time(Duration::ZERO, 0)),
            peer: PeerId(u32::MAX),
            addr,
            tunnel_ip,
            delivered: Vec::new(),
            decompressed: vec![0; MTU],
            keepalives_received: 0,
            outcomes: Vec::new(),
            events: Vec::new(),
            key_seed,
            rng_seed,
            config,
            observed_drops: DropCounters::default(),
        };
        node.apply_config();
        node.configure_peer(who.other(), other_addr);
        node
    }

    fn apply_config(&mut self) {
        self.device.set_timing(self.config.timing);
        self.device.set_cipher_policy(self.config.cipher_policy);
        self.device
            .set_compression_policy(self.config.compression_policy)
            .expect("zstd contexts");
        if self.config.plain_wireguard {
            self.device.speak_plain_wireguard_only();
        }
    }

    fn configure_peer(&mut self, other: Who, other_addr: SocketAddr) {
        let other_key = match other {
            Alice => 1,
            Bob => 2,
        };
        self.peer = self
            .device
            .add_peer(PeerConfig {
                public_key: PrivateKey::from_bytes([other_key; 32]).public_key(),
                preshared_key: self.config.preshared_key.clone(),
                endpoint: self.config.knows_endpoint.then_some(other_addr),
                persistent_keepalive: self.config.persistent_keepalive,
            })
            .expect("the other node's key is new and not our own");
    }

    /// Whether an `Event` matching `predicate` was seen.
    pub fn saw(&self, predicate: impl Fn(&Event) -> bool) -> bool {
        self.events.iter().any(|(_, event)| predicate(event))
    }

    pub fn handshakes_completed(&self) -> usize {
        self.events
            .iter()
            .filter(|(_, event)| matches!(event, Event::HandshakeCompleted { .. }))
            .count()
    }

    /// The bodies (past the 20-byte IPv4 header) of delivered packets.
    pub fn delivered_bodies(&self) -> Vec<&[u8]> {
        self.delivered.iter().map(|packet| &packet[20..]).collect()
    }

    pub fn drops(&self, reason: DropReason) -> u64 {
        self.device.drops().get(reason)
    }

    pub fn has_session(&self) -> bool {
        self.device.peer_has_session(self.peer)
    }

    pub fn endpoint(&self) -> Option<SocketAddr> {
        self.device
            .peer_status(self.peer)
            .and_then(|status| status.endpoint)
    }

    /// Replaces the device by a fresh one with the same keys and
    /// configuration, as a restarted process would have; observations made
    /// so far (delivered packets, events) are kept. Its wall clock reads
    /// `since_start` into the simulation, stepped by `clock_step_secs`
    /// (negative: the host's clock went back).
    pub(super) fn restart(
        &mut self,
        other: Who,
        other_addr: SocketAddr,
        now: Instant,
        since_start: Duration,
        clock_step_secs: i64,
    ) {
        self.rng_seed = self.rng_seed.wrapping_add(1);
        let wall = wall_time(since_start, clock_step_secs);
        self.device = new_device(self.key_seed, self.rng_seed, now, wall);
        self.apply_config();
        self.observed_drops = DropCounters::default();
        self.configure_peer(other, other_addr);
    }

    pub(super) fn record(&mut self, outcome: &Received, datagram: &[u8], decompressed: &[u8]) {
        match outcome {
            Received::Data { packet, .. } => self.delivered.push(datagram[packet.clone()].to_vec()),
            Received::Decompressed { packet, .. } => {
                self.delivered.push(decompressed[packet.clone()].to_vec());
            }
            Received::Keepalive { .. } => self.keepalives_received += 1,
            Received::Dropped(reason) => self.observed_drops.count(*reason),
            // A device alone never returns a frame (see `Received::Frame`).
            Received::Control | Received::Extension { .. } | Received::Frame { .. } => {}
        }
        self.outcomes.push(outcome.clone());
    }
}

pub fn alice_addr() -> SocketAddr {
    "192.0.2.1:51820".parse().expect("valid address")
}

pub fn bob_addr() -> SocketAddr {
    "198.51.100.2:51820".parse().expect("valid address")
}

pub fn private_key(seed: u8) -> PrivateKey {
    PrivateKey::from_bytes([seed; 32])
}

/// The wall-clock time (since the Unix epoch) `since_start` into the
/// simulation, on a clock stepped by `step_secs`.
fn wall_time(since_start: Duration, step_secs: i64) -> Duration {
    let start = Duration::from_secs(START_UNIX_SECS) + since_start;
    let step = Duration::from_secs(step_secs.unsigned_abs());
    if step_secs < 0 {
        start - step
    } else {
        start + step
    }
}

/// A device whose monotonic clock `base` reads `wall_time` on the wall
/// clock (the driver pins one to the other at start).
fn new_device(key_seed: u8, rng_seed: u64, base: Instant, wall_time: Duration) -> Device {
    Device::new(
        DeviceConfig {
            private_key: Some(private_key(key_seed)),
            mtu: MTU,
        },
        Box::new(SeededRng::new(rng_seed)),
        WallClock {
            base,
            base_since_epoch: wall_time,
        },
    )
}

/// A minimal IPv4 packet (20-byte header, no options) around `body`.
pub fn ipv4_packet(source: Ipv4Addr, destination: Ipv4Addr, body: &[u8]) -> Vec<u8> {
    let total_len = u16::try_from(20 + body.len()).expect("test packets fit an IPv4 length");
    let mut packet = vec![0u8; 20];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&total_len.to_be_bytes());
    packet[8] = 64;
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source.octets());
    packet[16..20].copy_from_slice(&destination.octets());
    packet.extend_from_slice(body);
    packet
}

/// A TUN read as a driver hands it to `encapsulate`: the packet at
/// `buf[DATA_HEADROOM..]` with `DATA_TAILROOM` spare bytes behind it.
pub fn tun_buffer(packet: &[u8]) -> (Vec<u8>, usize) {
    let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
    buf[DATA_HEADROOM..DATA_HEADROOM + packet.len()].copy_from_slice(packet);
    (buf, packet.len())
}

/// Seconds, for readable scenarios.
pub fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Milliseconds, for readable scenarios.
pub fn millis(n: u64) -> Duration {
    Duration::from_millis(n)
}
