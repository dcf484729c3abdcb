//! Carriers: TCP connections that carry a fjord peer's WireGuard datagrams
//! when UDP to it is blocked (the decisions are `fjord_mesh::fallback`'s;
//! this is their I/O).
//!
//! ```text
//! send: datagram to D ─ Egress::send / Egress::send_messages ─ a carrier
//!       whose far end is D? ─ no: UDP as always
//!                          └ yes: length-prefixed frames, one writev per batch;
//!                            what the kernel's small unsent queue refuses is
//!                            dropped (connection.rs)
//! receive: carrier readable ─ read ─ frames ─ GRO-shaped messages from the
//!       far end's address ─ Inbound::drain(.., ReceiveOn::Carrier(slot), ..),
//!       the same pipeline as UDP (replay, open, allowed IPs, TUN)
//! ```
//!
//! A carrier is keyed by its far end as this node sees it: the peer's
//! fallback port for connections we open, the peer's source address and
//! port for connections we accept. The node makes that address the
//! peer's endpoint, so routing by destination is all it takes; a node with
//! no carriers pays one `is_empty` check per send.
//!
//! Why real TCP and not TCP-shaped datagrams over raw sockets: a real
//! connection passes every firewall that lets TCP to the port through
//! (stateful ones included), needs no privileges or firewall rules of its
//! own, and its retransmissions are made harmless by never queueing:
//! datagrams are dropped, not delayed, when the connection backs up, and
//! BBR keeps the connection's rate on a lossy path. The lab's `loss`
//! suite (`fjord-fallback` beside `fjord` and `ssh -w`) measures the
//! result; docs/design.md has the figures.
//!
//! Failure handling: a connection that breaks, sends a stranger's
//! preamble, or (accepted) says nothing for [`ACCEPTED_SILENCE_LIMIT`] is
//! closed and reported, and the node decides what follows.

mod connection;
pub mod fake_tcp;
pub mod framing;
mod packing;
mod problem;

use std::io::{self, IoSliceMut};
use std::net::{Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use quinn_udp::RecvMeta;
use socket2::{Domain, Protocol, Socket, Type};

use connection::{Connection, SendOutcome};
pub use connection::{LinkState, UNSENT_LIMIT_BYTES};
pub use fake_tcp::{FakeTcp, FlowEvent};
pub use problem::{CarrierKind, CarrierProblem};

use fjord_sys::mmsg::GsoMessage;

/// Most carrier connections at once (ours and accepted).
pub const MAX_CARRIERS: usize = 64;
/// An accepted connection that sends nothing for this long is closed: a
/// carried peer handshakes over it at least every 15 s (after each
/// unanswered UDP probe), so only a dead or idle stranger stays silent.
pub const ACCEPTED_SILENCE_LIMIT: Duration = Duration::from_secs(60);
/// An accepted connection must send its preamble within this time, and
/// so must the far end of ours once it opened (a fjord listener sends it
/// at once; fake TCP answers a SYN and then never does).
pub const INTRODUCTION_LIMIT: Duration = Duration::from_secs(10);

/// Counters of all carriers, for `fjord show`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CarrierStats {
    pub datagrams_sent: u64,
    /// Datagrams dropped because a carrier could not take them (backed
    /// up, still connecting, or broken).
    pub datagrams_dropped: u64,
    pub datagrams_received: u64,
    pub connections_opened: u64,
    pub connections_accepted: u64,
    /// Accepted connections turned away: no room, a stranger's preamble,
    /// or silence.
    pub connections_refused: u64,
}

/// What became of a connection the worker was told is writable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Writable {
    /// Our connection to this address just opened.
    Connected(SocketAddr),
    /// Our connection to this address failed to open, for this reason
    /// (`ConnectionRefused`: nothing listens there).
    Failed(SocketAddr, io::ErrorKind),
    /// Nothing new (the backlog went out, or still connecting).
    Nothing,
}

/// The listener and the connections, in stable slots (a slot is the
/// connection's poll token offset).
#[derive(Default)]
pub struct Carriers {
    listener: Option<mio::net::TcpListener>,
    /// Each connection is locked by one send or receive at a time, all on
    /// the worker thread (never contended); the locks let sends go through
    /// the shared `&Egress` as UDP sends do, and keep the transport
    /// `Sync` for the lab's peer emulator, which shares one across threads.
    slots: Vec<Option<Mutex<Connection>>>,
    len: usize,
    stats: Mutex<CarrierStats>,
    /// The fake-TCP carrier, when the interface uses it instead of TCP
    /// connections (`fake_tcp/`).
    fake: Option<Mutex<FakeTcp>>,
    /// Whether the fake-TCP carrier has a flow, kept by [`Carriers::with_fake`]:
    /// every send asks whether a carrier might take it, and while UDP
    /// works (nearly always) the answer must not cost a lock.
    fake_has_flows: AtomicBool,
}

/// What [`Carriers::connect`] started.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    /// A TCP connection in this slot: the worker watches it, and learns
    /// the outcome when it becomes writable.
    Stream(usize),
    /// A fake-TCP flow: the outcome comes as a [`FlowEvent`].
    Fake,
}

impl Carriers {
    pub fn is_empty(&self) -> bool {
        self.len == 0 && !self.fake_has_flows.load(Ordering::Relaxed)
    }

    /// The carrier this node uses: fake TCP once [`Carriers::use_fake_tcp`]
    /// was called, TCP connections otherwise.
    pub fn kind(&self) -> CarrierKind {
        if self.fake.is_some() {
            CarrierKind::FakeTcp
        } else {
            CarrierKind::Tcp
        }
    }

    /// Whether `remote` is the far end of a carrier, and if so whether the
    /// far end opened it (accepted) or we did.
    pub fn accepted(&self, remote: SocketAddr) -> Option<bool> {
        if let Some(accepted) = self.with_fake(|fake| fake.accepted(remote)).flatten() {
            return Some(accepted);
        }
        let slot = self.find(remote)?;
        self.get(slot)
            .map(|connection| connection.held().is_accepted())
    }

    /// Runs `work` on the fake-TCP carrier, if there is one, and notes
    /// whether it has flows afterwards.
    fn with_fake<R>(&self, work: impl FnOnce(&mut FakeTcp) -> R) -> Option<R> {
        let mut fake = self.fake.as_ref()?.held();
        let result = work(&mut fake);
        self.fake_has_flows
            .store(!fake.is_empty(), Ordering::Relaxed);
        Some(result)
    }

    /// Carries with fake TCP (raw sockets) instead of TCP connections,
    /// listening on `listen_port` if given. Call before any connect.
    pub fn use_fake_tcp(&mut self, listen_port: Option<u16>, fwmark: u32) -> io::Result<()> {
        self.fake = Some(Mutex::new(FakeTcp::open(listen_port, fwmark)?));
        Ok(())
    }

    /// The fake-TCP carrier's raw socket (polled by the worker) and its
    /// ports (whose outgoing resets must be dropped), if it is in use.
    pub fn fake_tcp(&self) -> Option<(RawFd, Vec<u16>)> {
        let fake = self.fake.as_ref()?.held();
        Some((fake.fd(), fake.ports()))
    }

    /// Receives from the fake-TCP carrier, like a UDP socket's `recv`.
    pub fn recv_fake(
        &self,
        now: Instant,
        buffers: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let received = self
            .with_fake(|fake| fake.recv(now, buffers, meta))
            .unwrap_or_else(|| Err(io::ErrorKind::WouldBlock.into()));
        if let Ok(messages) = received {
            self.count_received(&meta[..messages]);
        }
        received
    }

    /// What became of a fake-TCP flow since the last call.
    pub fn poll_fake_event(&self) -> Option<FlowEvent> {
        self.with_fake(FakeTcp::poll_event).flatten()
    }

    /// Timers of the fake-TCP flows (SYNs again, silent flows closed);
    /// about once a second.
    pub fn tick(&self, now: Instant) {
        self.with_fake(|fake| fake.tick(now));
    }

    /// Closes the carrier to `remote`: the slot of a TCP connection (for
    /// the worker to stop watching and remove), `None` for a fake-TCP
    /// flow (closed here) or nothing there.
    pub fn close(&mut self, remote: SocketAddr) -> Option<usize> {
        if self.with_fake(|fake| fake.close(remote)) == Some(true) {
            return None;
        }
        self.find(remote)
    }

    /// Listens for carrier connections on TCP `port` (all addresses, both
    /// families); the listener is polled by the worker.
    pub fn listen(&mut self, port: u16, fwmark: u32) -> io::Result<()> {
        let socket = Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))?;
        socket.set_only_v6(false)?;
        socket.set_reuse_address(true)?;
        socket.set_nonblocking(true)?;
        if fwmark != 0 {
            socket.set_mark(fwmark)?;
        }
        socket.bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())?;
        socket.listen(128)?;
        self.listener = Some(mio::net::TcpListener::from_std(socket.into()));
        Ok(())
    }

    /// The listener's port, if listening.
    pub fn listen_port(&self) -> Option<u16> {
        let listener = self.listener.as_ref()?;
        listener.local_addr().ok().map(|address| address.port())
    }

    pub fn listener_fd(&self) -> Option<RawFd> {
        self.listener.as_ref().map(AsRawFd::as_raw_fd)
    }

    pub fn stats(&self) -> CarrierStats {
        *self.stats.held()
    }

    fn count(&self, change: impl FnOnce(&mut CarrierStats)) {
        let mut stats = *self.stats.held();
        change(&mut stats);
        *self.stats.held() = stats;
    }

    /// Slots in use, with their far ends.
    pub fn slots(&self) -> impl Iterator<Item = (usize, SocketAddr)> + '_ {
        self.slots.iter().enumerate().filter_map(|(slot, entry)| {
            entry
                .as_ref()
                .map(|connection| (slot, connection.held().remote()))
        })
    }

    pub fn fd(&self, slot: usize) -> Option<RawFd> {
        self.get(slot)
            .map(|connection| connection.held().as_raw_fd())
    }

    fn get(&self, slot: usize) -> Option<&Mutex<Connection>> {
        self.slots.get(slot)?.as_ref()
    }

    /// The slot of the connection to or from `remote`.
    pub fn find(&self, remote: SocketAddr) -> Option<usize> {
        self.slots.iter().position(|entry| {
            entry
                .as_ref()
                .is_some_and(|connection| connection.held().remote() == remote)
        })
    }

    fn insert(&mut self, connection: Connection) -> Option<usize> {
        if self.len >= MAX_CARRIERS {
            return None;
        }
        self.len += 1;
        let entry = Some(Mutex::new(connection));
        if let Some(slot) = self.slots.iter().position(Option::is_none) {
            self.slots[slot] = entry;
            return Some(slot);
        }
        self.slots.push(entry);
        Some(self.slots.len() - 1)
    }

    /// Starts connecting to `remote`. A connection to `remote` that
    /// exists already is kept.
    pub fn connect(
        &mut self,
        now: Instant,
        remote: SocketAddr,
        fwmark: u32,
    ) -> io::Result<Opening> {
        if let Some(connected) = self.with_fake(|fake| fake.connect(now, remote, fwmark)) {
            connected?;
            self.count(|stats| stats.connections_opened += 1);
            return Ok(Opening::Fake);
        }
        if let Some(slot) = self.find(remote) {
            return Ok(Opening::Stream(slot));
        }
        let connection = Connection::connect(now, remote, fwmark)?;
        let slot = self
            .insert(connection)
            .ok_or_else(|| io::Error::other("too many carrier connections"))?;
        self.count(|stats| stats.connections_opened += 1);
        Ok(Opening::Stream(slot))
    }

    /// Takes one waiting connection from the listener: its slot and far
    /// end; `None` when none waits. A connection without room is closed.
    pub fn accept(&mut self, now: Instant, fwmark: u32) -> Option<io::Result<(usize, SocketAddr)>> {
        let listener = self.listener.as_ref()?;
        let (stream, remote) = match listener.accept() {
            Ok(accepted) => accepted,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => return None,
            Err(error) => return Some(Err(error)),
        };
        let connection = Connection::accepted(now, stream, remote, fwmark);
        let remote = connection.remote();
        match self.insert(connection) {
            Some(slot) => {
                self.count(|stats| stats.connections_accepted += 1);
                Some(Ok((slot, remote)))
            }
            None => {
                self.count(|stats| stats.connections_refused += 1);
                Some(Err(io::Error::other(format!(
                    "refused a carrier connection from {remote}: {MAX_CARRIERS} open"
                ))))
            }
        }
    }

    /// Closes the connection in `slot`: its far end, and what it showed
    /// about the far end's settings (`Connection::problem`).
    pub fn remove(&mut self, slot: usize) -> Option<(SocketAddr, Option<CarrierProblem>)> {
        let connection = self.slots.get_mut(slot)?.take()?;
        self.len -= 1;
        let connection = connection
            .into_inner()
            .unwrap_or_else(PoisonError::into_inner);
        Some((connection.remote(), connection.problem()))
    }

    /// The connection in `slot` can take writes: finish connecting, or
    /// send what waited.
    pub fn writable(&self, slot: usize) -> Writable {
        let Some(cell) = self.get(slot) else {
            return Writable::Nothing;
        };
        let mut connection = cell.held();
        if connection.state() == LinkState::Connecting {
            let remote = connection.remote();
            return match connection.finish_connect() {
                Ok(true) => Writable::Connected(remote),
                Ok(false) => Writable::Nothing,
                Err(error) => {
                    tracing::debug!(%error, %remote, "carrier connection failed");
                    Writable::Failed(remote, error.kind())
                }
            };
        }
        connection.flush();
        Writable::Nothing
    }

    /// Receives from the connection in `slot`, like a UDP socket's
    /// `recv` (see `Connection::recv`).
    pub fn recv(
        &self,
        slot: usize,
        buffers: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let Some(cell) = self.get(slot) else {
            return Err(io::ErrorKind::WouldBlock.into());
        };
        let received = cell.held().recv(buffers, meta);
        if let Ok(messages) = received {
            self.count_received(&meta[..messages]);
        }
        received
    }

    fn count_received(&self, messages: &[RecvMeta]) {
        let datagrams: usize = messages
            .iter()
            .map(|meta| meta.len.div_ceil(meta.stride.max(1)))
            .sum();
        self.count(|stats| stats.datagrams_received += datagrams as u64);
    }

    /// Whether datagrams to `destination` go through a carrier.
    pub fn carries(&self, destination: SocketAddr) -> bool {
        !self.is_empty()
            && (self.route(destination).is_some()
                || self.fake_has_flows.load(Ordering::Relaxed)
                    && self.with_fake(|fake| fake.carries(destination)) == Some(true))
    }

    fn route(&self, destination: SocketAddr) -> Option<&Mutex<Connection>> {
        self.slots.iter().flatten().find(|connection| {
            let connection = connection.held();
            connection.remote() == destination && connection.state() != LinkState::Closed
        })
    }

    /// Sends one datagram through the carrier to `destination`; `false` if
    /// none goes there.
    pub fn send(&self, destination: SocketAddr, datagram: &[u8]) -> bool {
        self.send_datagrams(destination, std::iter::once(datagram))
    }

    /// Sends the leading messages that go to the same carrier as the first
    /// one; how many messages that was (0: the first is not carried).
    pub fn send_messages(&self, messages: &[GsoMessage<'_>]) -> usize {
        let Some(first) = messages.first() else {
            return 0;
        };
        let run = messages
            .iter()
            .take_while(|message| message.destination == first.destination)
            .count();
        let datagrams = messages[..run].iter().flat_map(|message| {
            message.pieces.iter().flat_map(move |piece| {
                let segment = message.segment_size.map_or(piece.len(), usize::from);
                piece.chunks(segment.max(1))
            })
        });
        if self.send_datagrams(first.destination, datagrams) {
            run
        } else {
            0
        }
    }

    /// Sends `datagrams` through the carrier to `destination`, dropping
    /// what it cannot take; `false` if no carrier goes there.
    fn send_datagrams<'a>(
        &self,
        destination: SocketAddr,
        datagrams: impl Iterator<Item = &'a [u8]>,
    ) -> bool {
        if let Some(cell) = self.route(destination) {
            let outcome = cell.held().send(datagrams);
            self.record(outcome);
            return true;
        }
        if !self.fake_has_flows.load(Ordering::Relaxed) {
            return false;
        }
        let Some((sent, dropped)) = self
            .with_fake(|fake| fake.send(destination, datagrams))
            .flatten()
        else {
            return false;
        };
        self.record(SendOutcome { sent, dropped });
        true
    }

    fn record(&self, outcome: SendOutcome) {
        self.count(|stats| {
            stats.datagrams_sent += outcome.sent;
            stats.datagrams_dropped += outcome.dropped;
        });
    }

    /// Connections to close now: broken ones, those (ours or accepted)
    /// whose far end never introduced itself, and accepted ones that went
    /// silent. Call about once a second.
    pub fn expired(&mut self, now: Instant) -> Vec<usize> {
        let mut expired = Vec::new();
        for (slot, entry) in self.slots.iter().enumerate() {
            let Some(cell) = entry else { continue };
            let mut connection = cell.held();
            let silent = now.saturating_duration_since(connection.silent_since(now));
            let unintroduced = connection.was_open()
                && !connection.introduced()
                && now.saturating_duration_since(connection.opened()) >= INTRODUCTION_LIMIT;
            let refused =
                connection.is_accepted() && (unintroduced || silent >= ACCEPTED_SILENCE_LIMIT);
            if refused {
                let mut stats = *self.stats.held();
                stats.connections_refused += 1;
                *self.stats.held() = stats;
            }
            if refused || unintroduced || connection.state() == LinkState::Closed {
                expired.push(slot);
            }
        }
        expired
    }

    /// Marks what the listener and every connection send (0 = none).
    pub fn set_mark(&self, fwmark: u32) -> io::Result<()> {
        if let Some(listener) = &self.listener {
            socket2::SockRef::from(listener).set_mark(fwmark)?;
        }
        for connection in self.slots.iter().flatten() {
            socket2::SockRef::from(&*connection.held()).set_mark(fwmark)?;
        }
        Ok(())
    }

    /// Whether the connection in `slot` has closed (its far end went away,
    /// or it broke the framing).
    pub fn is_closed(&self, slot: usize) -> bool {
        self.get(slot)
            .is_some_and(|connection| connection.held().state() == LinkState::Closed)
    }
}

#[cfg(test)]
mod tests;

/// Locks a carrier's state; a lock poisoned by a panic elsewhere is still
/// usable (the state is counters and sockets, valid at every step).
trait Held<T> {
    fn held(&self) -> MutexGuard<'_, T>;
}

impl<T> Held<T> for Mutex<T> {
    fn held(&self) -> MutexGuard<'_, T> {
        self.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
