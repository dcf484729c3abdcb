//! IPv4 and UDP headers for packets the lab builds itself, below the
//! kernel's stack: the attack suite's spoofed initiations and the peer
//! emulator's inner packets.
//!
//! ```text
//! IPv4 (20): version 4, IHL 5 · total length · identification · DF ·
//!            TTL 64 · UDP · header checksum · source · destination
//! UDP (8):   source port · destination port · length · checksum
//! ```
//!
//! Checksums are the Internet checksum (RFC 1071): the one's-complement
//! sum of big-endian 16-bit words, folded and inverted. The UDP checksum
//! covers a pseudo-header (addresses, protocol, UDP length), the header
//! and the payload; a computed zero goes on the wire as all ones, since
//! zero means "no checksum".

use std::net::SocketAddrV4;

pub const IPV4_HEADER_LEN: usize = 20;
pub const UDP_HEADER_LEN: usize = 8;
/// Both headers: where the payload starts.
pub const IPV4_UDP_HEADERS_LEN: usize = IPV4_HEADER_LEN + UDP_HEADER_LEN;
pub const PROTOCOL_UDP: u8 = 17;
const TTL: u8 = 64;
/// Don't fragment, no offset.
const DONT_FRAGMENT: u16 = 0x4000;

/// One's-complement sum of big-endian 16-bit words (an odd last byte is
/// the high half of a word), not yet folded.
pub fn sum_words(bytes: &[u8]) -> u32 {
    let mut chunks = bytes.chunks_exact(2);
    let mut sum: u32 = chunks
        .by_ref()
        .map(|pair| u32::from(u16::from_be_bytes([pair[0], pair[1]])))
        .sum();
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    sum
}

/// The Internet checksum of words summed into `sum`.
pub fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes IPv4 and UDP headers into `packet[..IPV4_UDP_HEADERS_LEN]` for
/// a `payload_len`-byte payload whose [`sum_words`] is `payload_sum` (the
/// payload itself may follow now or later: only its sum is read).
/// `packet` must hold the headers; the payload must fit a UDP datagram.
pub fn write_ipv4_udp_headers(
    packet: &mut [u8],
    source: SocketAddrV4,
    destination: SocketAddrV4,
    identification: u16,
    payload_len: usize,
    payload_sum: u32,
) {
    let udp_len = UDP_HEADER_LEN + payload_len;
    let total_len = IPV4_HEADER_LEN + udp_len;
    debug_assert!(
        total_len <= usize::from(u16::MAX),
        "{total_len}-byte packet"
    );
    let (ip, rest) = packet.split_at_mut(IPV4_HEADER_LEN);
    ip[0] = 0x45;
    ip[1] = 0;
    ip[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
    ip[4..6].copy_from_slice(&identification.to_be_bytes());
    ip[6..8].copy_from_slice(&DONT_FRAGMENT.to_be_bytes());
    ip[8] = TTL;
    ip[9] = PROTOCOL_UDP;
    ip[10..12].fill(0);
    ip[12..16].copy_from_slice(&source.ip().octets());
    ip[16..20].copy_from_slice(&destination.ip().octets());
    let ip_checksum = fold(sum_words(ip));
    ip[10..12].copy_from_slice(&ip_checksum.to_be_bytes());

    let udp = &mut rest[..UDP_HEADER_LEN];
    udp[0..2].copy_from_slice(&source.port().to_be_bytes());
    udp[2..4].copy_from_slice(&destination.port().to_be_bytes());
    udp[4..6].copy_from_slice(&(udp_len as u16).to_be_bytes());
    // Pseudo-header (addresses, protocol, length), header and payload;
    // the length counts twice, once in each.
    let sum = sum_words(&source.ip().octets())
        + sum_words(&destination.ip().octets())
        + u32::from(PROTOCOL_UDP)
        + 2 * udp_len as u32
        + u32::from(source.port())
        + u32::from(destination.port())
        + payload_sum;
    let udp_checksum = match fold(sum) {
        0 => 0xffff,
        checksum => checksum,
    };
    udp[6..8].copy_from_slice(&udp_checksum.to_be_bytes());
}

/// Writes a whole IPv4/UDP packet carrying `payload` into the start of
/// `packet`; returns its length. `packet` must have room for it.
pub fn write_ipv4_udp_packet(
    packet: &mut [u8],
    source: SocketAddrV4,
    destination: SocketAddrV4,
    payload: &[u8],
) -> usize {
    let len = IPV4_UDP_HEADERS_LEN + payload.len();
    packet[IPV4_UDP_HEADERS_LEN..len].copy_from_slice(payload);
    write_ipv4_udp_headers(
        packet,
        source,
        destination,
        0,
        payload.len(),
        sum_words(payload),
    );
    len
}

/// Checks that `packet` is one IPv4/UDP packet with valid checksums: it
/// sums to zero over its IPv4 header, and over its UDP pseudo-header,
/// header and payload.
#[cfg(test)]
pub(crate) fn assert_valid_ipv4_udp(packet: &[u8]) {
    let ip = &packet[..IPV4_HEADER_LEN];
    assert_eq!(fold(sum_words(ip)), 0, "IPv4 header checksum");
    let udp_len = usize::from(u16::from_be_bytes([packet[24], packet[25]]));
    assert_eq!(packet.len(), IPV4_HEADER_LEN + udp_len);
    let mut pseudo = Vec::new();
    pseudo.extend_from_slice(&ip[12..20]);
    pseudo.extend_from_slice(&[0, PROTOCOL_UDP]);
    pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
    let sum = sum_words(&pseudo) + sum_words(&packet[IPV4_HEADER_LEN..]);
    assert_eq!(fold(sum), 0, "UDP checksum");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_matches_rfc_1071_example() {
        // RFC 1071 §3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum_words(&bytes)), !0xddf2);
        assert_eq!(sum_words(&[0x12]), 0x1200);
    }

    #[test]
    fn packets_carry_valid_checksums_for_odd_and_even_payloads() {
        let source: SocketAddrV4 = "198.19.16.1:40000".parse().unwrap();
        let destination: SocketAddrV4 = "198.19.0.2:6001".parse().unwrap();
        for payload_len in [0, 1, 18, 1374] {
            let payload: Vec<u8> = (0..payload_len).map(|i| (i * 7 + 3) as u8).collect();
            let mut packet = vec![0u8; 1500];
            let len = write_ipv4_udp_packet(&mut packet, source, destination, &payload);
            assert_eq!(len, IPV4_UDP_HEADERS_LEN + payload_len);
            let packet = &packet[..len];
            assert_valid_ipv4_udp(packet);
            assert_eq!(&packet[12..16], &[198, 19, 16, 1]);
            assert_eq!(&packet[16..20], &[198, 19, 0, 2]);
            assert_eq!(u16::from_be_bytes([packet[22], packet[23]]), 6001);
            assert_eq!(&packet[IPV4_UDP_HEADERS_LEN..], &payload[..]);
        }
    }
}
