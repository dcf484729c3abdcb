//! Helpers shared by mesh's integration tests.

use std::net::IpAddr;

/// An IPv4 packet (UDP protocol number, no UDP header) carrying `payload`,
/// as a TUN device hands the node.
pub fn ipv4_packet(source: IpAddr, destination: IpAddr, payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V4(source), IpAddr::V4(destination)) = (source, destination) else {
        unreachable!("IPv4 only");
    };
    let total = 20 + payload.len();
    let mut packet = vec![0u8; total];
    packet[0] = 0x45;
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet[8] = 64;
    packet[9] = 17;
    packet[12..16].copy_from_slice(&source.octets());
    packet[16..20].copy_from_slice(&destination.octets());
    packet[20..].copy_from_slice(payload);
    packet
}
