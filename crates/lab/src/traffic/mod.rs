//! Traffic between lab hosts: reachability (ping) and generators that
//! measure and verify what crosses a link or tunnel.

pub mod flows;
pub mod frame;
pub mod imix;
pub mod latency;
pub mod packet;
pub mod rfc2544;
pub mod tcp_bulk;
pub mod udp;
pub mod udp_measurements;

use std::io;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::netns::Namespace;

pub use tcp_bulk::{BulkReport, BulkTransfer, Content, ContentDigest, StreamReport};

#[derive(Debug, thiserror::Error)]
pub enum TrafficError {
    #[error("{operation}: {source}")]
    Io {
        operation: String,
        #[source]
        source: io::Error,
    },
    #[error("ping {destination} from {namespace} failed: {output}")]
    PingFailed {
        namespace: String,
        destination: IpAddr,
        output: String,
    },
    #[error("no ping reply from {destination} in {namespace} within {timeout:?}: {output}")]
    Unreachable {
        namespace: String,
        destination: IpAddr,
        timeout: Duration,
        output: String,
    },
}

impl TrafficError {
    /// The run ran out of time (its deadline or a stall limit), rather
    /// than failing.
    pub fn is_timeout(&self) -> bool {
        matches!(self, TrafficError::Io { source, .. } if source.kind() == io::ErrorKind::TimedOut)
    }
}

/// What `ping` reported.
#[derive(Debug, Clone, PartialEq)]
pub struct PingSummary {
    pub transmitted: u32,
    pub received: u32,
    /// Average round trip, if any reply came.
    pub rtt_avg: Option<Duration>,
}

/// `ping -c COUNT -i 0.2 -W 1 DESTINATION` inside `namespace`; an error
/// unless every echo was answered.
pub fn ping(
    namespace: &Namespace,
    destination: IpAddr,
    count: u32,
) -> Result<PingSummary, TrafficError> {
    ping_sized(namespace, destination, count, None)
}

/// [`ping`] with `payload` bytes of echo data (`ping -s`; 56 when `None`),
/// for echoes larger than a tunnel's MTU, which leave as IP fragments.
pub fn ping_sized(
    namespace: &Namespace,
    destination: IpAddr,
    count: u32,
    payload: Option<usize>,
) -> Result<PingSummary, TrafficError> {
    let output = run_ping(namespace, destination, count, payload)?;
    match parse_ping(&output) {
        Some(summary) if summary.received == count => Ok(summary),
        _ => Err(TrafficError::PingFailed {
            namespace: namespace.name().to_string(),
            destination,
            output: output.trim().to_string(),
        }),
    }
}

/// Echoes too large for a 1,420-byte tunnel, each answered: 1,500-byte
/// datagrams (two IPv4 fragments each way) and 3,028-byte ones (three).
pub fn ping_over_tunnel_mtu(
    namespace: &Namespace,
    destination: IpAddr,
) -> Result<(), TrafficError> {
    for payload in [1472, 3000] {
        ping_sized(namespace, destination, 3, Some(payload))?;
    }
    Ok(())
}

/// Pings once per try until a reply comes or `timeout` passes; returns the
/// time until the first reply.
pub fn wait_for_ping(
    namespace: &Namespace,
    destination: IpAddr,
    timeout: Duration,
) -> Result<Duration, TrafficError> {
    let start = Instant::now();
    loop {
        let output = run_ping(namespace, destination, 1, None)?;
        if parse_ping(&output).is_some_and(|summary| summary.received == 1) {
            return Ok(start.elapsed());
        }
        if start.elapsed() >= timeout {
            return Err(TrafficError::Unreachable {
                namespace: namespace.name().to_string(),
                destination,
                timeout,
                output: output.trim().to_string(),
            });
        }
        // `-W 1` already waited up to a second for a lost echo; a refused
        // one (no route yet) returns at once, so pace the retries.
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn run_ping(
    namespace: &Namespace,
    destination: IpAddr,
    count: u32,
    payload: Option<usize>,
) -> Result<String, TrafficError> {
    let mut command: Command = namespace.command("ping");
    command.args(["-n", "-c", &count.to_string(), "-i", "0.2", "-W", "1"]);
    if let Some(payload) = payload {
        command.args(["-s", &payload.to_string()]);
    }
    command.arg(destination.to_string()).stdin(Stdio::null());
    let output = command.output().map_err(|source| TrafficError::Io {
        operation: format!("run ping in {}", namespace.name()),
        source,
    })?;
    let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stderr));
    Ok(text)
}

/// Reads "N packets transmitted, M received" and "rtt min/avg/max/mdev = a/b/c/d ms".
pub fn parse_ping(output: &str) -> Option<PingSummary> {
    let stats = output
        .lines()
        .find(|line| line.contains("packets transmitted"))?;
    let mut numbers = stats.split(',').map(|part| {
        part.split_whitespace()
            .next()
            .and_then(|word| word.parse::<u32>().ok())
    });
    let transmitted = numbers.next()??;
    let received = numbers.next()??;
    let rtt_avg = output
        .lines()
        .find(|line| line.starts_with("rtt") || line.starts_with("round-trip"))
        .and_then(|line| line.split('=').nth(1))
        .and_then(|values| values.trim().split('/').nth(1))
        .and_then(|avg| avg.parse::<f64>().ok())
        .map(|ms| Duration::from_nanos((ms * 1e6).round() as u64));
    Some(PingSummary {
        transmitted,
        received,
        rtt_avg,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_ping_summary() {
        let output = "PING 198.19.0.2 (198.19.0.2) 56(84) bytes of data.\n\
            64 bytes from 198.19.0.2: icmp_seq=1 ttl=64 time=0.696 ms\n\n\
            --- 198.19.0.2 ping statistics ---\n\
            3 packets transmitted, 3 received, 0% packet loss, time 402ms\n\
            rtt min/avg/max/mdev = 0.696/1.564/3.127/1.107 ms\n";
        let summary = parse_ping(output).unwrap();
        assert_eq!((summary.transmitted, summary.received), (3, 3));
        assert_eq!(summary.rtt_avg, Some(Duration::from_micros(1564)));
    }

    #[test]
    fn parses_ping_with_errors() {
        let output = "--- 198.19.0.2 ping statistics ---\n\
            1 packets transmitted, 0 received, +1 errors, 100% packet loss, time 0ms\n";
        let summary = parse_ping(output).unwrap();
        assert_eq!(
            (summary.transmitted, summary.received, summary.rtt_avg),
            (1, 0, None)
        );
    }
}
