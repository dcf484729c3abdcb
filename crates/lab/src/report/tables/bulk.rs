//! TCP bulk tables: goodput, efficiency against a theoretical goodput,
//! and what carrying the traffic cost each system.

use super::{ExtraColumn, Table, caption, grid, median_figure};
use crate::report::format;
use crate::report::sections::{MISSING, Row, Section};
use crate::results::{Measurement, MeasurementStatus};

/// TCP bulk goodput; with a theoretical goodput (long fat pipes) also the
/// efficiency; and the [`cost_table`].
pub(super) fn bulk_tables(section: &Section, title: String) -> Vec<Table> {
    let goodput = |m: &Measurement| {
        m.extra
            .bulk
            .as_ref()
            .and_then(|b| b.theoretical_goodput_bits_per_sec)
    };
    let all: Vec<&Measurement> = section
        .rows
        .iter()
        .flat_map(|r| r.cells.iter().flatten().copied())
        .collect();
    let has_goodput = all.iter().any(|m| goodput(m).is_some());
    let theoretical = |row: &Row| {
        row.cells
            .iter()
            .flatten()
            .find_map(|m| goodput(m))
            .map_or_else(
                || MISSING.to_string(),
                |bits| format::quantity(bits, "bit/s"),
            )
    };
    let cell = |row: &Row, index: usize, _: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        match goodput(m).filter(|g| *g > 0.0 && m.status == MeasurementStatus::Ok) {
            Some(g) => format!(
                "{} · {} eff.",
                median_figure(m),
                format::percent(m.median / g * 100.0)
            ),
            None => median_figure(m),
        }
    };
    let mut extra = Vec::new();
    let before: Vec<ExtraColumn> = if has_goodput {
        extra.push("eff. = share of the theoretical goodput".to_string());
        vec![("theoretical goodput".to_string(), &theoretical)]
    } else {
        Vec::new()
    };
    let mut tables = vec![grid(
        section,
        title.clone(),
        caption(section, &extra),
        &before,
        &[""],
        &cell,
    )];

    tables.extend(cost_table(section, &title));
    tables
}

/// What carrying the traffic cost each system, if recorded: retransmits
/// (TCP), the process CPU time of both tunnel endpoints, that CPU time per
/// Gbit carried, and both endpoints' resident memory after the test.
pub(super) fn cost_table(section: &Section, title: &str) -> Option<Table> {
    let details = |m: &Measurement| {
        let mut parts = Vec::new();
        if let Some(retransmits) = m.extra.cost.as_ref().and_then(|c| c.retransmits) {
            parts.push(format!("{} retx", format::thousands(retransmits as f64)));
        }
        if let Some(cpu) = m.extra.cost.as_ref().and_then(|c| c.cpu_seconds) {
            parts.push(format!("{} CPU", format::quantity(cpu, "s")));
        }
        if let Some(per_gbit) = m.extra.cost.as_ref().and_then(|c| c.cpu_seconds_per_gbit) {
            parts.push(format!("{} s/Gbit", format::plain(per_gbit)));
        }
        if let Some((left, right)) = m
            .extra
            .cost
            .as_ref()
            .and_then(|c| c.cpu_left_percent.zip(c.cpu_right_percent))
        {
            parts.push(format!(
                "L {} · R {}",
                format::percent(left),
                format::percent(right)
            ));
        }
        if let Some(rss) = m.extra.cost.as_ref().and_then(|c| c.rss_bytes) {
            parts.push(format!(
                "{} MiB RSS",
                format::plain(rss as f64 / (1024.0 * 1024.0))
            ));
        }
        parts
    };
    let cells = || section.rows.iter().flat_map(|r| r.cells.iter().flatten());
    if !cells().any(|m| !details(m).is_empty()) {
        return None;
    }
    let cell = |row: &Row, index: usize, _: usize| match row.cells[index].map(details) {
        Some(parts) if !parts.is_empty() => parts.join(" · "),
        _ => MISSING.to_string(),
    };
    let mut explained = vec![
        "CPU = user + system time of both endpoints' processes; s/Gbit = that \
         CPU time per Gbit carried; RSS = both endpoints' resident memory at the end"
            .to_string(),
    ];
    if cells().any(|m| {
        m.extra
            .cost
            .as_ref()
            .and_then(|c| c.cpu_left_percent)
            .is_some()
    }) {
        explained.push(
            "L, R = CPU of the left (sending) and right host's tunnel processes, \
             in % of one core over the transfers"
                .to_string(),
        );
    }
    let mut table = grid(
        section,
        format!("{title}: cost"),
        caption(section, &explained),
        &[],
        &[""],
        &cell,
    );
    table.notes.clear();
    Some(table)
}
