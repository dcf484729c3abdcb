//! The bootstrap list changed while the node runs (a reload): members
//! added to it are admitted and greeted as at start; one whose endpoint
//! changed and that we have not met yet is dialled at the new endpoint
//! at once (its handshake was retrying toward the old one); members
//! taken off it are no longer greeted as bootstrap members. Sessions are
//! not touched: a member we met stays a member, whatever the list says,
//! until it leaves as any member does; one we never met is removed with
//! its peer.

use std::collections::HashMap;
use std::net::SocketAddr;

use fjord_proto::PublicKey;

use super::{Bootstrap, Mesh, MeshAction};

/// What [`Mesh::set_bootstrap`] changed, for the reload's summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BootstrapChange {
    pub added: usize,
    pub removed: usize,
    /// Bootstrap members whose configured endpoint changed.
    pub moved: usize,
}

impl BootstrapChange {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

impl Mesh {
    /// Replaces the bootstrap list with `bootstrap`.
    pub fn set_bootstrap(&mut self, bootstrap: Vec<Bootstrap>) -> BootstrapChange {
        let mut change = BootstrapChange::default();
        let old: HashMap<PublicKey, SocketAddr> = self
            .config
            .bootstrap
            .iter()
            .map(|b| (b.key, b.endpoint))
            .collect();
        for entry in &bootstrap {
            if entry.key == self.own_key() {
                continue;
            }
            match old.get(&entry.key) {
                None => {
                    change.added += 1;
                    self.bootstrap.insert(entry.key);
                    self.actions.push_back(MeshAction::Admit {
                        key: entry.key,
                        addresses: Vec::new(),
                        endpoint: Some(entry.endpoint),
                    });
                    if !self.members.contains_key(&entry.key) {
                        self.greet(entry.key);
                    }
                }
                Some(endpoint) if *endpoint != entry.endpoint => {
                    change.moved += 1;
                    // A member we met is where it was heard from; only
                    // one still unmet needs pointing at the new address.
                    if !self.members.contains_key(&entry.key) {
                        self.actions.push_back(MeshAction::Connect {
                            key: entry.key,
                            endpoints: vec![entry.endpoint],
                        });
                        self.greet(entry.key);
                    }
                }
                Some(_) => {}
            }
        }
        for key in old.keys() {
            if bootstrap.iter().any(|entry| entry.key == *key) {
                continue;
            }
            change.removed += 1;
            self.bootstrap.remove(key);
            if !self.members.contains_key(key) {
                self.greeted.remove(key);
                self.actions.push_back(MeshAction::Remove { key: *key });
            }
        }
        self.config.bootstrap = bootstrap;
        change
    }
}
