//! How [`Node`] drives the [`Mesh`]: device events become mesh inputs,
//! mesh actions become peer-table changes, mesh messages are sealed into
//! the peers' sessions.
//!
//! ```text
//! datagram ─▶ Device ─▶ Received::Extension, by recipient (fjord_proto::extension):
//!                         Membership ─▶ Mesh::handle_control
//!                         PathMtu ─▶ the prober (pmtu.rs); Switch ─▶ switching.rs
//!                   └─▶ Event::HandshakeCompleted ─▶ Mesh::handle_session
//!                   └─▶ Event::UnknownPeerAdmitted ─▶ Mesh::handle_unverified
//! Mesh::poll_action  ─▶ add / route / confirm / remove peers
//! Mesh::poll_message ─▶ Device::send_extension ─▶ poll_transmit
//! MeshAction::Punch  ─▶ poll_transmit (low-TTL datagrams: Transmit::ttl)
//! MeshAction::PredictPorts ─▶ poll_event: NodeEvent::PredictPorts (the driver
//!                        opens sockets)
//! MeshAction::Connect ─▶ Device::initiate_toward
//! Event::EndpointChanged ─▶ Mesh::handle_path (a relayed member reached directly)
//! MeshAction::RelayBetween ─▶ RelayTable: datagrams of relayed pairs are
//!                        forwarded before the Device sees them
//! Mesh::poll_refusal ─▶ poll_event: NodeEvent::Refused (the driver logs it)
//! ```
//!
//! All of it runs inside the Node's own calls (`finish_datagram`,
//! `handle_timeout`, `poll_transmit`, `poll_event`), each stamped with the
//! `now` that call was given, so a driver that follows the Device's call
//! order drives the mesh without knowing it.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::Instant;

use fjord_proto::extension::Recipient;
use fjord_proto::{
    DropReason, Event, PeerConfig, PeerId, PresharedKey, PublicKey, Received, Transmit,
};

use super::{Node, NodeEvent};
use crate::cert::{Certificate, Revocation};
use crate::membership::{
    Bootstrap, BootstrapChange, MemberStatus, Mesh, MeshAction, MeshDrop, PolicyOffer,
};
use crate::pmtu::PathMtuTable;
use crate::policy::SignedPolicy;
use crate::relay::RelayTable;

/// What a punch datagram carries: nothing a receiver acts on (fjord and
/// WireGuard drop it as an unknown message type); it only makes the
/// sender's NAT expect packets from where it went.
pub const PUNCH_DATAGRAM: [u8; 8] = *b"\x1ffjpunch";

/// TTL of punch datagrams: enough to pass our own NAT (the first router)
/// and die at the next router, before the far NAT.
pub const PUNCH_TTL: u8 = 2;

/// Most peers admitted on a valid handshake alone, waiting for their
/// certificate: bounds what a stranger who knows our public key can
/// make us hold.
pub const MAX_UNVERIFIED_PEERS: usize = 256;

pub(super) struct MeshDriver {
    pub(super) mesh: Mesh,
    /// Punch datagrams waiting for `poll_transmit`.
    punches: VecDeque<SocketAddr>,
    /// Port prediction rounds waiting for `poll_event`.
    predictions: VecDeque<Vec<SocketAddr>>,
    /// Pairs of members we relay for.
    relays: RelayTable,
    /// Relayed datagrams waiting for `poll_transmit`.
    forwards: VecDeque<(SocketAddr, Vec<u8>)>,
    /// Peers the mesh created or confirmed, so only these lose their
    /// routes when a certificate changes and are removed when a member
    /// goes. Configured peers keep theirs.
    pub(super) managed: HashSet<PeerId>,
    /// Held packets and idle sessions (`on_demand.rs`).
    pub(super) on_demand: super::on_demand::OnDemand,
    /// Each member's path MTU search (`pmtu.rs`).
    pub(super) pmtu: PathMtuTable,
    /// Sealed probes waiting for `poll_transmit`.
    pub(super) probes: VecDeque<(SocketAddr, Option<std::net::IpAddr>, Vec<u8>)>,
}

impl Node {
    /// Makes this node a member of `mesh`'s network: unconfigured fjord
    /// members may handshake with it and must then present a certificate.
    pub fn enable_mesh(&mut self, now: Instant, mesh: Mesh) {
        self.device
            .set_unknown_peer_limit(Some(MAX_UNVERIFIED_PEERS));
        self.mesh = Some(MeshDriver {
            mesh,
            punches: VecDeque::new(),
            predictions: VecDeque::new(),
            relays: RelayTable::default(),
            forwards: VecDeque::new(),
            managed: HashSet::new(),
            on_demand: Default::default(),
            pmtu: PathMtuTable::new(self.device.mtu()),
            probes: VecDeque::new(),
        });
        self.pump_mesh(now);
    }

    pub fn mesh(&self) -> Option<&Mesh> {
        self.mesh.as_ref().map(|driver| &driver.mesh)
    }

    /// The mesh's members with the peer's session state, for `fjord show`.
    pub fn members(&self) -> Vec<(MemberStatus, bool)> {
        let Some(driver) = self.mesh.as_ref() else {
            return Vec::new();
        };
        driver
            .mesh
            .members()
            .map(|member| {
                let session = self
                    .device
                    .peer_id(&member.key)
                    .is_some_and(|id| self.device.peer_has_session(id));
                (member, session)
            })
            .collect()
    }

    /// The mesh's part of `poll_event`: a member's refusal of this node's
    /// certificate, then a port prediction round.
    pub(super) fn poll_mesh_event(&mut self) -> Option<NodeEvent> {
        let driver = self.mesh.as_mut()?;
        if let Some(refusal) = driver.mesh.poll_refusal() {
            return Some(NodeEvent::Refused(refusal));
        }
        driver.predictions.pop_front().map(NodeEvent::PredictPorts)
    }

    /// Offers the network's policy given locally (the configuration file
    /// or a reload), and announces it to the members in session if it
    /// comes into force; `None` when the interface is no mesh member.
    pub fn offer_policy(&mut self, now: Instant, policy: SignedPolicy) -> Option<PolicyOffer> {
        let offer = self.mesh.as_mut()?.mesh.offer_policy(policy);
        self.pump_mesh(now);
        Some(offer)
    }

    /// Adds a revocation given locally (a reload re-read the file) and
    /// spreads it; members it covers go.
    pub fn revoke(&mut self, now: Instant, revocation: Revocation) -> Result<(), MeshDrop> {
        let Some(driver) = self.mesh.as_mut() else {
            return Ok(());
        };
        let result = driver.mesh.revoke(revocation);
        self.pump_mesh(now);
        result
    }

    /// Takes a renewed certificate of this node's own (a reload), telling
    /// every member in session; whether it was newer than the one in use.
    pub fn renew_certificate(
        &mut self,
        now: Instant,
        certificate: Certificate,
    ) -> Result<bool, MeshDrop> {
        let Some(driver) = self.mesh.as_mut() else {
            return Ok(false);
        };
        let result = driver.mesh.renew_certificate(now, certificate);
        self.pump_mesh(now);
        self.firewall_identity_changed();
        result
    }

    /// Replaces the mesh's bootstrap list (a reload); see
    /// `membership/bootstrap.rs`. Nothing without a mesh.
    pub fn set_bootstrap(&mut self, now: Instant, bootstrap: Vec<Bootstrap>) -> BootstrapChange {
        let Some(driver) = self.mesh.as_mut() else {
            return BootstrapChange::default();
        };
        let change = driver.mesh.set_bootstrap(bootstrap);
        self.pump_mesh(now);
        change
    }

    /// Chooses the member named `name` as exit node, or none (a reload);
    /// the peer table follows at once. Nothing without a mesh.
    pub fn set_exit_node(&mut self, now: Instant, name: Option<String>) {
        if let Some(driver) = self.mesh.as_mut() {
            driver.mesh.set_exit_node(name);
        }
        self.pump_mesh(now);
    }

    /// Says Goodbye to the mesh (before shutting down); the messages leave
    /// through `poll_transmit`.
    pub fn leave_mesh(&mut self, now: Instant) {
        if let Some(driver) = self.mesh.as_mut() {
            driver.mesh.leave();
        }
        self.pump_mesh(now);
    }

    pub(super) fn handle_extension(
        &mut self,
        now: Instant,
        from: SocketAddr,
        peer: PeerId,
        recipient: Recipient,
        payload: &[u8],
    ) -> Received {
        let key = self.device.peer_public_key(peer).copied();
        let (Some(driver), Some(key)) = (self.mesh.as_mut(), key) else {
            self.drops.count(DropReason::UnsupportedExtension);
            return Received::Dropped(DropReason::UnsupportedExtension);
        };
        if recipient == Recipient::PathMtu {
            self.handle_path_mtu(now, peer, key, payload);
            self.pump_mesh(now);
            return Received::Control;
        }
        // A refused message is counted by the mesh (`MeshCounters`); it
        // has no place among WireGuard's drop reasons.
        let _ = driver.mesh.handle_control(now, key, from, payload);
        self.pump_mesh(now);
        Received::Control
    }

    pub(super) fn mesh_deadline(&self) -> Option<Instant> {
        let driver = self.mesh.as_ref()?;
        [
            driver.mesh.poll_timeout(),
            driver.pmtu.poll_timeout(),
            driver.on_demand.deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub(super) fn mesh_timeout(&mut self, now: Instant) {
        let Some(driver) = self.mesh.as_mut() else {
            return;
        };
        if driver
            .mesh
            .poll_timeout()
            .is_some_and(|deadline| deadline <= now)
        {
            driver.mesh.handle_timeout(now);
        }
        if driver
            .pmtu
            .poll_timeout()
            .is_some_and(|deadline| deadline <= now)
        {
            driver.pmtu.handle_timeout(now);
        }
        self.pump_mesh(now);
    }

    /// Moves device events into the mesh (and on to `poll_event`), then
    /// the mesh's actions and messages into the device, stamped `now`.
    pub(super) fn pump_mesh(&mut self, now: Instant) {
        let Some(mut driver) = self.mesh.take() else {
            return;
        };
        while let Some(event) = self.device.poll_event() {
            self.fallback_observe(now, &event);
            match &event {
                Event::HandshakeCompleted { peer, .. } => {
                    if let Some(key) = self.device.peer_public_key(*peer).copied() {
                        driver.mesh.handle_session(now, key);
                        // On demand, only members in session are probed.
                        self.track_path(now, &mut driver, &key, *peer);
                    }
                    driver.pmtu.handle_session(now, *peer);
                    self.on_demand_session(now, &mut driver, *peer);
                }
                Event::UnknownPeerAdmitted { public_key, .. } => {
                    driver.mesh.handle_unverified(now, *public_key);
                }
                Event::EndpointChanged { peer, endpoint } => {
                    if let Some(key) = self.device.peer_public_key(*peer) {
                        driver.mesh.handle_path(*key, *endpoint);
                    }
                    Self::path_moved(now, &mut driver, *peer, *endpoint);
                }
                _ => {}
            }
            self.seen_events.push_back(event);
        }
        self.close_idle_sessions(now, &mut driver);
        while let Some(action) = driver.mesh.poll_action() {
            self.apply(now, &mut driver, action);
        }
        while let Some(outbound) = driver.mesh.poll_message() {
            if let Some(id) = self.device.peer_id(&outbound.to) {
                self.device.send_extension(id, now, &outbound.message);
            }
        }
        self.pump_path_mtu(now, &mut driver);
        self.mesh = Some(driver);
        self.sync_firewall(now);
    }

    fn apply(&mut self, now: Instant, driver: &mut MeshDriver, action: MeshAction) {
        match action {
            MeshAction::Admit {
                key,
                addresses,
                endpoint,
            } => {
                let Some(id) = self.admitted_peer(driver, key, endpoint) else {
                    return;
                };
                if driver.managed.contains(&id) {
                    self.clear_allowed_ips(id);
                }
                // Its certificate may name other groups now.
                self.firewall_forget(id);
                for cidr in addresses {
                    self.add_allowed_ip(id, cidr);
                }
                let has_endpoint = self
                    .device
                    .peer_status(id)
                    .is_some_and(|status| status.endpoint.is_some());
                if let (false, Some(endpoint)) = (has_endpoint, endpoint) {
                    self.device.set_peer_endpoint(id, endpoint);
                }
                self.track_path(now, driver, &key, id);
                self.fallback_member_admitted(id);
            }
            MeshAction::Remove { key } => {
                driver.relays.remove(&key);
                if let Some(id) = self.device.peer_id(&key) {
                    driver.pmtu.forget(id);
                    self.set_path_limit(id, None);
                    if driver.managed.remove(&id) || self.device.is_provisional(id) {
                        self.remove_peer(id);
                    }
                }
            }
            MeshAction::EndSessions { key } => {
                if let Some(id) = self.device.peer_id(&key) {
                    self.device.end_sessions(id);
                }
            }
            MeshAction::Punch { endpoints, .. } => driver.punches.extend(endpoints),
            MeshAction::PredictPorts { toward, .. } => driver.predictions.push_back(toward),
            MeshAction::Connect { key, endpoints } => {
                if let Some(id) = self.device.peer_id(&key) {
                    self.device.initiate_toward(id, now, &endpoints);
                }
            }
            MeshAction::RelayBetween { a, b } => {
                driver.relays.install(a, b);
            }
            MeshAction::UseRelay {
                key,
                relay_endpoint,
            } => {
                if let Some(id) = self.device.peer_id(&key) {
                    self.device.set_peer_endpoint(id, relay_endpoint);
                    self.device.initiate_toward(id, now, &[relay_endpoint]);
                }
            }
        }
    }

    /// A datagram we relay, if `from` is a side of a pair we relay for and
    /// `datagram` is theirs; it is queued for `poll_transmit`.
    pub(super) fn relay(&mut self, from: SocketAddr, datagram: &[u8]) -> bool {
        match self.relay_destination(from, datagram) {
            Some(to) => {
                if let Some(driver) = self.mesh.as_mut() {
                    driver.forwards.push_back((to, datagram.to_vec()));
                }
                true
            }
            None => false,
        }
    }

    /// Where to send `datagram`, received from `from`, if it is traffic of
    /// a pair we relay for (counted as relayed); `None` if it is for us.
    /// A driver that asks before [`Node::prepare_datagram`] forwards the
    /// datagram from where it was received, batched with the others,
    /// instead of through a copy in `poll_transmit`.
    #[inline]
    pub fn relay_destination(&mut self, from: SocketAddr, datagram: &[u8]) -> Option<SocketAddr> {
        let driver = self.mesh.as_mut()?;
        if driver.relays.is_empty() {
            return None;
        }
        driver.relays.route(from, datagram)
    }

    /// A relayed datagram waiting to leave, copied into `buf`.
    pub(super) fn poll_forward(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let driver = self.mesh.as_mut()?;
        let (destination, datagram) = driver.forwards.front()?;
        let out = buf.get_mut(..datagram.len())?;
        out.copy_from_slice(datagram);
        let transmit = Transmit {
            destination: *destination,
            source: None,
            len: datagram.len(),
            ttl: None,
            dont_fragment: false,
        };
        driver.forwards.pop_front();
        Some(transmit)
    }

    /// Datagrams this node relayed for other members.
    pub fn relayed_datagrams(&self) -> u64 {
        self.mesh
            .as_ref()
            .map_or(0, |driver| driver.relays.forwarded)
    }

    /// A punch datagram waiting to leave, written into `buf`, with the IP
    /// TTL (IPv6 hop limit) [`PUNCH_TTL`].
    pub(super) fn poll_punch(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let driver = self.mesh.as_mut()?;
        let out = buf.get_mut(..PUNCH_DATAGRAM.len())?;
        let destination = driver.punches.pop_front()?;
        out.copy_from_slice(&PUNCH_DATAGRAM);
        Some(Transmit {
            destination,
            source: None,
            len: PUNCH_DATAGRAM.len(),
            ttl: Some(PUNCH_TTL),
            dont_fragment: false,
        })
    }

    /// The peer for a member, created (or confirmed) if need be.
    fn admitted_peer(
        &mut self,
        driver: &mut MeshDriver,
        key: PublicKey,
        endpoint: Option<SocketAddr>,
    ) -> Option<PeerId> {
        if let Some(id) = self.device.peer_id(&key) {
            if self.device.is_provisional(id) {
                self.device.confirm_peer(id);
                driver.managed.insert(id);
            }
            return Some(id);
        }
        let config = PeerConfig {
            public_key: key,
            preshared_key: PresharedKey::zero(),
            endpoint,
            persistent_keepalive: None,
        };
        let id = self.add_peer(config, &[]).ok()?;
        driver.managed.insert(id);
        Some(id)
    }
}
