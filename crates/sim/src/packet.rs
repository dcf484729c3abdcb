//! The user packets the simulator sends through the mesh: IPv4 with a
//! valid header length and addresses, which is all the node's routing and
//! source check read.

use std::net::IpAddr;

const IPV4_HEADER_LEN: usize = 20;
const PROTOCOL_UDP: u8 = 17;

/// An IPv4 packet from `source` to `destination` carrying `payload` (no
/// UDP header: nothing past the IP header is read).
pub fn ipv4_packet(source: IpAddr, destination: IpAddr, payload: &[u8]) -> Vec<u8> {
    let (IpAddr::V4(source), IpAddr::V4(destination)) = (source, destination) else {
        // The address plan (network.rs) is IPv4 only.
        unreachable!("overlay addresses are IPv4");
    };
    let total = IPV4_HEADER_LEN + payload.len();
    let mut packet = Vec::with_capacity(total);
    packet.push(0x45); // version 4, five 32-bit words of header
    packet.push(0);
    packet.extend_from_slice(&(total as u16).to_be_bytes());
    packet.extend_from_slice(&[0, 0, 0, 0]); // identification, fragments
    packet.push(64); // TTL
    packet.push(PROTOCOL_UDP);
    packet.extend_from_slice(&[0, 0]); // checksum: nobody checks it here
    packet.extend_from_slice(&source.octets());
    packet.extend_from_slice(&destination.octets());
    packet.extend_from_slice(payload);
    packet
}
