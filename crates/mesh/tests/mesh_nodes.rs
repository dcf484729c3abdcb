//! Whole nodes (WireGuard device, routing, mesh) on a simulated UDP
//! network: real handshakes and real encryption, simulated time. Each
//! node is configured with one bootstrap member and nothing else.

mod support;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fjord_mesh::{
    Bootstrap, Cidr, Mesh, MeshConfig, NetworkSecret, Node, NodeEvent, Refusal, RefusalReason,
    Revocation,
};
use fjord_proto::{
    DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, PrivateKey, Received, Sent, WallClock,
};
use support::{XorShift, ipv4_packet};

const EPOCH_SECS: u64 = 1_800_000_000;
const MTU: usize = 1420;

struct Net {
    base: Instant,
    now: Instant,
    nodes: BTreeMap<SocketAddr, Node>,
    overlay: BTreeMap<u8, (SocketAddr, IpAddr)>,
    in_flight: VecDeque<(SocketAddr, SocketAddr, Vec<u8>)>,
    /// Datagrams to this address are lost (a node that went away).
    unreachable: Option<SocketAddr>,
    nats: Vec<Nat>,
    /// Datagrams from the first address to the second are lost until the
    /// instant (a burst of loss on one path).
    lossy: Option<(SocketAddr, SocketAddr, Instant)>,
    /// Datagrams between these two addresses are lost, both ways (a
    /// firewall between two members).
    filtered: Option<(IpAddr, IpAddr)>,
    /// Inner packets received, by the node that received them.
    delivered: Vec<(SocketAddr, Vec<u8>)>,
    /// Larger IPv4 datagrams (header included) are lost, with no ICMP.
    path_mtu: usize,
    /// Refusals of their certificates nodes were told of: (node, when).
    refusals: Vec<(SocketAddr, Instant, Refusal)>,
    /// `eager_sessions` and `idle_timeout` of the nodes added next, if
    /// not the defaults.
    on_demand: Option<(usize, Duration)>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum NatKind {
    /// One public port per inside socket, the same as the inside port
    /// (the usual home router); replies filtered by remote address and
    /// port, as Linux conntrack does.
    PortPreserving,
    /// A new public port for every destination (`random-fully`).
    Symmetric,
}

/// A NAT in front of some nodes, with Linux's address-and-port filtering.
struct Nat {
    public: IpAddr,
    kind: NatKind,
    inside: HashSet<SocketAddr>,
    mappings: HashMap<(SocketAddr, Option<SocketAddr>), u16>,
    owners: HashMap<u16, SocketAddr>,
    /// (public port, remote) pairs a reply may come from.
    allowed: HashSet<(u16, SocketAddr)>,
    next_port: u16,
    /// Datagrams filtered as unasked: (from, to). Linux keeps an entry for
    /// each, and a port-preserving NAT then maps its own host's later
    /// datagrams to `from` to another port than `to`'s (and keeps reusing
    /// that port for the host's new destinations).
    unasked: Vec<(SocketAddr, SocketAddr)>,
}

impl Nat {
    fn outbound(&mut self, inside: SocketAddr, to: SocketAddr) -> SocketAddr {
        let key = match self.kind {
            NatKind::PortPreserving => (inside, None),
            NatKind::Symmetric => (inside, Some(to)),
        };
        let port = match self.mappings.get(&key) {
            Some(port) => *port,
            None => {
                let port = match self.kind {
                    NatKind::PortPreserving if !self.owners.contains_key(&inside.port()) => {
                        inside.port()
                    }
                    _ => {
                        self.next_port += 1;
                        self.next_port
                    }
                };
                self.mappings.insert(key, port);
                self.owners.insert(port, inside);
                port
            }
        };
        self.allowed.insert((port, to));
        SocketAddr::new(self.public, port)
    }

    fn inbound(&mut self, from: SocketAddr, to: SocketAddr) -> Option<SocketAddr> {
        if !self.allowed.contains(&(to.port(), from)) {
            self.unasked.push((from, to));
            return None;
        }
        self.owners.get(&to.port()).copied()
    }
}

fn underlay(index: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, index], 51820))
}

fn overlay(index: u8) -> IpAddr {
    IpAddr::from([198, 19, 0, index])
}

impl Net {
    fn new() -> Self {
        let base = Instant::now();
        Self {
            base,
            now: base,
            nodes: BTreeMap::new(),
            overlay: BTreeMap::new(),
            in_flight: VecDeque::new(),
            unreachable: None,
            nats: Vec::new(),
            lossy: None,
            filtered: None,
            delivered: Vec::new(),
            path_mtu: usize::MAX,
            refusals: Vec::new(),
            on_demand: None,
        }
    }

    fn key(index: u8) -> PrivateKey {
        PrivateKey::from_bytes([index.wrapping_mul(37).wrapping_add(11); 32])
    }

    /// Adds node `index` behind a NAT of `kind` with public address
    /// 198.18.1.`index`; its own address stays 198.18.0.`index`.
    fn add_behind_nat(
        &mut self,
        secret: &NetworkSecret,
        index: u8,
        bootstrap: Option<u8>,
        kind: NatKind,
    ) {
        self.nats.push(Nat {
            public: IpAddr::from([198, 18, 1, index]),
            kind,
            inside: HashSet::from([underlay(index)]),
            mappings: HashMap::new(),
            owners: HashMap::new(),
            allowed: HashSet::new(),
            next_port: 40_000,
            unasked: Vec::new(),
        });
        self.add(secret, index, bootstrap);
    }

    fn add(&mut self, secret: &NetworkSecret, index: u8, bootstrap: Option<u8>) {
        self.add_revoking(secret, index, bootstrap, &[]);
    }

    /// Like `add`, with `revocations` given to the mesh before it meets
    /// anyone, as `fjord up` gives those of its `Revocations` file.
    fn add_revoking(
        &mut self,
        secret: &NetworkSecret,
        index: u8,
        bootstrap: Option<u8>,
        revocations: &[Revocation],
    ) {
        let wall_clock = WallClock {
            base: self.base,
            base_since_epoch: Duration::from_secs(EPOCH_SECS),
        };
        let private = Self::key(index);
        let public = private.public_key();
        let device = Device::new(
            DeviceConfig {
                private_key: Some(private),
                mtu: MTU,
            },
            Box::new(XorShift(u64::from(index) * 7919 + 1)),
            wall_clock,
        );
        let certificate = secret
            .sign(
                public,
                &format!("n{index}"),
                &[Cidr::host(overlay(index))],
                EPOCH_SECS - 60,
                EPOCH_SECS + 86_400,
            )
            .unwrap();
        let mut config = MeshConfig::new(secret.public_key(), certificate, MTU);
        config.host_addresses = vec![underlay(index)];
        if let Some((eager_sessions, idle_timeout)) = self.on_demand {
            config.eager_sessions = eager_sessions;
            config.idle_timeout = idle_timeout;
        }
        config.bootstrap = bootstrap
            .map(|b| Bootstrap {
                key: Self::key(b).public_key(),
                endpoint: underlay(b),
            })
            .into_iter()
            .collect();
        let mut mesh = Mesh::new(config, self.now, wall_clock, u64::from(index) + 1);
        for revocation in revocations {
            mesh.revoke(revocation.clone()).unwrap();
        }
        let mut node = Node::new(device);
        node.enable_mesh(self.now, mesh);
        self.nodes.insert(underlay(index), node);
        self.overlay
            .insert(index, (underlay(index), overlay(index)));
    }

    fn pump(&mut self) {
        let mut buf = vec![0u8; 65_536];
        loop {
            let nats = &mut self.nats;
            let now = self.now;
            for (address, node) in self.nodes.iter_mut() {
                while let Some(transmit) = node.poll_transmit(now, &mut buf) {
                    // Punches have a TTL that dies between the NATs: they
                    // open the sender's own NAT and reach nobody.
                    if transmit.ttl.is_some() {
                        if let Some(nat) = nats.iter_mut().find(|nat| nat.inside.contains(address))
                        {
                            nat.outbound(*address, transmit.destination);
                        }
                        continue;
                    }
                    self.in_flight.push_back((
                        *address,
                        transmit.destination,
                        buf[..transmit.len].to_vec(),
                    ));
                }
                while let Some(event) = node.poll_event(now) {
                    if let NodeEvent::Refused(refusal) = event {
                        self.refusals.push((*address, now, refusal));
                    }
                }
            }
            let Some((inside_from, to, mut datagram)) = self.in_flight.pop_front() else {
                break;
            };
            if Some(to) == self.unreachable || datagram.len() + 28 > self.path_mtu {
                continue;
            }
            if self
                .lossy
                .is_some_and(|(a, b, until)| a == inside_from && b == to && self.now < until)
            {
                continue;
            }
            let Some((from, to)) = self.through_nats(inside_from, to) else {
                continue;
            };
            if let Some(node) = self.nodes.get_mut(&to)
                && let Received::Data { packet, .. } =
                    node.handle_datagram(self.now, from, &mut datagram, &mut [])
            {
                self.delivered.push((to, datagram[packet].to_vec()));
            }
        }
    }

    /// A datagram from `inside_from` to `to` through the NATs on its way:
    /// the source the receiver sees and the node it reaches, or `None`
    /// if a NAT filters it.
    fn through_nats(
        &mut self,
        inside_from: SocketAddr,
        to: SocketAddr,
    ) -> Option<(SocketAddr, SocketAddr)> {
        if self.filtered.is_some_and(|(a, b)| {
            (a, b) == (inside_from.ip(), to.ip()) || (b, a) == (inside_from.ip(), to.ip())
        }) {
            return None;
        }
        // An address behind a NAT is private: only its neighbours behind
        // the same NAT reach it.
        if let Some(nat) = self.nats.iter().find(|nat| nat.inside.contains(&to))
            && !nat.inside.contains(&inside_from)
        {
            return None;
        }
        let from = match self
            .nats
            .iter_mut()
            .find(|nat| nat.inside.contains(&inside_from))
        {
            Some(nat) => nat.outbound(inside_from, to),
            None => inside_from,
        };
        let to = match self.nats.iter_mut().find(|nat| nat.public == to.ip()) {
            Some(nat) => nat.inbound(from, to)?,
            None => to,
        };
        Some((from, to))
    }

    fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        loop {
            self.pump();
            let next = self
                .nodes
                .values()
                .filter_map(Node::poll_timeout)
                .min()
                .filter(|t| *t <= end);
            let Some(next) = next else { break };
            self.now = next.max(self.now);
            let now = self.now;
            for node in self.nodes.values_mut() {
                if node.poll_timeout().is_some_and(|t| t <= now) {
                    node.handle_timeout(now);
                }
            }
        }
        self.now = end;
        self.pump();
    }

    /// Sends one IPv4 packet from node `from` to node `to`'s overlay
    /// address and reports whether `to` received it intact, directly
    /// (relayed paths are checked through the mesh's own traffic).
    fn ping(&mut self, from: u8, to: u8) -> bool {
        let to_underlay = self.overlay[&to].0;
        let Some(sealed) = self.seal_ping(from, to, b"through the mesh") else {
            return false;
        };
        let Some((source, arrives_at)) = self.through_nats(sealed.from, sealed.destination) else {
            return false;
        };
        if arrives_at != to_underlay {
            return false;
        }
        let receiver = self.nodes.get_mut(&to_underlay).unwrap();
        let mut datagram = sealed.datagram;
        match receiver.handle_datagram(self.now, source, &mut datagram, &mut []) {
            Received::Data { packet: range, .. } => datagram[range] == sealed.packet[..],
            _ => false,
        }
    }

    /// Sends one IPv4 packet from node `from` to node `to`'s overlay
    /// address along whatever path the sender uses (relays included) and
    /// reports whether `to` received it intact.
    fn ping_any_path(&mut self, from: u8, to: u8, payload: &[u8]) -> bool {
        let to_underlay = self.overlay[&to].0;
        let Some(sealed) = self.seal_ping(from, to, payload) else {
            return false;
        };
        self.in_flight
            .push_back((sealed.from, sealed.destination, sealed.datagram));
        self.delivered.clear();
        self.pump();
        self.delivered
            .iter()
            .any(|(at, received)| *at == to_underlay && *received == sealed.packet)
    }

    /// Node `from` seals an IPv4 packet to node `to`'s overlay address.
    fn seal_ping(&mut self, from: u8, to: u8, payload: &[u8]) -> Option<SealedPing> {
        let (from_underlay, source) = self.overlay[&from];
        let destination = self.overlay[&to].1;
        let packet = ipv4_packet(source, destination, payload);
        let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
        let sender = self.nodes.get_mut(&from_underlay).unwrap();
        let Sent::Sealed {
            len, destination, ..
        } = sender.handle_tun_packet(self.now, &mut buf, packet.len())
        else {
            return None;
        };
        buf.truncate(len);
        Some(SealedPing {
            from: from_underlay,
            destination,
            datagram: buf,
            packet,
        })
    }
}

struct SealedPing {
    from: SocketAddr,
    destination: SocketAddr,
    datagram: Vec<u8>,
    packet: Vec<u8>,
}

#[test]
fn five_nodes_with_one_bootstrap_each_reach_every_other() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    for index in 2..=5 {
        net.add(&secret, index, Some(if index == 5 { 3 } else { 1 }));
        net.advance(Duration::from_millis(100));
    }
    // First rendezvous are spread over a second after a member is learned.
    net.advance(Duration::from_secs(3));
    for from in 1..=5 {
        let node = &net.nodes[&underlay(from)];
        let members = node.members();
        assert_eq!(
            members.len(),
            4,
            "node {from} knows {} members",
            members.len()
        );
        assert!(
            members.iter().all(|(_, session)| *session),
            "node {from} lacks a session"
        );
        for to in (1..=5).filter(|to| *to != from) {
            assert!(net.ping(from, to), "{from} -> {to}");
        }
    }
}

#[test]
fn a_member_cannot_send_from_another_members_address() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add(&secret, 2, Some(1));
    net.add(&secret, 3, Some(1));
    net.advance(Duration::from_secs(1));
    // Node 2 claims node 3's overlay address as its source.
    let packet = ipv4_packet(overlay(3), overlay(1), b"spoofed");
    let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
    buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
    let now = net.now;
    let sender = net.nodes.get_mut(&underlay(2)).unwrap();
    let Sent::Sealed { len, .. } = sender.handle_tun_packet(now, &mut buf, packet.len()) else {
        panic!("node 2 has a route to node 1");
    };
    let mut datagram = buf[..len].to_vec();
    let receiver = net.nodes.get_mut(&underlay(1)).unwrap();
    assert_eq!(
        receiver.handle_datagram(now, underlay(2), &mut datagram, &mut []),
        Received::Dropped(fjord_proto::DropReason::SourceNotAllowed)
    );
}

#[test]
fn a_stranger_with_a_valid_handshake_but_no_certificate_is_dropped() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    // Node 9 belongs to another network: its handshake succeeds (it knows
    // node 1's key) but its certificate does not.
    let other = NetworkSecret::from_seed([7; 32]);
    net.add(&other, 9, Some(1));
    net.advance(Duration::from_secs(1));
    let first = &net.nodes[&underlay(1)];
    assert!(first.members().is_empty());
    assert!(first.mesh().unwrap().counters().refused_certificates >= 1);
    net.advance(Duration::from_secs(15));
    let stranger = Net::key(9).public_key();
    assert!(
        net.nodes[&underlay(1)]
            .device()
            .peer_id(&stranger)
            .is_none(),
        "the provisional peer is gone"
    );
}

#[test]
fn a_node_of_another_network_is_told_why_once_a_minute() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    let start = net.now;
    let other = NetworkSecret::from_seed([7; 32]);
    net.add(&other, 9, Some(1));
    // It keeps handshaking and greeting for three minutes.
    net.advance(Duration::from_secs(180));
    let told: Vec<(SocketAddr, Duration, Refusal)> = net
        .refusals
        .iter()
        .map(|(at, when, refusal)| (*at, *when - start, *refusal))
        .collect();
    let refusal = Refusal {
        by: Net::key(1).public_key(),
        reason: RefusalReason::OtherNetwork,
    };
    // At once, inside the session its handshake opened.
    assert_eq!(told.first(), Some(&(underlay(9), Duration::ZERO, refusal)));
    assert!(
        told.iter()
            .all(|(at, _, r)| *at == underlay(9) && *r == refusal)
    );
    // Never twice within a minute, and again while it keeps trying.
    assert!(told.len() >= 2, "{told:?}");
    for pair in told.windows(2) {
        assert!(pair[1].1 - pair[0].1 >= Duration::from_secs(60), "{told:?}");
    }
}

/// Whether node `at` holds nothing of node `gone`: no member, and no
/// peer but perhaps a provisional one (no routes) that it is refusing.
fn forgotten(net: &Net, at: u8, gone: u8) -> bool {
    let node = &net.nodes[&underlay(at)];
    let key = Net::key(gone).public_key();
    !node.mesh().unwrap().is_member(&key)
        && node
            .device()
            .peer_id(&key)
            .is_none_or(|id| node.device().is_provisional(id))
}

#[test]
fn a_revocation_read_by_a_member_that_is_not_the_bootstrap_ends_the_victims_sessions_everywhere() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add(&secret, 3, Some(1));
    net.add_behind_nat(&secret, 4, Some(1), NatKind::PortPreserving);
    net.advance(Duration::from_secs(3));
    assert!(net.ping(3, 1) && net.ping(1, 3) && net.ping(3, 4));

    // Node 2 starts with node 3's revocation in its file: learned before
    // any session, so it floods to nobody (issue 44).
    let revocation = secret.revoke(Net::key(3).public_key(), EPOCH_SECS);
    net.add_revoking(&secret, 2, Some(1), &[revocation]);
    let start = net.now;
    while !(forgotten(&net, 1, 3) && forgotten(&net, 4, 3) && forgotten(&net, 2, 3)) {
        assert!(
            net.now - start < Duration::from_secs(10),
            "node 3 still a member somewhere 10 s after node 2 started"
        );
        net.advance(Duration::from_millis(10));
    }
    // Node 1 learns it in the greeting with node 2 and floods it to
    // node 4: one round of messages (no simulated delay), no timer.
    assert_eq!(net.now - start, Duration::from_millis(10), "one step");
    // Its sessions are gone: what it still sends is refused.
    assert!(!net.ping(3, 1));
    assert!(!net.ping(3, 4));
    // It keeps handshaking and greeting; it is refused every time.
    net.advance(Duration::from_secs(60));
    for at in [1, 2, 4] {
        assert!(forgotten(&net, at, 3), "node {at} took node 3 back");
        let counters = net.nodes[&underlay(at)].mesh().unwrap().counters().clone();
        assert_eq!(counters.revocations_learned, 1, "node {at}");
    }
    assert!(!net.ping(3, 1));
    assert!(net.ping(2, 1) && net.ping(1, 2) && net.ping(2, 4) && net.ping(4, 1));
    // And it was told so: the notice left before its provisional peer went.
    assert!(
        net.refusals
            .iter()
            .any(|(at, _, refusal)| *at == underlay(3) && refusal.reason == RefusalReason::Revoked)
    );
}

/// Time until every pair of nodes in `indices` lists the other as a
/// member with a session, in simulated time.
fn time_to_full_mesh(net: &mut Net, indices: &[u8], limit: Duration) -> Option<Duration> {
    let start = net.now;
    while net.now - start <= limit {
        let done = indices.iter().all(|from| {
            let members = net.nodes[&underlay(*from)].members();
            indices.iter().filter(|to| *to != from).all(|to| {
                let key = Net::key(*to).public_key();
                members.iter().any(|(m, session)| m.key == key && *session)
            })
        });
        if done {
            return Some(net.now - start);
        }
        net.advance(Duration::from_millis(50));
    }
    None
}

#[test]
fn members_behind_two_port_preserving_nats_meet_directly_within_two_seconds() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add_behind_nat(&secret, 2, Some(1), NatKind::PortPreserving);
    net.add_behind_nat(&secret, 3, Some(1), NatKind::PortPreserving);
    let took = time_to_full_mesh(&mut net, &[1, 2, 3], Duration::from_secs(10))
        .expect("a full mesh within 10 s");
    assert!(took <= Duration::from_secs(2), "took {took:?}");
    assert!(net.ping(2, 3) && net.ping(3, 2));
    // Directly: each sends to the other's NAT, not through node 1.
    let endpoint = net.nodes[&underlay(2)]
        .device()
        .peer_id(&Net::key(3).public_key())
        .and_then(|id| net.nodes[&underlay(2)].device().peer_status(id))
        .and_then(|status| status.endpoint);
    assert_eq!(endpoint, Some(SocketAddr::from(([198, 18, 1, 3], 51820))));
}

#[test]
fn a_member_behind_a_nat_that_filters_a_one_sided_greeting_is_introduced() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add_behind_nat(&secret, 2, Some(1), NatKind::PortPreserving);
    net.advance(Duration::from_secs(1));
    // Node 4 has no NAT; it learns node 2 from node 1, but its greeting
    // is dropped by node 2's NAT, and node 2's own greeting to node 4 is
    // lost on the way. Without help, node 2 would retry only after
    // WireGuard's 5 s REKEY_TIMEOUT; an introduction through node 1 makes
    // node 2 aim at node 4 at once.
    net.lossy = Some((
        underlay(2),
        underlay(4),
        net.now + Duration::from_millis(500),
    ));
    net.add(&secret, 4, Some(1));
    let took = time_to_full_mesh(&mut net, &[1, 2, 4], Duration::from_secs(10))
        .expect("a full mesh within 10 s");
    let counters = net.nodes[&underlay(4)].mesh().unwrap().counters().clone();
    assert!(
        took <= Duration::from_secs(2),
        "took {took:?}, {counters:?}"
    );
    assert!(counters.introductions_requested >= 1, "{counters:?}");
    assert!(net.ping(4, 2) && net.ping(2, 4));
}

#[test]
fn a_symmetric_nat_pair_is_relayed_by_the_member_that_reaches_both() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add_behind_nat(&secret, 2, Some(1), NatKind::Symmetric);
    net.add_behind_nat(&secret, 3, Some(1), NatKind::Symmetric);
    // Each symmetric NAT maps the other's destination to a port nobody
    // can see, so traversal gives up and node 1 relays.
    let took = time_to_full_mesh(&mut net, &[1, 2, 3], Duration::from_secs(15));
    let took = took.expect("a full mesh, relayed, within 15 s");
    assert!(took <= Duration::from_secs(8), "took {took:?}");
    assert!(net.ping(2, 1) && net.ping(3, 1));
    let relay = Net::key(1).public_key();
    let members = net.nodes[&underlay(2)].members();
    let three = Net::key(3).public_key();
    assert!(
        members
            .iter()
            .any(|(m, session)| m.key == three && *session && m.relay == Some(relay)),
        "node 2 reaches node 3 through node 1"
    );
    assert!(net.nodes[&underlay(1)].relayed_datagrams() > 0);
}

#[test]
fn a_symmetric_member_sends_nothing_unasked_at_a_port_preserving_members_port() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    net.add_behind_nat(&secret, 2, Some(1), NatKind::PortPreserving);
    net.add_behind_nat(&secret, 3, Some(1), NatKind::Symmetric);
    // Traversal runs its attempts (plain, then predicting) and ends
    // relayed: this simulator has no prediction sockets.
    let took = time_to_full_mesh(&mut net, &[1, 2, 3], Duration::from_secs(15));
    assert!(took.is_some(), "no full mesh, relayed, within 15 s");
    net.advance(Duration::from_secs(5));
    // Node 2's NAT keeps node 2's port, 51820, for every destination.
    // An initiation from node 3 arrives from a port of node 3's NAT that
    // node 2's punch never opened; Linux would keep its entry, and node
    // 2's probe to that port would leave from another port, which every
    // later probe would reuse: the prediction round's mappings, opened
    // toward 51820, would filter them all.
    let port_preserving = &net.nats[0];
    let symmetric_nat = net.nats[1].public;
    let strays: Vec<_> = port_preserving
        .unasked
        .iter()
        .filter(|(from, to)| from.ip() == symmetric_nat && to.port() == underlay(2).port())
        .collect();
    assert!(strays.is_empty(), "unasked at node 2's port: {strays:?}");
    // The symmetric side still predicts ports: its probes are the ones
    // that can meet node 2's mappings.
    let mesh = net.nodes[&underlay(3)].mesh().unwrap();
    assert!(mesh.counters().port_predictions >= 1);
}

#[test]
fn members_without_nat_meet_at_their_own_addresses_without_an_introduction() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    for index in 2..=6 {
        net.add(&secret, index, Some(1));
    }
    time_to_full_mesh(&mut net, &[1, 2, 3, 4, 5, 6], Duration::from_secs(3))
        .expect("a full mesh within 3 s");
    let introductions: u64 = net
        .nodes
        .values()
        .map(|node| node.mesh().unwrap().counters().introductions_requested)
        .sum();
    assert_eq!(
        introductions, 0,
        "nobody needed the bootstrap member's help"
    );
}

#[test]
fn a_relayed_pair_moves_to_the_direct_path_when_it_opens_and_loses_no_packet() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.add(&secret, 1, None);
    // A firewall between nodes 2 and 3: only node 1 reaches both.
    net.filtered = Some((underlay(2).ip(), underlay(3).ip()));
    net.add(&secret, 2, Some(1));
    net.add(&secret, 3, Some(1));
    time_to_full_mesh(&mut net, &[1, 2, 3], Duration::from_secs(15))
        .expect("a full mesh, relayed, within 15 s");
    let relay = Net::key(1).public_key();
    let path = |net: &Net, from: u8, to: u8| {
        let key = Net::key(to).public_key();
        net.nodes[&underlay(from)]
            .members()
            .into_iter()
            .find(|(member, _)| member.key == key)
            .map(|(member, _)| member.relay)
    };
    assert_eq!(path(&net, 2, 3), Some(Some(relay)));
    assert!(net.ping_any_path(2, 3, b"relayed"));

    // The firewall opens; a ping every 100 ms carries on through the move.
    net.filtered = None;
    let mut lost = 0;
    let mut sent = 0;
    while sent < 600 && (path(&net, 2, 3) != Some(None) || path(&net, 3, 2) != Some(None)) {
        for (from, to) in [(2, 3), (3, 2)] {
            sent += 1;
            if !net.ping_any_path(from, to, b"across the switch") {
                lost += 1;
            }
        }
        net.advance(Duration::from_millis(100));
    }
    assert_eq!(
        path(&net, 2, 3),
        Some(None),
        "node 2 reaches node 3 directly"
    );
    assert_eq!(
        path(&net, 3, 2),
        Some(None),
        "node 3 reaches node 2 directly"
    );
    assert_eq!(lost, 0, "{lost} of {sent} pings lost across the switch");
    assert!(
        net.ping(2, 3) && net.ping(3, 2),
        "the direct path carries data"
    );
    let counters = net.nodes[&underlay(2)].mesh().unwrap().counters().clone();
    assert!(counters.relays_left >= 1, "{counters:?}");
}

#[test]
fn members_find_a_1280_byte_path_and_tell_inner_senders_of_larger_packets() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.path_mtu = 1280;
    net.add(&secret, 1, None);
    net.add(&secret, 2, Some(1));
    net.advance(Duration::from_secs(5));
    let key = |index: u8| Net::key(index).public_key();
    // 20 + 8 + 32 + 1216: the largest probe size at most 1280 bytes.
    assert_eq!(net.nodes[&underlay(1)].path_mtu(&key(2)), Some(1276));
    assert_eq!(net.nodes[&underlay(2)].path_mtu(&key(1)), Some(1276));
    assert!(net.ping(2, 1), "small packets still pass");

    let (sender, source) = net.overlay[&2];
    let destination = net.overlay[&1].1;
    let send = |net: &mut Net, len: usize, dont_fragment: bool| {
        let mut packet = ipv4_packet(source, destination, &vec![7; len - 20]);
        if dont_fragment {
            packet[6] = 0x40;
        }
        let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
        let now = net.now;
        let node = net.nodes.get_mut(&sender).unwrap();
        node.handle_tun_packet(now, &mut buf, packet.len())
    };
    assert!(matches!(
        send(&mut net, 1216, true),
        Sent::Sealed { len: 1248, .. }
    ));
    assert_eq!(
        send(&mut net, 1217, true),
        Sent::Dropped(fjord_proto::DropReason::PacketTooBig)
    );
    let now = net.now;
    let node = net.nodes.get_mut(&sender).unwrap();
    let reply = std::iter::from_fn(|| node.poll_event(now))
        .find_map(|event| match event {
            NodeEvent::TunPacket(reply) => Some(reply),
            _ => None,
        })
        .expect("an ICMP reply");
    let reply = &reply[..];
    assert_eq!(&reply[12..16], &[198, 19, 0, 1], "from the destination");
    assert_eq!(&reply[16..20], &[198, 19, 0, 2], "to the sender");
    assert_eq!(&reply[20..22], &[3, 4], "fragmentation needed");
    assert_eq!(u16::from_be_bytes([reply[26], reply[27]]), 1216);
    assert_eq!(node.too_big_replies(), (1, 0));
    // Without Don't Fragment the network may fragment it: sent as is.
    assert!(matches!(send(&mut net, 1400, false), Sent::Sealed { .. }));
}

/// Whether node `at` has a session with node `with`.
fn in_session(net: &Net, at: u8, with: u8) -> bool {
    let key = Net::key(with).public_key();
    net.nodes[&underlay(at)]
        .members()
        .iter()
        .any(|(member, session)| member.key == key && *session)
}

/// `count` nodes, all joined through node 1, each with `eager_sessions`
/// and an idle timeout of 5 s, after `settle`.
fn on_demand_mesh(count: u8, eager_sessions: usize, settle: Duration) -> Net {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.on_demand = Some((eager_sessions, Duration::from_secs(5)));
    net.add(&secret, 1, None);
    for index in 2..=count {
        net.add(&secret, index, Some(1));
        net.advance(Duration::from_millis(100));
    }
    net.advance(settle);
    net
}

/// A pair of nodes that know each other but have no session (neither
/// is node 1, the bootstrap member every node keeps).
fn unmet_pair(net: &Net, count: u8) -> (u8, u8) {
    (2..=count)
        .flat_map(|a| (2..=count).map(move |b| (a, b)))
        .find(|(a, b)| a != b && !in_session(net, *a, *b) && !in_session(net, *b, *a))
        .expect("an unmet pair")
}

#[test]
fn at_the_eager_threshold_every_member_meets_every_other() {
    let mut net = on_demand_mesh(8, 8, Duration::from_secs(3));
    let everyone: Vec<u8> = (1..=8).collect();
    assert!(time_to_full_mesh(&mut net, &everyone, Duration::from_secs(30)).is_some());
    // Small meshes keep their sessions: nothing idles out.
    net.advance(Duration::from_secs(20));
    assert!(time_to_full_mesh(&mut net, &everyone, Duration::ZERO).is_some());
}

#[test]
fn above_the_eager_threshold_members_know_all_but_keep_few_sessions() {
    let net = on_demand_mesh(12, 4, Duration::from_secs(30));
    for at in 1..=12u8 {
        let members = net.nodes[&underlay(at)].members();
        assert_eq!(members.len(), 11, "node {at} knows every member");
        // The bootstrap member keeps everyone who joined through it.
        if at != 1 {
            let sessions = members.iter().filter(|(_, session)| *session).count();
            assert!(
                sessions <= 1 + 2 * fjord_mesh::GOSSIP_PARTNERS_EACH_SIDE,
                "node {at} has {sessions} sessions"
            );
            assert!(in_session(&net, at, 1), "node {at} keeps its bootstrap");
        }
    }
}

#[test]
fn a_packet_to_an_unmet_member_is_held_until_the_session_is_up() {
    let mut net = on_demand_mesh(12, 4, Duration::from_secs(30));
    let (a, b) = unmet_pair(&net, 12);
    assert!(net.seal_ping(a, b, b"first").is_none(), "held, not sealed");
    assert_eq!(net.nodes[&underlay(a)].held_packets(), 1);
    net.delivered.clear();
    net.advance(Duration::from_secs(2));
    let packet = ipv4_packet(overlay(a), overlay(b), b"first");
    assert!(
        net.delivered
            .iter()
            .any(|(at, received)| *at == underlay(b) && *received == packet),
        "the held packet arrived"
    );
    assert_eq!(net.nodes[&underlay(a)].held_packets(), 0);
    assert!(in_session(&net, a, b) && in_session(&net, b, a));
    assert!(net.ping(a, b) && net.ping(b, a));
}

#[test]
fn packets_held_for_a_member_are_bounded_and_the_overflow_counted() {
    let mut net = on_demand_mesh(12, 4, Duration::from_secs(30));
    let (a, b) = unmet_pair(&net, 12);
    let extra = 3;
    for n in 0..fjord_mesh::MAX_HELD_PACKETS + extra {
        assert!(net.seal_ping(a, b, &[n as u8; 8]).is_none());
    }
    let drops = net.nodes[&underlay(a)].drops();
    assert_eq!(
        drops.get(fjord_proto::DropReason::StagingQueueFull),
        extra as u64
    );
    net.delivered.clear();
    net.advance(Duration::from_secs(2));
    let arrived = net
        .delivered
        .iter()
        .filter(|(at, _)| *at == underlay(b))
        .count();
    assert_eq!(arrived, fjord_mesh::MAX_HELD_PACKETS, "the newest arrived");
}

#[test]
fn an_idle_on_demand_session_closes_and_traffic_reopens_it() {
    let mut net = on_demand_mesh(12, 4, Duration::from_secs(30));
    let (a, b) = unmet_pair(&net, 12);
    net.seal_ping(a, b, b"open");
    net.advance(Duration::from_secs(2));
    assert!(in_session(&net, a, b));
    // Traffic keeps it: a packet every 2 s for longer than the timeout.
    for _ in 0..5 {
        assert!(net.ping_any_path(a, b, b"busy"));
        net.advance(Duration::from_secs(2));
    }
    assert!(in_session(&net, a, b));
    // Pings of the mesh's own do not: idle for the timeout and a check.
    net.advance(Duration::from_secs(10));
    assert!(!in_session(&net, a, b) && !in_session(&net, b, a));
    assert!(in_session(&net, a, 1), "the bootstrap session stays");
    // The next packet meets it again.
    assert!(net.seal_ping(a, b, b"again").is_none());
    net.advance(Duration::from_secs(2));
    assert!(in_session(&net, a, b));
}

#[test]
fn members_behind_nats_meet_on_demand_through_their_bootstrap_member() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.on_demand = Some((4, Duration::from_secs(5)));
    net.add(&secret, 1, None);
    for index in 2..=10 {
        net.add_behind_nat(&secret, index, Some(1), NatKind::PortPreserving);
        net.advance(Duration::from_millis(100));
    }
    net.advance(Duration::from_secs(30));
    let (a, b) = unmet_pair(&net, 10);
    assert!(net.seal_ping(a, b, b"through two nats").is_none(), "held");
    net.delivered.clear();
    net.advance(Duration::from_secs(3));
    let packet = ipv4_packet(overlay(a), overlay(b), b"through two nats");
    assert!(
        net.delivered
            .iter()
            .any(|(at, received)| *at == underlay(b) && *received == packet),
        "the held packet arrived"
    );
    // Directly, NAT to NAT, not through node 1.
    assert!(net.ping(a, b) && net.ping(b, a));
}

#[test]
fn members_behind_nats_with_different_bootstrap_members_meet_on_demand() {
    let secret = NetworkSecret::from_seed([42; 32]);
    let mut net = Net::new();
    net.on_demand = Some((4, Duration::from_secs(60)));
    net.add(&secret, 1, None);
    net.add(&secret, 2, Some(1));
    net.add(&secret, 3, Some(1));
    for index in 4..=12 {
        let bootstrap = if index % 2 == 0 { 2 } else { 3 };
        net.add_behind_nat(&secret, index, Some(bootstrap), NatKind::PortPreserving);
        net.advance(Duration::from_millis(100));
    }
    net.advance(Duration::from_secs(30));
    // One member of each bootstrap member's, with no session yet.
    let (a, b) = (4..=12u8)
        .step_by(2)
        .flat_map(|a| (5..=12u8).step_by(2).map(move |b| (a, b)))
        .find(|(a, b)| !in_session(&net, *a, *b) && !in_session(&net, *b, *a))
        .expect("an unmet pair");
    assert!(net.seal_ping(a, b, b"across the tree").is_none(), "held");
    net.delivered.clear();
    net.advance(Duration::from_secs(6));
    let packet = ipv4_packet(overlay(a), overlay(b), b"across the tree");
    assert!(
        net.delivered
            .iter()
            .any(|(at, received)| *at == underlay(b) && *received == packet),
        "the held packet arrived"
    );
    // Each introducer without a session with the other member first met
    // it through its own (up the chain to a member in session with
    // both); the pair then met directly, NAT to NAT.
    assert!(net.ping(a, b) && net.ping(b, a));
}
