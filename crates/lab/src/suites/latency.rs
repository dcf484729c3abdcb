//! `latency`: round-trip time of pings by payload size, as in the VpnCloud
//! tests (56, 500 and 1000 bytes), with percentiles.

use std::net::IpAddr;

use super::Context;
use crate::measure::Row;
use crate::netns::Namespace;
use crate::results::{Extra, Measurement, MeasurementStatus};

pub const PAYLOADS: [usize; 3] = [56, 500, 1000];

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let count = if context.quick { 50 } else { 200 };
    PAYLOADS
        .iter()
        .take_while(|_| !context.progress.stopping())
        .map(|&payload| {
            context.progress.step(&format!(
                "{}: latency: {count} pings of {payload} bytes",
                context.system_name
            ));
            let row = rtt(context, payload, count);
            context.progress.done();
            row
        })
        .collect()
}

/// Round trips of `count` pings with `payload` bytes, left to right, in ms.
pub fn rtt(context: &Context<'_>, payload: usize, count: usize) -> Measurement {
    let row = Row::new("latency", "rtt", context.system_name, "ms").param("payload", payload);
    let rtts = match ping_times(
        &context.hosts.left,
        context.system.right_address(),
        payload,
        count,
    ) {
        Ok(rtts) if !rtts.is_empty() => rtts,
        Ok(_) => return row.failed("no ping was answered"),
        Err(why) => return row.failed(why),
    };
    let mut sorted = rtts.clone();
    sorted.sort_by(f64::total_cmp);
    let percentile = |p: f64| sorted[((sorted.len() - 1) as f64 * p).round() as usize];
    let extra = Extra {
        min: Some(sorted[0]),
        p50: Some(percentile(0.50)),
        p99: Some(percentile(0.99)),
        p999: Some(percentile(0.999)),
        max: Some(sorted[sorted.len() - 1]),
        sent: Some(count as u64),
        answered: Some(rtts.len() as u64),
        ..Extra::default()
    };
    row.measured(rtts, MeasurementStatus::Ok, extra)
}

/// Runs `ping` and returns each reply's round trip in milliseconds.
fn ping_times(
    namespace: &Namespace,
    destination: IpAddr,
    payload: usize,
    count: usize,
) -> Result<Vec<f64>, String> {
    let output = namespace
        .command("ping")
        .args([
            "-n",
            "-c",
            &count.to_string(),
            "-i",
            "0.01",
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

fn parse_ping_times(text: &str) -> Vec<f64> {
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
