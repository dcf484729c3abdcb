//! [`Node`]: the WireGuard device plus cryptokey routing and, when
//! enabled, the fjord mesh. Outgoing packets go to the peer whose allowed
//! IPs hold the destination (longest prefix); incoming packets are
//! delivered only if their source lies in the allowed IPs of the peer
//! that sent them. In switch mode (`switching.rs`) Ethernet frames go by
//! MAC address instead. Still sans-I/O: same call order as
//! [`fjord_proto::Device`], which it wraps; the mesh's control messages
//! and peer changes ride on those same calls (see `membership.rs`).
//!
//! What comes out, after each turn of input, through two calls that
//! both take the caller's `now` (the node keeps no clock of its own):
//!
//! ```text
//! poll_transmit(now, buf) ─▶ Transmit: a datagram written into buf
//!     relayed datagrams, the device's messages, NAT punches (ttl),
//!     path MTU probes (dont_fragment)
//! poll_event(now) ─▶ NodeEvent, in this order:
//!     Device(Event)          handshakes, endpoints, keys (after the mesh
//!                            and the fallback have seen them)
//!     ModeMismatch           a peer in the other mode, once per peer
//!     Refused(Refusal)       a member refused our certificate
//!     PredictPorts(toward)   a port prediction round to open
//!     Carrier(command)       a fallback carrier to open or close
//!     TunPacket(reply)       an ICMP "too big" reply for the TUN
//! ```
//!
//! Both run the pumps first (device events into the mesh and the
//! fallback, their actions back into the device). A driver drains
//! transmits, then events, each until `None`, after every turn of input;
//! transmits caused by what it does for an event wait for its next turn.

mod fallback;
mod firewall;
mod membership;
mod on_demand;
mod pmtu;
mod switching;
mod too_big;

pub use fallback::CarrierCommand;
pub use membership::{PUNCH_DATAGRAM, PUNCH_TTL};
pub use on_demand::MAX_HELD_PACKETS;
pub use switching::{InnerLayout, ModeMismatch, PeerSends};

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use fjord_proto::extension::Recipient;
use fjord_proto::ip::IpHeader;
use fjord_proto::{
    DATA_HEADROOM, Device, DeviceError, DropCounters, DropReason, Endpoint, Event, Incoming,
    Opened, Outgoing, PeerConfig, PeerId, Received, Sent, Transmit,
};

use crate::allowed_ips::AllowedIps;
use crate::cidr::Cidr;
use crate::membership::Refusal;

/// What a [`Node`] asks of its driver besides sending datagrams, from
/// [`Node::poll_event`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeEvent {
    /// Something the device did (a handshake, a moved endpoint, erased
    /// keys), for the log; the mesh and the fallback have seen it.
    Device(Event),
    /// The first packet from a peer that runs in the other mode
    /// (`switching.rs`): log it.
    ModeMismatch(ModeMismatch),
    /// A member refused this node's certificate (see
    /// `membership/refusals.rs`): tell the operator.
    Refused(Refusal),
    /// A port prediction round to run: open
    /// [`PREDICTION_SOCKETS`](crate::membership::PREDICTION_SOCKETS)
    /// sockets, punch from each at every endpoint given (as punches from
    /// [`Node::poll_transmit`] are sent), and let one that hears from one
    /// of their addresses carry the traffic to the endpoint it heard from.
    PredictPorts(Vec<SocketAddr>),
    /// A fallback carrier connection to open or close.
    Carrier(CarrierCommand),
    /// An ICMP "fragmentation needed" / "packet too big" reply for an
    /// inner sender, to write into the TUN device as it is (at most
    /// [`fjord_proto::icmp::MAX_REPLY_LEN`] bytes; see `too_big.rs`).
    TunPacket(Vec<u8>),
}

pub struct Node {
    device: Device,
    routes: AllowedIps<PeerId>,
    /// The prefixes each peer owns in `routes`, so one peer's routes can be
    /// cleared without walking everyone's (`wg setconf` clears every peer's).
    owned: HashMap<PeerId, HashSet<Cidr>>,
    drops: DropCounters,
    /// The fjord mesh, when the interface is a member of one.
    mesh: Option<membership::MeshDriver>,
    /// Device events the mesh or the fallback has seen, waiting for
    /// `poll_event` (without either, events stay in the device until then).
    seen_events: VecDeque<Event>,
    /// Per peer (by `PeerId::index`), the largest inner packet its path
    /// carries; `usize::MAX` (or no entry) for no limit.
    path_limits: Vec<usize>,
    too_big_replies: too_big::TooBigReplies,
    /// The UDP fallback, once a peer has a fallback port (`fallback.rs`).
    fallback: Option<Box<fallback::FallbackDriver>>,
    /// Switch mode's MAC table, when the interface is a switch.
    switch: Option<switching::Switch>,
    mismatches: switching::Mismatches,
    /// The network's policy enforced on packets, while one is in force
    /// (`firewall.rs`).
    firewall: Option<Box<crate::firewall::Firewall>>,
    /// Groups given to configured peers, which puts them inside the policy.
    peer_groups: HashMap<PeerId, Vec<crate::cert::Group>>,
    /// A lowered cap of each peer's flow shares (tests).
    flows_per_peer: Option<usize>,
}

impl Node {
    pub fn new(device: Device) -> Self {
        Self {
            device,
            routes: AllowedIps::new(),
            owned: HashMap::new(),
            drops: DropCounters::default(),
            mesh: None,
            seen_events: VecDeque::new(),
            path_limits: Vec::new(),
            too_big_replies: too_big::TooBigReplies::default(),
            fallback: None,
            switch: None,
            mismatches: switching::Mismatches::default(),
            firewall: None,
            peer_groups: HashMap::new(),
            flows_per_peer: None,
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut Device {
        &mut self.device
    }

    /// Adds a peer and routes `allowed_ips` to it (taking them from any
    /// other peer that had them, as WireGuard does).
    pub fn add_peer(
        &mut self,
        config: PeerConfig,
        allowed_ips: &[Cidr],
    ) -> Result<PeerId, DeviceError> {
        let id = self.device.add_peer(config)?;
        for cidr in allowed_ips {
            self.add_allowed_ip(id, *cidr);
        }
        Ok(id)
    }

    pub fn remove_peer(&mut self, id: PeerId) {
        self.firewall_forget(id);
        self.peer_groups.remove(&id);
        self.forget_path(id);
        self.forget_on_demand(id);
        self.fallback_forget(id);
        self.forget_switch_peer(id);
        self.clear_allowed_ips(id);
        self.owned.remove(&id);
        self.device.remove_peer(id);
    }

    /// Removes every peer and route at once (`replace_peers`).
    pub fn remove_all_peers(&mut self) {
        self.routes = AllowedIps::new();
        self.owned.clear();
        self.firewall_forget_all();
        self.peer_groups.clear();
        let ids: Vec<PeerId> = self.device.peer_ids().collect();
        for id in ids {
            self.forget_path(id);
            self.forget_on_demand(id);
            self.fallback_forget(id);
            self.forget_switch_peer(id);
            self.device.remove_peer(id);
        }
    }

    /// Every route, grouped by peer, in one pass over the table.
    pub fn allowed_ips_by_peer(&self) -> HashMap<PeerId, Vec<Cidr>> {
        let mut grouped: HashMap<PeerId, Vec<Cidr>> = std::collections::HashMap::new();
        self.routes
            .for_each(|cidr, peer| grouped.entry(peer).or_default().push(cidr));
        grouped
    }

    /// Routes `cidr` to `id`, taking it from its previous owner.
    pub fn add_allowed_ip(&mut self, id: PeerId, cidr: Cidr) {
        let network = cidr.network();
        if let Some(previous) = self.routes.insert(network, id)
            && previous != id
            && let Some(prefixes) = self.owned.get_mut(&previous)
        {
            prefixes.remove(&network);
        }
        self.owned.entry(id).or_default().insert(network);
    }

    /// Removes every allowed IP of `id`.
    pub fn clear_allowed_ips(&mut self, id: PeerId) {
        for network in self.owned.remove(&id).unwrap_or_default() {
            self.routes.remove(network);
        }
    }

    /// `id`'s prefixes, sorted.
    pub fn allowed_ips(&self, id: PeerId) -> Vec<Cidr> {
        let mut prefixes: Vec<Cidr> = self.owned.get(&id).into_iter().flatten().copied().collect();
        prefixes.sort();
        prefixes
    }

    pub fn route(&self, destination: &std::net::IpAddr) -> Option<PeerId> {
        self.routes.lookup(destination)
    }

    /// Drop counters of the device and of routing together.
    pub fn drops(&self) -> DropCounters {
        let mut total = self.device.drops().clone();
        total.add(&self.drops);
        total
    }

    /// Routes and seals the TUN packet at `buf[DATA_HEADROOM..][..len]`:
    /// [`Node::prepare_tun_packet`] and the seal back to back.
    #[inline]
    pub fn handle_tun_packet(&mut self, now: Instant, buf: &mut [u8], len: usize) -> Sent {
        match self.prepare_tun_packet(now, buf, len) {
            Outgoing::Ready {
                len,
                destination,
                source,
                seal,
            } => match seal.seal(buf) {
                Ok(()) => Sent::Sealed {
                    len,
                    destination,
                    source,
                },
                Err(_) => Sent::Dropped(DropReason::BufferTooSmall),
            },
            Outgoing::Done(sent) => sent,
        }
    }

    /// The first phase of sending a TUN packet (in switch mode, a TAP
    /// frame at `buf[inner_layout().offset..]`): routes it and does the
    /// protocol work; the caller runs the seal (see [`Outgoing`]).
    #[inline]
    pub fn prepare_tun_packet(&mut self, now: Instant, buf: &mut [u8], len: usize) -> Outgoing<'_> {
        if self.switch.is_some() {
            return self.prepare_frame(now, buf, len);
        }
        match self.route_packet(buf, len) {
            Some(peer) => {
                if let Some(reason) = self.police_outbound(now, peer, buf, len) {
                    return Outgoing::Done(Sent::Dropped(reason));
                }
                if let Some(held) = self.hold_for_session(now, peer, buf, len) {
                    return Outgoing::Done(held);
                }
                if len > self.path_limit(peer)
                    && let Some(dropped) = self.too_big(now, peer, buf, len)
                {
                    return Outgoing::Done(dropped);
                }
                self.device.prepare_encapsulate(now, peer, buf, len)
            }
            None => Outgoing::Done(Sent::Dropped(DropReason::NoRoute)),
        }
    }

    /// The peer whose allowed IPs hold the packet's destination (counted
    /// as a `NoRoute` drop when none does).
    fn route_packet(&mut self, buf: &[u8], len: usize) -> Option<PeerId> {
        let destination = buf
            .get(DATA_HEADROOM..DATA_HEADROOM + len)
            .and_then(|packet| IpHeader::parse(packet).ok())
            .map(|header| header.destination);
        let peer = destination.and_then(|address| self.routes.lookup(&address));
        if peer.is_none() {
            self.drops.count(DropReason::NoRoute);
        }
        peer
    }

    /// Opens a datagram in place and applies the allowed-IPs source check:
    /// the three phases back to back. A packet that came compressed lands
    /// in `decompressed` (see [`Device::finish_datagram`]).
    #[inline]
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        datagram: &mut [u8],
        decompressed: &mut [u8],
    ) -> Received {
        let from = from.into();
        match self.prepare_datagram(now, from, datagram) {
            Incoming::Data(pending) => {
                let opened = pending.open(datagram);
                self.finish_datagram(now, from, opened, datagram, decompressed)
            }
            Incoming::Done(received) => received,
        }
    }

    /// The first phase of receiving; see [`Device::prepare_datagram`].
    /// Datagrams of pairs this node relays for are queued for
    /// `poll_transmit`; a driver that forwards them itself asks
    /// [`Node::relay_destination`] first and then calls
    /// [`Node::prepare_own_datagram`].
    #[inline]
    pub fn prepare_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        datagram: &mut [u8],
    ) -> Incoming<'_> {
        let from = from.into();
        if self.mesh.is_some() && self.relay(from.remote, datagram) {
            return Incoming::Done(Received::Control);
        }
        self.prepare_own_datagram(now, from, datagram)
    }

    /// [`Node::prepare_datagram`] for a datagram the caller knows is not
    /// one to relay (it asked [`Node::relay_destination`]).
    #[inline]
    pub fn prepare_own_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        datagram: &mut [u8],
    ) -> Incoming<'_> {
        let from = from.into();
        // A data message borrows the device until it is opened, so what
        // the other outcomes need is reached by field, beside that borrow.
        match self.device.prepare_datagram(now, from, datagram) {
            Incoming::Done(received) => {
                let refused = check_source(
                    &self.routes,
                    self.switch.as_mut(),
                    &mut self.mismatches,
                    &mut self.drops,
                    &received,
                );
                Incoming::Done(refused.map_or(received, Received::Dropped))
            }
            data => data,
        }
    }

    /// The last phase of receiving, with the allowed-IPs source check; call
    /// in arrival order. A packet that came compressed is decompressed
    /// into `decompressed`, at least the MTU long
    /// ([`Received::Decompressed`]).
    #[inline]
    pub fn finish_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        opened: Opened,
        datagram: &[u8],
        decompressed: &mut [u8],
    ) -> Received {
        let from = from.into();
        let received = self
            .device
            .finish_datagram(now, from, opened, datagram, decompressed);
        if let Received::Extension {
            peer,
            recipient,
            payload,
        } = received
        {
            // The device classified the kind (`fjord_proto::extension`);
            // only the recipient is left to call.
            return match recipient {
                Recipient::Switch => self.receive_frame(now, peer, payload, datagram),
                // The device keeps `Protocol` kinds; one would fail to
                // decode in the mesh and be counted there.
                Recipient::Membership | Recipient::PathMtu | Recipient::Protocol => {
                    self.handle_extension(now, from.remote, peer, recipient, &datagram[payload])
                }
            };
        }
        let refused = check_source(
            &self.routes,
            self.switch.as_mut(),
            &mut self.mismatches,
            &mut self.drops,
            &received,
        )
        .or_else(|| self.police_inbound(now, &received, datagram, decompressed));
        if refused.is_none()
            && let (Received::Data { peer, .. } | Received::Decompressed { peer, .. }, Some(driver)) =
                (&received, self.mesh.as_mut())
        {
            driver.on_demand.note_used(*peer, now);
        }
        refused.map_or(received, Received::Dropped)
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.device.handle_timeout(now);
        self.firewall_timeout(now);
        // The fallback first: its actions (and the device events they
        // cause) reach the mesh's pump below in the same call.
        self.fallback_timeout(now);
        self.mesh_timeout(now);
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            self.device.poll_timeout(),
            self.mesh_deadline(),
            self.fallback_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// The next datagram to send, written into `buf`, whatever produced
    /// it: relayed datagrams, the device's messages, NAT-traversal
    /// punches ([`Transmit::ttl`]) and path MTU probes
    /// ([`Transmit::dont_fragment`]). Sends it causes are stamped `now`.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        self.pump_mesh(now);
        self.pump_fallback(now);
        self.poll_forward(buf)
            .or_else(|| self.device.poll_transmit(buf))
            .or_else(|| self.poll_held(buf))
            .or_else(|| self.poll_punch(buf))
            .or_else(|| self.poll_probe(buf))
    }

    /// The next thing for the driver to do or log besides sending, in the
    /// order of [`NodeEvent`]'s variants (each kind first in, first out);
    /// what the pumps it runs cause is stamped `now`.
    pub fn poll_event(&mut self, now: Instant) -> Option<NodeEvent> {
        self.pump_mesh(now);
        self.pump_fallback(now);
        // With a mesh or a fallback, a device event waits for their pump
        // (the next call's) so that each sees it first.
        let device_event = if self.mesh.is_some() || self.fallback.is_some() {
            self.seen_events.pop_front()
        } else {
            self.device.poll_event()
        };
        if let Some(event) = device_event {
            return Some(NodeEvent::Device(event));
        }
        if let Some(mismatch) = self.mismatches.pop() {
            return Some(NodeEvent::ModeMismatch(mismatch));
        }
        self.poll_mesh_event()
            .or_else(|| self.poll_carrier().map(NodeEvent::Carrier))
            .or_else(|| self.poll_tun_packet().map(NodeEvent::TunPacket))
    }
}

/// The allowed-IPs check of a received packet's source: why it is
/// refused (counted), if it is; on a switch, every IP packet is refused
/// (it comes from a peer in another mode). It reads the outcome where it
/// lies rather than taking and returning it: a copy of an outcome just
/// written stalls on the store buffer. A function of the fields it reads,
/// so the receive path can call it while a data message still borrows the
/// device.
#[inline]
fn check_source(
    routes: &AllowedIps<PeerId>,
    switch: Option<&mut switching::Switch>,
    mismatches: &mut switching::Mismatches,
    drops: &mut DropCounters,
    received: &Received,
) -> Option<DropReason> {
    let (Received::Data { peer, source, .. } | Received::Decompressed { peer, source, .. }) =
        received
    else {
        return None;
    };
    let refused = match switch {
        Some(switch) => Some(switching::ip_packet_on_switch(switch, mismatches, *peer)),
        None => (routes.lookup(source) != Some(*peer)).then_some(DropReason::SourceNotAllowed),
    };
    if let Some(reason) = refused {
        drops.count(reason);
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{device, peer_config};

    fn node() -> Node {
        Node::new(device())
    }

    fn peer(node: &mut Node, seed: u8, allowed: &[&str]) -> PeerId {
        let cidrs: Vec<Cidr> = allowed.iter().map(|c| c.parse().unwrap()).collect();
        node.add_peer(peer_config(seed), &cidrs).unwrap()
    }

    #[test]
    fn a_prefix_moves_to_its_newest_owner() {
        let mut node = node();
        let a = peer(&mut node, 2, &["198.19.0.0/24", "198.19.1.0/24"]);
        let b = peer(&mut node, 3, &["198.19.1.9/24"]);
        assert_eq!(node.allowed_ips(a), vec!["198.19.0.0/24".parse().unwrap()]);
        assert_eq!(node.allowed_ips(b), vec!["198.19.1.0/24".parse().unwrap()]);
        node.clear_allowed_ips(a);
        assert_eq!(node.route(&"198.19.1.5".parse().unwrap()), Some(b));
        assert_eq!(node.route(&"198.19.0.5".parse().unwrap()), None);
        node.remove_peer(b);
        assert_eq!(node.route(&"198.19.1.5".parse().unwrap()), None);
        assert!(node.allowed_ips(b).is_empty());
    }

    #[test]
    fn grouped_listing_matches_per_peer_listing() {
        let mut node = node();
        let a = peer(&mut node, 2, &["198.19.0.0/24", "fd00::/64"]);
        let b = peer(&mut node, 3, &["198.19.2.0/24"]);
        let grouped = node.allowed_ips_by_peer();
        for id in [a, b] {
            let mut listed = grouped.get(&id).cloned().unwrap_or_default();
            listed.sort();
            assert_eq!(listed, node.allowed_ips(id));
        }
    }
}
