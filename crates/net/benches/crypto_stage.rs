//! What `--threads` buys on idle cores: sealing one TUN super-packet's
//! worth of datagrams (44 × 1,420 bytes, what one 64 KiB TSO read gives)
//! on the worker's thread alone (each seal at once after its first phase,
//! borrowing the key, as the worker does), and shared with a second thread
//! (each seal detached first).
//! Measured on an idle 2-vCPU machine: 44.4 µs alone, 29.4 µs shared
//! (1.31 → 1.98 GiB/s).
//! Compare the `Throughput` lines of one run; on a machine whose cores are
//! busy with other work (the lab's, for one) the shared figures drop.

use std::hint::black_box;
use std::net::SocketAddr;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fjord_net::crypto_stage::{CryptoStage, SealSlot};

#[path = "../src/crypto_stage/fixed_session.rs"]
mod fixed_session;
use fixed_session::fixed_session;

const MTU: usize = 1420;
const STRIDE: usize = MTU + 32;
const PACKETS: usize = 44;

fn seal_batches(c: &mut Criterion) {
    let mut group = c.benchmark_group("seal_super_packet");
    group.throughput(Throughput::Bytes((PACKETS * MTU) as u64));
    // Two stages at most: rayon lets a thread join one pool in its life
    // (`use_current_thread`), and the first stage has no pool.
    for threads in [1, 2] {
        {
            let stage = CryptoStage::new(threads).expect("crypto threads");
            let mut session = fixed_session();
            let mut area = vec![0u8; PACKETS * STRIDE];
            let mut slots: Vec<SealSlot> = (0..PACKETS).map(|_| SealSlot::EMPTY).collect();
            let destination = SocketAddr::from(([198, 18, 0, 2], 51820));
            group.bench_function(format!("threads_{threads}"), |b| {
                b.iter(|| {
                    let shared = stage.shares(PACKETS * STRIDE);
                    for (slot, buf) in slots.iter_mut().zip(area.chunks_mut(STRIDE)) {
                        let (len, seal) = session
                            .prepare_seal(buf, MTU, MTU)
                            .expect("room for a full packet");
                        let seal = if shared {
                            Some(seal.detach())
                        } else {
                            seal.seal(buf).expect("room for a full packet");
                            None
                        };
                        *slot = SealSlot {
                            len,
                            destination,
                            source: None,
                            seal,
                        };
                    }
                    if shared {
                        black_box(stage.seal_slots(&mut area, STRIDE, &mut slots));
                    }
                });
            });
        }
    }
    group.finish();
}

criterion_group!(benches, seal_batches);
criterion_main!(benches);
