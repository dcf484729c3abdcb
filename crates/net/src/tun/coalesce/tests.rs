//! The property that matters: cutting each written super-packet the way
//! the kernel does (by `gso_size`, headers copied, lengths, sequence
//! numbers and checksums redone) gives back exactly the packets pushed,
//! in an order that keeps every flow in sequence.

use super::rules::{be16, be32};
use super::writes::{VIRTIO_F_NEEDS_CSUM, VIRTIO_GSO_NONE, VIRTIO_GSO_UDP_L4};
use super::*;
use tun_rs::{VIRTIO_NET_HDR_LEN, checksum, checksum_no_fold};

const A4: [u8; 4] = [198, 19, 0, 1];
const B4: [u8; 4] = [198, 19, 0, 2];
const A6: [u8; 16] = [0xfd, 0, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
const B6: [u8; 16] = [0xfd, 0, 0x19, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];

#[derive(Clone)]
struct Tcp {
    v6: bool,
    src_port: u16,
    seq: u32,
    ack: u32,
    flags: u8,
    window: u16,
    options: Vec<u8>,
    payload: Vec<u8>,
    ip_id: u16,
}

impl Tcp {
    fn data(seq: u32, len: usize) -> Self {
        Self {
            v6: false,
            src_port: 40_000,
            seq,
            ack: 7,
            flags: TCP_ACK,
            window: 500,
            options: vec![1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2],
            payload: (0..len).map(|i| (seq as usize + i) as u8).collect(),
            ip_id: 0,
        }
    }

    fn build(&self) -> Vec<u8> {
        let mut tcp = Vec::new();
        tcp.extend_from_slice(&self.src_port.to_be_bytes());
        tcp.extend_from_slice(&5201u16.to_be_bytes());
        tcp.extend_from_slice(&self.seq.to_be_bytes());
        tcp.extend_from_slice(&self.ack.to_be_bytes());
        tcp.push((((20 + self.options.len()) / 4) << 4) as u8);
        tcp.push(self.flags);
        tcp.extend_from_slice(&self.window.to_be_bytes());
        tcp.extend_from_slice(&[0, 0, 0, 0]);
        tcp.extend_from_slice(&self.options);
        tcp.extend_from_slice(&self.payload);
        ip_packet(self.v6, PROTO_TCP, self.ip_id, tcp)
    }
}

fn udp_packet(v6: bool, src_port: u16, payload_len: usize, ip_id: u16) -> Vec<u8> {
    let mut udp = Vec::new();
    udp.extend_from_slice(&src_port.to_be_bytes());
    udp.extend_from_slice(&9u16.to_be_bytes());
    udp.extend_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    udp.extend_from_slice(&[0, 0]);
    udp.extend((0..payload_len).map(|i| (i as u8) ^ (ip_id as u8)));
    ip_packet(v6, PROTO_UDP, ip_id, udp)
}

/// An IP packet around `transport`, with correct IP and transport checksums.
fn ip_packet(v6: bool, protocol: u8, ip_id: u16, mut transport: Vec<u8>) -> Vec<u8> {
    let checksum_at = if protocol == PROTO_TCP { 16 } else { 6 };
    let addresses: Vec<u8> = if v6 {
        [A6, B6].concat()
    } else {
        [A4, B4].concat()
    };
    let sum = checksum(
        &transport,
        checksum_no_fold(&addresses, u64::from(protocol) + transport.len() as u64),
    );
    transport[checksum_at..checksum_at + 2].copy_from_slice(&(!sum).to_be_bytes());
    let mut packet = if v6 {
        let mut header = vec![0x60, 0, 0, 0];
        header.extend_from_slice(&(transport.len() as u16).to_be_bytes());
        header.extend_from_slice(&[protocol, 64]);
        header.extend_from_slice(&addresses);
        header
    } else {
        let mut header = vec![0x45, 0];
        header.extend_from_slice(&((20 + transport.len()) as u16).to_be_bytes());
        header.extend_from_slice(&ip_id.to_be_bytes());
        header.extend_from_slice(&[0x40, 0, 64, protocol, 0, 0]);
        header.extend_from_slice(&addresses);
        let header_checksum = !checksum(&header, 0);
        header[10..12].copy_from_slice(&header_checksum.to_be_bytes());
        header
    };
    packet.extend_from_slice(&transport);
    packet
}

/// What the kernel makes of one write: the packets it segments it into.
fn segment_like_the_kernel(write: &Write<'_>, buffer: &[u8]) -> Vec<Vec<u8>> {
    let mut whole = buffer[write.first.clone()].to_vec();
    for payload in write.payloads.clone() {
        whole.extend_from_slice(&buffer[payload]);
    }
    let header = write.header;
    let field = |index: usize| {
        usize::from(u16::from_ne_bytes([
            header[2 + 2 * index],
            header[3 + 2 * index],
        ]))
    };
    if header[1] == VIRTIO_GSO_NONE {
        assert_eq!(header, [0; VIRTIO_NET_HDR_LEN]);
        return vec![whole];
    }
    assert_eq!(header[0], VIRTIO_F_NEEDS_CSUM);
    let (header_len, gso_size, ip_len, checksum_offset) = (field(0), field(1), field(2), field(3));
    let v6 = whole[0] >> 4 == 6;
    let addresses = if v6 { 8..40 } else { 12..20 };
    // The kernel completes the checksum from the pseudo-header sum we left:
    // check that it is the right one.
    let l4_len = whole.len() - ip_len;
    let protocol = whole[if v6 { 6 } else { 9 }];
    let pseudo = checksum(
        &whole[addresses.clone()],
        u64::from(protocol) + l4_len as u64,
    );
    assert_eq!(be16(&whole, ip_len + checksum_offset), pseudo);
    if !v6 {
        assert_eq!(checksum(&whole[..20], 0), 0xffff, "IPv4 header checksum");
        assert_eq!(usize::from(be16(&whole, 2)), whole.len());
    } else {
        assert_eq!(usize::from(be16(&whole, 4)), whole.len() - 40);
    }
    let tcp = header[1] != VIRTIO_GSO_UDP_L4;
    let payload = &whole[header_len..];
    let chunks: Vec<&[u8]> = payload.chunks(gso_size).collect();
    // A joined datagram is one segment and several packets pushed.
    assert!(chunks.len() <= write.packets);
    chunks
        .iter()
        .enumerate()
        .map(|(index, chunk)| {
            let mut packet = whole[..header_len].to_vec();
            packet.extend_from_slice(chunk);
            let total = packet.len();
            if v6 {
                packet[4..6].copy_from_slice(&((total - 40) as u16).to_be_bytes());
            } else {
                packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                let id = be16(&packet, 4).wrapping_add(index as u16);
                packet[4..6].copy_from_slice(&id.to_be_bytes());
                packet[10..12].copy_from_slice(&[0, 0]);
                let header_checksum = !checksum(&packet[..20], 0);
                packet[10..12].copy_from_slice(&header_checksum.to_be_bytes());
            }
            if tcp {
                let seq = be32(&packet, ip_len + 4).wrapping_add((index * gso_size) as u32);
                packet[ip_len + 4..ip_len + 8].copy_from_slice(&seq.to_be_bytes());
                if index + 1 < chunks.len() {
                    packet[ip_len + 13] &= !TCP_PSH;
                }
            } else {
                packet[ip_len + 4..ip_len + 6]
                    .copy_from_slice(&((total - ip_len) as u16).to_be_bytes());
            }
            let at = ip_len + checksum_offset;
            packet[at..at + 2].copy_from_slice(&[0, 0]);
            let sum = checksum(
                &packet[ip_len..],
                checksum_no_fold(
                    &packet[addresses.clone()],
                    u64::from(protocol) + (total - ip_len) as u64,
                ),
            );
            packet[at..at + 2].copy_from_slice(&(!sum).to_be_bytes());
            packet
        })
        .collect()
}

/// Pushes `packets` from one buffer (with gaps, as in a receive buffer)
/// and returns what the writes carry: per write, its packet count and the
/// packets the kernel would make of it.
fn coalesce(packets: &[Vec<u8>], merge_udp: bool) -> Vec<Vec<Vec<u8>>> {
    let mut buffer = Vec::new();
    let mut ranges = Vec::new();
    for packet in packets {
        buffer.extend_from_slice(&[0xee; 48]);
        ranges.push(buffer.len()..buffer.len() + packet.len());
        buffer.extend_from_slice(packet);
    }
    let mut coalescer = Coalescer::new(true, merge_udp);
    for range in ranges {
        coalescer.push(&buffer, range);
    }
    assert_eq!(coalescer.packets(), packets.len());
    coalescer.finish(&mut buffer);
    let carried: usize = coalescer.writes().map(|write| write.packets).sum();
    assert_eq!(
        carried,
        packets.len(),
        "every packet pushed is counted once"
    );
    for write in coalescer.writes() {
        assert!(write.payloads.count() < MAX_PIECES);
    }
    let writes: Vec<Vec<Vec<u8>>> = coalescer
        .writes()
        .map(|write| segment_like_the_kernel(&write, &buffer))
        .collect();
    coalescer.clear();
    assert_eq!(coalescer.packets(), 0);
    writes
}

fn sizes(writes: &[Vec<Vec<u8>>]) -> Vec<usize> {
    writes.iter().map(Vec::len).collect()
}

fn flatten(writes: Vec<Vec<Vec<u8>>>) -> Vec<Vec<u8>> {
    writes.into_iter().flatten().collect()
}

fn stream(start: u32, segment: usize, count: usize) -> Vec<Tcp> {
    (0..count)
        .map(|index| Tcp::data(start + (index * segment) as u32, segment))
        .collect()
}

/// The packets, with consecutive IPv4 IDs as a sender gives them (the
/// kernel numbers the segments of a super-packet that way).
fn built(segments: &[Tcp]) -> Vec<Vec<u8>> {
    segments
        .iter()
        .enumerate()
        .map(|(index, segment)| {
            let mut segment = segment.clone();
            segment.ip_id = index as u16;
            segment.build()
        })
        .collect()
}

#[test]
fn a_tcp_run_becomes_one_write_that_segments_back_into_the_same_packets() {
    let mut segments = stream(1000, 1368, 10);
    segments.push(Tcp::data(1000 + 13_680, 200));
    segments.last_mut().unwrap().flags |= TCP_PSH;
    let packets = built(&segments);
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [11]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn ipv6_tcp_merges_too() {
    let mut segments = stream(5, 1348, 6);
    for segment in &mut segments {
        segment.v6 = true;
    }
    let packets = built(&segments);
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [6]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn a_sequence_gap_psh_or_short_segment_ends_a_group() {
    let mut segments = stream(0, 1000, 3);
    segments.push(Tcp::data(4000, 1000)); // gap: 3000 is missing
    segments.push(Tcp::data(5000, 1000));
    segments[4].flags |= TCP_PSH; // nothing may follow a PSH
    segments.push(Tcp::data(6000, 500)); // shorter: last of its group
    segments.push(Tcp::data(6500, 1000)); // larger than the one before
    let packets = built(&segments);
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [3, 2, 1, 1]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn interleaved_flows_merge_each_and_keep_their_own_order() {
    let first = built(&stream(0, 1000, 4));
    let mut second = stream(90_000, 1000, 4);
    for segment in &mut second {
        segment.src_port = 40_001;
    }
    let second = built(&second);
    let packets: Vec<Vec<u8>> = first
        .iter()
        .zip(&second)
        .flat_map(|(a, b)| [a.clone(), b.clone()])
        .collect();
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [4, 4]);
    let out = flatten(writes);
    assert_eq!(out[..4], first[..]);
    assert_eq!(out[4..], second[..]);
}

#[test]
fn headers_the_kernel_would_not_merge_start_a_new_group() {
    let base = stream(0, 1000, 2);
    let variants: [fn(&mut Tcp); 5] = [
        |t| t.ack += 1,
        |t| t.window += 1,
        |t| t.options[11] += 1,
        |t| t.options.truncate(8),
        |t| t.src_port += 1,
    ];
    for change in variants {
        let mut segments = base.clone();
        change(&mut segments[1]);
        let packets = built(&segments);
        let writes = coalesce(&packets, true);
        assert_eq!(sizes(&writes), [1, 1]);
        assert_eq!(flatten(writes), packets);
    }
}

#[test]
fn packets_that_cannot_merge_go_out_alone_and_unchanged() {
    let mut syn = Tcp::data(0, 0);
    syn.flags = 0x02;
    let pure_ack = Tcp::data(0, 0);
    let mut fin = Tcp::data(0, 10);
    fin.flags |= 0x01;
    let mut with_ip_options = Tcp::data(0, 100).build();
    with_ip_options[0] = 0x46;
    let mut fragment = Tcp::data(0, 100).build();
    fragment[6] = 0x20; // more fragments
    let mut wrong_length = Tcp::data(0, 100).build();
    wrong_length[3] ^= 1;
    let icmp = ip_packet(false, 1, 1, vec![8, 0, 0, 0, 1, 2, 3, 4]);
    let packets = vec![
        syn.build(),
        pure_ack.build(),
        fin.build(),
        with_ip_options,
        fragment,
        wrong_length,
        icmp,
        vec![0x45],
        Vec::new(),
        vec![0x60; 39],
    ];
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), vec![1; packets.len()]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn a_packet_sent_alone_is_not_overtaken_by_later_packets_between_the_same_hosts() {
    let segments = built(&stream(0, 1000, 4));
    let mut ack = Tcp::data(0, 0);
    ack.src_port = 40_009;
    let packets = vec![
        segments[0].clone(),
        segments[1].clone(),
        ack.build(),
        segments[2].clone(),
        segments[3].clone(),
    ];
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [2, 1, 2]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn udp_merges_only_when_the_kernel_takes_udp_gso() {
    let mut packets: Vec<Vec<u8>> = (0..5).map(|id| udp_packet(false, 3000, 1200, id)).collect();
    packets.push(udp_packet(false, 3000, 100, 5));
    packets.push(udp_packet(true, 3000, 1200, 6));
    packets.push(udp_packet(true, 3000, 1200, 7));
    let writes = coalesce(&packets, true);
    assert_eq!(sizes(&writes), [6, 2]);
    assert_eq!(flatten(writes), packets);

    let writes = coalesce(&packets, false);
    assert_eq!(sizes(&writes), vec![1; packets.len()]);
    assert_eq!(flatten(writes), packets);
}

#[test]
fn groups_stay_within_64_kib_and_the_segment_limit() {
    let packets = built(&stream(0, 1400, 100));
    let writes = coalesce(&packets, true);
    // 1400-byte payloads behind 52 bytes of headers: 46 fit in 65,535.
    assert_eq!(sizes(&writes), [46, 46, 8]);
    assert_eq!(flatten(writes), packets);

    let packets = built(&stream(0, 100, 150));
    let writes = coalesce(&packets, true);
    assert_eq!(
        sizes(&writes),
        [MAX_SEGMENTS, MAX_SEGMENTS, 150 - 2 * MAX_SEGMENTS]
    );
    assert_eq!(flatten(writes), packets);
}

#[test]
fn random_bytes_never_panic() {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let template = Tcp::data(0, 64).build();
    for _ in 0..2000 {
        let count = (next() % 8) as usize + 1;
        let packets: Vec<Vec<u8>> = (0..count)
            .map(|_| {
                let mut packet = template.clone();
                packet.truncate((next() % template.len() as u64) as usize + 1);
                for _ in 0..(next() % 4) {
                    let at = (next() as usize) % packet.len();
                    packet[at] = next() as u8;
                }
                packet
            })
            .collect();
        let mut buffer: Vec<u8> = packets.concat();
        let mut coalescer = Coalescer::new(true, true);
        let mut start = 0;
        for packet in &packets {
            coalescer.push(&buffer, start..start + packet.len());
            start += packet.len();
        }
        coalescer.finish(&mut buffer);
        let carried: usize = coalescer.writes().map(|write| write.packets).sum();
        assert_eq!(carried, count);
    }
}

#[test]
fn a_tcp_header_cut_before_its_flags_passes_through_unmerged() {
    // Found by the tun_coalesce fuzz target: 13 bytes of TCP header.
    let mut packet = ip_packet(false, PROTO_TCP, 1, Tcp::data(1, 0).build());
    packet.truncate(20 + 13);
    packet[2..4].copy_from_slice(&33u16.to_be_bytes());
    let writes = coalesce(&[packet.clone(), packet.clone()], false);
    assert_eq!(flatten(writes), vec![packet.clone(), packet]);
}

/// A UDP datagram that may be fragmented (DF clear), as a sender's kernel
/// fragments when it is larger than the tunnel's MTU.
fn fragmentable(mut packet: Vec<u8>) -> Vec<u8> {
    packet[6] = 0;
    packet[10..12].copy_from_slice(&[0, 0]);
    let header_checksum = !checksum(&packet[..20], 0);
    packet[10..12].copy_from_slice(&header_checksum.to_be_bytes());
    packet
}

/// `packet` cut into IPv4 fragments of at most `data` bytes after the
/// header (a multiple of 8), as `ip_fragment` cuts it.
fn fragments(packet: &[u8], data: usize) -> Vec<Vec<u8>> {
    let body = &packet[20..];
    let count = body.len().div_ceil(data);
    body.chunks(data)
        .enumerate()
        .map(|(index, chunk)| {
            let mut fragment = packet[..20].to_vec();
            fragment.extend_from_slice(chunk);
            let total = fragment.len() as u16;
            fragment[2..4].copy_from_slice(&total.to_be_bytes());
            let more = if index + 1 < count { 0x2000 } else { 0 };
            let field = more | (index * data / 8) as u16;
            fragment[6..8].copy_from_slice(&field.to_be_bytes());
            fragment[10..12].copy_from_slice(&[0, 0]);
            let header_checksum = !checksum(&fragment[..20], 0);
            fragment[10..12].copy_from_slice(&header_checksum.to_be_bytes());
            fragment
        })
        .collect()
}

/// The 1,518-byte frames of the lab's frame-rate tests through a
/// 1,420-byte tunnel: 1,500-byte datagrams in two fragments each.
fn fragmented_datagrams(count: u16, src_port: u16) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let datagrams: Vec<Vec<u8>> = (0..count)
        .map(|id| fragmentable(udp_packet(false, src_port, 1472, id)))
        .collect();
    let pieces = datagrams.iter().flat_map(|d| fragments(d, 1400)).collect();
    (datagrams, pieces)
}

#[test]
fn fragmented_udp_datagrams_are_joined_and_merge_into_one_write() {
    let (datagrams, pieces) = fragmented_datagrams(10, 3000);
    assert_eq!(pieces.len(), 20);
    let writes = coalesce(&pieces, true);
    assert_eq!(sizes(&writes), [10]);
    assert_eq!(flatten(writes), datagrams);

    // Without UDP GSO each datagram is still one write, whole.
    let writes = coalesce(&pieces, false);
    assert_eq!(sizes(&writes), vec![1; 10]);
    assert_eq!(flatten(writes), datagrams);
}

#[test]
fn a_joined_run_stays_within_the_piece_limit() {
    let (datagrams, pieces) = fragmented_datagrams(100, 3000);
    let writes = coalesce(&pieces, true);
    // 1,472-byte payloads: 44 fit in 65,535 bytes, in 88 pieces.
    assert_eq!(sizes(&writes), [44, 44, 12]);
    assert_eq!(flatten(writes), datagrams);

    // Datagrams of eight fragments each (400 bytes of UDP in 56-byte
    // pieces): 16 of them fill the 128 pieces of a write.
    let datagrams: Vec<Vec<u8>> = (0..50)
        .map(|id| fragmentable(udp_packet(false, 3000, 392, id)))
        .collect();
    let pieces: Vec<Vec<u8>> = datagrams.iter().flat_map(|d| fragments(d, 56)).collect();
    assert_eq!(pieces.len(), 400);
    let writes = coalesce(&pieces, true);
    assert_eq!(sizes(&writes), [16, 16, 16, 2]);
    assert_eq!(flatten(writes), datagrams);
}

#[test]
fn a_fragmented_datagram_of_another_protocol_goes_out_whole() {
    let echo: Vec<u8> = [8, 0, 0, 0, 1, 2, 3, 4]
        .into_iter()
        .chain((0..3000).map(|i| i as u8))
        .collect();
    let icmp = fragmentable(ip_packet(false, 1, 77, echo));
    let pieces = fragments(&icmp, 1400);
    assert_eq!(pieces.len(), 3);
    let writes = coalesce(&pieces, true);
    assert_eq!(sizes(&writes), [1]);
    assert_eq!(flatten(writes), [icmp]);
}

#[test]
fn interleaved_fragments_of_two_datagrams_are_joined_each() {
    let (datagrams, pieces) = fragmented_datagrams(2, 3000);
    let interleaved = vec![
        pieces[0].clone(),
        pieces[2].clone(),
        pieces[1].clone(),
        pieces[3].clone(),
    ];
    let writes = coalesce(&interleaved, true);
    assert_eq!(sizes(&writes), [2]);
    assert_eq!(flatten(writes), datagrams);
}

#[test]
fn fragments_that_do_not_join_go_out_as_they_came() {
    let (_, pieces) = fragmented_datagrams(4, 3000);
    let mut with_options = pieces[6].clone();
    with_options[0] = 0x46;
    let unjoinable: [Vec<Vec<u8>>; 6] = [
        // The last fragment is missing: the kernel waits for it.
        vec![pieces[0].clone()],
        // Out of order.
        vec![pieces[3].clone(), pieces[2].clone()],
        // The first fragment twice: the first copy is given up.
        vec![pieces[4].clone(), pieces[4].clone()],
        // A fragment with IP options is not joined.
        vec![with_options, pieces[7].clone()],
        // The last alone, and the middle of nothing.
        vec![pieces[1].clone(), pieces[5].clone()],
        // An unfragmented packet between the same hosts, between the fragments.
        vec![
            pieces[0].clone(),
            udp_packet(false, 3000, 10, 9),
            pieces[3].clone(),
        ],
    ];
    for case in unjoinable {
        let writes = coalesce(&case, true);
        assert_eq!(sizes(&writes), vec![1; case.len()]);
        assert_eq!(flatten(writes), case);
    }

    // A duplicate first fragment: its datagram is joined from the second copy.
    let writes = coalesce(
        &[pieces[0].clone(), pieces[0].clone(), pieces[1].clone()],
        true,
    );
    assert_eq!(sizes(&writes), [1, 1]);
}

#[test]
fn a_datagram_past_the_piece_limit_or_64_kib_is_left_to_the_kernel() {
    // 200 fragments of 8 bytes: more pieces than one write may carry.
    let many = fragmentable(ip_packet(false, 1, 5, vec![7; 1600]));
    let pieces = fragments(&many, 8);
    assert_eq!(pieces.len(), 200);
    let writes = coalesce(&pieces, true);
    assert_eq!(sizes(&writes), vec![1; 200]);
    assert_eq!(flatten(writes), pieces);

    // Fragments that claim to go on past an IPv4 datagram's 65,535 bytes.
    let long = fragmentable(ip_packet(false, 1, 6, vec![3; 48 * 1400]));
    let pieces = fragments(&long, 1400);
    assert_eq!(pieces.len(), 48);
    let writes = coalesce(&pieces, true);
    assert_eq!(sizes(&writes), vec![1; 48]);
    assert_eq!(flatten(writes), pieces);
}

#[test]
fn more_datagrams_at_once_than_are_joined_leave_the_oldest_to_the_kernel() {
    let datagrams: Vec<Vec<u8>> = (0..PENDING_DATAGRAMS as u16 + 1)
        .map(|id| fragmentable(udp_packet(false, 4000 + id, 1472, id)))
        .collect();
    let split: Vec<Vec<Vec<u8>>> = datagrams.iter().map(|d| fragments(d, 1400)).collect();
    // Every first fragment, then every second one.
    let pieces: Vec<Vec<u8>> = split
        .iter()
        .map(|f| f[0].clone())
        .chain(split.iter().map(|f| f[1].clone()))
        .collect();
    let writes = coalesce(&pieces, true);
    let out = flatten(writes);
    // The oldest datagram's fragments, as they came; the others whole.
    assert_eq!(out[0], split[0][0]);
    assert!(out.contains(&split[0][1]));
    for datagram in &datagrams[1..] {
        assert!(out.contains(datagram));
    }
    assert_eq!(out.len(), 2 + PENDING_DATAGRAMS);
}
