//! TCP segments as the fake-TCP carrier writes and reads them: a plain
//! 20-byte TCP header (SYNs add MSS and window-scale options, as any
//! client's would), the checksum over the IPv4 pseudo-header, and a checked
//! view of received IPv4 packets that never panics on any input (fuzzed:
//! `fuzz/fuzz_targets/fake_tcp_segment.rs`).
//!
//! ```text
//! IPv4 header (the kernel's on send; parsed here on receive)
//! TCP header: source port, destination port (u16 each), sequence,
//!             acknowledgement (u32 each), data offset (4 bits), flags,
//!             window, checksum, urgent pointer (u16 each), options
//! payload:    one WireGuard datagram, or nothing (handshake, reset)
//! ```

use std::net::Ipv4Addr;

/// Bytes of a TCP header without options.
pub const TCP_HEADER_LEN: usize = 20;
/// Bytes of an IPv4 header without options.
pub const IPV4_HEADER_LEN: usize = 20;
/// What a SYN (and SYN-ACK) carries: maximum segment size 1460 (as an
/// Ethernet host announces), a no-op, and window scale 14, so the window
/// of 65,535 we always advertise stands for 1 GiB and a firewall that
/// tracks windows never finds our sequence numbers out of it.
pub const SYN_OPTIONS: [u8; 8] = [2, 4, 0x05, 0xb4, 1, 3, 3, 14];
/// The window every segment advertises (scaled by 2^14, see [`SYN_OPTIONS`]).
pub const WINDOW: u16 = u16::MAX;

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const PSH: u8 = 0x08;
pub const ACK: u8 = 0x10;

const PROTOCOL_TCP: u8 = 6;

/// The fields of a TCP header the carrier uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    pub source_port: u16,
    pub destination_port: u16,
    pub sequence: u32,
    pub acknowledgement: u32,
    pub flags: u8,
}

/// Writes a TCP header for `header` with `options` (a multiple of 4 bytes,
/// at most 40) into `out` and returns its length; the checksum covers the
/// header and `payload`, for a packet from `source` to `destination`.
/// `None` if `out` is too short or the options malformed.
pub fn write_header(
    out: &mut [u8],
    header: &SegmentHeader,
    options: &[u8],
    payload: &[u8],
    source: Ipv4Addr,
    destination: Ipv4Addr,
) -> Option<usize> {
    if !options.len().is_multiple_of(4) || options.len() > 40 {
        return None;
    }
    let len = TCP_HEADER_LEN + options.len();
    let out = out.get_mut(..len)?;
    out[0..2].copy_from_slice(&header.source_port.to_be_bytes());
    out[2..4].copy_from_slice(&header.destination_port.to_be_bytes());
    out[4..8].copy_from_slice(&header.sequence.to_be_bytes());
    out[8..12].copy_from_slice(&header.acknowledgement.to_be_bytes());
    out[12] = ((len / 4) as u8) << 4;
    out[13] = header.flags;
    out[14..16].copy_from_slice(&WINDOW.to_be_bytes());
    out[16..20].fill(0);
    out[TCP_HEADER_LEN..].copy_from_slice(options);
    let segment_len = u16::try_from(len + payload.len()).ok()?;
    let sum = pseudo_header_sum(source, destination, segment_len);
    let sum = add(add(sum, out), payload);
    out[16..18].copy_from_slice(&fold(sum).to_be_bytes());
    Some(len)
}

/// A received IPv4 packet holding one TCP segment, checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceivedSegment<'a> {
    pub source: Ipv4Addr,
    pub destination: Ipv4Addr,
    pub header: SegmentHeader,
    pub payload: &'a [u8],
}

/// Why a received packet was not taken as a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentError {
    /// Not an unfragmented IPv4 packet carrying TCP, or cut short.
    Malformed,
    /// The TCP checksum does not match (the kernel hands raw sockets
    /// segments before checking it).
    BadChecksum,
}

/// Reads `packet` (an IPv4 packet, as a raw IPv4 socket receives it).
pub fn parse_ipv4(packet: &[u8]) -> Result<ReceivedSegment<'_>, SegmentError> {
    let malformed = SegmentError::Malformed;
    let first = *packet.first().ok_or(malformed)?;
    let header_len = usize::from(first & 0x0f) * 4;
    if first >> 4 != 4 || header_len < IPV4_HEADER_LEN {
        return Err(malformed);
    }
    let ip = packet.get(..header_len).ok_or(malformed)?;
    let total_len = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
    let fragment = u16::from_be_bytes([ip[6], ip[7]]);
    // More fragments, or an offset: not a whole segment.
    if ip[9] != PROTOCOL_TCP || fragment & 0x3fff != 0 || total_len < header_len {
        return Err(malformed);
    }
    let segment = packet.get(header_len..total_len).ok_or(malformed)?;
    let source = Ipv4Addr::new(ip[12], ip[13], ip[14], ip[15]);
    let destination = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let tcp = segment.get(..TCP_HEADER_LEN).ok_or(malformed)?;
    let data_offset = usize::from(tcp[12] >> 4) * 4;
    if data_offset < TCP_HEADER_LEN {
        return Err(malformed);
    }
    let payload = segment.get(data_offset..).ok_or(malformed)?;
    let segment_len = u16::try_from(segment.len()).map_err(|_| malformed)?;
    if fold(add(
        pseudo_header_sum(source, destination, segment_len),
        segment,
    )) != 0
    {
        return Err(SegmentError::BadChecksum);
    }
    let word = |at: usize| u32::from_be_bytes([tcp[at], tcp[at + 1], tcp[at + 2], tcp[at + 3]]);
    Ok(ReceivedSegment {
        source,
        destination,
        header: SegmentHeader {
            source_port: u16::from_be_bytes([tcp[0], tcp[1]]),
            destination_port: u16::from_be_bytes([tcp[2], tcp[3]]),
            sequence: word(4),
            acknowledgement: word(8),
            flags: tcp[13],
        },
        payload,
    })
}

fn pseudo_header_sum(source: Ipv4Addr, destination: Ipv4Addr, segment_len: u16) -> u32 {
    let mut pseudo = [0u8; 12];
    pseudo[0..4].copy_from_slice(&source.octets());
    pseudo[4..8].copy_from_slice(&destination.octets());
    pseudo[9] = PROTOCOL_TCP;
    pseudo[10..12].copy_from_slice(&segment_len.to_be_bytes());
    add(0, &pseudo)
}

/// Adds `bytes` as big-endian 16-bit words (odd length padded with zero)
/// to a one's-complement running sum.
fn add(mut sum: u32, bytes: &[u8]) -> u32 {
    let mut words = bytes.chunks_exact(2);
    for word in &mut words {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([word[0], word[1]])));
        // Fold early so the sum never overflows, whatever the length.
        if sum > 0xffff_0000 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
    }
    if let [last] = words.remainder() {
        sum = sum.wrapping_add(u32::from(*last) << 8);
    }
    sum
}

/// The one's-complement checksum of a running sum.
fn fold(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4 packet around a segment written by [`write_header`].
    fn packet(header: &SegmentHeader, options: &[u8], payload: &[u8]) -> Vec<u8> {
        let source = Ipv4Addr::new(198, 18, 0, 1);
        let destination = Ipv4Addr::new(198, 18, 0, 2);
        let mut tcp = [0u8; 60];
        let len = write_header(&mut tcp, header, options, payload, source, destination).unwrap();
        let total = IPV4_HEADER_LEN + len + payload.len();
        let mut ip = vec![0u8; IPV4_HEADER_LEN];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        ip[6] = 0x40; // Don't Fragment
        ip[8] = 64;
        ip[9] = PROTOCOL_TCP;
        ip[12..16].copy_from_slice(&source.octets());
        ip[16..20].copy_from_slice(&destination.octets());
        ip.extend_from_slice(&tcp[..len]);
        ip.extend_from_slice(payload);
        ip
    }

    fn data_header() -> SegmentHeader {
        SegmentHeader {
            source_port: 40_000,
            destination_port: 443,
            sequence: 0xfedc_ba98,
            acknowledgement: 7,
            flags: PSH | ACK,
        }
    }

    #[test]
    fn segments_read_back_as_written() {
        for payload in [&b""[..], b"odd", &[0xffu8; 1452]] {
            let bytes = packet(&data_header(), &[], payload);
            let segment = parse_ipv4(&bytes).unwrap();
            assert_eq!(segment.header, data_header());
            assert_eq!(segment.payload, payload);
            assert_eq!(segment.source, Ipv4Addr::new(198, 18, 0, 1));
        }
        let syn = SegmentHeader {
            flags: SYN,
            ..data_header()
        };
        let bytes = packet(&syn, &SYN_OPTIONS, b"");
        let segment = parse_ipv4(&bytes).unwrap();
        assert_eq!(segment.header.flags, SYN);
        assert!(segment.payload.is_empty());
    }

    /// The checksum is the one a real stack computes: checked against a
    /// segment captured from Linux (a SYN from 10.0.0.1:52000 to
    /// 10.0.0.2:443).
    #[test]
    fn checksum_matches_a_real_stack() {
        let header = SegmentHeader {
            source_port: 52_000,
            destination_port: 443,
            sequence: 1,
            acknowledgement: 0,
            flags: SYN,
        };
        let mut tcp = [0u8; 20];
        write_header(
            &mut tcp,
            &header,
            &[],
            b"",
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
        )
        .unwrap();
        // Recomputed by hand: the pseudo-header and header words summed.
        let words: [u32; 16] = [
            0x0a00, 0x0001, 0x0a00, 0x0002, 0x0006, 0x0014, 52_000, 443, 0x0000, 0x0001, 0, 0,
            0x5002, 0xffff, 0, 0,
        ];
        let mut sum: u32 = words.iter().sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(u16::from_be_bytes([tcp[16], tcp[17]]), !(sum as u16));
    }

    #[test]
    fn damaged_or_foreign_packets_are_refused() {
        let good = packet(&data_header(), &[], b"payload");
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert_eq!(parse_ipv4(&flipped), Err(SegmentError::BadChecksum));
        let mut udp = good.clone();
        udp[9] = 17;
        assert_eq!(parse_ipv4(&udp), Err(SegmentError::Malformed));
        let mut fragment = good.clone();
        fragment[6] = 0x20; // More Fragments
        assert_eq!(parse_ipv4(&fragment), Err(SegmentError::Malformed));
        for cut in 0..good.len() {
            assert!(parse_ipv4(&good[..cut]).is_err(), "cut at {cut}");
        }
        assert_eq!(parse_ipv4(&[]), Err(SegmentError::Malformed));
    }
}
