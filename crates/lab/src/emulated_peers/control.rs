//! The emulator's control thread, inside the peers' namespace: it reads
//! what the responder sends the peers and runs their timers; in tunnel
//! mode it also owns the TUN device and carries packets both ways.
//!
//! ```text
//! loop (until stopped, waking at least every TIMER_TICK):
//!   every TIMER_TICK: each peer's due timers (retries, keepalives); note
//!     the thread's CPU time
//!   UDP readable: recvmmsg (GRO) ─ peer by the local address a datagram
//!     arrived at ─ its device (handshake responses, cookie replies,
//!     keepalives; data in tunnel mode, queued for the TUN where it lies)
//!     ─ what the device queued in reply goes out ─ queued packets are
//!     written to the TUN, same-flow ones merged (tunnel.rs's device)
//!   TUN readable (tunnel mode): see tunnel.rs
//! ```
//!
//! A datagram for an address that is no peer's, or that its peer's
//! device refuses, is dropped there (the device counts it); receive
//! errors other than "nothing waiting" are logged and the loop goes on.
//! Only a TUN device that disappeared ends the thread with an error.

use std::io::{self, IoSliceMut};
use std::net::IpAddr;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fjord_net::udp::RECV_BATCH;
use fjord_net::{DeviceKind, TunDevice};
use fjord_proto::{Endpoint, Received};
use fjord_sys::poll::wait_readable;
use fjord_sys::thread::thread_cpu_time;
use quinn_udp::RecvMeta;

use super::tunnel::Outbound;
use super::{
    EmulatorError, MTU, PEER_UNDERLAY_BASE, Shared, TRANSMIT_BUFFER_BYTES, index_of, io_error,
};
use crate::netns::Namespace;

/// How often timers run, and the longest the thread sleeps.
const TIMER_TICK: Duration = Duration::from_millis(50);
/// Room for one GRO-coalesced message.
const GRO_BUFFER: usize = 65_536;
/// `recvmmsg` calls per wake before the TUN side gets its turn.
const MAX_RECEIVES_PER_TURN: usize = 8;

/// The running control thread; dropping it stops it.
pub(super) struct ControlThread {
    stop: Arc<AtomicBool>,
    /// `None` once joined.
    handle: Option<JoinHandle<io::Result<()>>>,
}

impl ControlThread {
    /// Starts the thread in `namespace`, with a TUN device named `tunnel`
    /// if given (created there, before this returns).
    pub(super) fn spawn(
        namespace: &Namespace,
        shared: Arc<Shared>,
        tunnel: Option<&str>,
    ) -> Result<Self, EmulatorError> {
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = mpsc::channel();
        let tunnel = tunnel.map(str::to_string);
        let handle = namespace
            .spawn_thread({
                let stop = stop.clone();
                move || {
                    let tun = match tunnel
                        .map(|name| TunDevice::create(&name, DeviceKind::Tun, MTU, true))
                    {
                        None => None,
                        Some(Ok(device)) => Some(device),
                        Some(Err(error)) => return Err(io::Error::other(error.to_string())),
                    };
                    // The caller is gone only if the emulator is.
                    let _ = ready_tx.send(());
                    run(&shared, &stop, tun)
                }
            })
            .map_err(io_error("start the peer emulator's control thread"))?;
        let mut thread = Self {
            stop,
            handle: Some(handle),
        };
        if ready_rx.recv().is_err() {
            // It ended before it was ready; its result says why.
            thread.join()?;
            return Err(EmulatorError::Io {
                operation: "start the peer emulator's control thread".into(),
                source: io::Error::other("it ended before it was ready"),
            });
        }
        Ok(thread)
    }

    /// Stops the thread and returns how it ended.
    pub(super) fn stop(mut self) -> Result<(), EmulatorError> {
        self.stop.store(true, Ordering::Relaxed);
        self.join()
    }

    /// The thread's error if it has ended (a running thread is fine).
    pub(super) fn check(&mut self) -> Result<(), EmulatorError> {
        if self.handle.as_ref().is_some_and(JoinHandle::is_finished) {
            self.join()?;
        }
        Ok(())
    }

    fn join(&mut self) -> Result<(), EmulatorError> {
        let Some(handle) = self.handle.take() else {
            return Ok(());
        };
        handle
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("thread panicked")))
            .map_err(io_error("the peer emulator's control thread"))
    }
}

impl Drop for ControlThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.join();
    }
}

/// The thread's loop (see the module comment).
fn run(shared: &Shared, stop: &AtomicBool, tun: Option<TunDevice>) -> io::Result<()> {
    let mut inbound = Inbound::new();
    let mut tunnel = tun.map(|device| (device, Outbound::new()));
    let mut scratch = vec![0u8; TRANSMIT_BUFFER_BYTES];
    let mut next_tick = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now >= next_tick {
            run_timers(shared, now, &mut scratch);
            let cpu = u64::try_from(thread_cpu_time().as_nanos()).unwrap_or(u64::MAX);
            shared.control_cpu_nanos.store(cpu, Ordering::Relaxed);
            next_tick = now + TIMER_TICK;
        }
        let wait = Some(next_tick.saturating_duration_since(Instant::now()));
        let (udp_ready, tun_ready) = match &tunnel {
            Some((device, _)) => {
                let [udp, tun] = wait_readable([shared.socket.as_fd(), device.as_fd()], wait)?;
                (udp.is_ready(), tun.is_ready())
            }
            None => {
                let [udp] = wait_readable([shared.socket.as_fd()], wait)?;
                (udp.is_ready(), false)
            }
        };
        if udp_ready {
            inbound.drain(
                shared,
                tunnel.as_mut().map(|(device, _)| device),
                &mut scratch,
            )?;
        }
        if tun_ready && let Some((device, outbound)) = &mut tunnel {
            outbound.drain(shared, device, &mut scratch)?;
        }
    }
    Ok(())
}

/// Runs every peer's due timers and sends what they queued.
fn run_timers(shared: &Shared, now: Instant, scratch: &mut [u8]) {
    for index in 0..shared.peers.len() {
        let mut peer = shared.peer(index);
        if peer.device.poll_timeout().is_some_and(|due| due <= now) {
            peer.device.handle_timeout(now);
        }
        peer.send_queued(&shared.socket, scratch);
    }
}

/// The receive side: one area for a batch of GRO messages.
struct Inbound {
    storage: Vec<u8>,
    meta: [RecvMeta; RECV_BATCH],
}

impl Inbound {
    fn new() -> Self {
        Self {
            storage: vec![0; GRO_BUFFER * RECV_BATCH],
            meta: [RecvMeta::default(); RECV_BATCH],
        }
    }

    /// Receives until nothing waits (or for a few batches); hands each
    /// datagram to its peer's device and, with a TUN device, writes the
    /// data packets to it. Fails only when the TUN device is gone.
    fn drain(
        &mut self,
        shared: &Shared,
        mut tun: Option<&mut TunDevice>,
        scratch: &mut [u8],
    ) -> io::Result<()> {
        for _ in 0..MAX_RECEIVES_PER_TURN {
            let mut chunks = self.storage.chunks_exact_mut(GRO_BUFFER);
            let mut slices: [IoSliceMut<'_>; RECV_BATCH] =
                std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap_or_default()));
            let count = match shared.socket.recv(&mut slices, &mut self.meta) {
                Ok(count) => count,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) => {
                    tracing::debug!(%error, "the emulated peers' socket");
                    continue;
                }
            };
            let now = Instant::now();
            for message in 0..count {
                let meta = self.meta[message];
                let peer_index = match meta.dst_ip {
                    Some(IpAddr::V4(address)) => {
                        index_of(PEER_UNDERLAY_BASE, address, shared.peers.len())
                    }
                    _ => None,
                };
                let Some(peer_index) = peer_index else {
                    continue;
                };
                let from = Endpoint::new(meta.addr, meta.dst_ip);
                let stride = if meta.stride == 0 {
                    meta.len
                } else {
                    meta.stride
                };
                let base = message * GRO_BUFFER;
                let mut peer = shared.peer(peer_index);
                let mut offset = 0;
                while offset < meta.len {
                    let end = (offset + stride).min(meta.len);
                    let range = base + offset..base + end;
                    offset = end;
                    let received = peer.device.handle_datagram(
                        now,
                        from,
                        &mut self.storage[range.clone()],
                        &mut [],
                    );
                    if let (Received::Data { packet, .. }, Some(device)) =
                        (received, tun.as_deref_mut())
                    {
                        // The plaintext stays where it was opened until
                        // the flush: the storage is not reused before.
                        let start = range.start;
                        device.queue_write(&self.storage, start + packet.start..start + packet.end);
                        if !device.has_write_room() {
                            device.flush_writes(&mut self.storage)?;
                        }
                    }
                }
                peer.send_queued(&shared.socket, scratch);
            }
            if let Some(device) = tun.as_deref_mut() {
                device.flush_writes(&mut self.storage)?;
            }
        }
        Ok(())
    }
}
