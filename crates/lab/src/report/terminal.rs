//! The plain-text summary printed at the end of a run: one compact table
//! per section, no line longer than [`WIDTH`] columns. Bare's cells hold
//! its median; every other cell holds the median and its ratio to bare,
//! which is the figure that matters on a shared machine. Where a test has
//! a theoretical goodput (long fat pipes, the compression link), it gets
//! a column of its own and each cell the share of it. When systems do
//! not fit side by side, the table continues below with the rest of them.
//! Control characters from the record are replaced, so a name cannot
//! drive the terminal.

use std::fmt::Write;

use super::format;
use super::sections::{self, MISSING, REFERENCE, Section};
use crate::results::{Measurement, MeasurementStatus, RunRecord, SystemStatus};

/// The widest line the summary prints.
pub const WIDTH: usize = 100;
const INDENT: &str = "  ";
const GAP: usize = 2;
/// Longest row label and column before they are shortened.
const MAX_LABEL: usize = 32;
const MAX_COLUMN: usize = 24;

/// `text` with control characters replaced and cut to `width` characters
/// (the last one an ellipsis when cut).
fn fit(text: &str, width: usize) -> String {
    let clean: Vec<char> = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if clean.len() <= width {
        clean.into_iter().collect()
    } else {
        let mut cut: String = clean[..width.saturating_sub(1)].iter().collect();
        cut.push('…');
        cut
    }
}

fn width_of(text: &str) -> usize {
    text.chars().count()
}

fn cell(m: Option<&Measurement>) -> String {
    let Some(m) = m else {
        return MISSING.to_string();
    };
    let ratio = m.ratio_to_bare.filter(|_| m.system != REFERENCE);
    let mut text = match (m.status, ratio) {
        (MeasurementStatus::Failed, _) => m.failure_word().to_string(),
        (MeasurementStatus::TimedOut, Some(r)) => {
            format!(
                ">{} >{}",
                format::terse(m.median, &m.unit),
                format::ratio(r)
            )
        }
        (MeasurementStatus::TimedOut, None) => format!(">{}", format::terse(m.median, &m.unit)),
        (MeasurementStatus::Ok, Some(r)) => {
            format!("{} {}", format::terse(m.median, &m.unit), format::ratio(r))
        }
        (MeasurementStatus::Ok, None) => {
            match m.extra.peers.as_ref().and_then(|p| p.one_peer_ratio) {
                Some(r) => format!(
                    "{} {}1p",
                    format::terse(m.median, &m.unit),
                    format::ratio(r)
                ),
                None => format::terse(m.median, &m.unit),
            }
        }
    };
    if let Some(efficiency) = m
        .extra
        .bulk
        .as_ref()
        .and_then(|bulk| bulk.efficiency)
        .filter(|_| m.status == MeasurementStatus::Ok)
    {
        let _ = write!(text, " {:.0}%", efficiency * 100.0);
    }
    if m.extra.verified() == Some(false) {
        text.push('!');
    }
    text
}

pub fn render(record: &RunRecord) -> String {
    let mut out = String::new();
    let machine = &record.machine;
    let head = format!(
        "fjord lab · fjord {} · {} · {} · {} CPUs · Linux {}",
        record.fjord_version,
        record.started_at,
        format::quantity(record.duration_secs, "s"),
        machine.cpus,
        machine.kernel
    );
    let _ = writeln!(out, "{}", fit(&head, WIDTH));
    let median = match record.rounds {
        1 => "median".to_string(),
        rounds => format!("median of {rounds} interleaved rounds"),
    };
    let _ = writeln!(
        out,
        "cells: {median} and its ratio to bare (no tunnel); >: hit the time limit; !: unverified"
    );
    for system in &record.systems {
        let status = match system.status {
            SystemStatus::Ran => continue,
            SystemStatus::Skipped => "skipped",
            SystemStatus::Failed => "failed",
        };
        let line = format!(
            "{status} {}: {}",
            system.name,
            system.reason.as_deref().unwrap_or("no reason given")
        );
        let _ = writeln!(out, "{}", fit(&line, WIDTH));
    }

    let sections = sections::sections(record);
    for suite in sections::suite_order(record) {
        let _ = write!(out, "\n{}\n", fit(&sections::suite_title(suite), WIDTH));
        for section in sections.iter().filter(|s| s.suite == suite) {
            write_section(&mut out, section);
        }
    }
    out
}

fn write_section(out: &mut String, section: &Section) {
    let mut heading = format!("{INDENT}{} [{}]", section.title(), section.unit);
    let fixed = section.fixed_text();
    if !fixed.is_empty() {
        let _ = write!(heading, " {}", fixed.join(", "));
    }
    let goodputs: Vec<Option<f64>> = section
        .rows
        .iter()
        .map(|row| {
            row.cells.iter().flatten().find_map(|m| {
                m.extra
                    .bulk
                    .as_ref()
                    .and_then(|b| b.theoretical_goodput_bits_per_sec)
            })
        })
        .collect();
    let has_goodput = goodputs.iter().any(Option::is_some);
    if has_goodput {
        heading.push_str("; %: of the theoretical goodput");
    }
    let _ = writeln!(out, "{}", fit(&heading, WIDTH));

    let label_header = fit(
        &section
            .row_keys
            .iter()
            .map(|k| format::param_heading(k))
            .collect::<Vec<_>>()
            .join(" / "),
        MAX_LABEL,
    );
    let labels: Vec<String> = section
        .rows
        .iter()
        .map(|row| fit(&row.labels().join(" / "), MAX_LABEL))
        .collect();
    let label_width = labels
        .iter()
        .chain([&label_header])
        .map(|l| width_of(l))
        .max()
        .unwrap_or(0);

    let theoretical = has_goodput.then(|| {
        let cells = goodputs
            .iter()
            .map(|goodput| {
                goodput.map_or_else(|| MISSING.to_string(), |g| format::terse(g, section.unit))
            })
            .collect();
        ("theoretical".to_string(), cells)
    });
    let columns: Vec<(String, Vec<String>)> = theoretical
        .into_iter()
        .chain(section.systems.iter().enumerate().map(|(index, system)| {
            let cells = section
                .rows
                .iter()
                .map(|row| fit(&cell(row.cells[index]), MAX_COLUMN))
                .collect();
            (fit(system, MAX_COLUMN), cells)
        }))
        .collect();
    let column_width = |(name, cells): &(String, Vec<String>)| {
        cells
            .iter()
            .chain([name])
            .map(|c| width_of(c))
            .max()
            .unwrap_or(0)
    };

    // Greedy chunks of systems that fit beside the labels.
    let mut start = 0;
    while start < columns.len() {
        let mut used = INDENT.len() + label_width;
        let mut end = start;
        while end < columns.len()
            && (end == start || used + GAP + column_width(&columns[end]) <= WIDTH)
        {
            used += GAP + column_width(&columns[end]);
            end += 1;
        }
        let chunk = &columns[start..end];
        let widths: Vec<usize> = chunk.iter().map(column_width).collect();
        let mut line = format!("{INDENT}{label_header:<label_width$}");
        for ((name, _), width) in chunk.iter().zip(&widths) {
            let _ = write!(line, "{}{name:>width$}", " ".repeat(GAP));
        }
        let _ = writeln!(out, "{}", line.trim_end());
        for (row, label) in labels.iter().enumerate() {
            let mut line = format!("{INDENT}{label:<label_width$}");
            for ((_, cells), width) in chunk.iter().zip(&widths) {
                let _ = write!(line, "{}{:>width$}", " ".repeat(GAP), cells[row]);
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
        start = end;
    }
}
