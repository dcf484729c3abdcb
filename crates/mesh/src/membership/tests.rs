//! Scenario tests for [`Mesh`] on a simulated network of sessions: every
//! control message is delivered in order, after the sender's peer table
//! allows it, with simulated time and seeded randomness.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::{PrivateKey, PublicKey, WallClock};

use super::*;
use crate::cert::{CertError, NetworkSecret};
use crate::cidr::Cidr;

const EPOCH_SECS: u64 = 1_800_000_000;

struct SimNode {
    mesh: Mesh,
    address: SocketAddr,
    /// The peer table the driver would keep: key → routed addresses.
    peers: HashMap<PublicKey, Vec<Cidr>>,
    /// Peers with a session up.
    sessions: HashSet<PublicKey>,
    online: bool,
}

struct Sim {
    secret: NetworkSecret,
    base: Instant,
    now: Instant,
    nodes: BTreeMap<PublicKey, SimNode>,
    in_flight: VecDeque<(PublicKey, PublicKey, Vec<u8>)>,
    delivered: u64,
    /// Revocations messages among `delivered`.
    revocation_lists: u64,
    /// Messages from the first key to the second are lost until the
    /// second punched toward the first.
    blocked: Vec<(PublicKey, PublicKey)>,
    /// (who, toward whom) for every Punch action.
    punched: Vec<(PublicKey, PublicKey)>,
    /// Pairs behind a symmetric NAT on one side: nothing passes either
    /// way until a Connect with port prediction probes reaches a side
    /// that opened prediction sockets toward the sender.
    symmetric: Vec<(PublicKey, PublicKey)>,
    /// (who, toward whom, endpoints) for every PredictPorts action.
    predicted: Vec<(PublicKey, PublicKey, Vec<SocketAddr>)>,
    /// (who, toward whom, endpoints) for every Connect action.
    connected: Vec<(PublicKey, PublicKey, Vec<SocketAddr>)>,
    /// Every how many policy chunks one is lost (1: all are), if any.
    policy_chunk_loss: Option<u64>,
    /// Policy chunks sent so far, lost ones included.
    policy_chunks: u64,
    /// `eager_sessions` of the nodes joining next, if not the default.
    eager_sessions: Option<usize>,
}

fn key(index: u16) -> PrivateKey {
    let mut bytes = [0u8; 32];
    bytes[..2].copy_from_slice(&index.to_be_bytes());
    bytes[31] = 0x55;
    PrivateKey::from_bytes(bytes)
}

impl Sim {
    fn new() -> Self {
        let base = Instant::now();
        Self {
            secret: NetworkSecret::from_seed([3; 32]),
            base,
            now: base,
            nodes: BTreeMap::new(),
            in_flight: VecDeque::new(),
            delivered: 0,
            revocation_lists: 0,
            blocked: Vec::new(),
            punched: Vec::new(),
            symmetric: Vec::new(),
            predicted: Vec::new(),
            connected: Vec::new(),
            policy_chunk_loss: None,
            policy_chunks: 0,
            eager_sessions: None,
        }
    }

    fn wall_clock(&self) -> WallClock {
        WallClock {
            base: self.base,
            base_since_epoch: Duration::from_secs(EPOCH_SECS),
        }
    }

    fn certificate(&self, index: u16, lifetime_secs: u64) -> Certificate {
        let address = Cidr::host(std::net::IpAddr::from([
            198,
            19,
            (index >> 8) as u8,
            index as u8,
        ]));
        self.secret
            .sign(
                key(index).public_key(),
                &format!("node-{index}"),
                &[address],
                EPOCH_SECS - 10,
                EPOCH_SECS + lifetime_secs,
            )
            .unwrap()
    }

    fn address(index: u16) -> SocketAddr {
        SocketAddr::from(([198, 18, (index >> 8) as u8, index as u8], 51820))
    }

    /// Adds node `index` joining through `bootstrap` (none for the first).
    fn join(&mut self, index: u16, bootstrap: Option<u16>) -> PublicKey {
        let certificate = self.certificate(index, 86_400);
        self.join_with(index, certificate, bootstrap)
    }

    fn join_with(
        &mut self,
        index: u16,
        certificate: Certificate,
        bootstrap: Option<u16>,
    ) -> PublicKey {
        let trust = Trust::Network(self.secret.public_key());
        self.join_trusting(index, trust, certificate, bootstrap)
    }

    fn join_trusting(
        &mut self,
        index: u16,
        trust: Trust,
        certificate: Certificate,
        bootstrap: Option<u16>,
    ) -> PublicKey {
        let mesh = self.new_mesh(index, trust, certificate, bootstrap);
        self.start(index, mesh)
    }

    /// Node `index`'s mesh, not started yet (so a test can give it
    /// revocations before it meets anyone, as `fjord up` does).
    fn new_mesh(
        &self,
        index: u16,
        trust: Trust,
        certificate: Certificate,
        bootstrap: Option<u16>,
    ) -> Mesh {
        let mut config = MeshConfig::new(trust, certificate, 1420);
        if let Some(eager_sessions) = self.eager_sessions {
            config.eager_sessions = eager_sessions;
        }
        config.bootstrap = bootstrap
            .map(|b| Bootstrap {
                key: key(b).public_key(),
                endpoint: Self::address(b),
            })
            .into_iter()
            .collect();
        Mesh::new(config, self.now, self.wall_clock(), u64::from(index) + 1)
    }

    /// Puts node `index` with `mesh` on the network.
    fn start(&mut self, index: u16, mesh: Mesh) -> PublicKey {
        let public = key(index).public_key();
        self.nodes.insert(
            public,
            SimNode {
                mesh,
                address: Self::address(index),
                peers: HashMap::new(),
                sessions: HashSet::new(),
                online: true,
            },
        );
        self.pump();
        public
    }

    /// Like `join`, but `blocked_by`'s messages to the newcomer are lost
    /// until `blocked_by` punches toward it (the newcomer's NAT filters
    /// them). Its own messages to `blocked_by` get through.
    fn join_blocked(
        &mut self,
        index: u16,
        bootstrap: Option<u16>,
        blocked_by: PublicKey,
    ) -> PublicKey {
        let newcomer = key(index).public_key();
        self.blocked.push((blocked_by, newcomer));
        self.join(index, bootstrap)
    }

    /// Applies actions and delivers messages until the network is quiet.
    fn pump(&mut self) {
        loop {
            let mut progressed = false;
            let mut connects = Vec::new();
            let keys: Vec<PublicKey> = self.nodes.keys().copied().collect();
            for from in &keys {
                let node = self.nodes.get_mut(from).unwrap();
                while let Some(action) = node.mesh.poll_action() {
                    progressed = true;
                    match action {
                        MeshAction::Admit { key, addresses, .. } => {
                            node.peers.insert(key, addresses);
                        }
                        MeshAction::Remove { key } => {
                            node.peers.remove(&key);
                            node.sessions.remove(&key);
                        }
                        MeshAction::EndSessions { key } => {
                            node.sessions.remove(&key);
                        }
                        MeshAction::Punch { key, .. } => {
                            self.punched.push((*from, key));
                            self.blocked.retain(|(a, b)| !(*a == key && b == from));
                        }
                        MeshAction::Connect { key, endpoints } => {
                            connects.push((*from, key, endpoints.len()));
                            self.connected.push((*from, key, endpoints));
                        }
                        MeshAction::PredictPorts { key, toward } => {
                            self.predicted.push((*from, key, toward));
                        }
                        MeshAction::RelayBetween { .. } | MeshAction::UseRelay { .. } => {}
                    }
                }
                while let Some(outbound) = node.mesh.poll_message() {
                    progressed = true;
                    if node.online {
                        self.in_flight
                            .push_back((*from, outbound.to, outbound.message));
                    }
                }
            }
            for (from, to, endpoints) in connects {
                self.connect(from, to, endpoints);
            }
            while let Some((from, to, message)) = self.in_flight.pop_front() {
                progressed = true;
                self.deliver(from, to, message);
            }
            if !progressed {
                break;
            }
        }
    }

    /// A message needs a session: the sender must have the receiver as a
    /// peer; a receiver that does not know the sender admits it
    /// provisionally (as the device does in mesh mode).
    fn deliver(&mut self, from: PublicKey, to: PublicKey, message: Vec<u8>) {
        let now = self.now;
        let Some(sender) = self.nodes.get(&from) else {
            return;
        };
        if !sender.peers.contains_key(&to) || !self.nodes.get(&to).is_some_and(|n| n.online) {
            return;
        }
        if self.blocked.contains(&(from, to)) || self.is_symmetric_pair(from, to) {
            return;
        }
        let from_address = sender.address;
        if matches!(Control::decode(&message), Ok(Control::PolicyChunk { .. })) {
            self.policy_chunks += 1;
            if self
                .policy_chunk_loss
                .is_some_and(|every| self.policy_chunks.is_multiple_of(every))
            {
                return;
            }
        }
        if !sender.sessions.contains(&to) {
            self.establish(from, to);
        }
        let receiver = self.nodes.get_mut(&to).unwrap();
        let _ = receiver
            .mesh
            .handle_control(now, from, from_address, &message);
        self.delivered += 1;
        if matches!(Control::decode(&message), Ok(Control::Revocations(_))) {
            self.revocation_lists += 1;
        }
    }

    /// A handshake from `from` to `to` completes: both sides see a session.
    fn establish(&mut self, from: PublicKey, to: PublicKey) {
        let now = self.now;
        let receiver = self.nodes.get_mut(&to).unwrap();
        if let std::collections::hash_map::Entry::Vacant(slot) = receiver.peers.entry(from) {
            slot.insert(Vec::new());
            receiver.mesh.handle_unverified(now, from);
        }
        receiver.sessions.insert(from);
        receiver.mesh.handle_session(now, from);
        let sender = self.nodes.get_mut(&from).unwrap();
        sender.sessions.insert(to);
        sender.mesh.handle_session(now, to);
    }

    /// A Connect: the initiation gets through unless either direction is
    /// still filtered.
    fn connect(&mut self, from: PublicKey, to: PublicKey, probes: usize) {
        if self.is_symmetric_pair(from, to) {
            let sockets_open = self
                .predicted
                .iter()
                .any(|(a, b, _)| *a == to && *b == from);
            if probes <= PREDICTION_PROBES || !sockets_open {
                return;
            }
            self.symmetric
                .retain(|pair| *pair != (from, to) && *pair != (to, from));
        }
        let open = !self.blocked.contains(&(from, to)) && !self.blocked.contains(&(to, from));
        let online = self.nodes.get(&to).is_some_and(|n| n.online)
            && self.nodes.get(&from).is_some_and(|n| n.online);
        if open && online && !self.nodes[&from].sessions.contains(&to) {
            self.establish(from, to);
        }
    }

    fn is_symmetric_pair(&self, a: PublicKey, b: PublicKey) -> bool {
        self.symmetric.contains(&(a, b)) || self.symmetric.contains(&(b, a))
    }

    fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        loop {
            let next = self
                .nodes
                .values()
                .filter(|n| n.online)
                .filter_map(|n| n.mesh.poll_timeout())
                .min()
                .filter(|t| *t <= end);
            let Some(next) = next else { break };
            self.now = next.max(self.now);
            let now = self.now;
            for node in self.nodes.values_mut().filter(|n| n.online) {
                if node.mesh.poll_timeout().is_some_and(|t| t <= now) {
                    node.mesh.handle_timeout(now);
                }
            }
            self.pump();
        }
        self.now = end;
    }

    /// Every online node knows every other online node as a member, with
    /// its certificate's addresses routed to it.
    fn converged(&self) -> bool {
        let online: Vec<&PublicKey> = self
            .nodes
            .iter()
            .filter(|(_, n)| n.online)
            .map(|(k, _)| k)
            .collect();
        self.nodes
            .iter()
            .filter(|(_, n)| n.online)
            .all(|(me, node)| {
                online.iter().filter(|k| **k != me).all(|other| {
                    node.mesh.is_member(other)
                        && node
                            .peers
                            .get(other)
                            .is_some_and(|addresses| !addresses.is_empty())
                })
            })
    }
}

#[test]
fn a_hundred_nodes_with_one_bootstrap_each_learn_everyone() {
    let mut sim = Sim::new();
    // Every member meets every other (`eager_sessions`), as a small mesh.
    sim.eager_sessions = Some(100);
    sim.join(0, None);
    for index in 1..100 {
        // Each joins through some earlier node, not always the first.
        sim.join(index, Some(index / 3));
        sim.advance(Duration::from_millis(50));
    }
    // Members learned from gossip are met through a rendezvous (150 ms
    // between punch and initiation); one that missed an announcement
    // hears of the newcomer at the next quickened gossip round.
    sim.advance(Duration::from_secs(5));
    assert!(sim.converged(), "not converged 5 s after the joins");
    // Joining costs each member a few messages, not a list per member:
    // well under one full list (99 records) per ordered pair.
    let per_pair = sim.delivered as f64 / (100.0 * 99.0);
    assert!(
        per_pair < 10.0,
        "{} control messages to converge",
        sim.delivered
    );
    // Steady state: pings and gossip keep everyone and add nobody.
    sim.advance(Duration::from_secs(120));
    assert!(sim.converged());
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.members().count(), 99);
        assert!(
            node.mesh.members().all(|m| m.rtt.is_some()),
            "every member answered a ping"
        );
        assert_eq!(node.mesh.counters().refused_certificates, 0);
    }
}

#[test]
fn a_hundred_nodes_on_demand_learn_everyone_and_meet_only_whom_membership_needs() {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..100 {
        sim.join(index, Some(index / 3));
        sim.advance(Duration::from_millis(50));
    }
    // Past the eager threshold a newcomer is announced to the members in
    // session with its bootstrap member, and floods on from there; a
    // member whose introducer knew a partner of its only from gossip
    // waits for the introducer to meet it first.
    sim.advance(Duration::from_secs(20));
    assert!(sim.converged(), "not converged 20 s after the joins");
    // Members that joined past the threshold met their bootstrap member,
    // those that joined through them and their gossip partners; the
    // earlier ones met everyone while the mesh was small (closing those
    // sessions when idle is the node's part).
    // Meetings for introductions count too; the node closes those
    // sessions once idle.
    let mut met_total = 0;
    for index in 40..100 {
        let node = &sim.nodes[&key(index).public_key()];
        assert!(node.mesh.on_demand());
        met_total += node.mesh.members().filter(|m| m.direct).count();
    }
    assert!(
        met_total / 60 <= 15,
        "{} members met on average",
        met_total / 60
    );
}

#[test]
fn a_lost_announcement_heals_through_anti_entropy() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    sim.join(1, Some(0));
    // Node 1 is offline while node 2 joins, so it misses the announcement.
    sim.nodes.get_mut(&key(1).public_key()).unwrap().online = false;
    sim.join(2, Some(0));
    sim.nodes.get_mut(&key(1).public_key()).unwrap().online = true;
    assert!(
        !sim.nodes[&key(1).public_key()]
            .mesh
            .is_member(&key(2).public_key())
    );
    sim.advance(Duration::from_secs(60));
    assert!(sim.converged());
    assert!(sim.nodes[&first].mesh.is_member(&key(2).public_key()));
}

#[test]
fn a_revocation_spreads_and_removes_the_member_everywhere() {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..6 {
        sim.join(index, Some(0));
    }
    assert!(sim.converged());
    let victim = key(5).public_key();
    let revocation = sim.secret.revoke(victim, EPOCH_SECS);
    sim.nodes
        .get_mut(&key(2).public_key())
        .unwrap()
        .mesh
        .revoke(revocation)
        .unwrap();
    sim.pump();
    for (me, node) in &sim.nodes {
        if *me != victim {
            assert!(!node.mesh.is_member(&victim), "still a member somewhere");
            assert!(!node.peers.contains_key(&victim), "still routed somewhere");
        }
    }
    // It cannot come back through gossip or its own Hello.
    sim.advance(Duration::from_secs(60));
    for (me, node) in &sim.nodes {
        if *me != victim {
            assert!(!node.mesh.is_member(&victim));
        }
    }
}

#[test]
fn members_that_leave_or_expire_disappear_everywhere() {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..5 {
        sim.join(index, Some(0));
    }
    let short_lived = sim.certificate(9, 100);
    sim.join_with(9, short_lived, Some(0));
    // Long enough for every rendezvous (spread over a second).
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged());

    let leaver = key(4).public_key();
    sim.nodes.get_mut(&leaver).unwrap().mesh.leave();
    sim.pump();
    sim.nodes.get_mut(&leaver).unwrap().online = false;
    sim.advance(Duration::from_secs(30));
    let expired = key(9).public_key();
    for (me, node) in &sim.nodes {
        if *me != leaver {
            assert!(!node.mesh.is_member(&leaver), "departed member came back");
        }
    }
    sim.advance(Duration::from_secs(120));
    for (me, node) in &sim.nodes {
        if *me != expired && *me != leaver {
            assert!(!node.mesh.is_member(&expired), "expired member kept");
        }
    }
}

#[test]
fn a_silent_member_is_forgotten_after_the_timeout() {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..4 {
        sim.join(index, Some(0));
    }
    sim.advance(Duration::from_secs(3));
    let silent = key(3).public_key();
    sim.nodes.get_mut(&silent).unwrap().online = false;
    sim.advance(Duration::from_secs(170));
    assert!(sim.nodes[&key(0).public_key()].mesh.is_member(&silent));
    sim.advance(Duration::from_secs(30));
    for (me, node) in &sim.nodes {
        if *me != silent {
            assert!(!node.mesh.is_member(&silent));
        }
    }
}

#[test]
fn foreign_forged_and_misattributed_certificates_are_refused() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    let now = sim.now;
    let stranger = key(7).public_key();
    let outsider = NetworkSecret::from_seed([9; 32]);
    let foreign = outsider
        .sign(
            stranger,
            "x",
            &["198.19.9.9/32".parse().unwrap()],
            EPOCH_SECS - 1,
            EPOCH_SECS + 99,
        )
        .unwrap();
    let mesh = &mut sim.nodes.get_mut(&first).unwrap().mesh;
    mesh.handle_unverified(now, stranger);
    let from = Sim::address(7);
    let hello = |certificate: Certificate| {
        Control::Hello {
            certificate: Box::new(certificate),
            wants_members: false,
            host_addresses: Vec::new(),
        }
        .encode()
    };
    assert_eq!(
        mesh.handle_control(now, stranger, from, &hello(foreign)),
        Err(MeshDrop::Certificate(CertError::WrongNetwork))
    );
    // A member's real certificate, presented by another key.
    let borrowed = sim.certificate(1, 1000);
    let mesh = &mut sim.nodes.get_mut(&first).unwrap().mesh;
    assert_eq!(
        mesh.handle_control(now, stranger, from, &hello(borrowed)),
        Err(MeshDrop::Certificate(CertError::WrongNode))
    );
    assert_eq!(
        mesh.handle_control(now, stranger, from, &Control::Ping { nonce: 1 }.encode()),
        Err(MeshDrop::NotAMember)
    );
    assert!(matches!(
        mesh.handle_control(now, stranger, from, &[0x1f, 9, 0, 0]),
        Err(MeshDrop::Malformed(_))
    ));
    assert!(!mesh.is_member(&stranger));
    // It never showed a valid certificate: the driver is told to drop it.
    mesh.handle_timeout(now + Duration::from_secs(11));
    let mut removed = false;
    while let Some(action) = mesh.poll_action() {
        removed |= action == MeshAction::Remove { key: stranger };
    }
    assert!(removed);
    assert_eq!(mesh.counters().refused_certificates, 2);
    assert_eq!(mesh.counters().not_a_member, 1);
    assert_eq!(mesh.counters().malformed, 1);
}

#[test]
fn a_member_that_does_not_answer_is_introduced_through_the_mutual_member() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    sim.join(1, Some(0));
    let quiet = key(1).public_key();
    // Node 1's greetings and answers to node 2 are lost (its NAT filters
    // them) until a rendezvous tells it to aim at node 2.
    sim.nodes.get_mut(&quiet).unwrap().online = true;
    let newcomer = sim.join_blocked(2, Some(0), quiet);
    sim.advance(Duration::from_secs(3));
    let counters = sim.nodes[&newcomer].mesh.counters().clone();
    assert!(counters.introductions_requested >= 1, "{counters:?}");
    assert!(sim.nodes[&first].mesh.counters().rendezvous_arranged >= 1);
    assert!(
        sim.punched.contains(&(quiet, newcomer)),
        "node 1 punched toward node 2"
    );
}

#[test]
fn a_member_behind_a_symmetric_nat_is_met_by_port_prediction() {
    let mut sim = Sim::new();
    let bootstrap = sim.join(0, None);
    let easy = sim.join(1, Some(0));
    sim.advance(Duration::from_secs(1));
    let hard = key(2).public_key();
    sim.symmetric.push((easy, hard));
    sim.join(2, Some(0));
    sim.advance(Duration::from_secs(6));

    let sessions = |node: &PublicKey, other: &PublicKey| sim.nodes[node].sessions.contains(other);
    assert!(
        sessions(&easy, &hard) && sessions(&hard, &easy),
        "never met"
    );
    assert!(sim.symmetric.is_empty(), "met through a probe, not a relay");
    assert!(sim.nodes[&easy].mesh.counters().port_predictions >= 1);
    // Plain punches come first; both sides play both parts of a round,
    // each aiming its sockets at the other's endpoints.
    let first = sim
        .connected
        .iter()
        .find(|(from, to, _)| *from == easy && *to == hard)
        .expect("a connect toward the hard member");
    assert!(first.2.len() <= MAX_ENDPOINTS, "{:?}", first.2);
    for (side, other) in [(easy, hard), (hard, easy)] {
        let (_, _, toward) = sim
            .predicted
            .iter()
            .find(|(from, to, _)| *from == side && *to == other)
            .expect("prediction sockets on both sides");
        assert_eq!(toward[0], Sim::address(if other == easy { 1 } else { 2 }));
    }
    let (_, _, sprayed) = sim
        .connected
        .iter()
        .find(|(from, to, endpoints)| {
            *from == easy && *to == hard && endpoints.len() > PREDICTION_PROBES
        })
        .expect("probes at random ports");
    let known = sprayed[0];
    let ports: HashSet<u16> = sprayed[1..].iter().map(SocketAddr::port).collect();
    assert_eq!(ports.len(), sprayed.len() - 1, "distinct ports");
    assert!(
        sprayed[1..]
            .iter()
            .all(|probe| probe.ip() == known.ip() && probe.port() >= 1024 && *probe != known)
    );
    assert!(sim.nodes[&bootstrap].mesh.counters().rendezvous_arranged >= 2);
}

/// The member list's record of node `index` (its overlay address as in
/// the certificates above).
fn listed(index: u16) -> Certificate {
    let address = Cidr::host(std::net::IpAddr::from([198, 19, 0, index as u8]));
    Certificate::listed(
        key(index).public_key(),
        &format!("node-{index}"),
        &[address],
    )
    .unwrap()
}

/// Nodes 0..count from one member list, each joining through node 0.
fn listed_mesh(sim: &mut Sim, list: &[Certificate], count: u16) {
    for index in 0..count {
        let own = listed(index);
        let bootstrap = (index > 0).then_some(0);
        sim.join_trusting(index, Trust::Members(list.to_vec()), own, bootstrap);
        sim.advance(Duration::from_millis(50));
    }
}

#[test]
fn members_from_a_list_learn_everyone_through_one_bootstrap() {
    let mut sim = Sim::new();
    let list: Vec<Certificate> = (0..4).map(listed).collect();
    listed_mesh(&mut sim, &list, 4);
    for second in 0..200 {
        if sim.converged() {
            eprintln!("converged at {second}");
            break;
        }
        if second % 10 == 0 {
            let missing: Vec<(usize, usize)> = (0..100u16)
                .flat_map(|a| (0..100u16).map(move |b| (a, b)))
                .filter(|(a, b)| {
                    a != b
                        && !sim.nodes[&key(*a).public_key()]
                            .mesh
                            .is_member(&key(*b).public_key())
                })
                .map(|(a, b)| (a as usize, b as usize))
                .collect();
            eprintln!(
                "{second}: {} missing, e.g. {:?}",
                missing.len(),
                &missing[..missing.len().min(10)]
            );
        }
        sim.advance(Duration::from_secs(1));
    }
    assert!(sim.converged(), "not converged 5 s after the joins");
    for (me, node) in &sim.nodes {
        let mut routed: Vec<(PublicKey, Vec<Cidr>)> = node
            .peers
            .iter()
            .map(|(key, addresses)| (*key, addresses.clone()))
            .collect();
        routed.sort_by_key(|(key, _)| *key.as_bytes());
        let mut expected: Vec<(PublicKey, Vec<Cidr>)> = list
            .iter()
            .filter(|member| member.node_key != *me)
            .map(|member| (member.node_key, member.addresses.clone()))
            .collect();
        expected.sort_by_key(|(key, _)| *key.as_bytes());
        assert_eq!(routed, expected, "exactly the listed keys and addresses");
        assert_eq!(node.mesh.counters().refused_certificates, 0);
    }
}

#[test]
fn a_member_list_refuses_unlisted_keys_other_addresses_and_certificates() {
    let mut sim = Sim::new();
    let list: Vec<Certificate> = (0..2).map(listed).collect();
    listed_mesh(&mut sim, &list, 2);
    // Not listed, though it lists itself; a listed key claiming another
    // address; a key with a certificate of a network.
    let stranger = sim.join_trusting(7, Trust::Members(vec![listed(7)]), listed(7), Some(0));
    let mut moved = listed(1);
    moved.addresses = vec![Cidr::host(std::net::IpAddr::from([198, 19, 0, 99]))];
    let signed = sim.certificate(8, 86_400);
    let certified = sim.join_trusting(8, Trust::Network(sim.secret.public_key()), signed, Some(0));
    // Past the 10 s an unverified peer has to present a valid Hello.
    sim.advance(Duration::from_secs(15));
    let first = &sim.nodes[&key(0).public_key()];
    assert!(first.mesh.is_member(&key(1).public_key()));
    for outsider in [stranger, certified] {
        assert!(!first.mesh.is_member(&outsider));
        assert!(
            !first.peers.contains_key(&outsider),
            "removed once unverified"
        );
    }
    assert!(first.mesh.counters().refused_certificates >= 2);
    // A gossiped record with other addresses than listed changes nothing.
    let record = crate::control::MemberRecord {
        certificate: moved,
        endpoints: vec![Sim::address(1)],
        host_addresses: Vec::new(),
        heard_secs_ago: 0,
    };
    let now = sim.now;
    let first = sim.nodes.get_mut(&key(0).public_key()).unwrap();
    first.mesh.learn(now, record);
    let addresses: Vec<Vec<Cidr>> = first
        .mesh
        .members()
        .filter(|member| member.key == key(1).public_key())
        .map(|member| member.addresses)
        .collect();
    assert_eq!(addresses, [listed(1).addresses]);
}

/// A bootstrap list changed by a reload (issue 45).
mod bootstrap;
/// Groups carried with membership (issue 47).
mod groups;
/// The network policy's highest version in force (issue 47).
mod policy;
/// Refused nodes told why (issue 44).
mod refusals;
/// Scenarios of revocations spreading (issue 44).
mod revocations;
/// Routes behind members and the exit node.
mod routes;
