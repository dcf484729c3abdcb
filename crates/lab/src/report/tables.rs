//! Text tables from sections, shaped like the reference studies: RFC 2544
//! rows by frame size with the theoretical line rate, frames/s, the Mbit/s
//! equivalent and the share of the line rate per system; latency rows by
//! payload with p50 and p99; loss rows by drop rate; TCP bulk with the
//! efficiency against the theoretical goodput. Cells are formatted for
//! humans and carry their ratio to bare; Markdown, HTML and the terminal
//! only lay them out and escape them. Tests this module does not know get
//! the generic table: one row per distinct parameters, one column per
//! system, cells "median unit (ratio× bare)".

use serde_json::Value;

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
    m.extra.theoretical_max_fps.or_else(|| {
        let link = m.extra.link_bits_per_sec?;
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
fn with_round_range(m: &Measurement, mut text: String) -> String {
    let Some(figures) = m.extra.round_medians.as_ref().filter(|f| f.len() > 1) else {
        return text;
    };
    let low = figures.iter().copied().fold(f64::INFINITY, f64::min);
    let high = figures.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    text.push_str(&format!(" [{}]", format::range(low, high, &m.unit)));
    text
}

fn unverified(m: &Measurement) -> bool {
    m.extra.verified == Some(false)
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
            let cell = |row: &Row, index: usize, _: usize| match row.cells[index] {
                Some(m) => match m.extra.bits_per_sec.or(m.extra.frame_bits_per_sec) {
                    Some(bits) if m.status == MeasurementStatus::Ok => {
                        format!("{} · {}", median_figure(m), format::quantity(bits, "bit/s"))
                    }
                    _ => median_figure(m),
                },
                None => MISSING.to_string(),
            };
            vec![grid(
                section,
                title,
                caption(section, &[]),
                &[],
                &[""],
                &cell,
            )]
        }
        TestKind::Memory => {
            let cell = |row: &Row, index: usize, _: usize| match row.cells[index] {
                Some(m) if m.status == MeasurementStatus::Ok => {
                    let mut text = format::quantity(m.median, "bytes");
                    if let Some(peak) = m.extra.peak_bytes {
                        text.push_str(&format!(" · peak {}", format::quantity(peak, "bytes")));
                    }
                    if let Some(bits) = m.extra.bits_per_sec {
                        text.push_str(&format!(" · {}", format::quantity(bits, "bit/s")));
                    }
                    text
                }
                Some(m) => median_figure(m),
                None => MISSING.to_string(),
            };
            let remark = "median resident size of the side's processes (of both ends \
                          where the side says so) in each interval · peak · TCP throughput carried"
                .to_string();
            vec![grid(
                section,
                title,
                caption(section, &[remark]),
                &[],
                &[""],
                &cell,
            )]
        }
        TestKind::MemoryGrowth => {
            let cell = |row: &Row, index: usize, _: usize| match row.cells[index] {
                Some(m) if m.status == MeasurementStatus::Ok => {
                    let peaks = m.extra.first_peak_bytes.zip(m.extra.last_peak_bytes);
                    match peaks {
                        Some((first, last)) => format!(
                            "{:+.1} % ({} → {})",
                            m.median,
                            format::quantity(first, "bytes"),
                            format::quantity(last, "bytes")
                        ),
                        None => format!("{:+.1} %", m.median),
                    }
                }
                Some(m) => median_figure(m),
                None => MISSING.to_string(),
            };
            let remark = "from the peak at the start of the side's life (its first \
                          minute, or first interval in records before issue 15's soak) to the \
                          last interval's peak"
                .to_string();
            vec![grid(
                section,
                title,
                caption(section, &[remark]),
                &[],
                &[""],
                &cell,
            )]
        }
        TestKind::PathMtu => {
            let cell = |row: &Row, index: usize, _: usize| {
                row.cells[index].map_or_else(
                    || MISSING.to_string(),
                    |m| match m.note.as_deref() {
                        Some(note) if note.starts_with("black-holed") => "black-holed".to_string(),
                        Some(note) => format!("{} ({note})", median_figure(m)),
                        None => median_figure(m),
                    },
                )
            };
            vec![grid(
                section,
                title,
                caption(section, &[]),
                &[],
                &[""],
                &cell,
            )]
        }
        TestKind::Flood => {
            let mut tables = vec![flood_table(section, title)];
            tables.extend(drops_table(section));
            tables
        }
        TestKind::Peers => vec![peers_table(section, title)],
        TestKind::SoakSummary | TestKind::CounterBalance => {
            vec![super::soak::soak_table(section, title)]
        }
        TestKind::TransferTime
        | TestKind::FrameLoss
        | TestKind::Mesh
        | TestKind::NatMatrix
        | TestKind::RelayCost
        | TestKind::Other => {
            let cell = |row: &Row, index: usize, _: usize| {
                row.cells[index].map_or_else(|| MISSING.to_string(), median_figure)
            };
            vec![grid(
                section,
                title,
                caption(section, &[]),
                &[],
                &[""],
                &cell,
            )]
        }
    }
}

/// Rows by flood. Throughput carries its ratio to the same system's
/// transfer without a flood; handshake work is per second of the
/// transfer, beside the rate the flood was sent at.
fn flood_table(section: &Section, title: String) -> Table {
    let per_second = |count: Option<u64>, m: &Measurement| match (count, m.extra.window_secs) {
        (Some(count), Some(secs)) if secs > 0.0 => {
            format!("{}/s", format::thousands(count as f64 / secs))
        }
        _ => "n/a".to_string(),
    };
    let cell = |row: &Row, index: usize, _: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        if m.status != MeasurementStatus::Ok {
            return median_figure(m);
        }
        match section.test {
            "flood_throughput" => match m.extra.no_flood_ratio {
                Some(ratio) => format!("{} ({} no flood)", median_figure(m), format::ratio(ratio)),
                None => median_figure(m),
            },
            "flood_handshakes" => {
                let sent = m.extra.flood_sent_per_sec.map_or_else(
                    || "n/a".to_string(),
                    |rate| format!("{}/s", format::thousands(rate)),
                );
                format!(
                    "{}/s cookie · {} DH · {} dropped unread (sent {sent})",
                    format::thousands(m.median),
                    per_second(m.extra.initiations_computed, m),
                    per_second(m.extra.socket_drops, m),
                )
            }
            _ => median_figure(m),
        }
    };
    let remark = match section.test {
        "flood_throughput" => vec![
            "bare: the same flood at a UDP socket nobody reads while a bare transfer runs; \
             its ratio to no flood is what the machine itself keeps, the most a tunnel can"
                .to_string(),
        ],
        "flood_handshakes" => vec![
            "cookie = cookie replies to spoofed sources, counted where they arrived; \
             DH = initiations read with Diffie-Hellman work, by the responder's own count \
             (n/a: it keeps none); dropped unread = at the responder's full UDP socket"
                .to_string(),
        ],
        "restart_recovery" => vec![
            "from starting the restarted side (its daemon's start and configuration included) \
             to the first UDP echo through the tunnel"
                .to_string(),
        ],
        _ => Vec::new(),
    };
    grid(section, title, caption(section, &remark), &[], &[""], &cell)
}

/// Rows by number of peers. Each figure carries its ratio to the same
/// system's figure with one peer (the goal is 0.9 or better at 1,000);
/// frame rates also the peer emulator's own ceiling, memory the cost per
/// peer.
fn peers_table(section: &Section, title: String) -> Table {
    let zero_loss = section.test == "peers_zero_loss";
    let one_peer = |m: &Measurement| match m.extra.one_peer_ratio {
        Some(ratio) if m.status == MeasurementStatus::Ok => {
            format!("{} ({} 1 peer)", median_figure(m), format::ratio(ratio))
        }
        _ => median_figure(m),
    };
    // The one-peer row, for ratios the record does not hold.
    let one_peer_row = section.rows.iter().find(|row| row.x() == Some(1.0));
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        match (section.test, column) {
            ("peers_zero_loss", 1) => match cpu_micros_per_frame(m) {
                Some(micros) => {
                    let reference = one_peer_row
                        .and_then(|one| one.cells[index])
                        .and_then(cpu_micros_per_frame)
                        .filter(|reference| *reference > 0.0);
                    match reference {
                        Some(reference) => format!(
                            "{} µs ({})",
                            format::plain(micros),
                            format::ratio(micros / reference)
                        ),
                        None => format!("{} µs", format::plain(micros)),
                    }
                }
                None => MISSING.to_string(),
            },
            ("peers_zero_loss", 2) => m.extra.emulator_ceiling_fps.map_or_else(
                || MISSING.to_string(),
                |fps| format!("{} fps", format::thousands(fps)),
            ),
            ("peers_memory", _) => match m.extra.per_peer_bytes {
                Some(bytes) if m.status == MeasurementStatus::Ok => format!(
                    "{} · {}/peer",
                    median_figure(m),
                    format::quantity(bytes, "bytes")
                ),
                _ => median_figure(m),
            },
            ("peers_tcp", _) => {
                let mut text = one_peer(m);
                if let Some(responder) = m.extra.cpu_seconds_per_gbit {
                    text.push_str(&format!(" · {} s/Gbit", format::plain(responder)));
                    let reference = one_peer_row
                        .and_then(|one| one.cells[index])
                        .and_then(|one| one.extra.cpu_seconds_per_gbit)
                        .filter(|reference| *reference > 0.0);
                    if let Some(reference) = reference {
                        text.push_str(&format!(" ({})", format::ratio(responder / reference)));
                    }
                }
                if let Some(emulator) = m.extra.emulator_cpu_seconds_per_gbit {
                    text.push_str(&format!(" (emulator {})", format::plain(emulator)));
                }
                text
            }
            _ => one_peer(m),
        }
    };
    let remark = match section.test {
        "peers_zero_loss" => vec![
            "(× 1 peer) = the figure over the same system's with one peer, same run; goal: \
             0.9× or better at 1,000 peers · the frames form the same 1,000 flows at every \
             peer count · CPU/frame = the responder's CPU time over the whole search per \
             frame received in its trials (which a busy machine moves far less than a rate; \
             in brackets against one peer) · emulator alone = frames the peer emulator seals \
             and sends per second of its own CPU time (same frames, same peers, into a \
             sink): the generator's ceiling on one core"
                .to_string(),
        ],
        "peers_memory" => vec![
            "the responder's resident size after the frame-rate searches · per peer: \
             (that − with one peer) ÷ (peers − 1)"
                .to_string(),
        ],
        _ => vec![
            "the responder has 100 peers; each pair of transfers sends the same flows through \
             one of them (peers: 1), then spread over all, back to back · (× 1 peer) = the \
             median of the pairs' ratios · s/Gbit = the responder's CPU time per Gbit carried, \
             in brackets against one peer (which a busy machine moves far less than a rate; \
             emulator: the peer emulator's, no figure of the system)"
                .to_string(),
        ],
    };
    let columns: &[&str] = if zero_loss {
        &["frames/s", "CPU/frame", "emulator alone"]
    } else {
        &[""]
    };
    grid(
        section,
        title,
        caption(section, &remark),
        &[],
        columns,
        &cell,
    )
}

/// A search's CPU time (of the system's processes) per frame received
/// in its trials, in µs.
fn cpu_micros_per_frame(m: &Measurement) -> Option<f64> {
    let cpu = m.extra.cpu_seconds?;
    let received: u64 = m.extra.trials.as_ref()?.iter().map(|t| t.received).sum();
    (received > 0 && m.status == MeasurementStatus::Ok).then(|| cpu / received as f64 * 1e6)
}

/// Beside the handshake work: what each responder refused during the
/// flooded transfers, by reason, per second, by its own count (`n/a`
/// where it keeps none); only when some system keeps one.
fn drops_table(section: &Section) -> Option<Table> {
    let cells = || {
        section
            .rows
            .iter()
            .flat_map(|row| row.cells.iter().flatten())
    };
    if section.test != "flood_handshakes" || !cells().any(|m| m.extra.drops.is_some()) {
        return None;
    }
    let cell = |row: &Row, index: usize, _: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        let (Some(drops), Some(secs)) = (&m.extra.drops, m.extra.window_secs) else {
            return "n/a".to_string();
        };
        let mut counted: Vec<_> = drops.0.nonzero().collect();
        if counted.is_empty() || secs <= 0.0 {
            return "none".to_string();
        }
        counted.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        counted
            .iter()
            .map(|(reason, count)| {
                format!(
                    "{} {}/s",
                    reason.name(),
                    format::thousands(*count as f64 / secs)
                )
            })
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let remark = ["by reason, as `fjord show` names them, per second of the flooded                    transfers, by the responder's own count (n/a: it keeps none)"
        .to_string()];
    Some(grid(
        section,
        "Datagrams refused by the responder during the flood".to_string(),
        caption(section, &remark),
        &[],
        &[""],
        &cell,
    ))
}

/// Rows frame size; theoretical maximum; per system frames/s (ratio) and
/// the Mbit/s equivalent with its share of the line rate.
fn frame_rate_table(section: &Section, title: String) -> Table {
    let all = section.rows.iter().flat_map(|r| r.cells.iter().flatten());
    let mut extra = Vec::new();
    if let Some(link) = all.clone().find_map(|m| m.extra.link_bits_per_sec) {
        extra.push(format!("link: {}", format::quantity(link, "bit/s")));
    }
    if let Some(tolerance) = all.clone().find_map(|m| m.extra.loss_tolerance) {
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
            .or(m.extra.frame_bits_per_sec);
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
fn latency_table(section: &Section, title: String) -> Table {
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
            .reference(row)
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
fn ping_average_table(section: &Section, title: String) -> Table {
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        if column == 0 {
            return median_figure(m);
        }
        match m.extra.p50 {
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

/// TCP bulk goodput; with a theoretical goodput (long fat pipes) also the
/// efficiency; and the [`cost_table`].
fn bulk_tables(section: &Section, title: String) -> Vec<Table> {
    let goodput = |m: &Measurement| m.extra.theoretical_goodput_bits_per_sec;
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
fn cost_table(section: &Section, title: &str) -> Option<Table> {
    let details = |m: &Measurement| {
        let mut parts = Vec::new();
        if let Some(retransmits) = m.extra.retransmits {
            parts.push(format!("{} retx", format::thousands(retransmits as f64)));
        }
        if let Some(cpu) = m.extra.cpu_seconds {
            parts.push(format!("{} CPU", format::quantity(cpu, "s")));
        }
        if let Some(per_gbit) = m.extra.cpu_seconds_per_gbit {
            parts.push(format!("{} s/Gbit", format::plain(per_gbit)));
        }
        if let (Some(left), Some(right)) = (m.extra.cpu_left_percent, m.extra.cpu_right_percent) {
            parts.push(format!(
                "L {} · R {}",
                format::percent(left),
                format::percent(right)
            ));
        }
        if let Some(rss) = m.extra.rss_bytes {
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
    if cells().any(|m| m.extra.cpu_left_percent.is_some()) {
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
