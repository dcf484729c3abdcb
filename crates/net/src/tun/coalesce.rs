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
use rules::{Segment, can_append, parse, same_flow};
use writes::finish_headers;
pub use writes::{PayloadRanges, Write, Writes};

use super::ipv4_fragment::{self, Fragment, HEADER_LEN as IPV4_HEADER_LEN};

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

mod reassembly;
mod rules;
#[cfg(test)]
mod tests;
mod writes;
