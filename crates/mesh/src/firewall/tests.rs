use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::*;
use crate::test_support::peer_ids;

const US: [u8; 4] = [198, 19, 0, 1];
const DB: [u8; 4] = [198, 19, 0, 2];
const BEHIND_DB: [u8; 4] = [198, 19, 200, 7];

const POLICY: &str = "\
version 1
allow from group ops to group db port 5432/tcp
allow from group db to group ops port 53/udp
allow from member alpha to any proto icmp
allow from any to 198.19.200.0/24 port 80/tcp
";

fn identity(name: &str, groups: &[&str], address: [u8; 4]) -> Identity {
    Identity {
        name: Some(name.into()),
        groups: groups.iter().map(|group| group.parse().unwrap()).collect(),
        addresses: vec![format!("{}/32", Ipv4Addr::from(address)).parse().unwrap()],
    }
}

struct Setup {
    firewall: Firewall,
    peer: PeerId,
    now: Instant,
}

impl Setup {
    /// This member is alpha in ops; its peer is beta in db.
    fn new() -> Self {
        let policy = Policy::parse(POLICY.as_bytes()).unwrap();
        let now = Instant::now();
        Self {
            firewall: Firewall::new(policy, identity("alpha", &["ops"], US), now),
            peer: peer_ids(1)[0],
            now,
        }
    }

    fn check(&mut self, direction: Direction, packet: &[u8]) -> bool {
        self.firewall
            .admits(self.now, direction, self.peer, packet, || {
                Scope::Enforced(identity("beta", &["db"], DB))
            })
    }

    fn sends(&mut self, packet: &[u8]) -> bool {
        self.check(Direction::Outbound, packet)
    }

    fn receives(&mut self, packet: &[u8]) -> bool {
        self.check(Direction::Inbound, packet)
    }

    fn later(&mut self, seconds: u64) {
        self.now += Duration::from_secs(seconds);
    }
}

fn ipv4(source: [u8; 4], destination: [u8; 4], protocol: u8, payload: &[u8]) -> Vec<u8> {
    let total = 20 + payload.len();
    let mut packet = vec![0x45, 0, (total >> 8) as u8, total as u8, 0, 0, 0x40, 0, 64];
    packet.push(protocol);
    packet.extend_from_slice(&[0, 0]);
    packet.extend_from_slice(&source);
    packet.extend_from_slice(&destination);
    packet.extend_from_slice(payload);
    packet
}

fn tcp(source: [u8; 4], source_port: u16, destination: [u8; 4], port: u16) -> Vec<u8> {
    let mut header = [0u8; 20];
    header[..2].copy_from_slice(&source_port.to_be_bytes());
    header[2..4].copy_from_slice(&port.to_be_bytes());
    header[12] = 0x50;
    ipv4(source, destination, packet::TCP, &header)
}

fn udp(source: [u8; 4], source_port: u16, destination: [u8; 4], port: u16) -> Vec<u8> {
    let mut header = [0u8; 8];
    header[..2].copy_from_slice(&source_port.to_be_bytes());
    header[2..4].copy_from_slice(&port.to_be_bytes());
    ipv4(source, destination, packet::UDP, &header)
}

fn echo(source: [u8; 4], destination: [u8; 4], kind: u8, identifier: u16) -> Vec<u8> {
    let mut message = vec![kind, 0, 0, 0];
    message.extend_from_slice(&identifier.to_be_bytes());
    message.extend_from_slice(&[0, 1]);
    ipv4(source, destination, packet::ICMP, &message)
}

/// A "port unreachable" from `source` about `original`.
fn unreachable(source: [u8; 4], destination: [u8; 4], original: &[u8]) -> Vec<u8> {
    let mut message = vec![3, 3, 0, 0, 0, 0, 0, 0];
    message.extend_from_slice(&original[..original.len().min(28)]);
    ipv4(source, destination, packet::ICMP, &message)
}

#[test]
fn a_rule_opens_its_port_only_and_its_replies_pass() {
    let mut setup = Setup::new();
    // alpha (ops) may open 5432/tcp on beta (db).
    assert!(setup.sends(&tcp(US, 40000, DB, 5432)));
    assert!(setup.receives(&tcp(DB, 5432, US, 40000)));
    assert!(!setup.sends(&tcp(US, 40001, DB, 22)));
    // beta may not open anything on alpha over TCP.
    assert!(!setup.receives(&tcp(DB, 5432, US, 40001)));
    assert!(!setup.receives(&tcp(DB, 40000, US, 5432)));
}

#[test]
fn the_peer_opens_what_the_policy_lets_it_and_we_answer() {
    let mut setup = Setup::new();
    assert!(setup.receives(&udp(DB, 33000, US, 53)));
    assert!(setup.sends(&udp(US, 53, DB, 33000)));
    // Our answer opened nothing new: a packet from port 53 to another
    // of beta's ports is not part of the flow.
    assert!(!setup.sends(&udp(US, 53, DB, 33001)));
    assert_eq!(setup.firewall.report().flows_by_rule, vec![0, 1, 0, 0]);
}

#[test]
fn echo_replies_pass_but_nobody_may_ping_us() {
    let mut setup = Setup::new();
    assert!(setup.sends(&echo(US, DB, 8, 77)));
    assert!(setup.receives(&echo(DB, US, 0, 77)));
    assert!(!setup.receives(&echo(DB, US, 0, 78)), "another identifier");
    assert!(
        !setup.receives(&echo(DB, US, 8, 5)),
        "beta may not ping alpha"
    );
}

#[test]
fn an_icmp_error_about_a_tracked_flow_passes() {
    let mut setup = Setup::new();
    let query = tcp(US, 40000, DB, 5432);
    assert!(setup.sends(&query));
    assert!(setup.receives(&unreachable(DB, US, &query)));
    let untracked = tcp(US, 40002, DB, 5432);
    assert!(
        !setup.receives(&unreachable(DB, US, &untracked)),
        "an error about a flow never opened"
    );
    // The other way: our error about the peer's allowed DNS query.
    let question = udp(DB, 33000, US, 53);
    assert!(setup.receives(&question));
    assert!(setup.sends(&unreachable(US, DB, &question)));
}

#[test]
fn groups_name_a_members_own_addresses_and_prefixes_what_lies_behind() {
    let mut setup = Setup::new();
    // Port 5432 on an address routed behind beta: "group db" does not
    // cover it.
    assert!(!setup.sends(&tcp(US, 40000, BEHIND_DB, 5432)));
    // The prefix rule does.
    assert!(setup.sends(&tcp(US, 40000, BEHIND_DB, 80)));
}

#[test]
fn exempt_peers_pass_untracked() {
    let mut setup = Setup::new();
    let packet = tcp(DB, 1, US, 22);
    assert!(
        setup
            .firewall
            .admits(setup.now, Direction::Inbound, setup.peer, &packet, || {
                Scope::Exempt
            })
    );
    assert_eq!(setup.firewall.report().tracked_flows, 0);
}

#[test]
fn a_new_policy_closes_flows_it_no_longer_allows() {
    let mut setup = Setup::new();
    assert!(setup.sends(&tcp(US, 40000, DB, 5432)));
    assert!(!setup.sends(&udp(US, 9, DB, 9)));
    let narrower = Policy::parse(b"version 2\nallow from any to any proto icmp\n").unwrap();
    setup.firewall.set_policy(narrower);
    assert!(!setup.receives(&tcp(DB, 5432, US, 40000)));
    assert!(!setup.sends(&tcp(US, 40000, DB, 5432)));
    let wider = Policy::parse(b"version 3\nallow from any to any proto tcp\n").unwrap();
    setup.firewall.set_policy(wider);
    assert!(setup.sends(&tcp(US, 40000, DB, 5432)));
}

#[test]
fn flows_time_out_by_protocol() {
    let mut setup = Setup::new();
    assert!(setup.receives(&udp(DB, 33000, US, 53)));
    setup.later(170);
    assert!(setup.sends(&udp(US, 53, DB, 33000)), "within three minutes");
    setup.later(181);
    assert!(
        !setup.sends(&udp(US, 53, DB, 33000)),
        "idle past three minutes"
    );
    assert!(setup.sends(&tcp(US, 40000, DB, 5432)));
    setup.later(14 * 60);
    assert!(
        setup.receives(&tcp(DB, 5432, US, 40000)),
        "TCP keeps 15 minutes"
    );
}

#[test]
fn a_peer_opening_flows_without_end_fills_only_its_own_share() {
    let mut setup = Setup::new();
    setup.firewall.set_flows_per_side(100);
    // Ours, opened first and idle since.
    assert!(setup.sends(&tcp(US, 40000, DB, 5432)));
    setup.later(60);
    for port in 0..10_000u16 {
        assert!(setup.receives(&udp(DB, 1024 + port, US, 53)));
    }
    let report = setup.firewall.report();
    assert!(report.tracked_flows <= 101, "{report:?}");
    assert_eq!(report.evicted_flows, 10_000 - 100);
    assert!(setup.receives(&tcp(DB, 5432, US, 40000)), "our flow stayed");
}

#[test]
fn a_busy_flow_survives_a_burst_of_new_ones() {
    let mut setup = Setup::new();
    setup.firewall.set_flows_per_side(10);
    assert!(setup.receives(&udp(DB, 1000, US, 53)));
    // A new flow every 2 s: the share holds ten, five of them active.
    for port in 0..40u16 {
        setup.later(2);
        assert!(setup.receives(&udp(DB, 2000 + port, US, 53)));
        assert!(
            setup.sends(&udp(US, 53, DB, 1000)),
            "after {port} new flows"
        );
    }
}

#[test]
fn unreadable_packets_are_denied() {
    let mut setup = Setup::new();
    let mut short = tcp(DB, 1, US, 5432);
    short.truncate(22);
    assert!(!setup.receives(&short));
    assert!(!setup.receives(&[0x45]));
    assert!(!setup.receives(&[]));
}

#[test]
fn ipv6_ports_are_read_past_extension_headers() {
    let mut packet = vec![0x60, 0, 0, 0, 0, 16, 60, 64];
    packet.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
    packet.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
    // Destination options (8 bytes), then UDP.
    packet.extend_from_slice(&[packet::UDP, 0, 1, 4, 0, 0, 0, 0]);
    packet.extend_from_slice(&[0x80, 0xe8, 0, 53, 0, 8, 0, 0]);
    let Packet::Flow(tuple) = packet::read(&packet) else {
        panic!("not read");
    };
    assert_eq!(tuple.protocol, packet::UDP);
    assert_eq!((tuple.source_port, tuple.destination_port), (33000, 53));
}

/// `packet` as the fragment at `offset` (8-byte units) of datagram
/// `identification`, with more to come or not.
fn fragment_of(mut packet: Vec<u8>, identification: u16, offset: u16, more: bool) -> Vec<u8> {
    packet[4..6].copy_from_slice(&identification.to_be_bytes());
    let flags_and_offset = offset | if more { 0x2000 } else { 0 };
    packet[6..8].copy_from_slice(&flags_and_offset.to_be_bytes());
    packet
}

#[test]
fn later_fragments_follow_their_first_fragments_fate() {
    let mut setup = Setup::new();
    // A large datagram to db's allowed port: its first fragment opens the
    // flow, its later ones (no ports) pass on that.
    let first = fragment_of(tcp(US, 40000, DB, 5432), 7, 0, true);
    assert!(setup.sends(&first));
    let later = fragment_of(ipv4(US, DB, packet::TCP, &[0; 64]), 7, 185, false);
    assert!(setup.sends(&later));
    // A datagram whose first fragment was refused, or never seen, does not.
    let refused = fragment_of(tcp(US, 40001, DB, 22), 8, 0, true);
    assert!(!setup.sends(&refused));
    assert!(!setup.sends(&fragment_of(
        ipv4(US, DB, packet::TCP, &[0; 64]),
        8,
        185,
        false
    )));
    assert!(!setup.sends(&fragment_of(
        ipv4(US, DB, packet::TCP, &[0; 64]),
        9,
        185,
        false
    )));
    // Nor a fragment of another protocol claiming the same identification.
    assert!(!setup.sends(&fragment_of(
        ipv4(US, DB, packet::UDP, &[0; 64]),
        7,
        185,
        false
    )));
    // After the kernel's reassembly time, the datagram is forgotten.
    setup.later(31);
    assert!(!setup.sends(&later));
}

#[test]
fn a_peer_flooding_fragmented_datagrams_overwrites_only_its_own_memory_of_them() {
    let mut setup = Setup::new();
    for identification in 0..1000 {
        let first = fragment_of(udp(DB, 53000, US, 53), identification, 0, true);
        assert!(setup.receives(&first));
    }
    // The newest are remembered; the oldest were overwritten.
    let later = |identification| {
        fragment_of(
            ipv4(DB, US, packet::UDP, &[0; 8]),
            identification,
            100,
            false,
        )
    };
    assert!(setup.receives(&later(999)));
    assert!(!setup.receives(&later(0)));
}

#[test]
fn ipv6_fragments_name_their_datagram() {
    let ipv6 = |fragment_field: u16, transport: &[u8]| {
        let mut packet = vec![0x60, 0, 0, 0, 0, (8 + transport.len()) as u8, 44, 64];
        packet.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        packet.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
        packet.extend_from_slice(&[packet::UDP, 0]);
        packet.extend_from_slice(&fragment_field.to_be_bytes());
        packet.extend_from_slice(&0x0102_0304u32.to_be_bytes());
        packet.extend_from_slice(transport);
        packet
    };
    let first = ipv6(1, &[0x80, 0xe8, 0, 53, 0, 8, 0, 0]);
    let Packet::FirstFragment { tuple, datagram } = packet::read(&first) else {
        panic!("first fragment not read as one");
    };
    assert_eq!((tuple.source_port, tuple.destination_port), (33000, 53));
    assert_eq!(datagram.identification, 0x0102_0304);
    let later = ipv6(1448, &[0xaa; 16]);
    assert_eq!(packet::read(&later), Packet::LaterFragment(datagram));
    // Offset 0 and no more fragments: an atomic fragment, a whole packet.
    assert!(matches!(
        packet::read(&ipv6(0, &[0x80, 0xe8, 0, 53, 0, 8, 0, 0])),
        Packet::Flow(_)
    ));
}

/// A TCP, UDP or other IPv4/IPv6 packet from a small pool of fields, so
/// two draws often share a flow: whole, a fragment, or with options.
fn pooled_packet() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    use proptest::prelude::*;
    (
        any::<bool>(),
        prop::sample::select(vec![packet::TCP, packet::UDP, packet::TCP, 44]),
        0u8..2,
        0u8..2,
        (0u8..2, 0u8..2),
        prop::sample::select(vec![0u16, 0x4000, 0, 0x2000, 0x0001]),
        prop::sample::select(vec![0x45u8, 0x45, 0x46]),
        prop::collection::vec(any::<u8>(), 0..16),
    )
        .prop_map(
            |(v6, protocol, source, destination, ports, fragment, first, tail)| {
                let mut bytes = if v6 {
                    let mut header = vec![0x60, 0, 0, 0, 0, 0, protocol, 64];
                    header.extend([0xfd; 15]);
                    header.push(source);
                    header.extend([0xfd; 15]);
                    header.push(destination);
                    header
                } else {
                    let mut header = vec![first, 0, 0, 0, 0, 0];
                    header.extend(fragment.to_be_bytes());
                    header.extend([
                        64,
                        protocol,
                        0,
                        0,
                        198,
                        19,
                        0,
                        source,
                        198,
                        19,
                        0,
                        destination,
                    ]);
                    if first == 0x46 {
                        header.extend([1, 1, 1, 1]);
                    }
                    header
                };
                bytes.extend([0, 80 + ports.0, 0, 80 + ports.1]);
                bytes.extend(tail);
                bytes
            },
        )
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(4096))]

    /// Two packets with a signature have the same one exactly when they
    /// read as the same flow's packet: the compare on the raw bytes
    /// stands in for the read.
    #[test]
    fn equal_signatures_are_equal_flows(a in pooled_packet(), b in pooled_packet()) {
        let (Some(sa), Some(sb)) = (packet::signature(&a), packet::signature(&b)) else {
            for bytes in [&a, &b] {
                if packet::signature(bytes).is_some() {
                    proptest::prop_assert!(matches!(packet::read(bytes), Packet::Flow(_)));
                }
            }
            return Ok(());
        };
        let (ra, rb) = (packet::read(&a), packet::read(&b));
        proptest::prop_assert!(matches!(ra, Packet::Flow(_)), "{:?}", ra);
        proptest::prop_assert_eq!(sa == sb, ra == rb);
    }
}
