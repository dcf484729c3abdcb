//! What the UDP generators put on the wire: frame sizes by the RFC 2544
//! Ethernet convention, and the payload header that makes each datagram
//! countable and timeable.
//!
//! ## Frame sizes
//! A frame size counts the Ethernet frame the way RFC 2544 does: the
//! 14-byte header and the 4-byte FCS included, preamble and inter-frame gap
//! not. The IP packet is `frame − 18` bytes and the UDP payload
//! `frame − 18 − 20 − 8` over IPv4 (`− 40 − 8` over IPv6): a 64-byte frame
//! carries 18 payload bytes, a 1518-byte frame 1472. Through a tunnel the
//! user's (inner) packet keeps the size it has on the bare link; the tunnel
//! adds its own overhead outside, which is what a comparison should show.
//!
//! On a real Ethernet each frame also occupies 20 bytes of line time
//! (7-byte preamble, 1-byte start delimiter, 12-byte gap), so a link of
//! `B` bit/s carries at most `B / ((frame + 20) × 8)` frames per second:
//! 148,810 frames/s for 64-byte frames at 100 Mbit/s
//! ([`ethernet_max_frame_rate`]). A veth has no line rate; the lab uses a
//! nominal speed for it (10 Gbit/s).
//!
//! ## Payload header (18 bytes, big-endian)
//! ```text
//!  0        2         4                    12                  18
//!  | magic  | stream  | sequence (u64)     | send time (u48)   | zero fill…
//! ```
//! `magic` is [`PAYLOAD_MAGIC`]; `stream` tells trials apart (0 is the
//! warm-up stream); `sequence` counts from 0 within a stream; `send time`
//! is the low 48 bits of `CLOCK_MONOTONIC` in nanoseconds when the sender
//! handed the frame's batch to the kernel. The receiver reads the same
//! clock (every namespace on a host shares it), so one-way latency is
//! `(receive − send) mod 2^48` — exact for latencies under 78 hours, with
//! no epoch to agree on. The header fills a 64-byte IPv4 frame exactly;
//! over IPv6 the smallest usable frame is 84 bytes.

/// First two payload bytes of every generator datagram.
pub const PAYLOAD_MAGIC: u16 = 0xF10D;
/// Bytes of the payload header; the smallest payload a frame can carry.
pub const PAYLOAD_HEADER_BYTES: usize = 18;
/// The stream number of warm-up frames, which no trial counts.
pub const WARMUP_STREAM: u16 = 0;

/// Ethernet header (14) and FCS (4): what a frame adds around the IP packet.
pub const ETHERNET_FRAMING_BYTES: usize = 18;
/// Just the Ethernet header: what a Linux qdisc counts on top of the IP
/// packet (it never sees the FCS).
pub const ETHERNET_HEADER_BYTES: usize = 14;
/// Preamble (7), start delimiter (1) and inter-frame gap (12): line time
/// each frame costs beyond its own bytes.
pub const ETHERNET_LINE_OVERHEAD_BYTES: usize = 20;
pub const IPV4_HEADER_BYTES: usize = 20;
pub const IPV6_HEADER_BYTES: usize = 40;
pub const UDP_HEADER_BYTES: usize = 8;
/// Smallest Ethernet frame, and the smallest the generators send over IPv4.
pub const MIN_FRAME_BYTES: usize = 64;
/// Largest frame the generators send (a 9000-byte jumbo MTU).
pub const MAX_FRAME_BYTES: usize = 9018;
/// Send times carry this many low bits of the clock.
const SEND_TIME_BITS: u32 = 48;
const SEND_TIME_MASK: u64 = (1 << SEND_TIME_BITS) - 1;

/// IP version of the path, which decides the header bytes in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpVersion {
    V4,
    V6,
}

impl IpVersion {
    pub fn of(address: &std::net::SocketAddr) -> Self {
        if address.is_ipv4() {
            Self::V4
        } else {
            Self::V6
        }
    }

    /// Ethernet framing plus IP and UDP headers: frame size minus payload.
    pub fn frame_overhead_bytes(self) -> usize {
        let ip = match self {
            Self::V4 => IPV4_HEADER_BYTES,
            Self::V6 => IPV6_HEADER_BYTES,
        };
        ETHERNET_FRAMING_BYTES + ip + UDP_HEADER_BYTES
    }

    /// Smallest frame whose payload holds the header.
    pub fn min_frame_bytes(self) -> usize {
        (self.frame_overhead_bytes() + PAYLOAD_HEADER_BYTES).max(MIN_FRAME_BYTES)
    }
}

/// UDP payload bytes of a `frame_bytes` frame, or `None` when the frame is
/// too small to hold the payload header or larger than [`MAX_FRAME_BYTES`].
pub fn udp_payload_bytes(frame_bytes: usize, ip: IpVersion) -> Option<usize> {
    if frame_bytes < ip.min_frame_bytes() || frame_bytes > MAX_FRAME_BYTES {
        return None;
    }
    Some(frame_bytes - ip.frame_overhead_bytes())
}

/// Frames per second an Ethernet link of `link_bits_per_sec` carries at
/// most with frames of `frame_bytes` (an average, for mixes):
/// `link / ((frame + 20) × 8)`.
pub fn ethernet_max_frame_rate(link_bits_per_sec: f64, frame_bytes: f64) -> f64 {
    link_bits_per_sec / ((frame_bytes + ETHERNET_LINE_OVERHEAD_BYTES as f64) * 8.0)
}

/// The frame sizes of a trial: one size, or a mix as a fixed pattern that
/// repeats (frame `n` has size `pattern[n mod len]`), so sender and
/// receiver agree on every frame's size without telling each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameSizes {
    name: String,
    pattern: Vec<usize>,
}

impl FrameSizes {
    /// Every frame `frame_bytes` long; named by the size.
    pub fn fixed(frame_bytes: usize) -> Self {
        Self {
            name: frame_bytes.to_string(),
            pattern: vec![frame_bytes],
        }
    }

    /// Frames cycle through `pattern`. An empty pattern means 64-byte frames.
    pub fn pattern(name: impl Into<String>, pattern: Vec<usize>) -> Self {
        let pattern = if pattern.is_empty() {
            vec![MIN_FRAME_BYTES]
        } else {
            pattern
        };
        Self {
            name: name.into(),
            pattern,
        }
    }

    /// The size for a fixed size, the mix's name for a mix.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The size of frame number `sequence`.
    pub fn at(&self, sequence: u64) -> usize {
        // `pattern` is never empty (both constructors ensure it).
        let index = (sequence % self.pattern.len() as u64) as usize;
        self.pattern[index]
    }

    pub fn as_slice(&self) -> &[usize] {
        &self.pattern
    }

    /// The one size, if every frame has it.
    pub fn single(&self) -> Option<usize> {
        let first = self.pattern[0];
        self.pattern
            .iter()
            .all(|&size| size == first)
            .then_some(first)
    }

    pub fn average_bytes(&self) -> f64 {
        self.pattern.iter().sum::<usize>() as f64 / self.pattern.len() as f64
    }

    pub fn min_bytes(&self) -> usize {
        self.pattern
            .iter()
            .copied()
            .min()
            .unwrap_or(MIN_FRAME_BYTES)
    }

    pub fn max_bytes(&self) -> usize {
        self.pattern
            .iter()
            .copied()
            .max()
            .unwrap_or(MIN_FRAME_BYTES)
    }

    /// Frame bytes of frames `0..count` (whole patterns and the rest).
    pub fn total_bytes(&self, count: u64) -> u64 {
        let length = self.pattern.len() as u64;
        let whole: u64 = self.pattern.iter().map(|&size| size as u64).sum();
        let rest: u64 = self.pattern[..(count % length) as usize]
            .iter()
            .map(|&size| size as u64)
            .sum();
        count / length * whole + rest
    }
}

/// The decoded payload header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PayloadHeader {
    pub stream: u16,
    pub sequence: u64,
    /// Low 48 bits of `CLOCK_MONOTONIC` nanoseconds at sending.
    pub send_time_ns: u64,
}

impl PayloadHeader {
    /// Writes the header into the first [`PAYLOAD_HEADER_BYTES`] of
    /// `payload`; false (and nothing written) if it is shorter.
    pub fn write(&self, payload: &mut [u8]) -> bool {
        let Some(header) = payload.get_mut(..PAYLOAD_HEADER_BYTES) else {
            return false;
        };
        header[0..2].copy_from_slice(&PAYLOAD_MAGIC.to_be_bytes());
        header[2..4].copy_from_slice(&self.stream.to_be_bytes());
        header[4..12].copy_from_slice(&self.sequence.to_be_bytes());
        let time = (self.send_time_ns & SEND_TIME_MASK).to_be_bytes();
        header[12..18].copy_from_slice(&time[2..8]);
        true
    }

    /// Reads a header; `None` if `payload` is too short or lacks the magic.
    pub fn parse(payload: &[u8]) -> Option<Self> {
        let header = payload.get(..PAYLOAD_HEADER_BYTES)?;
        if header[0..2] != PAYLOAD_MAGIC.to_be_bytes() {
            return None;
        }
        let mut time = [0u8; 8];
        time[2..8].copy_from_slice(&header[12..18]);
        Some(Self {
            stream: u16::from_be_bytes([header[2], header[3]]),
            sequence: u64::from_be_bytes(header[4..12].try_into().ok()?),
            send_time_ns: u64::from_be_bytes(time),
        })
    }

    /// One-way latency to `receive_time_ns` (full clock reading), modulo
    /// the 48-bit wrap.
    pub fn latency_ns(&self, receive_time_ns: u64) -> u64 {
        receive_time_ns.wrapping_sub(self.send_time_ns) & SEND_TIME_MASK
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_sizes_follow_rfc2544_framing() {
        assert_eq!(udp_payload_bytes(64, IpVersion::V4), Some(18));
        assert_eq!(udp_payload_bytes(1518, IpVersion::V4), Some(1472));
        assert_eq!(udp_payload_bytes(63, IpVersion::V4), None);
        assert_eq!(udp_payload_bytes(64, IpVersion::V6), None);
        assert_eq!(IpVersion::V6.min_frame_bytes(), 84);
        assert_eq!(udp_payload_bytes(84, IpVersion::V6), Some(18));
        assert_eq!(udp_payload_bytes(MAX_FRAME_BYTES + 1, IpVersion::V4), None);
    }

    #[test]
    fn line_rate_matches_the_textbook_figures() {
        assert_eq!(ethernet_max_frame_rate(100e6, 64.0).round(), 148_810.0);
        assert_eq!(ethernet_max_frame_rate(1e9, 1518.0).round(), 81_274.0);
        assert_eq!(ethernet_max_frame_rate(10e9, 64.0).round(), 14_880_952.0);
    }

    #[test]
    fn header_round_trips_in_a_minimum_frame() {
        let header = PayloadHeader {
            stream: 0xBEEF,
            sequence: 0x0102_0304_0506_0708,
            send_time_ns: 0xFFFF_1234_5678_9ABC,
        };
        let mut payload = [0u8; PAYLOAD_HEADER_BYTES];
        assert!(header.write(&mut payload));
        let back = PayloadHeader::parse(&payload).unwrap();
        assert_eq!(back.stream, 0xBEEF);
        assert_eq!(back.sequence, 0x0102_0304_0506_0708);
        assert_eq!(back.send_time_ns, 0x1234_5678_9ABC);
        assert!(!header.write(&mut [0u8; 17]));
        assert_eq!(PayloadHeader::parse(&payload[..17]), None);
        payload[0] ^= 1;
        assert_eq!(PayloadHeader::parse(&payload), None);
    }

    #[test]
    fn latency_survives_the_48_bit_wrap() {
        let header = PayloadHeader {
            stream: 1,
            sequence: 0,
            send_time_ns: SEND_TIME_MASK - 10,
        };
        let receive = (7u64 << 48) + 15;
        assert_eq!(header.latency_ns(receive), 26);
        let plain = PayloadHeader {
            send_time_ns: 1_000 & SEND_TIME_MASK,
            ..header
        };
        assert_eq!(plain.latency_ns((3 << 48) + 1_500), 500);
    }

    #[test]
    fn patterns_cycle_and_count_bytes() {
        let sizes = FrameSizes::pattern("t", vec![64, 570, 1518]);
        assert_eq!(sizes.at(0), 64);
        assert_eq!(sizes.at(4), 570);
        assert_eq!(sizes.total_bytes(4), 64 + 570 + 1518 + 64);
        assert_eq!(sizes.single(), None);
        assert_eq!(FrameSizes::fixed(128).single(), Some(128));
        assert!((sizes.average_bytes() - 717.333).abs() < 0.01);
    }
}
