//! Whole nodes in switch mode on a simulated UDP network: real
//! handshakes and real encryption, simulated time. Three switch nodes
//! peer with each other (a full mesh of static peers); a fourth node in
//! router mode shows how a misconfigured peer is told apart.

use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_mesh::switch::{FRAME_HEADER_LEN, MacAddress, Port, SwitchConfig};
use fjord_mesh::{ModeMismatch, Node, NodeEvent, PeerSends};
use fjord_proto::{
    DATA_TAILROOM, Device, DeviceConfig, DropReason, PeerConfig, PresharedKey, PrivateKey,
    Received, Sent, WallClock,
};

mod support;
use support::XorShift;

const MTU: usize = 1420;

fn underlay(index: u8) -> SocketAddr {
    SocketAddr::from(([198, 18, 0, index], 51820))
}

fn key(index: u8) -> PrivateKey {
    PrivateKey::from_bytes([index.wrapping_mul(37).wrapping_add(11); 32])
}

/// The MAC address of the TAP interface behind node `index`.
fn mac(index: u8) -> MacAddress {
    MacAddress([0x02, 0x66, 0x6a, 0, 0, index])
}

fn frame(destination: MacAddress, source: MacAddress, len: usize) -> Vec<u8> {
    let mut frame = Vec::with_capacity(len);
    frame.extend_from_slice(&destination.0);
    frame.extend_from_slice(&source.0);
    frame.extend_from_slice(&[0x08, 0x06]);
    frame.extend((0..len - frame.len()).map(|n| n as u8));
    frame
}

struct Net {
    now: Instant,
    nodes: BTreeMap<u8, Node>,
    in_flight: VecDeque<(u8, SocketAddr, Vec<u8>)>,
    /// Frames each node wrote to its TAP interface, in order.
    delivered: BTreeMap<u8, Vec<Vec<u8>>>,
    /// What each node refused, in order.
    refused: BTreeMap<u8, Vec<DropReason>>,
    /// The mode mismatches each node reported, not yet looked at.
    mismatches: BTreeMap<u8, VecDeque<ModeMismatch>>,
}

impl Net {
    /// Nodes `switches` in switch mode and `routers` in router mode, each
    /// a peer of every other, with its endpoint.
    fn new(switches: &[u8], routers: &[u8]) -> Self {
        let now = Instant::now();
        let all: Vec<u8> = switches.iter().chain(routers).copied().collect();
        let mut nodes = BTreeMap::new();
        for &index in &all {
            let device = Device::new(
                DeviceConfig {
                    private_key: Some(key(index)),
                    mtu: MTU,
                },
                Box::new(XorShift(u64::from(index) * 7919 + 1)),
                WallClock {
                    base: now,
                    base_since_epoch: Duration::from_secs(1_800_000_000),
                },
            );
            let mut node = Node::new(device);
            if switches.contains(&index) {
                node.enable_switch(SwitchConfig::default());
            }
            for &other in all.iter().filter(|&&other| other != index) {
                let config = PeerConfig {
                    public_key: key(other).public_key(),
                    preshared_key: PresharedKey::zero(),
                    endpoint: Some(underlay(other)),
                    persistent_keepalive: None,
                };
                // A router routes the switches' subnet to the first of them.
                let allowed: Vec<_> = ["198.19.0.0/24".parse().unwrap()]
                    .into_iter()
                    .filter(|_| !switches.contains(&index) && other == switches[0])
                    .collect();
                node.add_peer(config, &allowed).unwrap();
            }
            nodes.insert(index, node);
        }
        Self {
            now,
            nodes,
            in_flight: VecDeque::new(),
            delivered: BTreeMap::new(),
            refused: BTreeMap::new(),
            mismatches: BTreeMap::new(),
        }
    }

    /// Node `from` reads `packet` from its TUN/TAP device.
    fn send(&mut self, from: u8, packet: &[u8]) -> Sent {
        let node = self.nodes.get_mut(&from).unwrap();
        let layout = node.inner_layout();
        let mut buf = vec![0; layout.offset + packet.len() + DATA_TAILROOM];
        buf[layout.offset..][..packet.len()].copy_from_slice(packet);
        let sent = node.handle_tun_packet(self.now, &mut buf, packet.len());
        if let Sent::Sealed {
            len, destination, ..
        } = sent
        {
            self.in_flight
                .push_back((from, destination, buf[..len].to_vec()));
        }
        self.pump();
        sent
    }

    /// The next mode mismatch `index` reported.
    fn poll_mode_mismatch(&mut self, index: u8) -> Option<ModeMismatch> {
        self.mismatches.get_mut(&index)?.pop_front()
    }

    fn pump(&mut self) {
        let mut buf = vec![0u8; 65_536];
        loop {
            for (&index, node) in self.nodes.iter_mut() {
                while let Some(transmit) = node.poll_transmit(self.now, &mut buf) {
                    // This network never carried punches or path MTU probes.
                    if transmit.ttl.is_some() || transmit.dont_fragment {
                        continue;
                    }
                    self.in_flight.push_back((
                        index,
                        transmit.destination,
                        buf[..transmit.len].to_vec(),
                    ));
                }
                while let Some(event) = node.poll_event(self.now) {
                    if let NodeEvent::ModeMismatch(mismatch) = event {
                        self.mismatches
                            .entry(index)
                            .or_default()
                            .push_back(mismatch);
                    }
                }
            }
            let Some((from, to, mut datagram)) = self.in_flight.pop_front() else {
                break;
            };
            let to = to.ip().to_string();
            let Some((&index, node)) = self
                .nodes
                .iter_mut()
                .find(|(index, _)| underlay(**index).ip().to_string() == to)
            else {
                continue;
            };
            match node.handle_datagram(self.now, underlay(from), &mut datagram, &mut []) {
                Received::Frame { frame, .. } => {
                    self.delivered
                        .entry(index)
                        .or_default()
                        .push(datagram[frame].to_vec());
                }
                Received::Data { packet, .. } => {
                    self.delivered
                        .entry(index)
                        .or_default()
                        .push(datagram[packet].to_vec());
                }
                Received::Dropped(reason) => self.refused.entry(index).or_default().push(reason),
                _ => {}
            }
        }
    }

    /// What each node delivered since the last call.
    fn take_delivered(&mut self) -> BTreeMap<u8, Vec<Vec<u8>>> {
        std::mem::take(&mut self.delivered)
    }
}

#[test]
fn a_broadcast_reaches_every_node_and_the_answer_goes_straight_back() {
    let mut net = Net::new(&[1, 2, 3], &[]);
    // An ARP request from node 1: every other node gets it, once, after
    // the handshakes it started.
    let request = frame(MacAddress::BROADCAST, mac(1), 42);
    assert_eq!(net.send(1, &request), Sent::Staged);
    let delivered = net.take_delivered();
    assert_eq!(delivered.get(&2), Some(&vec![request.clone()]));
    assert_eq!(delivered.get(&3), Some(&vec![request.clone()]));
    assert_eq!(delivered.get(&1), None, "never back to where it came from");

    // Node 2 learned where mac(1) is: its reply goes to node 1 only.
    let reply = frame(mac(1), mac(2), 42);
    net.send(2, &reply);
    let delivered = net.take_delivered();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered.get(&1), Some(&vec![reply]));

    // And node 1 learned mac(2): a full-size frame goes to node 2 only.
    let full = frame(mac(2), mac(1), MTU + 14);
    assert!(matches!(net.send(1, &full), Sent::Sealed { .. }));
    let delivered = net.take_delivered();
    assert_eq!(delivered.len(), 1, "{delivered:?}");
    assert_eq!(delivered.get(&2), Some(&vec![full]));

    // A destination nobody has heard of is flooded.
    let unknown = frame(mac(9), mac(1), 60);
    net.send(1, &unknown);
    let delivered = net.take_delivered();
    assert_eq!(delivered.get(&2), Some(&vec![unknown.clone()]));
    assert_eq!(delivered.get(&3), Some(&vec![unknown]));

    let node2 = &net.nodes[&2];
    let node1 = node2.device().peer_id(&key(1).public_key());
    let table = node2.mac_table().unwrap();
    assert_eq!(table.lookup(net.now, mac(1)), node1.map(Port::Peer));
    assert_eq!(table.lookup(net.now, mac(2)), Some(Port::Local));
    assert!(net.refused.is_empty(), "{:?}", net.refused);
}

#[test]
fn forgotten_addresses_are_flooded_again() {
    let mut net = Net::new(&[1, 2, 3], &[]);
    net.send(2, &frame(MacAddress::BROADCAST, mac(2), 42));
    net.take_delivered();
    let unicast = frame(mac(2), mac(1), 60);
    net.send(1, &unicast);
    assert_eq!(net.take_delivered().len(), 1);
    net.now += SwitchConfig::default().aging;
    net.send(1, &unicast);
    assert_eq!(net.take_delivered().len(), 2, "aged out: flooded");
}

#[test]
fn a_peer_cannot_send_from_this_nodes_own_addresses() {
    let mut net = Net::new(&[1, 2], &[]);
    net.send(1, &frame(MacAddress::BROADCAST, mac(1), 42));
    net.take_delivered();
    // Node 2 claims node 1's address.
    net.send(2, &frame(MacAddress::BROADCAST, mac(1), 42));
    assert!(net.take_delivered().is_empty());
    assert_eq!(net.refused[&1], [DropReason::SourceNotAllowed]);
    assert_eq!(
        net.nodes[&1].drops().get(DropReason::SourceNotAllowed),
        1,
        "counted"
    );
}

#[test]
fn peers_in_another_mode_are_refused_and_reported_once() {
    // Node 1 is a switch; node 4 is in router mode, routing the switch's
    // subnet to it (as a plain WireGuard peer would).
    let mut net = Net::new(&[1], &[4]);
    let mut ip_packet = vec![0u8; 28];
    ip_packet[0] = 0x45;
    ip_packet[2..4].copy_from_slice(&28u16.to_be_bytes());
    ip_packet[9] = 17;
    ip_packet[12..16].copy_from_slice(&[198, 19, 0, 4]);
    ip_packet[16..20].copy_from_slice(&[198, 19, 0, 1]);
    for _ in 0..3 {
        net.send(4, &ip_packet);
    }
    assert!(net.take_delivered().is_empty());
    assert_eq!(net.refused[&1], [DropReason::ModeMismatch; 3]);
    let switch = &net.nodes[&1];
    let peer = switch
        .device()
        .peer_id(&key(4).public_key())
        .expect("node 4 is a peer");
    assert_eq!(
        net.poll_mode_mismatch(1),
        Some(ModeMismatch {
            peer,
            sends: PeerSends::IpPackets
        })
    );
    assert_eq!(net.poll_mode_mismatch(1), None, "once per peer");
    // The switch floods no frame to a peer that speaks IP.
    assert!(matches!(
        net.send(1, &frame(MacAddress::BROADCAST, mac(1), 42)),
        Sent::Dropped(DropReason::NoRoute)
    ));

    // The other way round: a router hears a frame.
    let mut net = Net::new(&[1], &[4]);
    net.send(1, &frame(MacAddress::BROADCAST, mac(1), 42));
    assert!(net.take_delivered().is_empty());
    assert_eq!(net.refused[&4], [DropReason::ModeMismatch]);
    assert_eq!(
        net.poll_mode_mismatch(4).map(|mismatch| mismatch.sends),
        Some(PeerSends::Frames)
    );
}

#[test]
fn frames_leave_behind_their_header_and_the_layout_says_where() {
    let net = Net::new(&[1], &[4]);
    let switch = net.nodes[&1].inner_layout();
    let router = net.nodes[&4].inner_layout();
    assert_eq!(switch.offset, router.offset + FRAME_HEADER_LEN);
    assert_eq!(router.overhead, 0);
    assert_eq!(switch.overhead, FRAME_HEADER_LEN + 14 + 4);
}
