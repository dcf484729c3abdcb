//! Egress: where a datagram leaves. Every send of the data path, the
//! relay and the control messages comes through here, and one function,
//! [`Egress::send_messages`] (with [`Egress::send`] for one datagram),
//! answers for each destination, in this order:
//!
//! ```text
//! datagram to D ─ a carrier whose far end is D? (carrier/) ─ yes: framed
//!    │                                                  into its stream
//!    └ no ─ a steered socket for D? (steering.rs) ─ yes: that socket,
//!              │                connected: without per-message addresses;
//!              │                an IPv4 one asked for another source:
//!              │                the interface's socket, same port
//!              └ no ─ the interface's socket
//! ```
//!
//! The sockets themselves (`udp.rs`) know nothing of each other; steering
//! and carriers only hold their sockets and connections. So the imports
//! point one way: egress → steering, carrier → udp.
//!
//! A node with no steered sockets and no carriers (most plain WireGuard
//! set-ups) pays two `is_empty` checks per send call.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

pub use fjord_sys::mmsg::GsoMessage;
use quinn_udp::RecvMeta;

use crate::carrier::Carriers;
use crate::stats::DataStats;
use crate::steering::Steering;
use crate::udp::{UdpError, UdpSocket, is_stale_source};

/// Most messages one [`Egress::send_messages`] call hands the kernel.
pub const SEND_BATCH: usize = 64;

/// The interface's socket, the sockets steered to single endpoints, and
/// the fallback carriers.
pub struct Egress {
    interface: UdpSocket,
    /// Sockets that carry what goes to one remote endpoint.
    steered: Steering,
    /// TCP (or fake-TCP) connections that carry what goes to one remote
    /// endpoint when UDP is blocked.
    carriers: Carriers,
}

/// What one [`Egress::send_or_wait`] call did.
pub enum Sent {
    /// The kernel took this many messages (at least one).
    Count(usize),
    /// Nothing yet: interrupted, or waited for room; call again.
    Again,
    /// The first message failed with this error (after three waits for
    /// room, a full buffer too): the caller decides its fate.
    Failed(io::Error),
}

impl Egress {
    /// Everything leaves through `interface` until sockets are steered or
    /// carriers open.
    pub fn new(interface: UdpSocket) -> Self {
        Self {
            interface,
            steered: Steering::default(),
            carriers: Carriers::default(),
        }
    }

    /// [`UdpSocket::bind`] the interface's socket.
    pub fn bind(port: u16, fwmark: u32) -> Result<Self, UdpError> {
        UdpSocket::bind(port, fwmark).map(Self::new)
    }

    /// The interface's socket moves to `interface` (another port): the
    /// steered sockets, on the old port, close; the carriers stay.
    pub(crate) fn rebind(&mut self, interface: UdpSocket) {
        self.interface = interface;
        self.steered = Steering::default();
    }

    pub fn interface(&self) -> &UdpSocket {
        &self.interface
    }

    pub fn port(&self) -> u16 {
        self.interface.port()
    }

    /// See [`UdpSocket::hand_to`].
    pub fn hand_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        self.interface.hand_to(uid, gid)
    }

    pub fn steering(&self) -> &Steering {
        &self.steered
    }

    pub fn steering_mut(&mut self) -> &mut Steering {
        &mut self.steered
    }

    /// The fallback carriers (carrier/).
    pub fn carriers(&self) -> &Carriers {
        &self.carriers
    }

    pub fn carriers_mut(&mut self) -> &mut Carriers {
        &mut self.carriers
    }

    /// The socket that UDP datagrams to `destination` leave through.
    pub(crate) fn route(&self, destination: SocketAddr) -> &UdpSocket {
        if self.steered.is_empty() {
            return &self.interface;
        }
        self.steered.find(destination).unwrap_or(&self.interface)
    }

    /// Sends one datagram to `destination` from our address `source`
    /// (`None`: the route's choice). Runs of datagrams go through
    /// [`Egress::send_messages`] instead, several GSO messages per call.
    pub fn send(
        &self,
        destination: SocketAddr,
        source: Option<IpAddr>,
        datagram: &[u8],
    ) -> io::Result<()> {
        if !self.carriers.is_empty() && self.carriers.send(destination, datagram) {
            return Ok(());
        }
        self.route(destination).send(destination, source, datagram)
    }

    /// Sends the first up to [`SEND_BATCH`] messages with one `sendmmsg`
    /// and returns how many the kernel took. An error is the first
    /// message's; a short count means the next one would have failed
    /// (send it again to learn why).
    pub fn send_messages(&self, messages: &[GsoMessage<'_>]) -> io::Result<usize> {
        let messages = &messages[..messages.len().min(SEND_BATCH)];
        let Some(first) = messages.first() else {
            return Ok(0);
        };
        if self.steered.is_empty() && self.carriers.is_empty() {
            return fjord_sys::mmsg::send_gso_messages(self.interface.as_fd(), messages);
        }
        // A run to a carrier is framed into its stream (what it cannot
        // take is dropped, never an error).
        let carried = self.carriers.send_messages(messages);
        if carried > 0 {
            return Ok(carried);
        }
        // One call per socket: the run of messages that leave through the
        // first one's; the caller comes back for the rest.
        let route = self.route(first.destination);
        let same = messages
            .iter()
            .take_while(|message| {
                std::ptr::eq(self.route(message.destination), route)
                    && !self.carriers.carries(message.destination)
            })
            .count();
        let run = &messages[..same];
        if route.sends_connected(run) {
            return fjord_sys::mmsg::send_gso_messages_connected(route.as_fd(), run);
        }
        // Messages with their own addresses are written for a dual-stack
        // socket: an IPv4 one (connected to an IPv4 endpoint) leaves them
        // to the interface's socket, on the same port.
        let socket = if route.is_dual_stack() {
            route
        } else {
            &self.interface
        };
        fjord_sys::mmsg::send_gso_messages(socket.as_fd(), run)
    }

    /// [`Egress::send_messages`], waiting up to 50 ms for room when the
    /// send buffer is full: back-pressure that TCP inside the tunnel
    /// should feel, rather than drops. `waits` counts the waits since the
    /// last progress.
    pub fn send_or_wait(&self, messages: &[GsoMessage<'_>], waits: &mut u8) -> Sent {
        match self.send_messages(messages) {
            Ok(sent) => {
                *waits = 0;
                Sent::Count(sent)
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock && *waits < 3 => {
                // The socket that was full: a peer's own socket when
                // steered. Waiting on the interface's socket instead
                // returned at once, and the run was dropped after three
                // empty waits.
                let full = messages
                    .first()
                    .map_or(&self.interface, |first| self.route(first.destination));
                fjord_sys::poll::wait_writable(full.as_fd(), std::time::Duration::from_millis(50));
                *waits += 1;
                Sent::Again
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => Sent::Again,
            Err(error) => {
                *waits = 0;
                Sent::Failed(error)
            }
        }
    }

    /// Sends one datagram, waiting briefly for socket space instead of
    /// dropping: a full send buffer is back-pressure that TCP inside the
    /// tunnel should feel. A source we no longer have is dropped and the
    /// send tried again from the route's choice. Returns whether it left;
    /// a failure is counted in `udp_send_errors`.
    pub fn send_blocking(
        &self,
        destination: SocketAddr,
        mut source: Option<IpAddr>,
        datagram: &[u8],
        stats: &mut DataStats,
    ) -> bool {
        for _ in 0..3 {
            match self.send(destination, source, datagram) {
                Ok(()) => return true,
                Err(error) if is_stale_source(&error, source) => source = None,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    // The socket that was full (see `send_or_wait`).
                    let full = self.route(destination);
                    fjord_sys::poll::wait_writable(
                        full.as_fd(),
                        std::time::Duration::from_millis(50),
                    );
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

    /// Changes the firewall mark on outgoing packets (0 = none), on every
    /// socket and carrier.
    pub fn set_mark(&self, fwmark: u32) -> io::Result<()> {
        for (_, steered) in self.steered.iter() {
            steered.set_mark(fwmark)?;
        }
        self.carriers.set_mark(fwmark)?;
        self.interface.set_mark(fwmark)
    }

    /// [`UdpSocket::set_ttl`] on every socket.
    pub fn set_ttl(&self, ttl: Option<u8>) -> io::Result<()> {
        for (_, steered) in self.steered.iter() {
            steered.set_ttl(ttl)?;
        }
        self.interface.set_ttl(ttl)
    }

    /// [`UdpSocket::set_fragmentation`] on every socket.
    pub fn set_fragmentation(&self, allowed: bool) -> io::Result<()> {
        for (_, steered) in self.steered.iter() {
            steered.set_fragmentation(allowed)?;
        }
        self.interface.set_fragmentation(allowed)
    }

    /// How many segments one GSO send may carry (1 = no GSO): the
    /// interface socket's offload decides for all.
    pub fn max_gso_segments(&self) -> usize {
        self.interface.max_gso_segments()
    }

    /// Turns GSO off for good after the kernel refused a segmented send
    /// (logged once).
    pub(crate) fn refuse_gso(&self, error: &io::Error) {
        self.interface.refuse_gso(error);
    }

    /// Largest datagram to `destination` that may go as a GSO segment.
    pub(crate) fn gso_segment_limit(&self, destination: SocketAddr) -> usize {
        self.route(destination).gso_segment_limit()
    }

    /// The route to `destination` took a smaller MTU than its socket
    /// learned at connect: back to segments that fit any 1,500-byte path.
    pub(crate) fn shrink_gso_segments(&self, destination: SocketAddr) {
        self.route(destination).shrink_gso_segments();
    }

    /// How many datagrams one GRO receive may coalesce (1 = no GRO).
    pub fn gro_segments(&self) -> usize {
        self.interface.gro_segments()
    }

    /// Receives from the interface's socket ([`UdpSocket::recv`]).
    pub fn recv(&self, buffers: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        self.interface.recv(buffers, meta)
    }
}

/// The interface's socket (what the worker polls as its UDP token).
impl AsFd for Egress {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.interface.as_fd()
    }
}

impl AsRawFd for Egress {
    fn as_raw_fd(&self) -> RawFd {
        self.interface.as_raw_fd()
    }
}

#[cfg(test)]
mod tests;
