//! One-way latency at a stated load (RFC 2544 §26.2, with percentiles
//! instead of a single tagged frame).
//!
//! The generator runs at `load_percent` of a throughput found before (the
//! RFC 2544 zero-loss rate, or any rate the caller names) and every frame's
//! one-way latency goes into the histogram. Sender and receiver stamp
//! frames from `CLOCK_MONOTONIC` of the same host (the namespaces share the
//! clock), so one-way figures need no clock synchronisation; they include
//! the time from the sender's `sendmmsg` to the receiver's `recvmmsg`
//! returning — the kernel's and the tunnel's work, and the receiver
//! thread's scheduling, which on a loaded 2-core machine is part of what a
//! user sees too. Frames of one send batch share a send time, and frames of
//! one receive batch a receive time.

use std::time::Duration;

use hdrhistogram::Histogram;

use super::TrafficError;
use super::frame::FrameSizes;
use super::udp::{Trial, TrialReport, UdpPath};

/// Percentiles and extremes of one latency histogram.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LatencySummary {
    pub count: u64,
    pub min: Duration,
    pub mean: Duration,
    pub p50: Duration,
    pub p90: Duration,
    pub p99: Duration,
    pub p999: Duration,
    pub max: Duration,
}

impl LatencySummary {
    /// Summarises a histogram of nanoseconds (all zero when it is empty).
    pub fn from_histogram(histogram: &Histogram<u64>) -> Self {
        if histogram.is_empty() {
            return Self {
                count: 0,
                min: Duration::ZERO,
                mean: Duration::ZERO,
                p50: Duration::ZERO,
                p90: Duration::ZERO,
                p99: Duration::ZERO,
                p999: Duration::ZERO,
                max: Duration::ZERO,
            };
        }
        let at = |quantile: f64| Duration::from_nanos(histogram.value_at_quantile(quantile));
        Self {
            count: histogram.len(),
            min: Duration::from_nanos(histogram.min()),
            mean: Duration::from_nanos(histogram.mean().round() as u64),
            p50: at(0.50),
            p90: at(0.90),
            p99: at(0.99),
            p999: at(0.999),
            max: Duration::from_nanos(histogram.max()),
        }
    }
}

/// Latency at `load_percent` of `throughput_frames_per_sec`.
#[derive(Debug, Clone, PartialEq)]
pub struct LatencyUnderLoad {
    pub frames: FrameSizes,
    /// The 100 % rate: usually the RFC 2544 throughput of the same path.
    pub throughput_frames_per_sec: f64,
    pub load_percent: f64,
    /// Default 10 s (RFC 2544 asks for 120 s with one tagged frame; every
    /// frame here is timed, so far less suffices).
    pub duration: Duration,
    /// Pacing quantum of the sender (default 50 µs, finer than a plain
    /// trial's): frames of one send batch share a send time, so later
    /// frames of a batch count the time the kernel spent on the earlier
    /// ones; small batches keep that out of the figures.
    pub pacing_quantum: Duration,
}

impl LatencyUnderLoad {
    pub fn new(frames: FrameSizes, throughput_frames_per_sec: f64, load_percent: f64) -> Self {
        Self {
            frames,
            throughput_frames_per_sec,
            load_percent,
            duration: Duration::from_secs(10),
            pacing_quantum: Duration::from_micros(50),
        }
    }

    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = duration;
        self
    }

    pub fn offered_frames_per_sec(&self) -> f64 {
        self.throughput_frames_per_sec * self.load_percent / 100.0
    }

    pub fn run(&self, path: &UdpPath<'_>) -> Result<LatencyResult, TrafficError> {
        let trial = Trial::rate(
            self.frames.clone(),
            self.offered_frames_per_sec(),
            self.duration,
        )
        .pacing_quantum(self.pacing_quantum)
        .run(path)?;
        Ok(LatencyResult {
            frames: self.frames.clone(),
            load_percent: self.load_percent,
            offered_frames_per_sec: self.offered_frames_per_sec(),
            summary: trial.latency_summary(),
            lost: trial.lost(),
            trial,
        })
    }
}

/// What [`LatencyUnderLoad::run`] found.
#[derive(Debug, Clone)]
pub struct LatencyResult {
    pub frames: FrameSizes,
    pub load_percent: f64,
    pub offered_frames_per_sec: f64,
    pub summary: LatencySummary,
    /// Frames lost meanwhile (latency of a lossy run describes survivors).
    pub lost: u64,
    pub trial: TrialReport,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_of_a_known_distribution() {
        let mut histogram = Histogram::<u64>::new_with_bounds(1, 100_000_000_000, 3).unwrap();
        for value in 1..=1000u64 {
            histogram.record(value * 1_000).unwrap();
        }
        let summary = LatencySummary::from_histogram(&histogram);
        assert_eq!(summary.count, 1000);
        assert_eq!(summary.min, Duration::from_micros(1));
        let close = |value: Duration, micros: u64| {
            let expected = micros as f64 * 1e3;
            (value.as_nanos() as f64 - expected).abs() <= expected * 0.001 + 1.0
        };
        assert!(close(summary.p50, 500), "{summary:?}");
        assert!(close(summary.p99, 990), "{summary:?}");
        assert!(close(summary.p999, 999), "{summary:?}");
        assert!(close(summary.max, 1000), "{summary:?}");
        assert!(
            close(summary.mean, 500) || close(summary.mean, 501),
            "{summary:?}"
        );
        let empty = Histogram::<u64>::new(3).unwrap();
        assert_eq!(LatencySummary::from_histogram(&empty).count, 0);
    }
}
