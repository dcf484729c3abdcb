//! Routes behind members, and the exit node.
//!
//! A member's certificate may name routes beyond its own addresses (a LAN
//! behind it). Every member routes those to it: they join its addresses
//! in the `Admit` action, so the peer table sends them there and accepts
//! them from there only. A default route (`0.0.0.0/0`, `::/0`) is
//! different: sending everything to every member that offers it would make
//! the last one admitted win, so a default route is routed only to the
//! member this node chose by name (`MeshConfig::exit_node`), and only while
//! that member's certificate names one.
//!
//! ```text
//! certificate (new member, renewal) ─┐
//! member gone (expiry, revocation,   ├─▶ refresh_exit: the chosen member,
//!   Goodbye, timeout)                │     if it changed: Admit for the
//! set_exit_node (a reload)          ─┘     old and the new one
//!                                      └─▶ routes_generation += 1, so the
//!                                          driver re-reads member_routes
//! ```
//!
//! Two members of one name both offering a default route: the one with
//! the lowest key serves, so every restart chooses the same.

use fjord_proto::PublicKey;

use super::{Mesh, MeshAction};
use crate::cert::Certificate;
use crate::cidr::Cidr;

/// What became of this node's choice of exit node, for `fjord show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitNodeStatus {
    /// No `ExitNode` configured.
    NotChosen,
    /// No member of that name is known (yet).
    Unknown { name: String },
    /// The member's certificate names no default route.
    NoDefaultRoute { name: String },
    /// Everything without a more specific route goes to `key`.
    Serving { name: String, key: PublicKey },
}

/// Whether `prefix` is a default route of its family.
pub fn is_default_route(prefix: &Cidr) -> bool {
    prefix.prefix_len() == 0
}

impl Mesh {
    /// What the peer table routes to the member `key` holding
    /// `certificate`: its addresses and routes, default routes only if it
    /// is our exit node.
    pub(super) fn routed_prefixes(&self, key: &PublicKey, certificate: &Certificate) -> Vec<Cidr> {
        let exit = self.exit == Some(*key);
        certificate
            .addresses
            .iter()
            .chain(
                certificate
                    .routes
                    .iter()
                    .filter(|route| exit || !is_default_route(route)),
            )
            .copied()
            .collect()
    }

    /// Chooses the exit node again after members or the choice changed,
    /// re-admitting the members that gain or lose the default route.
    pub(super) fn refresh_exit(&mut self) {
        let chosen = self.exit_candidate();
        if chosen == self.exit {
            return;
        }
        let old = std::mem::replace(&mut self.exit, chosen);
        for key in [old, chosen].into_iter().flatten() {
            if let Some(member) = self.members.get(&key) {
                self.actions.push_back(MeshAction::Admit {
                    key,
                    addresses: self.routed_prefixes(&key, &member.certificate),
                    endpoint: member.endpoints.first().copied(),
                });
            }
        }
        self.routes_changed();
    }

    fn exit_candidate(&self) -> Option<PublicKey> {
        let name = self.config.exit_node.as_deref()?;
        self.members
            .iter()
            .filter(|(_, member)| {
                member.certificate.name == name
                    && member.certificate.routes.iter().any(is_default_route)
            })
            .map(|(key, _)| *key)
            .min_by_key(|key| *key.as_bytes())
    }

    /// Chooses the member named `name` as exit node, or none (a reload
    /// changed `ExitNode`).
    pub fn set_exit_node(&mut self, name: Option<String>) {
        self.config.exit_node = name;
        self.refresh_exit();
        // The state shown changes even when the chosen member does not.
        self.routes_changed();
    }

    pub fn exit_node(&self) -> ExitNodeStatus {
        let Some(name) = self.config.exit_node.clone() else {
            return ExitNodeStatus::NotChosen;
        };
        if let Some(key) = self.exit {
            return ExitNodeStatus::Serving { name, key };
        }
        if self.members.values().any(|m| m.certificate.name == name) {
            ExitNodeStatus::NoDefaultRoute { name }
        } else {
            ExitNodeStatus::Unknown { name }
        }
    }

    /// Counts up whenever [`Self::member_routes`] may have changed, so a
    /// driver polling it rebuilds nothing while nothing changes.
    pub fn routes_generation(&self) -> u64 {
        self.routes_generation
    }

    /// The prefixes beyond members' own addresses that this node routes
    /// to members: every member's routes, the default ones of the exit
    /// node only. What the host routes into the interface.
    pub fn member_routes(&self) -> Vec<Cidr> {
        let mut routes: Vec<Cidr> = self
            .members
            .iter()
            .flat_map(|(key, member)| {
                let exit = self.exit == Some(*key);
                member
                    .certificate
                    .routes
                    .iter()
                    .filter(move |route| exit || !is_default_route(route))
            })
            .copied()
            .collect();
        routes.sort();
        routes.dedup();
        routes
    }

    pub(super) fn routes_changed(&mut self) {
        self.routes_generation += 1;
    }
}
