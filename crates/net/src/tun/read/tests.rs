use super::*;

const OFFSET: usize = 16;
const STRIDE: usize = 256;

fn virtio_header(
    flags: u8,
    gso_type: u8,
    gso_size: u16,
    csum_start: u16,
    csum_offset: u16,
) -> Vec<u8> {
    let mut header = vec![flags, gso_type];
    for field in [0u16, gso_size, csum_start, csum_offset] {
        header.extend_from_slice(&field.to_ne_bytes());
    }
    header
}

/// An IPv4 packet from 198.19.0.1 to 198.19.0.2 with `transport` after
/// its header.
fn ipv4(protocol: u8, transport: &[u8]) -> Vec<u8> {
    let total = 20 + transport.len();
    let mut packet = vec![
        0x45, 0, 0, 0, 0, 7, 0x40, 0, 64, protocol, 0, 0, 198, 19, 0, 1, 198, 19, 0, 2,
    ];
    packet[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    packet.extend_from_slice(transport);
    packet
}

/// The folded sum of the IPv4 pseudo-header of `packet` for its transport.
fn pseudo_sum(packet: &[u8]) -> u16 {
    let transport_len = packet.len() - 20;
    checksum(&packet[12..20], u64::from(packet[9]) + transport_len as u64)
}

fn transport_checksum_holds(packet: &[u8]) -> bool {
    checksum(&packet[20..], u64::from(pseudo_sum(packet))) == 0xffff
}

/// A `readv` that returns `bytes`, scattered over the buffers it is given.
fn recv_of(bytes: Vec<u8>) -> impl FnOnce(&mut [IoSliceMut<'_>]) -> io::Result<usize> {
    move |buffers| {
        let mut rest = &bytes[..];
        for buffer in buffers.iter_mut() {
            let take = rest.len().min(buffer.len());
            buffer[..take].copy_from_slice(&rest[..take]);
            rest = &rest[take..];
        }
        assert!(
            rest.is_empty(),
            "the test's read is larger than the buffers"
        );
        Ok(bytes.len())
    }
}

fn read(
    bytes: Vec<u8>,
    area: &mut [u8],
    offset: usize,
    scratch: &mut [u8],
) -> (Result<usize, TunReadError>, [usize; 8]) {
    let mut sizes = [0; 8];
    let slots = Slots {
        area,
        stride: STRIDE,
        offset,
    };
    (
        read_offloaded(recv_of(bytes), scratch, slots, &mut sizes),
        sizes,
    )
}

/// The read of `bytes` fails as an I/O error: refused, the worker goes on.
fn is_refused(bytes: Vec<u8>) -> bool {
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; 4096];
    matches!(
        read(bytes, &mut area, OFFSET, &mut scratch).0,
        Err(TunReadError::Io(_))
    )
}

#[test]
fn a_lone_packet_lands_in_its_slot_without_touching_scratch() {
    let packet = ipv4(1, &[8, 0, 0, 0, 1, 2, 3, 4]);
    let mut bytes = virtio_header(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0);
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0xeeu8; 4096];
    let (count, sizes) = read(bytes, &mut area, OFFSET, &mut scratch);
    assert_eq!(count.expect("a packet"), 1);
    assert_eq!(sizes[0], packet.len());
    assert_eq!(&area[OFFSET..OFFSET + packet.len()], &packet[..]);
    assert!(
        scratch.iter().all(|&byte| byte == 0xee),
        "the packet was read into scratch"
    );
}

#[test]
fn a_lone_packet_gets_the_checksum_the_kernel_left_to_us() {
    let mut udp = vec![0x30, 0x39, 0x00, 0x35, 0, 20, 0, 0];
    udp.extend_from_slice(b"twelve bytes");
    let mut packet = ipv4(17, &udp);
    // CHECKSUM_PARTIAL: the field holds the pseudo-header sum.
    let pseudo = pseudo_sum(&packet);
    packet[26..28].copy_from_slice(&pseudo.to_be_bytes());
    let mut bytes = virtio_header(
        VIRTIO_NET_HDR_F_NEEDS_CSUM,
        VIRTIO_NET_HDR_GSO_NONE,
        0,
        20,
        6,
    );
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; 4096];
    let (count, sizes) = read(bytes, &mut area, OFFSET, &mut scratch);
    assert_eq!(count.expect("a packet"), 1);
    assert!(transport_checksum_holds(&area[OFFSET..OFFSET + sizes[0]]));
}

#[test]
fn a_super_packet_is_cut_into_one_slot_a_segment() {
    // 20-byte TCP header (ACK|PSH, sequence 1000), 3 segments of 100 bytes.
    let mut tcp = vec![
        0x30, 0x39, 0x01, 0xbb, 0, 0, 0x03, 0xe8, 0, 0, 0, 1, 0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0,
    ];
    tcp.extend((0..300).map(|i| i as u8));
    let packet = ipv4(6, &tcp);
    let mut bytes = virtio_header(
        VIRTIO_NET_HDR_F_NEEDS_CSUM,
        VIRTIO_NET_HDR_GSO_TCPV4,
        100,
        20,
        16,
    );
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; 4096];
    let (count, sizes) = read(bytes, &mut area, OFFSET, &mut scratch);
    assert_eq!(count.expect("segments"), 3);
    for (index, slot) in area.chunks_exact(STRIDE).take(3).enumerate() {
        assert_eq!(sizes[index], 140);
        let segment = &slot[OFFSET..OFFSET + 140];
        assert_eq!(
            u16::from_be_bytes([segment[2], segment[3]]),
            140,
            "IPv4 total length"
        );
        let sequence = u32::from_be_bytes(segment[24..28].try_into().expect("4 bytes"));
        assert_eq!(sequence, 1000 + 100 * index as u32);
        assert_eq!(segment[40], (100 * index) as u8, "payload in order");
        assert!(
            transport_checksum_holds(segment),
            "segment {index}'s TCP checksum"
        );
    }
}

#[test]
fn a_lone_packet_longer_than_a_slot_is_reported_with_its_length() {
    let packet = ipv4(17, &[0u8; 400]);
    let mut bytes = virtio_header(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0);
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; 4096];
    match read(bytes, &mut area, OFFSET, &mut scratch).0 {
        Err(TunReadError::PacketTooLong { len, room }) => {
            assert_eq!((len, room), (420, STRIDE - OFFSET));
        }
        other => panic!("expected PacketTooLong, got {other:?}"),
    }
}

#[test]
fn without_headroom_for_the_header_a_read_goes_through_scratch() {
    let packet = ipv4(1, &[8, 0, 0, 0, 9, 9]);
    let mut bytes = virtio_header(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0);
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; 4096];
    let (count, sizes) = read(bytes, &mut area, 4, &mut scratch);
    assert_eq!(count.expect("a packet"), 1);
    assert_eq!(&area[4..4 + sizes[0]], &packet[..]);
}

#[test]
fn a_read_no_longer_than_its_header_is_refused() {
    let bytes = virtio_header(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0);
    assert!(is_refused(bytes));
}

#[test]
fn a_checksum_field_beyond_the_packet_is_refused_not_a_panic() {
    let packet = ipv4(17, &[0u8; 8]);
    let mut bytes = virtio_header(
        VIRTIO_NET_HDR_F_NEEDS_CSUM,
        VIRTIO_NET_HDR_GSO_NONE,
        0,
        20,
        600,
    );
    bytes.extend_from_slice(&packet);
    assert!(is_refused(bytes));
}

/// The 64 KiB slots the outbound pipeline falls back to when the MTU grew
/// unseen are larger than its scratch buffer: the read must still happen
/// (it once failed before its system call, and the worker spun forever).
#[test]
fn a_slot_larger_than_scratch_still_reads() {
    let packet = ipv4(17, &[0u8; 8]);
    let mut bytes = virtio_header(0, VIRTIO_NET_HDR_GSO_NONE, 0, 0, 0);
    bytes.extend_from_slice(&packet);
    let mut area = vec![0u8; STRIDE * 8];
    let mut scratch = vec![0u8; STRIDE / 2];
    let called = std::cell::Cell::new(false);
    let recv = |buffers: &mut [IoSliceMut<'_>]| {
        called.set(true);
        recv_of(bytes)(buffers)
    };
    let mut sizes = [0; 8];
    let slots = Slots {
        area: &mut area,
        stride: STRIDE,
        offset: OFFSET,
    };
    let count = read_offloaded(recv, &mut scratch, slots, &mut sizes);
    assert!(called.get(), "no read was made");
    assert_eq!(count.expect("a packet"), 1);
    assert_eq!(&area[OFFSET..OFFSET + sizes[0]], &packet[..]);
}
