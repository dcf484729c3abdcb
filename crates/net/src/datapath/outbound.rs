//! The outbound pipeline (TUN → UDP): reads, routes and seals a turn's
//! packets, then sends each run to one peer as one GSO message.

use std::io::{self, IoSlice};
use std::time::Instant;

use fjord_mesh::InnerLayout;
use fjord_proto::Outgoing;

use crate::crypto_stage::SealSlot;
use crate::egress::{Egress, GsoMessage, SEND_BATCH, Sent};
use crate::stats::DataStats;
use crate::tun::fragment_balance::{self, is_first_of_several};
use crate::tun::read::Slots;
use crate::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET, TunReadError, is_device_gone};
use crate::udp::{DEFAULT_GSO_SEGMENT, is_stale_source};

use super::{Drained, MAX_GSO_BYTES, Pipes, SEAL_OVERHEAD};

/// Slots in the outbound area: room for one more full read (a super-packet
/// needs up to [`IDEAL_BATCH_SIZE`] slots) after the sends were deferred.
const OUTBOUND_SLOTS: usize = 2 * IDEAL_BATCH_SIZE;
/// Pieces and messages of a send small enough for small arrays: a lone
/// packet, a ping's request or reply.
const FEW: usize = 4;

/// A run of sealed datagrams to one destination, all of one length but
/// perhaps the last shorter: one GSO send.
struct GsoRun {
    destination: std::net::SocketAddr,
    source: Option<std::net::IpAddr>,
    /// Largest datagram its socket sends as a GSO segment.
    segment_limit: usize,
    first_slot: usize,
    count: usize,
    segment: usize,
    last_len: usize,
    /// Where its bytes lie: indices into `Outbound::spans`.
    pieces: std::ops::Range<usize>,
}

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
    /// The runs of the slots being sent, and the byte ranges of the area
    /// they are gathered from (both emptied every send, capacity kept).
    runs: Vec<GsoRun>,
    spans: Vec<std::ops::Range<usize>>,
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
            runs: Vec::with_capacity(OUTBOUND_SLOTS),
            spans: Vec::with_capacity(OUTBOUND_SLOTS),
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
    /// slots where it was sealed, and one `sendmmsg` carries up to
    /// [`SEND_BATCH`] messages.
    fn send_sealed(&mut self, udp: &Egress, stats: &mut DataStats) {
        let filled = std::mem::take(&mut self.filled);
        if filled == 0 {
            // Every drain ends here, most often with nothing left: at ping
            // rates this was two calls per packet, each setting up arrays
            // for a full area.
            return;
        }
        self.collect_runs(filled, udp);
        // Only as many pieces (and below, messages) as are in use are set
        // up: a lone packet's send was more instructions in arrays for a
        // full area than in anything else (callgrind: 1,080 of them a
        // ping, before that 9,600 with a closure per slot).
        if self.spans.len() <= FEW {
            let mut pieces = [IoSlice::new(&[]); FEW];
            self.send_runs(&mut pieces, udp, stats);
        } else {
            let mut pieces = [IoSlice::new(&[]); OUTBOUND_SLOTS];
            self.send_runs(&mut pieces, udp, stats);
        }
        for slot in &mut self.sealed[..filled] {
            *slot = SealSlot::EMPTY;
        }
    }

    /// Sends `self.runs`, their bytes gathered in `pieces` (at least as
    /// many as `self.spans`).
    fn send_runs<'a>(&'a self, pieces: &mut [IoSlice<'a>], udp: &Egress, stats: &mut DataStats) {
        let area = &self.area;
        for (piece, span) in pieces.iter_mut().zip(&self.spans) {
            *piece = IoSlice::new(&area[span.clone()]);
        }
        let pieces = &*pieces;
        let mut next = 0;
        let mut waits = 0;
        while next < self.runs.len() {
            let batch = &self.runs[next..self.runs.len().min(next + SEND_BATCH)];
            let sent = if batch.len() <= FEW {
                send_batch::<FEW>(udp, batch, pieces, &mut waits)
            } else {
                send_batch::<SEND_BATCH>(udp, batch, pieces, &mut waits)
            };
            match sent {
                Sent::Count(sent) => {
                    stats.udp_sends += sent as u64;
                    next += sent;
                }
                Sent::Again => {}
                Sent::Failed(error) => {
                    let run = &batch[0];
                    let refused_gso = error.raw_os_error() == Some(libc::EIO) && run.count > 1;
                    // Segments above what any 1,500-byte path takes, on a
                    // route whose MTU shrank since its socket connected.
                    let segment_too_large = error.raw_os_error() == Some(libc::EINVAL)
                        && run.count > 1
                        && run.segment > DEFAULT_GSO_SEGMENT;
                    if refused_gso || segment_too_large || is_stale_source(&error, run.source) {
                        // No segmentation on this path: this run goes one
                        // datagram at a time, and so does every later one.
                        // Too large: this run one at a time, later ones in
                        // smaller segments. A gone source: one at a time
                        // too, from the route's choice (rare, so not worth
                        // a GSO path).
                        if refused_gso {
                            udp.refuse_gso(&error);
                        }
                        if segment_too_large {
                            udp.shrink_gso_segments(run.destination);
                        }
                        for slot in run.first_slot..run.first_slot + run.count {
                            let datagram = &area[slot * self.stride..][..self.sealed[slot].len];
                            if udp.send_blocking(run.destination, run.source, datagram, stats) {
                                stats.udp_sends += 1;
                            }
                        }
                    } else {
                        stats.udp_send_errors += 1;
                        tracing::trace!(%error, destination = %run.destination, "UDP send failed");
                    }
                    next += 1;
                }
            }
        }
    }

    /// Groups the first `filled` slots into GSO runs (`self.runs`) and the
    /// runs' bytes into as few contiguous pieces as they lie in
    /// (`self.spans`): full-size datagrams already lie one stride apart, as
    /// GSO wants them.
    fn collect_runs(&mut self, filled: usize, udp: &Egress) {
        let max_segments = udp.max_gso_segments();
        self.runs.clear();
        self.spans.clear();
        for index in 0..filled {
            let SealSlot {
                len,
                destination,
                source,
                ..
            } = self.sealed[index];
            if len == 0 {
                continue;
            }
            let start = index * self.stride;
            if let Some(current) = self.runs.last_mut() {
                // The kernel cuts a GSO send into equal segments with a
                // shorter last one; each send is one UDP datagram to it,
                // so it must fit the 16-bit length behind an IPv4 header.
                let joins = current.destination == destination
                    && current.source == source
                    && current.last_len == current.segment
                    && len <= current.segment
                    && current.segment <= current.segment_limit
                    && current.count < max_segments
                    && (current.count + 1) * current.segment <= MAX_GSO_BYTES;
                if joins {
                    current.count += 1;
                    current.last_len = len;
                    let last = self.spans.last_mut().expect("a run has a piece");
                    if last.end == start {
                        last.end += len;
                    } else {
                        self.spans.push(start..start + len);
                        current.pieces.end += 1;
                    }
                    continue;
                }
            }
            self.runs.push(GsoRun {
                destination,
                source,
                segment_limit: udp.gso_segment_limit(destination),
                first_slot: index,
                count: 1,
                segment: len,
                last_len: len,
                pieces: self.spans.len()..self.spans.len() + 1,
            });
            self.spans.push(start..start + len);
        }
    }
}

/// One `sendmmsg` of up to `N` of `runs` (see [`Egress::send_or_wait`]), its
/// messages in an array no larger than the batch needs.
fn send_batch<const N: usize>(
    udp: &Egress,
    runs: &[GsoRun],
    pieces: &[IoSlice<'_>],
    waits: &mut u8,
) -> Sent {
    let mut messages = [GsoMessage::EMPTY; N];
    for (message, run) in messages.iter_mut().zip(runs) {
        *message = GsoMessage {
            destination: run.destination,
            source: run.source,
            pieces: &pieces[run.pieces.clone()],
            segment_size: (run.count > 1).then_some(run.segment as u16),
        };
    }
    udp.send_or_wait(&messages[..runs.len().min(N)], waits)
}
