//! The network's policy of who may reach whom, as this member holds it:
//! the highest valid version it was given. Every source of a policy (the
//! configuration file, a reload, another member by gossip,
//! `policy_transfer.rs`) offers it here, so a stale copy never replaces
//! a newer one.
//!
//! "Highest" is by [`PolicyId`]: the version, then the hash of the signed
//! text. Two texts signed with the same version should not exist, but if
//! an operator signs two, every member keeps the one with the higher hash
//! instead of whichever came first, so the mesh still agrees on one.
//!
//! A policy newly in force is announced at once (its digest to every
//! member in session), and its digest goes with every accepted Hello and
//! every periodic check, as the revocation digest does
//! (`revocations.rs`); `policy_transfer.rs` fetches what a digest offers.

use super::{Mesh, Trust};
use crate::control::{Control, PolicyId};
use crate::policy::SignedPolicy;

/// What became of an offered policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyOffer {
    /// It is the policy in force now.
    Applied { version: u64 },
    /// The same version is already in force; nothing changed.
    Unchanged { version: u64 },
    /// A higher version is in force and stays.
    Older { offered: u64, in_force: u64 },
    /// Another text signed with the same version is in force and stays
    /// (its hash is higher; every member keeps that one). Only a higher
    /// version replaces it.
    SameVersionKept { version: u64 },
}

/// The policy in force and its id (the hash is computed once).
pub(super) struct HeldPolicy {
    pub(super) signed: SignedPolicy,
    pub(super) id: PolicyId,
}

impl Mesh {
    /// Takes `policy` if it ranks above the one in force (or none is),
    /// and tells every member in session. Its signature was checked by
    /// whoever made the value.
    pub fn offer_policy(&mut self, policy: SignedPolicy) -> PolicyOffer {
        let offered = PolicyId::of(policy.policy.version(), policy.text());
        if let Some(held) = &self.policy {
            let in_force = held.id.version;
            if held.id == offered {
                return PolicyOffer::Unchanged { version: in_force };
            }
            if in_force > offered.version {
                return PolicyOffer::Older {
                    offered: offered.version,
                    in_force,
                };
            }
            if held.id > offered {
                return PolicyOffer::SameVersionKept { version: in_force };
            }
        }
        self.policy = Some(HeldPolicy {
            signed: policy,
            id: offered,
        });
        // A transfer of what we now hold, or of something older, is moot.
        if self
            .policy_transfer
            .as_ref()
            .is_some_and(|transfer| transfer.id() <= offered)
        {
            self.policy_transfer = None;
        }
        let direct: Vec<_> = self.direct_members().collect();
        for key in direct {
            self.send_policy_digest(key);
        }
        PolicyOffer::Applied {
            version: offered.version,
        }
    }

    /// The policy in force; `None`: everything is allowed.
    pub fn policy(&self) -> Option<&SignedPolicy> {
        self.policy.as_ref().map(|held| &held.signed)
    }

    /// Tells `to` which policy we hold (after its Hello, at every check,
    /// and when ours changes). Only a network key verifies a policy, so
    /// a mesh from a member list passes none on.
    pub(super) fn send_policy_digest(&mut self, to: fjord_proto::PublicKey) {
        if !matches!(self.config.trust, Trust::Network(_)) {
            return;
        }
        let Some(held) = &self.policy else {
            return;
        };
        // Bounded by MAX_POLICY_BYTES when it was verified.
        let len = u32::try_from(held.signed.text().len()).unwrap_or(u32::MAX);
        let digest = Control::PolicyDigest { id: held.id, len };
        self.send(to, &digest);
    }

    /// The periodic check's part for the policy: our digest to every
    /// member in session.
    pub(super) fn check_policy(&mut self) {
        let direct: Vec<_> = self.direct_members().collect();
        for key in direct {
            self.send_policy_digest(key);
        }
    }
}
