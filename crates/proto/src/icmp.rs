//! "Packet too big" replies for inner packets that do not fit a peer's
//! path: ICMP "fragmentation needed" (type 3, code 4, RFC 792 and RFC
//! 1191) for IPv4 with Don't Fragment set, ICMPv6 "packet too big" (type
//! 2, RFC 4443) for IPv6. The reply goes back into the tunnel interface,
//! addressed to the packet's sender, so its stack lowers the path MTU of
//! that destination (TCP its MSS) and sends again.
//!
//! ```text
//! IPv4:  IP header (20) | type 3 code 4 | checksum | 0 u16 | next-hop MTU u16
//!        | as much of the packet as fits in 576 bytes (RFC 1812 4.3.2.3)
//! IPv6:  IP header (40) | type 2 code 0 | checksum | MTU u32
//!        | as much of the packet as fits in 1280 bytes (RFC 4443 2.4)
//! ```
//!
//! The reply's source is the packet's destination: the kernel drops a
//! packet that arrives on an interface with one of its own addresses as
//! source ("martian"), and a source behind the tunnel passes its
//! reverse-path check. Receivers match the quoted header against their
//! socket; which router "sent" the error does not matter to them.
//!
//! No reply is built for ICMP errors themselves (RFC 1122 3.2.2), for
//! IPv4 fragments other than the first, or for packets from unspecified,
//! broadcast or multicast sources.

use std::net::{Ipv4Addr, Ipv6Addr};

/// IPv6 links carry packets of this size at least (RFC 8200 5).
pub const IPV6_MIN_MTU: usize = 1280;
/// Room for the longest reply [`too_big_reply`] writes.
pub const MAX_REPLY_LEN: usize = IPV6_MIN_MTU;
/// Longest IPv4 reply (RFC 1812 4.3.2.3).
const IPV4_MAX_REPLY_LEN: usize = 576;
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;
const ICMP_HEADER_LEN: usize = 8;
const PROTOCOL_ICMP: u8 = 1;
const NEXT_HEADER_ICMPV6: u8 = 58;
const REPLY_TTL: u8 = 64;

/// What to do with an inner packet longer than the path allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TooBig {
    /// Drop it; a `len`-byte reply for the sender is at the start of `out`.
    Reply { len: usize },
    /// Send it anyway: IPv4 without Don't Fragment (the network may
    /// fragment it), or IPv6 no longer than [`IPV6_MIN_MTU`], which every
    /// IPv6 link must carry, so no sender would go below it.
    SendAnyway,
    /// Drop it without a reply (an ICMP error, a later fragment, a source
    /// that must not get errors, or no IP packet at all).
    Silent,
}

/// Decides about `packet`, longer than `mtu`, and writes the reply into
/// `out` (at least [`MAX_REPLY_LEN`] bytes to hold any). For IPv6 the
/// reported MTU is at least [`IPV6_MIN_MTU`]. Never panics.
pub fn too_big_reply(packet: &[u8], mtu: usize, out: &mut [u8]) -> TooBig {
    match packet.first().map(|byte| byte >> 4) {
        Some(4) => ipv4_reply(packet, mtu, out),
        Some(6) => ipv6_reply(packet, mtu, out),
        _ => TooBig::Silent,
    }
}

fn ipv4_reply(packet: &[u8], mtu: usize, out: &mut [u8]) -> TooBig {
    let Some(header) = packet.first_chunk::<IPV4_HEADER_LEN>() else {
        return TooBig::Silent;
    };
    let header_len = usize::from(header[0] & 0x0f) * 4;
    if header_len < IPV4_HEADER_LEN || packet.len() < header_len {
        return TooBig::Silent;
    }
    let dont_fragment = header[6] & 0x40 != 0;
    let fragment_offset = u16::from_be_bytes([header[6] & 0x1f, header[7]]);
    let source = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
    let destination = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
    if !dont_fragment {
        return TooBig::SendAnyway;
    }
    let is_icmp_error = header[9] == PROTOCOL_ICMP
        && packet
            .get(header_len)
            .is_some_and(|&kind| matches!(kind, 3 | 4 | 5 | 11 | 12));
    if fragment_offset != 0
        || is_icmp_error
        || source.is_unspecified()
        || source.is_broadcast()
        || source.is_multicast()
    {
        return TooBig::Silent;
    }
    let quoted = packet
        .len()
        .min(IPV4_MAX_REPLY_LEN - IPV4_HEADER_LEN - ICMP_HEADER_LEN);
    let len = IPV4_HEADER_LEN + ICMP_HEADER_LEN + quoted;
    let Some(out) = out.get_mut(..len) else {
        return TooBig::Silent;
    };
    out.fill(0);
    out[0] = 0x45;
    out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    out[8] = REPLY_TTL;
    out[9] = PROTOCOL_ICMP;
    out[12..16].copy_from_slice(&destination.octets());
    out[16..20].copy_from_slice(&source.octets());
    let checksum = internet_checksum(0, &out[..IPV4_HEADER_LEN]);
    out[10..12].copy_from_slice(&checksum.to_be_bytes());
    let icmp = &mut out[IPV4_HEADER_LEN..];
    icmp[0] = 3;
    icmp[1] = 4;
    icmp[6..8].copy_from_slice(&(mtu.min(usize::from(u16::MAX)) as u16).to_be_bytes());
    icmp[ICMP_HEADER_LEN..].copy_from_slice(&packet[..quoted]);
    let checksum = internet_checksum(0, icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    TooBig::Reply { len }
}

fn ipv6_reply(packet: &[u8], mtu: usize, out: &mut [u8]) -> TooBig {
    let Some(header) = packet.first_chunk::<IPV6_HEADER_LEN>() else {
        return TooBig::Silent;
    };
    if packet.len() <= IPV6_MIN_MTU {
        return TooBig::SendAnyway;
    }
    let address = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&header[at..at + 16]);
        Ipv6Addr::from(octets)
    };
    let (source, destination) = (address(8), address(24));
    // Only an ICMPv6 header right behind the IP header is recognised; an
    // error behind extension headers gets a reply, which its sender
    // drops as an error about an error.
    let is_icmp_error = header[6] == NEXT_HEADER_ICMPV6
        && packet.get(IPV6_HEADER_LEN).is_some_and(|&kind| kind < 128);
    if is_icmp_error || source.is_unspecified() || source.is_multicast() {
        return TooBig::Silent;
    }
    let quoted = packet
        .len()
        .min(IPV6_MIN_MTU - IPV6_HEADER_LEN - ICMP_HEADER_LEN);
    let payload_len = ICMP_HEADER_LEN + quoted;
    let len = IPV6_HEADER_LEN + payload_len;
    let Some(out) = out.get_mut(..len) else {
        return TooBig::Silent;
    };
    out.fill(0);
    out[0] = 0x60;
    out[4..6].copy_from_slice(&(payload_len as u16).to_be_bytes());
    out[6] = NEXT_HEADER_ICMPV6;
    out[7] = REPLY_TTL;
    out[8..24].copy_from_slice(&destination.octets());
    out[24..40].copy_from_slice(&source.octets());
    let reported = mtu.clamp(IPV6_MIN_MTU, u32::MAX as usize) as u32;
    let (ip, icmp) = out.split_at_mut(IPV6_HEADER_LEN);
    icmp[0] = 2;
    icmp[4..8].copy_from_slice(&reported.to_be_bytes());
    icmp[ICMP_HEADER_LEN..].copy_from_slice(&packet[..quoted]);
    // The pseudo-header: both addresses, the upper-layer length and the
    // next header (RFC 8200 8.1).
    let mut pseudo = 0u32;
    pseudo = checksum_add(pseudo, &ip[8..40]);
    pseudo = checksum_add(pseudo, &(payload_len as u32).to_be_bytes());
    pseudo = checksum_add(pseudo, &[0, 0, 0, NEXT_HEADER_ICMPV6]);
    let checksum = internet_checksum(pseudo, icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    TooBig::Reply { len }
}

/// Sums `bytes` as big-endian 16-bit words (an odd last byte padded with
/// zero) onto `sum`, carries not yet folded.
fn checksum_add(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(2);
    for word in &mut words {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([word[0], word[1]])));
        // Fold early so that no input length can overflow the sum.
        sum = (sum & 0xffff) + (sum >> 16);
    }
    if let [last] = words.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    sum
}

/// The ones' complement of the ones' complement sum of `bytes` after
/// `initial` (RFC 1071).
fn internet_checksum(initial: u32, bytes: &[u8]) -> u16 {
    let mut sum = checksum_add(initial, bytes);
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(len: usize, flags: u8) -> Vec<u8> {
        let mut packet = vec![0u8; len];
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        packet[6] = flags;
        packet[8] = 64;
        packet[9] = 6;
        packet[12..16].copy_from_slice(&[198, 19, 0, 1]);
        packet[16..20].copy_from_slice(&[198, 19, 0, 2]);
        for (index, byte) in packet[20..].iter_mut().enumerate() {
            *byte = index as u8;
        }
        packet
    }

    fn ipv6_udp(len: usize) -> Vec<u8> {
        let mut packet = vec![0u8; len];
        packet[0] = 0x60;
        packet[4..6].copy_from_slice(&((len - 40) as u16).to_be_bytes());
        packet[6] = 17;
        packet[7] = 64;
        packet[8] = 0xfd;
        packet[23] = 1;
        packet[24] = 0xfd;
        packet[39] = 2;
        packet
    }

    /// A received packet's checksum sums to zero with its own field.
    fn sums_to_zero(initial: u32, bytes: &[u8]) -> bool {
        internet_checksum(initial, bytes) == 0
    }

    #[test]
    fn ipv4_with_dont_fragment_gets_fragmentation_needed() {
        let packet = ipv4_tcp(1400, 0x40);
        let mut out = [0u8; MAX_REPLY_LEN];
        let TooBig::Reply { len } = too_big_reply(&packet, 1216, &mut out) else {
            panic!("no reply");
        };
        let reply = &out[..len];
        assert_eq!(len, 576);
        let header = crate::ip::IpHeader::parse(reply).unwrap();
        assert_eq!(
            header.source,
            "198.19.0.2".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(
            header.destination,
            "198.19.0.1".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(header.total_len, 576);
        assert!(sums_to_zero(0, &reply[..20]), "IP header checksum");
        assert_eq!(&reply[20..22], &[3, 4]);
        assert_eq!(u16::from_be_bytes([reply[26], reply[27]]), 1216);
        assert!(sums_to_zero(0, &reply[20..]), "ICMP checksum");
        assert_eq!(&reply[28..], &packet[..548], "quotes the packet's start");
    }

    #[test]
    fn ipv4_without_dont_fragment_may_be_fragmented() {
        let mut out = [0u8; MAX_REPLY_LEN];
        assert_eq!(
            too_big_reply(&ipv4_tcp(1400, 0), 1216, &mut out),
            TooBig::SendAnyway
        );
    }

    #[test]
    fn errors_about_errors_later_fragments_and_broadcast_get_none() {
        let mut out = [0u8; MAX_REPLY_LEN];
        let mut icmp_error = ipv4_tcp(1400, 0x40);
        icmp_error[9] = 1;
        icmp_error[20] = 3;
        assert_eq!(too_big_reply(&icmp_error, 1216, &mut out), TooBig::Silent);
        let mut echo = icmp_error.clone();
        echo[20] = 8;
        assert!(matches!(
            too_big_reply(&echo, 1216, &mut out),
            TooBig::Reply { .. }
        ));
        let mut fragment = ipv4_tcp(1400, 0x40);
        fragment[7] = 10;
        assert_eq!(too_big_reply(&fragment, 1216, &mut out), TooBig::Silent);
        let mut broadcast = ipv4_tcp(1400, 0x40);
        broadcast[12..16].copy_from_slice(&[255; 4]);
        assert_eq!(too_big_reply(&broadcast, 1216, &mut out), TooBig::Silent);
        let mut v6_error = ipv6_udp(1400);
        v6_error[6] = 58;
        v6_error[40] = 1;
        assert_eq!(too_big_reply(&v6_error, 1280, &mut out), TooBig::Silent);
    }

    #[test]
    fn ipv6_gets_packet_too_big_of_at_least_1280() {
        let packet = ipv6_udp(1400);
        let mut out = [0u8; MAX_REPLY_LEN];
        let TooBig::Reply { len } = too_big_reply(&packet, 1200, &mut out) else {
            panic!("no reply");
        };
        assert_eq!(len, 1280);
        let reply = &out[..len];
        let header = crate::ip::IpHeader::parse(reply).unwrap();
        assert_eq!(
            header.source,
            "fd00::2".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(
            header.destination,
            "fd00::1".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(reply[40], 2);
        assert_eq!(u32::from_be_bytes(reply[44..48].try_into().unwrap()), 1280);
        let mut pseudo = checksum_add(0, &reply[8..40]);
        pseudo = checksum_add(pseudo, &((len - 40) as u32).to_be_bytes());
        pseudo = checksum_add(pseudo, &[0, 0, 0, 58]);
        assert!(sums_to_zero(pseudo, &reply[40..]), "ICMPv6 checksum");
        assert_eq!(&reply[48..], &packet[..1232]);
        assert_eq!(
            too_big_reply(&ipv6_udp(1280), 1200, &mut out),
            TooBig::SendAnyway,
            "every IPv6 link carries 1280 bytes"
        );
    }

    #[test]
    fn checksum_matches_rfc_1071_example() {
        // RFC 1071 section 3: the sum of these words is ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(internet_checksum(0, &bytes), !0xddf2);
    }

    proptest::proptest! {
        #[test]
        fn never_panics(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..1600),
            mtu in 0usize..70_000,
            room in 0usize..1400,
        ) {
            let mut out = vec![0u8; room];
            let _ = too_big_reply(&bytes, mtu, &mut out);
        }
    }
}
