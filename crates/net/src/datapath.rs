//! The two packet pipelines, each a batch at a time with buffers allocated
//! once at start.
//!
//! Outbound (TUN → UDP):
//!
//! ```text
//! TUN read (one super-packet) ─ split by tun-rs into slots of one contiguous
//! area, each packet at slot[16..] ─ route + seal in place (header before,
//! padding and tag after) ─ runs of full-size datagrams to one peer leave
//! in one UDP GSO send (slot stride = MTU + 32 = a full datagram, so the
//! sealed slots are already laid out as GSO segments)
//! ```
//!
//! Inbound (UDP → TUN):
//!
//! ```text
//! recvmmsg (GRO: each message holds several datagrams) ─ open in place ─
//! allowed-IPs check ─ queue the plaintext where it lies ─ after the batch,
//! same-flow packets merged into one writev each (userspace GRO, no copy)
//! ```

use std::io::{self, IoSliceMut};
use std::time::Instant;

use fjord_mesh::Node;
use fjord_proto::{DATA_HEADROOM, Received, Sent};
use quinn_udp::RecvMeta;

use crate::stats::DataStats;
use crate::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET, TunDevice, is_device_gone};
use crate::udp::{RECV_BATCH, UdpTransport};

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

/// A run of sealed slots going to one destination in one send.
struct GsoRun {
    destination: std::net::SocketAddr,
    first_slot: usize,
    count: usize,
    last_len: usize,
}

pub struct Outbound {
    scratch: Vec<u8>,
    area: Vec<u8>,
    stride: usize,
    sizes: [usize; IDEAL_BATCH_SIZE],
}

impl Outbound {
    pub fn new(mtu: usize) -> Self {
        let mut outbound = Self {
            scratch: vec![0; MAX_SUPER_PACKET],
            area: Vec::new(),
            stride: 0,
            sizes: [0; IDEAL_BATCH_SIZE],
        };
        outbound.set_mtu(mtu);
        outbound
    }

    /// Re-cuts the slot area for a new MTU: a slot holds exactly one
    /// full-size sealed datagram, which is what lets runs of slots go out
    /// as one GSO send.
    pub fn set_mtu(&mut self, mtu: usize) {
        self.stride = mtu + SEAL_OVERHEAD;
        self.area.resize(self.stride * IDEAL_BATCH_SIZE, 0);
    }

    pub fn mtu(&self) -> usize {
        self.stride - SEAL_OVERHEAD
    }

    /// Reads, seals and sends up to `max_batches` TUN reads.
    pub fn drain(
        &mut self,
        now: Instant,
        node: &mut Node,
        tun: &TunDevice,
        udp: &UdpTransport,
        stats: &mut DataStats,
        max_batches: usize,
    ) -> Drained {
        for _ in 0..max_batches {
            let stride = self.stride;
            let mut chunks = self.area.chunks_exact_mut(stride);
            let mut slots: [&mut [u8]; IDEAL_BATCH_SIZE] =
                std::array::from_fn(|_| chunks.next().unwrap_or_default());
            let read = tun.read_packets(
                &mut self.scratch,
                &mut slots,
                &mut self.sizes,
                DATA_HEADROOM,
            );
            let count = match read {
                Ok(count) => count,
                Err(error) => match error.kind() {
                    io::ErrorKind::WouldBlock => return Drained::Empty,
                    io::ErrorKind::Interrupted => continue,
                    _ if is_device_gone(&error) => return Drained::DeviceGone,
                    _ if error.to_string().contains("overflows bufs element") => {
                        // A packet longer than our MTU: the MTU grew where we
                        // cannot see it (interface moved to another namespace).
                        // Fall back to the largest slots; GSO runs end, nothing is lost
                        // after this one packet.
                        stats.tun_read_errors += 1;
                        tracing::warn!(%error, "TUN packet longer than the known MTU; using 64 KiB slots");
                        self.set_mtu(65_535);
                        continue;
                    }
                    _ => {
                        stats.tun_read_errors += 1;
                        tracing::trace!(%error, "TUN read failed");
                        continue;
                    }
                },
            };
            stats.tun_reads += 1;
            self.seal_and_send(now, node, udp, stats, count);
        }
        Drained::MoreWaiting
    }

    fn seal_and_send(
        &mut self,
        now: Instant,
        node: &mut Node,
        udp: &UdpTransport,
        stats: &mut DataStats,
        count: usize,
    ) {
        let stride = self.stride;
        // One GSO send is one UDP datagram to the kernel, so it must fit
        // the 16-bit length field (behind an IPv4 header, the tighter case).
        let max_segments = if stride <= MAX_GSO_SEGMENT {
            udp.max_gso_segments().min(MAX_GSO_BYTES / stride).max(1)
        } else {
            1
        };
        let mut run: Option<GsoRun> = None;
        for index in 0..count {
            let slot = &mut self.area[index * stride..(index + 1) * stride];
            let outcome = node.handle_tun_packet(now, slot, self.sizes[index]);
            let Sent::Sealed { len, destination } = outcome else {
                if let Some(done) = run.take() {
                    self.send_run(udp, stats, &done);
                }
                continue;
            };
            stats.tx_packets += 1;
            match run.as_mut() {
                Some(current)
                    if current.destination == destination
                        && current.last_len == stride
                        && current.count < max_segments =>
                {
                    current.count += 1;
                    current.last_len = len;
                }
                _ => {
                    if let Some(done) = run.take() {
                        self.send_run(udp, stats, &done);
                    }
                    run = Some(GsoRun {
                        destination,
                        first_slot: index,
                        count: 1,
                        last_len: len,
                    });
                }
            }
        }
        if let Some(done) = run.take() {
            self.send_run(udp, stats, &done);
        }
    }

    fn send_run(&self, udp: &UdpTransport, stats: &mut DataStats, run: &GsoRun) {
        let start = run.first_slot * self.stride;
        let end = start + (run.count - 1) * self.stride + run.last_len;
        let segment = (run.count > 1).then_some(self.stride);
        send_blocking(udp, run.destination, &self.area[start..end], segment, stats);
        stats.udp_sends += 1;
    }
}

/// Sends, waiting briefly for socket space instead of dropping: a full
/// send buffer is back-pressure that TCP inside the tunnel should feel.
pub fn send_blocking(
    udp: &UdpTransport,
    destination: std::net::SocketAddr,
    contents: &[u8],
    segment: Option<usize>,
    stats: &mut DataStats,
) {
    for _ in 0..3 {
        match udp.send(destination, contents, segment) {
            Ok(()) => return,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                crate::sys::wait_writable(udp, std::time::Duration::from_millis(50));
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) => {
                stats.udp_send_errors += 1;
                tracing::trace!(%error, %destination, len = contents.len(), ?segment, "UDP send failed");
                return;
            }
        }
    }
    stats.udp_send_errors += 1;
}

pub struct Inbound {
    storage: Vec<u8>,
    meta: [RecvMeta; RECV_BATCH],
}

impl Inbound {
    pub fn new() -> Self {
        Self {
            storage: vec![0; GRO_BUFFER * RECV_BATCH],
            meta: [RecvMeta::default(); RECV_BATCH],
        }
    }

    /// Receives, opens and delivers up to `max_batches` recvmmsg calls.
    pub fn drain(
        &mut self,
        now: Instant,
        node: &mut Node,
        tun: &mut TunDevice,
        udp: &UdpTransport,
        stats: &mut DataStats,
        max_batches: usize,
    ) -> Drained {
        for _ in 0..max_batches {
            let mut chunks = self.storage.chunks_exact_mut(GRO_BUFFER);
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
            let messages = match udp.recv(&mut slices, &mut self.meta) {
                Ok(count) => count,
                Err(error) => match error.kind() {
                    io::ErrorKind::WouldBlock => {
                        return if self.flush(tun, stats) {
                            Drained::Empty
                        } else {
                            Drained::DeviceGone
                        };
                    }
                    io::ErrorKind::Interrupted => continue,
                    _ => {
                        stats.udp_recv_errors += 1;
                        tracing::trace!(%error, "UDP receive failed");
                        continue;
                    }
                },
            };
            stats.udp_recvs += 1;
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
                    let datagram = &mut self.storage[start..base + end];
                    offset = end;
                    stats.rx_datagrams += 1;
                    if let Received::Data { packet, .. } =
                        node.handle_datagram(now, meta.addr, datagram)
                    {
                        // The plaintext stays where it was opened until the
                        // flush below: the storage is not reused before it.
                        tun.queue_write(&self.storage, start + packet.start..start + packet.end);
                        if !tun.has_write_room() && !self.flush(tun, stats) {
                            return Drained::DeviceGone;
                        }
                    }
                }
            }
            if !self.flush(tun, stats) {
                return Drained::DeviceGone;
            }
        }
        Drained::MoreWaiting
    }

    /// Writes pending packets to the TUN device; `false` if it is gone.
    fn flush(&mut self, tun: &mut TunDevice, stats: &mut DataStats) -> bool {
        match tun.flush_writes(&mut self.storage) {
            Ok(outcome) => {
                stats.rx_packets += outcome.written as u64;
                stats.tun_write_errors += outcome.lost as u64;
                stats.tun_writes += outcome.writes as u64;
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
