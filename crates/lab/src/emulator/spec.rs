//! The compact spec string of a [`LinkConfig`], for command lines and
//! reports: comma-separated `key=value` pairs, e.g.
//! `delay=20ms,jitter=2ms,loss=5%,rate=100mbit`. The empty string is a
//! transparent link. `Display` writes the canonical form (non-default keys
//! only), which parses back to the same config.
//!
//! | key | value | example |
//! |---|---|---|
//! | `delay` | duration (`ns`, `us`, `ms`, `s`) | `delay=20ms` |
//! | `jitter` | duration: random extra delay `0..=jitter` | `jitter=2ms` |
//! | `jitter-order` | `fifo` (default) or `reorder` | `jitter-order=reorder` |
//! | `loss` | probability (`5%` or `0.05`) | `loss=1%` |
//! | `ge` | Gilbert–Elliott `p/r[/loss-in-bad[/loss-in-good]]` | `ge=1%/25%` |
//! | `rate` | `bit`, `kbit`, `mbit`, `gbit` (powers of 1000) | `rate=100mbit` |
//! | `queue` | frames, or `none` | `queue=1000` |
//! | `queue-bytes` | bytes (`b`, `kb`, `mb`: powers of 1000) | `queue-bytes=375kb` |
//! | `reorder` | `probability[/extra delay]` (default 1 ms) | `reorder=1%/2ms` |
//! | `duplicate` (`dup`) | probability | `duplicate=0.5%` |
//! | `seed` | unsigned integer | `seed=7` |
//!
//! Giving `queue` or `queue-bytes` replaces the default queue bound
//! (1000 frames) with exactly the bounds given.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use super::config::{
    ConfigError, DEFAULT_REORDER_DELAY, GilbertElliott, JitterOrder, LinkConfig, Probability,
    QueueLimit, Reorder,
};

/// Keys a spec may use, for error messages.
pub const VALID_KEYS: &str = "delay, jitter, jitter-order, loss, ge, rate, queue, queue-bytes, reorder, duplicate (dup), seed";

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    #[error("unknown key `{0}`; valid keys: {VALID_KEYS}")]
    UnknownKey(String),
    #[error("`{0}` has no value; write key=value (valid keys: {VALID_KEYS})")]
    MissingValue(String),
    #[error("`{key}` is given twice")]
    RepeatedKey { key: String },
    #[error("bad value `{value}` for `{key}`: expected {expected}")]
    BadValue {
        key: String,
        value: String,
        expected: &'static str,
    },
    #[error("invalid link: {0}")]
    Invalid(#[from] ConfigError),
}

const DURATION: &str = "a duration such as 20ms, 1.5ms, 500us, 1s";
const PROBABILITY: &str = "a probability such as 5% or 0.05";
const RATE: &str = "a rate such as 100mbit, 1gbit, 64kbit, 9600bit";
const FRAMES: &str = "a number of frames such as 1000, or none";
const BYTES: &str = "a size such as 1500000, 375kb, 1.5mb";
const GE: &str = "p/r[/loss-in-bad[/loss-in-good]], e.g. 1%/25% or 1%/25%/100%/0%";
const REORDER: &str = "probability[/extra delay], e.g. 1% or 1%/2ms";
const ORDER: &str = "fifo or reorder";
const SEED: &str = "an unsigned 64-bit integer";

/// A decimal number times `scale`, rounded to the nearest integer.
fn scaled(number: &str, scale: f64) -> Option<u64> {
    if number.is_empty() || !number.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        return None;
    }
    let value = number.parse::<f64>().ok()? * scale;
    (value.is_finite() && value >= 0.0 && value < u64::MAX as f64).then(|| value.round() as u64)
}

/// Splits `20ms` into `("20", "ms")`.
fn split_unit(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    text.split_at(end)
}

fn parse_duration(text: &str) -> Option<Duration> {
    let (number, unit) = split_unit(text);
    let scale = match unit {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return None,
    };
    scaled(number, scale).map(Duration::from_nanos)
}

fn parse_probability(text: &str) -> Option<Probability> {
    match text.strip_suffix('%') {
        Some(percent) => Probability::from_percent(percent.parse().ok()?).ok(),
        None => Probability::new(text.parse().ok()?).ok(),
    }
}

fn parse_rate(text: &str) -> Option<u64> {
    let (number, unit) = split_unit(text);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "bit" => 1.0,
        "kbit" => 1e3,
        "mbit" => 1e6,
        "gbit" => 1e9,
        _ => return None,
    };
    scaled(number, scale)
}

fn parse_bytes(text: &str) -> Option<u64> {
    let (number, unit) = split_unit(text);
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        _ => return None,
    };
    scaled(number, scale)
}

fn parse_gilbert_elliott(text: &str) -> Option<GilbertElliott> {
    let parts: Vec<Probability> = text
        .split('/')
        .map(parse_probability)
        .collect::<Option<_>>()?;
    match parts[..] {
        [p, r] => Some(GilbertElliott::gilbert(p, r)),
        [p, r, loss_in_bad] => Some(GilbertElliott {
            loss_in_bad,
            ..GilbertElliott::gilbert(p, r)
        }),
        [p, r, loss_in_bad, loss_in_good] => Some(GilbertElliott {
            p,
            r,
            loss_in_bad,
            loss_in_good,
        }),
        _ => None,
    }
}

fn parse_reorder(text: &str) -> Option<Reorder> {
    let (probability, extra_delay) = match text.split_once('/') {
        Some((p, delay)) => (p, parse_duration(delay)?),
        None => (text, DEFAULT_REORDER_DELAY),
    };
    Some(Reorder {
        probability: parse_probability(probability)?,
        extra_delay,
    })
}

impl FromStr for LinkConfig {
    type Err = SpecError;

    fn from_str(spec: &str) -> Result<Self, SpecError> {
        let mut config = LinkConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        let mut queue: Option<QueueLimit> = None;
        for pair in spec
            .split(',')
            .map(str::trim)
            .filter(|pair| !pair.is_empty())
        {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| SpecError::MissingValue(pair.to_string()))?;
            let (key, value) = (key.trim(), value.trim());
            let key = if key == "dup" { "duplicate" } else { key };
            if seen.contains(&key) {
                return Err(SpecError::RepeatedKey {
                    key: key.to_string(),
                });
            }
            let bad = |expected| SpecError::BadValue {
                key: key.to_string(),
                value: value.to_string(),
                expected,
            };
            match key {
                "delay" => config.delay = parse_duration(value).ok_or_else(|| bad(DURATION))?,
                "jitter" => config.jitter = parse_duration(value).ok_or_else(|| bad(DURATION))?,
                "jitter-order" => {
                    config.jitter_order = match value {
                        "fifo" => JitterOrder::Fifo,
                        "reorder" => JitterOrder::Reorder,
                        _ => return Err(bad(ORDER)),
                    }
                }
                "loss" => config.loss = parse_probability(value).ok_or_else(|| bad(PROBABILITY))?,
                "ge" => {
                    config.gilbert_elliott =
                        Some(parse_gilbert_elliott(value).ok_or_else(|| bad(GE))?)
                }
                "rate" => {
                    config.rate_bits_per_sec = Some(parse_rate(value).ok_or_else(|| bad(RATE))?)
                }
                "queue" => {
                    let packets = match value {
                        "none" => None,
                        _ => Some(value.parse().map_err(|_| bad(FRAMES))?),
                    };
                    queue
                        .get_or_insert(QueueLimit {
                            packets: None,
                            bytes: None,
                        })
                        .packets = packets;
                }
                "queue-bytes" => {
                    let bytes = parse_bytes(value).ok_or_else(|| bad(BYTES))?;
                    queue
                        .get_or_insert(QueueLimit {
                            packets: None,
                            bytes: None,
                        })
                        .bytes = Some(bytes);
                }
                "reorder" => {
                    config.reorder = Some(parse_reorder(value).ok_or_else(|| bad(REORDER))?)
                }
                "duplicate" => {
                    config.duplicate = parse_probability(value).ok_or_else(|| bad(PROBABILITY))?
                }
                "seed" => config.seed = value.parse().map_err(|_| bad(SEED))?,
                _ => return Err(SpecError::UnknownKey(key.to_string())),
            }
            seen.push(key);
        }
        if let Some(limit) = queue {
            config.queue_limit = limit;
        }
        config.validate()?;
        Ok(config)
    }
}

/// Writes a duration in the largest unit that keeps it exact.
struct Compact(Duration);

impl fmt::Display for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nanos = self.0.as_nanos();
        for (unit, scale) in [("s", 1_000_000_000), ("ms", 1_000_000), ("us", 1_000)] {
            if nanos.is_multiple_of(scale) && nanos > 0 {
                return write!(f, "{}{unit}", nanos / scale);
            }
        }
        write!(f, "{nanos}ns")
    }
}

impl fmt::Display for Probability {
    /// As the shortest percentage that reads back exactly, else as a fraction.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let percent = self.value() * 100.0;
        for precision in 0..=12 {
            let text = format!("{percent:.precision$}");
            if text
                .parse::<f64>()
                .is_ok_and(|read| read / 100.0 == self.value())
            {
                return write!(f, "{text}%");
            }
        }
        write!(f, "{}", self.value())
    }
}

struct Rate(u64);

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (unit, scale) in [
            ("gbit", 1_000_000_000),
            ("mbit", 1_000_000),
            ("kbit", 1_000),
        ] {
            if self.0.is_multiple_of(scale) && self.0 > 0 {
                return write!(f, "{}{unit}", self.0 / scale);
            }
        }
        write!(f, "{}bit", self.0)
    }
}

impl fmt::Display for LinkConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let defaults = LinkConfig::default();
        let mut parts: Vec<String> = Vec::new();
        if !self.delay.is_zero() {
            parts.push(format!("delay={}", Compact(self.delay)));
        }
        if !self.jitter.is_zero() {
            parts.push(format!("jitter={}", Compact(self.jitter)));
        }
        if self.jitter_order == JitterOrder::Reorder {
            parts.push("jitter-order=reorder".into());
        }
        if !self.loss.is_zero() {
            parts.push(format!("loss={}", self.loss));
        }
        if let Some(ge) = self.gilbert_elliott {
            parts.push(format!(
                "ge={}/{}/{}/{}",
                ge.p, ge.r, ge.loss_in_bad, ge.loss_in_good
            ));
        }
        if let Some(rate) = self.rate_bits_per_sec {
            parts.push(format!("rate={}", Rate(rate)));
        }
        if self.queue_limit != defaults.queue_limit {
            match self.queue_limit.packets {
                Some(packets) => parts.push(format!("queue={packets}")),
                None => parts.push("queue=none".into()),
            }
            if let Some(bytes) = self.queue_limit.bytes {
                parts.push(format!("queue-bytes={bytes}"));
            }
        }
        if let Some(reorder) = self.reorder {
            parts.push(format!(
                "reorder={}/{}",
                reorder.probability,
                Compact(reorder.extra_delay)
            ));
        }
        if !self.duplicate.is_zero() {
            parts.push(format!("duplicate={}", self.duplicate));
        }
        if self.seed != defaults.seed {
            parts.push(format!("seed={}", self.seed));
        }
        f.write_str(&parts.join(","))
    }
}

#[cfg(test)]
mod tests;
