//! `bdp`: one TCP stream over a long fat pipe — 1 Gbit/s, 45 ms each way
//! (a bandwidth-delay product of 11 MB) — against the 949.2 Mbit/s a TCP
//! stream can carry at MTU 1500, as in the HPN-SSH study.
//!
//! The emulator counts Ethernet header and payload; its rate is scaled by
//! 1514/1538 so that full-size frames take exactly the time they take on
//! a 1 Gbit/s wire (with preamble, FCS and inter-frame gap). Its queue
//! holds one BDP, and both hosts may grow TCP windows to 64 MiB.

use std::time::Duration;

use super::{Context, tcp};
use crate::emulator::{LinkConfig, QueueLimit};
use crate::measure::Row;
use crate::results::Measurement;

const ONE_WAY_DELAY: Duration = Duration::from_millis(45);
const WIRE_BITS_PER_SEC: f64 = 1e9;
/// Theoretical TCP goodput at 1 Gbit/s and MTU 1500 (HPN-SSH's figure).
pub const THEORETICAL_GOODPUT: f64 = 949.2e6;
const TCP_BUFFER_BYTES: &str = "4096 131072 67108864";

pub fn link() -> LinkConfig {
    let rate = (WIRE_BITS_PER_SEC * 1514.0 / 1538.0) as u64;
    LinkConfig {
        rate_bits_per_sec: Some(rate),
        // One bandwidth-delay product of full frames: 1 Gbit/s × 90 ms / 1514 B.
        queue_limit: QueueLimit {
            packets: Some(7_500),
            bytes: None,
        },
        ..LinkConfig::delayed(ONE_WAY_DELAY)
    }
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let system = context.system_name;
    let (bytes, samples) = if context.quick {
        (256u64 << 20, 1)
    } else {
        (1u64 << 30, 3)
    };
    context.progress.step(&format!(
        "{system}: bdp: {} MiB over 1 Gbit/s, 45 ms each way",
        bytes >> 20
    ));
    let row = Row::new("bdp", "tcp_bulk", system, "bit/s")
        .param("delay_ms", 45)
        .param("rate", "1gbit");
    for namespace in [&context.hosts.left, &context.hosts.right] {
        for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
            let _ = namespace.exec(
                "sysctl",
                &["-q", "-w", &format!("{key}={TCP_BUFFER_BYTES}")],
            );
        }
    }
    if let Err(why) = context.shape(link()) {
        context.progress.done();
        return vec![row.failed(why)];
    }
    let series = tcp::series(context, bytes, 1, samples, Duration::from_secs(120), 5401);
    let rates: Vec<f64> = series
        .reports
        .iter()
        .map(|r| r.throughput_bits_per_sec)
        .collect();
    let mut extra = series.extra(context.has_processes());
    let figures = extra.bulk.get_or_insert_default();
    figures.theoretical_goodput_bits_per_sec = Some(THEORETICAL_GOODPUT);
    let median = crate::results::median(&rates);
    figures.efficiency = Some(median / THEORETICAL_GOODPUT);
    let mut measurement = row.measured(rates, series.status(), extra);
    if let Some(why) = series.failure {
        measurement.note = Some(why);
    }
    context.progress.done();
    vec![measurement]
}
