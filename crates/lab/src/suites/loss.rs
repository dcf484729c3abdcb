//! `loss`: how long a 10 MB file takes at 0–25 % random drop, bare against
//! tunnels, as in the TCP-over-TCP study. Drops happen in the middle
//! namespace (where a network loses packets), both directions, on a
//! 100 Mbit/s link with 5 ms of delay each way. The rate limit is what
//! makes the figures comparable: on an unlimited veth the file took 0.2 s,
//! and one retransmission timeout more or less halved or doubled a sample.
//! A trial that hits its time limit is reported as such (status
//! `timed_out`, the limit as its figure).

use std::time::Duration;

use super::{Context, tcp};
use crate::emulator::{LinkConfig, Probability};
use crate::measure::Row;
use crate::results::{Measurement, MeasurementStatus};

const FILE_BYTES: u64 = 10_000_000;
const ONE_WAY_DELAY: Duration = Duration::from_millis(5);
const RATE_BITS_PER_SEC: u64 = 100_000_000;

pub fn drop_rates(quick: bool) -> &'static [f64] {
    if quick {
        &[0.0, 1.0, 5.0, 10.0]
    } else {
        &[0.0, 1.0, 2.0, 5.0, 10.0, 15.0, 20.0, 25.0]
    }
}

/// The emulated link at `drop_percent` random loss.
pub fn link(drop_percent: f64) -> LinkConfig {
    LinkConfig {
        loss: Probability::from_percent(drop_percent).unwrap_or(Probability::ZERO),
        rate_bits_per_sec: Some(RATE_BITS_PER_SEC),
        ..LinkConfig::delayed(ONE_WAY_DELAY)
    }
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    // At 20–25 % drop a transfer takes minutes whatever carries it (lost
    // SYNs and ACKs back the timers off), so past a minute the figure is
    // only "slower than a minute"; a timed-out sample ends its point.
    let samples = if context.quick { 1 } else { 5 };
    let limit = Duration::from_secs(60);
    // TCP's answer to random loss is the whole story here (BBR barely
    // slows, CUBIC collapses, and TCP in TCP suffers differently under
    // each), so the rows say which the hosts ran: the machine's default,
    // which new namespaces inherit, unless `--congestion-control` chose.
    let congestion_control = context
        .hosts
        .left
        .exec("sysctl", &["-n", "net.ipv4.tcp_congestion_control"])
        .map(|name| name.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    let mut rows = Vec::new();
    for (index, &drop_percent) in drop_rates(context.quick).iter().enumerate() {
        if context.progress.stopping() {
            break;
        }
        let system = context.system_name;
        context
            .progress
            .step(&format!("{system}: loss: 10 MB at {drop_percent} % drop"));
        let row = Row::new("loss", "transfer_time", system, "s")
            .param("drop_percent", drop_percent)
            .param("bytes", FILE_BYTES)
            .param("rate", format!("{}mbit", RATE_BITS_PER_SEC / 1_000_000))
            .param("congestion_control", congestion_control.as_str());
        if let Err(why) = context.shape(link(drop_percent)) {
            rows.push(row.failed(why));
            context.progress.done();
            continue;
        }
        let port = 5301 + (index * 10) as u16;
        let series = tcp::series(context, FILE_BYTES, 1, samples, limit, port);
        let mut times: Vec<f64> = series
            .reports
            .iter()
            .map(|r| r.elapsed.as_secs_f64())
            .collect();
        let mut extra = series.extra(context.has_processes());
        let figures = extra.bulk.get_or_insert_default();
        figures.time_limit_secs = Some(limit.as_secs_f64());
        figures.one_way_delay_ms = Some(ONE_WAY_DELAY.as_secs_f64() * 1e3);
        let status = series.status();
        if status == MeasurementStatus::TimedOut {
            times.push(limit.as_secs_f64());
        }
        let mut measurement = row.measured(times, status, extra);
        if let Some(why) = series.failure {
            measurement.note = Some(why);
        } else if status == MeasurementStatus::TimedOut {
            measurement.note = Some(format!("stopped at the {} s limit", limit.as_secs()));
        }
        rows.push(measurement);
        context.progress.done();
    }
    rows
}
