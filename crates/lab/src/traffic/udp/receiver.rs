//! The receiver thread of a trial: count, check and time every frame
//! until the sender's finish plus the drain time (see the parent module).

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use fjord_sys::mmsg::{self, Received};
use fjord_sys::socket::{SocketBuffer, force_buffer_size, socket_drops};
use fjord_sys::thread::{monotonic_nanos, thread_cpu_time};
use hdrhistogram::Histogram;

use super::{Realtime, ReceiverReport, Shared, aborted, check_abort, context, nanos};
use crate::traffic::frame::{
    FrameSizes, IpVersion, PayloadHeader, WARMUP_STREAM, udp_payload_bytes,
};

/// Datagrams per `recvmmsg`.
const RECEIVE_BATCH: usize = 256;
/// Receive buffer asked for; large so bursts and scheduling hiccups of the
/// receiver thread do not lose frames.
const RECEIVE_BUFFER_BYTES: usize = 64 << 20;
/// How often a waiting receiver wakes to check whether to stop.
const RECEIVE_POLL: Duration = Duration::from_millis(10);
/// Sequence numbers at or above this are treated as corrupt (the duplicate
/// bitmap would grow past 512 MiB).
const MAX_SEQUENCE: u64 = 1 << 32;
/// Highest latency the histogram records exactly (100 s); above saturates.
const MAX_LATENCY_NS: u64 = 100_000_000_000;

/// Receiver state while a trial runs.
struct Tally<'a> {
    frames: &'a FrameSizes,
    ip: IpVersion,
    stream: u16,
    /// Whether the sender stamps frames by this receiver's clock (one
    /// machine): only then is latency measured, and drains by it.
    one_clock: bool,
    /// One bit per sequence number seen.
    seen: Vec<u64>,
    max_latency_ns: u64,
    report: ReceiverReport,
}

impl Tally<'_> {
    fn record(&mut self, payload: &[u8], length: usize, now: u64, shared: &Shared) {
        let header = if length > payload.len() {
            None
        } else {
            PayloadHeader::parse(&payload[..length])
        };
        let Some(header) = header else {
            self.report.foreign += 1;
            return;
        };
        if header.stream == WARMUP_STREAM {
            shared.warmed_up.store(true, Ordering::Release);
        }
        if header.stream != self.stream || header.sequence >= MAX_SEQUENCE {
            self.report.foreign += 1;
            return;
        }
        let sequence = header.sequence;
        let word = (sequence / 64) as usize;
        let bit = 1u64 << (sequence % 64);
        if word >= self.seen.len() {
            self.seen.resize((word + 1).next_power_of_two(), 0);
        }
        if self.seen[word] & bit != 0 {
            self.report.duplicates += 1;
            return;
        }
        self.seen[word] |= bit;

        let report = &mut self.report;
        report.received += 1;
        let frame_bytes = length + self.ip.frame_overhead_bytes();
        report.frame_bytes += frame_bytes as u64;
        if frame_bytes != self.frames.at(sequence) {
            report.size_mismatches += 1;
        }
        match report.highest_sequence {
            Some(highest) if sequence < highest => report.reordered += 1,
            Some(highest) if sequence > highest + 1 => report.gaps += 1,
            None if sequence > 0 => report.gaps += 1,
            _ => {}
        }
        report.highest_sequence = Some(
            report
                .highest_sequence
                .map_or(sequence, |h| h.max(sequence)),
        );
        if self.one_clock {
            let latency = header.latency_ns(now);
            self.max_latency_ns = self.max_latency_ns.max(latency);
            report.latency.saturating_record(latency.max(1));
        }
        if report.first_receive_ns == 0 {
            report.first_receive_ns = now;
        }
        report.last_receive_ns = now;
    }
}

/// What the receiver thread needs to know about its trial.
pub(super) struct Listen {
    pub bind: SocketAddr,
    pub frames: FrameSizes,
    pub stream: u16,
    /// Least listening time after the sender finished.
    pub drain: Duration,
    /// Last resort if the sender's finish never comes.
    pub give_up_after: Duration,
    pub realtime_priority: Option<i32>,
    /// Whether the sender runs on this machine (see [`Tally::one_clock`]).
    pub one_clock: bool,
}

/// The receiver thread: bind, report ready, count until the sender's
/// finish plus the drain time.
pub(super) fn receive(
    listen: &Listen,
    shared: &Shared,
    ready: mpsc::Sender<()>,
) -> io::Result<ReceiverReport> {
    let Listen {
        bind,
        ref frames,
        stream,
        drain,
        give_up_after,
        realtime_priority,
        one_clock,
    } = *listen;
    let ip = IpVersion::of(&bind);
    let socket =
        UdpSocket::bind(bind).map_err(|e| context(e, &format!("bind the receiver to {bind}")))?;
    force_buffer_size(socket.as_fd(), SocketBuffer::Receive, RECEIVE_BUFFER_BYTES)
        .map_err(|e| context(e, "raise the receive buffer"))?;
    socket.set_read_timeout(Some(RECEIVE_POLL))?;
    // Room for the largest frame and one byte more, to see truncation.
    let buffer_bytes = udp_payload_bytes(frames.max_bytes(), ip).unwrap_or(0) + 1;
    let mut buffers = vec![vec![0u8; buffer_bytes]; RECEIVE_BATCH];
    let mut received = [Received::default(); RECEIVE_BATCH];
    // Bounds cover 1 ns to 100 s, far inside what 3 significant figures allow.
    let latency = Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3)
        .map_err(|e| io::Error::other(e.to_string()))?;
    let mut tally = Tally {
        frames,
        ip,
        stream,
        one_clock,
        seen: Vec::new(),
        max_latency_ns: 0,
        report: ReceiverReport::empty(latency),
    };
    let cpu_at_start = thread_cpu_time();
    let mut realtime = Realtime::enter(realtime_priority);
    // The sender starts only after this; if the caller is gone, so is the trial.
    ready.send(()).map_err(|_| aborted())?;
    let started = monotonic_nanos();
    loop {
        let batch = buffers.iter_mut().map(Vec::as_mut_slice);
        match mmsg::recv_batch(socket.as_fd(), batch, &mut received) {
            Ok(count) => {
                let now = monotonic_nanos();
                // A full batch means more may be waiting: still busy.
                if count < RECEIVE_BATCH {
                    realtime.idle(now);
                } else {
                    realtime.busy(now);
                }
                for (buffer, meta) in buffers.iter().zip(&received).take(count) {
                    tally.record(buffer, meta.len, now, shared);
                }
            }
            Err(error)
                if matches!(
                    error.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                ) =>
            {
                realtime.idle(monotonic_nanos());
            }
            Err(error) => return Err(context(error, "recvmmsg")),
        }
        check_abort(&shared.abort)?;
        let now = monotonic_nanos();
        let done = shared.sender_done_ns.load(Ordering::Acquire);
        if done != 0 {
            let drain_ns = nanos(drain).max(2 * tally.max_latency_ns.min(MAX_LATENCY_NS));
            if now >= done + drain_ns {
                break;
            }
        }
        if now - started > nanos(give_up_after) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the sender did not finish within {give_up_after:?}"),
            ));
        }
    }
    tally.report.socket_drops = socket_drops(socket.as_fd()).unwrap_or(0);
    tally.report.cpu_time = thread_cpu_time().saturating_sub(cpu_at_start);
    Ok(tally.report)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(frames: &FrameSizes) -> Tally<'_> {
        Tally {
            frames,
            ip: IpVersion::V4,
            stream: 7,
            one_clock: true,
            seen: Vec::new(),
            max_latency_ns: 0,
            report: ReceiverReport::empty(
                Histogram::new_with_bounds(1, MAX_LATENCY_NS, 3).unwrap(),
            ),
        }
    }

    fn frame(stream: u16, sequence: u64, send_time_ns: u64) -> Vec<u8> {
        let mut payload = vec![0u8; 18];
        PayloadHeader {
            stream,
            sequence,
            send_time_ns,
        }
        .write(&mut payload);
        payload
    }

    #[test]
    fn tally_counts_loss_reordering_and_duplicates() {
        let frames = FrameSizes::fixed(64);
        let mut tally = tally(&frames);
        let shared = Shared::default();
        // 0 1 3 2 2 6 (4 and 5 lost), a warm-up frame and junk.
        for sequence in [0, 1, 3, 2, 2, 6] {
            tally.record(&frame(7, sequence, 1_000), 18, 1_000 + 10_000, &shared);
        }
        tally.record(&frame(WARMUP_STREAM, 0, 0), 18, 5, &shared);
        tally.record(&[0u8; 18], 18, 5, &shared);
        tally.record(&frame(7, 9, 0), 30, 5, &shared);
        let report = &tally.report;
        assert_eq!(report.received, 5);
        assert_eq!(report.duplicates, 1);
        assert_eq!(report.reordered, 1);
        assert_eq!(report.gaps, 2);
        assert_eq!(report.highest_sequence, Some(6));
        assert_eq!(report.missing_below_highest(), 2);
        assert_eq!(report.foreign, 3);
        assert_eq!(report.frame_bytes, 5 * 64);
        assert_eq!(report.size_mismatches, 0);
        assert!(shared.warmed_up.load(Ordering::Relaxed));
        assert_eq!(report.latency.len(), 5);
        assert_eq!(
            report.latency.max(),
            report.latency.highest_equivalent(10_000)
        );
    }
}
