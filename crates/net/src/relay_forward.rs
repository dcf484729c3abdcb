//! Datagrams this node relays between two other members leave from where
//! they were received: no copy, and one `sendmmsg` for a batch's worth,
//! each run of equal-length datagrams to one member a GSO message.
//!
//! A GRO receive lays a flow's datagrams out back to back, one stride
//! apart, which is exactly how a GSO send wants its segments; so a run is
//! one slice of the receive buffer. Relayed traffic is ciphertext the
//! relay cannot read (`fjord_mesh::relay`); it only picks the destination.

use std::io::IoSlice;
use std::net::SocketAddr;
use std::ops::Range;

use crate::egress::{Egress, GsoMessage, SEND_BATCH, Sent};
use crate::stats::DataStats;

/// The largest segment sent with GSO (as for sealed datagrams: the kernel
/// refuses segments over the path MTU).
const MAX_SEGMENT: usize = 1500 - 40 - 8;
/// Largest payload of one GSO send: 65,535 minus IPv4 and UDP headers.
const MAX_GSO_BYTES: usize = 65_535 - 20 - 8;

struct Run {
    to: SocketAddr,
    /// Where the run's datagrams lie, back to back.
    bytes: Range<usize>,
    segment: usize,
    count: usize,
    /// Ended by a shorter datagram (GSO allows only the last to be short).
    closed: bool,
}

/// One batch's relayed datagrams, as ranges of the receive buffer.
#[derive(Default)]
pub struct Forwards {
    runs: Vec<Run>,
}

impl Forwards {
    /// Queues the datagram at `range` of the receive buffer for `to`.
    pub fn push(&mut self, to: SocketAddr, range: Range<usize>, max_segments: usize) {
        let len = range.len();
        if let Some(run) = self.runs.last_mut() {
            let joins = run.to == to
                && !run.closed
                && run.bytes.end == range.start
                && len <= run.segment
                && run.segment <= MAX_SEGMENT
                && run.count < max_segments
                && run.bytes.len() + len <= MAX_GSO_BYTES;
            if joins {
                run.bytes.end = range.end;
                run.count += 1;
                run.closed = len < run.segment;
                return;
            }
        }
        self.runs.push(Run {
            to,
            bytes: range,
            segment: len,
            count: 1,
            closed: false,
        });
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Sends every queued run from `storage` and forgets them.
    pub fn send(&mut self, storage: &[u8], udp: &Egress, stats: &mut DataStats) {
        let mut next = 0;
        let mut waits = 0;
        while next < self.runs.len() {
            let batch = &self.runs[next..self.runs.len().min(next + SEND_BATCH)];
            let pieces: [IoSlice<'_>; SEND_BATCH] = std::array::from_fn(|index| {
                batch.get(index).map_or(IoSlice::new(&[]), |run| {
                    IoSlice::new(&storage[run.bytes.clone()])
                })
            });
            let messages: [GsoMessage<'_>; SEND_BATCH] = std::array::from_fn(|index| {
                batch
                    .get(index)
                    .map_or(GsoMessage::EMPTY, |run| GsoMessage {
                        destination: run.to,
                        source: None,
                        pieces: std::slice::from_ref(&pieces[index]),
                        segment_size: (run.count > 1).then_some(run.segment as u16),
                    })
            });
            match udp.send_or_wait(&messages[..batch.len()], &mut waits) {
                Sent::Count(sent) => {
                    stats.udp_sends += sent as u64;
                    next += sent;
                }
                Sent::Again => {}
                Sent::Failed(error) => {
                    let run = &batch[0];
                    if error.raw_os_error() == Some(libc::EIO) && run.count > 1 {
                        // No segmentation on this path: this run one
                        // datagram at a time, every later one too.
                        udp.refuse_gso(&error);
                        for start in run.bytes.clone().step_by(run.segment) {
                            let end = (start + run.segment).min(run.bytes.end);
                            if udp.send_blocking(run.to, None, &storage[start..end], stats) {
                                stats.udp_sends += 1;
                            }
                        }
                    } else {
                        stats.udp_send_errors += 1;
                        tracing::trace!(%error, destination = %run.to, "relaying failed");
                    }
                    next += 1;
                }
            }
        }
        self.runs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(forwards: &Forwards) -> Vec<(SocketAddr, Range<usize>, usize, usize)> {
        forwards
            .runs
            .iter()
            .map(|run| (run.to, run.bytes.clone(), run.segment, run.count))
            .collect()
    }

    /// A GRO message of three 100-byte datagrams and a 40-byte one to one
    /// member is one run; what follows a short datagram, or goes to
    /// another member, or lies elsewhere, starts a new one.
    #[test]
    fn back_to_back_datagrams_to_one_member_form_gso_runs() {
        let a: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let b: SocketAddr = "198.18.0.2:2".parse().unwrap();
        let mut forwards = Forwards::default();
        for range in [0..100, 100..200, 200..300, 300..340, 340..440] {
            forwards.push(a, range, 64);
        }
        forwards.push(b, 440..540, 64);
        forwards.push(b, 1000..1100, 64);
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
        let a: SocketAddr = "198.18.0.1:1".parse().unwrap();
        let mut forwards = Forwards::default();
        for start in (0..500).step_by(100) {
            forwards.push(a, start..start + 100, 2);
        }
        assert_eq!(forwards.runs.len(), 3);
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
            forwards.push(to, range, udp.max_gso_segments());
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
