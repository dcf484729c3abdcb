//! Counters of one emulated direction, and why frames were dropped.
//!
//! Every frame read is accounted for once it leaves the emulator:
//! `frames_in + duplicated = frames_out + dropped (all but socket overruns)
//! + in_flight_frames`. Socket overruns are frames the kernel dropped before
//! the emulator could read them, so they are not in `frames_in`.

use std::time::Duration;

/// Why a frame did not cross the link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Independent random loss.
    RandomLoss,
    /// Gilbert–Elliott (bursty) loss.
    BurstLoss,
    /// Tail drop: the rate limiter's queue was full.
    QueueFull,
    /// Larger than the interface's MTU plus Ethernet framing: an offload
    /// super-frame that no wire would carry and the egress cannot send.
    Oversize,
    /// Every frame slot was in use (the emulator's own buffer, sized from
    /// the delay; see `EmulatorOptions::buffer_frames`).
    NoBuffer,
    /// The egress socket refused the frame.
    SendFailed,
}

/// Dropped frames by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DropCounts {
    pub random_loss: u64,
    pub burst_loss: u64,
    pub queue_full: u64,
    pub oversize: u64,
    pub no_buffer: u64,
    pub send_failed: u64,
    /// Frames the kernel dropped because the emulator's socket buffer was
    /// full (the emulator fell behind); never read, so not in `frames_in`.
    pub socket_overrun: u64,
}

impl DropCounts {
    pub fn count(&mut self, reason: DropReason) {
        let counter = match reason {
            DropReason::RandomLoss => &mut self.random_loss,
            DropReason::BurstLoss => &mut self.burst_loss,
            DropReason::QueueFull => &mut self.queue_full,
            DropReason::Oversize => &mut self.oversize,
            DropReason::NoBuffer => &mut self.no_buffer,
            DropReason::SendFailed => &mut self.send_failed,
        };
        *counter += 1;
    }

    /// Drops of frames that were read (all but socket overruns).
    pub fn after_read(&self) -> u64 {
        self.random_loss
            + self.burst_loss
            + self.queue_full
            + self.oversize
            + self.no_buffer
            + self.send_failed
    }

    pub fn total(&self) -> u64 {
        self.after_read() + self.socket_overrun
    }
}

/// Counters of one direction since the emulator started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    pub frames_in: u64,
    pub bytes_in: u64,
    pub frames_out: u64,
    pub bytes_out: u64,
    pub dropped: DropCounts,
    /// Extra copies made (each also counted out or dropped).
    pub duplicated: u64,
    /// Frames held back so later ones overtake them.
    pub reordered: u64,
    /// Most frames and bytes the rate limiter's queue held at once.
    pub queue_high_water_packets: u64,
    pub queue_high_water_bytes: u64,
    /// Frames waiting for their release time right now.
    pub in_flight_frames: u64,
    /// Timing error of sent frames against their release times: summed
    /// (late and early apart) and at worst. The emulator wakes ahead of a
    /// release by its measured wakeup latency and sends what is due within
    /// half of it, so frames leave within about half a wakeup latency of
    /// their time either way, and on time on average.
    pub release_late_total: Duration,
    pub release_early_total: Duration,
    pub release_late_max: Duration,
    pub release_early_max: Duration,
    /// Largest frame read, in bytes (Ethernet header included): with
    /// offloads off it never exceeds the MTU plus 18.
    pub largest_frame_bytes: u64,
}

impl LinkStats {
    /// Mean timing error of the frames sent so far, seconds (positive:
    /// late).
    pub fn mean_release_error_secs(&self) -> f64 {
        if self.frames_out == 0 {
            return 0.0;
        }
        (self.release_late_total.as_secs_f64() - self.release_early_total.as_secs_f64())
            / self.frames_out as f64
    }

    /// Whether every frame read is accounted for (see the module docs).
    pub fn is_balanced(&self) -> bool {
        self.frames_in + self.duplicated
            == self.frames_out + self.dropped.after_read() + self.in_flight_frames
    }
}

/// Counters of both directions and the CPU the emulator's threads used.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    pub left_to_right: LinkStats,
    pub right_to_left: LinkStats,
    /// User and system CPU time of the emulator's threads (softirq work the
    /// kernel runs on their behalf, such as delivering sent frames to the
    /// far host's stack, included).
    pub cpu_time: Duration,
}
