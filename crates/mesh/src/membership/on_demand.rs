//! Sessions on demand: above [`MeshConfig::eager_sessions`] members, a
//! member keeps sessions only with the members membership needs and with
//! those it exchanges traffic with; the others stay known (certificate,
//! endpoints, routes) but unmet.
//!
//! ```text
//! members (this node included) ≤ eager_sessions: every member is met
//!     as soon as it is learned (traversal.rs), as in a small mesh
//! above it, a member is met at once only if membership needs it:
//!     a bootstrap member of ours, a member that joined through us
//!     (it keeps its session with us), or a gossip partner: one of the
//!     GOSSIP_PARTNERS_EACH_SIDE nearest keys on either side of ours in
//!     key order (both sides compute the same pairs)
//! any other member: the driver's first packet for it asks
//!     request_session ─▶ a traversal attempt now (its own addresses
//!     first, then an introduction) ─▶ handshake ─▶ Hello both ways
//! the driver closes a session idle for idle_timeout ─▶
//!     handle_session_closed: unmet again, no more pings
//! ```
//!
//! A newcomer's record floods over the sessions members keep (each
//! member passes a record on once, when it is new to it: `pass_on_news`),
//! since its bootstrap member's announcement reaches only the members in
//! session with it. Liveness still spreads with the member lists: partners and bootstrap
//! members hear from every member, and every record says how long ago.
//!
//! [`MeshConfig::eager_sessions`]: super::MeshConfig::eager_sessions

use std::ops::Bound;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use super::Mesh;

/// Gossip partners on each side of our key: four partners in all, enough
/// that one member going quiet leaves the lists flowing, few enough that
/// the sessions a member keeps do not grow with the network.
pub const GOSSIP_PARTNERS_EACH_SIDE: usize = 2;

impl Mesh {
    /// Whether the network is past the eager threshold, so sessions are
    /// opened only on demand.
    pub fn on_demand(&self) -> bool {
        self.members.len() + 1 > self.config.eager_sessions
    }

    /// How long an on-demand session may go without user traffic.
    pub fn idle_timeout(&self) -> Duration {
        self.config.idle_timeout
    }

    /// Whether a session with `key` is kept whatever traffic it carries:
    /// always in a small mesh; in a large one, with the members
    /// membership needs (see the module notes).
    pub fn needs_session(&self, key: &PublicKey) -> bool {
        !self.on_demand()
            || self.bootstrap.contains(key)
            || self.joined_through_us.contains(key)
            || self.is_gossip_partner(key)
    }

    /// Whether `key` is a member we have no session with in a large mesh:
    /// a packet for it waits while [`Mesh::request_session`] meets it.
    pub fn awaits_meeting(&self, key: &PublicKey) -> bool {
        self.on_demand()
            && self
                .members
                .get(key)
                .is_some_and(|member| !member.direct && member.traversal.relay().is_none())
    }

    /// The driver holds a packet for member `key`: meet it now, unless a
    /// meeting is already under way. Whether `key` is a member.
    pub fn request_session(&mut self, now: Instant, key: PublicKey) -> bool {
        self.last_input = now;
        let Some(member) = self.members.get_mut(&key) else {
            return false;
        };
        member.traversal.request();
        // A first attempt planned for later (the member was learned while
        // the mesh was small, spread over a second) runs now; one under
        // way keeps its pace, whatever the packets that follow.
        if member.traversal.due().is_none() || member.traversal.not_attempted() {
            self.counters.sessions_on_demand += 1;
            self.attempt(now, key);
            self.reschedule(key);
        }
        true
    }

    /// The driver closed our session with `key` (idle): it is unmet again,
    /// no longer pinged nor gossiped to, until traffic asks for it.
    pub fn handle_session_closed(&mut self, key: PublicKey) {
        let Some(member) = self.members.get_mut(&key) else {
            return;
        };
        member.direct = false;
        member.ping_in_flight = None;
        member.traversal.forget_path();
        self.greeted.remove(&key);
        self.counters.sessions_idle_closed += 1;
        self.reschedule(key);
    }

    /// Members new to us, learned from `from`'s list, are passed on to
    /// every member we are in session with (but `from` and themselves),
    /// on demand only: there the member that announces a newcomer (its
    /// bootstrap member) is in session with few, where in a small mesh it
    /// is in session with all. Each member passes a record on once, when
    /// it is new to it, so an arrival costs each member a message per
    /// session, whatever the network's size; a joiner, in session with
    /// its bootstrap member alone when the whole list arrives, passes on
    /// nothing.
    pub(super) fn pass_on_news(&mut self, from: PublicKey, fresh: &[PublicKey]) {
        if fresh.is_empty() || !self.on_demand() {
            return;
        }
        let direct: Vec<PublicKey> = self.direct_members().filter(|key| *key != from).collect();
        for peer in direct {
            self.send_members(peer, fresh.iter().filter(|key| **key != peer));
        }
    }

    /// One of the nearest keys to ours in key order, on either side
    /// (wrapping around).
    fn is_gossip_partner(&self, key: &PublicKey) -> bool {
        let own = self.own_key();
        let above = (Bound::Excluded(own), Bound::Unbounded);
        let after = self
            .members
            .range(above)
            .chain(self.members.range(..own))
            .take(GOSSIP_PARTNERS_EACH_SIDE);
        let before = self
            .members
            .range(..own)
            .rev()
            .chain(self.members.range(above).rev())
            .take(GOSSIP_PARTNERS_EACH_SIDE);
        after.chain(before).any(|(partner, _)| partner == key)
    }

    /// Back at or under the eager threshold (members left): plans a
    /// meeting with every member not met yet and not being met. A scan,
    /// but only of a mesh that small, once per ping round.
    pub(super) fn meet_unmet_members(&mut self, now: Instant) {
        if self.on_demand() {
            return;
        }
        let unmet: Vec<PublicKey> = self
            .members
            .iter()
            .filter(|(_, member)| !member.direct && member.traversal.due().is_none())
            .map(|(key, _)| *key)
            .collect();
        for key in unmet {
            if let Some(member) = self.members.get_mut(&key) {
                member.traversal.plan(now);
            }
            self.reschedule(key);
        }
    }
}
