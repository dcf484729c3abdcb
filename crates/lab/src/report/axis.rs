//! Axes: linear or log scales, "nice" tick steps (1, 2, 2.5 or 5 times a
//! power of ten), decade ticks, or ticks at given values (the frame sizes
//! measured), and the mapping from data values to pixels.

use super::format;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    Linear,
    /// Base 10; values at or below zero are left out.
    Log,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    pub label: String,
    pub scale: Scale,
    /// Ticks to draw instead of computed ones (e.g. the frame sizes that
    /// were measured); the axis then spans exactly the data and these.
    pub ticks: Vec<f64>,
}

impl Axis {
    pub fn linear(label: &str) -> Self {
        Axis {
            label: label.to_string(),
            scale: Scale::Linear,
            ticks: Vec::new(),
        }
    }

    pub fn log(label: &str) -> Self {
        Axis {
            label: label.to_string(),
            scale: Scale::Log,
            ticks: Vec::new(),
        }
    }

    pub fn with_ticks(mut self, ticks: Vec<f64>) -> Self {
        self.ticks = ticks;
        self
    }
}

/// Drops float noise from tick arithmetic (`3 × 0.2` is `0.6`, not
/// `0.6000000000000001`) by rounding to 12 significant digits.
fn clean(value: f64) -> f64 {
    format!("{value:.11e}").parse().unwrap_or(value)
}

/// A step of 1, 2, 2.5 or 5 times a power of ten giving about `target`
/// intervals over `span`.
pub fn nice_step(span: f64, target: usize) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / target.max(1) as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let normalized = raw / magnitude;
    let nice = if normalized <= 1.0 {
        1.0
    } else if normalized <= 2.0 {
        2.0
    } else if normalized <= 2.5 {
        2.5
    } else if normalized <= 5.0 {
        5.0
    } else {
        10.0
    };
    clean(nice * magnitude)
}

/// Ticks at multiples of a nice step covering `low..=high`, first and last
/// tick on or outside the data.
pub fn linear_ticks(low: f64, high: f64, target: usize) -> Vec<f64> {
    let (low, high) = if high > low {
        (low, high)
    } else {
        (low, low + low.abs().max(1.0))
    };
    let step = nice_step(high - low, target);
    // The slack absorbs float noise (0.6 / 0.2 = 2.9999999999999996).
    let first = (low / step + 1e-9).floor() as i64;
    let last = (high / step - 1e-9).ceil() as i64;
    (first..=last)
        .map(|index| clean(index as f64 * step))
        .collect()
}

/// Decades covering `low..=high` (both > 0); with two decades or fewer,
/// also 2× and 5× each decade.
pub fn log_ticks(low: f64, high: f64) -> Vec<f64> {
    let low = if low > 0.0 { low } else { 1.0 };
    let high = if high > low { high } else { low * 10.0 };
    let first = (low.log10() + 1e-9).floor() as i32;
    let mut last = (high.log10() - 1e-9).ceil() as i32;
    if last <= first {
        last = first + 1;
    }
    let mut ticks = Vec::new();
    for exponent in first..=last {
        let decade = clean(10f64.powi(exponent));
        ticks.push(decade);
        if last - first <= 2 && exponent < last {
            ticks.push(clean(2.0 * decade));
            ticks.push(clean(5.0 * decade));
        }
    }
    ticks
}

/// Maps data values to pixels along one axis.
pub struct Mapping {
    pub scale: Scale,
    pub domain: (f64, f64),
    pub pixels: (f64, f64),
    pub ticks: Vec<f64>,
    /// Ticks are data values (label them exactly).
    pub exact_labels: bool,
}

impl Mapping {
    /// Fits `values` (finite ones; positive ones on a log scale).
    pub fn fit(axis: &Axis, values: &[f64], include_zero: bool, pixels: (f64, f64)) -> Self {
        let scale = axis.scale;
        let usable = |v: &f64| v.is_finite() && (scale == Scale::Linear || *v > 0.0);
        let fixed: Vec<f64> = axis.ticks.iter().copied().filter(usable).collect();
        if !fixed.is_empty() {
            let all = values.iter().chain(&fixed).copied().filter(usable);
            let low = all.clone().fold(f64::INFINITY, f64::min);
            let high = all.fold(f64::NEG_INFINITY, f64::max);
            let high = if high > low { high } else { low + 1.0 };
            return Mapping {
                scale,
                domain: (low, high),
                pixels,
                ticks: fixed,
                exact_labels: true,
            };
        }
        let usable: Vec<f64> = values.iter().copied().filter(usable).collect();
        let mut low = usable.iter().copied().fold(f64::INFINITY, f64::min);
        let mut high = usable.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if usable.is_empty() {
            (low, high) = (1.0, 10.0);
        }
        let ticks = match scale {
            Scale::Linear => {
                if include_zero {
                    low = low.min(0.0);
                    high = high.max(0.0);
                }
                linear_ticks(low, high, 5)
            }
            Scale::Log => log_ticks(low, high),
        };
        let domain = (ticks[0], ticks[ticks.len() - 1]);
        Mapping {
            scale,
            domain,
            pixels,
            ticks,
            exact_labels: false,
        }
    }

    pub fn to_pixel(&self, value: f64) -> f64 {
        let (low, high, value) = match self.scale {
            Scale::Linear => (self.domain.0, self.domain.1, value),
            Scale::Log => (
                self.domain.0.log10(),
                self.domain.1.log10(),
                value.max(f64::MIN_POSITIVE).log10(),
            ),
        };
        let fraction = if high > low {
            (value - low) / (high - low)
        } else {
            0.0
        };
        self.pixels.0 + fraction * (self.pixels.1 - self.pixels.0)
    }

    pub fn tick_label(&self, index: usize) -> String {
        let value = self.ticks[index];
        if self.exact_labels {
            return format::exact_tick(value);
        }
        let step = match self.scale {
            Scale::Linear if self.ticks.len() > 1 => clean(self.ticks[1] - self.ticks[0]),
            _ => value,
        };
        format::tick(value, step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nice_steps() {
        assert_eq!(nice_step(1000.0, 5), 200.0);
        assert_eq!(nice_step(9.41e9, 5), 2e9);
        assert_eq!(nice_step(25.0, 5), 5.0);
        assert_eq!(nice_step(0.12, 5), 0.025);
        assert_eq!(nice_step(7.0, 5), 2.0);
        assert_eq!(nice_step(0.0, 5), 1.0);
    }

    #[test]
    fn linear_ticks_cover_the_data() {
        assert_eq!(
            linear_ticks(0.0, 9.41e9, 5),
            [0.0, 2e9, 4e9, 6e9, 8e9, 1e10]
        );
        assert_eq!(
            linear_ticks(64.0, 1518.0, 5),
            [0.0, 500.0, 1000.0, 1500.0, 2000.0]
        );
        assert_eq!(
            linear_ticks(0.0, 25.0, 5),
            [0.0, 5.0, 10.0, 15.0, 20.0, 25.0]
        );
        // A single value still gives an axis.
        assert_eq!(linear_ticks(0.0, 0.0, 5), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        let ticks = linear_ticks(-3.0, 7.0, 5);
        assert_eq!(ticks.first(), Some(&-4.0));
        assert_eq!(ticks.last(), Some(&8.0));
    }

    #[test]
    fn log_ticks_by_decade() {
        assert_eq!(log_ticks(1.2e5, 1.4e7), [1e5, 1e6, 1e7, 1e8]);
        assert_eq!(
            log_ticks(3.0, 40.0),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
        assert_eq!(log_ticks(1e6, 1e6), [1e6, 2e6, 5e6, 1e7]);
    }
}
