//! `soak`: the tunnel's memory under sustained full load. Four TCP streams
//! run back to back for 10 minutes (2 with `--quick`) while a sampler reads
//! both endpoints' resident size four times a second. Each tenth of the run
//! is one row (the median resident size in it, its peak and the throughput
//! carried); a last row gives the growth from the first tenth's peak to the
//! last tenth's. Issue 4's target: under 64 MiB, and no more than 5 %
//! growth, which a leak or an unbounded queue would break.
//!
//! The bare link has no tunnel processes, so it has nothing to measure here.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::{Context, tcp};
use crate::measure::Row;
use crate::results::{Extra, Measurement, median};
use crate::systems::resident_bytes;

/// Checkpoints per run: rows of the table, steps of the progress bar.
pub const CHECKPOINTS: u32 = 10;
const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);
const TRANSFER_BYTES: u64 = 256 << 20;
const STREAMS: usize = 4;
const TRANSFER_LIMIT: Duration = Duration::from_secs(60);
/// Transfers rotate through this many ports from [`PORT`], so that a new
/// sink never waits for an old connection's port.
const PORTS: u16 = 90;
const PORT: u16 = 5501;

pub fn duration(quick: bool) -> Duration {
    if quick {
        Duration::from_secs(120)
    } else {
        Duration::from_secs(600)
    }
}

/// Resident size of the tunnel processes, sampled in the background.
struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pids: Vec<u32>) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let samples = samples.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let rss = resident_bytes(&pids);
                    if let Ok(mut samples) = samples.lock() {
                        samples.push((Instant::now(), rss));
                    }
                    std::thread::sleep(SAMPLE_INTERVAL);
                }
            })
        };
        Self {
            samples,
            stop,
            thread,
        }
    }

    /// The sizes sampled in `[from, to)`.
    fn between(&self, from: Instant, to: Instant) -> Vec<f64> {
        let Ok(samples) = self.samples.lock() else {
            return Vec::new();
        };
        samples
            .iter()
            .filter(|(at, _)| *at >= from && *at < to)
            .map(|&(_, rss)| rss as f64)
            .collect()
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
    }
}

/// Growth in percent from the first checkpoint's peak to the last one's.
pub fn growth_percent(first_peak: f64, last_peak: f64) -> Option<f64> {
    (first_peak > 0.0).then(|| (last_peak - first_peak) / first_peak * 100.0)
}

fn peak(sizes: &[f64]) -> f64 {
    sizes.iter().copied().fold(0.0, f64::max)
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let system = context.system_name;
    if !context.has_processes() {
        context.progress.line(&format!(
            "{system}: soak: no tunnel processes, so no memory to measure"
        ));
        context.progress.skip(u64::from(CHECKPOINTS));
        return Vec::new();
    }
    let total = duration(context.quick);
    let interval = total / CHECKPOINTS;
    let sampler = Sampler::start(context.system.pids());
    let start = Instant::now();
    let mut rows = Vec::new();
    let mut peaks = Vec::new();
    let mut carried_bits = 0.0;
    let mut failure = None;
    let mut all_verified = true;
    let mut transfers: u16 = 0;
    for checkpoint in 1..=CHECKPOINTS {
        if context.progress.stopping() {
            break;
        }
        let from = start + interval * (checkpoint - 1);
        let to = start + interval * checkpoint;
        let minute = (interval * checkpoint).as_secs_f64() / 60.0;
        context.progress.step(&format!(
            "{system}: soak: {STREAMS} TCP streams, {minute:.1} of {:.0} min",
            total.as_secs_f64() / 60.0
        ));
        let mut bits = 0.0;
        let mut verified = true;
        while failure.is_none() && Instant::now() < to && !context.progress.stopping() {
            let series = tcp::series(
                context,
                TRANSFER_BYTES,
                STREAMS,
                1,
                TRANSFER_LIMIT,
                PORT + transfers % PORTS,
            );
            transfers = transfers.wrapping_add(1);
            bits += series
                .reports
                .iter()
                .map(|r| r.bytes as f64 * 8.0)
                .sum::<f64>();
            verified &= series.verified();
            if let Some(why) = series.failure {
                failure = Some(why);
            } else if series.timed_out {
                failure = Some(format!(
                    "a {} MiB transfer took longer than {} s",
                    TRANSFER_BYTES >> 20,
                    TRANSFER_LIMIT.as_secs()
                ));
            }
        }
        // Wait out the interval after a failure so every row covers its time.
        if let Some(rest) = to
            .checked_duration_since(Instant::now())
            .filter(|_| !context.progress.stopping())
        {
            std::thread::sleep(rest);
        }
        let sizes = sampler.between(from, Instant::now());
        let (typical, highest) = (median(&sizes), peak(&sizes));
        let rate = bits / (Instant::now() - from).as_secs_f64();
        let row = Row::new("soak", "rss_under_load", system, "bytes")
            .param("minute", (minute * 10.0).round() / 10.0)
            .param("streams", STREAMS);
        let extra = Extra {
            peak_bytes: Some(highest),
            bits_per_sec: Some(rate),
            verified: Some(verified),
            ..Extra::default()
        };
        let measurement = row.concluded(sizes, extra, failure.clone());
        context.progress.line(&format!(
            "{system}: soak: {minute:.1} min: resident {:.1} MiB (peak {:.1} MiB), {:.2} Gbit/s",
            typical / 1_048_576.0,
            highest / 1_048_576.0,
            rate / 1e9
        ));
        rows.push(measurement);
        peaks.push(highest);
        carried_bits += bits;
        all_verified &= verified;
        context.progress.done();
    }
    sampler.stop();

    let row = Row::new("soak", "rss_growth", system, "percent")
        .param("minutes", total.as_secs_f64() / 60.0)
        .param("streams", STREAMS);
    let first = peaks.first().copied().unwrap_or(0.0);
    let last = peaks.last().copied().unwrap_or(0.0);
    let Some(growth) = growth_percent(first, last) else {
        rows.push(row.failed("could not read the tunnel processes' resident size"));
        return rows;
    };
    let extra = Extra {
        first_peak_bytes: Some(first),
        last_peak_bytes: Some(last),
        peak_bytes: Some(peak(&peaks)),
        bits_per_sec: Some(carried_bits / total.as_secs_f64()),
        verified: Some(all_verified),
        ..Extra::default()
    };
    rows.push(row.concluded(vec![growth], extra, failure));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_compares_last_peak_with_first() {
        assert_eq!(growth_percent(10.0, 10.5), Some(5.0));
        assert_eq!(growth_percent(10.0, 9.0), Some(-10.0));
        assert_eq!(growth_percent(0.0, 9.0), None);
    }

    #[test]
    fn checkpoints_split_the_run_evenly() {
        assert_eq!(duration(false) / CHECKPOINTS, Duration::from_secs(60));
        assert_eq!(duration(true) / CHECKPOINTS, Duration::from_secs(12));
    }
}
