//! Frame-rate and round-trip tables: RFC 2544 and overload rows beside
//! the theoretical line rate, latency percentiles, ping averages.

use serde_json::Value;

use super::{
    ExtraColumn, Table, caption, figure, grid, median_figure, percentile, theoretical_fps,
    with_round_range,
};
use crate::report::format;
use crate::report::sections::{MISSING, Row, Section};
use crate::results::{MeasurementStatus, Statistic};

/// Rows frame size; theoretical maximum; per system frames/s (ratio) and
/// the Mbit/s equivalent with its share of the line rate.
pub(super) fn frame_rate_table(section: &Section, title: String) -> Table {
    let all = section.rows.iter().flat_map(|r| r.cells.iter().flatten());
    let mut extra = Vec::new();
    if let Some(link) = all.clone().find_map(|m| {
        m.extra
            .frame_rate
            .as_ref()
            .and_then(|r| r.link_bits_per_sec)
    }) {
        extra.push(format!("link: {}", format::quantity(link, "bit/s")));
    }
    if let Some(tolerance) = all
        .clone()
        .find_map(|m| m.extra.frame_rate.as_ref().and_then(|r| r.loss_tolerance))
    {
        extra.push(format!(
            "loss tolerance: {}",
            format::param_value(&Value::from(tolerance))
        ));
    }
    let has_line_rate = all.clone().any(|m| theoretical_fps(m).is_some());
    extra.push(if has_line_rate {
        "Mbit/s = frames/s × frame size × 8; % line = share of the Ethernet line rate \
         (20 bytes of preamble and gap per frame)"
            .to_string()
    } else {
        "Mbit/s = frames/s × frame size × 8".to_string()
    });
    let theoretical = |row: &Row| {
        row.cells
            .iter()
            .flatten()
            .find_map(|m| theoretical_fps(m))
            .map_or_else(
                || MISSING.to_string(),
                |fps| format!("{} fps", format::thousands(fps)),
            )
    };
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        if column == 0 {
            return median_figure(m);
        }
        // From the frame size; for mixed sizes, from the recorded bits.
        let bits = m
            .params
            .get("frame_size")
            .and_then(Value::as_f64)
            .map(|frame_size| m.median * frame_size * 8.0)
            .or(m
                .extra
                .frame_rate
                .as_ref()
                .and_then(|r| r.frame_bits_per_sec));
        match (m.status, bits) {
            (MeasurementStatus::Failed, _) | (_, None) => MISSING.to_string(),
            (_, Some(bits)) => {
                let mbit = bits / 1e6;
                let mbit = if mbit >= 1000.0 {
                    format::thousands(mbit)
                } else {
                    format::plain(mbit)
                };
                match theoretical_fps(m).filter(|fps| *fps > 0.0) {
                    Some(fps) => format!("{mbit} ({})", format::percent(m.median / fps * 100.0)),
                    None => mbit,
                }
            }
        }
    };
    let before: Vec<ExtraColumn> = if has_line_rate {
        vec![("theoretical max".to_string(), &theoretical)]
    } else {
        Vec::new()
    };
    grid(
        section,
        title,
        caption(section, &extra),
        &before,
        &["frames/s", "Mbit/s (% line)"],
        &cell,
    )
}

/// Rows payload; per system p50 and p99 with ratios to bare's.
pub(super) fn latency_table(section: &Section, title: String) -> Table {
    const PERCENTILES: [Statistic; 2] = [Statistic::P50, Statistic::P99];
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        let statistic = PERCENTILES[column];
        let Some(own) = percentile(m, statistic) else {
            return MISSING.to_string();
        };
        let ratio = section
            .reference(row, index)
            .and_then(|bare| percentile(bare, statistic))
            .filter(|bare| *bare > 0.0)
            .map(|bare| own / bare);
        match statistic {
            // The rounds' figures are their medians, the p50s.
            Statistic::P50 => with_round_range(m, figure(m, own, ratio)),
            _ => figure(m, own, ratio),
        }
    };
    let extra = ["p99.9, min and max are in results.json".to_string()];
    grid(
        section,
        title,
        caption(section, &extra),
        &[],
        &["p50", "p99"],
        &cell,
    )
}

/// The best run's average round trip, with the ratio to bare's, and that
/// run's p50.
pub(super) fn ping_average_table(section: &Section, title: String) -> Table {
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        if column == 0 {
            return median_figure(m);
        }
        match m.extra.ping.as_ref().and_then(|p| p.p50) {
            Some(p50) if m.status == MeasurementStatus::Ok => format!("{} ms", format::plain(p50)),
            _ => MISSING.to_string(),
        }
    };
    let extra = ["avg = the lowest of the runs' average round trips".to_string()];
    grid(
        section,
        title,
        caption(section, &extra),
        &[],
        &["avg", "p50"],
        &cell,
    )
}
