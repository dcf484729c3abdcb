//! One direction's impairment pipeline: given a frame's arrival time and
//! size, decide whether it crosses and when it leaves. Pure logic: the I/O
//! pump calls [`LinkModel::handle_frame`] for each frame read and keeps the
//! frame until the returned release time.
//!
//! Order per frame: random loss → bursty loss → duplication → bottleneck
//! queue (tail drop) → delay → jitter (FIFO-clamped or free) → reorder
//! hold-back. A duplicate is a second frame from the duplication step on:
//! it takes its own place in the queue and draws its own jitter.

use std::time::Duration;

use super::config::{JitterOrder, LinkConfig};
use super::models::{Bottleneck, GilbertElliottLoss};
use super::rng::Rng;
use super::stats::{DropReason, LinkStats};

/// Independent random streams, one per impairment.
mod stream {
    pub const LOSS: u64 = 1;
    pub const BURST_LOSS: u64 = 2;
    pub const DUPLICATE: u64 = 3;
    pub const JITTER: u64 = 4;
    pub const REORDER: u64 = 5;
}

/// What happens to one frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Drop(DropReason),
    /// Send the frame at `release`; if `duplicate` is set, send a copy then.
    Forward {
        release: Duration,
        duplicate: Option<Duration>,
    },
}

/// The impairments of one direction, with their counters.
#[derive(Clone, Debug)]
pub struct LinkModel {
    config: LinkConfig,
    loss_rng: Rng,
    burst_loss: Option<GilbertElliottLoss>,
    duplicate_rng: Rng,
    jitter_rng: Rng,
    reorder_rng: Rng,
    bottleneck: Option<Bottleneck>,
    /// Latest release handed out to an in-order frame (FIFO jitter).
    last_release: Duration,
    stats: LinkStats,
}

impl LinkModel {
    /// `config` should have passed [`LinkConfig::validate`].
    pub fn new(config: LinkConfig) -> Self {
        let seed = config.seed;
        Self {
            loss_rng: Rng::stream(seed, stream::LOSS),
            burst_loss: config.gilbert_elliott.map(|params| {
                GilbertElliottLoss::new(params, Rng::stream(seed, stream::BURST_LOSS))
            }),
            duplicate_rng: Rng::stream(seed, stream::DUPLICATE),
            jitter_rng: Rng::stream(seed, stream::JITTER),
            reorder_rng: Rng::stream(seed, stream::REORDER),
            bottleneck: config
                .rate_bits_per_sec
                .map(|rate| Bottleneck::new(rate, config.queue_limit)),
            last_release: Duration::ZERO,
            stats: LinkStats::default(),
            config,
        }
    }

    pub fn config(&self) -> &LinkConfig {
        &self.config
    }

    /// Decides the fate of a frame of `bytes` arriving at `now`. Arrivals
    /// must come in time order. Counts losses, tail drops, duplicates and
    /// reorders; the caller counts frames in and out.
    pub fn handle_frame(&mut self, now: Duration, bytes: usize) -> Verdict {
        if self.loss_rng.chance(self.config.loss) {
            return self.drop(DropReason::RandomLoss);
        }
        if let Some(model) = &mut self.burst_loss
            && model.lose()
        {
            return self.drop(DropReason::BurstLoss);
        }
        let duplicate = self.duplicate_rng.chance(self.config.duplicate);
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        let release = match self.schedule(now, bytes) {
            Some(release) => release,
            None => return self.drop(DropReason::QueueFull),
        };
        let duplicate = if duplicate {
            self.stats.duplicated += 1;
            let copy = self.schedule(now, bytes);
            if copy.is_none() {
                self.stats.dropped.count(DropReason::QueueFull);
            }
            copy
        } else {
            None
        };
        Verdict::Forward { release, duplicate }
    }

    fn drop(&mut self, reason: DropReason) -> Verdict {
        self.stats.dropped.count(reason);
        Verdict::Drop(reason)
    }

    /// Queue, delay, jitter and reorder for one frame; `None` on tail drop.
    fn schedule(&mut self, now: Duration, bytes: u32) -> Option<Duration> {
        let departure = match &mut self.bottleneck {
            Some(bottleneck) => {
                let departure = bottleneck.offer(now, bytes);
                let (packets, queued_bytes) = bottleneck.high_water();
                self.stats.queue_high_water_packets = packets;
                self.stats.queue_high_water_bytes = queued_bytes;
                departure?
            }
            None => now,
        };
        let mut release = departure + self.config.delay;
        if !self.config.jitter.is_zero() {
            release += self.jitter_rng.duration_up_to(self.config.jitter);
        }
        if let Some(reorder) = self.config.reorder
            && self.reorder_rng.chance(reorder.probability)
        {
            // Held back past the frames behind it; it does not hold them up.
            self.stats.reordered += 1;
            return Some(release + reorder.extra_delay);
        }
        if self.config.jitter_order == JitterOrder::Fifo {
            release = release.max(self.last_release);
        }
        self.last_release = self.last_release.max(release);
        Some(release)
    }

    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// For the I/O side's counters (frames in and out, oversize, buffers).
    pub fn stats_mut(&mut self) -> &mut LinkStats {
        &mut self.stats
    }
}

#[cfg(test)]
mod tests;
