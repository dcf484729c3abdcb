//! What a bulk transfer reports: per-stream and combined digests, bytes,
//! time and rate.

use std::fmt;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// A SHA-256 digest, printed as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Sha256Digest(pub [u8; 32]);

impl fmt::Display for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for byte in self.0 {
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Sha256Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256Digest({self})")
    }
}

/// One connection's outcome.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub index: usize,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub sender_sha256: Sha256Digest,
    pub receiver_sha256: Sha256Digest,
}

/// The whole run. With one stream the digests are that stream's; with
/// several they are SHA-256 over the per-stream digests in stream order.
#[derive(Debug, Clone)]
pub struct BulkReport {
    /// Payload bytes received, all streams.
    pub bytes: u64,
    pub elapsed: Duration,
    pub sender_sha256: Sha256Digest,
    pub receiver_sha256: Sha256Digest,
    /// Every stream arrived whole with the digest it was sent with.
    pub verified: bool,
    pub throughput_bits_per_sec: f64,
    pub streams: Vec<StreamReport>,
}

impl BulkReport {
    pub fn throughput_gbit_per_sec(&self) -> f64 {
        self.throughput_bits_per_sec / 1e9
    }
}

impl fmt::Display for BulkReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} bytes in {:.3} s over {} stream(s): {:.3} Gbit/s, sha256 {} ({})",
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.streams.len(),
            self.throughput_gbit_per_sec(),
            self.receiver_sha256,
            if self.verified {
                "verified"
            } else {
                "MISMATCH"
            },
        )
    }
}

pub(super) struct SentStream {
    pub(super) index: usize,
    pub(super) bytes: u64,
    pub(super) digest: [u8; 32],
}

pub(super) struct ReceivedStream {
    pub(super) index: usize,
    pub(super) expected: u64,
    pub(super) bytes: u64,
    pub(super) digest: [u8; 32],
    pub(super) finished: Instant,
}

pub(super) fn report(
    start: Instant,
    mut sent: Vec<SentStream>,
    mut received: Vec<ReceivedStream>,
) -> BulkReport {
    sent.sort_by_key(|stream| stream.index);
    received.sort_by_key(|stream| stream.index);
    let finished = received
        .iter()
        .map(|stream| stream.finished)
        .max()
        .unwrap_or(start);
    let elapsed = finished.duration_since(start);
    let bytes: u64 = received.iter().map(|stream| stream.bytes).sum();
    let streams: Vec<StreamReport> = sent
        .iter()
        .map(|out| {
            let back = received.iter().find(|stream| stream.index == out.index);
            StreamReport {
                index: out.index,
                sent_bytes: out.bytes,
                received_bytes: back.map_or(0, |stream| stream.bytes),
                sender_sha256: Sha256Digest(out.digest),
                receiver_sha256: Sha256Digest(back.map_or([0; 32], |stream| stream.digest)),
            }
        })
        .collect();
    let verified = received.len() == sent.len()
        && received
            .iter()
            .all(|stream| stream.bytes == stream.expected)
        && streams.iter().all(|stream| {
            stream.sent_bytes == stream.received_bytes
                && stream.sender_sha256 == stream.receiver_sha256
        });
    let combine = |digests: Vec<[u8; 32]>| -> Sha256Digest {
        if let [single] = digests.as_slice() {
            return Sha256Digest(*single);
        }
        let mut hasher = Sha256::new();
        for digest in &digests {
            hasher.update(digest);
        }
        Sha256Digest(hasher.finalize().into())
    };
    let seconds = elapsed.as_secs_f64();
    BulkReport {
        bytes,
        elapsed,
        sender_sha256: combine(
            streams
                .iter()
                .map(|stream| stream.sender_sha256.0)
                .collect(),
        ),
        receiver_sha256: combine(
            streams
                .iter()
                .map(|stream| stream.receiver_sha256.0)
                .collect(),
        ),
        verified,
        throughput_bits_per_sec: if seconds > 0.0 {
            bytes as f64 * 8.0 / seconds
        } else {
            0.0
        },
        streams,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_prints_as_hex() {
        let digest = Sha256Digest(Sha256::digest(b"abc").into());
        assert_eq!(
            digest.to_string(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
