//! The impairment models, pure logic on simulated time: the
//! Gilbert–Elliott loss chain and the rate-limited bottleneck queue.
//!
//! Time is a `Duration` since an arbitrary epoch (the emulator's start);
//! randomness comes from a seeded [`Rng`]. Nothing here reads a clock.

use std::collections::VecDeque;
use std::time::Duration;

use super::config::{GilbertElliott, QueueLimit};
use super::rng::Rng;

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// The Gilbert–Elliott chain: decides each frame's loss in the current
/// state, then steps the chain. Starts in the good state.
#[derive(Clone, Debug)]
pub struct GilbertElliottLoss {
    params: GilbertElliott,
    in_bad_state: bool,
    rng: Rng,
}

impl GilbertElliottLoss {
    pub fn new(params: GilbertElliott, rng: Rng) -> Self {
        Self {
            params,
            in_bad_state: false,
            rng,
        }
    }

    /// Whether the next frame is lost.
    pub fn lose(&mut self) -> bool {
        let lost = if self.in_bad_state {
            self.rng.chance(self.params.loss_in_bad)
        } else {
            self.rng.chance(self.params.loss_in_good)
        };
        self.in_bad_state = if self.in_bad_state {
            !self.rng.chance(self.params.r)
        } else {
            self.rng.chance(self.params.p)
        };
        lost
    }

    pub fn in_bad_state(&self) -> bool {
        self.in_bad_state
    }
}

/// A link of fixed rate with a bounded FIFO queue in front (store and
/// forward): a frame's serialisation starts when the previous one's ends
/// (or when it arrives, if the link is idle) and takes `bits / rate`; it
/// leaves at the end. A frame that would overfill the queue is
/// tail-dropped.
///
/// Departure times are exact: the end of the backlog is kept in units of
/// 1/rate nanoseconds, so rounding never accumulates; each departure is
/// that exact instant rounded up to the nanosecond.
#[derive(Clone, Debug)]
pub struct Bottleneck {
    rate_bits_per_sec: u64,
    limit: QueueLimit,
    /// When the last admitted frame's serialisation ends, times the rate
    /// (nanoseconds × bits per second).
    busy_until_scaled: u128,
    /// Admitted frames not yet fully serialised: (departure, bytes).
    backlog: VecDeque<(Duration, u32)>,
    backlog_bytes: u64,
    high_water_packets: u64,
    high_water_bytes: u64,
}

impl Bottleneck {
    /// `rate_bits_per_sec` must not be 0 (`LinkConfig::validate` checks).
    pub fn new(rate_bits_per_sec: u64, limit: QueueLimit) -> Self {
        let capacity = limit
            .packets
            .map_or(1024, |packets| packets as usize)
            .min(1 << 20);
        Self {
            rate_bits_per_sec: rate_bits_per_sec.max(1),
            limit,
            busy_until_scaled: 0,
            backlog: VecDeque::with_capacity(capacity),
            backlog_bytes: 0,
            high_water_packets: 0,
            high_water_bytes: 0,
        }
    }

    /// Offers a frame of `bytes` arriving at `now`; returns when its last
    /// bit leaves, or `None` if the queue is full (tail drop). Arrivals
    /// must come in time order.
    pub fn offer(&mut self, now: Duration, bytes: u32) -> Option<Duration> {
        while let Some(&(departure, size)) = self.backlog.front()
            && departure <= now
        {
            self.backlog.pop_front();
            self.backlog_bytes -= u64::from(size);
        }
        let over_packets = self
            .limit
            .packets
            .is_some_and(|limit| self.backlog.len() >= limit as usize);
        let over_bytes = self
            .limit
            .bytes
            .is_some_and(|limit| self.backlog_bytes + u64::from(bytes) > limit);
        if over_packets || over_bytes {
            return None;
        }
        let rate = u128::from(self.rate_bits_per_sec);
        let start = (now.as_nanos() * rate).max(self.busy_until_scaled);
        let end = start + u128::from(bytes) * 8 * NANOS_PER_SEC;
        self.busy_until_scaled = end;
        let departure_nanos = end.div_ceil(rate);
        let departure = Duration::from_nanos(u64::try_from(departure_nanos).unwrap_or(u64::MAX));
        self.backlog.push_back((departure, bytes));
        self.backlog_bytes += u64::from(bytes);
        self.high_water_packets = self.high_water_packets.max(self.backlog.len() as u64);
        self.high_water_bytes = self.high_water_bytes.max(self.backlog_bytes);
        Some(departure)
    }

    /// Frames and bytes queued as of the last offer.
    pub fn backlog(&self) -> (usize, u64) {
        (self.backlog.len(), self.backlog_bytes)
    }

    /// Most frames and bytes ever queued at once.
    pub fn high_water(&self) -> (u64, u64) {
        (self.high_water_packets, self.high_water_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::config::Probability;

    fn prob(value: f64) -> Probability {
        Probability::new(value).unwrap()
    }

    #[test]
    fn gilbert_elliott_long_run_loss_and_burst_length_match_the_formulas() {
        let params = GilbertElliott::gilbert(prob(0.02), prob(0.2));
        let mut model = GilbertElliottLoss::new(params, Rng::seeded(11));
        let n = 2_000_000;
        let (mut lost, mut bursts, mut previous_lost) = (0u64, 0u64, false);
        for _ in 0..n {
            let now_lost = model.lose();
            if now_lost {
                lost += 1;
                if !previous_lost {
                    bursts += 1;
                }
            }
            previous_lost = now_lost;
        }
        let rate = lost as f64 / n as f64;
        let expected = params.expected_loss();
        // Standard deviation of a two-state chain's occupancy over n steps:
        // sqrt(π_b·π_g·(1+λ)/(1-λ)/n), λ = 1-p-r; about 0.058 % here.
        let lambda = 1.0 - 0.02 - 0.2;
        let sigma =
            (expected * (1.0 - expected) * (1.0 + lambda) / (1.0 - lambda) / n as f64).sqrt();
        assert!(
            (rate - expected).abs() < 4.0 * sigma,
            "loss {rate} vs {expected} (σ {sigma})"
        );
        let mean_burst = lost as f64 / bursts as f64;
        assert!((mean_burst - 5.0).abs() < 0.15, "mean burst {mean_burst}");
    }

    #[test]
    fn gilbert_elliott_with_partial_losses_in_both_states() {
        let params = GilbertElliott {
            p: prob(0.05),
            r: prob(0.3),
            loss_in_bad: prob(0.5),
            loss_in_good: prob(0.01),
        };
        let mut model = GilbertElliottLoss::new(params, Rng::seeded(5));
        let n = 1_000_000;
        let lost = (0..n).filter(|_| model.lose()).count();
        let expected = params.expected_loss();
        assert!(
            (lost as f64 / n as f64 - expected).abs() < 0.004,
            "{lost} of {n} vs {expected}"
        );
    }

    #[test]
    fn departures_are_exact_serialisation_times() {
        // 1000-byte frames at 1 Mbit/s take exactly 8 ms each.
        let mut link = Bottleneck::new(1_000_000, QueueLimit::default());
        let zero = Duration::ZERO;
        assert_eq!(link.offer(zero, 1000), Some(Duration::from_millis(8)));
        assert_eq!(link.offer(zero, 1000), Some(Duration::from_millis(16)));
        // An idle link starts serialising at arrival.
        assert_eq!(
            link.offer(Duration::from_millis(100), 1000),
            Some(Duration::from_millis(108))
        );
    }

    #[test]
    fn departures_do_not_drift_with_rates_that_do_not_divide() {
        // 1-byte frames at 3 bit/s take 8/3 s each; after k frames the
        // departure is exactly ceil(k·8e9/3) ns, however many came before.
        let mut link = Bottleneck::new(
            3,
            QueueLimit {
                packets: None,
                bytes: None,
            },
        );
        for k in 1..=100_000u64 {
            let departure = link.offer(Duration::ZERO, 1).unwrap();
            assert_eq!(
                departure.as_nanos(),
                (u128::from(k) * 8_000_000_000).div_ceil(3)
            );
        }
    }

    #[test]
    fn a_full_queue_tail_drops_and_drains_at_the_rate() {
        // 100 Mbit/s, 1500-byte frames: 120 µs each; room for 10 frames.
        let limit = QueueLimit {
            packets: Some(10),
            bytes: None,
        };
        let mut link = Bottleneck::new(100_000_000, limit);
        let burst: Vec<_> = (0..15).map(|_| link.offer(Duration::ZERO, 1500)).collect();
        assert!(burst[..10].iter().all(Option::is_some));
        assert!(burst[10..].iter().all(Option::is_none));
        assert_eq!(link.high_water(), (10, 15_000));
        // After 3 frames' serialisation time three slots are free again.
        let later = Duration::from_micros(360);
        assert!(link.offer(later, 1500).is_some());
        assert!(link.offer(later, 1500).is_some());
        assert!(link.offer(later, 1500).is_some());
        assert!(link.offer(later, 1500).is_none());
        assert_eq!(link.backlog(), (10, 15_000));
    }

    #[test]
    fn a_byte_limit_counts_bytes() {
        let limit = QueueLimit {
            packets: None,
            bytes: Some(3000),
        };
        let mut link = Bottleneck::new(1_000_000, limit);
        assert!(link.offer(Duration::ZERO, 1500).is_some());
        assert!(link.offer(Duration::ZERO, 1000).is_some());
        assert!(link.offer(Duration::ZERO, 600).is_none());
        assert!(link.offer(Duration::ZERO, 500).is_some());
    }

    #[test]
    fn sustained_overload_delivers_exactly_the_rate() {
        // Offer 150 Mbit/s to a 100 Mbit/s link for a simulated second.
        let mut link = Bottleneck::new(100_000_000, QueueLimit::default());
        let gap = Duration::from_nanos(1514 * 8 * 1_000_000_000 / 150_000_000);
        let mut departures = Vec::new();
        let mut now = Duration::ZERO;
        while now < Duration::from_secs(1) {
            if let Some(departure) = link.offer(now, 1514) {
                departures.push(departure);
            }
            now += gap;
        }
        let steady = &departures[2000..];
        let span = *steady.last().unwrap() - steady[0];
        let bits = (steady.len() - 1) as f64 * 1514.0 * 8.0;
        let rate = bits / span.as_secs_f64();
        assert!((rate - 100e6).abs() < 1.0, "{rate}");
    }
}
