//! [`Mesh`]: membership and gossip, as a sans-I/O state machine keyed by
//! WireGuard public keys. It never sees a socket or a packet of user
//! data; the driver ([`crate::Node`]) tells it when a session with a peer
//! comes up and hands it every control message a peer sent, and it
//! answers with control messages to send and peer changes to apply.
//!
//! # Call order
//!
//! ```text
//! Mesh::new(config, now, wall_clock, seed)  (bootstrap members: Admit actions)
//! loop {
//!     a session with a peer came up   -> handle_session(now, key)
//!     a control message from a peer   -> handle_control(now, key, from, plaintext)
//!     an unknown key handshaked to us -> handle_unverified(now, key)
//!     poll_timeout() reached          -> handle_timeout(now)
//!     then drain poll_action() (apply to the peer table and routes),
//!     poll_message() (seal each to its peer in the session) and
//!     poll_refusal() (tell the operator a member refused us)
//! }
//! ```
//!
//! # How a node joins
//!
//! ```text
//! new node N ──handshake──▶ bootstrap B          (N was configured with B's key)
//! N ──Hello(cert N)──▶ B     B verifies, routes N's addresses to N,
//! B ──Hello(cert B)──▶ N        answers with its own certificate
//! B ──Members(all)──▶ N         and everyone it knows, and announces N
//! B ──Members(N)──▶ every member it has heard a Hello from
//! ```
//!
//! Every node admits each member it learns (a peer with the certificate's
//! addresses and the gossiped endpoint) and meets it through a rendezvous
//! arranged by the member that told of it (`traversal.rs`), which works
//! through NATs too. It pings every member it has met every
//! `ping_interval`, which keeps sessions and NAT mappings open and
//! measures the round trip. Every `gossip_interval` a node sends its whole
//! member list to one member chosen at random (anti-entropy), so a lost
//! announcement costs one interval, not a member.
//!
//! Revocations spread by flood, by a digest exchanged on every greeting
//! and by a periodic digest check (`revocations.rs`). The network policy
//! spreads the same three ways, as a digest that members lacking it
//! answer by fetching the signed text in chunks (`policy.rs`,
//! `policy_transfer.rs`).
//!
//! A member disappears when its certificate expires, a revocation covers
//! it, it says Goodbye, or nobody has heard from it for `member_timeout`
//! (each gossip record says how long ago its sender heard of the member,
//! so liveness spreads with the list). A peer that handshaked with us
//! without being a member must present a valid Hello within
//! `verify_timeout`, or it is removed. A refused Hello is answered with
//! the reason (`refusals.rs`).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::{PublicKey, WallClock};

use crate::cert::{Certificate, Revocation};
use crate::control::{Control, MAX_ENDPOINTS};
use revocations::RevocationDigest;

struct Member {
    certificate: Certificate,
    /// Most recently observed first.
    endpoints: Vec<SocketAddr>,
    /// Where it says it listens: greeted directly, no NAT in the way.
    host_addresses: Vec<SocketAddr>,
    last_heard: Instant,
    direct: bool,
    rtt: Option<Duration>,
    ping_in_flight: Option<(u64, Instant)>,
    /// NAT traversal toward a member that has not answered yet.
    traversal: traversal::Traversal,
}

impl Member {
    /// Whether it is seen at one of its own addresses: no NAT between it
    /// and whoever saw it there.
    fn has_no_nat(&self, seen: &[SocketAddr]) -> bool {
        seen.iter()
            .any(|endpoint| self.host_addresses.contains(endpoint))
    }
}

pub struct Mesh {
    config: MeshConfig,
    wall_clock: WallClock,
    /// Ordered by key, as are `revocations` and `bootstrap`: what is
    /// sent in which order then follows from the seed alone, so a
    /// simulated mesh replays exactly (a hash map's order is drawn from
    /// the OS per process).
    members: BTreeMap<PublicKey, Member>,
    /// The newest revocation per node key.
    revocations: BTreeMap<PublicKey, Revocation>,
    /// The digest of `revocations`, kept current as they change.
    revocation_digest: RevocationDigest,
    /// The network's policy, its highest version given (`policy.rs`).
    policy: Option<policy::HeldPolicy>,
    /// The one policy being fetched from a member, if any
    /// (`policy_transfer.rs`).
    policy_transfer: Option<policy_transfer::Transfer>,
    /// Fetched policies that failed their checks, not fetched again.
    refused_policies: policy_transfer::RefusedPolicies,
    /// Members that said Goodbye, and when: older gossip about them is
    /// ignored so they do not come back from other members' lists.
    departed: HashMap<PublicKey, Instant>,
    /// Peers that handshaked without being members: the deadline for
    /// their Hello.
    unverified: HashMap<PublicKey, Instant>,
    /// Peers we have sent our Hello to since they became reachable.
    greeted: HashSet<PublicKey>,
    /// Where the latest introducer saw us send from (`Control::Observed`):
    /// our NAT's mapping toward it.
    observed: Option<SocketAddr>,
    /// When we last told each refused key why (`refusals.rs`).
    refusals_answered: HashMap<PublicKey, Instant>,
    /// Members' refusals of our own certificate, for `poll_refusal`.
    refusals: VecDeque<Refusal>,
    bootstrap: BTreeSet<PublicKey>,
    /// Members that greeted us as their bootstrap member: they keep their
    /// session with us, so we keep ours with them (`on_demand.rs`).
    joined_through_us: HashSet<PublicKey>,
    /// The `now` of the latest input, for ages in outgoing gossip.
    last_input: Instant,
    /// The deadlines of members and unverified peers (`timers.rs`).
    timers: timers::KeyTimers,
    next_gossip: Instant,
    next_ping: Instant,
    next_revocation_check: Instant,
    /// Dialling bootstrap members again while we know no member
    /// (`redial.rs`).
    redial: redial::BootstrapRedial,
    /// The member serving as our exit node (`routes.rs`).
    exit: Option<PublicKey>,
    /// Counts changes of the routes behind members (`routes.rs`).
    routes_generation: u64,
    rng_state: u64,
    actions: VecDeque<MeshAction>,
    outbox: VecDeque<Outbound>,
    counters: MeshCounters,
}

impl Mesh {
    /// A mesh that joins through `config.bootstrap`. `seed` drives the
    /// choice of gossip partners and timer jitter (any value; tests pass
    /// fixed ones).
    pub fn new(config: MeshConfig, now: Instant, wall_clock: WallClock, seed: u64) -> Self {
        let mut actions = VecDeque::new();
        for bootstrap in &config.bootstrap {
            actions.push_back(MeshAction::Admit {
                key: bootstrap.key,
                addresses: Vec::new(),
                endpoint: Some(bootstrap.endpoint),
            });
        }
        let mut mesh = Self {
            bootstrap: config.bootstrap.iter().map(|b| b.key).collect(),
            joined_through_us: HashSet::new(),
            wall_clock,
            members: BTreeMap::new(),
            revocations: BTreeMap::new(),
            revocation_digest: RevocationDigest::of(std::iter::empty()),
            policy: None,
            policy_transfer: None,
            refused_policies: policy_transfer::RefusedPolicies::new(),
            departed: HashMap::new(),
            unverified: HashMap::new(),
            greeted: HashSet::new(),
            observed: None,
            refusals_answered: HashMap::new(),
            refusals: VecDeque::new(),
            last_input: now,
            timers: timers::KeyTimers::default(),
            next_gossip: now,
            next_ping: now,
            next_revocation_check: now,
            redial: redial::BootstrapRedial::starting(now),
            exit: None,
            routes_generation: 0,
            rng_state: seed | 1,
            actions,
            outbox: VecDeque::new(),
            counters: MeshCounters::default(),
            config,
        };
        mesh.next_gossip = now + mesh.jittered(mesh.config.gossip_interval);
        mesh.next_ping = now + mesh.jittered(mesh.config.ping_interval);
        mesh.next_revocation_check = now + mesh.jittered(mesh.config.revocation_check_interval);
        // Sending the Hello is what brings the first session up.
        let bootstrap: Vec<PublicKey> = mesh.bootstrap.iter().copied().collect();
        for key in bootstrap {
            mesh.greet(key);
        }
        mesh
    }

    pub fn own_key(&self) -> PublicKey {
        self.config.certificate.node_key
    }

    pub fn counters(&self) -> &MeshCounters {
        &self.counters
    }

    pub fn is_member(&self, key: &PublicKey) -> bool {
        self.members.contains_key(key)
    }

    /// This node's own certificate, as renewed last.
    pub fn own_certificate(&self) -> &Certificate {
        &self.config.certificate
    }

    /// The certificate of member `key`, if it is one.
    pub fn member_certificate(&self, key: &PublicKey) -> Option<&Certificate> {
        self.members.get(key).map(|member| &member.certificate)
    }

    pub fn members(&self) -> impl Iterator<Item = MemberStatus> + '_ {
        self.members.iter().map(|(key, member)| MemberStatus {
            key: *key,
            name: member.certificate.name.clone(),
            addresses: member.certificate.addresses.clone(),
            groups: member.certificate.groups.clone(),
            routes: member.certificate.routes.clone(),
            exit_node: self.exit == Some(*key),
            endpoints: member.endpoints.clone(),
            direct: member.direct,
            relay: member.traversal.relay(),
            on_demand: self.on_demand()
                && !member.direct
                && member.traversal.due().is_none()
                && !self.needs_session(key),
            rtt: member.rtt,
            last_heard: member.last_heard,
            expires_at: member.certificate.expires_at,
        })
    }

    /// A session with `key` came up: greet it if it may be a fjord member.
    pub fn handle_session(&mut self, now: Instant, key: PublicKey) {
        self.last_input = now;
        if self.members.contains_key(&key)
            || self.bootstrap.contains(&key)
            || self.unverified.contains_key(&key)
        {
            self.greet(key);
        }
    }

    /// A peer that is not configured completed a handshake with us (the
    /// driver admitted it provisionally). It has `verify_timeout` to show
    /// a certificate.
    pub fn handle_unverified(&mut self, now: Instant, key: PublicKey) {
        self.last_input = now;
        if !self.members.contains_key(&key) {
            self.unverified
                .insert(key, now + self.config.verify_timeout);
            self.reschedule(key);
        }
    }

    /// A control message from the peer `key`, received from `from`.
    pub fn handle_control(
        &mut self,
        now: Instant,
        key: PublicKey,
        from: SocketAddr,
        plaintext: &[u8],
    ) -> Result<(), MeshDrop> {
        self.last_input = now;
        let result = Control::decode(plaintext)
            .map_err(MeshDrop::from)
            .and_then(|control| self.handle_message(now, key, from, control));
        match result {
            Err(MeshDrop::Malformed(_)) => self.counters.malformed += 1,
            Err(MeshDrop::Certificate(_)) => self.counters.refused_certificates += 1,
            Err(MeshDrop::NotAMember) => self.counters.not_a_member += 1,
            Ok(()) => {}
        }
        result
    }

    fn handle_message(
        &mut self,
        now: Instant,
        key: PublicKey,
        from: SocketAddr,
        control: Control,
    ) -> Result<(), MeshDrop> {
        let control = match control {
            Control::Hello {
                certificate,
                wants_members,
                host_addresses,
            } => {
                return self.handle_hello(
                    now,
                    key,
                    from,
                    *certificate,
                    wants_members,
                    host_addresses,
                );
            }
            // A refusal answers our Hello, often from a bootstrap member
            // that never became a member of ours: not held to the member
            // check below (`handle_refused` has its own).
            Control::Refused { reason } => return self.handle_refused(key, reason),
            other => other,
        };
        let relayed = self.relayed_from(&key, from);
        let Some(member) = self.members.get_mut(&key) else {
            return Err(MeshDrop::NotAMember);
        };
        member.last_heard = now;
        // Through a relay, `from` is the relay's address, not the member's.
        if !relayed {
            observe_endpoint(&mut member.endpoints, from);
        }
        match control {
            Control::Ping { nonce } => self.send(key, &Control::Pong { nonce }),
            Control::Pong { nonce } => {
                if let Some((sent_nonce, sent_at)) = member.ping_in_flight
                    && sent_nonce == nonce
                {
                    member.rtt = Some(now.saturating_duration_since(sent_at));
                    member.ping_in_flight = None;
                }
            }
            Control::Members(records) => {
                let mut fresh = Vec::new();
                for record in records {
                    let learned = record.certificate.node_key;
                    let known = self.members.contains_key(&learned);
                    self.learn(now, record);
                    if !known && self.members.contains_key(&learned) {
                        fresh.push(learned);
                    }
                    self.note_introducer(now, key, learned);
                }
                self.pass_on_news(key, &fresh);
            }
            Control::Introduce {
                peer,
                predict_ports,
            } => self.introduce(now, key, peer, predict_ports),
            Control::Observed { endpoint } => {
                if self.members.contains_key(&key) {
                    self.observed = Some(endpoint);
                }
            }
            Control::Rendezvous {
                peer,
                endpoints,
                predict_ports,
            } => self.rendezvous(now, peer, &endpoints, predict_ports),
            Control::RelayRequest { peer } => self.relay_request(key, peer),
            Control::RelayOffer { peer } => self.relay_offer(key, peer),
            Control::Revocations(revocations) => {
                for revocation in revocations {
                    self.learn_revocation(revocation)?;
                }
            }
            Control::RevocationDigest { count, hash } => {
                self.handle_revocation_digest(key, RevocationDigest { count, hash });
            }
            Control::PolicyDigest { id, len } => self.handle_policy_digest(now, key, id, len),
            Control::PolicyRequest { id, first, count } => {
                self.handle_policy_request(key, id, first, count);
            }
            Control::PolicyChunk {
                id,
                index,
                count,
                bytes,
            } => self.handle_policy_chunk(now, key, id, index, count, &bytes),
            Control::Goodbye => {
                self.departed.insert(key, now);
                self.remove_member(key);
                if self.bootstrap.contains(&key) {
                    // Most often a restart: greet it again at once. The
                    // Hello waits in a handshake that is retried every
                    // 5 s, so the member is back within one retry of
                    // coming up, where the stale session kept it off
                    // every list for 16-20 s.
                    self.actions.push_back(MeshAction::EndSessions { key });
                    self.greet(key);
                }
            }
            // Handled above, or by the node's path MTU prober before
            // they get here.
            Control::Hello { .. }
            | Control::Refused { .. }
            | Control::MtuProbe { .. }
            | Control::MtuAck { .. } => {}
        }
        Ok(())
    }

    fn unix_secs(&self, now: Instant) -> u64 {
        self.wall_clock.since_epoch(now).as_secs()
    }

    /// Runs what is due: pings, gossip, expiry and verification deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_input = now;
        self.run_due_keys(now, |mesh| {
            if now >= mesh.next_ping {
                mesh.ping_all(now);
                mesh.meet_unmet_members(now);
                mesh.next_ping = now + mesh.jittered(mesh.config.ping_interval);
            }
            if now >= mesh.next_gossip {
                mesh.gossip_to_random_member();
                mesh.next_gossip = now + mesh.jittered(mesh.config.gossip_interval);
            }
            if now >= mesh.next_revocation_check {
                mesh.check_revocations();
                mesh.check_policy();
                mesh.next_revocation_check =
                    now + mesh.jittered(mesh.config.revocation_check_interval);
            }
            mesh.handle_policy_timeout(now);
            mesh.handle_redial(now);
        });
    }

    /// When `handle_timeout` should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        [
            Some(self.next_ping),
            Some(self.next_gossip),
            Some(self.next_revocation_check),
            self.policy_deadline(),
            self.redial_deadline(),
            self.timers.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    pub fn poll_action(&mut self) -> Option<MeshAction> {
        self.actions.pop_front()
    }

    pub fn poll_message(&mut self) -> Option<Outbound> {
        self.outbox.pop_front()
    }

    /// Says Goodbye to every member that has spoken to us directly; call
    /// before shutting down, then send what `poll_message` returns.
    pub fn leave(&mut self) {
        let direct: Vec<PublicKey> = self.direct_members().collect();
        for key in direct {
            self.send(key, &Control::Goodbye);
        }
    }

    fn direct_members(&self) -> impl Iterator<Item = PublicKey> + '_ {
        self.members
            .iter()
            .filter(|(_, member)| member.direct)
            .map(|(key, _)| *key)
    }

    fn greet(&mut self, key: PublicKey) {
        self.greeted.insert(key);
        let hello = Control::Hello {
            certificate: Box::new(self.config.certificate.clone()),
            wants_members: self.bootstrap.contains(&key) || self.members.is_empty(),
            host_addresses: self.config.host_addresses.clone(),
        };
        self.send(key, &hello);
    }

    fn remove_member(&mut self, key: PublicKey) {
        if let Some(member) = self.members.remove(&key) {
            self.reschedule(key);
            self.joined_through_us.remove(&key);
            self.counters.members_removed += 1;
            self.greeted.remove(&key);
            if !self.bootstrap.contains(&key) {
                self.actions.push_back(MeshAction::Remove { key });
            } else if !member.certificate.routes.is_empty() {
                // A bootstrap member stays a peer with its addresses, but
                // the networks behind it are no longer its to route.
                self.actions.push_back(MeshAction::Admit {
                    key,
                    addresses: member.certificate.addresses,
                    endpoint: None,
                });
            }
            self.refresh_exit();
            self.routes_changed();
        }
    }

    fn send(&mut self, to: PublicKey, control: &Control) {
        self.outbox.push_back(Outbound {
            to,
            message: control.encode(),
        });
    }

    /// xorshift64: enough to spread gossip partners and timer phases.
    fn next_random(&mut self) -> u64 {
        let mut x = self.rng_state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng_state = x;
        x
    }

    /// `interval` scaled by a random factor in [0.75, 1.25), so members
    /// started together do not gossip in lockstep.
    fn jittered(&mut self, interval: Duration) -> Duration {
        let permille = 750 + self.next_random() % 500;
        interval * permille as u32 / 1000
    }
}

/// A direct observation goes first.
fn observe_endpoint(endpoints: &mut Vec<SocketAddr>, from: SocketAddr) {
    endpoints.retain(|known| *known != from);
    endpoints.insert(0, from);
    endpoints.truncate(MAX_ENDPOINTS);
}

mod admission;
mod bootstrap;
mod config;
mod gossip;
mod on_demand;
mod policy;
mod policy_transfer;
mod redial;
mod refusals;
mod renewal;
mod revocations;
mod routes;
mod timers;
mod traversal;

pub use bootstrap::BootstrapChange;
pub use config::{
    Bootstrap, CHANGED_GOSSIP_DELAY, DEFAULT_EAGER_SESSIONS, DEFAULT_IDLE_TIMEOUT, MemberStatus,
    MeshAction, MeshConfig, MeshCounters, MeshDrop, Outbound, Trust,
};
pub use on_demand::GOSSIP_PARTNERS_EACH_SIDE;
pub use policy::PolicyOffer;
pub use policy_transfer::{
    POLICY_RETRY_INTERVAL, POLICY_TRANSFER_RETRIES, REMEMBERED_REFUSED_POLICIES,
};
pub use refusals::{MAX_ANSWERED_KEYS, MAX_PENDING_REFUSALS, REFUSAL_NOTICE_INTERVAL, Refusal};
pub use routes::{ExitNodeStatus, is_default_route};
pub use traversal::{PREDICTION_PROBES, PREDICTION_SOCKETS};

#[cfg(test)]
mod tests;
