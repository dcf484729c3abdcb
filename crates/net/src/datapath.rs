//! The two packet pipelines, each a batch at a time with buffers allocated
//! once at start.
//!
//! Outbound (TUN → UDP):
//!
//! ```text
//! TUN reads (each one packet or a super-packet, several per turn) ─ split
//! by tun-rs into slots of one contiguous area, each packet at slot[16..] ─
//! route, compress in place (fjord peers that agreed on it, where it
//! pays), counter, header (in order) ─ seal in place, halves of a large
//! read on other threads (crypto_stage.rs) ─ after
//! the turn's reads, each run of equal-length datagrams to one peer is one
//! GSO message gathered where it lies (slot stride = MTU + 32 = a full
//! datagram, so full-size slots are already GSO segments; shorter ones
//! take an iovec each), and one sendmmsg carries up to 64 messages
//! (udp_send.rs)
//! ```
//!
//! In switch mode the device is a TAP and each read one Ethernet frame, at
//! slot[20..] behind room for the frame header; the node routes it by MAC
//! address (flood copies leave through its `poll_transmit`), and a slot
//! holds a full datagram of a full frame (MTU + 32 + 4 + 18: frame header,
//! Ethernet header and a VLAN tag). Received frames are written to the TAP
//! as packets are to the TUN. Nothing else differs ([`InnerLayout`]).
//!
//! Inbound (UDP → TUN):
//!
//! ```text
//! recvmmsg (GRO: each message holds several datagrams) ─ datagrams we
//! relay for other members leave from there (relay_forward.rs) ─ replay
//! check (in order) ─ open in place, halves of a large batch on other threads ─
//! replay commit, allowed-IPs check (in order) ─ queue the plaintext where
//! it lies (one that came compressed: decompressed into the area behind
//! the receive buffers, and queued there) ─ after the batch,
//! same-flow packets merged into one writev each (userspace GRO, no copy)
//! ```
//!
//! Compression (`fjord_proto::compression`) is a step of the protocol's
//! phases, not a pipeline of its own: off, it costs one branch per packet
//! on each side.
//!
//! Both pipelines run the protocol's phases (`fjord_proto::Device`): first
//! phase in order, the AEAD call, last phase in order. Where the AEAD
//! calls run is decided per read or batch, before its first phase
//! (`CryptoStage::shares`): on this thread, each at once after its first
//! phase, borrowing its session's key (no reference counting per packet);
//! or, for a large batch with `--threads`, detached (each holding its own
//! reference to the key) and shared with the stage's threads, the last
//! phases following in arrival order. Either way the phases are the same.

use std::io::{self, IoSlice, IoSliceMut};
use std::os::fd::AsFd;
use std::time::Instant;

use fjord_mesh::{InnerLayout, Node};
use fjord_proto::{DATA_HEADROOM, Endpoint, Incoming, Opened, Outgoing, Received};
use quinn_udp::RecvMeta;

use crate::crypto_stage::{CryptoStage, OpenJob, SealSlot};
use crate::relay_forward::Forwards;
use crate::stats::DataStats;
use crate::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET, TunDevice, TunReadError, is_device_gone};
use crate::udp::{RECV_BATCH, UdpTransport, is_stale_source};
use crate::udp_send::{GsoMessage, SEND_BATCH, Sent, send_or_wait};

/// Bytes a sealed datagram adds to a packet: header and tag (padding never
/// grows a packet past the MTU).
const SEAL_OVERHEAD: usize = DATA_HEADROOM + 16;
/// Largest payload of one GSO send: 65,535 minus IPv4 and UDP headers.
const MAX_GSO_BYTES: usize = 65_535 - 20 - 8;
/// Largest datagram sent as a GSO segment: one that fits a 1500-byte path
/// behind IPv6 and UDP headers. The kernel refuses GSO segments larger
/// than the path MTU (and quinn-udp then turns GSO off for good), so
/// bigger datagrams (large tunnel MTUs) go one per send and may fragment.
const MAX_GSO_SEGMENT: usize = 1500 - 40 - 8;
/// Room for one GRO-coalesced UDP message.
const GRO_BUFFER: usize = 65_536;
/// The receive buffers: one GRO message each.
const RECEIVE_BYTES: usize = GRO_BUFFER * RECV_BATCH;
/// The area behind them where packets that came compressed are
/// decompressed, one after the other until a flush empties it: room for
/// at least one packet of the largest MTU.
const DECOMPRESSED_BYTES: usize = GRO_BUFFER;

/// What a drain works with: the node, both I/O ends, the crypto stage and
/// the counters. One value instead of five arguments, built once per turn.
pub struct Pipes<'a> {
    pub node: &'a mut Node,
    pub tun: &'a mut TunDevice,
    pub udp: &'a UdpTransport,
    pub stage: &'a CryptoStage,
    pub stats: &'a mut DataStats,
}

/// What one drain call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The source has no more data now.
    Empty,
    /// Stopped after a bounded number of batches to let the other direction run.
    MoreWaiting,
    /// The TUN device is gone (interface deleted).
    DeviceGone,
}

/// Slots in the outbound area: room for one more full read (a super-packet
/// needs up to [`IDEAL_BATCH_SIZE`] slots) after the sends were deferred.
const OUTBOUND_SLOTS: usize = 2 * IDEAL_BATCH_SIZE;

/// A run of sealed datagrams to one destination, all of one length but
/// perhaps the last shorter: one GSO send.
struct GsoRun {
    destination: std::net::SocketAddr,
    source: Option<std::net::IpAddr>,
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
        for batch in 0..max_batches {
            if self.filled > OUTBOUND_SLOTS - IDEAL_BATCH_SIZE {
                self.send_sealed(pipes.udp, pipes.stats);
            }
            let stride = self.stride;
            let mut chunks = self.area[self.filled * stride..].chunks_exact_mut(stride);
            let mut slots: [&mut [u8]; IDEAL_BATCH_SIZE] =
                std::array::from_fn(|_| chunks.next().unwrap_or_default());
            let read = pipes.tun.read_packets(
                &mut self.scratch,
                &mut slots,
                &mut self.sizes,
                self.layout.offset,
            );
            let count = match read {
                Ok(count) => count,
                Err(error @ TunReadError::PacketTooLong { .. }) => {
                    // The MTU grew where we cannot see it (interface moved
                    // to another namespace). Fall back to the largest
                    // slots; GSO runs end, nothing is lost after this one
                    // packet.
                    pipes.stats.tun_read_errors += 1;
                    tracing::warn!(%error, "TUN packet longer than the known MTU; using 64 KiB slots");
                    self.send_sealed(pipes.udp, pipes.stats);
                    self.set_mtu(65_535);
                    continue;
                }
                Err(TunReadError::Io(error)) => match error.kind() {
                    io::ErrorKind::WouldBlock => {
                        self.send_sealed(pipes.udp, pipes.stats);
                        return Drained::Empty;
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ if is_device_gone(&error) => {
                        self.send_sealed(pipes.udp, pipes.stats);
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
            self.seal_read(now, pipes, first, count);
            self.filled += count;
            if count > 1 || (batch == 0 && pace == Pace::Idle) {
                // A super-packet is a GSO send by itself; sending it now
                // lets the peer start on it while we read the next one.
                self.send_sealed(pipes.udp, pipes.stats);
            }
        }
        self.send_sealed(pipes.udp, pipes.stats);
        Drained::MoreWaiting
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
    fn send_sealed(&mut self, udp: &UdpTransport, stats: &mut DataStats) {
        let filled = std::mem::take(&mut self.filled);
        self.collect_runs(filled, udp.max_gso_segments());
        let area = &self.area;
        let spans = &self.spans;
        let pieces: [IoSlice<'_>; OUTBOUND_SLOTS] = std::array::from_fn(|index| {
            spans
                .get(index)
                .map_or(IoSlice::new(&[]), |span| IoSlice::new(&area[span.clone()]))
        });
        let mut next = 0;
        let mut waits = 0;
        while next < self.runs.len() {
            let batch = &self.runs[next..self.runs.len().min(next + SEND_BATCH)];
            let messages: [GsoMessage<'_>; SEND_BATCH] = std::array::from_fn(|index| {
                batch
                    .get(index)
                    .map_or(GsoMessage::EMPTY, |run| GsoMessage {
                        destination: run.destination,
                        source: run.source,
                        pieces: &pieces[run.pieces.clone()],
                        segment_size: (run.count > 1).then_some(run.segment as u16),
                    })
            });
            match send_or_wait(udp, &messages[..batch.len()], &mut waits) {
                Sent::Count(sent) => {
                    stats.udp_sends += sent as u64;
                    next += sent;
                }
                Sent::Again => {}
                Sent::Failed(error) => {
                    let run = &batch[0];
                    let refused_gso = error.raw_os_error() == Some(libc::EIO) && run.count > 1;
                    if refused_gso || is_stale_source(&error, run.source) {
                        // No segmentation on this path: this run goes one
                        // datagram at a time, and so does every later one.
                        // A gone source: one at a time too, from the
                        // route's choice (rare, so not worth a GSO path).
                        if refused_gso {
                            udp.refuse_gso(&error);
                        }
                        for slot in run.first_slot..run.first_slot + run.count {
                            let datagram = &area[slot * self.stride..][..self.sealed[slot].len];
                            if send_blocking(udp, run.destination, run.source, datagram, stats) {
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
        for slot in &mut self.sealed[..filled] {
            *slot = SealSlot::EMPTY;
        }
    }

    /// Groups the first `filled` slots into GSO runs (`self.runs`) and the
    /// runs' bytes into as few contiguous pieces as they lie in
    /// (`self.spans`): full-size datagrams already lie one stride apart, as
    /// GSO wants them.
    fn collect_runs(&mut self, filled: usize, max_segments: usize) {
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
                    && current.segment <= MAX_GSO_SEGMENT
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

/// Sends one datagram, waiting briefly for socket space instead of
/// dropping: a full send buffer is back-pressure that TCP inside the tunnel
/// should feel. Returns whether it left; a failure is counted in
/// `udp_send_errors`.
pub fn send_blocking(
    udp: &UdpTransport,
    destination: std::net::SocketAddr,
    mut source: Option<std::net::IpAddr>,
    datagram: &[u8],
    stats: &mut DataStats,
) -> bool {
    for _ in 0..3 {
        match udp.send(destination, source, datagram) {
            Ok(()) => return true,
            Err(error) if is_stale_source(&error, source) => source = None,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                fjord_sys::poll::wait_writable(udp.as_fd(), std::time::Duration::from_millis(50));
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                stats.udp_send_errors += 1;
                tracing::trace!(%error, %destination, len = datagram.len(), "UDP send failed");
                return false;
            }
        }
    }
    stats.udp_send_errors += 1;
    false
}

pub struct Inbound {
    /// The receive buffers ([`RECEIVE_BYTES`]), then the area for
    /// decompressed packets ([`DECOMPRESSED_BYTES`]): one buffer, so that
    /// TUN writes gather from both alike.
    storage: Vec<u8>,
    /// Bytes of the decompression area holding packets queued for TUN.
    decompressed_len: usize,
    meta: [RecvMeta; RECV_BATCH],
    /// A shared batch's data messages between their two halves of
    /// protocol work; emptied every batch, so it stops growing once it has
    /// held the largest batch.
    jobs: Vec<OpenJob>,
    /// The batch's datagrams that we relay.
    forwards: Forwards,
}

/// Which socket an inbound drain receives from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ReceiveOn {
    /// The interface's socket.
    Interface,
    /// A steered socket, by slot (steering.rs).
    Steered(usize),
    /// A fallback carrier, by slot (carrier/).
    Carrier(usize),
    /// The fake-TCP carrier's raw socket (carrier/fake_tcp/).
    FakeTcp,
}

impl Inbound {
    pub fn new() -> Self {
        Self {
            storage: vec![0; RECEIVE_BYTES + DECOMPRESSED_BYTES],
            decompressed_len: 0,
            meta: [RecvMeta::default(); RECV_BATCH],
            jobs: Vec::with_capacity(RECV_BATCH * 64),
            forwards: Forwards::default(),
        }
    }

    /// Receives, opens and delivers up to `max_batches` recvmmsg calls
    /// from the socket `on`.
    pub fn drain(
        &mut self,
        now: Instant,
        pipes: &mut Pipes<'_>,
        on: ReceiveOn,
        max_batches: usize,
    ) -> Drained {
        let socket = match on {
            ReceiveOn::Interface | ReceiveOn::Carrier(_) | ReceiveOn::FakeTcp => pipes.udp,
            ReceiveOn::Steered(slot) => match pipes.udp.steering().get(slot) {
                Some(socket) => socket,
                None => return Drained::Empty,
            },
        };
        let max_segments = pipes.udp.max_gso_segments();
        for _ in 0..max_batches {
            let mut chunks = self.storage[..RECEIVE_BYTES].chunks_exact_mut(GRO_BUFFER);
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
            let received = match on {
                ReceiveOn::Carrier(slot) => {
                    pipes.udp.carriers().recv(slot, &mut slices, &mut self.meta)
                }
                ReceiveOn::FakeTcp => {
                    pipes
                        .udp
                        .carriers()
                        .recv_fake(now, &mut slices, &mut self.meta)
                }
                _ => socket.recv(&mut slices, &mut self.meta),
            };
            let messages = match received {
                Ok(count) => count,
                Err(error) => match error.kind() {
                    io::ErrorKind::WouldBlock => return self.finish_empty(pipes),
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        pipes.stats.udp_recv_errors += 1;
                        tracing::trace!(%error, "UDP receive failed");
                        continue;
                    }
                },
            };
            pipes.stats.udp_recvs += 1;
            // A UDP socket that gave fewer datagrams than asked for was
            // empty at that moment, and edge-triggered readiness reports
            // the next arrival: a read to see EAGAIN would be a wasted
            // syscall per burst (per packet at ping rates). A carrier's
            // read returns frames from a stream, so a short count proves
            // nothing there.
            let socket_emptied =
                messages < RECV_BATCH && matches!(on, ReceiveOn::Interface | ReceiveOn::Steered(_));
            let bytes: usize = self.meta[..messages].iter().map(|meta| meta.len).sum();
            let shared = pipes.stage.shares(bytes);
            for message in 0..messages {
                let meta = self.meta[message];
                let base = message * GRO_BUFFER;
                let stride = if meta.stride == 0 {
                    meta.len
                } else {
                    meta.stride
                };
                let mut offset = 0;
                while offset < meta.len {
                    let start = base + offset;
                    let end = (offset + stride).min(meta.len);
                    let range = start..base + end;
                    let datagram = &mut self.storage[range.clone()];
                    offset = end;
                    pipes.stats.rx_datagrams += 1;
                    if let Some(to) = pipes.node.relay_destination(meta.addr, datagram) {
                        self.forwards.push(to, range, max_segments);
                        continue;
                    }
                    let from = Endpoint::new(meta.addr, meta.dst_ip);
                    match pipes.node.prepare_own_datagram(now, from, datagram) {
                        Incoming::Data(data) if shared => self.jobs.push(OpenJob {
                            range,
                            from,
                            data: data.detach(),
                        }),
                        Incoming::Data(data) => {
                            let opened = data.open(datagram);
                            if !self.deliver(now, pipes, from, opened, range) {
                                return Drained::DeviceGone;
                            }
                        }
                        Incoming::Done(_) => {}
                    }
                }
            }
            if !self.forwards.is_empty() {
                self.forwards.send(&self.storage, pipes.udp, pipes.stats);
            }
            if !self.open_and_deliver(now, pipes) {
                return Drained::DeviceGone;
            }
            if socket_emptied {
                return self.finish_empty(pipes);
            }
        }
        Drained::MoreWaiting
    }

    /// Opens the batch's detached data messages on the stage's threads,
    /// then finishes them in arrival order and writes their packets (and
    /// those delivered as the batch went) to TUN; `false` if the device is
    /// gone.
    fn open_and_deliver(&mut self, now: Instant, pipes: &mut Pipes<'_>) -> bool {
        if !self.jobs.is_empty() && pipes.stage.open_all(&mut self.storage, &mut self.jobs) {
            pipes.stats.crypto_splits += 1;
        }
        // Taken out (and put back, capacity kept) so that delivering can
        // borrow the storage while the jobs are walked. Each job, and its
        // reference to the key, is dropped here on this thread.
        let mut jobs = std::mem::take(&mut self.jobs);
        let mut device_gone = false;
        for job in jobs.drain(..) {
            if !device_gone && !self.deliver(now, pipes, job.from, job.data.opened(), job.range) {
                device_gone = true;
            }
        }
        self.jobs = jobs;
        !device_gone && self.flush(pipes)
    }

    /// The last phase of one opened data message, in arrival order: its
    /// packet is queued for TUN where it lies, or where it was
    /// decompressed; `false` if the device is gone.
    fn deliver(
        &mut self,
        now: Instant,
        pipes: &mut Pipes<'_>,
        from: Endpoint,
        opened: Opened,
        range: std::ops::Range<usize>,
    ) -> bool {
        // Room for one more decompressed packet (the area is only ever
        // used when compression is).
        if self.decompressed_len > 0
            && self.decompressed_len + pipes.node.device().mtu() > DECOMPRESSED_BYTES
            && !self.flush(pipes)
        {
            return false;
        }
        let (received, decompressed) = self.storage.split_at_mut(RECEIVE_BYTES);
        let datagram = &received[range.clone()];
        let area = &mut decompressed[self.decompressed_len..];
        // The packet stays where it lies until the flush after the batch:
        // the storage is not reused before it.
        let queued = match pipes
            .node
            .finish_datagram(now, from, opened, datagram, area)
        {
            Received::Data { packet, .. } | Received::Frame { frame: packet, .. } => {
                range.start + packet.start..range.start + packet.end
            }
            Received::Decompressed { packet, .. } => {
                let start = RECEIVE_BYTES + self.decompressed_len;
                self.decompressed_len += packet.end;
                start + packet.start..start + packet.end
            }
            _ => return true,
        };
        pipes.tun.queue_write(&self.storage, queued);
        if !pipes.tun.has_write_room() {
            return self.flush(pipes);
        }
        true
    }

    /// The socket has nothing more: what waits for TUN goes out now.
    fn finish_empty(&mut self, pipes: &mut Pipes<'_>) -> Drained {
        if self.flush(pipes) {
            Drained::Empty
        } else {
            Drained::DeviceGone
        }
    }

    /// Writes pending packets to the TUN device; `false` if it is gone.
    fn flush(&mut self, pipes: &mut Pipes<'_>) -> bool {
        self.decompressed_len = 0;
        match pipes.tun.flush_writes(&mut self.storage) {
            Ok(outcome) => {
                pipes.stats.rx_packets += outcome.written as u64;
                pipes.stats.tun_write_errors += outcome.lost as u64;
                pipes.stats.tun_writes += outcome.writes as u64;
                true
            }
            Err(_) => false,
        }
    }
}

impl Default for Inbound {
    fn default() -> Self {
        Self::new()
    }
}
