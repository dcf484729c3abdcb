//! One turn of a driver's loop on a device with 1, 1,000 and 10,000 peers:
//! seal one packet to an established peer, ask for the next deadline, run
//! due timers and drain transmits — what a worker does per batch. Every
//! other peer has a persistent keepalive, so each has a live timer.
//!
//! Issue 18's target: the turn costs the same at 10,000 peers as at one
//! (the timer queue replaced a scan over all peers). Compare the three
//! `turn/<peers>` lines within one run.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fjord_proto::{
    DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, PeerConfig, PeerId, PresharedKey,
    PrivateKey, Rng, Sent, WallClock,
};

/// Deterministic stand-in for the OS random source (benchmarks only).
struct CountingRng(u64);

impl Rng for CountingRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            self.0 = self
                .0
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            chunk.copy_from_slice(&self.0.to_le_bytes()[..chunk.len()]);
        }
    }
}

const MTU: usize = 1420;
const PAYLOAD: usize = 1000;

fn address(index: u32) -> SocketAddr {
    let [_, _, high, low] = index.to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, high, low)), 51820)
}

fn device(seed: u8, now: Instant) -> Device {
    Device::new(
        DeviceConfig {
            private_key: Some(PrivateKey::from_bytes([seed; 32])),
            mtu: MTU,
        },
        Box::new(CountingRng(u64::from(seed))),
        WallClock {
            base: now,
            base_since_epoch: Duration::from_secs(1_800_000_000),
        },
    )
}

fn peer(key: PrivateKey, endpoint: SocketAddr, keepalive: Option<Duration>) -> PeerConfig {
    PeerConfig {
        public_key: key.public_key(),
        preshared_key: PresharedKey::zero(),
        endpoint: Some(endpoint),
        persistent_keepalive: keepalive,
    }
}

/// Alice with `peers` peers, the first of them Bob, with whom she has a
/// session; the others each have a persistent keepalive armed.
fn alice_with(peers: u32, now: Instant) -> (Device, PeerId) {
    let (alice_key, bob_key) = (
        PrivateKey::from_bytes([1; 32]),
        PrivateKey::from_bytes([2; 32]),
    );
    let mut alice = device(1, now);
    let mut bob = device(2, now);
    let to_bob = alice.add_peer(peer(bob_key, address(2), None)).unwrap();
    bob.add_peer(peer(alice_key, address(1), None)).unwrap();
    for index in 1..peers {
        let mut seed = [7u8; 32];
        // Away from byte 0, whose low bits clamping clears.
        seed[4..8].copy_from_slice(&index.to_le_bytes());
        let id = alice
            .add_peer(peer(
                PrivateKey::from_bytes(seed),
                address(index + 10),
                Some(Duration::from_secs(25)),
            ))
            .unwrap();
        alice.set_peer_persistent_keepalive(id, now, Some(Duration::from_secs(25)));
    }
    // Handshake: Alice's first packet starts it; the messages go by hand.
    let mut buf = vec![0u8; 2048];
    let _ = alice.encapsulate(now, to_bob, &mut buf, 0);
    let mut wire = vec![0u8; 2048];
    for _ in 0..4 {
        while let Some(transmit) = alice.poll_transmit(&mut wire) {
            if transmit.destination == address(2) {
                let _ = bob.handle_datagram(now, address(1), &mut wire[..transmit.len], &mut []);
            }
        }
        while let Some(transmit) = bob.poll_transmit(&mut wire) {
            let _ = alice.handle_datagram(now, address(2), &mut wire[..transmit.len], &mut []);
        }
    }
    assert!(alice.peer_has_session(to_bob), "no session with Bob");
    (alice, to_bob)
}

fn driver_turn(c: &mut Criterion) {
    let mut group = c.benchmark_group("turn");
    for peers in [1u32, 1_000, 10_000] {
        let start = Instant::now();
        let (mut alice, bob) = alice_with(peers, start);
        let mut buf = vec![0u8; DATA_HEADROOM + PAYLOAD + DATA_TAILROOM];
        let mut wire = vec![0u8; 2048];
        // Simulated time moves 1 µs per turn: no keepalive comes due
        // during the measurement, as between batches of a busy tunnel.
        let mut now = start + Duration::from_secs(1);
        group.bench_function(format!("{peers}"), |b| {
            b.iter(|| {
                now += Duration::from_micros(1);
                buf[DATA_HEADROOM] = 0x45;
                let sent = alice.encapsulate(now, bob, &mut buf, PAYLOAD);
                debug_assert!(matches!(sent, Sent::Sealed { .. }));
                if alice.poll_timeout().is_some_and(|deadline| deadline <= now) {
                    alice.handle_timeout(now);
                }
                while let Some(transmit) = alice.poll_transmit(&mut wire) {
                    black_box(transmit);
                }
                black_box(alice.poll_timeout())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, driver_turn);
criterion_main!(benches);
