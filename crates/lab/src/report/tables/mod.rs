//! Text tables from sections, shaped like the reference studies: RFC 2544
//! rows by frame size with the theoretical line rate, frames/s, the Mbit/s
//! equivalent and the share of the line rate per system; latency rows by
//! payload with p50 and p99; loss rows by drop rate; TCP bulk with the
//! efficiency against the theoretical goodput. Cells are formatted for
//! humans and carry their ratio to bare; Markdown, HTML and the terminal
//! only lay them out and escape them. Tests this module does not know get
//! the generic table: one row per distinct parameters, one column per
//! system, cells "median unit (ratio× bare)".

mod bulk;
mod load;
mod policy;
mod rates;

use bulk::{bulk_tables, cost_table};
use load::{drops_table, flood_table, peers_table};
use policy::policy_table;
use rates::{frame_rate_table, latency_table, ping_average_table};

use super::format;
use super::sections::{MISSING, REFERENCE, Row, Section, TestKind, system_order};
use crate::results::{Measurement, MeasurementStatus, RunRecord, Statistic, SystemStatus};

/// A table of formatted text, ready for any renderer.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub title: String,
    /// Fixed parameters and how to read the table; may be empty.
    pub caption: String,
    pub header: Vec<String>,
    /// Leading columns that label rows (left-aligned); the rest are figures.
    pub label_columns: usize,
    pub rows: Vec<Vec<String>>,
    /// Footnotes: measurement notes, failed checks.
    pub notes: Vec<String>,
}

/// The "Systems" table: every system with its status, version and reason.
pub fn systems_table(record: &RunRecord) -> Table {
    let rows = system_order(record)
        .into_iter()
        .map(|name| {
            let outcome = record.systems.iter().find(|s| s.name == name);
            let status = match outcome.map(|o| o.status) {
                Some(SystemStatus::Ran) | None => "ran",
                Some(SystemStatus::Skipped) => "skipped",
                Some(SystemStatus::Failed) => "failed",
            };
            vec![
                name.to_string(),
                status.to_string(),
                outcome
                    .and_then(|o| o.version.clone())
                    .unwrap_or_else(|| MISSING.to_string()),
                outcome.and_then(|o| o.reason.clone()).unwrap_or_default(),
            ]
        })
        .collect();
    Table {
        title: "Systems".to_string(),
        caption: String::new(),
        header: ["system", "status", "version", "notes"]
            .map(String::from)
            .to_vec(),
        label_columns: 4,
        rows,
        notes: Vec::new(),
    }
}

/// A latency statistic of `m`; for p50 without one, the median (which
/// is the p50 of UDP latency under load).
pub fn percentile(m: &Measurement, statistic: Statistic) -> Option<f64> {
    let recorded = m.extra.latency_ms(statistic);
    match statistic {
        Statistic::P50 => recorded.or(Some(m.median)),
        _ => recorded,
    }
}

/// Frames/s an Ethernet link of `link_bits_per_sec` carries at most with
/// `frame_size`-byte frames (20 bytes of preamble and gap per frame).
pub fn line_rate_fps(link_bits_per_sec: f64, frame_size: f64) -> f64 {
    link_bits_per_sec / ((frame_size + 20.0) * 8.0)
}

/// The theoretical maximum frames/s for `m`: recorded, or computed from
/// the recorded link rate and the frame size.
pub fn theoretical_fps(m: &Measurement) -> Option<f64> {
    m.extra
        .frame_rate
        .as_ref()
        .and_then(|r| r.theoretical_max_fps)
        .or_else(|| {
            let link = m
                .extra
                .frame_rate
                .as_ref()
                .and_then(|r| r.link_bits_per_sec)?;
            let frame_size = m.params.get("frame_size")?.as_f64()?;
            Some(line_rate_fps(link, frame_size))
        })
}

/// A figure with its ratio to bare: `1.23 Gbit/s (0.13×)`, `> 60.00 s
/// (limit, > 4.10×)`, `failed`. Bare's own cells carry no ratio.
pub fn figure(m: &Measurement, value: f64, ratio: Option<f64>) -> String {
    let ratio = ratio.filter(|_| m.system != REFERENCE);
    let mut text = match m.status {
        MeasurementStatus::Failed => return m.failure_word().to_string(),
        MeasurementStatus::TimedOut => match ratio {
            Some(r) => format!(
                "> {} (limit, > {})",
                format::quantity(value, &m.unit),
                format::ratio(r)
            ),
            None => format!("> {} (limit)", format::quantity(value, &m.unit)),
        },
        MeasurementStatus::Ok => match ratio {
            Some(r) => format!(
                "{} ({})",
                format::quantity(value, &m.unit),
                format::ratio(r)
            ),
            None => format::quantity(value, &m.unit),
        },
    };
    if unverified(m) {
        text.push_str(" unverified");
    }
    text
}

/// `text`, a cell showing `m`'s median, with the range of the rounds'
/// medians behind it if `m` was measured in several (`--rounds`).
pub(super) fn with_round_range(m: &Measurement, mut text: String) -> String {
    let Some(figures) = m
        .extra
        .rounds
        .as_ref()
        .and_then(|r| r.round_medians.as_ref())
        .filter(|f| f.len() > 1)
    else {
        return text;
    };
    let low = figures.iter().copied().fold(f64::INFINITY, f64::min);
    let high = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    text.push_str(&format!(" [{}]", format::range(low, high, &m.unit)));
    text
}

fn unverified(m: &Measurement) -> bool {
    m.extra.verified() == Some(false)
}

/// The measurement's own figure: its median and ratio to bare.
pub(super) fn median_figure(m: &Measurement) -> String {
    with_round_range(m, figure(m, m.median, m.ratio_to_bare))
}

/// A caption: the fixed parameters (unless they label the only row), then
/// `extra` remarks.
pub(super) fn caption(section: &Section, extra: &[String]) -> String {
    let mut parts = if section.row_keys.is_empty() {
        Vec::new()
    } else {
        section.fixed_text()
    };
    parts.extend(extra.iter().cloned());
    parts.join(" · ")
}

/// Header cells and label cells for the row keys.
fn label_columns(section: &Section) -> (Vec<String>, Vec<Vec<String>>) {
    if section.row_keys.is_empty() {
        let text = section.fixed_text().join(", ");
        let text = if text.is_empty() {
            MISSING.to_string()
        } else {
            text
        };
        let labels = section.rows.iter().map(|_| vec![text.clone()]).collect();
        return (vec!["parameters".to_string()], labels);
    }
    let header = section
        .row_keys
        .iter()
        .map(|k| format::param_heading(k))
        .collect();
    (header, section.rows.iter().map(Row::labels).collect())
}

/// Notes attached to measurements, and checks that failed.
fn notes(section: &Section) -> Vec<String> {
    let mut notes = Vec::new();
    for row in &section.rows {
        for m in row.cells.iter().flatten() {
            let place = match section.row_text(row) {
                text if text.is_empty() => m.system.clone(),
                text => format!("{}, {text}", m.system),
            };
            if let Some(note) = &m.note {
                notes.push(format!("{place}: {note}"));
            } else if unverified(m) {
                notes.push(format!(
                    "{place}: the received data did not match its checksum"
                ));
            }
        }
    }
    notes
}

/// A column placed between the row labels and the systems (e.g. the
/// theoretical maximum): its heading and how to fill it for a row.
type ExtraColumn<'f> = (String, &'f dyn Fn(&Row) -> String);

/// A table with `per_system` columns for every system, each cell made by
/// `cell(section, row, system index, column)`.
pub(super) fn grid(
    section: &Section,
    title: String,
    caption: String,
    before: &[ExtraColumn],
    per_system: &[&str],
    cell: &dyn Fn(&Row, usize, usize) -> String,
) -> Table {
    let (mut header, labels) = label_columns(section);
    let label_count = header.len();
    header.extend(before.iter().map(|(name, _)| name.clone()));
    for system in &section.systems {
        for column in per_system {
            header.push(if column.is_empty() {
                system.to_string()
            } else {
                format!("{system} {column}")
            });
        }
    }
    let rows = section
        .rows
        .iter()
        .zip(labels)
        .map(|(row, mut cells)| {
            cells.extend(before.iter().map(|(_, make)| make(row)));
            for index in 0..section.systems.len() {
                for column in 0..per_system.len() {
                    cells.push(cell(row, index, column));
                }
            }
            cells
        })
        .collect();
    Table {
        title,
        caption,
        header,
        label_columns: label_count,
        rows,
        notes: notes(section),
    }
}

/// The tables for one section, shaped by its kind.
pub fn section_tables(section: &Section) -> Vec<Table> {
    let title = section.title();
    match section.kind {
        TestKind::Rfc2544 | TestKind::Overload => {
            let mut tables = vec![frame_rate_table(section, title.clone())];
            tables.extend(cost_table(section, &title));
            tables
        }
        TestKind::Rtt | TestKind::LatencyUnderLoad => vec![latency_table(section, title)],
        TestKind::PingAverage => vec![ping_average_table(section, title)],
        TestKind::TcpBulk => bulk_tables(section, title),
        TestKind::Imix => {
            let cell = |m: &Measurement| match m.extra.carried_bits_per_sec().or(m
                .extra
                .frame_rate
                .as_ref()
                .and_then(|rate| rate.frame_bits_per_sec))
            {
                Some(bits) if m.status == MeasurementStatus::Ok => {
                    format!("{} · {}", median_figure(m), format::quantity(bits, "bit/s"))
                }
                _ => median_figure(m),
            };
            vec![figure_per_system(section, title, &[], &cell)]
        }
        TestKind::Memory => {
            let cell = |m: &Measurement| {
                if m.status != MeasurementStatus::Ok {
                    return median_figure(m);
                }
                let mut text = format::quantity(m.median, "bytes");
                if let Some(peak) = m.extra.memory.as_ref().and_then(|memory| memory.peak_bytes) {
                    text.push_str(&format!(" · peak {}", format::quantity(peak, "bytes")));
                }
                if let Some(bits) = m.extra.carried_bits_per_sec() {
                    text.push_str(&format!(" · {}", format::quantity(bits, "bit/s")));
                }
                text
            };
            let remark = "median resident size of the side's processes (of both ends \
                          where the side says so) in each interval · peak · TCP throughput carried"
                .to_string();
            vec![figure_per_system(section, title, &[remark], &cell)]
        }
        TestKind::MemoryGrowth => {
            let cell = |m: &Measurement| {
                if m.status != MeasurementStatus::Ok {
                    return median_figure(m);
                }
                match m
                    .extra
                    .memory
                    .as_ref()
                    .and_then(|memory| memory.first_peak_bytes.zip(memory.last_peak_bytes))
                {
                    Some((first, last)) => format!(
                        "{:+.1} % ({} → {})",
                        m.median,
                        format::quantity(first, "bytes"),
                        format::quantity(last, "bytes")
                    ),
                    None => format!("{:+.1} %", m.median),
                }
            };
            let remark = "from the peak at the start of the side's life (its first \
                          minute, or first interval in records before issue 15's soak) to the \
                          last interval's peak"
                .to_string();
            vec![figure_per_system(section, title, &[remark], &cell)]
        }
        TestKind::PathMtu => {
            let cell = |m: &Measurement| match m.note.as_deref() {
                Some(note) if note.starts_with("black-holed") => "black-holed".to_string(),
                Some(note) => format!("{} ({note})", median_figure(m)),
                None => median_figure(m),
            };
            vec![figure_per_system(section, title, &[], &cell)]
        }
        TestKind::Flood => {
            let mut tables = vec![flood_table(section, title)];
            tables.extend(drops_table(section));
            tables
        }
        TestKind::Peers => vec![peers_table(section, title)],
        TestKind::Policy => vec![policy_table(section, title)],
        TestKind::SoakSummary | TestKind::CounterBalance => {
            vec![super::soak::soak_table(section, title)]
        }
        TestKind::TransferTime
        | TestKind::FrameLoss
        | TestKind::Mesh
        | TestKind::NatMatrix
        | TestKind::RelayCost
        | TestKind::Other => {
            vec![figure_per_system(section, title, &[], &median_figure)]
        }
    }
}

/// A table with one column per system, each cell `cell` of that
/// system's measurement (or [`MISSING`]), captioned with the section's
/// fixed parameters and `remarks`.
fn figure_per_system(
    section: &Section,
    title: String,
    remarks: &[String],
    cell: &dyn Fn(&Measurement) -> String,
) -> Table {
    let cell = |row: &Row, index: usize, _: usize| {
        row.cells[index].map_or_else(|| MISSING.to_string(), cell)
    };
    grid(section, title, caption(section, remarks), &[], &[""], &cell)
}
