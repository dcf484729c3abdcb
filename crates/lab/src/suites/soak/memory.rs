//! Resident size of the soak's tunnel processes, sampled four times a
//! second on a thread of its own, per group of processes (one side of a
//! WireGuard tunnel, or both ends of another system). A restarted side
//! gets its new PIDs; while a side is down its samples are missing, not
//! zero, so a restart never reads as a shrink.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::systems::resident_bytes;

const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// One sample: the resident size of each group, `None` where it had no
/// process to read.
struct Sample {
    at: Instant,
    sizes: Vec<Option<u64>>,
}

pub struct Sampler {
    pids: Mutex<Vec<Vec<u32>>>,
    samples: Mutex<Vec<Sample>>,
    stop: AtomicBool,
}

impl Sampler {
    /// A sampler for each group of `pids`; [`Sampler::run`] samples.
    pub fn new(pids: Vec<Vec<u32>>) -> Self {
        Self {
            pids: Mutex::new(pids),
            samples: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        }
    }

    /// Samples until [`Sampler::stop`]; run it on a thread of its own.
    pub fn run(&self) {
        while !self.stop.load(Ordering::Relaxed) {
            let groups = self
                .pids
                .lock()
                .map(|pids| pids.clone())
                .unwrap_or_default();
            let sizes = groups
                .iter()
                .map(|pids| Some(resident_bytes(pids)).filter(|&bytes| bytes > 0))
                .collect();
            if let Ok(mut samples) = self.samples.lock() {
                samples.push(Sample {
                    at: Instant::now(),
                    sizes,
                });
            }
            std::thread::sleep(SAMPLE_INTERVAL);
        }
    }

    /// Samples `group` as `pids` from now on (a restarted side).
    pub fn set_pids(&self, group: usize, pids: Vec<u32>) {
        if let Ok(mut groups) = self.pids.lock()
            && let Some(slot) = groups.get_mut(group)
        {
            *slot = pids;
        }
    }

    /// The sizes of `group` sampled in `[from, to)`.
    pub fn between(&self, group: usize, from: Instant, to: Instant) -> Vec<f64> {
        let Ok(samples) = self.samples.lock() else {
            return Vec::new();
        };
        samples
            .iter()
            .filter(|sample| sample.at >= from && sample.at < to)
            .filter_map(|sample| sample.sizes.get(group).copied().flatten())
            .map(|bytes| bytes as f64)
            .collect()
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Growth in percent from a peak at the start of a side's life to one at
/// the end.
pub fn growth_percent(first_peak: f64, last_peak: f64) -> Option<f64> {
    (first_peak > 0.0).then(|| (last_peak - first_peak) / first_peak * 100.0)
}

pub fn peak(sizes: &[f64]) -> f64 {
    sizes.iter().copied().fold(0.0, f64::max)
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
    fn a_group_without_processes_has_no_samples() {
        let sampler = Sampler::new(vec![vec![std::process::id()], Vec::new()]);
        std::thread::scope(|scope| {
            scope.spawn(|| sampler.run());
            std::thread::sleep(SAMPLE_INTERVAL * 2);
            sampler.stop();
        });
        let (from, to) = (Instant::now() - Duration::from_secs(60), Instant::now());
        assert!(!sampler.between(0, from, to).is_empty());
        assert!(sampler.between(1, from, to).is_empty());
    }
}
