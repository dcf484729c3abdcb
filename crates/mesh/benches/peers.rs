//! One node with many peers, per packet: the lab's `peers` suite without
//! the kernel. A hub with 1 or 1,000 peers (fjord nodes, AES-256-GCM)
//! seals 64-byte packets to each peer in turn (`peers/seal/N`) and opens
//! packets from each in turn (`peers/open/N`). With 1,000 peers every
//! packet meets per-peer state (session, replay window, timers, routes)
//! that the 999 before it pushed out of the nearer caches.
//!
//! Issue 17's goal: at 1,000 peers at least 90 % of the one-peer rate.
//! Compare the `Throughput` lines of `N = 1` and `N = 1000` in one run;
//! `valgrind --tool=cachegrind` on one of them counts the cache misses
//! per packet.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fjord_mesh::{Cidr, Node};
use fjord_proto::{CipherPolicy, DATA_HEADROOM, DATA_TAILROOM, DataCipher, PeerId, Sent};

mod support;

const BATCH: usize = 1024;
const PAYLOAD: usize = 64;
const PEER_COUNTS: [usize; 2] = [1, 1000];
const HUB_KEY: [u8; 32] = [0x77; 32];
const HUB_INNER: [u8; 4] = [198, 19, 255, 254];
const HUB_AT: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 255, 254)), 51820);

fn spoke_key(index: usize) -> [u8; 32] {
    // Not in the first byte: X25519 clears its low bits.
    let mut key = [0x33; 32];
    key[1..3].copy_from_slice(&(index as u16).to_be_bytes());
    key
}

fn spoke_inner(index: usize) -> [u8; 4] {
    let [_, _, high, low] = (index as u32).to_be_bytes();
    [198, 19, high, low]
}

fn spoke_at(index: usize) -> SocketAddr {
    let [_, _, high, low] = (index as u32).to_be_bytes();
    SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, high, low)), 51820)
}

fn host_route(address: [u8; 4]) -> Cidr {
    let [a, b, c, d] = address;
    format!("{a}.{b}.{c}.{d}/32").parse().expect("valid prefix")
}

/// The hub and its `count` spokes, every pair with a confirmed session
/// that agreed on AES-256-GCM.
struct Star {
    hub: Node,
    spokes: Vec<Node>,
}

fn star(count: usize) -> Star {
    let now = Instant::now();
    let mut hub = support::node_with_key(HUB_KEY, now, 1);
    hub.device_mut()
        .set_cipher_policy(CipherPolicy::OfferAes256Gcm);
    let mut spokes = Vec::with_capacity(count);
    let mut buf = vec![0u8; DATA_HEADROOM + PAYLOAD + DATA_TAILROOM];
    for index in 0..count {
        let mut spoke = support::node_with_key(spoke_key(index), now, 100 + index as u64);
        spoke
            .device_mut()
            .set_cipher_policy(CipherPolicy::OfferAes256Gcm);
        spoke
            .add_peer(
                support::peer_config(HUB_KEY, HUB_AT),
                &[host_route(HUB_INNER)],
            )
            .expect("one peer");
        let id: PeerId = hub
            .add_peer(
                support::peer_config(spoke_key(index), spoke_at(index)),
                &[host_route(spoke_inner(index))],
            )
            .expect("distinct keys");
        support::write_packet(&mut buf, PAYLOAD, spoke_inner(index), HUB_INNER);
        assert!(matches!(
            spoke.handle_tun_packet(now, &mut buf, PAYLOAD),
            Sent::Staged
        ));
        support::shuttle(&mut spoke, spoke_at(index), &mut hub, HUB_AT, now);
        let agreed = hub
            .device()
            .peer_status(id)
            .and_then(|status| status.sending_cipher);
        assert_eq!(agreed, Some(DataCipher::Aes256Gcm), "spoke {index}");
        spokes.push(spoke);
    }
    Star { hub, spokes }
}

fn bench_seal(c: &mut Criterion) {
    let mut group = c.benchmark_group("peers/seal");
    group.throughput(Throughput::Elements(BATCH as u64));
    for count in PEER_COUNTS {
        let mut star = star(count);
        let mut buf = vec![0u8; DATA_HEADROOM + PAYLOAD + DATA_TAILROOM];
        let mut next = 0;
        group.bench_function(count.to_string(), |b| {
            b.iter(|| {
                let now = Instant::now();
                for _ in 0..BATCH {
                    support::write_packet(&mut buf, PAYLOAD, HUB_INNER, spoke_inner(next));
                    next = (next + 1) % count;
                    let sent = star
                        .hub
                        .handle_tun_packet(now, black_box(&mut buf), PAYLOAD);
                    debug_assert!(matches!(sent, Sent::Sealed { .. }));
                    black_box(sent);
                }
            })
        });
    }
    group.finish();
}

/// `BATCH` datagrams for the hub, the n-th from spoke n mod the count,
/// each with that spoke's index.
fn sealed_by_spokes(spokes: &mut [Node]) -> Vec<(usize, Vec<u8>)> {
    let now = Instant::now();
    (0..BATCH)
        .map(|n| {
            let index = n % spokes.len();
            let mut buf = vec![0u8; DATA_HEADROOM + PAYLOAD + DATA_TAILROOM];
            support::write_packet(&mut buf, PAYLOAD, spoke_inner(index), HUB_INNER);
            match spokes[index].handle_tun_packet(now, &mut buf, PAYLOAD) {
                Sent::Sealed { len, .. } => buf.truncate(len),
                other => panic!("expected a sealed packet, got {other:?}"),
            }
            (index, buf)
        })
        .collect()
}

fn bench_open(c: &mut Criterion) {
    let mut group = c.benchmark_group("peers/open");
    group.throughput(Throughput::Elements(BATCH as u64));
    for count in PEER_COUNTS {
        let Star {
            mut hub,
            mut spokes,
        } = star(count);
        let mut work = vec![0u8; 2048];
        group.bench_function(count.to_string(), |b| {
            b.iter_batched(
                || sealed_by_spokes(&mut spokes),
                |batch| {
                    let now = Instant::now();
                    for (index, datagram) in &batch {
                        let work = &mut work[..datagram.len()];
                        work.copy_from_slice(datagram);
                        let received =
                            hub.handle_datagram(now, spoke_at(*index), black_box(work), &mut []);
                        debug_assert!(
                            matches!(received, fjord_proto::Received::Data { .. }),
                            "{received:?}"
                        );
                        black_box(received);
                    }
                    batch
                },
                BatchSize::LargeInput,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench_seal, bench_open);
criterion_main!(benches);
