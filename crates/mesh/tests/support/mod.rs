//! What mesh's integration tests share.

// Each test binary uses a part of it.
#![allow(dead_code)]

use std::net::IpAddr;

use fjord_proto::Rng;

/// Seeded randomness for a node's device: each test run the same.
pub struct XorShift(pub u64);

impl Rng for XorShift {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *byte = self.0 as u8;
        }
    }
}

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
