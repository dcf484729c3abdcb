//! What a trial's two sides report, and the figures derived from them:
//! frames offered, sent and received, the loss between, the rate of
//! arrivals and their latency.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::traffic::frame::FrameSizes;
use crate::traffic::latency::LatencySummary;

/// The sender's side of a trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SenderReport {
    /// Frames the offer called for (for a flood: those offered).
    pub scheduled: u64,
    /// Frames the kernel accepted.
    pub sent: u64,
    /// Frames offered but refused by the local stack (buffer full): lost.
    pub refused: u64,
    /// Frames never offered because the sender fell too far behind.
    pub unsent: u64,
    /// Ethernet frame bytes of the offered frames (sent and refused).
    pub frame_bytes: u64,
    /// Monotonic ns of the first and the last batch.
    pub first_send_ns: u64,
    pub last_send_ns: u64,
    /// Longest time a batch left after its first frame was due (pacing only).
    pub max_lag: Duration,
    /// CPU time the sender thread used (kernel work done on its behalf
    /// included, such as the path's processing of what it sent).
    pub cpu_time: Duration,
}

impl SenderReport {
    /// Frames offered to the path: sent plus refused.
    pub fn offered(&self) -> u64 {
        self.sent + self.refused
    }

    /// Time from the first batch to the last.
    pub fn elapsed(&self) -> Duration {
        Duration::from_nanos(self.last_send_ns.saturating_sub(self.first_send_ns))
    }

    /// Frames per second offered: `(offered − 1)` frame intervals over the
    /// time from first to last batch (0 with fewer than two frames).
    pub fn offered_frames_per_sec(&self) -> f64 {
        rate(self.offered(), self.first_send_ns, self.last_send_ns)
    }
}

/// The receiver's side of a trial; a worker's report across hosts leaves
/// the latency out (two hosts' clocks give none).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReceiverReport {
    /// Distinct frames of this trial that arrived.
    pub received: u64,
    pub duplicates: u64,
    /// Frames that arrived after a higher-numbered one.
    pub reordered: u64,
    /// Times a frame skipped past the next expected number.
    pub gaps: u64,
    pub highest_sequence: Option<u64>,
    /// Frames whose length was not the one the pattern gives their number.
    pub size_mismatches: u64,
    /// Datagrams that were not this trial's frames (warm-up, strays, junk).
    pub foreign: u64,
    /// Datagrams the receiver's own socket dropped (tester overload).
    pub socket_drops: u64,
    /// Ethernet frame bytes of the distinct frames received.
    pub frame_bytes: u64,
    pub first_receive_ns: u64,
    pub last_receive_ns: u64,
    /// One-way latency in ns of each distinct frame.
    #[serde(skip, default = "unmeasured_latency")]
    pub latency: Histogram<u64>,
    /// CPU time the receiver thread used.
    pub cpu_time: Duration,
}

impl ReceiverReport {
    /// A report of nothing received yet, recording latency into `latency`.
    pub fn empty(latency: Histogram<u64>) -> Self {
        Self {
            received: 0,
            duplicates: 0,
            reordered: 0,
            gaps: 0,
            highest_sequence: None,
            size_mismatches: 0,
            foreign: 0,
            socket_drops: 0,
            frame_bytes: 0,
            first_receive_ns: 0,
            last_receive_ns: 0,
            latency,
            cpu_time: Duration::ZERO,
        }
    }

    /// Frames below the highest number seen that never arrived.
    pub fn missing_below_highest(&self) -> u64 {
        self.highest_sequence
            .map_or(0, |highest| (highest + 1).saturating_sub(self.received))
    }

    /// Frames per second between the first and the last arrival.
    pub fn received_frames_per_sec(&self) -> f64 {
        rate(self.received, self.first_receive_ns, self.last_receive_ns)
    }
}

/// An empty latency histogram, for a report read back without one.
fn unmeasured_latency() -> Histogram<u64> {
    // Three significant figures are within what hdrhistogram allows (0-5).
    Histogram::new(3).expect("3 significant figures are valid")
}

fn rate(frames: u64, first_ns: u64, last_ns: u64) -> f64 {
    if frames < 2 || last_ns <= first_ns {
        return 0.0;
    }
    (frames - 1) as f64 / ((last_ns - first_ns) as f64 / 1e9)
}

/// Both sides of one trial.
#[derive(Debug, Clone)]
pub struct TrialReport {
    pub frames: FrameSizes,
    /// The paced rate asked for (none for floods and bursts).
    pub target_frames_per_sec: Option<f64>,
    pub sender: SenderReport,
    pub receiver: ReceiverReport,
}

impl TrialReport {
    /// Offered frames that did not arrive.
    pub fn lost(&self) -> u64 {
        self.sender.offered().saturating_sub(self.receiver.received)
    }

    /// Lost over offered (0 when nothing was offered).
    pub fn loss_ratio(&self) -> f64 {
        match self.sender.offered() {
            0 => 0.0,
            offered => self.lost() as f64 / offered as f64,
        }
    }

    /// Whether the sender offered every scheduled frame.
    pub fn offered_in_full(&self) -> bool {
        self.sender.unsent == 0
    }

    /// Offered in full with a loss ratio of at most `tolerance`.
    pub fn passed(&self, tolerance: f64) -> bool {
        self.offered_in_full()
            && self.sender.offered() > 0
            && if tolerance <= 0.0 {
                self.lost() == 0
            } else {
                self.loss_ratio() <= tolerance
            }
    }

    pub fn latency_summary(&self) -> LatencySummary {
        LatencySummary::from_histogram(&self.receiver.latency)
    }

    /// Ethernet frame bits per second arriving (frame bytes × 8, no
    /// preamble or gap), between first and last arrival.
    pub fn received_frame_bits_per_sec(&self) -> f64 {
        let frames_per_sec = self.receiver.received_frames_per_sec();
        match self.receiver.received {
            0 => 0.0,
            received => frames_per_sec * self.receiver.frame_bytes as f64 / received as f64 * 8.0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passing_needs_the_full_offer_and_no_loss() {
        let frames = FrameSizes::fixed(64);
        let receiver = ReceiverReport::empty(Histogram::new(3).unwrap());
        let sender = SenderReport {
            scheduled: 100,
            sent: 98,
            refused: 2,
            unsent: 0,
            frame_bytes: 6400,
            first_send_ns: 1,
            last_send_ns: 1_000_000_001,
            max_lag: Duration::ZERO,
            cpu_time: Duration::ZERO,
        };
        let mut report = TrialReport {
            frames,
            target_frames_per_sec: Some(100.0),
            sender,
            receiver: ReceiverReport {
                received: 98,
                ..receiver
            },
        };
        assert_eq!(report.lost(), 2);
        assert!(!report.passed(0.0));
        assert!(report.passed(0.02));
        assert!((report.sender.offered_frames_per_sec() - 99.0).abs() < 1e-9);
        report.sender.unsent = 1;
        assert!(!report.passed(0.5));
    }
}
