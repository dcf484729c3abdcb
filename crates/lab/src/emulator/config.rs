//! What one direction of an emulated link does to the frames crossing it.
//!
//! Every field defaults to "transparent": no delay, no loss, no rate limit.
//! A [`LinkConfig`] is also written and read as a compact spec string
//! (`delay=20ms,jitter=2ms,loss=5%,rate=100mbit`, see [`super::spec`]).

use std::time::Duration;

/// Frames a rate-limited link's queue holds by default: the default
/// `txqueuelen` of a Linux interface. At 100 Mbit/s and 1500-byte frames
/// that is 120 ms of queueing; lower it (or set a byte limit near the
/// bandwidth-delay product) to model a shallow buffer.
pub const DEFAULT_QUEUE_PACKETS: u32 = 1000;

/// Extra delay of a reordered frame when the spec gives none.
pub const DEFAULT_REORDER_DELAY: Duration = Duration::from_millis(1);

/// Seed of [`LinkConfig::default`].
pub const DEFAULT_SEED: u64 = 1;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("probability {0} is outside 0..=1")]
    ProbabilityOutOfRange(f64),
    #[error("a rate of 0 bit/s would never deliver anything")]
    ZeroRate,
    #[error("a queue limit of 0 would drop every frame")]
    ZeroQueueLimit,
    #[error("delay {0:?} is too large (at most {max:?})", max = MAX_DELAY)]
    DelayTooLarge(Duration),
}

/// Largest delay, jitter or reorder delay accepted: an hour.
pub const MAX_DELAY: Duration = Duration::from_secs(3600);

/// A probability in `0..=1`; `Probability::new(0.05)` is 5 %.
#[derive(Clone, Copy, Debug, Default, PartialEq, PartialOrd)]
pub struct Probability(f64);

impl Probability {
    pub const ZERO: Self = Self(0.0);
    pub const ONE: Self = Self(1.0);

    pub fn new(value: f64) -> Result<Self, ConfigError> {
        if (0.0..=1.0).contains(&value) {
            Ok(Self(value))
        } else {
            Err(ConfigError::ProbabilityOutOfRange(value))
        }
    }

    /// `Probability::from_percent(5.0)` is 5 %.
    pub fn from_percent(percent: f64) -> Result<Self, ConfigError> {
        Self::new(percent / 100.0)
    }

    pub fn value(self) -> f64 {
        self.0
    }

    pub fn is_zero(self) -> bool {
        self.0 == 0.0
    }
}

/// Gilbert–Elliott bursty loss: a two-state Markov chain, one step per
/// frame. In the good state a frame is lost with `loss_in_good`, in the bad
/// state with `loss_in_bad`; after each frame the chain moves good → bad
/// with `p` and bad → good with `r`. The plain Gilbert model is
/// `loss_in_bad = 1`, `loss_in_good = 0` ([`GilbertElliott::gilbert`]).
/// netem's `gemodel p r 1-h 1-k` takes the same four numbers.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GilbertElliott {
    pub p: Probability,
    pub r: Probability,
    pub loss_in_bad: Probability,
    pub loss_in_good: Probability,
}

impl GilbertElliott {
    /// Every frame in the bad state is lost, none in the good state.
    pub fn gilbert(p: Probability, r: Probability) -> Self {
        Self {
            p,
            r,
            loss_in_bad: Probability::ONE,
            loss_in_good: Probability::ZERO,
        }
    }

    /// Long-run share of frames spent in the bad state, `p / (p + r)`
    /// (0 when the chain never leaves the good state it starts in).
    pub fn bad_state_share(&self) -> f64 {
        let (p, r) = (self.p.value(), self.r.value());
        if p + r == 0.0 { 0.0 } else { p / (p + r) }
    }

    /// Long-run loss rate: `π_bad · loss_in_bad + π_good · loss_in_good`.
    pub fn expected_loss(&self) -> f64 {
        let bad = self.bad_state_share();
        bad * self.loss_in_bad.value() + (1.0 - bad) * self.loss_in_good.value()
    }

    /// Mean number of consecutive frames in the bad state, `1 / r`.
    pub fn mean_bad_run_frames(&self) -> f64 {
        1.0 / self.r.value()
    }
}

/// A share of frames held back by `extra_delay`, so frames behind them
/// overtake them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reorder {
    pub probability: Probability,
    pub extra_delay: Duration,
}

/// Whether jitter may reorder frames.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum JitterOrder {
    /// A frame never leaves before the one ahead of it (as when jitter
    /// comes from queueing): its release is pushed back as needed.
    #[default]
    Fifo,
    /// Each frame keeps its own random delay, so frames may overtake.
    Reorder,
}

/// Bound of a rate-limited link's queue (the bottleneck buffer); a frame
/// that would exceed either bound is tail-dropped. `None` means no bound
/// of that kind. Counted frames are those not yet fully serialised,
/// including the one on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueLimit {
    pub packets: Option<u32>,
    pub bytes: Option<u64>,
}

impl Default for QueueLimit {
    /// [`DEFAULT_QUEUE_PACKETS`] frames, no byte bound.
    fn default() -> Self {
        Self {
            packets: Some(DEFAULT_QUEUE_PACKETS),
            bytes: None,
        }
    }
}

/// One direction of an emulated link. Frames pass, in order: random loss,
/// bursty loss, duplication (the copy takes the rest of the path on its
/// own), the rate-limited queue, then delay, jitter and reordering.
#[derive(Clone, Debug, PartialEq)]
pub struct LinkConfig {
    /// One-way delay every frame gets (the propagation delay).
    pub delay: Duration,
    /// Upper bound of a uniformly random extra delay, `0..=jitter`.
    pub jitter: Duration,
    pub jitter_order: JitterOrder,
    /// Independent (Bernoulli) loss per frame.
    pub loss: Probability,
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Serialisation rate in bits per second of Ethernet frame (header and
    /// payload, no FCS, preamble or gap); `None` is unlimited.
    pub rate_bits_per_sec: Option<u64>,
    /// Bound of the queue in front of the rate limit (unused without one).
    pub queue_limit: QueueLimit,
    pub reorder: Option<Reorder>,
    /// Chance that a frame is sent twice.
    pub duplicate: Probability,
    /// Seed of every random choice; the same seed and traffic give the
    /// same decisions. Each impairment draws from its own stream, so turning
    /// one on does not change the choices of another.
    pub seed: u64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            jitter_order: JitterOrder::Fifo,
            loss: Probability::ZERO,
            gilbert_elliott: None,
            rate_bits_per_sec: None,
            queue_limit: QueueLimit::default(),
            reorder: None,
            duplicate: Probability::ZERO,
            seed: DEFAULT_SEED,
        }
    }
}

impl LinkConfig {
    /// A link that only delays, by `delay` one way.
    pub fn delayed(delay: Duration) -> Self {
        Self {
            delay,
            ..Self::default()
        }
    }

    /// Rejects settings no link could run with.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.rate_bits_per_sec == Some(0) {
            return Err(ConfigError::ZeroRate);
        }
        if self.queue_limit.packets == Some(0) || self.queue_limit.bytes == Some(0) {
            return Err(ConfigError::ZeroQueueLimit);
        }
        let reorder_delay = self.reorder.map_or(Duration::ZERO, |r| r.extra_delay);
        for delay in [self.delay, self.jitter, reorder_delay] {
            if delay > MAX_DELAY {
                return Err(ConfigError::DelayTooLarge(delay));
            }
        }
        Ok(())
    }

    /// The longest a frame waits after its serialisation: delay, full
    /// jitter and the reorder hold-back.
    pub fn max_hold(&self) -> Duration {
        self.delay + self.jitter + self.reorder.map_or(Duration::ZERO, |r| r.extra_delay)
    }

    /// Whether the link leaves frames alone.
    pub fn is_transparent(&self) -> bool {
        self.delay.is_zero()
            && self.jitter.is_zero()
            && self.loss.is_zero()
            && self.gilbert_elliott.is_none()
            && self.rate_bits_per_sec.is_none()
            && self.reorder.is_none()
            && self.duplicate.is_zero()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_are_checked() {
        assert_eq!(Probability::from_percent(5.0).unwrap().value(), 0.05);
        assert!(Probability::new(1.5).is_err());
        assert!(Probability::new(-0.1).is_err());
        assert!(Probability::new(f64::NAN).is_err());
    }

    #[test]
    fn gilbert_elliott_long_run_figures() {
        let model = GilbertElliott::gilbert(
            Probability::new(0.02).unwrap(),
            Probability::new(0.2).unwrap(),
        );
        assert!((model.expected_loss() - 0.02 / 0.22).abs() < 1e-12);
        assert!((model.mean_bad_run_frames() - 5.0).abs() < 1e-12);
        let stuck = GilbertElliott::gilbert(Probability::ZERO, Probability::ZERO);
        assert_eq!(stuck.expected_loss(), 0.0);
    }

    #[test]
    fn validation_rejects_unusable_links() {
        assert!(LinkConfig::default().validate().is_ok());
        assert!(LinkConfig::default().is_transparent());
        let zero_rate = LinkConfig {
            rate_bits_per_sec: Some(0),
            ..LinkConfig::default()
        };
        assert_eq!(zero_rate.validate(), Err(ConfigError::ZeroRate));
        let zero_queue = LinkConfig {
            queue_limit: QueueLimit {
                packets: None,
                bytes: Some(0),
            },
            ..LinkConfig::default()
        };
        assert_eq!(zero_queue.validate(), Err(ConfigError::ZeroQueueLimit));
        let huge = LinkConfig::delayed(Duration::from_secs(7200));
        assert!(matches!(
            huge.validate(),
            Err(ConfigError::DelayTooLarge(_))
        ));
    }
}
