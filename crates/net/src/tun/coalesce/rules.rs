//! When a packet may join a group: the rules of Linux's `tcp_gro_receive`
//! (and of UDP GRO), read from the packet's headers in the caller's buffer.

use super::{Group, Kind, MAX_GROUP_BYTES, MAX_PIECES, PROTO_TCP, PROTO_UDP, TCP_ACK, TCP_PSH};

/// The headers of a packet that may be merged.
#[derive(Debug, Clone, Copy)]
pub(super) struct Segment {
    pub(super) kind: Kind,
    pub(super) ip_header_len: usize,
    /// IP and transport headers together.
    pub(super) header_len: usize,
    pub(super) payload_len: usize,
    pub(super) seq: u32,
    pub(super) psh: bool,
}

pub(super) fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

pub(super) fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The headers of a TCP or UDP packet that could be merged, or `None`.
pub(super) fn parse(packet: &[u8]) -> Option<Segment> {
    let (ip_header_len, protocol, v6) = match packet.first()? >> 4 {
        4 => {
            // No options, not a fragment, a total length that matches.
            let fragment = be16(packet.get(..20)?, 6) & 0x3fff;
            if packet[0] != 0x45 || fragment != 0 || usize::from(be16(packet, 2)) != packet.len() {
                return None;
            }
            (20, packet[9], false)
        }
        6 => {
            let payload = usize::from(be16(packet.get(..40)?, 4));
            if payload + 40 != packet.len() {
                return None;
            }
            (40, packet[6], true)
        }
        _ => return None,
    };
    let transport = &packet[ip_header_len..];
    match protocol {
        PROTO_TCP => {
            let header_len = usize::from(transport.get(12)? >> 4) * 4;
            // A header cut before its flags byte is no segment to merge.
            let flags = *transport.get(13)?;
            if header_len < 20 || header_len > transport.len() || flags & !TCP_PSH != TCP_ACK {
                return None;
            }
            let payload_len = transport.len() - header_len;
            (payload_len > 0).then_some(Segment {
                kind: if v6 { Kind::Tcp6 } else { Kind::Tcp4 },
                ip_header_len,
                header_len: ip_header_len + header_len,
                payload_len,
                seq: be32(transport, 4),
                psh: flags & TCP_PSH != 0,
            })
        }
        PROTO_UDP => {
            let length = usize::from(be16(transport.get(..8)?, 4));
            if length != transport.len() || length == 8 {
                return None;
            }
            Some(Segment {
                kind: if v6 { Kind::Udp6 } else { Kind::Udp4 },
                ip_header_len,
                header_len: ip_header_len + 8,
                payload_len: length - 8,
                seq: 0,
                psh: false,
            })
        }
        _ => None,
    }
}

/// Same addresses and ports, and IP fields the kernel would keep from the
/// first packet only (so they must not differ).
pub(super) fn same_flow(group: &Group, first: &[u8], packet: &[u8]) -> bool {
    let ip_same = if group.kind.is_v6() {
        // Version, traffic class and flow label; next header; hop limit; addresses.
        first[..4] == packet[..4] && first[6..40] == packet[6..40]
    } else {
        // TOS; DF; TTL and protocol; addresses (not the length, ID,
        // checksum, or a joined datagram's fragment fields).
        first[1] == packet[1]
            && first[6] & 0xc0 == packet[6] & 0xc0
            && first[8..10] == packet[8..10]
            && first[12..20] == packet[12..20]
    };
    let ports = group.ip_header_len..group.ip_header_len + 4;
    ip_same && first[ports.clone()] == packet[ports]
}

pub(super) fn can_append(
    group: &Group,
    first: &[u8],
    packet: &[u8],
    segment: &Segment,
    pieces: usize,
) -> bool {
    if group.ended
        || group.pieces + pieces > MAX_PIECES
        || segment.payload_len > group.segment_len
        || group.total_len + segment.payload_len > MAX_GROUP_BYTES
    {
        return false;
    }
    match group.kind {
        Kind::Tcp4 | Kind::Tcp6 => {
            let tcp = group.ip_header_len;
            // Sequence number next; then header length, ACK number, flags
            // (PSH aside) and window, and the options byte for byte.
            segment.seq == group.next_seq
                && segment.header_len == group.header_len
                && first[tcp + 8..tcp + 13] == packet[tcp + 8..tcp + 13]
                && first[tcp + 13] & !TCP_PSH == packet[tcp + 13] & !TCP_PSH
                && first[tcp + 14..tcp + 16] == packet[tcp + 14..tcp + 16]
                && first[tcp + 20..group.header_len] == packet[tcp + 20..group.header_len]
        }
        Kind::Udp4 | Kind::Udp6 => true,
        Kind::Single | Kind::Fragments | Kind::Taken => false,
    }
}
