//! How [`Node`] keeps sessions on demand in a large mesh (the mesh's side
//! is `membership/on_demand.rs`): packets for an unmet member wait while
//! it is met, and sessions without user traffic close.
//!
//! ```text
//! TUN packet ─▶ route ─▶ member awaits meeting (Mesh::awaits_meeting)?
//!     yes ─▶ held (at most MAX_HELD_PACKETS per member, the oldest
//!            dropped and counted as StagingQueueFull) + Mesh::request_session
//!            ─▶ traversal, handshake ─▶ Event::HandshakeCompleted
//!            ─▶ the held packets sealed in order ─▶ poll_transmit
//!     no  ─▶ the device (sealed, or staged behind its own handshake)
//! user data sent or received ─▶ the peer's last traffic (a slot per peer)
//! every idle_timeout / 4: a member's session opened by the mesh, that
//!     membership does not need, without user traffic for idle_timeout
//!     ─▶ Device::close_sessions, path MTU search stopped,
//!        Mesh::handle_session_closed (no more pings)
//! ```
//!
//! Mesh control traffic (pings, gossip, probes) never counts as use: a
//! session kept alive by its own pings would never close.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use fjord_proto::{
    DATA_HEADROOM, DATA_TAILROOM, DropReason, Outgoing, PeerId, PublicKey, Sent, Transmit,
};

use super::Node;
use super::membership::MeshDriver;

/// Packets held per member while it is being met: enough for a
/// connection's first few packets (a SYN and its retries, a DNS query
/// or two), bounded so an unreachable member costs at most this much.
pub const MAX_HELD_PACKETS: usize = 8;

/// The idle check runs this many times per idle timeout: a session closes
/// between one and one and a quarter timeouts after its last packet.
const IDLE_CHECKS_PER_TIMEOUT: u32 = 4;

/// The shortest pause between idle checks, whatever the timeout.
const MIN_IDLE_CHECK: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(super) struct OnDemand {
    /// Packets waiting for a member's session, oldest first.
    held: HashMap<PeerId, VecDeque<Vec<u8>>>,
    /// Held packets sealed once the session came up, for `poll_transmit`.
    sealed: VecDeque<(Transmit, Vec<u8>)>,
    /// Per peer (by `PeerId::index`), when it last carried user data, or
    /// when its session opened if later: written per packet, so a slot
    /// rather than a map.
    last_used: Vec<Option<Instant>>,
    /// Members' sessions the mesh opened, checked for idleness.
    open: BTreeSet<PeerId>,
    next_idle_check: Option<Instant>,
}

impl OnDemand {
    /// User data went to or came from `peer`.
    pub(super) fn note_used(&mut self, peer: PeerId, now: Instant) {
        if let Some(slot) = self.last_used.get_mut(peer.index()) {
            *slot = Some(now);
        }
    }

    /// A member's session is up; a new one counts as used now (a rekey of
    /// one already open does not).
    fn session_opened(&mut self, peer: PeerId, now: Instant, idle_timeout: Duration) {
        if !self.open.insert(peer) {
            return;
        }
        let index = peer.index();
        if self.last_used.len() <= index {
            self.last_used.resize(index + 1, None);
        }
        self.last_used[index] = Some(now);
        let check = now + idle_check_interval(idle_timeout);
        self.next_idle_check = Some(self.next_idle_check.map_or(check, |at| at.min(check)));
    }

    /// `peer` is gone: nothing of it is kept.
    pub(super) fn forget(&mut self, peer: PeerId) {
        self.held.remove(&peer);
        self.open.remove(&peer);
        if let Some(slot) = self.last_used.get_mut(peer.index()) {
            *slot = None;
        }
    }

    pub(super) fn deadline(&self) -> Option<Instant> {
        self.next_idle_check
    }

    /// Packets held for members not met yet.
    pub(super) fn held_packets(&self) -> usize {
        self.held.values().map(VecDeque::len).sum()
    }
}

fn idle_check_interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / IDLE_CHECKS_PER_TIMEOUT).max(MIN_IDLE_CHECK)
}

impl Node {
    /// The on-demand part of sending to `peer` (only in a mesh): the
    /// packet counts as use and, if `peer` is a member not met yet in a
    /// large mesh, is held while the mesh meets it. What became of a held
    /// packet; `None` when it goes on to the device.
    pub(super) fn hold_for_session(
        &mut self,
        now: Instant,
        peer: PeerId,
        buf: &[u8],
        len: usize,
    ) -> Option<Sent> {
        let driver = self.mesh.as_mut()?;
        driver.on_demand.note_used(peer, now);
        if self.device.peer_has_session(peer) {
            return None;
        }
        let key = *self.device.peer_public_key(peer)?;
        if !driver.mesh.awaits_meeting(&key) {
            return None;
        }
        let packet = buf.get(DATA_HEADROOM..DATA_HEADROOM + len)?.to_vec();
        let queue = driver.on_demand.held.entry(peer).or_default();
        let overflowed = queue.len() >= MAX_HELD_PACKETS;
        if overflowed {
            queue.pop_front();
            self.drops.count(DropReason::StagingQueueFull);
        }
        queue.push_back(packet);
        driver.mesh.request_session(now, key);
        Some(Sent::Staged)
    }

    /// A held packet sealed after its member's session came up, copied
    /// into `buf`.
    pub(super) fn poll_held(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let driver = self.mesh.as_mut()?;
        loop {
            let (transmit, datagram) = driver.on_demand.sealed.pop_front()?;
            if let Some(out) = buf.get_mut(..datagram.len()) {
                out.copy_from_slice(&datagram);
                return Some(transmit);
            }
        }
    }

    /// Packets held for members being met, for `fjord show`.
    pub fn held_packets(&self) -> usize {
        self.mesh
            .as_ref()
            .map_or(0, |driver| driver.on_demand.held_packets())
    }

    /// A session with `peer` came up (a handshake completed): a member's
    /// is watched for idleness, and the packets held for it leave.
    pub(super) fn on_demand_session(
        &mut self,
        now: Instant,
        driver: &mut MeshDriver,
        peer: PeerId,
    ) {
        if driver.managed.contains(&peer) {
            let idle_timeout = driver.mesh.idle_timeout();
            driver.on_demand.session_opened(peer, now, idle_timeout);
        }
        let Some(held) = driver.on_demand.held.remove(&peer) else {
            return;
        };
        for packet in held {
            let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
            buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
            // Not yet sendable (a responder waits for the initiator's
            // first packet): the device stages it behind the session.
            if let Outgoing::Ready {
                len,
                destination,
                source,
                seal,
            } = self
                .device
                .prepare_encapsulate(now, peer, &mut buf, packet.len())
                && seal.seal(&mut buf).is_ok()
            {
                buf.truncate(len);
                let transmit = Transmit {
                    destination,
                    source,
                    len,
                    ttl: None,
                    dont_fragment: false,
                };
                driver.on_demand.sealed.push_back((transmit, buf));
            }
        }
    }

    /// Closes the members' sessions idle for the idle timeout that
    /// membership does not need (see the module notes).
    pub(super) fn close_idle_sessions(&mut self, now: Instant, driver: &mut MeshDriver) {
        if driver.on_demand.next_idle_check.is_none_or(|at| at > now) {
            return;
        }
        let idle_timeout = driver.mesh.idle_timeout();
        let open: Vec<PeerId> = driver.on_demand.open.iter().copied().collect();
        for peer in open {
            let Some(key) = self.device.peer_public_key(peer).copied() else {
                driver.on_demand.forget(peer);
                continue;
            };
            if !idle_for(&driver.on_demand, peer, now, idle_timeout)
                || driver.mesh.needs_session(&key)
            {
                continue;
            }
            self.close_session(driver, peer, key);
        }
        driver.on_demand.next_idle_check =
            (!driver.on_demand.open.is_empty()).then(|| now + idle_check_interval(idle_timeout));
    }

    /// Forgets what was held or watched for `peer` (its peer entry goes).
    pub(super) fn forget_on_demand(&mut self, peer: PeerId) {
        if let Some(driver) = self.mesh.as_mut() {
            driver.on_demand.forget(peer);
        }
    }

    fn close_session(&mut self, driver: &mut MeshDriver, peer: PeerId, key: PublicKey) {
        driver.on_demand.open.remove(&peer);
        self.device.close_sessions(peer);
        driver.pmtu.forget(peer);
        self.set_path_limit(peer, None);
        driver.mesh.handle_session_closed(key);
    }
}

fn idle_for(on_demand: &OnDemand, peer: PeerId, now: Instant, idle_timeout: Duration) -> bool {
    on_demand
        .last_used
        .get(peer.index())
        .copied()
        .flatten()
        .is_none_or(|used| now.saturating_duration_since(used) >= idle_timeout)
}
