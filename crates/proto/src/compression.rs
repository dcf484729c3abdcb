//! Per-packet compression of transport data between two fjord nodes:
//! optional, off by default, negotiated per session: LZ4 (block format,
//! `lz4_flex`), or zstd at level 1 where both sides chose it.
//!
//! # Which codec
//!
//! LZ4 is the fast one: about 2× on text in a 1,420-byte packet, for a
//! few microseconds a packet. zstd takes 2.5–5× the time and finds more in
//! the same packet (2.7× on the lab's log lines at 1,420 bytes), and far
//! more in a larger one (4.1× at 9,000 bytes, where LZ4 stays at 2.5×):
//! it is for links slow enough that the CPU waits for them, with a tunnel
//! MTU raised to let each packet hold more text. A side that chose zstd
//! offers both, and sends LZ4 to a peer that offers only LZ4.
//!
//! # When a packet is compressed
//!
//! A side compresses toward a peer only in a session where both offered
//! a codec ([`crate::negotiation`]: the `compression` byte of the session
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
//! 0x22 | original length u16 BE | block length u16 BE | zstd frame | zero padding
//! ```
//!
//! The first byte's high nibble (2) is no IP version and differs from the
//! extension marker's (`0x1f`), so a receiver tells the three kinds of
//! plaintext apart by one byte; its low nibble names the codec (1 = LZ4
//! block, 2 = zstd frame without checksum). The original length bounds the
//! output before anything is decompressed; the block length separates
//! the block from WireGuard's padding, which a decoder would otherwise
//! read as more input.
//!
//! # Receiving
//!
//! Decompression runs only after the AEAD authenticated the packet, only
//! in a session where we offered its codec (otherwise the packet is
//! dropped as [`crate::DropReason::CompressionNotNegotiated`]), and into the
//! caller's buffer, bounded by the tunnel MTU. A packet whose original
//! length exceeds the MTU or the buffer, whose block is malformed, or
//! that decompresses to any other length than it claims, is dropped as
//! [`crate::DropReason::DecompressionFailed`]; nothing here can panic on
//! input (the LZ4 decoder is `lz4_flex`'s safe, checked one; zstd's
//! decodes one frame into the bounded buffer, with its window limited;
//! the `wire_parse` fuzz target feeds both arbitrary bytes). Only the
//! authenticated peer can send such a packet, so a failure means a bug
//! or a misbehaving peer, never an outsider.
//!
//! # Memory
//!
//! Nothing is allocated per packet: a [`Compressor`] keeps the LZ4 hash
//! table, zstd's two contexts when zstd was chosen, and the output scratch
//! (sized once for the largest packet it has seen, the MTU in steady
//! state), and decompression writes into a buffer the driver owns and
//! reuses.
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
use zstd::zstd_safe::{CParameter, DParameter};

use crate::wire::padded_len;

/// First plaintext byte of an LZ4-compressed IP packet.
pub const COMPRESSED_LZ4_MARKER: u8 = 0x21;
/// First plaintext byte of a zstd-compressed IP packet.
pub const COMPRESSED_ZSTD_MARKER: u8 = 0x22;
/// zstd's level: its fastest regular one, as dependencies were measured.
const ZSTD_LEVEL: i32 = 1;
/// The largest window a zstd frame may ask of the decoder: 128 KiB, past
/// the largest packet (64 KiB), so no frame makes it allocate more.
const ZSTD_WINDOW_LOG_MAX: u32 = 17;
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
    /// zstd at level 1 in every session whose peer offers it too, LZ4
    /// with a peer that offers only LZ4.
    Zstd,
}

impl CompressionPolicy {
    pub(crate) fn offers_lz4(self) -> bool {
        self != Self::Off
    }

    pub(crate) fn offers_zstd(self) -> bool {
        self == Self::Zstd
    }
}

/// How one packet is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    Lz4,
    Zstd,
}

impl Codec {
    /// The codec of a compressed plaintext, by its first byte.
    pub fn of(plaintext: &[u8]) -> Option<Self> {
        match plaintext.first() {
            Some(&COMPRESSED_LZ4_MARKER) => Some(Self::Lz4),
            Some(&COMPRESSED_ZSTD_MARKER) => Some(Self::Zstd),
            _ => None,
        }
    }

    /// `lz4` or `zstd`, as configuration and `fjord show` say it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Lz4 => "lz4",
            Self::Zstd => "zstd",
        }
    }

    fn marker(self) -> u8 {
        match self {
            Self::Lz4 => COMPRESSED_LZ4_MARKER,
            Self::Zstd => COMPRESSED_ZSTD_MARKER,
        }
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
    #[error("malformed compressed block")]
    Malformed,
    #[error("zstd packet, but zstd was not chosen here")]
    CodecUnavailable,
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

/// What compressing one outgoing packet (and decompressing one with
/// zstd) needs, kept between packets.
pub struct Compressor {
    table: CompressTable,
    /// zstd's contexts, when zstd was chosen.
    zstd: Option<Box<ZstdContexts>>,
    /// The codec's output, copied back over the packet when it pays: the
    /// LZ4 encoder needs room for its worst case, more than the packet.
    scratch: Vec<u8>,
}

struct ZstdContexts {
    compress: zstd::bulk::Compressor<'static>,
    decompress: zstd::bulk::Decompressor<'static>,
}

impl ZstdContexts {
    fn new() -> std::io::Result<Self> {
        let mut compress = zstd::bulk::Compressor::new(ZSTD_LEVEL)?;
        // The header states the length; the AEAD already protects the bytes.
        compress.set_parameter(CParameter::ChecksumFlag(false))?;
        compress.set_parameter(CParameter::ContentSizeFlag(false))?;
        compress.set_parameter(CParameter::DictIdFlag(false))?;
        let mut decompress = zstd::bulk::Decompressor::new()?;
        decompress.set_parameter(DParameter::WindowLogMax(ZSTD_WINDOW_LOG_MAX))?;
        Ok(Self {
            compress,
            decompress,
        })
    }
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
    /// LZ4 only.
    pub fn new() -> Self {
        Self {
            table: CompressTable::small(),
            zstd: None,
            scratch: Vec::new(),
        }
    }

    /// zstd too; an error if its library cannot allocate its contexts.
    pub fn with_zstd() -> std::io::Result<Self> {
        let mut compressor = Self::new();
        compressor.add_zstd()?;
        Ok(compressor)
    }

    /// Makes zstd available (once; later calls change nothing).
    pub fn add_zstd(&mut self) -> std::io::Result<()> {
        if self.zstd.is_none() {
            self.zstd = Some(Box::new(ZstdContexts::new()?));
        }
        Ok(())
    }

    /// Compresses the IP packet `packet[..len]` with `codec`, in place,
    /// when that makes its datagram (padded for a tunnel of `mtu` bytes)
    /// shorter; anything else leaves the packet untouched, to be sent as
    /// it is (zstd without [`Compressor::add_zstd`] too).
    pub fn compress_in_place(
        &mut self,
        packet: &mut [u8],
        len: usize,
        mtu: usize,
        codec: Codec,
    ) -> Compressed {
        let Some(input) = packet.get(..len) else {
            return Compressed::NotData;
        };
        if !matches!(input.first().map(|byte| byte >> 4), Some(4 | 6)) {
            return Compressed::NotData;
        }
        match self.compress_ip_packet(packet, len, mtu, codec) {
            Some(compressed_len) => Compressed::Yes(compressed_len),
            None => Compressed::Raw,
        }
    }

    fn compress_ip_packet(
        &mut self,
        packet: &mut [u8],
        len: usize,
        mtu: usize,
        codec: Codec,
    ) -> Option<usize> {
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
        let block_len = match codec {
            Codec::Lz4 => {
                compress_into_with_table(input, &mut self.scratch[..room], &mut self.table).ok()?
            }
            // Output longer than the packet fails, which is no loss.
            Codec::Zstd => self
                .zstd
                .as_mut()?
                .compress
                .compress_to_buffer(input, &mut self.scratch[..len])
                .ok()?,
        };
        let compressed_len = COMPRESSED_HEADER_LEN + block_len;
        if padded_len(compressed_len, mtu) >= padded_len(len, mtu) {
            return None;
        }
        // Both lengths fit 16 bits: `len` was checked, and the block is
        // shorter than it.
        let original = u16::try_from(len).ok()?.to_be_bytes();
        let block = u16::try_from(block_len).ok()?.to_be_bytes();
        packet[..COMPRESSED_HEADER_LEN].copy_from_slice(&[
            codec.marker(),
            original[0],
            original[1],
            block[0],
            block[1],
        ]);
        packet[COMPRESSED_HEADER_LEN..compressed_len].copy_from_slice(&self.scratch[..block_len]);
        Some(compressed_len)
    }

    /// Decompresses the compressed packet at the start of `plaintext`
    /// (WireGuard's padding may follow), of either codec, into `out`,
    /// allowing at most `limit` bytes (the tunnel MTU), and returns the
    /// packet's length. Never panics.
    pub fn decompress(
        &mut self,
        plaintext: &[u8],
        out: &mut [u8],
        limit: usize,
    ) -> Result<usize, DecompressError> {
        let (codec, original, block) = parse(plaintext, out.len().min(limit))?;
        match codec {
            Codec::Lz4 => decompress_lz4(block, original, out),
            Codec::Zstd => {
                let zstd = self
                    .zstd
                    .as_mut()
                    .ok_or(DecompressError::CodecUnavailable)?;
                let actual = zstd
                    .decompress
                    .decompress_to_buffer(block, &mut out[..original])
                    .map_err(|_| DecompressError::Malformed)?;
                exactly(original, actual)
            }
        }
    }
}

/// Whether an authenticated plaintext is a compressed packet.
pub fn is_compressed(plaintext: &[u8]) -> bool {
    Codec::of(plaintext).is_some()
}

/// Decompresses the LZ4 packet at the start of `plaintext` (WireGuard's
/// padding may follow) into `out`, allowing at most `limit` bytes (the
/// tunnel MTU), and returns the packet's length; a zstd packet needs
/// [`Compressor::decompress`]. Never panics.
pub fn decompress(
    plaintext: &[u8],
    out: &mut [u8],
    limit: usize,
) -> Result<usize, DecompressError> {
    match parse(plaintext, out.len().min(limit))? {
        (Codec::Lz4, original, block) => decompress_lz4(block, original, out),
        (Codec::Zstd, ..) => Err(DecompressError::CodecUnavailable),
    }
}

/// The codec, original length and block of a compressed plaintext whose
/// original length is at most `limit`.
fn parse(plaintext: &[u8], limit: usize) -> Result<(Codec, usize, &[u8]), DecompressError> {
    let Some(&[_, original_high, original_low, block_high, block_low]) =
        plaintext.first_chunk::<COMPRESSED_HEADER_LEN>()
    else {
        return Err(DecompressError::Truncated);
    };
    let codec = Codec::of(plaintext).ok_or(DecompressError::NotCompressed)?;
    let original = usize::from(u16::from_be_bytes([original_high, original_low]));
    let block_len = usize::from(u16::from_be_bytes([block_high, block_low]));
    let block = plaintext
        .get(COMPRESSED_HEADER_LEN..COMPRESSED_HEADER_LEN + block_len)
        .ok_or(DecompressError::Truncated)?;
    if original > limit {
        return Err(DecompressError::TooLong { original, limit });
    }
    Ok((codec, original, block))
}

/// `block` into `out`; `original` (at most `out`'s length) is what it must
/// give.
fn decompress_lz4(block: &[u8], original: usize, out: &mut [u8]) -> Result<usize, DecompressError> {
    let actual = lz4_flex::block::decompress_into(block, &mut out[..original])
        .map_err(|_| DecompressError::Malformed)?;
    exactly(original, actual)
}

/// `original` if a decoder gave exactly the length the header promised:
/// a shorter result would leave stale bytes of `out` in the packet.
fn exactly(original: usize, actual: usize) -> Result<usize, DecompressError> {
    if actual == original {
        Ok(original)
    } else {
        Err(DecompressError::WrongLength { original, actual })
    }
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

    const CODECS: [Codec; 2] = [Codec::Lz4, Codec::Zstd];

    fn both() -> Compressor {
        Compressor::with_zstd().unwrap()
    }

    /// `packet`, compressed with `codec`: the buffer and the compressed
    /// length.
    fn compressed(packet: &[u8], codec: Codec) -> (Vec<u8>, usize) {
        let mut buf = packet.to_vec();
        match both().compress_in_place(&mut buf, packet.len(), MTU, codec) {
            Compressed::Yes(len) => (buf, len),
            other => panic!("not compressed: {other:?}"),
        }
    }

    #[test]
    fn text_compresses_and_round_trips() {
        let packet = ipv4(&log_lines(1380));
        for codec in CODECS {
            let (mut buf, len) = compressed(&packet, codec);
            assert!(
                len < packet.len() * 2 / 3,
                "{codec:?}: {len} of {}",
                packet.len()
            );
            assert_eq!(Codec::of(&buf[..len]), Some(codec));
            assert!(is_compressed(&buf[..len]));
            // WireGuard's padding behind the block changes nothing.
            buf[len..].fill(0);
            let mut out = vec![0u8; MTU];
            let original = both().decompress(&buf, &mut out, MTU).unwrap();
            assert_eq!(&out[..original], &packet[..]);
        }
    }

    /// What zstd is for: a large packet of text shrinks further than LZ4
    /// gets it (and further than zstd gets a small one).
    #[test]
    fn zstd_finds_more_in_a_large_packet() {
        let mtu = 9000;
        let packet = ipv4(&log_lines(mtu - 20));
        let mut compressor = both();
        let mut ratio = |codec| {
            let mut buf = packet.clone();
            let Compressed::Yes(len) = compressor.compress_in_place(&mut buf, mtu, mtu, codec)
            else {
                panic!("{codec:?} did not compress");
            };
            let mut out = vec![0u8; mtu];
            assert_eq!(compressor.decompress(&buf[..len], &mut out, mtu), Ok(mtu));
            assert_eq!(out, packet);
            mtu as f64 / len as f64
        };
        let (lz4, zstd) = (ratio(Codec::Lz4), ratio(Codec::Zstd));
        assert!(zstd > lz4 * 1.3, "zstd {zstd:.2}, LZ4 {lz4:.2}");
    }

    /// A zstd packet needs the contexts only a zstd policy sets up.
    #[test]
    fn zstd_packets_need_zstd_here() {
        let packet = ipv4(&log_lines(1380));
        let (buf, len) = compressed(&packet, Codec::Zstd);
        let mut out = vec![0u8; MTU];
        assert_eq!(
            decompress(&buf[..len], &mut out, MTU),
            Err(DecompressError::CodecUnavailable)
        );
        assert_eq!(
            Compressor::new().decompress(&buf[..len], &mut out, MTU),
            Err(DecompressError::CodecUnavailable)
        );
        let mut lz4_only = packet.clone();
        assert_eq!(
            Compressor::new().compress_in_place(&mut lz4_only, packet.len(), MTU, Codec::Zstd),
            Compressed::Raw
        );
        assert_eq!(lz4_only, packet);
    }

    #[test]
    fn random_data_short_packets_and_non_ip_go_raw_untouched() {
        let mut compressor = both();
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
            for codec in CODECS {
                let mut buf = packet.clone();
                assert_eq!(
                    compressor.compress_in_place(&mut buf, packet.len(), MTU, codec),
                    expected
                );
                assert_eq!(buf, packet);
            }
        }
    }

    #[test]
    fn a_gain_that_padding_would_eat_is_no_gain() {
        // Whatever the length, a packet is compressed only when its padded
        // length shrinks, and otherwise left exactly as it was.
        let mut compressor = both();
        for codec in CODECS {
            for len in MIN_COMPRESSIBLE_LEN..400 {
                let mut packet = ipv4(&log_lines(len - 20));
                let original = packet.clone();
                if let Compressed::Yes(compressed) =
                    compressor.compress_in_place(&mut packet, len, MTU, codec)
                {
                    assert!(padded_len(compressed, MTU) < padded_len(len, MTU));
                    let mut out = vec![0u8; MTU];
                    assert_eq!(compressor.decompress(&packet, &mut out, MTU), Ok(len));
                    assert_eq!(out[..len], original[..]);
                } else {
                    assert_eq!(packet, original);
                }
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
        let mut codecs = both();
        for codec in CODECS {
            let (buf, len) = compressed(&packet, codec);
            let compressed = &buf[..len];
            let mut out = vec![0u8; MTU];
            let mut decompress =
                |plaintext: &[u8], out: &mut [u8], limit| codecs.decompress(plaintext, out, limit);
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
            assert!(decompress(&lying, &mut out, MTU).is_err(), "{codec:?}");
            // The block cut short, with its stated length to match.
            let mut cut = compressed[..len - 8].to_vec();
            cut[3..5].copy_from_slice(&u16::try_from(len - 8 - 5).unwrap().to_be_bytes());
            assert!(decompress(&cut, &mut out, MTU).is_err(), "{codec:?}");
            // Not compressed at all.
            assert_eq!(
                decompress(&packet, &mut out, MTU),
                Err(DecompressError::NotCompressed)
            );
            // A block of garbage: an error, never a panic.
            let mut garbage = vec![codec.marker(), 5, 0, 0, 200];
            garbage.extend(random_bytes(200, 5));
            assert!(decompress(&garbage, &mut out, MTU).is_err());
        }
    }
}
