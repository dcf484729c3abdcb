//! Tables of the soak's totals (transfers, restarts, rekeys) and of its
//! counter balance: each cell gives the figure with the counts that make
//! it meaningful (mismatches beside transfers, drops beside a
//! difference); the notes say what failed and what was not checked.

use super::format;
use super::sections::{MISSING, Row, Section};
use super::tables::{Table, caption, grid, median_figure};
use crate::results::{Measurement, MeasurementStatus};

fn count(value: Option<u64>) -> String {
    value.map_or_else(|| "n/a".to_string(), |n| format::thousands(n as f64))
}

/// The text of one soak cell.
fn cell_text(test: &str, m: &Measurement) -> String {
    if m.status != MeasurementStatus::Ok {
        return median_figure(m);
    }
    let soak = m.extra.soak.clone().unwrap_or_default();
    match test {
        "soak_transfers" => {
            let mut text = format!(
                "{} transfers · {} digest mismatches · {} failed",
                count(soak.transfers),
                count(soak.digest_mismatches),
                count(soak.failed_transfers)
            );
            if let Some(bits) = m.extra.carried_bits_per_sec() {
                text.push_str(&format!(" · {}", format::quantity(bits, "bit/s")));
            }
            text
        }
        "soak_restarts" => format!(
            "{} median · {} at most · {} restarts",
            format::quantity(m.median, &m.unit),
            m.extra
                .ping
                .as_ref()
                .and_then(|ping| ping.max)
                .map_or_else(|| "n/a".to_string(), |max| format::quantity(max, &m.unit)),
            count(soak.restarts)
        ),
        "soak_rekeys" => format!(
            "{} rekeys · {} handshakes",
            format::thousands(m.median),
            count(
                m.extra
                    .flood
                    .as_ref()
                    .and_then(|flood| flood.initiations_computed)
            )
        ),
        "counter_balance" => {
            let checked = soak.intervals.unwrap_or(0);
            let unexplained = soak.unexplained_intervals.unwrap_or(0);
            format!(
                "sent {} · received {} · {} datagrams dropped · {}/{} intervals explained",
                format::quantity(soak.sent_bytes.unwrap_or(0) as f64, "bytes"),
                format::quantity(soak.received_bytes.unwrap_or(0) as f64, "bytes"),
                count(soak.dropped_datagrams),
                checked.saturating_sub(unexplained),
                checked
            )
        }
        _ => median_figure(m),
    }
}

/// One table for a soak total or the counter balance.
pub fn soak_table(section: &Section, title: String) -> Table {
    let cell = |row: &Row, index: usize, _: usize| {
        row.cells[index].map_or_else(|| MISSING.to_string(), |m| cell_text(section.test, m))
    };
    let remark = match section.test {
        "counter_balance" => vec![
            "by the sides' own counters (bytes of authenticated datagrams); a difference \
             must be explained by the receiver's drops, its kernel's socket drops and \
             failed sends, at most one full datagram each"
                .to_string(),
        ],
        "soak_restarts" => vec![
            "from starting the restarted side to the first ping through the tunnel".to_string(),
        ],
        _ => Vec::new(),
    };
    grid(section, title, caption(section, &remark), &[], &[""], &cell)
}
