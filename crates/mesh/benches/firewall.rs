//! The network policy's work per packet, for an instruction count beside
//! the data path's (`count-instructions.sh` runs it under callgrind, as
//! it does `instructions`): what a member with a policy in force adds to
//! each packet it seals or opens. Without a policy there is no firewall
//! and each path pays one `Option` test.
//!
//! Cases (argument `CASE PACKETS`, or none to run each once):
//! - `tracked`: packets of one flow already tracked, one direction after
//!   the other (a bulk transfer's packets): one read of the headers, one
//!   hash lookup.
//! - `opening`: every packet opens a new UDP flow under a 100-rule policy
//!   whose only matching rule is the last (a scan, or a DNS client's
//!   queries): the rule scan and an insert; past the share's 4,096 flows,
//!   an eviction too.

use std::hint::black_box;
use std::net::Ipv4Addr;
use std::time::Instant;

use fjord_mesh::Cidr;
use fjord_mesh::firewall::{Direction, Firewall, Identity, Scope};
use fjord_mesh::policy::Policy;
use fjord_proto::PeerId;

// Only its node builder is used here.
#[allow(dead_code)]
mod support;

const ALICE: [u8; 4] = [198, 19, 0, 1];
const BOB: [u8; 4] = [198, 19, 0, 2];
const RULES: usize = 100;
const SMOKE_PACKETS: usize = 16;

fn policy() -> Policy {
    let mut text = String::from("version 1\n");
    for rule in 0..RULES - 1 {
        text.push_str(&format!(
            "allow from group team-{rule} to group service-{rule} port {}/tcp\n",
            8000 + rule
        ));
    }
    text.push_str("allow from member alice to member bob proto any\n");
    Policy::parse(text.as_bytes()).expect("the benchmark's policy parses")
}

fn identity(name: &str, address: [u8; 4]) -> Identity {
    Identity {
        name: Some(name.to_string()),
        groups: Vec::new(),
        addresses: vec![Cidr::host(Ipv4Addr::from(address).into())],
    }
}

/// A peer handle, as a node hands one out.
fn peer_id() -> PeerId {
    let now = Instant::now();
    let mut node = support::node_with_key([1; 32], now, 1);
    node.add_peer(
        support::peer_config([2; 32], "198.18.0.2:51820".parse().expect("address")),
        &["198.19.0.2/32".parse::<Cidr>().expect("prefix")],
    )
    .expect("a peer")
}

/// A 64-byte IPv4 UDP packet from `source` port `source_port` to
/// `destination` port 5201.
fn udp(source: [u8; 4], source_port: u16, destination: [u8; 4], destination_port: u16) -> Vec<u8> {
    let mut packet = vec![0u8; 64];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&64u16.to_be_bytes());
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source);
    packet[16..20].copy_from_slice(&destination);
    packet[20..22].copy_from_slice(&source_port.to_be_bytes());
    packet[22..24].copy_from_slice(&destination_port.to_be_bytes());
    packet
}

fn bob() -> Scope {
    Scope::Enforced(identity("bob", BOB))
}

// The counted loops: not inlined, so callgrind's --toggle-collect sees
// each alone.

/// `packets` of one tracked flow, alternately sent and received.
#[inline(never)]
fn admit_tracked(
    firewall: &mut Firewall,
    peer: PeerId,
    sent: &[u8],
    received: &[u8],
    packets: usize,
) {
    let now = Instant::now();
    for packet in 0..packets {
        let (direction, bytes) = if packet % 2 == 0 {
            (Direction::Outbound, sent)
        } else {
            (Direction::Inbound, received)
        };
        let admitted = firewall.admits(now, direction, peer, black_box(bytes), bob);
        assert!(black_box(admitted));
    }
}

/// Each of `batch` sent, each opening a flow.
#[inline(never)]
fn admit_opening(firewall: &mut Firewall, peer: PeerId, batch: &[Vec<u8>]) {
    let now = Instant::now();
    for bytes in batch {
        let admitted = firewall.admits(now, Direction::Outbound, peer, black_box(bytes), bob);
        assert!(black_box(admitted));
    }
}

fn run(case: &str, packets: usize) -> Result<(), String> {
    let now = Instant::now();
    let mut firewall = Firewall::new(policy(), identity("alice", ALICE), now);
    let peer = peer_id();
    match case {
        "tracked" => {
            let sent = udp(ALICE, 40000, BOB, 5201);
            let received = udp(BOB, 5201, ALICE, 40000);
            // The flow's first packet (the rule scan, the insert) is not
            // counted.
            assert!(firewall.admits(now, Direction::Outbound, peer, &sent, bob));
            admit_tracked(&mut firewall, peer, &sent, &received, packets);
        }
        "opening" => {
            let batch: Vec<Vec<u8>> = (0..packets)
                .map(|index| {
                    let [high, low] = (index as u16).to_be_bytes();
                    udp(
                        ALICE,
                        u16::from_be_bytes([high, low]),
                        BOB,
                        5000 + (index >> 16) as u16,
                    )
                })
                .collect();
            admit_opening(&mut firewall, peer, &batch);
        }
        other => return Err(format!("unknown case {other}")),
    }
    Ok(())
}

fn main() {
    let arguments: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    let outcome = match arguments.as_slice() {
        [case, packets] => match packets.parse() {
            Ok(packets) => run(case, packets),
            Err(_) => Err(format!("PACKETS: not a number: {packets}")),
        },
        _ => ["tracked", "opening"]
            .into_iter()
            .try_for_each(|case| run(case, SMOKE_PACKETS))
            .map(|()| println!("firewall: every case ran {SMOKE_PACKETS} packets")),
    };
    if let Err(why) = outcome {
        eprintln!("usage: firewall [tracked|opening PACKETS]: {why}");
        std::process::exit(2);
    }
}
