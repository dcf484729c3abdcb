//! The network's policy of who may reach whom, as this member holds it:
//! the highest valid version it was given. Every source of a policy (the
//! configuration file, a reload, later the gossip) offers it here, so a
//! stale copy never replaces a newer one.

use super::Mesh;
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
}

impl Mesh {
    /// Takes `policy` if its version is higher than the one in force (or
    /// none is). Its signature was checked by whoever made the value.
    pub fn offer_policy(&mut self, policy: SignedPolicy) -> PolicyOffer {
        let offered = policy.policy.version();
        match self.policy.as_ref().map(|held| held.policy.version()) {
            Some(in_force) if in_force > offered => PolicyOffer::Older { offered, in_force },
            Some(in_force) if in_force == offered => PolicyOffer::Unchanged { version: offered },
            _ => {
                self.policy = Some(policy);
                PolicyOffer::Applied { version: offered }
            }
        }
    }

    /// The policy in force; `None`: everything is allowed.
    pub fn policy(&self) -> Option<&SignedPolicy> {
        self.policy.as_ref()
    }
}
