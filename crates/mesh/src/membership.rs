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
//! and by a periodic digest check (`revocations.rs`).
//!
//! A member disappears when its certificate expires, a revocation covers
//! it, it says Goodbye, or nobody has heard from it for `member_timeout`
//! (each gossip record says how long ago its sender heard of the member,
//! so liveness spreads with the list). A peer that handshaked with us
//! without being a member must present a valid Hello within
//! `verify_timeout`, or it is removed. A refused Hello is answered with
//! the reason (`refusals.rs`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::{PublicKey, WallClock};

use crate::cert::{CertError, Certificate, Revocation};
use crate::control::{Control, MAX_ENDPOINTS, MemberRecord};
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
    members: HashMap<PublicKey, Member>,
    /// The newest revocation per node key.
    revocations: HashMap<PublicKey, Revocation>,
    /// The digest of `revocations`, kept current as they change.
    revocation_digest: RevocationDigest,
    /// Members that said Goodbye, and when: older gossip about them is
    /// ignored so they do not come back from other members' lists.
    departed: HashMap<PublicKey, Instant>,
    /// Peers that handshaked without being members: the deadline for
    /// their Hello.
    unverified: HashMap<PublicKey, Instant>,
    /// Peers we have sent our Hello to since they became reachable.
    greeted: HashSet<PublicKey>,
    /// When we last told each refused key why (`refusals.rs`).
    refusals_answered: HashMap<PublicKey, Instant>,
    /// Members' refusals of our own certificate, for `poll_refusal`.
    refusals: VecDeque<Refusal>,
    bootstrap: HashSet<PublicKey>,
    /// The `now` of the latest input, for ages in outgoing gossip.
    last_input: Instant,
    /// The earliest NAT traversal step due, if any.
    next_punch: Option<Instant>,
    /// Members with a Connect waiting (so idle meshes skip the scan).
    pending_connects: usize,
    next_gossip: Instant,
    next_ping: Instant,
    next_revocation_check: Instant,
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
            wall_clock,
            members: HashMap::new(),
            revocations: HashMap::new(),
            revocation_digest: RevocationDigest::of(std::iter::empty()),
            departed: HashMap::new(),
            unverified: HashMap::new(),
            greeted: HashSet::new(),
            refusals_answered: HashMap::new(),
            refusals: VecDeque::new(),
            last_input: now,
            next_punch: None,
            pending_connects: 0,
            next_gossip: now,
            next_ping: now,
            next_revocation_check: now,
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

    pub fn members(&self) -> impl Iterator<Item = MemberStatus> + '_ {
        self.members.iter().map(|(key, member)| MemberStatus {
            key: *key,
            name: member.certificate.name.clone(),
            addresses: member.certificate.addresses.clone(),
            endpoints: member.endpoints.clone(),
            direct: member.direct,
            relay: member.traversal.relay(),
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
                for record in records {
                    let learned = record.certificate.node_key;
                    self.learn(now, record);
                    self.note_introducer(now, key, learned);
                }
            }
            Control::Introduce {
                peer,
                predict_ports,
            } => self.introduce(key, peer, predict_ports),
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

    fn handle_hello(
        &mut self,
        now: Instant,
        key: PublicKey,
        from: SocketAddr,
        certificate: Certificate,
        wants_members: bool,
        mut host_addresses: Vec<SocketAddr>,
    ) -> Result<(), MeshDrop> {
        host_addresses.truncate(MAX_ENDPOINTS);
        let accepted = if certificate.node_key != key || key == self.own_key() {
            Err(CertError::WrongNode)
        } else {
            self.accept(now, &certificate)
        };
        let certificate = match accepted {
            Ok(certificate) => certificate,
            Err(error) => {
                self.answer_refusal(now, key, error);
                if error == CertError::Revoked {
                    self.refuse_revoked(now, key);
                }
                return Err(error.into());
            }
        };
        self.unverified.remove(&key);
        self.departed.remove(&key);
        let is_new = !self.members.contains_key(&key);
        let relayed = self.relayed_from(&key, from);
        let observed: &[SocketAddr] = if relayed { &[] } else { &[from] };
        self.upsert(certificate, observed, &host_addresses, now);
        let mut first_contact = false;
        if let Some(member) = self.members.get_mut(&key) {
            first_contact = !member.direct;
            member.direct = true;
            if !relayed {
                observe_endpoint(&mut member.endpoints, from);
            }
            // Its own word beats anyone's gossip about it.
            member.host_addresses = host_addresses;
        }
        // Measure the path at once rather than at the next ping round.
        if first_contact {
            self.ping(now, key);
        }
        if !relayed {
            self.traversal_done(key);
        }
        if !self.greeted.contains(&key) {
            self.greet(key);
        }
        // Only a joining node asks for the list, so a join costs one list,
        // not one from every member that greets the newcomer.
        if wants_members {
            let everyone: Vec<PublicKey> = self.members.keys().copied().collect();
            self.send_members(key, everyone.iter().filter(|k| **k != key));
            // A joiner that predates revocation digests gets them this way.
            self.send_revocations(key);
        }
        // Each side of a greeting says what revocations it holds, so a
        // member started with one (which flooded to nobody) hands it to
        // everyone it meets, and a restarted one catches up.
        self.send_revocation_digest(key);
        if is_new {
            let direct: Vec<PublicKey> = self
                .members
                .iter()
                .filter(|(k, m)| m.direct && **k != key)
                .map(|(k, _)| *k)
                .collect();
            for peer in direct {
                self.send_members(peer, std::iter::once(&key));
            }
        }
        Ok(())
    }

    /// A member as another member describes it.
    fn learn(&mut self, now: Instant, record: MemberRecord) {
        let key = record.certificate.node_key;
        if key == self.own_key() {
            return;
        }
        // Lists repeat what we know: a certificate identical to the one
        // held was verified already and costs no signature check.
        let known = self
            .members
            .get(&key)
            .is_some_and(|member| member.certificate == record.certificate);
        let certificate = if known {
            record.certificate
        } else {
            match self.accept(now, &record.certificate) {
                Ok(certificate) => certificate,
                Err(_) => return,
            }
        };
        let heard = now
            .checked_sub(Duration::from_secs(u64::from(record.heard_secs_ago)))
            .unwrap_or(now);
        if self.departed.get(&key).is_some_and(|left| heard <= *left) {
            return;
        }
        if now.saturating_duration_since(heard) >= self.config.member_timeout {
            return;
        }
        self.upsert(
            certificate,
            &record.endpoints,
            &record.host_addresses,
            heard,
        );
    }

    fn upsert(
        &mut self,
        certificate: Certificate,
        endpoints: &[SocketAddr],
        host_addresses: &[SocketAddr],
        heard: Instant,
    ) {
        let key = certificate.node_key;
        match self.members.get_mut(&key) {
            Some(member) => {
                member.last_heard = member.last_heard.max(heard);
                for endpoint in endpoints {
                    merge_endpoint(&mut member.endpoints, *endpoint);
                }
                if member.host_addresses.is_empty() {
                    member.host_addresses =
                        host_addresses.iter().take(MAX_ENDPOINTS).copied().collect();
                }
                if certificate.issued_at > member.certificate.issued_at {
                    let readdress = certificate.addresses != member.certificate.addresses;
                    member.certificate = certificate;
                    if readdress {
                        self.actions.push_back(MeshAction::Admit {
                            key,
                            addresses: member.certificate.addresses.clone(),
                            endpoint: member.endpoints.first().copied(),
                        });
                    }
                }
            }
            None => {
                let endpoints: Vec<SocketAddr> =
                    endpoints.iter().take(MAX_ENDPOINTS).copied().collect();
                self.actions.push_back(MeshAction::Admit {
                    key,
                    addresses: certificate.addresses.clone(),
                    endpoint: endpoints.first().copied(),
                });
                self.counters.members_learned += 1;
                // While the membership changes, gossip sooner: a member
                // that missed an announcement (it was not yet in session
                // with the announcer) hears of the newcomer within about
                // a second instead of a full interval.
                self.next_gossip = self.next_gossip.min(self.last_input + CHANGED_GOSSIP_DELAY);
                // A member learned from gossip is met through a rendezvous
                // (see `traversal.rs`), not greeted blindly: an unasked
                // packet at its NAT would spoil the NAT's mapping for it.
                self.members.insert(
                    key,
                    Member {
                        certificate,
                        endpoints,
                        host_addresses: host_addresses
                            .iter()
                            .take(MAX_ENDPOINTS)
                            .copied()
                            .collect(),
                        last_heard: heard,
                        direct: false,
                        rtt: None,
                        ping_in_flight: None,
                        traversal: traversal::Traversal::default(),
                    },
                );
            }
        }
    }

    /// The record to keep for a member presenting `certificate`: the
    /// certificate itself once verified, or the member list's own entry
    /// for its key when it names the same addresses.
    fn accept(&self, now: Instant, certificate: &Certificate) -> Result<Certificate, CertError> {
        let network = match &self.config.trust {
            Trust::Network(network) => network,
            Trust::Members(listed) => {
                return listed
                    .iter()
                    .find(|member| {
                        member.node_key == certificate.node_key
                            && member.addresses == certificate.addresses
                    })
                    .cloned()
                    .ok_or(CertError::NotListed);
            }
        };
        certificate.verify(network, self.unix_secs(now))?;
        if self
            .revocations
            .get(&certificate.node_key)
            .is_some_and(|revocation| revocation.covers(certificate))
        {
            return Err(CertError::Revoked);
        }
        Ok(certificate.clone())
    }

    fn unix_secs(&self, now: Instant) -> u64 {
        self.wall_clock.since_epoch(now).as_secs()
    }

    /// Runs what is due: pings, gossip, expiry and verification deadlines.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.last_input = now;
        let unix_now = self.unix_secs(now);
        let expired: Vec<PublicKey> = self
            .members
            .iter()
            .filter(|(_, m)| {
                unix_now >= m.certificate.expires_at
                    || now.saturating_duration_since(m.last_heard) >= self.config.member_timeout
            })
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            self.remove_member(key);
        }
        let overdue: Vec<PublicKey> = self
            .unverified
            .iter()
            .filter(|(_, deadline)| **deadline <= now)
            .map(|(k, _)| *k)
            .collect();
        for key in overdue {
            self.unverified.remove(&key);
            if !self.members.contains_key(&key) && !self.bootstrap.contains(&key) {
                self.actions.push_back(MeshAction::Remove { key });
            }
        }
        if now >= self.next_ping {
            self.ping_all(now);
            self.next_ping = now + self.jittered(self.config.ping_interval);
        }
        if now >= self.next_gossip {
            self.gossip_to_random_member();
            self.next_gossip = now + self.jittered(self.config.gossip_interval);
        }
        if now >= self.next_revocation_check {
            self.check_revocations();
            self.next_revocation_check = now + self.jittered(self.config.revocation_check_interval);
        }
        if self.next_punch.is_some_and(|due| due <= now) {
            self.punch_due(now);
        }
        self.connect_due(now);
    }

    /// When `handle_timeout` should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let verify = self.unverified.values().min().copied();
        Some(
            [
                Some(self.next_ping),
                Some(self.next_gossip),
                Some(self.next_revocation_check),
                verify,
                self.next_punch,
                self.next_connect(),
            ]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(self.next_ping),
        )
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
        if self.members.remove(&key).is_some() {
            self.counters.members_removed += 1;
            self.greeted.remove(&key);
            if !self.bootstrap.contains(&key) {
                self.actions.push_back(MeshAction::Remove { key });
            }
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

/// A gossiped endpoint goes last, if there is room.
fn merge_endpoint(endpoints: &mut Vec<SocketAddr>, endpoint: SocketAddr) {
    if !endpoints.contains(&endpoint) && endpoints.len() < MAX_ENDPOINTS {
        endpoints.push(endpoint);
    }
}

mod bootstrap;
mod config;
mod gossip;
mod refusals;
mod renewal;
mod revocations;
mod traversal;

pub use bootstrap::BootstrapChange;
pub use config::{
    Bootstrap, CHANGED_GOSSIP_DELAY, MemberStatus, MeshAction, MeshConfig, MeshCounters, MeshDrop,
    Outbound, Trust,
};
pub use refusals::{MAX_ANSWERED_KEYS, MAX_PENDING_REFUSALS, REFUSAL_NOTICE_INTERVAL, Refusal};
pub use traversal::{PREDICTION_PROBES, PREDICTION_SOCKETS};

#[cfg(test)]
mod tests;
