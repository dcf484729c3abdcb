//! Per-packet compression of transport data between two fjord nodes:
//! optional, off by default, negotiated per session, LZ4 (block format,
//! `lz4_flex`).
//!
//! # When a packet is compressed
//!
//! A side compresses toward a peer only in a session where both offered
//! LZ4 ([`crate::negotiation`]: the `compression` byte of the session
//! offer), so a plain WireGuard peer, which never offers, never receives
//! a compressed packet. Only IP packets are candidates (their first byte
//! carries IP version 4 or 6): keepalives, session offers and the mesh's
//! extension messages always travel as they are. A candidate goes raw,
//! cheaply, when
//!
//! - it is shorter than [`MIN_COMPRESSIBLE_LEN`] (TCP acknowledgements,
//!   most of a reverse path's packets: nothing to gain);
//! - a byte histogram of its last [`ENTROPY_SAMPLE_LEN`] bytes (past the
//!   headers, into the payload) estimates more than
//!   [`MAX_ENTROPY_BITS_PER_BYTE`] bits of entropy per byte: encrypted or
//!   already-compressed payloads (TLS, most traffic) are skipped for the
//!   price of the histogram instead of a failed compression;
//! - or the compressed form would not make the sealed datagram shorter:
//!   WireGuard pads plaintexts to 16 bytes, so the comparison is between
//!   padded lengths, and a gain lost in padding is no gain.
//!
//! # Wire layout
//!
//! The plaintext of a transport data message, inside the AEAD like any
//! other:
//!
//! ```text
//! 0x21 | original length u16 BE | block length u16 BE | LZ4 block | zero padding
//! ```
//!
//! The first byte's high nibble (2) is no IP version and differs from the
//! extension marker's (`0x1f`), so a receiver tells the three kinds of
//! plaintext apart by one byte; its low nibble names the codec (1 = LZ4
//! block), leaving room for another. The original length bounds the
//! output before anything is decompressed; the block length separates
//! the block from WireGuard's padding, which an LZ4 decoder would
//! otherwise read as more input.
//!
//! # Receiving
//!
//! Decompression runs only after the AEAD authenticated the packet, only
//! in a session where we offered LZ4 (otherwise the packet is dropped as
//! [`crate::DropReason::CompressionNotNegotiated`]), and into the
//! caller's buffer, bounded by the tunnel MTU. A packet whose original
//! length exceeds the MTU or the buffer, whose block is malformed, or
//! that decompresses to any other length than it claims, is dropped as
//! [`crate::DropReason::DecompressionFailed`]; nothing here can panic on
//! input (the decoder is `lz4_flex`'s safe, checked one, and the
//! `wire_parse` fuzz target feeds it arbitrary bytes). Only the
//! authenticated peer can send such a packet, so a failure means a bug
//! or a misbehaving peer, never an outsider.
//!
//! # Memory
//!
//! Nothing is allocated per packet: a [`Compressor`] keeps the LZ4 hash
//! table and its output scratch (sized once for the largest packet it has
//! seen, the MTU in steady state), and decompression writes into a buffer
//! the driver owns and reuses.
//!
//! # Why it is off by default
//!
//! Compression makes a packet's length depend on its content. Where an
//! attacker can put chosen bytes into the same packet as a secret (a
//! script in a browser sending requests that carry a cookie), the length
//! of the encrypted packet tells whether the guess matched part of the
//! secret, and the secret falls a byte at a time: CRIME and BREACH did
//! this to TLS and HTTP compression, VORACLE to OpenVPN's. Per-packet
//! compression is no exception, so it is for links where the traffic is
//! known not to mix secrets with attacker-controlled data.

use lz4_flex::block::{CompressTable, compress_into_with_table, get_maximum_output_size};

use crate::wire::padded_len;

/// First plaintext byte of an LZ4-compressed IP packet.
pub const COMPRESSED_LZ4_MARKER: u8 = 0x21;
/// Marker, original length and block length.
pub const COMPRESSED_HEADER_LEN: usize = 5;
/// Shorter packets always go raw.
pub const MIN_COMPRESSIBLE_LEN: usize = 128;
/// How many of a packet's last bytes the entropy estimate reads.
pub const ENTROPY_SAMPLE_LEN: usize = 256;
/// Above this estimate a packet goes raw without trying. Text, JSON and
/// logs sample at 4.5–5.5 bits per byte, random or compressed data at
/// about 7.1 (a 256-byte sample of uniform bytes cannot show the full 8).
pub const MAX_ENTROPY_BITS_PER_BYTE: f32 = 6.0;

/// Whether this node offers to compress its data to fjord peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionPolicy {
    /// Never: no offer of compression, and compressed packets are
    /// refused. The default; see the module documentation for why.
    #[default]
    Off,
    /// LZ4, in every session whose peer offers it too.
    Lz4,
}

impl CompressionPolicy {
    pub(crate) fn offers_lz4(self) -> bool {
        self == Self::Lz4
    }
}

/// Why a compressed plaintext was not decompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("not a compressed packet")]
    NotCompressed,
    #[error("compressed packet shorter than its header or its stated block")]
    Truncated,
    #[error("original length {original} exceeds the limit of {limit} bytes")]
    TooLong { original: usize, limit: usize },
    #[error("malformed LZ4 block")]
    Malformed,
    #[error("block decompressed to {actual} bytes, not the {original} it claims")]
    WrongLength { original: usize, actual: usize },
}

/// What became of one outgoing packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compressed {
    /// Compressed in place; the plaintext is now this long.
    Yes(usize),
    /// An IP packet left raw: too short, too random, or no shorter when
    /// compressed.
    Raw,
    /// Not an IP packet (a keepalive, an offer, an extension message):
    /// never compressed.
    NotData,
}

/// What compressing one outgoing packet needs, kept between packets.
pub struct Compressor {
    table: CompressTable,
    /// LZ4's output, copied back over the packet when it pays: the
    /// encoder needs room for its worst case, more than the packet.
    scratch: Vec<u8>,
}

impl Default for Compressor {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor")
            .field("scratch_bytes", &self.scratch.len())
            .finish_non_exhaustive()
    }
}

impl Compressor {
    pub fn new() -> Self {
        Self {
            table: CompressTable::small(),
            scratch: Vec::new(),
        }
    }

    /// Compresses the IP packet `packet[..len]` in place when that makes
    /// its datagram (padded for a tunnel of `mtu` bytes) shorter; anything
    /// else leaves the packet untouched, to be sent as it is.
    pub fn compress_in_place(&mut self, packet: &mut [u8], len: usize, mtu: usize) -> Compressed {
        let Some(input) = packet.get(..len) else {
            return Compressed::NotData;
        };
        if !matches!(input.first().map(|byte| byte >> 4), Some(4 | 6)) {
            return Compressed::NotData;
        }
        match self.compress_ip_packet(packet, len, mtu) {
            Some(compressed_len) => Compressed::Yes(compressed_len),
            None => Compressed::Raw,
        }
    }

    fn compress_ip_packet(&mut self, packet: &mut [u8], len: usize, mtu: usize) -> Option<usize> {
        let input = packet.get(..len)?;
        if len < MIN_COMPRESSIBLE_LEN || len > usize::from(u16::MAX) {
            return None;
        }
        let sample = &input[len.saturating_sub(ENTROPY_SAMPLE_LEN)..];
        if entropy_bits_per_byte(sample) > MAX_ENTROPY_BITS_PER_BYTE {
            return None;
        }
        let room = get_maximum_output_size(len);
        if self.scratch.len() < room {
            // Once per larger packet than any before: the MTU's worst case
            // in steady state.
            self.scratch.resize(room, 0);
        }
        let block_len =
            compress_into_with_table(input, &mut self.scratch[..room], &mut self.table).ok()?;
        let compressed_len = COMPRESSED_HEADER_LEN + block_len;
        if padded_len(compressed_len, mtu) >= padded_len(len, mtu) {
            return None;
        }
        // Both lengths fit 16 bits: `len` was checked, and the block is
        // shorter than it.
        let original = u16::try_from(len).ok()?.to_be_bytes();
        let block = u16::try_from(block_len).ok()?.to_be_bytes();
        packet[..COMPRESSED_HEADER_LEN].copy_from_slice(&[
            COMPRESSED_LZ4_MARKER,
            original[0],
            original[1],
            block[0],
            block[1],
        ]);
        packet[COMPRESSED_HEADER_LEN..compressed_len].copy_from_slice(&self.scratch[..block_len]);
        Some(compressed_len)
    }
}

/// Whether an authenticated plaintext is a compressed packet.
pub fn is_compressed(plaintext: &[u8]) -> bool {
    plaintext.first() == Some(&COMPRESSED_LZ4_MARKER)
}

/// Decompresses the compressed packet at the start of `plaintext`
/// (WireGuard's padding may follow) into `out`, allowing at most `limit`
/// bytes (the tunnel MTU), and returns the packet's length. Never panics.
pub fn decompress(
    plaintext: &[u8],
    out: &mut [u8],
    limit: usize,
) -> Result<usize, DecompressError> {
    let Some(&[marker, original_high, original_low, block_high, block_low]) =
        plaintext.first_chunk::<COMPRESSED_HEADER_LEN>()
    else {
        return Err(DecompressError::Truncated);
    };
    if marker != COMPRESSED_LZ4_MARKER {
        return Err(DecompressError::NotCompressed);
    }
    let original = usize::from(u16::from_be_bytes([original_high, original_low]));
    let block_len = usize::from(u16::from_be_bytes([block_high, block_low]));
    let block = plaintext
        .get(COMPRESSED_HEADER_LEN..COMPRESSED_HEADER_LEN + block_len)
        .ok_or(DecompressError::Truncated)?;
    let limit = limit.min(out.len());
    if original > limit {
        return Err(DecompressError::TooLong { original, limit });
    }
    let actual = lz4_flex::block::decompress_into(block, &mut out[..original])
        .map_err(|_| DecompressError::Malformed)?;
    if actual != original {
        return Err(DecompressError::WrongLength { original, actual });
    }
    Ok(original)
}

/// Shannon entropy of the bytes of `sample`, in bits per byte: a cheap
/// guess at whether LZ4 could find anything to shorten.
fn entropy_bits_per_byte(sample: &[u8]) -> f32 {
    if sample.is_empty() {
        return 0.0;
    }
    let mut counts = [0u16; 256];
    for &byte in sample {
        counts[usize::from(byte)] += 1;
    }
    let total = sample.len() as f32;
    // H = log2(n) - Σ c·log2(c) / n; a count of 1 adds nothing to the sum.
    let weighted: f32 = counts
        .iter()
        .filter(|&&count| count > 1)
        .map(|&count| {
            let count = f32::from(count);
            count * count.log2()
        })
        .sum();
    total.log2() - weighted / total
}

/// Packet bodies for tests here and in `crate::tests`.
#[cfg(test)]
pub(crate) mod test_data {
    /// Log lines: what compression is for.
    pub fn log_lines(bytes: usize) -> Vec<u8> {
        let mut text = String::new();
        let mut n = 7u64;
        while text.len() < bytes {
            n = n
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            text.push_str(&format!(
                "2026-11-26T00:{:02}:{:02} INFO worker: request {} completed in {} ms\n",
                (n >> 8) % 60,
                (n >> 16) % 60,
                (n >> 24) % 10_000,
                (n >> 40) % 500
            ));
        }
        text.truncate(bytes);
        text.into_bytes()
    }

    /// Bytes nothing can compress (a stand-in for TLS records).
    pub fn random_bytes(bytes: usize, seed: u64) -> Vec<u8> {
        let mut state = seed | 1;
        (0..bytes)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::test_data::{log_lines, random_bytes};
    use super::*;

    const MTU: usize = 1420;

    /// An IPv4 packet (20-byte header, no options) around `body`.
    fn ipv4(body: &[u8]) -> Vec<u8> {
        let mut packet = vec![0u8; 20];
        packet[0] = 0x45;
        packet[2..4].copy_from_slice(&u16::try_from(20 + body.len()).unwrap().to_be_bytes());
        packet.extend_from_slice(body);
        packet
    }

    /// `packet`, compressed: the buffer and the compressed length.
    fn compressed(packet: &[u8]) -> (Vec<u8>, usize) {
        let mut buf = packet.to_vec();
        match Compressor::new().compress_in_place(&mut buf, packet.len(), MTU) {
            Compressed::Yes(len) => (buf, len),
            other => panic!("not compressed: {other:?}"),
        }
    }

    #[test]
    fn text_compresses_and_round_trips() {
        let packet = ipv4(&log_lines(1380));
        let (mut buf, len) = compressed(&packet);
        assert!(len < packet.len() * 2 / 3, "{len} of {}", packet.len());
        assert!(is_compressed(&buf[..len]));
        // WireGuard's padding behind the block changes nothing.
        buf[len..].fill(0);
        let mut out = vec![0u8; MTU];
        let original = decompress(&buf, &mut out, MTU).unwrap();
        assert_eq!(&out[..original], &packet[..]);
    }

    #[test]
    fn random_data_short_packets_and_non_ip_go_raw_untouched() {
        let mut compressor = Compressor::new();
        let cases = [
            (ipv4(&random_bytes(1380, 3)), Compressed::Raw),
            (ipv4(&log_lines(60)), Compressed::Raw),
            // A fjord extension message and a session offer start with
            // 0x1f: never compressed, however compressible.
            (
                {
                    let mut extension = vec![0u8; 600];
                    extension[0] = 0x1f;
                    extension
                },
                Compressed::NotData,
            ),
            (Vec::new(), Compressed::NotData),
        ];
        for (packet, expected) in cases {
            let mut buf = packet.clone();
            assert_eq!(
                compressor.compress_in_place(&mut buf, packet.len(), MTU),
                expected
            );
            assert_eq!(buf, packet);
        }
    }

    #[test]
    fn a_gain_that_padding_would_eat_is_no_gain() {
        // Whatever the length, a packet is compressed only when its padded
        // length shrinks, and otherwise left exactly as it was.
        let mut compressor = Compressor::new();
        for len in MIN_COMPRESSIBLE_LEN..400 {
            let mut packet = ipv4(&log_lines(len - 20));
            let original = packet.clone();
            if let Compressed::Yes(compressed) = compressor.compress_in_place(&mut packet, len, MTU)
            {
                assert!(padded_len(compressed, MTU) < padded_len(len, MTU));
                let mut out = vec![0u8; MTU];
                assert_eq!(decompress(&packet, &mut out, MTU), Ok(len));
                assert_eq!(out[..len], original[..]);
            } else {
                assert_eq!(packet, original);
            }
        }
    }

    #[test]
    fn the_entropy_estimate_tells_text_from_noise() {
        let text = entropy_bits_per_byte(&log_lines(256));
        let noise = entropy_bits_per_byte(&random_bytes(256, 9));
        assert!(text < 5.5, "text {text}");
        assert!(noise > 6.8, "noise {noise}");
        assert_eq!(entropy_bits_per_byte(&[7; 256]), 0.0);
        assert_eq!(entropy_bits_per_byte(&[]), 0.0);
    }

    #[test]
    fn malformed_or_oversized_packets_are_refused() {
        let packet = ipv4(&log_lines(1380));
        let (buf, len) = compressed(&packet);
        let compressed = &buf[..len];
        let mut out = vec![0u8; MTU];
        // Over the limit the caller gives, or the buffer.
        assert_eq!(
            decompress(compressed, &mut out, 1000),
            Err(DecompressError::TooLong {
                original: packet.len(),
                limit: 1000
            })
        );
        assert!(matches!(
            decompress(compressed, &mut out[..900], MTU),
            Err(DecompressError::TooLong { .. })
        ));
        // Truncated header and block.
        assert_eq!(
            decompress(&compressed[..4], &mut out, MTU),
            Err(DecompressError::Truncated)
        );
        assert_eq!(
            decompress(&compressed[..len - 1], &mut out, MTU),
            Err(DecompressError::Truncated)
        );
        // A claimed length that differs from what the block holds.
        let mut lying = compressed.to_vec();
        lying[2] = lying[2].wrapping_sub(1);
        assert!(decompress(&lying, &mut out, MTU).is_err());
        // Not compressed at all.
        assert_eq!(
            decompress(&packet, &mut out, MTU),
            Err(DecompressError::NotCompressed)
        );
        // A block of garbage: an error, never a panic.
        let mut garbage = vec![COMPRESSED_LZ4_MARKER, 5, 0, 0, 200];
        garbage.extend(random_bytes(200, 5));
        assert!(decompress(&garbage, &mut out, MTU).is_err());
    }
}
