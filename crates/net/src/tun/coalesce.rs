//! Userspace GRO for TUN writes: decrypted packets of one receive batch are
//! grouped into TCP and UDP super-packets that the kernel takes in one
//! write each (virtio-net header with a GSO type), so its stack runs once
//! per group instead of once per packet.
//!
//! Nothing is copied: the coalescer records where each packet lies in the
//! caller's receive buffer, and a group leaves as one `writev` of
//! `[virtio header, first packet, payload of the 2nd, payload of the 3rd…]`.
//! Only the first packet's headers are rewritten (lengths, IPv4 header
//! checksum, the pseudo-header sum the kernel completes).
//!
//! A packet joins the newest group of its flow only when the kernel would
//! have merged it too (the rules of Linux's `tcp_gro_receive`): same
//! addresses, ports, IP fields and TCP options, ACK and window; the next
//! sequence number; no larger than the group's segment size, nothing
//! after a shorter segment or a PSH. Anything else (other protocols, IP
//! options, SYN/FIN/RST/URG/CWR) goes out on its own and unchanged. Groups
//! leave in the order they began, so packets of one flow never overtake
//! each other.
//!
//! IPv4 fragments whose datagram is whole within the batch are joined
//! first ([`reassembly`]), in place like the rest: the datagram is its
//! first fragment followed by the data of the others, and a UDP datagram
//! merges with its flow's group as any other. A joined datagram takes the
//! place of its last fragment, where the kernel would have finished it.

use std::ops::Range;

use reassembly::{PENDING_DATAGRAMS, Pending};

use super::ipv4_fragment::{self, Fragment, HEADER_LEN as IPV4_HEADER_LEN};

use tun_rs::{VIRTIO_NET_HDR_LEN, checksum};
const VIRTIO_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_GSO_NONE: u8 = 0;
const VIRTIO_GSO_TCPV4: u8 = 1;
const VIRTIO_GSO_TCPV6: u8 = 4;
const VIRTIO_GSO_UDP_L4: u8 = 5;

/// Segments per group.
pub const MAX_SEGMENTS: usize = 64;
/// Buffer ranges per write (the first packet and the payloads after it):
/// bounds its iovec array. Joined fragments take one range each.
pub const MAX_PIECES: usize = 128;
/// Largest super-packet: IPv4's total length (and our IPv6 bound) is 16 bits.
const MAX_GROUP_BYTES: usize = 65_535;
/// How many of the newest groups a packet is matched against; a batch
/// rarely interleaves more flows than this.
const FLOWS_SEARCHED: usize = 8;
/// Packets per batch; the caller flushes when [`Coalescer::has_room`] says no.
pub const BATCH_PACKETS: usize = 1024;

const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const TCP_ACK: u8 = 0x10;
const TCP_PSH: u8 = 0x08;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Written alone and unchanged (but for the header of a joined datagram).
    Single,
    /// The fragments of a datagram being joined, or given up on: each is
    /// written alone and unchanged.
    Fragments,
    /// A placeholder whose datagram was joined and went elsewhere.
    Taken,
    Tcp4,
    Tcp6,
    Udp4,
    Udp6,
}

/// The headers of a packet that may be merged.
#[derive(Debug, Clone, Copy)]
struct Segment {
    kind: Kind,
    ip_header_len: usize,
    /// IP and transport headers together.
    header_len: usize,
    payload_len: usize,
    seq: u32,
    psh: bool,
}

#[derive(Debug, Clone)]
struct Group {
    kind: Kind,
    /// The first packet, whole, in the caller's buffer.
    first: Range<usize>,
    ip_header_len: usize,
    header_len: usize,
    /// Payload bytes of every segment but possibly the last.
    segment_len: usize,
    /// Bytes of the super-packet: headers plus every payload.
    total_len: usize,
    segments: usize,
    /// Packets pushed that the group carries (a joined datagram counts
    /// each of its fragments).
    packets: usize,
    /// Buffer ranges: the first packet and the parts after it.
    pieces: usize,
    /// The first packet is the first fragment of a joined datagram.
    reassembled: bool,
    next_seq: u32,
    /// A shorter segment or a PSH ended the group.
    ended: bool,
    psh: bool,
    /// Payloads appended after the first packet, a linked list through `parts`.
    first_part: Option<usize>,
    last_part: usize,
}

#[derive(Debug, Clone)]
struct Part {
    payload: Range<usize>,
    next: Option<usize>,
}

/// A packet to add: a whole one, or a joined datagram: its first fragment
/// (all the headers and the first data) and the other fragments' data, a
/// list through `parts` from `rest.0` to `rest.1`.
struct Packet {
    first: Range<usize>,
    rest: Option<(usize, usize)>,
    /// Bytes of the packet, or of the joined datagram.
    len: usize,
    pieces: usize,
    packets: usize,
    reassembled: bool,
}

impl Packet {
    fn whole(range: Range<usize>) -> Self {
        Self {
            len: range.len(),
            first: range,
            rest: None,
            pieces: 1,
            packets: 1,
            reassembled: false,
        }
    }
}

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

/// Collects the packets of one batch; see the module documentation.
#[derive(Debug)]
pub struct Coalescer {
    groups: Vec<Group>,
    parts: Vec<Part>,
    /// Datagrams whose fragments are being joined, oldest first.
    pending: Vec<Pending>,
    merge: bool,
    merge_udp: bool,
    packets: usize,
}

impl Coalescer {
    /// `merge`: whether the device takes GSO writes at all (offload on);
    /// `merge_udp`: whether it takes UDP GSO writes too.
    pub fn new(merge: bool, merge_udp: bool) -> Self {
        Self {
            groups: Vec::with_capacity(BATCH_PACKETS),
            parts: Vec::with_capacity(BATCH_PACKETS),
            pending: Vec::with_capacity(PENDING_DATAGRAMS),
            merge,
            merge_udp,
            packets: 0,
        }
    }

    /// Stops merging UDP (the kernel refused a UDP GSO write).
    pub fn disable_udp(&mut self) {
        self.merge_udp = false;
    }

    /// Packets pushed since the last [`Coalescer::clear`].
    #[cfg(test)]
    pub fn packets(&self) -> usize {
        self.packets
    }

    /// Whether another packet fits without a flush.
    pub fn has_room(&self) -> bool {
        self.packets < BATCH_PACKETS
    }

    pub fn clear(&mut self) {
        self.groups.clear();
        self.parts.clear();
        self.pending.clear();
        self.packets = 0;
    }

    /// Adds the IP packet at `buffer[range]`. The buffer must not change
    /// until the writes of this batch are done.
    pub fn push(&mut self, buffer: &[u8], range: Range<usize>) {
        self.packets += 1;
        let packet = &buffer[range.clone()];
        // Only a TUN device with offload joins fragments: a TAP device's
        // frames are not IP packets.
        if self.merge
            && let Some(fragment) = Fragment::parse(packet)
        {
            self.push_fragment(buffer, range, fragment);
            return;
        }
        let segment = parse(packet).filter(|s| self.merge_of(s.kind));
        self.add(buffer, Packet::whole(range), segment);
    }

    fn merge_of(&self, kind: Kind) -> bool {
        self.merge && (self.merge_udp || !kind.is_udp())
    }

    /// A fragment joins the datagram it continues, starts one, or (out of
    /// order, or its datagram unknown or given up) goes out alone.
    fn push_fragment(&mut self, buffer: &[u8], range: Range<usize>, fragment: Fragment) {
        let known = self.pending.iter().position(|p| p.key == fragment.key);
        if fragment.offset == 0 {
            // A second first fragment: the earlier ones stay as they came.
            if let Some(index) = known {
                self.pending.remove(index);
            }
            if self.pending.len() == PENDING_DATAGRAMS {
                self.pending.remove(0);
            }
            self.groups.push(Group::fragments(range));
            self.pending.push(Pending {
                key: fragment.key,
                group: self.groups.len() - 1,
                next_offset: fragment.data_len,
            });
            return;
        }
        let Some(index) = known else {
            self.add(buffer, Packet::whole(range), None);
            return;
        };
        let pending = self.pending[index];
        let joined_len = IPV4_HEADER_LEN + pending.next_offset + fragment.data_len;
        if fragment.offset != pending.next_offset
            || self.groups[pending.group].pieces == MAX_PIECES
            || joined_len > MAX_GROUP_BYTES
        {
            self.pending.remove(index);
            self.add(buffer, Packet::whole(range), None);
            return;
        }
        self.link_part(pending.group, range.start + IPV4_HEADER_LEN..range.end);
        let group = &mut self.groups[pending.group];
        group.packets += 1;
        group.pieces += 1;
        group.total_len = joined_len;
        if fragment.more {
            self.pending[index].next_offset += fragment.data_len;
            return;
        }
        self.pending.remove(index);
        self.add_joined(buffer, pending.group);
    }

    /// The datagram in placeholder `index` is whole: it leaves the
    /// placeholder (popped if it is the newest group) and is added where
    /// its last fragment came.
    fn add_joined(&mut self, buffer: &[u8], index: usize) {
        let held = &self.groups[index];
        let packet = Packet {
            first: held.first.clone(),
            rest: held.first_part.map(|head| (head, held.last_part)),
            len: held.total_len,
            pieces: held.pieces,
            packets: held.packets,
            reassembled: true,
        };
        if index + 1 == self.groups.len() {
            self.groups.pop();
        } else {
            self.groups[index].kind = Kind::Taken;
        }
        let segment = reassembly::udp_payload_len(&buffer[packet.first.clone()], packet.len)
            .map(|payload_len| Segment {
                kind: Kind::Udp4,
                ip_header_len: IPV4_HEADER_LEN,
                header_len: IPV4_HEADER_LEN + 8,
                payload_len,
                seq: 0,
                psh: false,
            })
            .filter(|segment| self.merge_of(segment.kind));
        self.add(buffer, packet, segment);
    }

    /// Appends `payload` to the parts of group `index`.
    fn link_part(&mut self, index: usize, payload: Range<usize>) {
        let part = self.parts.len();
        self.parts.push(Part {
            payload,
            next: None,
        });
        let group = &mut self.groups[index];
        match group.first_part {
            None => group.first_part = Some(part),
            Some(_) => self.parts[group.last_part].next = Some(part),
        }
        group.last_part = part;
    }

    fn add(&mut self, buffer: &[u8], packet: Packet, segment: Option<Segment>) {
        let first = &buffer[packet.first.clone()];
        let Some(segment) = segment else {
            self.end_groups_between_same_hosts(buffer, first);
            self.start_group(packet, None);
            return;
        };
        for index in self.searched().rev() {
            let group = &self.groups[index];
            if group.kind != segment.kind || !same_flow(group, &buffer[group.first.clone()], first)
            {
                continue;
            }
            if can_append(
                group,
                &buffer[group.first.clone()],
                first,
                &segment,
                packet.pieces,
            ) {
                self.append(index, packet, &segment);
                return;
            }
            // Only the newest group of a flow takes packets: an older one
            // would let this packet overtake the ones in between.
            self.groups[index].ended = true;
            break;
        }
        self.start_group(packet, Some(segment));
    }

    fn searched(&self) -> Range<usize> {
        self.groups.len().saturating_sub(FLOWS_SEARCHED)..self.groups.len()
    }

    /// A packet that goes out alone must not be overtaken by later packets
    /// between the same hosts (a pure ACK by the data after it, say).
    fn end_groups_between_same_hosts(&mut self, buffer: &[u8], packet: &[u8]) {
        let addresses = match packet.first().map(|byte| byte >> 4) {
            Some(4) if packet.len() >= 20 => 12..20,
            Some(6) if packet.len() >= 40 => 8..40,
            _ => return,
        };
        for index in self.searched() {
            let group = &self.groups[index];
            let first = &buffer[group.first.clone()];
            if group.kind.merges()
                && first[0] >> 4 == packet[0] >> 4
                && first[addresses.clone()] == packet[addresses.clone()]
            {
                self.groups[index].ended = true;
            }
        }
    }

    fn start_group(&mut self, packet: Packet, segment: Option<Segment>) {
        let (first_part, last_part) = packet
            .rest
            .map_or((None, 0), |(head, tail)| (Some(head), tail));
        let group = match segment {
            Some(segment) => Group {
                kind: segment.kind,
                first: packet.first,
                ip_header_len: segment.ip_header_len,
                header_len: segment.header_len,
                segment_len: segment.payload_len,
                total_len: packet.len,
                segments: 1,
                packets: packet.packets,
                pieces: packet.pieces,
                reassembled: packet.reassembled,
                next_seq: segment.seq.wrapping_add(segment.payload_len as u32),
                ended: segment.psh,
                psh: segment.psh,
                first_part,
                last_part,
            },
            None => Group {
                reassembled: packet.reassembled,
                first_part,
                last_part,
                ..Group::single(packet.first, packet.len, packet.packets, packet.pieces)
            },
        };
        self.groups.push(group);
    }

    fn append(&mut self, index: usize, packet: Packet, segment: &Segment) {
        self.link_part(
            index,
            packet.first.start + segment.header_len..packet.first.end,
        );
        if let Some((head, tail)) = packet.rest {
            let group = &mut self.groups[index];
            self.parts[group.last_part].next = Some(head);
            group.last_part = tail;
        }
        let group = &mut self.groups[index];
        group.segments += 1;
        group.packets += packet.packets;
        group.pieces += packet.pieces;
        group.total_len += segment.payload_len;
        group.next_seq = group.next_seq.wrapping_add(segment.payload_len as u32);
        group.psh = segment.psh;
        group.ended = segment.psh
            || segment.payload_len < group.segment_len
            || group.segments == MAX_SEGMENTS
            || group.pieces == MAX_PIECES;
    }

    /// Rewrites the first packet of each merged group into the header of
    /// the whole group. Call once, before [`Coalescer::writes`].
    pub fn finish(&self, buffer: &mut [u8]) {
        for group in &self.groups {
            let first = &mut buffer[group.first.clone()];
            if group.segments > 1 {
                finish_headers(group, first);
            } else if group.reassembled {
                ipv4_fragment::set_whole_header(first, group.total_len);
            }
        }
    }

    /// The writes, in the order their groups began. Call
    /// [`Coalescer::clear`] once they are done.
    pub fn writes(&self) -> Writes<'_> {
        Writes {
            groups: &self.groups,
            parts: &self.parts,
            next_fragment: None,
        }
    }
}

/// The writes of a batch: one per group, and one per fragment of a
/// datagram that was not joined.
pub struct Writes<'a> {
    groups: &'a [Group],
    parts: &'a [Part],
    /// Within a group of fragments: the part that is the next one's data.
    next_fragment: Option<Option<usize>>,
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

impl Group {
    /// A packet written alone.
    fn single(first: Range<usize>, len: usize, packets: usize, pieces: usize) -> Self {
        Group {
            kind: Kind::Single,
            first,
            ip_header_len: 0,
            header_len: 0,
            segment_len: 0,
            total_len: len,
            segments: 1,
            packets,
            pieces,
            reassembled: false,
            next_seq: 0,
            ended: true,
            psh: false,
            first_part: None,
            last_part: 0,
        }
    }

    /// The placeholder of a datagram whose first fragment is `first`.
    fn fragments(first: Range<usize>) -> Self {
        Group {
            kind: Kind::Fragments,
            ..Group::single(first.clone(), first.len(), 1, 1)
        }
    }
}

impl Kind {
    /// A group of this kind can take more packets.
    fn merges(self) -> bool {
        !matches!(self, Kind::Single | Kind::Fragments | Kind::Taken)
    }

    fn is_udp(self) -> bool {
        matches!(self, Kind::Udp4 | Kind::Udp6)
    }

    fn is_v6(self) -> bool {
        matches!(self, Kind::Tcp6 | Kind::Udp6)
    }
}

fn be16(bytes: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([bytes[at], bytes[at + 1]])
}

fn be32(bytes: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

/// The headers of a TCP or UDP packet that could be merged, or `None`.
fn parse(packet: &[u8]) -> Option<Segment> {
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
fn same_flow(group: &Group, first: &[u8], packet: &[u8]) -> bool {
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

fn can_append(
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

/// Makes the first packet the header of the whole group: lengths, the
/// IPv4 header checksum, PSH from the last segment, and the pseudo-header
/// sum in the transport checksum field for the kernel to complete.
fn finish_headers(group: &Group, first: &mut [u8]) {
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

mod reassembly;
#[cfg(test)]
mod tests;
