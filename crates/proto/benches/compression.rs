//! What compression costs per 1,420-byte packet (`fjord_proto::compression`),
//! with LZ4 and with zstd: compressing log lines, giving up on random bytes
//! (the entropy estimate skips them before the codec runs), and
//! decompressing log lines. Compare with sealing the same packet (about
//! 1 µs with ChaCha20-Poly1305) in one run.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use fjord_proto::compression::{Codec, Compressed, Compressor};

const MTU: usize = 1420;

/// An IPv4 packet of `MTU` bytes around `body`'s first bytes.
fn packet(body: impl Iterator<Item = u8>) -> Vec<u8> {
    let mut packet = vec![0u8; 20];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(MTU as u16).to_be_bytes());
    packet.extend(body.take(MTU - 20));
    packet
}

fn log_lines() -> Vec<u8> {
    let mut text = String::new();
    let mut state = 0x2545_f491_4f6c_dd1du64;
    while text.len() < MTU {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(&format!(
            "2026-11-26T08:14:{:02}.{:03}Z INFO  http::access: method=GET path=/api/v1/orders/{} status=200 bytes={} duration_ms={} request_id={state:016x}\n",
            state % 60,
            state % 1000,
            state % 100_000,
            state % 20_000,
            state % 250
        ));
    }
    packet(text.into_bytes().into_iter())
}

fn random_bytes() -> Vec<u8> {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    packet(std::iter::repeat_with(move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    }))
}

fn per_packet(c: &mut Criterion) {
    let mut compressor = Compressor::with_zstd().expect("zstd contexts");
    let mut group = c.benchmark_group("compression");
    for codec in [Codec::Lz4, Codec::Zstd] {
        let codec_name = codec.name();
        for (name, original) in [("log_lines", log_lines()), ("random", random_bytes())] {
            let mut work = original.clone();
            group.bench_function(format!("compress/{codec_name}/{name}"), |b| {
                b.iter(|| {
                    work.copy_from_slice(&original);
                    black_box(compressor.compress_in_place(black_box(&mut work), MTU, MTU, codec))
                })
            });
        }
        let mut compressed = log_lines();
        let Compressed::Yes(len) = compressor.compress_in_place(&mut compressed, MTU, MTU, codec)
        else {
            panic!("log lines compress");
        };
        compressed.truncate(len);
        let mut out = vec![0u8; MTU];
        group.bench_function(format!("decompress/{codec_name}/log_lines"), |b| {
            b.iter(|| black_box(compressor.decompress(black_box(&compressed), &mut out, MTU)))
        });
    }
    group.finish();
}

criterion_group!(benches, per_packet);
criterion_main!(benches);
