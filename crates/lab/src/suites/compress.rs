//! `compress`: the PPP-over-SSH study's compression runs. 32 MiB of text
//! and 32 MiB of already-compressed data cross a 100 Mbit/s Ethernet
//! link, bare and through each tunnel, one verified TCP transfer at a
//! time; each figure stands beside the link's theoretical TCP goodput.
//!
//! The text is generated access-log lines and the compressed data random
//! bytes (`crate::traffic::Content`), both from a fixed seed: per-packet
//! compression gains on the first and must not lose on the second.
//!
//! # Theoretical goodput
//!
//! One full-size TCP segment per Ethernet frame, as the study computes it:
//!
//! ```text
//! wire time per frame = 8 (preamble, SFD) + 1518 (largest frame: 14 header,
//!                       1500 payload, 4 FCS) + 12 (inter-frame gap) = 1538 bytes
//! TCP payload         = 1500 − 20 (IPv4) − 20 (TCP) − 12 (timestamp option) = 1448 bytes
//! goodput             = 100 Mbit/s × 1448 / 1538 = 94.15 Mbit/s
//! ```
//!
//! A tunnel that compresses may carry more than that; `eff.` in the
//! report is the measured goodput as a share of it.
//!
//! # The emulated link
//!
//! The emulator charges each frame its header and payload (no FCS,
//! preamble or gap), so its rate is 100 Mbit/s × 1514 / 1538: a
//! full-size frame takes exactly its time on the wire. A shorter frame is
//! charged a little less than a real wire takes (its 24 bytes of FCS,
//! preamble and gap are charged in proportion): 1.4 % less at 800 bytes,
//! the size of a full packet that compressed to half, 9 % less at 200.
//! One millisecond of delay each way, and the default queue of 1,000
//! frames.

use std::time::Duration;

use super::{Context, tcp};
use crate::emulator::LinkConfig;
use crate::measure::Row;
use crate::results::Measurement;
use crate::traffic::{BulkTransfer, Content};

/// Bytes of each transfer.
const TRANSFER_BYTES: u64 = 32 << 20;
const WIRE_BITS_PER_SEC: f64 = 100e6;
/// Bytes a full-size frame takes on the wire, and the TCP payload it
/// carries (see the module documentation).
const WIRE_BYTES_PER_FRAME: f64 = 8.0 + 1518.0 + 12.0;
const TCP_PAYLOAD_PER_FRAME: f64 = 1500.0 - 20.0 - 20.0 - 12.0;
/// Frame header and payload of a full-size frame: what the emulator counts.
const EMULATED_BYTES_PER_FRAME: f64 = 1514.0;
const ONE_WAY_DELAY: Duration = Duration::from_millis(1);

/// The contents transferred, with the names rows carry.
const CONTENTS: [(Content, &str); 2] =
    [(Content::LogLines, "text"), (Content::Random, "compressed")];

pub fn steps() -> u64 {
    CONTENTS.len() as u64
}

/// Theoretical TCP goodput of the link, in bit/s.
pub fn theoretical_goodput() -> f64 {
    WIRE_BITS_PER_SEC * TCP_PAYLOAD_PER_FRAME / WIRE_BYTES_PER_FRAME
}

pub fn link() -> LinkConfig {
    let rate = (WIRE_BITS_PER_SEC * EMULATED_BYTES_PER_FRAME / WIRE_BYTES_PER_FRAME) as u64;
    LinkConfig {
        rate_bits_per_sec: Some(rate),
        ..LinkConfig::delayed(ONE_WAY_DELAY)
    }
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let samples = if context.quick { 1 } else { 3 };
    let limit = Duration::from_secs(120);
    let theoretical = theoretical_goodput();
    let mut rows = Vec::new();
    if let Err(why) = context.shape(link()) {
        for (_, name) in CONTENTS {
            context
                .progress
                .step(&format!("{}: compress: {name}", context.system_name));
            rows.push(row(context.system_name, name).failed(why.clone()));
            context.progress.done();
        }
        return rows;
    }
    for (index, (content, name)) in CONTENTS.into_iter().enumerate() {
        if context.progress.stopping() {
            break;
        }
        let system = context.system_name;
        context.progress.step(&format!(
            "{system}: compress: {} MiB of {name} over {} Mbit/s",
            TRANSFER_BYTES >> 20,
            WIRE_BITS_PER_SEC / 1e6
        ));
        let port = 5501 + (index * 10) as u16;
        let transfer = BulkTransfer::new(TRANSFER_BYTES)
            .content(content)
            .timeout(limit)
            .stall_timeout(limit);
        let series = tcp::series_of(context, &transfer, samples, port);
        let rates: Vec<f64> = series
            .reports
            .iter()
            .map(|report| report.throughput_bits_per_sec)
            .collect();
        let mut extra = series.extra(context.has_processes());
        let figures = extra.bulk.get_or_insert_default();
        figures.theoretical_goodput_bits_per_sec = Some(theoretical);
        figures.one_way_delay_ms = Some(ONE_WAY_DELAY.as_secs_f64() * 1e3);
        if !rates.is_empty() {
            figures.efficiency = Some(crate::results::median(&rates) / theoretical);
        }
        let mut measurement = row(system, name).measured(rates, series.status(), extra);
        if let Some(why) = series.failure {
            measurement.note = Some(why);
        }
        rows.push(measurement);
        context.progress.done();
    }
    rows
}

fn row(system: &str, content: &str) -> Row {
    Row::new("compress", "tcp_bulk", system, "bit/s")
        .param("content", content)
        .param("bytes", TRANSFER_BYTES)
        .param("rate", "100mbit")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_goodput_is_the_studys() {
        assert!((theoretical_goodput() / 1e6 - 94.148).abs() < 0.001);
        // A full-size frame takes exactly its wire time at the emulated rate.
        let rate = link().rate_bits_per_sec.unwrap() as f64;
        let emulated = EMULATED_BYTES_PER_FRAME * 8.0 / rate;
        let wire = WIRE_BYTES_PER_FRAME * 8.0 / WIRE_BITS_PER_SEC;
        assert!((emulated / wire - 1.0).abs() < 1e-6);
    }
}
