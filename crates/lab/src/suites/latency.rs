//! `latency`: round-trip time of pings by payload size, as in the VpnCloud
//! tests (56, 500 and 1000 bytes), with percentiles, at three paces: every
//! 10 ms (as before), on an idle link (every 200 ms, where every ping finds
//! both tunnel ends asleep) and every 1 ms (where a tunnel that stays awake
//! a little after traffic wins).

use std::net::IpAddr;

use super::Context;
use crate::measure::Row;
use crate::netns::Namespace;
use crate::results::{Extra, Measurement, MeasurementStatus, Ping};

pub const PAYLOADS: [usize; 3] = [56, 500, 1000];

/// One pace of pings: the interval, the payloads, and how many pings (the
/// full run's, then `--quick`'s).
struct Pace {
    interval_ms: f64,
    payloads: &'static [usize],
    count: usize,
    quick_count: usize,
}

const PACES: [Pace; 3] = [
    Pace {
        interval_ms: 10.0,
        payloads: &PAYLOADS,
        count: 200,
        quick_count: 50,
    },
    Pace {
        interval_ms: 200.0,
        payloads: &[56, 1000],
        count: 50,
        quick_count: 20,
    },
    Pace {
        interval_ms: 1.0,
        payloads: &[56, 1000],
        count: 2000,
        quick_count: 500,
    },
];

/// Progress steps: one per pace and payload.
pub fn steps() -> u64 {
    PACES.iter().map(|pace| pace.payloads.len() as u64).sum()
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let mut rows = Vec::new();
    for pace in &PACES {
        let count = if context.quick {
            pace.quick_count
        } else {
            pace.count
        };
        for &payload in pace.payloads {
            if context.progress.stopping() {
                return rows;
            }
            context.progress.step(&format!(
                "{}: latency: {count} pings of {payload} bytes every {} ms",
                context.system_name, pace.interval_ms
            ));
            let row = rtt_every(context, payload, count, pace.interval_ms);
            context.progress.done();
            rows.push(row);
        }
    }
    rows
}

/// Round trips of `count` pings with `payload` bytes every 10 ms, left to
/// right, in ms.
pub fn rtt(context: &Context<'_>, payload: usize, count: usize) -> Measurement {
    rtt_every(context, payload, count, 10.0)
}

/// Round trips of `count` pings with `payload` bytes every `interval_ms`.
fn rtt_every(context: &Context<'_>, payload: usize, count: usize, interval_ms: f64) -> Measurement {
    let row = Row::new("latency", "rtt", context.system_name, "ms")
        .param("interval_ms", interval_ms)
        .param("payload", payload);
    let rtts = match ping_times(
        &context.hosts.left,
        context.system.right_address(),
        payload,
        count,
        interval_ms,
    ) {
        Ok(rtts) if !rtts.is_empty() => rtts,
        Ok(_) => return row.failed("no ping was answered"),
        Err(why) => return row.failed(why),
    };
    let extra = rtt_statistics(&rtts, count);
    row.measured(rtts, MeasurementStatus::Ok, extra)
}

/// Minimum, percentiles and maximum of round trips `rtts` (not empty) of
/// `sent` pings, and how many were answered.
pub(crate) fn rtt_statistics(rtts: &[f64], sent: usize) -> Extra {
    let mut sorted = rtts.to_vec();
    sorted.sort_by(f64::total_cmp);
    let percentile = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    Extra {
        ping: Some(Ping {
            min: Some(sorted[0]),
            p50: Some(percentile(0.50)),
            p99: Some(percentile(0.99)),
            p999: Some(percentile(0.999)),
            max: Some(sorted[sorted.len() - 1]),
            sent: Some(sent as u64),
            answered: Some(rtts.len() as u64),
        }),
        ..Extra::default()
    }
}

/// Runs `ping` and returns each reply's round trip in milliseconds.
pub(super) fn ping_times(
    namespace: &Namespace,
    destination: IpAddr,
    payload: usize,
    count: usize,
    interval_ms: f64,
) -> Result<Vec<f64>, String> {
    // ping takes seconds; below 2 ms it needs root, which the lab has.
    let interval = format!("{}", interval_ms / 1000.0);
    let output = namespace
        .command("ping")
        .args([
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            &interval,
            "-W",
            "1",
            "-s",
            &payload.to_string(),
        ])
        .arg(destination.to_string())
        .output()
        .map_err(|e| format!("running ping: {e}"))?;
    let text = String::from_utf8_lossy(&output.stdout);
    Ok(parse_ping_times(&text))
}

pub(crate) fn parse_ping_times(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next())
        .filter_map(|value| value.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_reply_times() {
        let text = "PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.\n\
                    64 bytes from 198.19.0.2: icmp_seq=1 ttl=64 time=0.052 ms\n\
                    64 bytes from 198.19.0.2: icmp_seq=2 ttl=64 time=1.10 ms\n\n\
                    --- 198.19.0.2 ping statistics ---\n";
        assert_eq!(parse_ping_times(text), vec![0.052, 1.10]);
    }
}
