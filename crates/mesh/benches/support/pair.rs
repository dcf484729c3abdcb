//! Two nodes with a session, the datagrams and sealed buffers the
//! per-packet benchmarks (`datapath`, `instructions`) feed them, and the
//! per-packet loops both run: `datapath` times them, `instructions`
//! counts them, so both measure the same code. Included
//! by path (`#[path = "support/pair.rs"]`) by the benchmarks that use it,
//! so that `peers`, which shares `support` but not this, has no unused
//! code.

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use fjord_mesh::{Cidr, Node};
use fjord_proto::aead::TransportKey;
use fjord_proto::{CipherPolicy, DATA_HEADROOM, DATA_TAILROOM, DataCipher, PeerId, Received, Sent};

use crate::support;

pub const ALICE: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1)), 51820);
pub const BOB: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)), 51820);
/// Both data ciphers, with the names the benchmarks use for them.
pub const CIPHERS: [(DataCipher, &str); 2] = [
    (DataCipher::ChaCha20Poly1305, "chacha"),
    (DataCipher::Aes256Gcm, "aes"),
];
/// The inner packet sizes measured: the smallest and a full one.
pub const PAYLOADS: [usize; 2] = [64, 1420];

fn node(
    own: u8,
    peer: u8,
    endpoint: SocketAddr,
    allowed: &str,
    now: Instant,
    seed: u64,
) -> (Node, PeerId) {
    let mut node = support::node_with_key([own; 32], now, seed);
    let id = node
        .add_peer(
            support::peer_config([peer; 32], endpoint),
            &[allowed.parse::<Cidr>().expect("valid prefix")],
        )
        .expect("distinct keys");
    (node, id)
}

/// An IPv4 packet of `len` bytes from 198.19.0.1 to 198.19.0.2 at `buf[DATA_HEADROOM..]`.
pub fn write_packet(buf: &mut [u8], len: usize) {
    support::write_packet(buf, len, [198, 19, 0, 1], [198, 19, 0, 2]);
}

/// Alice and Bob with a confirmed session in both directions, sealing
/// with `cipher` once their negotiation is over.
pub fn connected_pair(cipher: DataCipher) -> (Node, Node) {
    let now = Instant::now();
    let (mut alice, alice_peer) = node(1, 2, BOB, "198.19.0.2/32", now, 1);
    let (mut bob, _) = node(2, 1, ALICE, "198.19.0.1/32", now, 2);
    if cipher == DataCipher::Aes256Gcm {
        for side in [&mut alice, &mut bob] {
            side.device_mut()
                .set_cipher_policy(CipherPolicy::OfferAes256Gcm);
        }
    }
    let mut buf = vec![0u8; 2048];
    write_packet(&mut buf, 64);
    assert!(matches!(
        alice.handle_tun_packet(now, &mut buf, 64),
        Sent::Staged
    ));
    support::shuttle(&mut alice, ALICE, &mut bob, BOB, now);
    let agreed = alice
        .device()
        .peer_status(alice_peer)
        .and_then(|status| status.sending_cipher);
    assert_eq!(agreed, Some(cipher), "the pair did not agree on {cipher}");
    (alice, bob)
}

/// `count` data datagrams from Alice to Bob, each `payload` bytes inside.
pub fn sealed_batch(alice: &mut Node, payload: usize, count: usize) -> Vec<Vec<u8>> {
    let now = Instant::now();
    (0..count)
        .map(|_| {
            let mut buf = vec![0u8; DATA_HEADROOM + payload + DATA_TAILROOM];
            write_packet(&mut buf, payload);
            match alice.handle_tun_packet(now, &mut buf, payload) {
                Sent::Sealed { len, .. } => {
                    buf.truncate(len);
                    buf
                }
                other => panic!("expected a sealed packet, got {other:?}"),
            }
        })
        .collect()
}

/// `count` payloads of `payload` bytes sealed with `key`, the n-th under
/// counter n, each with its tag.
pub fn raw_sealed_batch(
    key: &TransportKey,
    payload: usize,
    count: usize,
) -> Vec<(Vec<u8>, [u8; 16])> {
    (0..count as u64)
        .map(|counter| {
            let mut sealed = vec![0x5au8; payload];
            let tag = key.seal_in_place(counter, &mut sealed);
            (sealed, tag)
        })
        .collect()
}

// The per-packet loops. Not inlined, so that callgrind can count each
// alone (`--toggle-collect`); a call per batch costs the timed runs
// nothing measurable.

/// Bob opens `batch` (Alice's datagrams), each copied into `work` first.
#[inline(never)]
pub fn open_node(bob: &mut Node, batch: &[Vec<u8>], work: &mut [u8]) {
    let now = Instant::now();
    for datagram in batch {
        let len = datagram.len();
        work[..len].copy_from_slice(datagram);
        let outcome = bob.handle_datagram(now, ALICE, black_box(&mut work[..len]), &mut []);
        debug_assert!(matches!(outcome, Received::Data { .. }));
        black_box(outcome);
    }
}

/// Opens `batch` (from [`raw_sealed_batch`]) with `key`, each copied into
/// `work` first.
#[inline(never)]
pub fn open_raw(key: &TransportKey, batch: &[(Vec<u8>, [u8; 16])], work: &mut [u8]) {
    for (counter, (sealed, tag)) in batch.iter().enumerate() {
        let work = &mut work[..sealed.len()];
        work.copy_from_slice(sealed);
        key.open_in_place(counter as u64, black_box(work), tag)
            .expect("authentic");
    }
}

/// Alice writes and seals `packets` packets of `payload` bytes in `buf`.
#[inline(never)]
pub fn seal_node(alice: &mut Node, buf: &mut [u8], payload: usize, packets: usize) {
    let now = Instant::now();
    for _ in 0..packets {
        write_packet(buf, payload);
        black_box(alice.handle_tun_packet(now, black_box(&mut *buf), payload));
    }
}

/// Seals `work` in place `packets` times with `key`, under the counters
/// after `*counter`.
#[inline(never)]
pub fn seal_raw(key: &TransportKey, work: &mut [u8], counter: &mut u64, packets: usize) {
    for _ in 0..packets {
        *counter += 1;
        black_box(key.seal_in_place(*counter, black_box(&mut *work)));
    }
}
