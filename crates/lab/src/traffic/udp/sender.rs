//! The sender thread of a trial: connect, warm the path up, then offer
//! the frames paced, flooding or as one burst (see the parent module).

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fjord_sys::mmsg::{self, SendRefusal};
use fjord_sys::socket::{SocketBuffer, force_buffer_size};
use fjord_sys::thread::{monotonic_nanos, set_thread_timer_slack, thread_cpu_time};

use super::{
    Carrier, CarrierSender, Offer, Realtime, SEND_BATCH, SenderReport, Shared, Trial, aborted,
    check_abort, context, nanos,
};
use crate::traffic::frame::{
    FrameSizes, IpVersion, PayloadHeader, WARMUP_STREAM, udp_payload_bytes,
};

/// Send buffer asked for; large so the socket never throttles a paced sender.
const SEND_BUFFER_BYTES: usize = 32 << 20;
/// Interval between warm-up frames.
const WARMUP_INTERVAL: Duration = Duration::from_millis(5);

/// The sender's reusable batch: one buffer per slot, sized for the
/// largest frame, and the payload length of each slot.
struct Batch {
    buffers: Vec<Vec<u8>>,
    lengths: [usize; SEND_BATCH],
}

/// Where the sender's datagrams go: its own connected socket, or the
/// sending end of the path's carrier.
enum Output {
    Socket(UdpSocket),
    Carried(Box<dyn CarrierSender>),
}

impl Output {
    /// As `sendmmsg`: how many of `datagrams` (at most [`SEND_BATCH`])
    /// were taken; an error is the first one's.
    fn send_batch<'a>(&mut self, datagrams: impl Iterator<Item = &'a [u8]>) -> io::Result<usize> {
        match self {
            Output::Socket(socket) => mmsg::send_batch(socket.as_fd(), datagrams),
            Output::Carried(carrier) => {
                let mut batch: [&[u8]; SEND_BATCH] = [&[]; SEND_BATCH];
                let mut count = 0;
                for (slot, datagram) in batch.iter_mut().zip(datagrams) {
                    *slot = datagram;
                    count += 1;
                }
                carrier.send(&batch[..count])
            }
        }
    }

    /// Sends one datagram (a warm-up frame).
    fn send_one(&mut self, datagram: &[u8]) -> io::Result<()> {
        match self {
            Output::Socket(socket) => socket.send(datagram).map(drop),
            Output::Carried(carrier) => carrier.send(&[datagram]).map(drop),
        }
    }

    fn wait_writable(&self, timeout: Duration) {
        match self {
            Output::Socket(socket) => fjord_sys::poll::wait_writable(socket.as_fd(), timeout),
            Output::Carried(carrier) => carrier.wait_writable(timeout),
        }
    }
}

struct Sender<'a> {
    output: Output,
    frames: &'a FrameSizes,
    ip: IpVersion,
    stream: u16,
    batch: Batch,
    report: SenderReport,
}

impl Sender<'_> {
    /// Sends frames `first..first + count` (count ≤ SEND_BATCH) as one batch
    /// stamped now. `wait_when_full`: on a full socket buffer wait and retry
    /// (flood, burst) instead of counting the rest as refused (paced).
    fn send(
        &mut self,
        first: u64,
        count: usize,
        wait_when_full: bool,
        abort: &AtomicBool,
    ) -> io::Result<()> {
        let now = monotonic_nanos();
        if self.report.first_send_ns == 0 {
            self.report.first_send_ns = now;
        }
        self.report.last_send_ns = now;
        for slot in 0..count {
            let sequence = first + slot as u64;
            let frame_bytes = self.frames.at(sequence);
            // Trial::validate checked every size of the pattern.
            let payload = udp_payload_bytes(frame_bytes, self.ip).unwrap_or(0);
            let header = PayloadHeader {
                stream: self.stream,
                sequence,
                send_time_ns: now,
            };
            header.write(&mut self.batch.buffers[slot]);
            self.batch.lengths[slot] = payload;
            self.report.frame_bytes += frame_bytes as u64;
        }
        let mut done = 0;
        while done < count {
            let datagrams = self.batch.buffers[done..count]
                .iter()
                .zip(&self.batch.lengths[done..count])
                .map(|(buffer, &length)| &buffer[..length]);
            match self.output.send_batch(datagrams) {
                Ok(0) => return Err(io::Error::other("sendmmsg sent nothing")),
                Ok(sent) => {
                    self.report.sent += sent as u64;
                    done += sent;
                }
                Err(error) => match mmsg::send_refusal(&error) {
                    Some(SendRefusal::BufferFull) if wait_when_full => {
                        if abort.load(Ordering::Relaxed) {
                            return Err(aborted());
                        }
                        self.output.wait_writable(Duration::from_millis(10));
                    }
                    Some(SendRefusal::BufferFull) => {
                        self.report.refused += (count - done) as u64;
                        done = count;
                    }
                    Some(SendRefusal::Dropped) => {
                        self.report.refused += 1;
                        done += 1;
                    }
                    None => return Err(io::Error::new(error.kind(), format!("sendmmsg: {error}"))),
                },
            }
        }
        Ok(())
    }
}

fn unspecified(ip: IpVersion) -> SocketAddr {
    match ip {
        IpVersion::V4 => (Ipv4Addr::UNSPECIFIED, 0).into(),
        IpVersion::V6 => (Ipv6Addr::UNSPECIFIED, 0).into(),
    }
}

/// The sender's own socket, connected to `destination`, non-blocking.
fn connected_socket(destination: SocketAddr) -> io::Result<UdpSocket> {
    let socket = UdpSocket::bind(unspecified(IpVersion::of(&destination)))
        .map_err(|e| context(e, "bind the sender socket"))?;
    socket
        .connect(destination)
        .map_err(|e| context(e, &format!("connect to {destination}")))?;
    force_buffer_size(socket.as_fd(), SocketBuffer::Send, SEND_BUFFER_BYTES)
        .map_err(|e| context(e, "raise the send buffer"))?;
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// The sender thread: connect (or open the carrier), warm up, offer.
pub(super) fn send(
    destination: SocketAddr,
    carrier: Option<&dyn Carrier>,
    trial: &Trial,
    stream: u16,
    shared: &Shared,
) -> io::Result<SenderReport> {
    let ip = IpVersion::of(&destination);
    let output = match carrier {
        Some(carrier) => Output::Carried(
            carrier
                .open(destination)
                .map_err(|e| context(e, "open the carrier"))?,
        ),
        None => Output::Socket(connected_socket(destination)?),
    };
    set_thread_timer_slack(Duration::from_micros(1))?;

    let max_payload = udp_payload_bytes(trial.frames.max_bytes(), ip).unwrap_or(0);
    let mut sender = Sender {
        output,
        frames: &trial.frames,
        ip,
        stream,
        batch: Batch {
            buffers: vec![vec![0u8; max_payload]; SEND_BATCH],
            lengths: [0; SEND_BATCH],
        },
        report: SenderReport {
            scheduled: 0,
            sent: 0,
            refused: 0,
            unsent: 0,
            frame_bytes: 0,
            first_send_ns: 0,
            last_send_ns: 0,
            max_lag: Duration::ZERO,
            cpu_time: Duration::ZERO,
        },
    };
    let cpu_at_start = thread_cpu_time();
    warm_up(&mut sender.output, ip, trial.warmup_timeout, shared)?;

    match trial.offer {
        Offer::Rate {
            frames_per_sec,
            duration,
        } => {
            let mut realtime = Realtime::enter(trial.realtime_priority);
            pace(
                &mut sender,
                frames_per_sec,
                duration,
                trial.pacing_quantum,
                &mut realtime,
                &shared.abort,
            )?;
        }
        Offer::Flood { duration } => {
            let end = monotonic_nanos() + nanos(duration);
            let mut next = 0u64;
            while monotonic_nanos() < end {
                check_abort(&shared.abort)?;
                sender.send(next, SEND_BATCH, true, &shared.abort)?;
                next += SEND_BATCH as u64;
            }
            sender.report.scheduled = next;
        }
        Offer::Burst { frames } => {
            let mut next = 0u64;
            while next < frames {
                check_abort(&shared.abort)?;
                let count = (frames - next).min(SEND_BATCH as u64) as usize;
                sender.send(next, count, true, &shared.abort)?;
                next += count as u64;
            }
            sender.report.scheduled = frames;
        }
    }
    sender.report.cpu_time = thread_cpu_time().saturating_sub(cpu_at_start);
    Ok(sender.report)
}

/// Sends a warm-up frame every [`WARMUP_INTERVAL`] until the receiver saw one.
fn warm_up(
    output: &mut Output,
    ip: IpVersion,
    timeout: Duration,
    shared: &Shared,
) -> io::Result<()> {
    let mut frame = vec![0u8; udp_payload_bytes(ip.min_frame_bytes(), ip).unwrap_or(0)];
    let start = monotonic_nanos();
    let mut sequence = 0;
    while !shared.warmed_up.load(Ordering::Acquire) {
        check_abort(&shared.abort)?;
        let now = monotonic_nanos();
        if now - start > nanos(timeout) {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "no warm-up frame reached the receiver within {timeout:?}: is the path up?"
                ),
            ));
        }
        PayloadHeader {
            stream: WARMUP_STREAM,
            sequence,
            send_time_ns: now,
        }
        .write(&mut frame);
        sequence += 1;
        if let Err(error) = output.send_one(&frame)
            && mmsg::send_refusal(&error).is_none()
        {
            return Err(context(error, "send a warm-up frame"));
        }
        std::thread::sleep(WARMUP_INTERVAL);
    }
    Ok(())
}

/// Offers `frames_per_sec` for `duration` on a schedule computed from the
/// start (see the module comment).
fn pace(
    sender: &mut Sender<'_>,
    frames_per_sec: f64,
    duration: Duration,
    quantum: Duration,
    realtime: &mut Realtime,
    abort: &AtomicBool,
) -> io::Result<()> {
    let total = (frames_per_sec * duration.as_secs_f64()).round() as u64;
    sender.report.scheduled = total;
    let interval_ns = 1e9 / frames_per_sec;
    let quantum_ns = nanos(quantum);
    let start = monotonic_nanos();
    let give_up = start + nanos(duration) + nanos(duration / 50) + 5_000_000;
    let mut next = 0u64;
    while next < total {
        check_abort(abort)?;
        let wake = monotonic_nanos();
        if wake > give_up {
            sender.report.unsent = total - next;
            break;
        }
        // Everything due by now, in batches.
        loop {
            let now = monotonic_nanos();
            let due = (((now - start) as f64 / interval_ns) as u64 + 1).min(total);
            if next >= due {
                break;
            }
            let due_at = start + (next as f64 * interval_ns) as u64;
            let lag = Duration::from_nanos(now.saturating_sub(due_at));
            sender.report.max_lag = sender.report.max_lag.max(lag);
            realtime.busy(now);
            let count = (due - next).min(SEND_BATCH as u64) as usize;
            sender.send(next, count, false, abort)?;
            next += count as u64;
            if now > give_up {
                break;
            }
        }
        if next >= total {
            break;
        }
        let next_due = start + (next as f64 * interval_ns).ceil() as u64;
        let until = next_due.max(wake + quantum_ns);
        let now = monotonic_nanos();
        realtime.idle(now);
        if until > now {
            std::thread::sleep(Duration::from_nanos(until - now));
        }
    }
    Ok(())
}
