//! Which abandoned handshakes get a warning: the first after a peer was
//! last reachable; later ones, until it answers, only a debug line.
//!
//! A peer that is down for good, with traffic or a persistent keepalive
//! toward it, starts a round of handshake attempts and abandons it every
//! two minutes or so for as long as it stays down (simulated: nine rounds
//! in 20 minutes with a 25 s keepalive). A warning per round would fill
//! the log of a mesh with a few dead members with the same news; when a
//! peer last completed a handshake is always in `fjord show`.

use std::collections::HashSet;
use std::hash::Hash;

/// Peers warned about since they last completed a handshake; `P` names a
/// peer (its public key, so a removed peer's slot reused by another does
/// not inherit the silence).
#[derive(Debug)]
pub struct UnansweredLog<P> {
    warned: HashSet<P>,
}

impl<P> Default for UnansweredLog<P> {
    fn default() -> Self {
        Self {
            warned: HashSet::new(),
        }
    }
}

impl<P: Hash + Eq> UnansweredLog<P> {
    /// A round of handshake attempts toward `peer` went unanswered:
    /// whether this one deserves a warning.
    pub fn abandoned(&mut self, peer: P) -> bool {
        self.warned.insert(peer)
    }

    /// `peer` completed a handshake: its next unanswered round warns again.
    pub fn answered(&mut self, peer: &P) {
        self.warned.remove(peer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dead_peer_warns_once_until_it_answers() {
        let (dead, other) = ("dead", "other");
        let mut log = UnansweredLog::default();
        let warnings: Vec<bool> = (0..9).map(|_| log.abandoned(dead)).collect();
        assert_eq!(
            warnings,
            [true, false, false, false, false, false, false, false, false]
        );
        // Another peer's first silence is news of its own.
        assert!(log.abandoned(other));
        // Back for a while, then down again: a new warning.
        log.answered(&dead);
        assert!(log.abandoned(dead));
        assert!(!log.abandoned(dead));
        // An answer from a peer never warned about changes nothing.
        log.answered(&"never silent");
        assert!(!log.abandoned(other));
    }
}
