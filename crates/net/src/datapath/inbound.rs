//! The inbound pipeline (UDP → TUN): receives a batch, opens it, and
//! writes same-flow packets to the device in one writev each.

use std::io::{self, IoSliceMut};
use std::time::Instant;

use fjord_proto::{Endpoint, Incoming, Opened, Received};
use quinn_udp::RecvMeta;

use crate::crypto_stage::OpenJob;
use crate::relay_forward::Forwards;
use crate::udp::RECV_BATCH;

use super::{DECOMPRESSED_BYTES, Drained, GRO_BUFFER, Pipes, RECEIVE_BYTES};

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
            ReceiveOn::Interface | ReceiveOn::Carrier(_) | ReceiveOn::FakeTcp => {
                pipes.udp.interface()
            }
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
                        self.forwards.push(pipes.udp, to, range, max_segments);
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
