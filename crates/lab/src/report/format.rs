//! Numbers for humans: SI prefixes with three to four significant digits
//! (`1.23 Gbit/s`, `148.8 kfps`, `0.052 ms`), ratios (`0.52×`), percentages,
//! thousands separators, and compact tick labels for charts. All output is
//! deterministic (plain `format!`, no locale).

use serde_json::Value;

/// Decimals that keep three to four significant digits: `148.8`, `14.88`,
/// `1.23`, `0.052`, `0.0068`.
fn decimals(magnitude: f64) -> usize {
    let magnitude = magnitude.abs();
    if magnitude >= 1000.0 {
        0
    } else if magnitude >= 100.0 {
        1
    } else if magnitude >= 1.0 {
        2
    } else if magnitude >= 0.01 || magnitude == 0.0 {
        3
    } else {
        4
    }
}

/// `value` with as many decimals as [`decimals`] gives, `-0` printed as `0`.
pub fn plain(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    if value == 0.0 {
        return "0".to_string();
    }
    let mut text = format!("{:.*}", decimals(value), value);
    // Rounding can cross a threshold (0.99997 -> 1.000): use the rounded
    // value's decimals then.
    if let Ok(rounded) = text.parse::<f64>()
        && decimals(rounded) < decimals(value)
    {
        text = format!("{:.*}", decimals(rounded), value);
    }
    if text.starts_with('-') && text[1..].chars().all(|c| c == '0' || c == '.') {
        "0".to_string()
    } else {
        text
    }
}

const PREFIXES: [(f64, &str); 4] = [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")];

/// Splits `value` into a mantissa below 1000 and an SI prefix.
fn split_prefix(value: f64) -> (f64, &'static str) {
    for (scale, prefix) in PREFIXES {
        // Round first so 999.96e6 prints as 1.00 G rather than 1000.0 M.
        if value.abs() >= scale * 0.99995 {
            return (value / scale, prefix);
        }
    }
    (value, "")
}

/// The short name and whether SI prefixes apply, for a record unit.
fn unit_style(unit: &str) -> (&str, bool) {
    match unit {
        "bit/s" => ("bit/s", true),
        "frames/s" => ("fps", true),
        "packets/s" => ("pps", true),
        "B/s" | "bytes/s" => ("B/s", true),
        "bytes" | "B" => ("B", true),
        "percent" => ("%", false),
        other => (other, false),
    }
}

/// `1.23 Gbit/s`, `148.8 kfps`, `0.052 ms`, `12.30 s`, `87.3 %`.
pub fn quantity(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let (short, prefixed) = unit_style(unit);
    let (mantissa, prefix) = if prefixed {
        split_prefix(value)
    } else {
        (value, "")
    };
    let number = plain(mantissa);
    match (prefix, short) {
        ("", "") => number,
        (prefix, short) => format!("{number} {prefix}{short}"),
    }
}

/// `low` to `high` with one unit: `5.14–6.58 Gbit/s`, or each with its
/// own where the prefixes differ (`980 Mbit/s–1.20 Gbit/s`).
pub fn range(low: f64, high: f64, unit: &str) -> String {
    let (low, high) = (quantity(low, unit), quantity(high, unit));
    match (low.split_once(' '), high.split_once(' ')) {
        (Some((low_number, low_unit)), Some((high_number, high_unit))) if low_unit == high_unit => {
            format!("{low_number}–{high_number} {high_unit}")
        }
        _ => format!("{low}–{high}"),
    }
}

/// The same as [`quantity`] but terse for terminal cells: `9.41G`,
/// `148.8k`, `0.052`; the unit goes in the heading.
pub fn terse(value: f64, unit: &str) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let (_, prefixed) = unit_style(unit);
    if prefixed {
        let (mantissa, prefix) = split_prefix(value);
        format!("{}{prefix}", plain(mantissa))
    } else {
        plain(value)
    }
}

/// `0.52×`, `1.00×`, `12.3×`, `0.004×`.
pub fn ratio(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let magnitude = value.abs();
    let decimals = if magnitude >= 100.0 {
        0
    } else if magnitude >= 10.0 {
        1
    } else if magnitude >= 0.01 || magnitude == 0.0 {
        2
    } else {
        3
    };
    format!("{value:.decimals$}×")
}

/// `87.3 %`, `5.0 %` (always one decimal, so columns line up).
pub fn percent(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    format!("{value:.1} %")
}

/// `148,810` (rounded to an integer, comma every three digits).
pub fn thousands(value: f64) -> String {
    if !value.is_finite() {
        return "n/a".to_string();
    }
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (index, digit) in digits.chars().enumerate() {
        if index > 0 && (digits.len() - index) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if rounded < 0.0 {
        format!("-{out}")
    } else {
        out
    }
}

/// A chart tick label: SI prefix, then the fewest decimals that still tell
/// ticks `step` apart (`0`, `2.5M`, `10G`, `0.05`).
pub fn tick(value: f64, step: f64) -> String {
    if value == 0.0 {
        return "0".to_string();
    }
    let (mantissa, prefix) = split_prefix(value);
    let scale = if mantissa == 0.0 {
        1.0
    } else {
        value / mantissa
    };
    let scaled_step = (step / scale).abs();
    let decimals = if scaled_step > 0.0 && scaled_step < 1.0 {
        // Enough decimals for the step, e.g. 0.25 -> 2; capped for safety.
        let mut decimals = 0;
        while decimals < 6 {
            let factor = 10f64.powi(decimals);
            if ((scaled_step * factor) - (scaled_step * factor).round()).abs() < 1e-6 {
                break;
            }
            decimals += 1;
        }
        decimals as usize
    } else {
        0
    };
    let text = format!("{mantissa:.decimals$}");
    format!("{}{prefix}", trim_zeros(&text))
}

/// A tick placed at a measured value (a frame size, a drop rate): the
/// value itself (`1518`, `0.5`), with an SI prefix only from 10,000 up.
pub fn exact_tick(value: f64) -> String {
    if value.abs() < 1e4 {
        trim_zeros(&format!("{value:.3}")).to_string()
    } else {
        let (mantissa, prefix) = split_prefix(value);
        format!("{}{prefix}", trim_zeros(&format!("{mantissa:.3}")))
    }
}

/// `2.50` -> `2.5`, `3.00` -> `3`; integers untouched.
fn trim_zeros(text: &str) -> &str {
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.')
    } else {
        text
    }
}

/// A parameter value as text: strings bare, numbers as JSON prints them.
pub fn param_value(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// A parameter name as a column heading: `frame_size` -> `frame size (bytes)`.
pub fn param_heading(key: &str) -> String {
    match key {
        "frame_size" => "frame size (bytes)".to_string(),
        "payload" => "payload (bytes)".to_string(),
        "drop_percent" => "drop %".to_string(),
        "delay_ms" => "one-way delay (ms)".to_string(),
        other => other.replace('_', " "),
    }
}

/// `key: value` for captions, with byte counts made readable.
pub fn param_pair(key: &str, value: &Value) -> String {
    let text = match (key, value.as_f64()) {
        ("bytes", Some(bytes)) => quantity(bytes, "bytes"),
        _ => param_value(value),
    };
    format!("{}: {text}", key.replace('_', " "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_like_the_reference_studies() {
        assert_eq!(quantity(1.234e9, "bit/s"), "1.23 Gbit/s");
        assert_eq!(quantity(148_809.5, "frames/s"), "148.8 kfps");
        assert_eq!(quantity(14_880_952.0, "frames/s"), "14.88 Mfps");
        assert_eq!(quantity(949.2e6, "bit/s"), "949.2 Mbit/s");
        assert_eq!(quantity(0.052, "ms"), "0.052 ms");
        assert_eq!(quantity(0.0068, "ms"), "0.0068 ms");
        assert_eq!(quantity(12.3, "s"), "12.30 s");
        assert_eq!(quantity(87.25, "percent"), "87.25 %");
        assert_eq!(quantity(999.97e6, "bit/s"), "1.00 Gbit/s");
        assert_eq!(quantity(512.0, "frames/s"), "512.0 fps");
        assert_eq!(quantity(3.0, ""), "3.00");
        assert_eq!(quantity(10_000_000.0, "bytes"), "10.00 MB");
        assert_eq!(quantity(f64::NAN, "ms"), "n/a");
        assert_eq!(plain(-0.0001), "-0.0001");
        assert_eq!(plain(-0.00001), "0");
        assert_eq!(plain(0.0), "0");
    }

    #[test]
    fn terse_ratio_percent_thousands() {
        assert_eq!(terse(9.41e9, "bit/s"), "9.41G");
        assert_eq!(terse(148_810.0, "frames/s"), "148.8k");
        assert_eq!(terse(0.052, "ms"), "0.052");
        assert_eq!(ratio(0.5234), "0.52×");
        assert_eq!(ratio(1.0), "1.00×");
        assert_eq!(ratio(12.34), "12.3×");
        assert_eq!(ratio(123.4), "123×");
        assert_eq!(ratio(0.0042), "0.004×");
        assert_eq!(percent(100.0), "100.0 %");
        assert_eq!(percent(87.34), "87.3 %");
        assert_eq!(thousands(148_809.5), "148,810");
        assert_eq!(thousands(14_880_952.38), "14,880,952");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(-1234.0), "-1,234");
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick(0.0, 2e9), "0");
        assert_eq!(tick(2e9, 2e9), "2G");
        assert_eq!(tick(2.5e6, 5e5), "2.5M");
        assert_eq!(tick(0.05, 0.01), "0.05");
        assert_eq!(tick(0.25, 0.25), "0.25");
        assert_eq!(tick(1500.0, 500.0), "1.5k");
        assert_eq!(tick(200.0, 200.0), "200");
        assert_eq!(tick(1e5, 1e5), "100k");
        assert_eq!(exact_tick(1518.0), "1518");
        assert_eq!(exact_tick(0.5), "0.5");
        assert_eq!(exact_tick(25000.0), "25k");
    }

    #[test]
    fn parameters() {
        assert_eq!(
            param_value(&serde_json::json!("left_to_right")),
            "left_to_right"
        );
        assert_eq!(param_value(&serde_json::json!(64)), "64");
        assert_eq!(param_heading("frame_size"), "frame size (bytes)");
        assert_eq!(param_heading("some_key"), "some key");
        assert_eq!(
            param_pair("bytes", &serde_json::json!(10_000_000)),
            "bytes: 10.00 MB"
        );
    }
}
