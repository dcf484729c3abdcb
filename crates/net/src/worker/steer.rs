//! The worker's steered sockets (`steering.rs`): opened for peer
//! endpoints that a handshake proved and for port prediction hits,
//! watched with the worker's poll, and closed once no peer uses their
//! endpoint.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;
use std::time::Instant;

use fjord_proto::{Endpoint, Event, PeerStatus};
use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::{STEERED, Worker};
use crate::steering::MAX_STEERED;
use crate::udp::UdpSocket;

impl Worker {
    /// The endpoint an event proved (where a handshake just completed,
    /// or where a peer's authenticated datagrams now come from), with our
    /// address they arrive at.
    pub(super) fn proven_endpoint(&self, event: &Event) -> Option<Endpoint> {
        let peer = match *event {
            Event::HandshakeCompleted { peer, .. }
            | Event::EndpointChanged { peer, .. }
            | Event::LocalAddressChanged { peer } => peer,
            _ => return None,
        };
        endpoint_of(&self.node.device().peer_status(peer)?)
    }

    /// A port prediction socket is readable: if the member it aimed at
    /// answered, it carries that member's traffic from now on. Returns
    /// its steering slot.
    pub(super) fn prediction_hit(&mut self, token: Token) -> Option<usize> {
        let hit = self.prediction.readable(token, self.poll.registry())?;
        tracing::info!(endpoint = %hit.from, port = hit.transport.port(), "port prediction met a member; its traffic leaves from this port");
        let slot = self.steer(hit.from, hit.transport);
        if slot.is_none() {
            tracing::warn!("too many endpoints steered; this member stays relayed");
        }
        slot
    }

    /// Sends what goes to `endpoint` through `transport` from now on, and
    /// receives what arrives on it; its steering slot, `None` when every
    /// slot is in use.
    fn steer(&mut self, endpoint: SocketAddr, transport: UdpSocket) -> Option<usize> {
        let fd = transport.as_raw_fd();
        let slot = self.udp.steering_mut().insert(endpoint, transport)?;
        if let Err(error) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(STEERED + slot),
            Interest::READABLE,
        ) {
            tracing::warn!(%error, %endpoint, "could not watch a steered socket");
        }
        Some(slot)
    }

    /// Gives a peer endpoint that a handshake proved a socket of its own,
    /// connected to it on the interface's port (see steering.rs): a flood
    /// on the interface's socket cannot crowd its datagrams out. Past
    /// `MAX_STEERED`, or if the socket cannot be opened, the endpoint
    /// shares the interface's socket as before.
    /// A connected socket bound to another of our addresses than the one
    /// the peer now reaches us at is replaced: replies leave from the
    /// address the peer sent to. A port prediction socket stays: the NAT
    /// mapping that lets the member's datagrams in is its port's.
    pub(super) fn connect_endpoint(&mut self, Endpoint { remote, local }: Endpoint) {
        let steering = self.udp.steering();
        let keep = |socket: &UdpSocket| !socket.is_connected() || socket.bound_local() == local;
        match steering.slot_of(remote) {
            Some(slot) if steering.get(slot).is_some_and(keep) => return,
            Some(slot) => self.unsteer(slot),
            None if steering.len() >= MAX_STEERED => return,
            None => {}
        }
        let endpoint = remote;
        match UdpSocket::connected(self.udp.port(), remote, local, self.fwmark) {
            Ok(transport) => {
                if self.steer(endpoint, transport).is_some() {
                    tracing::debug!(%endpoint, "peer endpoint has a socket of its own");
                }
            }
            Err(error) => {
                tracing::debug!(%error, %endpoint, "no socket of its own for a peer endpoint");
            }
        }
    }

    /// Connected sockets for every peer with a session (after the
    /// interface's socket moved to another port, closing the old ones).
    pub(super) fn connect_sessions(&mut self) {
        let device = self.node.device();
        let endpoints: Vec<Endpoint> = device
            .peer_ids()
            .filter(|id| device.peer_has_session(*id))
            .filter_map(|id| endpoint_of(&device.peer_status(id)?))
            .collect();
        for endpoint in endpoints {
            self.connect_endpoint(endpoint);
        }
    }

    /// Opens a port prediction round the mesh asked for.
    pub(super) fn start_prediction(&mut self, now: Instant, toward: &[SocketAddr]) {
        let opened = self.prediction.start(
            now,
            toward,
            fjord_mesh::PUNCH_TTL,
            &fjord_mesh::PUNCH_DATAGRAM,
            self.fwmark,
            self.poll.registry(),
        );
        tracing::debug!(opened, ?toward, "port prediction round");
    }

    /// Closes steered sockets whose endpoint no peer uses any more (the
    /// peer left, or moved) once nothing waits in them
    /// ([`closable`](crate::steering::Steering::closable)), and
    /// prediction rounds that had their time.
    pub(super) fn tidy_steering(&mut self, now: Instant) {
        self.prediction.expire(now, self.poll.registry());
        if self.udp.steering().is_empty() {
            return;
        }
        let device = self.node.device();
        let used: HashSet<SocketAddr> = device
            .peer_ids()
            .filter_map(|id| device.peer_status(id)?.endpoint)
            .collect();
        for slot in self.udp.steering().closable(&used) {
            self.unsteer(slot);
        }
    }

    /// Closes a steered socket; its endpoint's datagrams go through the
    /// interface's socket again.
    fn unsteer(&mut self, slot: usize) {
        if let Some(socket) = self.udp.steering().get(slot) {
            let _ = self
                .poll
                .registry()
                .deregister(&mut SourceFd(&socket.as_raw_fd()));
        }
        self.udp.steering_mut().remove(slot);
    }

    /// The host's addresses changed (`ip addr del`, DHCP, a roaming
    /// laptop): a source address kept for a peer, or a steered socket
    /// bound to one, that the host no longer has is dropped, so the very
    /// next datagram leaves from the route's choice instead of failing
    /// (IPv4) or leaving from an address no reply can reach (IPv6). The
    /// peer's next datagram says which address it reaches us at now.
    pub(super) fn addresses_changed(&mut self) {
        let local = match crate::host_addresses::local_addresses() {
            Ok(local) => local,
            Err(error) => {
                tracing::debug!(%error, "cannot list the host's addresses after a change");
                return;
            }
        };
        let is_gone = |ip: std::net::IpAddr| !local.contains(&ip);
        let stale = self.udp.steering().bound_to_gone(is_gone);
        for &slot in &stale {
            self.unsteer(slot);
        }
        let forgotten = self.node.device_mut().forget_local_addresses(is_gone);
        if forgotten > 0 || !stale.is_empty() {
            tracing::debug!(
                peers = forgotten,
                sockets = stale.len(),
                "source addresses the host no longer has were dropped"
            );
        }
    }
}

fn endpoint_of(status: &PeerStatus) -> Option<Endpoint> {
    Some(Endpoint::new(status.endpoint?, status.local_address))
}
