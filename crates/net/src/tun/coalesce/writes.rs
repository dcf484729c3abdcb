//! What leaves for the TUN device: per group, a virtio-net header that
//! asks the kernel to segment (or says the packet is whole), the first
//! packet with headers rewritten for the whole group, and the ranges of
//! the payloads after it.

use std::ops::Range;

use tun_rs::{VIRTIO_NET_HDR_LEN, checksum};

use super::ipv4_fragment::{self, HEADER_LEN as IPV4_HEADER_LEN};
use super::{Group, Kind, PROTO_TCP, PROTO_UDP, Part, TCP_PSH};

pub(super) const VIRTIO_F_NEEDS_CSUM: u8 = 1;
pub(super) const VIRTIO_GSO_NONE: u8 = 0;
const VIRTIO_GSO_TCPV4: u8 = 1;
const VIRTIO_GSO_TCPV6: u8 = 4;
pub(super) const VIRTIO_GSO_UDP_L4: u8 = 5;

/// One write to hand the kernel: a virtio header and the buffer ranges
/// that follow it.
pub struct Write<'a> {
    pub header: [u8; VIRTIO_NET_HDR_LEN],
    pub first: Range<usize>,
    pub payloads: PayloadRanges<'a>,
    /// How many packets the write carries.
    pub packets: usize,
    /// UDP GSO, which older kernels refuse.
    pub is_udp_gso: bool,
}

/// The payload ranges of a group after its first packet.
#[derive(Clone)]
pub struct PayloadRanges<'a> {
    parts: &'a [Part],
    next: Option<usize>,
}

impl PayloadRanges<'_> {
    /// Whether the group is its first packet alone.
    pub fn is_empty(&self) -> bool {
        self.next.is_none()
    }
}

impl Iterator for PayloadRanges<'_> {
    type Item = Range<usize>;

    fn next(&mut self) -> Option<Range<usize>> {
        let part = &self.parts[self.next?];
        self.next = part.next;
        Some(part.payload.clone())
    }
}

/// The writes of a batch: one per group, and one per fragment of a
/// datagram that was not joined.
pub struct Writes<'a> {
    pub(super) groups: &'a [Group],
    pub(super) parts: &'a [Part],
    /// Within a group of fragments: the part that is the next one's data.
    pub(super) next_fragment: Option<Option<usize>>,
}

impl<'a> Iterator for Writes<'a> {
    type Item = Write<'a>;

    fn next(&mut self) -> Option<Write<'a>> {
        loop {
            let (group, rest) = self.groups.split_first()?;
            let first = match (group.kind, self.next_fragment) {
                (Kind::Taken, _) => None,
                (Kind::Fragments, None) => {
                    self.next_fragment = Some(group.first_part);
                    return Some(self.alone(group.first.clone()));
                }
                (Kind::Fragments, Some(Some(part))) => {
                    let data = &self.parts[part];
                    self.next_fragment = Some(data.next);
                    return Some(
                        self.alone(data.payload.start - IPV4_HEADER_LEN..data.payload.end),
                    );
                }
                (Kind::Fragments, Some(None)) => None,
                _ => Some(group),
            };
            self.groups = rest;
            self.next_fragment = None;
            if let Some(group) = first {
                return Some(Write {
                    header: virtio_header(group),
                    first: group.first.clone(),
                    payloads: PayloadRanges {
                        parts: self.parts,
                        next: group.first_part,
                    },
                    packets: group.packets,
                    is_udp_gso: group.segments > 1 && group.kind.is_udp(),
                });
            }
        }
    }
}

impl<'a> Writes<'a> {
    /// A fragment as it came.
    fn alone(&self, range: Range<usize>) -> Write<'a> {
        Write {
            header: [0; VIRTIO_NET_HDR_LEN],
            first: range,
            payloads: PayloadRanges {
                parts: self.parts,
                next: None,
            },
            packets: 1,
            is_udp_gso: false,
        }
    }
}

/// Makes the first packet the header of the whole group: lengths, the
/// IPv4 header checksum, PSH from the last segment, and the pseudo-header
/// sum in the transport checksum field for the kernel to complete.
pub(super) fn finish_headers(group: &Group, first: &mut [u8]) {
    let total = group.total_len;
    let l4_len = total - group.ip_header_len;
    if group.kind.is_v6() {
        first[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
    } else {
        ipv4_fragment::set_whole_header(first, total);
    }
    let l4 = group.ip_header_len;
    let (protocol, checksum_at) = if group.kind.is_udp() {
        first[l4 + 4..l4 + 6].copy_from_slice(&(l4_len as u16).to_be_bytes());
        (PROTO_UDP, l4 + 6)
    } else {
        if group.psh {
            first[l4 + 13] |= TCP_PSH;
        }
        (PROTO_TCP, l4 + 16)
    };
    let addresses = if group.kind.is_v6() { 8..40 } else { 12..20 };
    let pseudo = checksum(&first[addresses], u64::from(protocol) + l4_len as u64);
    first[checksum_at..checksum_at + 2].copy_from_slice(&pseudo.to_be_bytes());
}

fn virtio_header(group: &Group) -> [u8; VIRTIO_NET_HDR_LEN] {
    let mut header = [0; VIRTIO_NET_HDR_LEN];
    if group.segments == 1 {
        header[1] = VIRTIO_GSO_NONE;
        return header;
    }
    let (gso_type, checksum_offset) = match group.kind {
        Kind::Tcp4 => (VIRTIO_GSO_TCPV4, 16u16),
        Kind::Tcp6 => (VIRTIO_GSO_TCPV6, 16),
        Kind::Udp4 | Kind::Udp6 => (VIRTIO_GSO_UDP_L4, 6),
        Kind::Single | Kind::Fragments | Kind::Taken => {
            unreachable!("a packet written alone has one segment")
        }
    };
    header[0] = VIRTIO_F_NEEDS_CSUM;
    header[1] = gso_type;
    // Legacy virtio headers on TUN are in the host's byte order.
    let fields = [
        group.header_len as u16,
        group.segment_len as u16,
        group.ip_header_len as u16,
        checksum_offset,
    ];
    for (index, field) in fields.into_iter().enumerate() {
        header[2 + 2 * index..4 + 2 * index].copy_from_slice(&field.to_ne_bytes());
    }
    header
}
