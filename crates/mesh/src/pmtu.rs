//! Path MTU discovery between fjord members, by probing (in the spirit of
//! RFC 8899, DPLPMTUD): the largest datagram that gets through each
//! member's path, found without trusting ICMP, which many paths drop.
//!
//! A probe is a [`Control::MtuProbe`](crate::control::Control) padded
//! with zeros so that its sealed datagram has exactly the size under
//! test; it leaves with Don't Fragment (IPv4) / no fragmentation (IPv6),
//! so a router that cannot forward it drops it. The member answers with a
//! small [`Control::MtuAck`](crate::control::Control). Only verified
//! members are probed; a plain WireGuard peer never is and keeps today's
//! behaviour (no size limit).
//!
//! Sizes are whole outer IP datagrams (IP and UDP headers, WireGuard's
//! 32 bytes, padded plaintext). WireGuard pads plaintext to a multiple of
//! 16 bytes, so the sizes tried are the overhead plus a multiple of 16,
//! and the ceiling: the overhead plus the tunnel MTU.
//!
//! ```text
//!             track / path changed / tunnel MTU changed
//!                              │
//!   ┌──────────────▶ search: a round of up to 4 sizes, each sent twice,
//!   │                from the base (1280 bytes) to the ceiling; the
//!   │                round ends when every probe is acked or after
//!   │                PROBE_TIMEOUT; the next round narrows the gap between
//!   │                the largest size acked and the smallest lost ───┐
//!   │                                                                │
//!   │   no size acked 3 rounds in a row: keep the previous limit, try  │
//!   │   again after CONFIRM_INTERVAL                               settle
//!   │                                                                │
//!   │  confirm every CONFIRM_INTERVAL: the settled size and the      ◀┘
//!   │  ceiling; the ceiling acked raises the limit at once
//!   └── the settled size lost (black hole: the path shrank): the
//!       limit drops to the base, and a new search starts below it
//! ```
//!
//! Until the first search settles, a path has no limit, as today: a
//! limit would make inner senders lower their path MTU for minutes
//! (the kernel caches it for ten), while a search ends within a couple
//! of round trips. The limit each path gets ([`PathMtuTable::poll_change`])
//! is in inner packet bytes: the settled size minus the overhead.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::PeerId;
use fjord_proto::timer_queue::TimerQueue;

/// Where every search starts: IPv6's minimum link MTU, which nearly every
/// IPv4 path carries too.
pub const BASE_DATAGRAM_BYTES: usize = 1280;
/// How long a round waits for its acks.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);
/// How often a settled size is confirmed (and a larger one tried).
pub const CONFIRM_INTERVAL: Duration = Duration::from_secs(30);
/// Sizes tried per search round: with four, a 1280–1500 byte range
/// settles in two rounds to WireGuard's 16-byte padding granule.
const SIZES_PER_ROUND: usize = 4;
/// Each size is sent this often per round, so one lost probe is not
/// taken for a path that is too small.
const COPIES: usize = 2;
/// Rounds without a single ack before a search pauses.
const MAX_FAILED_ROUNDS: u32 = 3;
/// WireGuard pads plaintext to a multiple of this.
const PADDING_GRANULE: usize = 16;
/// UDP header, then WireGuard's data header (16) and tag (16).
const UDP_AND_WIREGUARD_BYTES: usize = 8 + 32;

/// The underlay's IP version, which sets the header size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(endpoint: &SocketAddr) -> Self {
        match endpoint {
            SocketAddr::V4(_) => Family::V4,
            SocketAddr::V6(_) => Family::V6,
        }
    }

    /// Bytes a datagram adds to the plaintext it carries: IP header, UDP
    /// header, WireGuard's header and tag.
    pub fn overhead(self) -> usize {
        let ip_header = match self {
            Family::V4 => 20,
            Family::V6 => 40,
        };
        ip_header + UDP_AND_WIREGUARD_BYTES
    }
}

/// A probe to send: a `Control::MtuProbe { id }` padded with zeros to
/// `plaintext_bytes`, sealed to `peer`, sent without fragmentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub peer: PeerId,
    pub id: u32,
    pub plaintext_bytes: usize,
}

/// What the prober did, for `fjord show` and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PathMtuCounters {
    pub probes_sent: u64,
    pub acks: u64,
    /// Settled sizes that stopped getting through.
    pub black_holes: u64,
}

struct SentProbe {
    id: u32,
    datagram_bytes: usize,
    acked: bool,
}

struct Round {
    deadline: Instant,
    probes: Vec<SentProbe>,
}

struct Path {
    peer: PeerId,
    family: Family,
    /// The largest datagram known to get through.
    settled: Option<usize>,
    /// A search is under way (else the settled size is being confirmed).
    searching: bool,
    /// During a search: the largest size acked, the smallest lost.
    acked_bound: Option<usize>,
    lost_bound: Option<usize>,
    failed_rounds: u32,
    round: Option<Round>,
    /// When the next round starts, if none is in flight.
    next_round: Instant,
}

impl Path {
    fn new(peer: PeerId, family: Family, now: Instant) -> Self {
        Self {
            peer,
            family,
            settled: None,
            searching: true,
            acked_bound: None,
            lost_bound: None,
            failed_rounds: 0,
            round: None,
            next_round: now,
        }
    }

    fn deadline(&self) -> Instant {
        self.round
            .as_ref()
            .map_or(self.next_round, |round| round.deadline)
    }

    fn search_again(&mut self, now: Instant) {
        self.searching = true;
        self.acked_bound = None;
        self.lost_bound = None;
        self.failed_rounds = 0;
        self.round = None;
        self.next_round = now;
    }
}

/// Every tracked path, by peer. Call order: `track` / `forget` /
/// `path_changed` / `set_tunnel_mtu` as peers come and go, `handle_ack`
/// for each `MtuAck`, `handle_timeout` at `poll_timeout`; after any of
/// them drain `poll_probe` and `poll_change`.
pub struct PathMtuTable {
    /// By `PeerId::index`.
    paths: Vec<Option<Path>>,
    timers: TimerQueue,
    probes: VecDeque<Probe>,
    changes: VecDeque<(PeerId, Option<usize>)>,
    next_id: u32,
    tunnel_mtu: usize,
    counters: PathMtuCounters,
}

impl PathMtuTable {
    pub fn new(tunnel_mtu: usize) -> Self {
        Self {
            paths: Vec::new(),
            timers: TimerQueue::new(),
            probes: VecDeque::new(),
            changes: VecDeque::new(),
            next_id: 1,
            tunnel_mtu,
            counters: PathMtuCounters::default(),
        }
    }

    pub fn counters(&self) -> &PathMtuCounters {
        &self.counters
    }

    pub fn is_tracked(&self, peer: PeerId) -> bool {
        self.path(peer).is_some()
    }

    /// Starts probing `peer`'s path (a verified member); a peer already
    /// tracked is left as it is.
    pub fn track(&mut self, now: Instant, peer: PeerId, family: Family) {
        let index = peer.index();
        if self.paths.len() <= index {
            self.paths.resize_with(index + 1, || None);
        }
        if self.paths[index].is_none() {
            self.paths[index] = Some(Path::new(peer, family, now));
            self.timers.update(index, Some(now));
        }
    }

    /// Stops probing `peer` (it left, or its peer entry is gone).
    pub fn forget(&mut self, peer: PeerId) {
        if let Some(slot) = self.paths.get_mut(peer.index()) {
            *slot = None;
        }
        self.timers.remove(peer.index());
    }

    /// `peer` now sends from elsewhere: its path is searched again. The
    /// limit stays until the search settles, unless the IP version changed.
    pub fn path_changed(&mut self, now: Instant, peer: PeerId, family: Family) {
        let Some(path) = self.path_mut(peer) else {
            return;
        };
        let forget_limit = path.family != family && path.settled.is_some();
        path.family = family;
        path.search_again(now);
        if forget_limit {
            path.settled = None;
            self.changes.push_back((peer, None));
        }
        self.timers.update(peer.index(), Some(now));
    }

    /// `peer` has a new session. A path not yet settled is searched at
    /// once: its earlier rounds may have found no session to probe in.
    pub fn handle_session(&mut self, now: Instant, peer: PeerId) {
        let Some(path) = self.path_mut(peer) else {
            return;
        };
        if path.settled.is_none() && path.round.is_none() {
            path.search_again(now);
            self.timers.update(peer.index(), Some(now));
        }
    }

    /// The tunnel MTU sets every path's ceiling; when it changes, every
    /// path is searched again.
    pub fn set_tunnel_mtu(&mut self, now: Instant, mtu: usize) {
        if mtu == self.tunnel_mtu {
            return;
        }
        self.tunnel_mtu = mtu;
        for (index, slot) in self.paths.iter_mut().enumerate() {
            if let Some(path) = slot {
                path.search_again(now);
                self.timers.update(index, Some(now));
            }
        }
    }

    /// The largest datagram known to pass `peer`'s path, in bytes.
    pub fn path_mtu(&self, peer: PeerId) -> Option<usize> {
        self.path(peer).and_then(|path| path.settled)
    }

    /// An `MtuAck` from `peer`; `false` if it matches no probe in flight.
    pub fn handle_ack(&mut self, now: Instant, peer: PeerId, id: u32) -> bool {
        let Some(path) = self.path_mut(peer) else {
            return false;
        };
        let Some(round) = path.round.as_mut() else {
            return false;
        };
        let Some(probe) = round.probes.iter_mut().find(|probe| probe.id == id) else {
            return false;
        };
        probe.acked = true;
        // A size is answered once either copy is.
        let sizes_answered = round.probes.iter().all(|probe| {
            probe.acked
                || round
                    .probes
                    .iter()
                    .any(|other| other.acked && other.datagram_bytes == probe.datagram_bytes)
        });
        self.counters.acks += 1;
        if sizes_answered {
            self.finish_round(now, peer);
            self.reschedule(peer);
        }
        true
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(index) = self.timers.pop_due(now) {
            let Some(path) = self.paths.get(index).and_then(Option::as_ref) else {
                continue;
            };
            let peer = path.peer;
            match &path.round {
                Some(round) if round.deadline <= now => self.finish_round(now, peer),
                None if path.next_round <= now => self.start_round(now, peer),
                _ => {}
            }
            self.reschedule(peer);
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.timers.next_deadline()
    }

    pub fn poll_probe(&mut self) -> Option<Probe> {
        self.probes.pop_front()
    }

    /// A path whose limit changed: the largest inner packet, in bytes,
    /// that fits it (`None`: no limit).
    pub fn poll_change(&mut self) -> Option<(PeerId, Option<usize>)> {
        self.changes.pop_front()
    }

    fn path(&self, peer: PeerId) -> Option<&Path> {
        self.paths.get(peer.index()).and_then(Option::as_ref)
    }

    fn path_mut(&mut self, peer: PeerId) -> Option<&mut Path> {
        self.paths.get_mut(peer.index()).and_then(Option::as_mut)
    }

    fn reschedule(&mut self, peer: PeerId) {
        if let Some(deadline) = self.path(peer).map(Path::deadline) {
            self.timers.update(peer.index(), Some(deadline));
        }
    }

    fn ceiling(&self, family: Family) -> usize {
        family.overhead() + self.tunnel_mtu
    }

    /// The sizes a probe can have between `low` and `high` (inclusive):
    /// the overhead plus a multiple of the padding granule, or the ceiling.
    fn sizes_between(&self, family: Family, low: usize, high: usize) -> Vec<usize> {
        let overhead = family.overhead();
        let ceiling = self.ceiling(family);
        let high = high.min(ceiling);
        let first = low.max(overhead + PADDING_GRANULE).saturating_sub(overhead);
        let mut sizes: Vec<usize> = (first.next_multiple_of(PADDING_GRANULE)..)
            .step_by(PADDING_GRANULE)
            .map(|plaintext| overhead + plaintext)
            .take_while(|&size| size <= high)
            .collect();
        if (low..=high).contains(&ceiling) && sizes.last() != Some(&ceiling) {
            sizes.push(ceiling);
        }
        sizes
    }

    fn start_round(&mut self, now: Instant, peer: PeerId) {
        let Some(path) = self.path(peer) else {
            return;
        };
        let family = path.family;
        let ceiling = self.ceiling(family);
        let base = self.base(family);
        let sizes = match (path.searching, path.settled) {
            (false, Some(settled)) => {
                let mut sizes = vec![settled];
                if ceiling > settled {
                    sizes.push(ceiling);
                }
                sizes
            }
            _ => {
                let low = path.acked_bound.map_or(base, |acked| acked + 1);
                let high = path.lost_bound.map_or(ceiling, |lost| lost - 1);
                spread(&self.sizes_between(family, low, high), SIZES_PER_ROUND)
            }
        };
        let mut probes = Vec::with_capacity(sizes.len() * COPIES);
        for size in sizes {
            for _ in 0..COPIES {
                let id = self.next_id;
                self.next_id = self.next_id.wrapping_add(1);
                probes.push(SentProbe {
                    id,
                    datagram_bytes: size,
                    acked: false,
                });
                self.probes.push_back(Probe {
                    peer,
                    id,
                    plaintext_bytes: size - family.overhead(),
                });
                self.counters.probes_sent += 1;
            }
        }
        if let Some(path) = self.path_mut(peer) {
            path.round = Some(Round {
                deadline: now + PROBE_TIMEOUT,
                probes,
            });
        }
    }

    fn finish_round(&mut self, now: Instant, peer: PeerId) {
        let Some(family) = self.path(peer).map(|path| path.family) else {
            return;
        };
        let ceiling = self.ceiling(family);
        let base = self.base(family);
        let Some(path) = self.paths.get_mut(peer.index()).and_then(Option::as_mut) else {
            return;
        };
        let Some(round) = path.round.take() else {
            return;
        };
        let acked = |size: usize| {
            round
                .probes
                .iter()
                .any(|probe| probe.acked && probe.datagram_bytes == size)
        };
        let largest_acked = round
            .probes
            .iter()
            .filter(|probe| probe.acked)
            .map(|probe| probe.datagram_bytes)
            .max();
        let smallest_lost = round
            .probes
            .iter()
            .map(|probe| probe.datagram_bytes)
            .filter(|&size| !acked(size) && largest_acked.is_none_or(|largest| size > largest))
            .min();
        path.next_round = now;
        let settle = if path.searching {
            match largest_acked {
                Some(largest) => {
                    path.failed_rounds = 0;
                    path.acked_bound = Some(path.acked_bound.map_or(largest, |a| a.max(largest)));
                }
                None if path.acked_bound.is_none() => {
                    path.failed_rounds += 1;
                    if path.failed_rounds >= MAX_FAILED_ROUNDS {
                        // No answer at all (the member is gone, or has no
                        // session yet): keep the limit we have, try later.
                        path.search_again(now);
                        path.next_round = now + CONFIRM_INTERVAL;
                    }
                    return;
                }
                None => {}
            }
            if let Some(lost) = smallest_lost {
                path.lost_bound = Some(path.lost_bound.map_or(lost, |l| l.min(lost)));
            }
            let Some(acked_bound) = path.acked_bound else {
                return;
            };
            let gap_left = match path.lost_bound {
                Some(lost) => has_size_between(family, acked_bound, lost, ceiling),
                None => acked_bound < ceiling,
            };
            if gap_left {
                return;
            }
            acked_bound
        } else {
            let settled = path.settled.unwrap_or(ceiling);
            match largest_acked {
                Some(largest) if largest >= settled => largest,
                _ => {
                    // The settled size stopped getting through (the path
                    // shrank, or the member is gone): fall back to the
                    // base at once and search below the old size.
                    self.counters.black_holes += 1;
                    path.search_again(now);
                    path.lost_bound = Some(settled);
                    if path.settled != Some(base) {
                        path.settled = Some(base);
                        self.changes
                            .push_back((peer, Some(base - family.overhead())));
                    }
                    return;
                }
            }
        };
        path.searching = false;
        path.acked_bound = None;
        path.lost_bound = None;
        path.failed_rounds = 0;
        path.next_round = now + CONFIRM_INTERVAL;
        if path.settled != Some(settle) {
            path.settled = Some(settle);
            self.changes
                .push_back((peer, Some(settle - family.overhead())));
        }
    }

    /// Where a search starts: the largest probe size up to
    /// [`BASE_DATAGRAM_BYTES`] (or the ceiling, if that is smaller).
    fn base(&self, family: Family) -> usize {
        self.sizes_between(family, 0, BASE_DATAGRAM_BYTES)
            .last()
            .copied()
            .unwrap_or_else(|| self.ceiling(family))
    }
}

/// Whether a probe size lies strictly between `low` and `high`.
fn has_size_between(family: Family, low: usize, high: usize, ceiling: usize) -> bool {
    let overhead = family.overhead();
    let next = overhead + (low.saturating_sub(overhead) / PADDING_GRANULE + 1) * PADDING_GRANULE;
    next.min(ceiling) > low && next.min(ceiling) < high
}

/// Up to `count` of `sizes`, spread evenly, the first and last included.
fn spread(sizes: &[usize], count: usize) -> Vec<usize> {
    if sizes.len() <= count {
        return sizes.to_vec();
    }
    let last = sizes.len() - 1;
    let mut picked: Vec<usize> = (0..count)
        .map(|k| sizes[(k * last + (count - 1) / 2) / (count - 1)])
        .collect();
    picked.dedup();
    picked
}

#[cfg(test)]
mod tests;
