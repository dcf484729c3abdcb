//! How [`Node`] enforces the network's policy (`crate::firewall`): a
//! received packet is checked after the allowed-IPs source check, before
//! it is handed to the TUN device; a packet from the TUN device after it
//! is routed, before it is sealed. Without a policy in force there is no
//! firewall and each path pays one branch.
//!
//! The firewall follows the mesh: the policy in force (the configuration,
//! a reload or the gossip gave it) is read after every pump of the mesh,
//! and a peer's identity is asked for at its first packet: a member's
//! certificate, or the groups a `[Peer]` was given (`set_peer_groups`).
//! A plain peer without groups stays outside the policy. Switch mode
//! carries Ethernet frames, which the policy does not speak of: it runs
//! no firewall.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use fjord_proto::{DATA_HEADROOM, Device, DropReason, PeerId, Received};

use super::Node;
use super::membership::MeshDriver;
use crate::cert::{Certificate, Group};
use crate::cidr::Cidr;
use crate::firewall::{Direction, Firewall, FirewallReport, Identity, Scope};

impl Node {
    /// Puts a configured peer in `groups`, inside the policy: without
    /// groups (`None`), a peer that is no member stays outside it.
    pub fn set_peer_groups(&mut self, id: PeerId, groups: Option<Vec<Group>>) {
        match groups {
            Some(groups) => self.peer_groups.insert(id, groups),
            None => self.peer_groups.remove(&id),
        };
        self.firewall_forget(id);
    }

    /// The firewall's counters; `None` while no policy is in force.
    pub fn firewall_report(&self) -> Option<FirewallReport> {
        self.firewall.as_ref().map(|firewall| firewall.report())
    }

    /// The lowered cap of each peer's flow shares, for tests of the caps.
    pub fn set_flows_per_peer(&mut self, flows: usize) {
        self.flows_per_peer = Some(flows);
        if let Some(firewall) = self.firewall.as_deref_mut() {
            firewall.set_flows_per_side(flows);
        }
    }

    /// Starts or updates the firewall when the mesh's policy changed.
    pub(super) fn sync_firewall(&mut self, now: Instant) {
        if self.switch.is_some() {
            return;
        }
        let Some(signed) = self.mesh.as_ref().and_then(|driver| driver.mesh.policy()) else {
            return;
        };
        match self.firewall.as_deref_mut() {
            Some(firewall) if firewall.policy().version() == signed.policy.version() => {}
            Some(firewall) => firewall.set_policy(signed.policy.clone()),
            None => {
                let own = self
                    .mesh
                    .as_ref()
                    .map(|driver| driver.mesh.own_certificate());
                let mut firewall = Firewall::new(
                    signed.policy.clone(),
                    own.map(certificate_identity).unwrap_or_default(),
                    now,
                );
                if let Some(flows) = self.flows_per_peer {
                    firewall.set_flows_per_side(flows);
                }
                self.firewall = Some(Box::new(firewall));
            }
        }
    }

    /// This node's certificate was renewed: its groups may differ.
    pub(super) fn firewall_identity_changed(&mut self) {
        let own = self
            .mesh
            .as_ref()
            .map(|driver| driver.mesh.own_certificate());
        if let (Some(firewall), Some(own)) = (self.firewall.as_deref_mut(), own) {
            firewall.set_local(certificate_identity(own));
        }
    }

    pub(super) fn firewall_forget(&mut self, id: PeerId) {
        if let Some(firewall) = self.firewall.as_deref_mut() {
            firewall.forget_peer(id);
        }
    }

    pub(super) fn firewall_forget_all(&mut self) {
        if let Some(firewall) = self.firewall.as_deref_mut() {
            firewall.forget_all_peers();
        }
    }

    pub(super) fn firewall_timeout(&mut self, now: Instant) {
        if let Some(firewall) = self.firewall.as_deref_mut() {
            firewall.sweep(now);
        }
    }

    /// The outbound check of the routed TUN packet at
    /// `buf[DATA_HEADROOM..][..len]`: why it is dropped (counted), if it is.
    #[inline]
    pub(super) fn police_outbound(
        &mut self,
        now: Instant,
        peer: PeerId,
        buf: &[u8],
        len: usize,
    ) -> Option<DropReason> {
        let firewall = self.firewall.as_deref_mut()?;
        let packet = buf
            .get(DATA_HEADROOM..DATA_HEADROOM + len)
            .unwrap_or_default();
        let whom = Whom {
            device: &self.device,
            mesh: self.mesh.as_ref(),
            peer_groups: &self.peer_groups,
            owned: &self.owned,
        };
        if firewall.admits(now, Direction::Outbound, peer, packet, || whom.scope(peer)) {
            return None;
        }
        self.drops.count(DropReason::PolicyOutbound);
        Some(DropReason::PolicyOutbound)
    }

    /// The inbound check of a received packet (after the source check):
    /// why it is dropped (counted), if it is.
    #[inline]
    pub(super) fn police_inbound(
        &mut self,
        now: Instant,
        received: &Received,
        datagram: &[u8],
        decompressed: &[u8],
    ) -> Option<DropReason> {
        let firewall = self.firewall.as_deref_mut()?;
        let (peer, packet) = match received {
            Received::Data { peer, packet, .. } => (*peer, datagram.get(packet.clone())),
            Received::Decompressed { peer, packet, .. } => {
                (*peer, decompressed.get(packet.clone()))
            }
            _ => return None,
        };
        let whom = Whom {
            device: &self.device,
            mesh: self.mesh.as_ref(),
            peer_groups: &self.peer_groups,
            owned: &self.owned,
        };
        let packet = packet.unwrap_or_default();
        if firewall.admits(now, Direction::Inbound, peer, packet, || whom.scope(peer)) {
            return None;
        }
        self.drops.count(DropReason::PolicyInbound);
        Some(DropReason::PolicyInbound)
    }
}

/// What the node knows of a peer's identity, borrowed beside the
/// firewall.
struct Whom<'a> {
    device: &'a Device,
    mesh: Option<&'a MeshDriver>,
    peer_groups: &'a HashMap<PeerId, Vec<Group>>,
    owned: &'a HashMap<PeerId, HashSet<Cidr>>,
}

impl Whom<'_> {
    fn scope(&self, peer: PeerId) -> Scope {
        if let Some(groups) = self.peer_groups.get(&peer) {
            return Scope::Enforced(Identity {
                name: None,
                groups: groups.clone(),
                addresses: self
                    .owned
                    .get(&peer)
                    .into_iter()
                    .flatten()
                    .copied()
                    .collect(),
            });
        }
        let certificate = self.device.peer_public_key(peer).and_then(|key| {
            self.mesh
                .and_then(|driver| driver.mesh.member_certificate(key))
        });
        match certificate {
            Some(certificate) => Scope::Enforced(certificate_identity(certificate)),
            None => Scope::Exempt,
        }
    }
}

fn certificate_identity(certificate: &Certificate) -> Identity {
    Identity {
        name: Some(certificate.name.clone()),
        groups: certificate.groups.clone(),
        addresses: certificate.addresses.clone(),
    }
}
