//! Fuzz bodies for `fjord-net`'s pure parts.

use std::io::IoSliceMut;

use fjord_net::carrier::fake_tcp::segment::{SegmentHeader, parse_ipv4, write_header};
use fjord_net::carrier::framing::{FrameDecoder, PREAMBLE, frame_header};
use fjord_net::tun::coalesce::{Coalescer, MAX_PIECES};
use fjord_net::tun::fragment_balance::balance;
use fjord_net::tun::read::{Slots, read_offloaded};
use fjord_net::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET};

/// The TUN write coalescer over arbitrary packets (a peer decides what it
/// sends us, so every header is hostile). Input: one flag byte (bit 0:
/// merge UDP), then packets as a little-endian `u16` length and the bytes.
/// Every packet must leave in exactly one write.
pub fn tun_coalesce(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut buffer = Vec::with_capacity(data.len());
    let mut ranges = Vec::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        ranges.push(buffer.len()..buffer.len() + len);
        buffer.extend_from_slice(&rest[2..2 + len]);
        rest = &rest[2 + len..];
    }
    let mut coalescer = Coalescer::new(true, flags & 1 != 0);
    for range in &ranges {
        if !coalescer.has_room() {
            break;
        }
        coalescer.push(&buffer, range.clone());
    }
    coalescer.finish(&mut buffer);
    let mut carried = 0;
    for write in coalescer.writes() {
        let (pieces, payload_bytes) = write.payloads.fold((1, 0), |(pieces, bytes), range| {
            (pieces + 1, bytes + range.len())
        });
        assert!(pieces <= MAX_PIECES);
        assert!(write.first.len() + payload_bytes <= 65_535 || write.packets == 1);
        carried += write.packets;
    }
    assert_eq!(
        carried,
        ranges.len().min(fjord_net::tun::coalesce::BATCH_PACKETS)
    );
}

/// The sender's re-cut of a datagram's two IPv4 fragments (TUN packets
/// come from any local program, raw sockets included). Input: the first
/// fragment's length as a little-endian `u16`, then the two packets. A
/// re-cut must keep the bytes the two carry, only moved between them.
pub fn fragment_balance(data: &[u8]) {
    let Some((length, rest)) = data.split_first_chunk::<2>() else {
        return;
    };
    let split = usize::from(u16::from_le_bytes(*length)).min(rest.len());
    let (first, last) = rest.split_at(split);
    let mut first = first.to_vec();
    let mut last_buffer = last.to_vec();
    last_buffer.resize(last.len().max(first.len()), 0);
    let Some((first_len, last_len)) = balance(&mut first, split, &mut last_buffer, last.len())
    else {
        assert_eq!(first, rest[..split], "nothing changes without a re-cut");
        return;
    };
    assert_eq!(first_len + last_len, split + last.len());
    let data = |packet: &[u8]| packet[20..].to_vec();
    let before = [data(&rest[..split]), data(last)].concat();
    let after = [data(&first[..first_len]), data(&last_buffer[..last_len])].concat();
    assert_eq!(before, after, "the datagram's data, in order");
}

/// The carrier's frame decoder (a peer, or anyone who connects to the
/// fallback port, decides the stream). Input: one byte choosing how the
/// stream is cut (read sizes 1 to 256), then datagrams as a little-endian
/// `u16` length and the bytes. The input itself is decoded as a stream
/// (any verdict, no panic); the datagrams, framed as a carrier sends them,
/// must come back exactly, empty ones skipped.
pub fn carrier_frames(data: &[u8]) {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let piece = usize::from(cut) + 1;
    let _ = decode(rest, piece);

    let mut datagrams = Vec::new();
    let mut input = rest;
    while input.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([input[0], input[1]])).min(input.len() - 2);
        datagrams.push(&input[2..2 + len]);
        input = &input[2 + len..];
    }
    let mut stream = PREAMBLE.to_vec();
    for datagram in &datagrams {
        stream.extend_from_slice(&frame_header(datagram.len()).expect("at most u16::MAX bytes"));
        stream.extend_from_slice(datagram);
    }
    let decoded = decode(&stream, piece).expect("a carrier's own stream decodes");
    let expected: Vec<&[u8]> = datagrams.into_iter().filter(|d| !d.is_empty()).collect();
    assert_eq!(decoded, expected);
}

/// Feeds `stream` to a decoder `piece` bytes at a time.
fn decode(
    stream: &[u8],
    piece: usize,
) -> Result<Vec<Vec<u8>>, fjord_net::carrier::framing::FramingError> {
    let mut decoder = FrameDecoder::new(0);
    let mut frames = Vec::new();
    for mut chunk in stream.chunks(piece) {
        while !chunk.is_empty() {
            let space = decoder.space();
            if space.is_empty() {
                break;
            }
            let count = space.len().min(chunk.len());
            space[..count].copy_from_slice(&chunk[..count]);
            decoder.filled(count);
            chunk = &chunk[count..];
            while let Some(frame) = decoder.next_frame()? {
                frames.push(frame.to_vec());
            }
        }
    }
    Ok(frames)
}

/// The fake-TCP carrier's segment parser on arbitrary packets (anyone can
/// send TCP to the fallback port). Input: a packet as a raw IPv4 socket
/// receives it. Whatever parses must hold together (its payload inside the
/// packet); and a header written from the input's first bytes must parse
/// back to itself.
pub fn fake_tcp_segment(data: &[u8]) {
    if let Ok(segment) = parse_ipv4(data) {
        assert!(segment.payload.len() <= data.len());
    }
    let Some((fields, payload)) = data.split_first_chunk::<13>() else {
        return;
    };
    let word = |at: usize| {
        u32::from_be_bytes([fields[at], fields[at + 1], fields[at + 2], fields[at + 3]])
    };
    let header = SegmentHeader {
        source_port: u16::from_be_bytes([fields[0], fields[1]]),
        destination_port: u16::from_be_bytes([fields[2], fields[3]]),
        sequence: word(4),
        acknowledgement: word(8),
        flags: fields[12],
    };
    let payload = &payload[..payload.len().min(1500)];
    let source = std::net::Ipv4Addr::new(198, 18, 0, 1);
    let destination = std::net::Ipv4Addr::new(198, 18, 0, 2);
    let mut tcp = [0u8; 20];
    let len = write_header(&mut tcp, &header, &[], payload, source, destination)
        .expect("room for a header without options");
    let total = 20 + len + payload.len();
    let mut packet = vec![
        0x45,
        0,
        (total >> 8) as u8,
        total as u8,
        0,
        0,
        0x40,
        0,
        64,
        6,
        0,
        0,
    ];
    packet.extend_from_slice(&source.octets());
    packet.extend_from_slice(&destination.octets());
    packet.extend_from_slice(&tcp[..len]);
    packet.extend_from_slice(payload);
    let parsed = parse_ipv4(&packet).expect("a segment we wrote parses");
    assert_eq!(parsed.header, header);
    assert_eq!(parsed.payload, payload);
}

/// One TUN read placed into slots (`tun::read`): the kernel writes these
/// bytes, but no read may panic whatever they hold. Input: one byte
/// choosing the slot size, then the read (virtio-net header and packet),
/// scattered over the first slot and the scratch behind it as `readv`
/// would. Every packet placed must fit its slot.
pub fn tun_read(data: &[u8]) {
    let Some((&size, read)) = data.split_first() else {
        return;
    };
    if read.len() > MAX_SUPER_PACKET {
        return;
    }
    let stride = 32 + usize::from(size) * 8;
    let offset = 16;
    let mut area = vec![0u8; stride * IDEAL_BATCH_SIZE];
    let mut scratch = vec![0u8; MAX_SUPER_PACKET];
    let mut sizes = [0usize; IDEAL_BATCH_SIZE];
    let recv = |buffers: &mut [IoSliceMut<'_>]| {
        let mut rest = read;
        for buffer in buffers.iter_mut() {
            let take = rest.len().min(buffer.len());
            buffer[..take].copy_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        Ok(read.len() - rest.len())
    };
    let slots = Slots {
        area: &mut area,
        stride,
        offset,
    };
    if let Ok(count) = read_offloaded(recv, &mut scratch, slots, &mut sizes) {
        assert!(
            count <= IDEAL_BATCH_SIZE,
            "a super-packet without payload places none"
        );
        assert!(sizes[..count].iter().all(|&size| size <= stride - offset));
    }
}
