//! The bodies of the three control kinds that carry the network policy
//! between members (`membership/policy_transfer.rs` says how they are
//! used):
//!
//! ```text
//! PolicyDigest   version u64 | hash 32 | text length u32
//! PolicyRequest  version u64 | hash 32 | first chunk u16 | chunks u16
//! PolicyChunk    version u64 | hash 32 | index u16 | chunks u16 | length u16 | bytes
//! ```
//!
//! A policy's signed text (up to [`MAX_POLICY_BYTES`]) is far larger than
//! one tunnel packet, so it travels in chunks of [`POLICY_CHUNK_BYTES`]
//! (the last one shorter). The chunk size is fixed by the protocol, not
//! by either side's MTU, so a chunk's index means the same bytes to both;
//! 1,024 bytes and the 48-byte header fit the smallest tunnel MTU
//! WireGuard is run with (1,280). Every message names the policy by
//! [`PolicyId`], so a chunk of one version is never mixed into another.
//!
//! The decoder checks only what the bytes alone can tell (a length within
//! the policy bound, an index below the count, a chunk no longer than the
//! chunk size); whether a chunk fits the transfer it claims to belong to
//! is the receiver's check.

use crate::codec::{DecodeError, Reader, Writer};
use crate::policy::MAX_POLICY_BYTES;

/// Bytes of the BLAKE2s-256 hash that names a policy's signed text.
pub const POLICY_HASH_LEN: usize = 32;
/// Bytes of policy text per chunk (the last chunk holds the rest).
pub const POLICY_CHUNK_BYTES: usize = 1024;
/// Most chunks of one policy: [`MAX_POLICY_BYTES`] in whole chunks.
pub const MAX_POLICY_CHUNKS: usize = MAX_POLICY_BYTES.div_ceil(POLICY_CHUNK_BYTES);
/// Most chunks one request asks for: what the requester takes in before
/// asking again, so a large policy never arrives as one burst that
/// overflows a socket buffer.
pub const MAX_REQUESTED_CHUNKS: usize = 32;

/// Which policy a message is about: its version, and the hash of its
/// signed text. Ordered by version, then hash: two texts signed with
/// the same version (an operator's slip) are told apart, and every
/// member keeps the same one of them, the higher hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    pub version: u64,
    pub hash: [u8; POLICY_HASH_LEN],
}

impl PolicyId {
    /// The id of `text`, a signed policy that parses at `version`.
    pub fn of(version: u64, text: &[u8]) -> Self {
        use blake2::Digest;
        Self {
            version,
            hash: blake2::Blake2s256::digest(text).into(),
        }
    }

    pub(super) fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            version: reader.u64()?,
            hash: reader.array()?,
        })
    }

    pub(super) fn write(&self, writer: &mut Writer) {
        writer.u64(self.version);
        writer.bytes(&self.hash);
    }
}

/// How many chunks a text of `len` bytes is cut into.
pub fn chunk_count(len: usize) -> usize {
    len.div_ceil(POLICY_CHUNK_BYTES)
}

/// A text length in a digest: 1 to [`MAX_POLICY_BYTES`].
pub(super) fn read_text_len(reader: &mut Reader<'_>) -> Result<u32, DecodeError> {
    let len = reader.u32()?;
    if len == 0 || len as usize > MAX_POLICY_BYTES {
        return Err(DecodeError::InvalidField);
    }
    Ok(len)
}

/// A request's range: it starts at a chunk a policy can have and asks
/// for 1 to [`MAX_REQUESTED_CHUNKS`].
pub(super) fn read_range(reader: &mut Reader<'_>) -> Result<(u16, u16), DecodeError> {
    let first = reader.u16()?;
    let count = reader.u16()?;
    if usize::from(first) >= MAX_POLICY_CHUNKS || count == 0 {
        return Err(DecodeError::InvalidField);
    }
    if usize::from(count) > MAX_REQUESTED_CHUNKS {
        return Err(DecodeError::TooMany);
    }
    Ok((first, count))
}

/// A chunk's place and bytes: index below a count of 1 to
/// [`MAX_POLICY_CHUNKS`], 1 to [`POLICY_CHUNK_BYTES`] bytes.
pub(super) fn read_chunk<'a>(reader: &mut Reader<'a>) -> Result<(u16, u16, &'a [u8]), DecodeError> {
    let index = reader.u16()?;
    let count = reader.u16()?;
    if count == 0 || usize::from(count) > MAX_POLICY_CHUNKS || index >= count {
        return Err(DecodeError::InvalidField);
    }
    let len = usize::from(reader.u16()?);
    if len == 0 {
        return Err(DecodeError::InvalidField);
    }
    if len > POLICY_CHUNK_BYTES {
        return Err(DecodeError::TooMany);
    }
    Ok((index, count, reader.take(len)?))
}

/// Writes a chunk's place and bytes; the sender cuts `bytes` to
/// [`POLICY_CHUNK_BYTES`] first.
pub(super) fn write_chunk(writer: &mut Writer, index: u16, count: u16, bytes: &[u8]) {
    writer.u16(index);
    writer.u16(count);
    let bytes = &bytes[..bytes.len().min(POLICY_CHUNK_BYTES)];
    writer.u16(bytes.len() as u16);
    writer.bytes(bytes);
}
