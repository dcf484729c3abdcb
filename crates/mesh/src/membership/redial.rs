//! Joining when the bootstrap member comes up a moment after us: our
//! first initiation reaches a port nobody listens on yet, and WireGuard's
//! own retry would come only after REKEY_TIMEOUT (5 s). So until we know
//! any member, every unmet bootstrap member is dialled again each
//! [`REDIAL_INTERVAL`], [`REDIALS`] times: the device's retry takes over
//! after that. (Measured: members of a namespace test started together
//! met their bootstrap member 5 s late in about 1 start in 20.)

use std::time::{Duration, Instant};

use super::{Mesh, MeshAction};

pub const REDIAL_INTERVAL: Duration = Duration::from_secs(1);
/// Dials before the device's own retry, 5 s after the first initiation.
pub const REDIALS: u8 = 4;

#[derive(Debug, Clone, Copy)]
pub(super) struct BootstrapRedial {
    next: Option<Instant>,
    left: u8,
}

impl BootstrapRedial {
    pub(super) fn starting(now: Instant) -> Self {
        Self {
            next: Some(now + REDIAL_INTERVAL),
            left: REDIALS,
        }
    }
}

impl Mesh {
    pub(super) fn redial_deadline(&self) -> Option<Instant> {
        self.redial.next
    }

    pub(super) fn handle_redial(&mut self, now: Instant) {
        if self.redial.next.is_none_or(|next| now < next) {
            return;
        }
        let own = self.own_key();
        let unmet: Vec<MeshAction> = self
            .config
            .bootstrap
            .iter()
            .filter(|entry| entry.key != own && !self.members.contains_key(&entry.key))
            .map(|entry| MeshAction::Connect {
                key: entry.key,
                endpoints: vec![entry.endpoint],
            })
            .collect();
        if !self.members.is_empty() || unmet.is_empty() || self.redial.left == 0 {
            self.redial.next = None;
            return;
        }
        self.actions.extend(unmet);
        self.redial.left -= 1;
        self.redial.next = (self.redial.left > 0).then(|| now + REDIAL_INTERVAL);
    }
}
