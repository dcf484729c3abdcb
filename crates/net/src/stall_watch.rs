//! Which peers are stalled: packets have waited for them, with none of
//! them leaving, for [`STALLED_AFTER`]. Packets wait for a peer only while
//! it has no session, and leave all at once when one comes (or are
//! dropped when the handshake is given up), so a queue found non-empty at
//! every look is a queue nothing left from. Each stall gets one warning,
//! and one line when its packets leave again. (Bytes sent to the peer are
//! no sign of life here: handshake initiations count in them.)
//!
//! The worker looks once a second (its housekeeping), so a stall is told
//! within a second of reaching [`STALLED_AFTER`]. Packets wait for a peer
//! while no session exists: a handshake that goes unanswered (a dead peer,
//! a wrong key, a blocked port) or that cannot even be sent. Without this
//! the first sign was the 90 s "no handshake response" line, and nothing
//! at all while the handshake kept being retried.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// How long packets may wait with nothing leaving before the peer counts
/// as stalled: a handshake is retried every 5 s, so a healthy peer that
/// lost one initiation is answered within that.
pub const STALLED_AFTER: Duration = Duration::from_secs(6);

/// What changed for one peer at a look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stall {
    /// Stalled for this long: warn (once per stall).
    Began(Duration),
    /// Traffic left again after a stall that was warned about.
    Ended,
}

#[derive(Debug, Default)]
struct Progress {
    /// Since when packets have waited with nothing leaving.
    waiting_since: Option<Instant>,
    warned: bool,
}

/// Per peer (`P`: its public key), since when packets wait for it.
#[derive(Debug)]
pub struct StallWatch<P> {
    peers: HashMap<P, Progress>,
}

impl<P> Default for StallWatch<P> {
    fn default() -> Self {
        Self {
            peers: HashMap::new(),
        }
    }
}

impl<P: Hash + Eq> StallWatch<P> {
    /// One look at `peer`: `queued` packets wait for it.
    pub fn observe(&mut self, peer: P, now: Instant, queued: usize) -> Option<Stall> {
        let progress = self.peers.entry(peer).or_default();
        if queued == 0 {
            progress.waiting_since = None;
            return std::mem::take(&mut progress.warned).then_some(Stall::Ended);
        }
        let since = *progress.waiting_since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        if waited >= STALLED_AFTER && !progress.warned {
            progress.warned = true;
            return Some(Stall::Began(waited));
        }
        None
    }

    /// Forgets peers for which `keep` is false (removed from the device).
    pub fn retain(&mut self, keep: impl Fn(&P) -> bool) {
        self.peers.retain(|peer, _| keep(peer));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn packets_waiting_with_nothing_leaving_warn_once() {
        let start = Instant::now();
        let mut watch = StallWatch::default();
        let mut warnings = Vec::new();
        for second in 0..30 {
            if let Some(stall) = watch.observe("peer", start + secs(second), 3) {
                warnings.push((second, stall));
            }
        }
        assert_eq!(warnings, [(6, Stall::Began(secs(6)))]);
    }

    #[test]
    fn a_queue_that_empties_is_no_stall_and_ends_one() {
        let start = Instant::now();
        let mut watch = StallWatch::default();
        // Packets that wait a moment for a handshake, again and again.
        for second in 0..20 {
            let queued = usize::from(second % 3 != 0);
            assert_eq!(watch.observe("slow", start + secs(second), queued), None);
        }
        for second in 0..=6 {
            watch.observe("stuck", start + secs(second), 1);
        }
        assert_eq!(
            watch.observe("stuck", start + secs(7), 0),
            Some(Stall::Ended)
        );
        assert_eq!(watch.observe("stuck", start + secs(8), 0), None);
        // A new stall warns again.
        for second in 9..15 {
            assert_eq!(watch.observe("stuck", start + secs(second), 2), None);
        }
        assert_eq!(
            watch.observe("stuck", start + secs(15), 2),
            Some(Stall::Began(secs(6)))
        );
    }

    #[test]
    fn removed_peers_are_forgotten() {
        let start = Instant::now();
        let mut watch = StallWatch::default();
        watch.observe("gone", start, 1);
        watch.observe("kept", start, 1);
        watch.retain(|peer| *peer == "kept");
        assert_eq!(watch.peers.len(), 1);
    }
}
