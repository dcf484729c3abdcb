//! Spreads a batch's encryption and decryption over threads (`--threads`).
//!
//! The worker does a batch's protocol work in order on its own thread
//! (routing, send counters, replay checks: see `fjord_proto::Device`); what
//! is left is one AEAD call per packet, each independent of the others. The
//! stage splits those calls in halves, by bytes, between the threads of a
//! rayon pool that the worker's own thread belongs to: the worker seals one
//! half while an idle thread takes the other. Packets stay where they lie
//! and are sent (or written to TUN) afterwards in their original order, so
//! the parallel stage can never reorder a flow, and a single TCP stream
//! gets more than one core of crypto.
//!
//! Small work stays on the worker's thread: handing a half to another core
//! costs a wakeup (tens of µs on a virtual machine), more than sealing a
//! few small packets does.
//!
//! The worker asks [`CryptoStage::shares`] before a batch's protocol work.
//! A batch that stays on its thread is sealed or opened packet by packet
//! as the protocol work goes, each step borrowing its session's key; only
//! a batch the stage will share is detached (`detach`), each step then
//! holding its own reference to the key, because it waits for other
//! threads while the worker goes on with the device.

use std::io;
use std::net::SocketAddr;
use std::ops::Range;

use fjord_proto::{DetachedData, DetachedSeal};

/// Below this many bytes a half is sealed or opened where it is.
const SPLIT_MIN_BYTES: usize = 16 * 1024;

/// The threads that share a worker's crypto.
pub struct CryptoStage {
    /// `None` with one thread: everything runs inline, no pool exists.
    pool: Option<rayon::ThreadPool>,
}

impl CryptoStage {
    /// A stage of `threads` threads, the calling thread (the worker's)
    /// being one of them; call it on the thread that will use the stage,
    /// once: rayon lets a thread belong to one pool in its life.
    pub fn new(threads: usize) -> io::Result<Self> {
        if threads <= 1 {
            return Ok(Self { pool: None });
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .use_current_thread()
            .thread_name(|index| format!("fjord-crypto-{index}"))
            .build()
            .map_err(io::Error::other)?;
        Ok(Self { pool: Some(pool) })
    }

    pub fn threads(&self) -> usize {
        self.pool
            .as_ref()
            .map_or(1, rayon::ThreadPool::current_num_threads)
    }

    /// Whether other threads share the work; with one thread every seal
    /// and open runs at once on the caller's thread.
    pub fn parallel(&self) -> bool {
        self.pool.is_some()
    }

    /// Whether a batch of `bytes` of datagrams is worth sharing with other
    /// threads: asked before the batch's protocol work, so that only a
    /// batch that will be shared takes a reference to each key.
    pub fn shares(&self, bytes: usize) -> bool {
        self.parallel() && bytes >= 2 * SPLIT_MIN_BYTES
    }

    /// Seals the detached datagrams in `slots` (one per `stride` bytes of
    /// `area`); a slot whose seal fails gets its length set to zero.
    /// `true` if the work was shared with other threads.
    pub fn seal_slots(&self, area: &mut [u8], stride: usize, slots: &mut [SealSlot]) -> bool {
        seal_split(self.parallel(), area, stride, slots)
    }

    /// Opens the detached data messages in `jobs`, whose ranges are
    /// ascending and disjoint offsets into `storage`. `true` if the work
    /// was shared.
    pub fn open_all(&self, storage: &mut [u8], jobs: &mut [OpenJob]) -> bool {
        open_split(self.parallel(), storage, 0, jobs)
    }
}

/// One outbound slot after the protocol's work.
pub struct SealSlot {
    /// Datagram length; zero if there is nothing to send.
    pub len: usize,
    pub destination: SocketAddr,
    /// Our address to send from (`None`: the route's choice).
    pub source: Option<std::net::IpAddr>,
    /// The encryption still to run for the stage (`None`: already sealed
    /// where it was prepared, or nothing to seal).
    pub seal: Option<DetachedSeal>,
}

impl SealSlot {
    pub const EMPTY: SealSlot = SealSlot {
        len: 0,
        destination: SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            0,
        )),
        source: None,
        seal: None,
    };
}

/// One received data message waiting for its decryption on the stage.
pub struct OpenJob {
    /// Where the datagram lies in the receive storage.
    pub range: Range<usize>,
    /// Who sent it, and our address it arrived at.
    pub from: fjord_proto::Endpoint,
    /// The decryption, and once it ran, its outcome.
    pub data: DetachedData,
}

fn seal_split(parallel: bool, area: &mut [u8], stride: usize, slots: &mut [SealSlot]) -> bool {
    let bytes: usize = slots.iter().map(|slot| slot.len).sum();
    if parallel && slots.len() > 1 && bytes >= 2 * SPLIT_MIN_BYTES {
        let middle = slots.len() / 2;
        let (low_area, high_area) = area.split_at_mut((middle * stride).min(area.len()));
        let (low, high) = slots.split_at_mut(middle);
        rayon::join(
            || seal_split(true, low_area, stride, low),
            || seal_split(true, high_area, stride, high),
        );
        return true;
    }
    for (slot, buf) in slots.iter_mut().zip(area.chunks_mut(stride)) {
        if let Some(seal) = &slot.seal
            && seal.seal(buf).is_err()
        {
            slot.len = 0;
        }
    }
    false
}

/// `storage` starts at offset `base` of the whole receive storage.
fn open_split(parallel: bool, storage: &mut [u8], base: usize, jobs: &mut [OpenJob]) -> bool {
    let bytes: usize = jobs.iter().map(|job| job.range.len()).sum();
    if parallel && jobs.len() > 1 && bytes >= 2 * SPLIT_MIN_BYTES {
        let middle = jobs.len() / 2;
        let split = jobs[middle]
            .range
            .start
            .saturating_sub(base)
            .min(storage.len());
        let (low_storage, high_storage) = storage.split_at_mut(split);
        let (low, high) = jobs.split_at_mut(middle);
        rayon::join(
            || open_split(true, low_storage, base, low),
            || open_split(true, high_storage, base + split, high),
        );
        return true;
    }
    for job in jobs {
        let start = job.range.start.saturating_sub(base);
        let end = job.range.end.saturating_sub(base);
        // A range outside the storage (never) stays unopened, which the
        // last phase refuses as unauthenticated.
        if let Some(datagram) = storage.get_mut(start..end) {
            job.data.open(datagram);
        }
    }
    false
}

#[cfg(test)]
mod fixed_session;

#[cfg(test)]
mod tests {
    use super::fixed_session::fixed_session;
    use super::*;

    const STRIDE: usize = 1420 + 32;

    /// A batch of `count` packets of `len` bytes prepared in slots, and
    /// what the same session gives sealing them one at a time.
    fn prepared(count: usize, len: usize) -> (Vec<u8>, Vec<SealSlot>, Vec<Vec<u8>>) {
        let (mut batch_session, mut reference_session) = (fixed_session(), fixed_session());
        let mut area = vec![0u8; count * STRIDE];
        let mut slots = Vec::new();
        let mut expected = Vec::new();
        for (index, buf) in area.chunks_mut(STRIDE).enumerate() {
            buf[16..16 + len].fill(index as u8);
            let mut reference = buf.to_vec();
            let total = reference_session.seal(&mut reference, len, 1420).unwrap();
            expected.push(reference[..total].to_vec());
            let (total, seal) = batch_session.prepare_seal(buf, len, 1420).unwrap();
            slots.push(SealSlot {
                len: total,
                destination: SealSlot::EMPTY.destination,
                source: None,
                seal: Some(seal.detach()),
            });
        }
        (area, slots, expected)
    }

    fn sealed(area: &[u8], slots: &[SealSlot]) -> Vec<Vec<u8>> {
        area.chunks(STRIDE)
            .zip(slots)
            .map(|(buf, slot)| buf[..slot.len].to_vec())
            .collect()
    }

    #[test]
    fn a_large_batch_is_shared_and_sealed_exactly_as_one_thread_would() {
        let stage = std::thread::spawn(|| {
            let stage = CryptoStage::new(3).unwrap();
            assert_eq!(stage.threads(), 3);
            let (mut area, mut slots, expected) = prepared(64, 1400);
            assert!(
                stage.seal_slots(&mut area, STRIDE, &mut slots),
                "not shared"
            );
            assert_eq!(sealed(&area, &slots), expected);
        });
        stage.join().unwrap();
    }

    #[test]
    fn small_batches_and_one_thread_stay_inline() {
        let stage = std::thread::spawn(|| {
            let stage = CryptoStage::new(2).unwrap();
            let (mut area, mut slots, expected) = prepared(8, 64);
            assert!(!stage.seal_slots(&mut area, STRIDE, &mut slots), "shared");
            assert_eq!(sealed(&area, &slots), expected);
        });
        stage.join().unwrap();
        let inline = CryptoStage::new(1).unwrap();
        assert_eq!(inline.threads(), 1);
        let (mut area, mut slots, expected) = prepared(64, 1400);
        assert!(!inline.seal_slots(&mut area, STRIDE, &mut slots));
        assert_eq!(sealed(&area, &slots), expected);
    }
}
