//! Two whole nodes (real handshakes, real encryption, simulated time) with
//! a firewall that drops UDP between them: the node that knows the
//! other's endpoint falls back to a carrier connection, both carry data
//! over it, UDP is probed, and when the firewall opens both go back to
//! UDP and the carrier closes. Carrier connections are simulated as
//! lossless pipes, keyed by each side's view of the far end (as the
//! driver in `fjord-net` keys its TCP connections).

mod support;

use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fjord_mesh::fallback::{CarrierEvent, PROBE_INTERVAL, PathState, UNANSWERED_BEFORE_FALLBACK};
use fjord_mesh::{CarrierCommand, Cidr, Node, NodeEvent};
use fjord_proto::{
    DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, PeerConfig, PeerId, PresharedKey,
    PrivateKey, Received, Sent, WallClock,
};
use support::{XorShift, ipv4_packet};

const FALLBACK_PORT: u16 = 443;
/// The port the accepting side sees the connection come from.
const CARRIER_SOURCE_PORT: u16 = 40_000;

const LEFT: usize = 0;
const RIGHT: usize = 1;

fn underlay(side: usize) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, side as u8 + 1], 51820))
}

fn overlay(side: usize) -> IpAddr {
    IpAddr::from([198, 19, 0, side as u8 + 1])
}

/// How a datagram travelled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Via {
    Udp,
    Carrier,
}

struct Pair {
    now: Instant,
    nodes: [Node; 2],
    /// Each side's id for the other.
    peers: [PeerId; 2],
    udp_blocked: bool,
    /// Open carriers: (side that connected, the address it connected to).
    carriers: Vec<(usize, SocketAddr)>,
    in_flight: VecDeque<(usize, SocketAddr, Vec<u8>)>,
    /// Inner packets delivered: (receiving side, payload, how).
    delivered: Vec<(usize, Vec<u8>, Via)>,
    /// Datagrams sent, by how.
    sent: HashMap<Via, usize>,
}

impl Pair {
    /// Left knows right's endpoint and fallback port; right only answers.
    fn new() -> Self {
        let now = Instant::now();
        let key = |side: usize| PrivateKey::from_bytes([side as u8 * 31 + 7; 32]);
        let mut nodes = [0, 1].map(|side| {
            Node::new(Device::new(
                DeviceConfig {
                    private_key: Some(key(side)),
                    mtu: 1420,
                },
                Box::new(XorShift(side as u64 * 7919 + 1)),
                WallClock {
                    base: now,
                    base_since_epoch: Duration::from_secs(1_800_000_000),
                },
            ))
        });
        let mut peers = Vec::new();
        for side in [LEFT, RIGHT] {
            let other = 1 - side;
            let config = PeerConfig {
                public_key: key(other).public_key(),
                preshared_key: PresharedKey::zero(),
                endpoint: (side == LEFT).then(|| underlay(other)),
                persistent_keepalive: None,
            };
            let id = nodes[side]
                .add_peer(config, &[Cidr::host(overlay(other))])
                .unwrap();
            peers.push(id);
        }
        nodes[LEFT].set_peer_fallback(now, peers[LEFT], Some(FALLBACK_PORT));
        Self {
            now,
            nodes,
            peers: [peers[0], peers[1]],
            udp_blocked: true,
            carriers: Vec::new(),
            in_flight: VecDeque::new(),
            delivered: Vec::new(),
            sent: HashMap::new(),
        }
    }

    /// The address `side` sees the carrier between the two under.
    fn carrier_view(side: usize, connector: usize) -> SocketAddr {
        let far = 1 - side;
        let port = if side == connector {
            FALLBACK_PORT
        } else {
            CARRIER_SOURCE_PORT
        };
        SocketAddr::new(underlay(far).ip(), port)
    }

    fn carried_by(&self, side: usize, destination: SocketAddr) -> bool {
        self.carriers
            .iter()
            .any(|&(connector, _)| Self::carrier_view(side, connector) == destination)
    }

    fn pump(&mut self) {
        let mut buf = vec![0u8; 65_536];
        loop {
            for side in [LEFT, RIGHT] {
                while let Some(transmit) = self.nodes[side].poll_transmit(self.now, &mut buf) {
                    // This network never carried punches or path MTU probes.
                    if transmit.ttl.is_some() || transmit.dont_fragment {
                        continue;
                    }
                    self.in_flight.push_back((
                        side,
                        transmit.destination,
                        buf[..transmit.len].to_vec(),
                    ));
                }
                while let Some(event) = self.nodes[side].poll_event(self.now) {
                    if let NodeEvent::Carrier(command) = event {
                        self.carrier_command(side, command);
                    }
                }
            }
            let Some((side, destination, mut datagram)) = self.in_flight.pop_front() else {
                break;
            };
            let far = 1 - side;
            let (via, from) = if self.carried_by(side, destination) {
                let connector = self
                    .carriers
                    .iter()
                    .find(|&&(connector, _)| Self::carrier_view(side, connector) == destination)
                    .map(|&(connector, _)| connector)
                    .unwrap();
                (Via::Carrier, Self::carrier_view(far, connector))
            } else if destination == underlay(far) && !self.udp_blocked {
                (Via::Udp, underlay(side))
            } else {
                *self.sent.entry(Via::Udp).or_default() += 1;
                continue;
            };
            *self.sent.entry(via).or_default() += 1;
            if let Received::Data { packet, .. } =
                self.nodes[far].handle_datagram(self.now, from, &mut datagram, &mut [])
            {
                self.delivered.push((far, datagram[packet].to_vec(), via));
            }
        }
    }

    /// Opens or closes a simulated TCP connection; the far side accepts
    /// (its fallback port is open) and both hear of it.
    fn carrier_command(&mut self, side: usize, command: CarrierCommand) {
        let far = 1 - side;
        match command {
            CarrierCommand::Open(address) => {
                assert_eq!(address, SocketAddr::new(underlay(far).ip(), FALLBACK_PORT));
                self.carriers.push((side, address));
                let now = self.now;
                self.nodes[far]
                    .handle_carrier(now, CarrierEvent::Accepted(Self::carrier_view(far, side)));
                self.nodes[side].handle_carrier(now, CarrierEvent::Connected(address));
            }
            CarrierCommand::Close(address) | CarrierCommand::GiveUp(address) => {
                self.carriers
                    .retain(|&(connector, to)| !(connector == side && to == address));
                let now = self.now;
                self.nodes[far]
                    .handle_carrier(now, CarrierEvent::Closed(Self::carrier_view(far, side)));
                self.nodes[side].handle_carrier(now, CarrierEvent::Closed(address));
            }
        }
    }

    fn advance(&mut self, by: Duration) {
        let end = self.now + by;
        loop {
            self.pump();
            let Some(next) = self
                .nodes
                .iter()
                .filter_map(Node::poll_timeout)
                .min()
                .filter(|t| *t <= end)
            else {
                break;
            };
            self.now = next.max(self.now);
            let now = self.now;
            for node in &mut self.nodes {
                if node.poll_timeout().is_some_and(|t| t <= now) {
                    node.handle_timeout(now);
                }
            }
        }
        self.now = end;
        self.pump();
    }

    /// `side` sends one inner packet to the other; how it arrived, if it did.
    fn send(&mut self, side: usize, payload: &[u8]) -> Option<Via> {
        let packet = ipv4_packet(overlay(side), overlay(1 - side), payload);
        let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
        match self.nodes[side].handle_tun_packet(self.now, &mut buf, packet.len()) {
            Sent::Sealed {
                len, destination, ..
            } => {
                buf.truncate(len);
                self.in_flight.push_back((side, destination, buf));
            }
            Sent::Staged => {}
            other => panic!("not sent: {other:?}"),
        }
        self.delivered.clear();
        self.pump();
        self.delivered
            .iter()
            .find(|(at, received, _)| *at == 1 - side && *received == packet)
            .map(|&(_, _, via)| via)
    }

    fn endpoint(&self, side: usize) -> Option<SocketAddr> {
        self.nodes[side]
            .device()
            .peer_status(self.peers[side])
            .and_then(|status| status.endpoint)
    }

    fn left_state(&self) -> Option<PathState> {
        self.nodes[LEFT].fallback_state(self.peers[LEFT])
    }
}

#[test]
fn blocked_udp_falls_back_to_the_carrier_and_returns_when_it_opens() {
    let mut pair = Pair::new();
    let start = pair.now;
    // A packet a second (as a ping sends): each new packet restarts the
    // device's attempt count, as in WireGuard, which must not keep the
    // fallback from counting the retries. They wait for a handshake that
    // UDP never carries.
    for second in 0..4 {
        assert_eq!(pair.send(LEFT, format!("ping {second}").as_bytes()), None);
        pair.advance(Duration::from_secs(1));
    }
    assert_eq!(pair.left_state(), Some(PathState::Udp));
    assert!(pair.carriers.is_empty());

    // 10 s after the first unanswered initiation, at the next one (5 s
    // apart), the carrier opens and the waiting packets arrive through it.
    let mut first_carried = None;
    for second in 4..12 {
        if pair.send(LEFT, format!("ping {second}").as_bytes()) == Some(Via::Carrier) {
            first_carried.get_or_insert(pair.now - start);
        }
        pair.advance(Duration::from_secs(1));
    }
    assert!(
        matches!(pair.left_state(), Some(PathState::Carried { .. })),
        "{:?} after {:?}",
        pair.left_state(),
        pair.now - start
    );
    assert!(
        first_carried.is_some_and(|at| at >= UNANSWERED_BEFORE_FALLBACK),
        "carried from {first_carried:?}, not before the retries"
    );
    assert_eq!(pair.carriers.len(), 1);
    assert_eq!(
        pair.endpoint(LEFT),
        Some(SocketAddr::new(underlay(RIGHT).ip(), FALLBACK_PORT))
    );
    assert_eq!(pair.send(LEFT, b"over the carrier"), Some(Via::Carrier));
    assert_eq!(pair.send(RIGHT, b"and back"), Some(Via::Carrier));
    assert_eq!(
        pair.endpoint(RIGHT),
        Some(SocketAddr::new(underlay(LEFT).ip(), CARRIER_SOURCE_PORT)),
        "the right side answers on the connection it accepted"
    );

    // Probes go out over UDP while it stays blocked; data keeps flowing.
    let udp_before = pair.sent.get(&Via::Udp).copied().unwrap_or(0);
    for round in 0..3 {
        pair.advance(PROBE_INTERVAL);
        assert_eq!(
            pair.send(LEFT, format!("still carried {round}").as_bytes()),
            Some(Via::Carrier)
        );
        assert_eq!(pair.send(RIGHT, b"reply"), Some(Via::Carrier));
    }
    assert!(
        pair.sent.get(&Via::Udp).copied().unwrap_or(0) >= udp_before + 3,
        "a UDP probe per interval"
    );
    assert!(matches!(pair.left_state(), Some(PathState::Carried { .. })));

    // The firewall opens: the next probe is answered over UDP, the
    // carrier closes, and both sides send over UDP again.
    pair.udp_blocked = false;
    pair.advance(PROBE_INTERVAL);
    assert_eq!(pair.left_state(), Some(PathState::Udp));
    assert!(pair.carriers.is_empty(), "carrier closed");
    assert_eq!(pair.endpoint(LEFT), Some(underlay(RIGHT)));
    assert_eq!(pair.send(LEFT, b"over udp"), Some(Via::Udp));
    assert_eq!(pair.send(RIGHT, b"udp too"), Some(Via::Udp));
    assert_eq!(pair.endpoint(RIGHT), Some(underlay(LEFT)));
    let counters = pair.nodes[LEFT].fallback_counters();
    assert_eq!((counters.fallbacks, counters.returns), (1, 1));
}

#[test]
fn a_lossless_udp_path_never_opens_a_carrier() {
    let mut pair = Pair::new();
    pair.udp_blocked = false;
    assert_eq!(pair.send(LEFT, b"hello"), Some(Via::Udp));
    for _ in 0..20 {
        pair.advance(Duration::from_secs(7));
        assert_eq!(pair.send(LEFT, b"ping"), Some(Via::Udp));
        assert_eq!(pair.send(RIGHT, b"pong"), Some(Via::Udp));
    }
    assert!(pair.carriers.is_empty());
    assert_eq!(pair.nodes[LEFT].fallback_counters().fallbacks, 0);
}
