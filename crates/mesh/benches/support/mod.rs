//! What the benchmarks share: a deterministic random source, a device
//! builder, IPv4 test packets, and the handshake between two nodes.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_mesh::Node;
use fjord_proto::{
    DATA_HEADROOM, Device, DeviceConfig, PeerConfig, PresharedKey, PrivateKey, Rng, WallClock,
};

pub const MTU: usize = 1420;

/// Deterministic stand-in for the OS random source (benchmarks only).
pub struct CountingRng(pub u64);

impl Rng for CountingRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let bytes = self.0.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// A node with the private key `private`, its random source seeded with `seed`.
pub fn node_with_key(private: [u8; 32], now: Instant, seed: u64) -> Node {
    let device = Device::new(
        DeviceConfig {
            private_key: Some(PrivateKey::from_bytes(private)),
            mtu: MTU,
        },
        Box::new(CountingRng(seed)),
        WallClock {
            base: now,
            base_since_epoch: Duration::from_secs(1_800_000_000),
        },
    );
    Node::new(device)
}

/// The configuration of the peer whose private key is `private`, reached
/// at `endpoint`.
pub fn peer_config(private: [u8; 32], endpoint: SocketAddr) -> PeerConfig {
    PeerConfig {
        public_key: PrivateKey::from_bytes(private).public_key(),
        preshared_key: PresharedKey::zero(),
        endpoint: Some(endpoint),
        persistent_keepalive: None,
    }
}

/// An IPv4 packet of `len` bytes from `source` to `destination` at
/// `buf[DATA_HEADROOM..]`.
pub fn write_packet(buf: &mut [u8], len: usize, source: [u8; 4], destination: [u8; 4]) {
    let packet = &mut buf[DATA_HEADROOM..DATA_HEADROOM + len];
    packet.fill(0x5a);
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    packet[12..16].copy_from_slice(&source);
    packet[16..20].copy_from_slice(&destination);
}

/// Carries control datagrams between `a` (at `a_at`) and `b` (at `b_at`)
/// until both are quiet.
pub fn shuttle(a: &mut Node, a_at: SocketAddr, b: &mut Node, b_at: SocketAddr, now: Instant) {
    let mut out = vec![0u8; 2048];
    for _ in 0..8 {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(now, &mut out) {
            b.handle_datagram(now, a_at, &mut out[..t.len], &mut []);
            moved = true;
        }
        while let Some(t) = b.poll_transmit(now, &mut out) {
            a.handle_datagram(now, b_at, &mut out[..t.len], &mut []);
            moved = true;
        }
        if !moved {
            break;
        }
    }
}
