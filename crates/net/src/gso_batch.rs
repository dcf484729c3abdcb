//! The one GSO batcher: the outbound pipeline's sealed datagrams and the
//! datagrams this node relays both leave through it.
//!
//! ```text
//! push(destination, source, bytes) ─ joins the last run if it goes to the
//!   same place, fits the run's segment and the socket's segment limit ─
//!   else starts a run ─ send: each run one GSO message gathered from
//!   where its bytes lie, up to 64 per sendmmsg (Egress::send_or_wait) ─
//!   a refused message: EIO (no segmentation on the path): GSO off for
//!   good, the run one datagram at a time; EINVAL on a segment above what
//!   any 1,500-byte path takes: later runs to it in smaller segments,
//!   this one one at a time; EINVAL with a source we no longer have: one
//!   at a time from the route's choice; anything else: counted, dropped
//! ```
//!
//! The kernel cuts a GSO send into equal segments with a shorter last
//! one, and each send is one UDP datagram to it, so a run must fit the
//! 16-bit length behind an IPv4 header. A run's bytes are byte ranges of
//! the caller's area, merged where they lie back to back: full-size
//! sealed slots and a GRO message's datagrams already lie as GSO wants
//! them, so nothing is copied.

use std::io::IoSlice;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::egress::{Egress, GsoMessage, SEND_BATCH, Sent};
use crate::stats::DataStats;
use crate::udp::{DEFAULT_GSO_SEGMENT, is_stale_source};

/// Largest payload of one GSO send: 65,535 minus IPv4 and UDP headers.
const MAX_GSO_BYTES: usize = 65_535 - 20 - 8;
/// Pieces and messages of a send small enough for small arrays: a lone
/// packet, a ping's request or reply.
const FEW: usize = 4;
/// Most pieces one `sendmmsg` gathers: a full outbound area's worth.
const MAX_PIECES: usize = 2 * SEND_BATCH;

/// A run of datagrams to one destination, all of one length but perhaps
/// the last shorter: one GSO message.
struct Run {
    destination: SocketAddr,
    source: Option<IpAddr>,
    /// Largest datagram its socket sends as a GSO segment.
    segment_limit: usize,
    count: usize,
    segment: usize,
    last_len: usize,
    /// Where its bytes lie: indices into `GsoBatch::spans`.
    pieces: Range<usize>,
}

/// Datagrams waiting to be sent, as runs over byte ranges of the caller's
/// area (both emptied every send, capacity kept).
pub struct GsoBatch {
    runs: Vec<Run>,
    spans: Vec<Range<usize>>,
    /// Whether a run may gather datagrams that do not lie back to back
    /// (an iovec each); without it, a run is one slice of the area.
    gathers: bool,
}

impl GsoBatch {
    /// A batch whose runs gather datagrams from wherever they lie (the
    /// outbound slots, where a short datagram leaves its slot's rest
    /// empty).
    pub fn gathering(capacity: usize) -> Self {
        Self {
            runs: Vec::with_capacity(capacity),
            spans: Vec::with_capacity(capacity),
            gathers: true,
        }
    }

    /// A batch whose runs are each one slice of the area (a GRO message's
    /// datagrams).
    pub fn back_to_back() -> Self {
        Self {
            runs: Vec::new(),
            spans: Vec::new(),
            gathers: false,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    /// Queues the datagram at `bytes` of the area for `destination`, from
    /// `source` (`None`: the route's choice); a run carries at most
    /// `max_segments` ([`Egress::max_gso_segments`], read once a batch).
    pub fn push(
        &mut self,
        egress: &Egress,
        max_segments: usize,
        destination: SocketAddr,
        source: Option<IpAddr>,
        bytes: Range<usize>,
    ) {
        let len = bytes.len();
        // A run's pieces fit one send's gather array.
        let max_segments = max_segments.min(MAX_PIECES);
        if let Some(current) = self.runs.last_mut() {
            let last = self.spans.last_mut().expect("a run has a piece");
            let joins = current.destination == destination
                && current.source == source
                && current.last_len == current.segment
                && len <= current.segment
                && current.segment <= current.segment_limit
                && current.count < max_segments
                && (current.count + 1) * current.segment <= MAX_GSO_BYTES
                && (self.gathers || last.end == bytes.start);
            if joins {
                current.count += 1;
                current.last_len = len;
                if last.end == bytes.start {
                    last.end = bytes.end;
                } else {
                    self.spans.push(bytes);
                    current.pieces.end += 1;
                }
                return;
            }
        }
        self.runs.push(Run {
            destination,
            source,
            segment_limit: egress.gso_segment_limit(destination),
            count: 1,
            segment: len,
            last_len: len,
            pieces: self.spans.len()..self.spans.len() + 1,
        });
        self.spans.push(bytes);
    }

    /// Sends every queued run from `area` and forgets them.
    pub fn send(&mut self, area: &[u8], egress: &Egress, stats: &mut DataStats) {
        if self.runs.is_empty() {
            return;
        }
        // Only as many pieces (and messages) as are in use are set up: a
        // lone packet's send was more instructions in arrays for a full
        // area than in anything else (callgrind: 1,080 of them a ping,
        // before that 9,600 with a closure per slot).
        if self.spans.len() <= FEW {
            self.send_runs::<FEW, FEW>(area, egress, stats);
        } else {
            self.send_runs::<MAX_PIECES, SEND_BATCH>(area, egress, stats);
        }
        self.runs.clear();
        self.spans.clear();
    }

    /// Sends the runs, each `sendmmsg` at most `M` of them gathered from
    /// at most `P` pieces.
    fn send_runs<const P: usize, const M: usize>(
        &self,
        area: &[u8],
        egress: &Egress,
        stats: &mut DataStats,
    ) {
        let mut next = 0;
        let mut waits = 0;
        while next < self.runs.len() {
            let first_piece = self.runs[next].pieces.start;
            let batch_len = self.runs[next..]
                .iter()
                .take(M)
                .take_while(|run| run.pieces.end - first_piece <= P)
                .count();
            let batch = &self.runs[next..next + batch_len];
            let mut pieces = [IoSlice::new(&[]); P];
            let last_piece = batch.last().map_or(first_piece, |run| run.pieces.end);
            for (piece, span) in pieces.iter_mut().zip(&self.spans[first_piece..last_piece]) {
                *piece = IoSlice::new(&area[span.clone()]);
            }
            let mut messages = [GsoMessage::EMPTY; M];
            for (message, run) in messages.iter_mut().zip(batch) {
                *message = GsoMessage {
                    destination: run.destination,
                    source: run.source,
                    pieces: &pieces[run.pieces.start - first_piece..run.pieces.end - first_piece],
                    segment_size: (run.count > 1).then_some(run.segment as u16),
                };
            }
            match egress.send_or_wait(&messages[..batch.len()], &mut waits) {
                Sent::Count(sent) => {
                    stats.udp_sends += sent as u64;
                    next += sent;
                }
                Sent::Again => {}
                Sent::Failed(error) => {
                    self.fall_back(&batch[0], error, area, egress, stats);
                    next += 1;
                }
            }
        }
    }

    /// The kernel refused `run`'s message with `error`: no segmentation
    /// on the path, a segment too large for a route whose MTU shrank
    /// since its socket connected, or a source we no longer have, and the
    /// run goes one datagram at a time; anything else drops it.
    fn fall_back(
        &self,
        run: &Run,
        error: std::io::Error,
        area: &[u8],
        egress: &Egress,
        stats: &mut DataStats,
    ) {
        let refused_gso = error.raw_os_error() == Some(libc::EIO) && run.count > 1;
        let segment_too_large = error.raw_os_error() == Some(libc::EINVAL)
            && run.count > 1
            && run.segment > DEFAULT_GSO_SEGMENT;
        if !(refused_gso || segment_too_large || is_stale_source(&error, run.source)) {
            stats.udp_send_errors += 1;
            tracing::trace!(%error, destination = %run.destination, "UDP send failed");
            return;
        }
        // No segmentation: every later run one datagram at a time too. Too
        // large: later runs in smaller segments. A gone source: from the
        // route's choice (rare, so not worth a GSO path).
        if refused_gso {
            egress.refuse_gso(&error);
        }
        if segment_too_large {
            egress.shrink_gso_segments(run.destination);
        }
        for span in &self.spans[run.pieces.clone()] {
            for datagram in area[span.clone()].chunks(run.segment.max(1)) {
                if egress.send_blocking(run.destination, run.source, datagram, stats) {
                    stats.udp_sends += 1;
                }
            }
        }
    }

    /// Each run: destination, where its bytes start and end, segment and
    /// datagram count.
    #[cfg(test)]
    pub(crate) fn runs(&self) -> Vec<(SocketAddr, Range<usize>, usize, usize)> {
        self.runs
            .iter()
            .map(|run| {
                let start = self.spans[run.pieces.start].start;
                let end = self.spans[run.pieces.end - 1].end;
                (run.destination, start..end, run.segment, run.count)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run from an IPv6 address the host does not have (one removed
    /// since the peer's datagram arrived at it) is refused with `EINVAL`; its
    /// datagrams go again one at a time from the route's choice, and
    /// arrive as they were.
    #[test]
    fn a_run_from_a_gone_source_leaves_from_the_routes_choice() {
        let egress = Egress::bind(0, 0).unwrap();
        let receiver = std::net::UdpSocket::bind("[::1]:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let to = receiver.local_addr().unwrap();
        let gone = Some("fd00::fe".parse().unwrap());
        let area: Vec<u8> = (0..250u8).collect();
        for back_to_back in [false, true] {
            let mut batch = if back_to_back {
                GsoBatch::back_to_back()
            } else {
                GsoBatch::gathering(4)
            };
            for range in [0..100, 100..200, 200..250] {
                batch.push(&egress, egress.max_gso_segments(), to, gone, range);
            }
            let mut stats = DataStats::default();
            batch.send(&area, &egress, &mut stats);
            assert!(batch.is_empty());
            assert_eq!((stats.udp_sends, stats.udp_send_errors), (3, 0));
            let mut buf = [0u8; 200];
            for expected in [0..100usize, 100..200, 200..250] {
                let (len, from) = receiver.recv_from(&mut buf).unwrap();
                assert_eq!(&buf[..len], &area[expected]);
                assert_eq!(from.port(), egress.port());
            }
        }
    }
}
