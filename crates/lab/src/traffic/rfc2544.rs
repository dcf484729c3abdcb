//! RFC 2544 procedures over UDP trials: throughput (§26.1, a binary search
//! for the highest zero-loss rate), frame loss rate against offered load
//! (§26.3), back-to-back bursts (§26.4), and the receive rate under
//! overload (the "64-byte frames under overload" figure of router tests).
//!
//! ## Throughput search
//! The upper bound is the theoretical Ethernet rate at a nominal link speed
//! (10 Gbit/s for a veth, which has none), optionally lowered by an
//! overload probe: 1 s as fast as the sender can, and the search starts at
//! `min(probe × 1.1, theoretical)`. The first trial runs at the bound; if
//! it loses frames the search halves the interval between the highest rate
//! that passed (at first the minimum rate) and the lowest that failed,
//! until the interval is within `resolution` of its top or the iterations
//! run out. If a probe-derived bound passes (the probe ran short of CPU),
//! the search climbs by 25 % steps, capped at the theoretical rate, until a
//! rate fails, then halves as before. A trial passes when every scheduled frame was offered and the
//! loss ratio is within the tolerance (default 0: not one frame lost).
//!
//! A failed trial the generator itself spoiled is run once more (both runs
//! stay in the trace): the sender could not offer the load in time at a
//! rate it already managed earlier in the search, or fell more than
//! `max_sender_lag` behind its schedule (it was not scheduled, then caught
//! up with a burst the path had to queue), or the receiver's own socket
//! dropped frames. On a shared machine these are CPU starvation, not the
//! path. A rate beyond the generator is a failure: the result then
//! says `generator_limited`, since the path's limit was not reached.
//!
//! Queues flatter short trials: a queue of `Q` bytes absorbs an excess of
//! `Q / trial` bytes/s, so a rate above a bottleneck by that much still
//! passes. Longer trials (full mode: 10 s; the RFC asks for 60) shrink it.

use std::time::Duration;

use super::TrafficError;
use super::frame::{FrameSizes, ethernet_max_frame_rate};
use super::udp::{Offer, Trial, TrialReport, UdpPath};

/// Step up from a passing probe-derived bound.
const CLIMB_FACTOR: f64 = 1.25;

/// A veth has no line rate; theoretical maxima assume this one.
pub const NOMINAL_LINK_BITS_PER_SEC: f64 = 10e9;

/// Where a search's trials run: between two namespaces ([`UdpPath`]), or
/// between two hosts through the lab's workers there.
pub trait TrialRunner {
    type Error;
    fn run_trial(&self, trial: &Trial) -> Result<TrialReport, Self::Error>;
}

impl TrialRunner for UdpPath<'_> {
    type Error = TrafficError;
    fn run_trial(&self, trial: &Trial) -> Result<TrialReport, TrafficError> {
        trial.run(self)
    }
}

/// Where the throughput search starts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum UpperBound {
    /// The theoretical rate at the nominal link speed.
    Theoretical,
    /// `min(probe × 1.1, theoretical)`, probing for `duration`.
    Probe { duration: Duration },
    /// This many frames per second.
    Rate(f64),
}

/// Settings of an RFC 2544 throughput search.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputSearch {
    pub frames: FrameSizes,
    /// Length of each trial (quick 2 s, full 10 s).
    pub trial_duration: Duration,
    /// Largest loss ratio that still passes (default 0).
    pub loss_tolerance: f64,
    pub link_bits_per_sec: f64,
    pub upper_bound: UpperBound,
    /// Lowest rate searched, frames/s (default 100).
    pub min_rate: f64,
    /// Stop when `(fail − pass) / fail` is at most this (default 0.5 %).
    pub resolution: f64,
    /// Most trials, retries not counted (default 20).
    pub max_iterations: u32,
    /// Least listening time after each trial (see [`Trial::drain`]).
    pub drain: Duration,
    /// A failed trial whose sender fell further behind than this is run
    /// again once (default 5 ms).
    pub max_sender_lag: Duration,
}

impl ThroughputSearch {
    /// 2-second trials, probe for the upper bound.
    pub fn quick(frames: FrameSizes) -> Self {
        Self {
            frames,
            trial_duration: Duration::from_secs(2),
            loss_tolerance: 0.0,
            link_bits_per_sec: NOMINAL_LINK_BITS_PER_SEC,
            upper_bound: UpperBound::Probe {
                duration: Duration::from_secs(1),
            },
            min_rate: 100.0,
            resolution: 0.005,
            max_iterations: 20,
            drain: Duration::from_millis(500),
            max_sender_lag: Duration::from_millis(5),
        }
    }

    /// 10-second trials, otherwise as [`Self::quick`].
    pub fn full(frames: FrameSizes) -> Self {
        Self {
            trial_duration: Duration::from_secs(10),
            ..Self::quick(frames)
        }
    }

    pub fn theoretical_max_frames_per_sec(&self) -> f64 {
        ethernet_max_frame_rate(self.link_bits_per_sec, self.frames.average_bytes())
    }

    fn trial(&self, offer: Offer) -> Trial {
        Trial::new(offer, self.frames.clone()).drain(self.drain)
    }

    pub fn run<R: TrialRunner>(&self, path: &R) -> Result<ThroughputResult, R::Error> {
        let theoretical = self.theoretical_max_frames_per_sec();
        let mut best_sent_rate = 0.0f64;
        let (upper, probe) = match self.upper_bound {
            UpperBound::Theoretical => (theoretical, None),
            UpperBound::Rate(rate) => (rate.min(theoretical), None),
            UpperBound::Probe { duration } => {
                let report = path.run_trial(&self.trial(Offer::Flood { duration }))?;
                best_sent_rate = report.sender.offered_frames_per_sec();
                let received = report.receiver.received_frames_per_sec();
                ((received * 1.1).min(theoretical), Some(received))
            }
        };
        let upper = upper.max(self.min_rate);
        let mut trials: Vec<TrialOutcome> = Vec::new();
        let mut run_at = |rate: f64, trials: &mut Vec<TrialOutcome>| -> Result<bool, R::Error> {
            let offer = Offer::Rate {
                frames_per_sec: rate,
                duration: self.trial_duration,
            };
            let mut report = path.run_trial(&self.trial(offer))?;
            let spoiled = |report: &TrialReport, best: f64| {
                !report.passed(self.loss_tolerance)
                    && ((!report.offered_in_full() && rate <= best)
                        || report.sender.max_lag > self.max_sender_lag
                        || report.receiver.socket_drops > 0)
            };
            if spoiled(&report, best_sent_rate) {
                trials.push(TrialOutcome::of(rate, &report, self.loss_tolerance, true));
                report = path.run_trial(&self.trial(offer))?;
            }
            if report.offered_in_full() {
                best_sent_rate = best_sent_rate.max(rate);
            }
            let outcome = TrialOutcome::of(rate, &report, self.loss_tolerance, false);
            let passed = outcome.passed;
            trials.push(outcome);
            Ok(passed)
        };

        let mut pass = None::<f64>;
        let mut fail = None::<f64>;
        let mut low = self.min_rate;
        let mut high = upper;
        let mut iterations = 1;
        if run_at(upper, &mut trials)? {
            pass = Some(upper);
            low = upper;
            // A probe that ran short of CPU underestimates; climb until a
            // rate fails or the theoretical rate passes.
            while probe.is_some() && low < theoretical && iterations < self.max_iterations {
                let next = (low * CLIMB_FACTOR).min(theoretical);
                iterations += 1;
                if run_at(next, &mut trials)? {
                    pass = Some(next);
                    low = next;
                } else {
                    fail = Some(next);
                    high = next;
                    break;
                }
            }
        } else {
            fail = Some(upper);
        }
        while fail.is_some()
            && iterations < self.max_iterations
            && (high - low) > self.resolution * high
        {
            let middle = (low + high) / 2.0;
            iterations += 1;
            if run_at(middle, &mut trials)? {
                pass = Some(middle);
                low = middle;
            } else {
                fail = Some(middle);
                high = middle;
            }
        }
        if pass.is_none() && run_at(self.min_rate, &mut trials)? {
            pass = Some(self.min_rate);
        }
        // The generator limited the search if the lowest failing rate failed
        // only because it was not offered in full: nothing offered was lost.
        let generator_limited = fail.is_some_and(|failed| {
            trials
                .iter()
                .rev()
                .find(|trial| !trial.discarded && trial.offered_frames_per_sec == failed)
                .is_some_and(|trial| !trial.offered_in_full && trial.lost == 0)
        });
        let average_bytes = self.frames.average_bytes();
        Ok(ThroughputResult {
            frames: self.frames.clone(),
            frames_per_sec: pass,
            frame_bits_per_sec: pass.map(|rate| rate * average_bytes * 8.0),
            theoretical_max_frames_per_sec: theoretical,
            link_bits_per_sec: self.link_bits_per_sec,
            loss_tolerance: self.loss_tolerance,
            trial_duration: self.trial_duration,
            upper_bound_frames_per_sec: upper,
            probe_frames_per_sec: probe,
            generator_limited,
            trials,
        })
    }
}

/// One trial of a search, as the trace keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct TrialOutcome {
    /// The rate asked for.
    pub offered_frames_per_sec: f64,
    /// The rate the sender achieved.
    pub sent_frames_per_sec: f64,
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    pub offered_in_full: bool,
    /// Frames the receiver's own socket dropped.
    pub receiver_drops: u64,
    /// How far the sender fell behind its schedule at worst.
    pub sender_max_lag: Duration,
    pub passed: bool,
    /// Spoiled by the generator and run again (the next entry is the rerun).
    pub discarded: bool,
}

impl TrialOutcome {
    fn of(rate: f64, report: &TrialReport, tolerance: f64, discarded: bool) -> Self {
        let outcome = Self {
            offered_frames_per_sec: rate,
            sent_frames_per_sec: report.sender.offered_frames_per_sec(),
            offered: report.sender.offered(),
            received: report.receiver.received,
            lost: report.lost(),
            offered_in_full: report.offered_in_full(),
            receiver_drops: report.receiver.socket_drops,
            sender_max_lag: report.sender.max_lag,
            passed: report.passed(tolerance),
            discarded,
        };
        tracing::info!(
            rate = format_args!("{rate:.0}"),
            offered = outcome.offered,
            received = outcome.received,
            lost = outcome.lost,
            lag_ms = outcome.sender_max_lag.as_secs_f64() * 1e3,
            passed = outcome.passed,
            discarded,
            "rfc2544 trial"
        );
        outcome
    }
}

/// What a throughput search found.
#[derive(Debug, Clone, PartialEq)]
pub struct ThroughputResult {
    pub frames: FrameSizes,
    /// Highest rate that passed; `None` if not even the minimum did.
    pub frames_per_sec: Option<f64>,
    /// That rate in Ethernet frame bits per second (no preamble or gap).
    pub frame_bits_per_sec: Option<f64>,
    pub theoretical_max_frames_per_sec: f64,
    pub link_bits_per_sec: f64,
    pub loss_tolerance: f64,
    pub trial_duration: Duration,
    pub upper_bound_frames_per_sec: f64,
    /// Receive rate of the overload probe, if one ran.
    pub probe_frames_per_sec: Option<f64>,
    /// The lowest failing rate failed only because the sender could not
    /// offer it (nothing offered was lost): the path may carry more than
    /// this generator can send.
    pub generator_limited: bool,
    /// Every trial in the order run.
    pub trials: Vec<TrialOutcome>,
}

/// Frames per second received while the sender offers as fast as it can.
#[derive(Debug, Clone)]
pub struct OverloadResult {
    pub frames: FrameSizes,
    pub received_frames_per_sec: f64,
    pub received_frame_bits_per_sec: f64,
    pub sent_frames_per_sec: f64,
    pub theoretical_max_frames_per_sec: f64,
    pub link_bits_per_sec: f64,
    pub trial: TrialReport,
}

/// Floods `path` for `duration` and reports what arrives.
pub fn overload_receive_rate(
    path: &UdpPath<'_>,
    frames: FrameSizes,
    duration: Duration,
    link_bits_per_sec: f64,
) -> Result<OverloadResult, TrafficError> {
    let trial = Trial::new(Offer::Flood { duration }, frames.clone()).run(path)?;
    Ok(OverloadResult {
        received_frames_per_sec: trial.receiver.received_frames_per_sec(),
        received_frame_bits_per_sec: trial.received_frame_bits_per_sec(),
        sent_frames_per_sec: trial.sender.offered_frames_per_sec(),
        theoretical_max_frames_per_sec: ethernet_max_frame_rate(
            link_bits_per_sec,
            frames.average_bytes(),
        ),
        link_bits_per_sec,
        frames,
        trial,
    })
}

/// Frame loss rate against offered load (§26.3): from `max_rate` down in
/// steps of `step_percent` until `stop_after_lossless` successive trials
/// lose nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct LossVersusLoad {
    pub frames: FrameSizes,
    /// The 100 % rate: the theoretical maximum, or a measured throughput.
    pub max_rate: f64,
    pub trial_duration: Duration,
    /// Default 10.
    pub step_percent: f64,
    /// Default 2 (the RFC's "two successive trials").
    pub stop_after_lossless: u32,
}

impl LossVersusLoad {
    pub fn new(frames: FrameSizes, max_rate: f64, trial_duration: Duration) -> Self {
        Self {
            frames,
            max_rate,
            trial_duration,
            step_percent: 10.0,
            stop_after_lossless: 2,
        }
    }

    pub fn run(&self, path: &UdpPath<'_>) -> Result<Vec<LossPoint>, TrafficError> {
        let mut points = Vec::new();
        let mut lossless = 0;
        let step = self.step_percent.max(1.0);
        let mut percent = 100.0;
        while percent > 0.0 {
            let rate = self.max_rate * percent / 100.0;
            let report = Trial::rate(self.frames.clone(), rate, self.trial_duration).run(path)?;
            let point = LossPoint {
                offered_percent: percent,
                offered_frames_per_sec: rate,
                sent_frames_per_sec: report.sender.offered_frames_per_sec(),
                offered: report.sender.offered(),
                received: report.receiver.received,
                lost: report.lost(),
                loss_percent: report.loss_ratio() * 100.0,
            };
            lossless = if point.lost == 0 { lossless + 1 } else { 0 };
            points.push(point);
            if lossless >= self.stop_after_lossless {
                break;
            }
            percent -= step;
        }
        Ok(points)
    }
}

/// One load step of [`LossVersusLoad`].
#[derive(Debug, Clone, PartialEq)]
pub struct LossPoint {
    pub offered_percent: f64,
    pub offered_frames_per_sec: f64,
    pub sent_frames_per_sec: f64,
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    /// `lost / offered × 100`.
    pub loss_percent: f64,
}

/// Back-to-back (§26.4): the longest burst at the sender's top speed that
/// arrives whole, by binary search on the burst length.
#[derive(Debug, Clone, PartialEq)]
pub struct BackToBackSearch {
    pub frames: FrameSizes,
    /// Longest burst tried (the first trial).
    pub max_burst: u64,
    /// Independent searches; the result is their mean (the RFC runs 50).
    pub repetitions: u32,
    /// Stop when `(fail − pass) / fail` is at most this (default 1 %).
    pub resolution: f64,
}

impl BackToBackSearch {
    pub fn new(frames: FrameSizes, max_burst: u64) -> Self {
        Self {
            frames,
            max_burst: max_burst.max(1),
            repetitions: 1,
            resolution: 0.01,
        }
    }

    pub fn run(&self, path: &UdpPath<'_>) -> Result<BackToBackResult, TrafficError> {
        let mut lengths = Vec::new();
        let mut trials = Vec::new();
        for _ in 0..self.repetitions.max(1) {
            let mut pass = 0u64;
            let mut fail = self.max_burst + 1;
            let mut length = self.max_burst;
            loop {
                let report = Trial::new(Offer::Burst { frames: length }, self.frames.clone())
                    .drain(Duration::from_millis(200))
                    .run(path)?;
                let whole = report.passed(0.0);
                trials.push(BurstOutcome {
                    frames: length,
                    received: report.receiver.received,
                    lost: report.lost(),
                    passed: whole,
                });
                if whole {
                    pass = length;
                } else {
                    fail = length;
                }
                let gap = fail - pass;
                if gap <= 1 || gap as f64 <= self.resolution * fail as f64 {
                    break;
                }
                length = pass + gap / 2;
            }
            lengths.push(pass);
        }
        let mean = lengths.iter().sum::<u64>() as f64 / lengths.len() as f64;
        Ok(BackToBackResult {
            frames: self.frames.clone(),
            burst_frames: mean,
            per_repetition: lengths,
            trials,
        })
    }
}

/// One burst of a back-to-back search.
#[derive(Debug, Clone, PartialEq)]
pub struct BurstOutcome {
    pub frames: u64,
    pub received: u64,
    pub lost: u64,
    pub passed: bool,
}

/// What a back-to-back search found.
#[derive(Debug, Clone, PartialEq)]
pub struct BackToBackResult {
    pub frames: FrameSizes,
    /// Mean over the repetitions of the longest whole burst.
    pub burst_frames: f64,
    pub per_repetition: Vec<u64>,
    pub trials: Vec<BurstOutcome>,
}
