//! Datagrams this node relays between two other members leave from where
//! they were received: no copy, and one `sendmmsg` for a batch's worth,
//! each run of equal-length datagrams to one member a GSO message
//! (gso_batch.rs, the batcher the outbound pipeline sends through too).
//!
//! A GRO receive lays a flow's datagrams out back to back, one stride
//! apart, which is exactly how a GSO send wants its segments; so a run is
//! one slice of the receive buffer. Relayed traffic is ciphertext the
//! relay cannot read (`fjord_mesh::relay`); it only picks the destination.

use std::net::SocketAddr;
use std::ops::Range;

use crate::egress::Egress;
use crate::gso_batch::GsoBatch;
use crate::stats::DataStats;

/// One batch's relayed datagrams, as ranges of the receive buffer.
pub struct Forwards {
    batch: GsoBatch,
}

impl Default for Forwards {
    fn default() -> Self {
        Self {
            batch: GsoBatch::back_to_back(),
        }
    }
}

impl Forwards {
    /// Queues the datagram at `range` of the receive buffer for `to`.
    pub fn push(
        &mut self,
        egress: &Egress,
        to: SocketAddr,
        range: Range<usize>,
        max_segments: usize,
    ) {
        self.batch.push(egress, max_segments, to, None, range);
    }

    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Sends every queued run from `storage` and forgets them.
    pub fn send(&mut self, storage: &[u8], egress: &Egress, stats: &mut DataStats) {
        self.batch.send(storage, egress, stats);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(forwards: &Forwards) -> Vec<(SocketAddr, Range<usize>, usize, usize)> {
        forwards.batch.runs()
    }

    /// A GRO message of three 100-byte datagrams and a 40-byte one to one
    /// member is one run; what follows a short datagram, or goes to
    /// another member, or lies elsewhere, starts a new one.
    #[test]
    fn back_to_back_datagrams_to_one_member_form_gso_runs() {
        let egress = Egress::bind(0, 0).unwrap();
        let a: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let b: SocketAddr = "198.18.0.2:2".parse().unwrap();
        let mut forwards = Forwards::default();
        for range in [0..100, 100..200, 200..300, 300..340, 340..440] {
            forwards.push(&egress, a, range, 64);
        }
        forwards.push(&egress, b, 440..540, 64);
        forwards.push(&egress, b, 1000..1100, 64);
        assert_eq!(
            runs(&forwards),
            vec![
                (a, 0..340, 100, 4),
                (a, 340..440, 100, 1),
                (b, 440..540, 100, 1),
                (b, 1000..1100, 100, 1),
            ]
        );
    }

    #[test]
    fn runs_respect_the_segment_limit() {
        let egress = Egress::bind(0, 0).unwrap();
        let a: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let mut forwards = Forwards::default();
        for start in (0..500).step_by(100) {
            forwards.push(&egress, a, start..start + 100, 2);
        }
        assert_eq!(runs(&forwards).len(), 3);
    }

    /// Relayed datagrams arrive as they were, in order, each alone.
    #[test]
    fn sent_runs_arrive_as_their_datagrams() {
        let udp = Egress::bind(0, 0).unwrap();
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = receiver.local_addr().unwrap();
        let storage: Vec<u8> = (0..250u8).collect();
        let mut forwards = Forwards::default();
        for range in [0..100, 100..200, 200..250] {
            forwards.push(&udp, to, range, udp.max_gso_segments());
        }
        let mut stats = DataStats::default();
        forwards.send(&storage, &udp, &mut stats);
        assert!(forwards.is_empty());
        let mut buf = [0u8; 200];
        for expected in [0..100usize, 100..200, 200..250] {
            let len = receiver.recv(&mut buf).unwrap();
            assert_eq!(&buf[..len], &storage[expected]);
        }
    }
}
