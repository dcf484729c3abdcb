//! One direction's I/O: read frames from the ingress interface in batches,
//! pass each through the [`LinkModel`], hold it in a frame slot until its
//! release time, and send due frames out of the egress interface in
//! batches.
//!
//! ```text
//! ingress socket ─recvmmsg─▶ slot ─LinkModel─▶ ReleaseQueue ─due─▶ sendmmsg─▶ egress socket
//!                               ╰── dropped: slot back to the free list ──╯
//! ```
//!
//! Frame slots are boxed buffers of MTU + Ethernet framing, allocated on
//! first use up to a fixed count and recycled through a free list, so a
//! warmed-up link allocates nothing. Arrival times come from the kernel's
//! receive timestamps, so a frame's delay does not depend on when the pump
//! got round to reading it; that lets the pump read every
//! [`Pump::read_interval`] in large batches instead of waking per frame.

use std::io;
use std::mem;
use std::os::fd::AsFd;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use fjord_sys::mmsg::{self, Received};
use fjord_sys::packet::{ETHERNET_OVERHEAD_BYTES, PacketSocket};

use super::link::{LinkModel, Verdict};
use super::scheduler::ReleaseQueue;
use super::stats::{DropReason, LinkStats};

/// Most frames one receive or send batch moves.
const MAX_BATCH: usize = 64;

/// Longest a pump defers reading a busy ingress (only when the link's
/// delay is at least twice as long, so no frame is read after it is due).
const MAX_READ_INTERVAL: Duration = Duration::from_millis(1);

/// Below this, reading is not deferred at all.
const MIN_READ_INTERVAL: Duration = Duration::from_micros(20);

/// A kernel timestamp older than this is taken as a wall-clock step and
/// ignored (the frame counts as arriving when read).
const MAX_TIMESTAMP_AGE: Duration = Duration::from_secs(1);

/// How soon to retry when the egress socket would block.
pub(crate) const SEND_RETRY: Duration = Duration::from_micros(50);

/// The emulator's monotonic time: a `Duration` since it started, plus the
/// conversion of the kernel's wall-clock receive timestamps to it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Clock {
    epoch: Instant,
}

impl Clock {
    pub(crate) fn new() -> Self {
        Self {
            epoch: Instant::now(),
        }
    }

    pub(crate) fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// When a frame stamped `stamp` (wall clock) arrived, given that the
    /// wall clock read `wall_now` at monotonic `now`.
    fn arrival(stamp: Option<SystemTime>, now: Duration, wall_now: SystemTime) -> Duration {
        let age = stamp
            .and_then(|stamp| wall_now.duration_since(stamp).ok())
            .filter(|age| *age <= MAX_TIMESTAMP_AGE)
            .unwrap_or(Duration::ZERO);
        now.saturating_sub(age)
    }
}

/// A frame held in its slot until release.
#[derive(Debug)]
struct Frame {
    slot: Box<[u8]>,
    len: usize,
    release: Duration,
}

/// Which direction a pump serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Direction {
    LeftToRight,
    RightToLeft,
}

/// One direction: ingress socket, impairments, held frames, egress socket.
pub(crate) struct Pump {
    pub(crate) direction: Direction,
    ingress: Arc<PacketSocket>,
    egress: Arc<PacketSocket>,
    link: LinkModel,
    queue: ReleaseQueue<Frame>,
    /// Slots not holding a frame. Last in, first out, so the same few stay
    /// warm in the cache when the link is lightly loaded.
    free: Vec<Box<[u8]>>,
    slots_allocated: usize,
    slot_limit: usize,
    slot_bytes: usize,
    /// Frames longer than this are offload super-frames (ingress MTU + 18).
    max_frame_bytes: usize,
    /// Scratch for one receive batch: slots lent to recvmmsg, and results.
    receiving: Vec<Box<[u8]>>,
    received: [Received; MAX_BATCH],
    /// Due frames being sent (kept when the socket would block).
    sending: Vec<Frame>,
    read_interval: Duration,
    /// The pump reads again no earlier than this.
    next_read: Duration,
    last_arrival: Duration,
    send_blocked_at: Option<Duration>,
    warned_oversize: bool,
    warned_send: bool,
}

impl Pump {
    pub(crate) fn new(
        direction: Direction,
        ingress: Arc<PacketSocket>,
        egress: Arc<PacketSocket>,
        link: LinkModel,
        mtus: (u32, u32),
        slot_limit: usize,
    ) -> Self {
        let (ingress_mtu, egress_mtu) = mtus;
        let max_frame_bytes = ingress_mtu as usize + ETHERNET_OVERHEAD_BYTES;
        let slot_bytes =
            (ingress_mtu.max(egress_mtu) as usize + ETHERNET_OVERHEAD_BYTES).next_multiple_of(64);
        let half_delay = link.config().delay / 2;
        let read_interval = if half_delay < MIN_READ_INTERVAL {
            Duration::ZERO
        } else {
            half_delay.min(MAX_READ_INTERVAL)
        };
        Self {
            direction,
            ingress,
            egress,
            link,
            queue: ReleaseQueue::with_capacity(slot_limit.min(1 << 16)),
            free: Vec::with_capacity(slot_limit),
            slots_allocated: 0,
            slot_limit: slot_limit.max(MAX_BATCH),
            slot_bytes,
            max_frame_bytes,
            receiving: Vec::with_capacity(MAX_BATCH),
            received: [Received::default(); MAX_BATCH],
            sending: Vec::with_capacity(MAX_BATCH),
            read_interval,
            next_read: Duration::ZERO,
            last_arrival: Duration::ZERO,
            send_blocked_at: None,
            warned_oversize: false,
            warned_send: false,
        }
    }

    pub(crate) fn ingress(&self) -> &PacketSocket {
        &self.ingress
    }

    fn take_slot(&mut self) -> Option<Box<[u8]>> {
        if let Some(slot) = self.free.pop() {
            return Some(slot);
        }
        if self.slots_allocated < self.slot_limit {
            self.slots_allocated += 1;
            return Some(vec![0u8; self.slot_bytes].into_boxed_slice());
        }
        None
    }

    fn slots_available(&self) -> usize {
        self.free.len() + (self.slot_limit - self.slots_allocated)
    }

    /// Whether a read is due at `now` (and a slot is free to read into).
    pub(crate) fn wants_read(&self, now: Duration) -> bool {
        self.next_read <= now && self.slots_available() > 0
    }

    /// When the pump next reads, if it is deferring and has a free slot.
    pub(crate) fn deferred_read(&self, now: Duration) -> Option<Duration> {
        (self.next_read > now && self.slots_available() > 0).then_some(self.next_read)
    }

    /// When the pump next has frames to send.
    pub(crate) fn next_send(&self) -> Option<Duration> {
        match self.send_blocked_at {
            Some(at) => Some(at + SEND_RETRY),
            None => self.queue.next_release(),
        }
    }

    /// Reads up to a few batches; returns how many frames were read.
    pub(crate) fn read(&mut self, clock: &Clock, max_batches: usize) -> io::Result<usize> {
        let mut total = 0;
        for _ in 0..max_batches {
            let read = self.read_batch(clock)?;
            total += read;
            if read < MAX_BATCH {
                break;
            }
        }
        let now = clock.now();
        self.next_read = if total > 0 {
            now + self.read_interval
        } else {
            now
        };
        Ok(total)
    }

    fn read_batch(&mut self, clock: &Clock) -> io::Result<usize> {
        let want = MAX_BATCH.min(self.slots_available());
        while self.receiving.len() < want {
            match self.take_slot() {
                Some(slot) => self.receiving.push(slot),
                None => break,
            }
        }
        if self.receiving.is_empty() {
            return Ok(0);
        }
        let buffers = self.receiving.iter_mut().map(|slot| &mut slot[..]);
        let count = match mmsg::recv_batch(self.ingress.as_fd(), buffers, &mut self.received) {
            Ok(count) => count,
            Err(error) if is_transient_receive(&error) => 0,
            Err(error) => return Err(error),
        };
        let (now, wall_now) = (clock.now(), SystemTime::now());
        let mut batch = mem::take(&mut self.receiving);
        for (index, slot) in batch.drain(..count).enumerate() {
            let meta = self.received[index];
            self.admit(slot, meta, Clock::arrival(meta.timestamp, now, wall_now));
        }
        self.receiving = batch;
        Ok(count)
    }

    fn admit(&mut self, slot: Box<[u8]>, meta: Received, arrival: Duration) {
        let stats = self.link.stats_mut();
        stats.frames_in += 1;
        stats.bytes_in += meta.len as u64;
        stats.largest_frame_bytes = stats.largest_frame_bytes.max(meta.len as u64);
        if meta.truncated || meta.len > self.max_frame_bytes {
            stats.dropped.count(DropReason::Oversize);
            if !self.warned_oversize {
                self.warned_oversize = true;
                tracing::warn!(
                    interface = self.ingress.interface(),
                    frame_bytes = meta.len,
                    max_frame_bytes = self.max_frame_bytes,
                    "dropping frames larger than the MTU: segmentation offload is on upstream"
                );
            }
            self.free.push(slot);
            return;
        }
        // Timestamps of one socket only grow; the clamp guards clock steps.
        let arrival = arrival.max(self.last_arrival);
        self.last_arrival = arrival;
        match self.link.handle_frame(arrival, meta.len) {
            Verdict::Drop(_) => self.free.push(slot),
            Verdict::Forward { release, duplicate } => {
                if let Some(at) = duplicate {
                    match self.take_slot() {
                        Some(mut copy) => {
                            copy[..meta.len].copy_from_slice(&slot[..meta.len]);
                            self.queue.push(
                                at,
                                Frame {
                                    slot: copy,
                                    len: meta.len,
                                    release: at,
                                },
                            );
                        }
                        None => self.link.stats_mut().dropped.count(DropReason::NoBuffer),
                    }
                }
                self.queue.push(
                    release,
                    Frame {
                        slot,
                        len: meta.len,
                        release,
                    },
                );
            }
        }
    }

    /// Sends, in batches, every frame due by `horizon` (`now` plus half
    /// the thread's wakeup latency: sooner than the thread could wake again).
    pub(crate) fn send_due(&mut self, now: Duration, horizon: Duration) -> io::Result<()> {
        loop {
            while self.sending.len() < MAX_BATCH
                && let Some(frame) = self.queue.pop_due(horizon)
            {
                self.sending.push(frame);
            }
            if self.sending.is_empty() {
                self.send_blocked_at = None;
                return Ok(());
            }
            let frames = self.sending.iter().map(|frame| &frame.slot[..frame.len]);
            match mmsg::send_batch(self.egress.as_fd(), frames) {
                Ok(sent) => {
                    let stats = self.link.stats_mut();
                    for frame in self.sending.drain(..sent) {
                        stats.frames_out += 1;
                        stats.bytes_out += frame.len as u64;
                        if now >= frame.release {
                            let late = now - frame.release;
                            stats.release_late_total += late;
                            stats.release_late_max = stats.release_late_max.max(late);
                        } else {
                            let early = frame.release - now;
                            stats.release_early_total += early;
                            stats.release_early_max = stats.release_early_max.max(early);
                        }
                        self.free.push(frame.slot);
                    }
                }
                Err(error) if is_transient_send(&error) => {
                    self.send_blocked_at = Some(now);
                    return Ok(());
                }
                Err(error) => {
                    let frame = self.sending.remove(0);
                    self.link.stats_mut().dropped.count(DropReason::SendFailed);
                    if !self.warned_send {
                        self.warned_send = true;
                        tracing::warn!(
                            interface = self.egress.interface(),
                            frame_bytes = frame.len,
                            %error,
                            "could not send a frame; dropping it"
                        );
                    }
                    self.free.push(frame.slot);
                }
            }
        }
    }

    /// Counters as of now, kernel socket drops included.
    pub(crate) fn snapshot(&mut self) -> LinkStats {
        if let Ok(kernel) = self.ingress.take_statistics() {
            self.link.stats_mut().dropped.socket_overrun += kernel.drops;
        }
        let mut stats = *self.link.stats();
        stats.in_flight_frames = (self.queue.len() + self.sending.len()) as u64;
        stats
    }

    /// Publishes the counters where [`super::RunningEmulator::stats`] reads them.
    pub(crate) fn publish(&mut self, into: &Mutex<LinkStats>) {
        let stats = self.snapshot();
        if let Ok(mut shared) = into.lock() {
            *shared = stats;
        }
    }
}

/// Receive errors after which the pump just reads again later (a link
/// that went down may come back).
fn is_transient_receive(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted | io::ErrorKind::NetworkDown
    )
}

/// Send errors after which the pump retries the same frames; any other
/// error (link down, no buffer space) drops the frame, as a NIC would.
fn is_transient_send(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_timestamps_convert_to_emulator_time() {
        let wall = SystemTime::now();
        let now = Duration::from_secs(10);
        let stamp = wall - Duration::from_micros(700);
        assert_eq!(
            Clock::arrival(Some(stamp), now, wall),
            now - Duration::from_micros(700)
        );
        // No stamp, a stamp from the future, or a wall-clock step: arrival is now.
        assert_eq!(Clock::arrival(None, now, wall), now);
        assert_eq!(
            Clock::arrival(Some(wall + Duration::from_millis(1)), now, wall),
            now
        );
        assert_eq!(
            Clock::arrival(Some(wall - Duration::from_secs(5)), now, wall),
            now
        );
    }
}
