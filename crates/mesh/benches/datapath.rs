//! The per-packet path against the raw AEAD it is built on, on the same
//! buffer sizes, and routing lookups in a large table.
//!
//! - `open/raw` copies a sealed packet into a working buffer and opens it
//!   with ring; `open/node` does the same copy, then the whole receive path:
//!   parse, receiver-index lookup, replay check, decrypt, inner IP header,
//!   allowed-IPs source check.
//! - `seal/raw` seals with ring; `seal/node` routes (longest-prefix match),
//!   pads, writes the header and seals.
//! - `lookup` is one longest-prefix match among 100,000 prefixes.
//! - `switch` is switch mode's routing in place of it: a frame from the
//!   local port (learn its source, look up its destination) and one from
//!   a peer (check and learn its source), among 8,192 learned addresses.
//!
//! Each for both data ciphers: `chacha` (WireGuard's ChaCha20-Poly1305)
//! and `aes` (AES-256-GCM, which two fjord nodes with hardware AES agree
//! on; the pair negotiates it before the benchmark).
//!
//! Issues 4 and 17's target: the node paths at no less than 80 % of the
//! raw AEAD throughput at each size, for each cipher. Compare `Throughput`
//! lines within one run; to compare two builds, run both in turn several
//! times (one run of one binary can be 5–15 % off the next on a shared
//! machine), and count their instructions per packet with
//! `count-instructions.sh` (the `instructions` benchmark), which does not
//! move between runs.

use std::hint::black_box;
use std::net::IpAddr;
use std::time::Instant;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use fjord_mesh::{AllowedIps, Cidr};
use fjord_proto::aead::TransportKey;
use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, DataCipher};

#[path = "support/pair.rs"]
mod pair;
mod support;

use pair::{
    CIPHERS, PAYLOADS, connected_pair, open_node, open_raw, raw_sealed_batch, seal_node, seal_raw,
    sealed_batch,
};

const BATCH: usize = 1024;

type Group<'a> = criterion::BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// The group `name`: `one` for each cipher and payload size.
fn bench_each(c: &mut Criterion, name: &str, one: fn(&mut Group<'_>, DataCipher, &str, usize)) {
    let mut group = c.benchmark_group(name);
    for (cipher, cipher_name) in CIPHERS {
        for payload in PAYLOADS {
            one(&mut group, cipher, cipher_name, payload);
        }
    }
    group.finish();
}

fn bench_open(c: &mut Criterion) {
    bench_each(c, "open", bench_open_one);
}

fn bench_open_one(group: &mut Group<'_>, cipher: DataCipher, cipher_name: &str, payload: usize) {
    group.throughput(Throughput::Bytes((payload * BATCH) as u64));
    // Both read a fresh batch of `BATCH` distinct datagrams (the node's
    // replay window refuses a repeat), copy each into a working buffer
    // and open it there, and hand the batch back so that freeing it is
    // not timed. Opening one hot buffer again and again for the raw side
    // only would compare an L1-resident copy with one from a megabyte of
    // colder memory (at 1,420 bytes that alone was 0.1 µs a packet).
    let key = TransportKey::with_cipher(cipher, &[7u8; 32]);
    let mut work = vec![0u8; 2048];
    group.bench_function(format!("raw/{cipher_name}/{payload}"), |b| {
        b.iter_batched(
            || raw_sealed_batch(&key, payload, BATCH),
            |batch| {
                open_raw(&key, &batch, &mut work);
                batch
            },
            BatchSize::LargeInput,
        )
    });
    let (mut alice, mut bob) = connected_pair(cipher);
    group.bench_function(format!("node/{cipher_name}/{payload}"), |b| {
        b.iter_batched(
            || sealed_batch(&mut alice, payload, BATCH),
            |batch| {
                open_node(&mut bob, &batch, &mut work);
                batch
            },
            BatchSize::LargeInput,
        )
    });
}

fn bench_seal(c: &mut Criterion) {
    bench_each(c, "seal", bench_seal_one);
}

fn bench_seal_one(group: &mut Group<'_>, cipher: DataCipher, cipher_name: &str, payload: usize) {
    group.throughput(Throughput::Bytes((payload * BATCH) as u64));
    let key = TransportKey::with_cipher(cipher, &[7u8; 32]);
    let mut work = vec![0x5au8; payload];
    let mut counter = 0u64;
    group.bench_function(format!("raw/{cipher_name}/{payload}"), |b| {
        b.iter(|| seal_raw(&key, &mut work, &mut counter, BATCH))
    });
    let (mut alice, _bob) = connected_pair(cipher);
    let mut buf = vec![0u8; DATA_HEADROOM + payload + DATA_TAILROOM];
    group.bench_function(format!("node/{cipher_name}/{payload}"), |b| {
        b.iter(|| seal_node(&mut alice, &mut buf, payload, BATCH))
    });
}

fn bench_lookup(c: &mut Criterion) {
    let mut table = AllowedIps::new();
    // 65,536 host routes and 34,464 IPv6 /64s, as in the large setconf test,
    // plus a default route.
    for i in 0..65_536u32 {
        let cidr: Cidr = format!("198.18.{}.{}/32", i >> 8, i & 0xff)
            .parse()
            .expect("valid");
        table.insert(cidr, i);
    }
    for i in 0..34_464u32 {
        let cidr: Cidr = format!("fd00:aa:{:x}:{:x}::/64", i >> 16, i & 0xffff)
            .parse()
            .expect("valid");
        table.insert(cidr, i);
    }
    table.insert("0.0.0.0/0".parse().expect("valid"), u32::MAX);
    let probes: Vec<IpAddr> = (0..1024u32)
        .map(|i| {
            if i % 2 == 0 {
                IpAddr::V4(std::net::Ipv4Addr::new(
                    198,
                    18,
                    (i * 7 % 256) as u8,
                    (i * 13 % 256) as u8,
                ))
            } else {
                format!("fd00:aa:0:{:x}::9", i * 31 % 34_464)
                    .parse()
                    .expect("valid")
            }
        })
        .collect();
    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(probes.len() as u64));
    group.bench_function("100k_prefixes", |b| {
        b.iter(|| {
            for probe in &probes {
                black_box(table.lookup(black_box(probe)));
            }
        })
    });
    group.finish();
}

fn bench_switch(c: &mut Criterion) {
    use fjord_mesh::switch::{MacAddress, MacTable, SwitchConfig};
    let config = SwitchConfig::default();
    let mut table: MacTable<u32> = MacTable::new(config);
    let now = Instant::now();
    let address = |i: u32| {
        let [_, a, b, c] = i.to_be_bytes();
        MacAddress([0x02, 0, 0, a, b, c])
    };
    let frame = |destination: MacAddress, source: MacAddress| {
        let mut frame = [0u8; 64];
        frame[..6].copy_from_slice(&destination.0);
        frame[6..12].copy_from_slice(&source.0);
        frame
    };
    let local = address(0);
    // The table full: the local port's address and the rest behind 16 peers.
    for i in 1..config.capacity as u32 {
        let _ = table.from_peer(now, i % 16, &frame(local, address(i)));
    }
    let frames: Vec<[u8; 64]> = (0..1024u32)
        .map(|i| frame(address(i * 7 % 8191 + 1), local))
        .collect();
    // Each from the peer its source was learned behind: a refresh.
    let replies: Vec<(u32, [u8; 64])> = (0..1024u32)
        .map(|i| i * 7 % 8191 + 1)
        .map(|i| (i % 16, frame(local, address(i))))
        .collect();
    let mut group = c.benchmark_group("switch");
    group.throughput(Throughput::Elements(frames.len() as u64));
    group.bench_function("from_local/8192_addresses", |b| {
        b.iter(|| {
            for frame in &frames {
                black_box(table.from_local(now, black_box(frame)));
            }
        })
    });
    group.bench_function("from_peer/8192_addresses", |b| {
        b.iter(|| {
            for (peer, frame) in &replies {
                black_box(table.from_peer(now, *peer, black_box(frame)).is_ok());
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench_open, bench_seal, bench_lookup, bench_switch);
criterion_main!(benches);
