//! `quick`: the few-minute overview behind the README's main command. TCP
//! with one and with four streams, RFC 2544 zero-loss frame rates at 64 and 1518 bytes, and
//! the round trip of a 56-byte ping.

use std::time::Duration;

use super::{Context, latency, tcp, throughput};
use crate::measure::Row;
use crate::results::Measurement;

// Shared with the quick suite across hosts (`crate::remote::quick`).
pub(crate) const TCP_BYTES: u64 = 256 << 20;
pub(crate) const TCP_SAMPLES: usize = 3;
pub(crate) const TCP_LIMIT: Duration = Duration::from_secs(60);
/// Streams of each TCP row, and the first port of its transfers.
pub(crate) const TCP_ROWS: [(usize, u16); 2] = [(1, 5201), (4, 5211)];
/// Pings of the RTT row, 10 ms apart, of this many bytes.
pub(crate) const PING_COUNT: usize = 50;
pub(crate) const PING_PAYLOAD: usize = 56;
/// Frame sizes of the RFC 2544 zero-loss rows.
pub(crate) const RFC2544_FRAME_SIZES: [usize; 2] = [64, 1518];

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let mut rows = Vec::new();
    let system = context.system_name;

    for (streams, port) in TCP_ROWS {
        if context.progress.stopping() {
            return rows;
        }
        context.progress.step(&format!(
            "{system}: quick: TCP, {streams} stream(s), {TCP_SAMPLES} × 256 MiB, digest-checked"
        ));
        rows.push(tcp_row(context, streams, port));
        context.progress.done();
    }

    for frame_size in RFC2544_FRAME_SIZES {
        if context.progress.stopping() {
            return rows;
        }
        context.progress.step(&format!(
            "{system}: quick: RFC 2544 zero-loss rate, {frame_size}-byte frames"
        ));
        let mut measurement = throughput::rfc2544(
            context,
            frame_size,
            throughput::Direction::LeftToRight,
            true,
        );
        measurement.suite = "quick".into();
        rows.push(measurement);
        context.progress.done();
    }

    if context.progress.stopping() {
        return rows;
    }
    context
        .progress
        .step(&format!("{system}: quick: ping RTT, {PING_PAYLOAD} bytes"));
    let mut measurement = latency::rtt(context, PING_PAYLOAD, PING_COUNT);
    measurement.suite = "quick".into();
    rows.push(measurement);
    context.progress.done();
    rows
}

/// `TCP_SAMPLES` transfers of 256 MiB over `streams` parallel connections.
fn tcp_row(context: &Context<'_>, streams: usize, port: u16) -> Measurement {
    let series = tcp::series(context, TCP_BYTES, streams, TCP_SAMPLES, TCP_LIMIT, port);
    let row = Row::new("quick", "tcp_bulk", context.system_name, "bit/s")
        .param("streams", streams)
        .param("direction", "left_to_right");
    let samples = series
        .reports
        .iter()
        .map(|r| r.throughput_bits_per_sec)
        .collect();
    let mut measurement = row.measured(
        samples,
        series.status(),
        series.extra(context.has_processes()),
    );
    if let Some(why) = &series.failure {
        measurement.note = Some(why.clone());
    }
    if !series.verified() {
        measurement.extra.bulk.get_or_insert_default().verified = Some(false);
    }
    measurement
}
