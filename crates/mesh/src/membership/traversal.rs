//! NAT traversal between members, through a member that reaches both.
//!
//! ```text
//! A learns B from C's gossip:
//!     first, if B named its own addresses: A ──initiation──▶ each of them
//!       (no NAT of B's is in the way of B's own address; a B that C sees
//!       at one of them has no NAT at all, and then nothing more is needed)
//!     A ──Introduce(B)──▶ C
//!     C ──Observed(B's endpoint), Rendezvous(A, A's endpoints)──▶ B
//!     C ──Observed(A's endpoint), Rendezvous(B, B's endpoints)──▶ A
//!     A and B each: Punch (low-TTL datagrams at the other's endpoints),
//!     then CONNECT_DELAY later Connect (a handshake initiation)
//! no Hello from B: again every PUNCH_RETRY; after MAX_PUNCH_ATTEMPTS also
//!     ask C to relay, and go on trying, further apart, also once relayed:
//!     an answer to an initiation sent straight to B moves the session
//!     off the relay (`handle_path`)
//! ```
//!
//! Each side's low-TTL punch opens its own NAT for the other's packets
//! but dies before the far NAT, so no NAT ever sees an unasked packet
//! first. Linux's conntrack would otherwise keep the stray packet's entry
//! and map its owner's own reply to another port, which the other side's
//! NAT then filters: measured in namespaces, greeting a member behind a
//! NAT directly failed exactly that way. The endpoints are those the
//! introducer observes (the NATs' public mappings), so this works for a
//! NAT that keeps one mapping per socket (port-preserving, or any
//! endpoint-independent mapping).
//!
//! A symmetric NAT maps each destination to a new random port, which the
//! introducer cannot see. From the second attempt on, both sides also
//! predict ports (the "birthday" search): each opens
//! [`PREDICTION_SOCKETS`] extra sockets that punch, low-TTL, at the
//! other's known endpoints, so a symmetric NAT holds that many random
//! mappings toward the other side; and each side's initiation goes, at
//! `CONNECT_DELAY`, also to [`PREDICTION_PROBES`] random ports at the
//! other's address. Against a NAT that keeps one mapping (the other side's
//! endpoint is known), a probe that lands on one of the many mappings is
//! answered through that socket, which from then on carries the pair's
//! traffic. Neither side knows which of them is symmetric, so both play
//! both parts; the wasted half is a few hundred small datagrams. With
//! 256 mappings among Linux's 64,512 NAT ports, 1,024 probes find one
//! with probability 1 - (1 - 256/64512)^1024 ≈ 98 % per attempt. Two
//! symmetric NATs leave 1 in 64,512 per probe and socket: relayed.
//!
//! A member behind a symmetric NAT sends no initiation straight at a
//! NATed member's known endpoints, only its probes: it learns from the
//! introducer's Observed that its NAT changed its port, so such an
//! initiation would leave from a mapping the other side's punch never
//! opened. Against a port-preserving Linux NAT that stray is worse than
//! useless: its conntrack entry stays (30 s, refreshed by every attempt),
//! and when one of the other side's probes goes to that very port, the
//! NAT finds the tuple taken and maps the probe to a random port, and
//! from then on maps every new destination of the member's socket to
//! that port too (masquerade reuses the latest mapping of the same
//! source). The probes then all leave from a port the prediction
//! sockets, opened toward the member's known endpoint, never asked for:
//! the pair stayed relayed (issue 44; in namespaces, 7,522 of the
//! port-preserving member's probes left from one moved port). The
//! port-preserving side keeps its plain initiation (a stray at a
//! symmetric NAT moves nothing there), and so do members whose NAT
//! keeps their port, which still meet by plain punches.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use super::{Mesh, MeshAction};
use crate::control::{Control, MAX_ENDPOINTS};

/// How long after learning a member to ask for an introduction: at once,
/// nearly (the gossip that named it may still be arriving in pieces).
pub const PUNCH_AFTER: Duration = Duration::from_millis(20);
/// Between our low-TTL punch and our initiation: long enough for the
/// other side's punch to have left its NAT, whatever the skew between
/// the two Rendezvous messages.
pub const CONNECT_DELAY: Duration = Duration::from_millis(150);
/// Between traversal attempts.
pub const PUNCH_RETRY: Duration = Duration::from_millis(1000);
/// Attempts before asking for a relay too.
pub const MAX_PUNCH_ATTEMPTS: u8 = 5;
/// From this attempt on, each attempt predicts ports too (plain punches
/// are enough between NATs that keep one mapping, and cost far less).
pub const PREDICT_FROM_ATTEMPT: u8 = 2;
/// Extra sockets each side opens for a port prediction round.
pub const PREDICTION_SOCKETS: usize = 256;
/// Random ports each side aims its initiation at in a prediction round.
pub const PREDICTION_PROBES: usize = 1024;
/// The lowest port a Linux NAT hands out for a mapping of its own choice.
const LOWEST_NAT_PORT: u16 = 1024;
/// The longest pause between attempts, once they back off.
pub const MAX_PUNCH_RETRY: Duration = Duration::from_secs(30);
/// First attempts are spread over this many milliseconds after learning.
const PUNCH_SPREAD_MILLIS: u64 = 1000;
/// After greeting a member that has no NAT at its own address, how long
/// before asking for an introduction after all: a hundred members met at
/// once answer slowly on two cores, and every introduction costs the
/// introducer two messages.
const UNNATED_ANSWER_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, Default)]
pub(super) struct Traversal {
    /// The member whose gossip told us of this one.
    introducer: Option<PublicKey>,
    attempts: u8,
    /// When the next attempt is due; `None` when none is planned.
    due: Option<Instant>,
    /// A Connect to send at the instant, to the endpoints.
    connect: Option<(Instant, Vec<SocketAddr>)>,
    /// The relay our session with this member goes through.
    relay: Option<PublicKey>,
    /// Traffic asked for a session (`on_demand.rs`): the attempts go on
    /// even where membership would not meet this member.
    requested: bool,
}

impl Traversal {
    pub(super) fn relay(&self) -> Option<PublicKey> {
        self.relay
    }

    pub(super) fn due(&self) -> Option<Instant> {
        self.due
    }

    pub(super) fn connect_at(&self) -> Option<Instant> {
        self.connect.as_ref().map(|(at, _)| *at)
    }

    /// Whether no attempt was made yet (since the last meeting).
    pub(super) fn not_attempted(&self) -> bool {
        self.attempts == 0
    }

    /// An attempt due at `at` (keeping the introducer).
    pub(super) fn plan(&mut self, at: Instant) {
        self.due = Some(at);
    }

    /// Traffic asks for a session: attempts go on until one is up.
    pub(super) fn request(&mut self) {
        self.requested = true;
    }

    /// The session closed: no attempt planned, no relay, the next
    /// meeting starts from the first attempt (the introducer is kept).
    pub(super) fn forget_path(&mut self) {
        self.requested = false;
        self.attempts = 0;
        self.due = None;
        self.connect = None;
        self.relay = None;
    }
}

impl Mesh {
    /// `introducer` told us of `member`: if the member has not spoken to
    /// us yet, plan to ask the introducer for a rendezvous.
    pub(super) fn note_introducer(
        &mut self,
        now: Instant,
        introducer: PublicKey,
        member: PublicKey,
    ) {
        // Spread over a second: a newcomer learns a whole mesh at once,
        // and a hundred introductions in one burst overflow the
        // introducer's socket.
        let spread = Duration::from_millis(self.next_random() % PUNCH_SPREAD_MILLIS);
        // In a large mesh, most members are met only when traffic asks
        // (`on_demand.rs`); the introducer is kept for then.
        let meet_now = self.needs_session(&member);
        let Some(state) = self.members.get_mut(&member) else {
            return;
        };
        if state.direct || state.traversal.introducer.is_some() {
            return;
        }
        state.traversal.introducer = Some(introducer);
        if !meet_now {
            return;
        }
        let due = now + PUNCH_AFTER + spread;
        state.traversal.due = Some(due);
        self.reschedule(member);
    }

    /// `member` greeted us straight (not through a relay): no traversal
    /// needed any more.
    pub(super) fn traversal_done(&mut self, member: PublicKey) {
        if let Some(state) = self.members.get_mut(&member) {
            state.traversal.due = None;
            state.traversal.connect = None;
            state.traversal.attempts = 0;
        }
    }

    /// Whether `from` is the relay that carries our session with `key`.
    pub(super) fn relayed_from(&self, key: &PublicKey, from: SocketAddr) -> bool {
        self.members
            .get(key)
            .and_then(|member| member.traversal.relay)
            .and_then(|relay| self.members.get(&relay))
            .is_some_and(|relay| relay.endpoints.first() == Some(&from))
    }

    /// Our session with `key` now goes to `endpoint` (the peer roamed
    /// there on an authenticated packet). If that is not its relay, a
    /// direct path opened: the relay is left behind.
    pub fn handle_path(&mut self, key: PublicKey, endpoint: SocketAddr) {
        let relayed = self
            .members
            .get(&key)
            .is_some_and(|member| member.traversal.relay.is_some());
        if !relayed || self.relayed_from(&key, endpoint) {
            return;
        }
        if let Some(member) = self.members.get_mut(&key) {
            member.traversal.relay = None;
            super::observe_endpoint(&mut member.endpoints, endpoint);
        }
        self.traversal_done(key);
        self.counters.relays_left += 1;
    }

    /// Sends `key` the initiation whose delay has passed, if any.
    pub(super) fn connect_due(&mut self, now: Instant, key: PublicKey) {
        let Some(member) = self.members.get_mut(&key) else {
            return;
        };
        if member.traversal.connect_at().is_some_and(|at| at <= now)
            && let Some((_, endpoints)) = member.traversal.connect.take()
        {
            self.actions
                .push_back(MeshAction::Connect { key, endpoints });
        }
    }

    /// One traversal attempt toward `member`. Never gives up: after
    /// MAX_PUNCH_ATTEMPTS the attempts go on, further apart, and each also
    /// asks for a relay until one carries the session (a request or offer
    /// may be lost, or the relay full); once relayed, they look for the
    /// direct path that may open later.
    pub(super) fn attempt(&mut self, now: Instant, member: PublicKey) {
        let introducer = self.reachable_introducer(&member);
        let needed = self.needs_session(&member);
        let Some(state) = self.members.get_mut(&member) else {
            return;
        };
        // Planned while the mesh was small (or while a joiner's list was
        // still arriving), and no longer needed: met when traffic asks.
        if !needed && !state.traversal.requested && !state.direct {
            state.traversal.due = None;
            state.traversal.connect = None;
            return;
        }
        state.traversal.attempts = state.traversal.attempts.saturating_add(1);
        let attempts = state.traversal.attempts;
        let relayed = state.traversal.relay.is_some();
        let unnated = state.has_no_nat(&state.endpoints);
        let backoff = PUNCH_RETRY * (1u32 << attempts.saturating_sub(MAX_PUNCH_ATTEMPTS).min(5));
        state.traversal.due = Some(now + backoff.min(MAX_PUNCH_RETRY));
        if attempts == 1 && !state.host_addresses.is_empty() {
            let hosts = state.host_addresses.clone();
            self.actions.push_back(MeshAction::Connect {
                key: member,
                endpoints: hosts,
            });
            if unnated {
                if let Some(state) = self.members.get_mut(&member) {
                    state.traversal.due = Some(now + UNNATED_ANSWER_WAIT);
                }
                return;
            }
        }
        let Some(introducer) = introducer else {
            return;
        };
        if attempts >= MAX_PUNCH_ATTEMPTS && !relayed {
            // No direct path: ask the member that reaches both to carry
            // the traffic, and keep trying to meet.
            if attempts == MAX_PUNCH_ATTEMPTS {
                self.counters.traversals_failed += 1;
            }
            self.send(introducer, &Control::RelayRequest { peer: member });
        }
        self.counters.introductions_requested += 1;
        // A member seen at its own address has no NAT for prediction to
        // beat: plain connects reach it (on a LAN, or the open internet).
        let predict_ports = attempts >= PREDICT_FROM_ATTEMPT && !unnated;
        self.send(
            introducer,
            &Control::Introduce {
                peer: member,
                predict_ports,
            },
        );
    }

    /// The member's introducer if it speaks to us, else any member that
    /// does (the introducer may have left).
    /// In a large mesh, the introducer that told us of a member may know
    /// it only from gossip too (no session to introduce through), so
    /// attempts alternate between it and a bootstrap member of ours,
    /// which keeps a session with every member that joined through it.
    fn reachable_introducer(&self, member: &PublicKey) -> Option<PublicKey> {
        let state = self.members.get(member)?;
        let is_direct =
            |key: &PublicKey| key != member && self.members.get(key).is_some_and(|m| m.direct);
        let recorded = state.traversal.introducer.filter(is_direct);
        let bootstrap = self.bootstrap.iter().copied().find(is_direct);
        let preferred = match (recorded, bootstrap) {
            (Some(recorded), Some(bootstrap)) if self.on_demand() => {
                Some(if state.traversal.attempts % 2 == 1 {
                    bootstrap
                } else {
                    recorded
                })
            }
            (recorded, bootstrap) if self.on_demand() => bootstrap.or(recorded),
            (recorded, _) => recorded,
        };
        preferred.or_else(|| self.direct_members().find(|key| key != member))
    }

    /// `from` asks us to introduce it to `peer`.
    pub(super) fn introduce(
        &mut self,
        now: Instant,
        from: PublicKey,
        peer: PublicKey,
        predict_ports: bool,
    ) {
        let (Some(asker), Some(target)) = (self.members.get(&from), self.members.get(&peer)) else {
            return;
        };
        if from == peer {
            return;
        }
        if !target.direct {
            // On demand we may know `peer` from gossip alone: we meet it
            // (through our own introducers, as for traffic), and the
            // asker's next attempt, a second or so later, finds us in
            // session with both.
            if self.on_demand() {
                self.request_session(now, peer);
            }
            return;
        }
        let asker_endpoints = asker.endpoints.clone();
        let target_endpoints = target.endpoints.clone();
        self.counters.rendezvous_arranged += 1;
        // Each side first hears where we see it, so it knows before it
        // punches whether its NAT keeps its port.
        for (key, seen) in [(peer, &target_endpoints), (from, &asker_endpoints)] {
            if let Some(&endpoint) = seen.first() {
                self.send(key, &Control::Observed { endpoint });
            }
        }
        self.send(
            peer,
            &Control::Rendezvous {
                peer: from,
                endpoints: asker_endpoints,
                predict_ports,
            },
        );
        self.send(
            from,
            &Control::Rendezvous {
                peer,
                endpoints: target_endpoints,
                predict_ports,
            },
        );
    }

    /// A mutual member says `peer` wants to meet us at `endpoints`. We
    /// punch even if `peer` greeted us already: hearing it does not mean
    /// it hears us (our NAT may drop what it returns).
    pub(super) fn rendezvous(
        &mut self,
        now: Instant,
        peer: PublicKey,
        endpoints: &[SocketAddr],
        predict_ports: bool,
    ) {
        let Some(member) = self.members.get(&peer) else {
            return;
        };
        if endpoints.is_empty() {
            return;
        }
        let unnated = member.has_no_nat(endpoints);
        let predict_ports = predict_ports && !unnated;
        let port_changing = self.behind_port_changing_nat();
        let spray = if predict_ports {
            self.counters.port_predictions += 1;
            self.random_ports_at(endpoints[0], PREDICTION_PROBES)
        } else {
            Vec::new()
        };
        let Some(member) = self.members.get_mut(&peer) else {
            return;
        };
        for endpoint in endpoints.iter().rev() {
            member.endpoints.retain(|known| known != endpoint);
            member.endpoints.insert(0, *endpoint);
        }
        member.endpoints.truncate(MAX_ENDPOINTS);
        let endpoints: Vec<SocketAddr> = endpoints.iter().take(MAX_ENDPOINTS).copied().collect();
        // The known endpoints first: a peer without a session is pointed
        // at the first one the initiation goes to. Not from behind a NAT
        // that changes our port, toward a member behind a NAT: the
        // initiation would leave from a mapping the member's punch never
        // opened, and its NAT would keep the stray's entry (see above).
        let mut connect = if port_changing && !unnated {
            Vec::new()
        } else {
            endpoints.clone()
        };
        connect.extend(spray);
        member.traversal.connect = (!connect.is_empty()).then(|| (now + CONNECT_DELAY, connect));
        self.reschedule(peer);
        if predict_ports {
            self.actions.push_back(MeshAction::PredictPorts {
                key: peer,
                toward: endpoints.clone(),
            });
        }
        self.actions.push_back(MeshAction::Punch {
            key: peer,
            endpoints,
        });
    }

    /// Whether the latest introducer saw us send from a port that none of
    /// our own addresses has: our NAT does not keep our port (a symmetric
    /// NAT, `masquerade fully-random`). Unknown (no introducer yet, or no
    /// addresses of our own configured) counts as no.
    fn behind_port_changing_nat(&self) -> bool {
        self.observed.is_some_and(|seen| {
            !self.config.host_addresses.is_empty()
                && !self
                    .config
                    .host_addresses
                    .iter()
                    .any(|own| own.port() == seen.port())
        })
    }

    /// `count` distinct ports a NAT may have mapped, at `endpoint`'s
    /// address, not `endpoint`'s own port (the plain connect covers it).
    fn random_ports_at(&mut self, endpoint: SocketAddr, count: usize) -> Vec<SocketAddr> {
        let span = u64::from(u16::MAX - LOWEST_NAT_PORT) + 1;
        let mut chosen = std::collections::HashSet::with_capacity(count);
        chosen.insert(endpoint.port());
        let mut ports = Vec::with_capacity(count);
        while ports.len() < count {
            let port = LOWEST_NAT_PORT + (self.next_random() % span) as u16;
            if chosen.insert(port) {
                ports.push(SocketAddr::new(endpoint.ip(), port));
            }
        }
        ports
    }
}

impl Mesh {
    /// `from` asks us to relay between it and `peer`.
    pub(super) fn relay_request(&mut self, from: PublicKey, peer: PublicKey) {
        let side = |mesh: &Self, key: &PublicKey| {
            let member = mesh.members.get(key).filter(|m| m.direct)?;
            Some(crate::relay::RelaySide {
                key: *key,
                endpoint: *member.endpoints.first()?,
            })
        };
        let (Some(a), Some(b)) = (side(self, &from), side(self, &peer)) else {
            return;
        };
        if from == peer {
            return;
        }
        self.counters.relays_offered += 1;
        self.actions.push_back(MeshAction::RelayBetween { a, b });
        self.send(peer, &Control::RelayOffer { peer: from });
        self.send(from, &Control::RelayOffer { peer });
    }

    /// `relay` offers to carry our traffic with `peer`.
    pub(super) fn relay_offer(&mut self, relay: PublicKey, peer: PublicKey) {
        let Some(relay_endpoint) = self
            .members
            .get(&relay)
            .and_then(|m| m.endpoints.first().copied())
        else {
            return;
        };
        let Some(member) = self.members.get_mut(&peer) else {
            return;
        };
        // Late: the direct path opened meanwhile.
        if member.direct && member.traversal.relay.is_none() && member.traversal.due.is_none() {
            return;
        }
        member.traversal.relay = Some(relay);
        // A member met directly but relayed still needs its attempts.
        self.reschedule(peer);
        self.actions.push_back(MeshAction::UseRelay {
            key: peer,
            relay_endpoint,
        });
    }
}
