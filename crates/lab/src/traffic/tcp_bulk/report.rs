//! What a bulk transfer reports: per-stream and combined digests, bytes,
//! time and rate.

use std::fmt;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::Xxh3;

/// An XXH3-128 digest of a stream's content, printed as 32 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ContentDigest(pub u128);

impl fmt::Display for ContentDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for ContentDigest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ContentDigest({self})")
    }
}

/// One connection's outcome.
#[derive(Debug, Clone)]
pub struct StreamReport {
    pub index: usize,
    pub sent_bytes: u64,
    pub received_bytes: u64,
    pub sender_digest: ContentDigest,
    pub receiver_digest: ContentDigest,
}

/// The whole run. With one stream the digests are that stream's; with
/// several they are XXH3-128 over the per-stream digests in stream order.
#[derive(Debug, Clone)]
pub struct BulkReport {
    /// Payload bytes received, all streams.
    pub bytes: u64,
    pub elapsed: Duration,
    pub sender_digest: ContentDigest,
    pub receiver_digest: ContentDigest,
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
            "{} bytes in {:.3} s over {} stream(s): {:.3} Gbit/s, xxh3-128 {} ({})",
            self.bytes,
            self.elapsed.as_secs_f64(),
            self.streams.len(),
            self.throughput_gbit_per_sec(),
            self.receiver_digest,
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
    pub(super) digest: u128,
}

pub(super) struct ReceivedStream {
    pub(super) index: usize,
    pub(super) expected: u64,
    pub(super) bytes: u64,
    pub(super) digest: u128,
    /// When the connection was accepted: a sink on another host times
    /// from its first stream's, as the two clocks cannot be compared.
    pub(super) started: Instant,
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
                sender_digest: ContentDigest(out.digest),
                receiver_digest: ContentDigest(back.map_or(0, |stream| stream.digest)),
            }
        })
        .collect();
    let verified = received.len() == sent.len()
        && received
            .iter()
            .all(|stream| stream.bytes == stream.expected)
        && streams.iter().all(|stream| {
            stream.sent_bytes == stream.received_bytes
                && stream.sender_digest == stream.receiver_digest
        });
    let combine = |digests: Vec<u128>| -> ContentDigest {
        if let [single] = digests.as_slice() {
            return ContentDigest(*single);
        }
        let mut hasher = Xxh3::new();
        for digest in &digests {
            hasher.update(&digest.to_be_bytes());
        }
        ContentDigest(hasher.digest128())
    };
    let seconds = elapsed.as_secs_f64();
    BulkReport {
        bytes,
        elapsed,
        sender_digest: combine(
            streams
                .iter()
                .map(|stream| stream.sender_digest.0)
                .collect(),
        ),
        receiver_digest: combine(
            streams
                .iter()
                .map(|stream| stream.receiver_digest.0)
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
        let digest = ContentDigest(0x0123_4567_89ab_cdef_0011_2233_4455_6677);
        assert_eq!(digest.to_string(), "0123456789abcdef0011223344556677");
        assert_eq!(ContentDigest(1).to_string().len(), 32);
    }
}
