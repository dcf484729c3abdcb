//! The outbound pipeline (TUN → UDP): reads, routes and seals a turn's
//! packets, then sends each run to one peer as one GSO message
//! (gso_batch.rs).

use std::io;
use std::time::Instant;

use fjord_mesh::InnerLayout;
use fjord_proto::Outgoing;

use crate::crypto_stage::SealSlot;
use crate::egress::Egress;
use crate::gso_batch::GsoBatch;
use crate::stats::DataStats;
use crate::tun::fragment_balance::{self, is_first_of_several};
use crate::tun::read::Slots;
use crate::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET, TunReadError, is_device_gone};

use super::{Drained, Pipes, SEAL_OVERHEAD};

/// Slots in the outbound area: room for one more full read (a super-packet
/// needs up to [`IDEAL_BATCH_SIZE`] slots) after the sends were deferred.
const OUTBOUND_SLOTS: usize = 2 * IDEAL_BATCH_SIZE;

pub struct Outbound {
    scratch: Vec<u8>,
    area: Vec<u8>,
    stride: usize,
    /// Where reads land in a slot, and what a full read adds to the MTU.
    layout: InnerLayout,
    sizes: [usize; IDEAL_BATCH_SIZE],
    /// Per slot, the datagram waiting to be sealed and sent (length zero:
    /// nothing to send).
    sealed: Vec<SealSlot>,
    /// Slots in use since the last send.
    filled: usize,
    /// The runs of the slots being sent.
    batch: GsoBatch,
    /// A first fragment read but not yet sealed: its last fragment, read
    /// next, may take half of it ([`fragment_balance`]).
    held: Option<Held>,
}

/// The slot and length of a held first fragment.
#[derive(Debug, Clone, Copy)]
struct Held {
    slot: usize,
    len: usize,
}

/// Whether packets were flowing from TUN when the worker woke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pace {
    /// The last wait found nothing to read from TUN: latency counts, not
    /// batching.
    Idle,
    Busy,
}

impl Outbound {
    /// `layout` is the node's ([`Node::inner_layout`]); it never changes.
    pub fn new(mtu: usize, layout: InnerLayout) -> Self {
        let mut outbound = Self {
            scratch: vec![0; MAX_SUPER_PACKET],
            area: Vec::new(),
            stride: 0,
            layout,
            sizes: [0; IDEAL_BATCH_SIZE],
            sealed: std::iter::repeat_with(|| SealSlot::EMPTY)
                .take(OUTBOUND_SLOTS)
                .collect(),
            filled: 0,
            batch: GsoBatch::gathering(OUTBOUND_SLOTS),
            held: None,
        };
        outbound.set_mtu(mtu);
        outbound
    }

    /// Re-cuts the slot area for a new MTU: a slot holds exactly one
    /// full-size sealed datagram, which is what lets runs of full slots go
    /// out as one GSO send where they lie. Call with no sends pending.
    pub fn set_mtu(&mut self, mtu: usize) {
        debug_assert_eq!(self.filled, 0, "sends pending while re-cutting slots");
        self.stride = mtu + self.layout.overhead + SEAL_OVERHEAD;
        self.area.resize(self.stride * OUTBOUND_SLOTS, 0);
    }

    pub fn mtu(&self) -> usize {
        self.stride - SEAL_OVERHEAD - self.layout.overhead
    }

    /// Reads and seals up to `max_batches` TUN reads. A super-packet leaves
    /// at once; single packets wait for the turn's last read (or for the
    /// next super-packet), so that small packets read one by one still
    /// leave in few sends. With `Pace::Idle` (TUN was quiet at the last
    /// wake), a lone first packet leaves at once too: it is most likely a
    /// ping or a request, and the read that would find the device empty
    /// is a syscall on its round trip.
    pub fn drain(
        &mut self,
        now: Instant,
        pipes: &mut Pipes<'_>,
        max_batches: usize,
        pace: Pace,
    ) -> Drained {
        // IP packets only: a TAP device (never with offload) reads frames.
        let balance_fragments = pipes.tun.offload();
        for batch in 0..max_batches {
            if self.filled > OUTBOUND_SLOTS - IDEAL_BATCH_SIZE {
                self.send_all(now, pipes);
            }
            let stride = self.stride;
            let slots = Slots {
                area: &mut self.area[self.filled * stride..],
                stride,
                offset: self.layout.offset,
            };
            let read = pipes
                .tun
                .read_packets(&mut self.scratch, slots, &mut self.sizes);
            let count = match read {
                Ok(count) => count,
                Err(error @ TunReadError::PacketTooLong { .. }) => {
                    // The MTU grew where we cannot see it (interface moved
                    // to another namespace). Fall back to the largest
                    // slots; GSO runs end, nothing is lost after this one
                    // packet.
                    pipes.stats.tun_read_errors += 1;
                    tracing::warn!(%error, "TUN packet longer than the known MTU; using 64 KiB slots");
                    self.send_all(now, pipes);
                    self.set_mtu(65_535);
                    continue;
                }
                Err(TunReadError::Io(error)) => match error.kind() {
                    io::ErrorKind::WouldBlock => {
                        self.send_all(now, pipes);
                        return Drained::Empty;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ if is_device_gone(&error) => {
                        self.send_all(now, pipes);
                        return Drained::DeviceGone;
                    }
                    _ => {
                        pipes.stats.tun_read_errors += 1;
                        tracing::trace!(%error, "TUN read failed");
                        continue;
                    }
                },
            };
            pipes.stats.tun_reads += 1;
            let first = self.filled;
            self.filled += count;
            let (seal_from, seal_count) = match self.held.take() {
                Some(held) if count == 1 && self.balance(held, first) => (held.slot, 2),
                Some(held) => {
                    self.seal_held(now, pipes, held);
                    (first, count)
                }
                None => (first, count),
            };
            if balance_fragments && seal_count == 1 && is_first_of_several(self.packet(first)) {
                // Its last fragment is next in the queue (the kernel
                // queues a datagram's fragments together).
                self.held = Some(Held {
                    slot: first,
                    len: self.sizes[0],
                });
                continue;
            }
            self.seal_read(now, pipes, seal_from, seal_count);
            if count > 1 || (batch == 0 && pace == Pace::Idle) {
                // A super-packet is a GSO send by itself; sending it now
                // lets the peer start on it while we read the next one.
                self.send_sealed(pipes.udp, pipes.stats);
            }
        }
        self.send_all(now, pipes);
        Drained::MoreWaiting
    }

    /// The packet read into slot `slot` (a single read: its length is
    /// `sizes[0]`).
    fn packet(&self, slot: usize) -> &[u8] {
        &self.area[slot * self.stride + self.layout.offset..][..self.sizes[0]]
    }

    /// Balances the held first fragment with the single packet just read
    /// into `slot` if that is its last fragment; on success the two are
    /// `sizes[0]` and `sizes[1]`, ready to seal from the held slot.
    fn balance(&mut self, held: Held, slot: usize) -> bool {
        let (stride, offset) = (self.stride, self.layout.offset);
        let (before, after) = self.area.split_at_mut(slot * stride);
        let first = &mut before[held.slot * stride + offset..];
        let last = &mut after[offset..stride];
        match fragment_balance::balance(first, held.len, last, self.sizes[0]) {
            Some((first_len, last_len)) => {
                self.sizes[1] = last_len;
                self.sizes[0] = first_len;
                true
            }
            None => false,
        }
    }

    /// Seals the held fragment as it was read (the read after it was not
    /// its last fragment, or the turn ends).
    fn seal_held(&mut self, now: Instant, pipes: &mut Pipes<'_>, held: Held) {
        let read = self.sizes[0];
        self.sizes[0] = held.len;
        self.seal_read(now, pipes, held.slot, 1);
        self.sizes[0] = read;
    }

    /// Seals a held fragment, then sends every sealed slot.
    fn send_all(&mut self, now: Instant, pipes: &mut Pipes<'_>) {
        if let Some(held) = self.held.take() {
            self.seal_held(now, pipes, held);
        }
        self.send_sealed(pipes.udp, pipes.stats);
    }

    /// Seals the `count` packets read into slots from `first`: the
    /// protocol's first phase for each, in order, each followed at once by
    /// its seal; or, when the read is large enough to share, every seal
    /// detached and run on the stage's threads afterwards.
    fn seal_read(&mut self, now: Instant, pipes: &mut Pipes<'_>, first: usize, count: usize) {
        let stride = self.stride;
        let bytes: usize = self.sizes[..count]
            .iter()
            .map(|size| size + SEAL_OVERHEAD)
            .sum();
        let shared = pipes.stage.shares(bytes);
        for index in 0..count {
            let slot_index = first + index;
            let slot = &mut self.area[slot_index * stride..(slot_index + 1) * stride];
            self.sealed[slot_index] =
                match pipes.node.prepare_tun_packet(now, slot, self.sizes[index]) {
                    Outgoing::Ready {
                        len,
                        destination,
                        source,
                        seal,
                    } => {
                        let (len, seal) = if shared {
                            (len, Some(seal.detach()))
                        } else {
                            // Cannot fail: the first phase checked the room.
                            (if seal.seal(slot).is_ok() { len } else { 0 }, None)
                        };
                        SealSlot {
                            len,
                            destination,
                            source,
                            seal,
                        }
                    }
                    Outgoing::Done(_) => SealSlot::EMPTY,
                };
        }
        if shared
            && pipes.stage.seal_slots(
                &mut self.area[first * stride..(first + count) * stride],
                stride,
                &mut self.sealed[first..first + count],
            )
        {
            pipes.stats.crypto_splits += 1;
        }
        for slot in &mut self.sealed[first..first + count] {
            // Detached seals are dropped here, so the keys' reference
            // counts change on this thread only.
            slot.seal = None;
            if slot.len > 0 {
                pipes.stats.tx_packets += 1;
            }
        }
    }

    /// Sends every sealed slot in slot order: each run of equal-length
    /// datagrams to one destination is one GSO message, gathered from the
    /// slots where it was sealed (full-size datagrams already lie one
    /// stride apart, as GSO wants them).
    fn send_sealed(&mut self, udp: &Egress, stats: &mut DataStats) {
        let filled = std::mem::take(&mut self.filled);
        if filled == 0 {
            // Every drain ends here, most often with nothing left: at ping
            // rates this was two calls per packet, each setting up arrays
            // for a full area.
            return;
        }
        let max_segments = udp.max_gso_segments();
        for (index, slot) in self.sealed[..filled].iter().enumerate() {
            if slot.len == 0 {
                continue;
            }
            let start = index * self.stride;
            self.batch.push(
                udp,
                max_segments,
                slot.destination,
                slot.source,
                start..start + slot.len,
            );
        }
        self.batch.send(&self.area, udp, stats);
        for slot in &mut self.sealed[..filled] {
            *slot = SealSlot::EMPTY;
        }
    }
}
