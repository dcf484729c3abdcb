//! Log lines about peer endpoints that moved, at most one per peer per
//! [`QUIET_INTERVAL`]; the same limit, with a longer interval, keeps
//! other per-peer news to a line a minute (a member's refusal of our
//! certificate, [`EndpointLog::with_interval`]).
//!
//! A roaming peer moves now and then, and each move deserves a line. But
//! whoever sees a peer's datagrams on the way can send copies from another
//! address: a copy that arrives before its original is accepted (as in
//! WireGuard) and moves the endpoint there, and the original moves it
//! back. That can happen for every packet, so one line per move would let
//! an on-path sender fill the log. Moves inside the interval are counted
//! and the next line says how many there were; where the endpoint is now
//! is always in `fjord show`.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Shortest time between two lines about one peer's endpoint.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(10);

/// Peers remembered before the first sweep, which forgets those whose
/// last line is older than the interval (they would get a line at once
/// anyway).
const REMEMBERED_PEERS: usize = 1024;

/// When each peer's last line was written, and the moves not logged
/// since; `P` names a peer.
#[derive(Debug)]
pub struct EndpointLog<P> {
    /// Shortest time between two lines about one peer.
    interval: Duration,
    peers: HashMap<P, (Instant, u64)>,
    /// The size at which the next sweep runs: twice what the last one
    /// kept, so that when thousands of peers move within one interval
    /// (a NAT in front of many of them restarted) each sweep is paid for
    /// by as many new peers as it visits, and the worker never walks the
    /// whole map once per move.
    sweep_at: usize,
}

impl<P> Default for EndpointLog<P> {
    fn default() -> Self {
        Self::with_interval(QUIET_INTERVAL)
    }
}

impl<P> EndpointLog<P> {
    /// At most one line per peer per `interval`.
    pub fn with_interval(interval: Duration) -> Self {
        Self {
            interval,
            peers: HashMap::new(),
            sweep_at: REMEMBERED_PEERS,
        }
    }
}

impl<P: Hash + Eq> EndpointLog<P> {
    /// Something to tell about `peer` happened at `now` (its endpoint
    /// moved): `Some(occurrences not logged since the last line)` when this
    /// one gets a line, `None` when it is only counted.
    pub fn note(&mut self, peer: P, now: Instant) -> Option<u64> {
        if let Some((last_line, unlogged)) = self.peers.get_mut(&peer) {
            if now.saturating_duration_since(*last_line) < self.interval {
                *unlogged += 1;
                return None;
            }
            let before = std::mem::take(unlogged);
            *last_line = now;
            return Some(before);
        }
        if self.peers.len() >= self.sweep_at {
            let interval = self.interval;
            self.peers
                .retain(|_, (last_line, _)| now.saturating_duration_since(*last_line) < interval);
            self.sweep_at = (2 * self.peers.len()).max(REMEMBERED_PEERS);
        }
        self.peers.insert(peer, (now, 0));
        Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Flapping between two addresses every millisecond for a minute gives
    /// six lines, each counting the moves it stands for; another peer's
    /// first move is logged at once.
    #[test]
    fn a_flapping_endpoint_gets_a_line_per_interval_with_the_count() {
        let (flapping, roaming) = (1u32, 2u32);
        let mut log = EndpointLog::default();
        let start = Instant::now();
        let lines: Vec<(u64, u64)> = (0..60_000u64)
            .filter_map(|ms| {
                let logged = log.note(flapping, start + Duration::from_millis(ms))?;
                Some((ms, logged))
            })
            .collect();
        assert_eq!(
            lines,
            [
                (0, 0),
                (10_000, 9_999),
                (20_000, 9_999),
                (30_000, 9_999),
                (40_000, 9_999),
                (50_000, 9_999)
            ]
        );
        assert_eq!(log.note(roaming, start + Duration::from_secs(59)), Some(0));
    }

    /// A longer interval (refusals: a minute) counts the same way.
    #[test]
    fn another_interval_limits_lines_the_same_way() {
        let mut log = EndpointLog::with_interval(Duration::from_secs(60));
        let start = Instant::now();
        let lines: Vec<(u64, u64)> = (0..180u64)
            .step_by(5)
            .filter_map(|secs| Some((secs, log.note("member", start + Duration::from_secs(secs))?)))
            .collect();
        assert_eq!(lines, [(0, 0), (60, 11), (120, 11)]);
    }

    /// When more peers move within one interval than the first sweep
    /// allows for, sweeps come at doubling sizes, not at every move.
    #[test]
    fn many_peers_moving_at_once_are_swept_at_doubling_sizes() {
        let mut log = EndpointLog::default();
        let start = Instant::now();
        for peer in 0..5_000 {
            assert_eq!(log.note(peer, start), Some(0));
        }
        assert_eq!(log.peers.len(), 5_000);
        // Swept at 1,024, 2,048 and 4,096 peers, keeping every one.
        assert_eq!(log.sweep_at, 8_192);
        let later = start + QUIET_INTERVAL;
        for peer in 5_000..=8_192 {
            log.note(peer, later);
        }
        // The sweep at 8,192 forgot the 5,000 of the first instant.
        assert_eq!(log.peers.len(), 3_193);
        assert_eq!(log.sweep_at, 6_384);
    }

    /// Past the limit, only peers with a line in the last interval stay.
    #[test]
    fn the_remembered_peers_are_bounded() {
        let mut log = EndpointLog::default();
        let start = Instant::now();
        for peer in 0..REMEMBERED_PEERS {
            assert_eq!(log.note(peer, start), Some(0));
        }
        let later = start + QUIET_INTERVAL;
        assert_eq!(log.note(REMEMBERED_PEERS, later), Some(0));
        assert_eq!(log.peers.len(), 1);
        assert_eq!(log.note(0, later), Some(0));
    }
}
