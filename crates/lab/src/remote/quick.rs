//! The `quick` suite across hosts: the same rows as between namespaces,
//! under the same keys, so reports and ratios read them alike — TCP (1
//! and 4 streams, three digest-checked 256 MiB transfers each), the RFC
//! 2544 zero-loss rates of 64- and 1518-byte frames (the namespaces'
//! search, its trials run by [`super::udp`]), and the ping row (50 × 56
//! bytes, 10 ms apart). The TCP and RFC 2544 rows carry the CPU the
//! tunnel's processes used on both hosts per bit, read from their hosts'
//! `/proc` before and after.
//!
//! A transfer: the right host's worker listens (`tcp-sink`) and says
//! `ready`; the left host's worker sends (`tcp-source`) and reports what
//! it sent; the sink reports what arrived, timed by its own clock from
//! its first connection to its last EOF.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::Child;
use std::time::{Duration, Instant};

use super::host::RemoteHost;
use super::ssh::{Connection, RemoteError, quote};
use super::systems::Tunnel;
use super::udp::HostTrials;
use super::worker::READY;
use crate::measure::{CpuCharge, Row, add_cpu};
use crate::progress::Progress;
use crate::results::{Bulk, Extra, Measurement, MeasurementStatus};
use crate::suites::latency::{parse_ping_times, rtt_statistics};
use crate::suites::quick::{
    PING_COUNT, PING_PAYLOAD, RFC2544_FRAME_SIZES, TCP_BYTES, TCP_LIMIT, TCP_ROWS, TCP_SAMPLES,
};
use crate::suites::throughput::{self, Direction};
use crate::traffic::BulkReport;
use crate::traffic::frame::FrameSizes;
use crate::traffic::rfc2544::ThroughputSearch;
use crate::traffic::tcp_bulk::ends::{self, SinkReport, SourceReport};

/// How long past the workers' own time limit the lab waits for them.
const WORKER_GRACE: Duration = Duration::from_secs(15);
/// The UDP port of the RFC 2544 trials' receiver, as between namespaces.
const UDP_PORT: u16 = 6001;

/// Runs the suite for `system`, up as `tunnel` between `left` and `right`.
/// Only a lost host is an error; every other failure is a failed row.
pub fn run(
    left: &RemoteHost,
    right: &RemoteHost,
    tunnel: &Tunnel,
    system: &str,
    progress: &Progress,
) -> Result<Vec<Measurement>, RemoteError> {
    let mut rows = Vec::new();
    for (streams, port) in TCP_ROWS {
        if progress.stopping() {
            return Ok(rows);
        }
        progress.step(&format!(
            "{system}: quick: TCP, {streams} stream(s), {TCP_SAMPLES} × 256 MiB, digest-checked, {} → {}",
            left.name(),
            right.name()
        ));
        rows.push(tcp_row(left, right, tunnel, system, streams, port)?);
        progress.done();
    }
    for frame_size in RFC2544_FRAME_SIZES {
        if progress.stopping() {
            return Ok(rows);
        }
        progress.step(&format!(
            "{system}: quick: RFC 2544 zero-loss rate, {frame_size}-byte frames, {} → {}",
            left.name(),
            right.name()
        ));
        rows.push(zero_loss_row(left, right, tunnel, system, frame_size)?);
        progress.done();
    }
    if progress.stopping() {
        return Ok(rows);
    }
    progress.step(&format!(
        "{system}: quick: ping RTT, {PING_PAYLOAD} bytes, {} → {}",
        left.name(),
        right.name()
    ));
    rows.push(ping_row(left, tunnel, system)?);
    progress.done();
    Ok(rows)
}

fn tcp_row(
    left: &RemoteHost,
    right: &RemoteHost,
    tunnel: &Tunnel,
    system: &str,
    streams: usize,
    port: u16,
) -> Result<Measurement, RemoteError> {
    let row = Row::new("quick", "tcp_bulk", system, "bit/s")
        .param("streams", streams)
        .param("direction", "left_to_right");
    let mut reports: Vec<BulkReport> = Vec::new();
    let mut failure = None;
    let before = usage(left, right, tunnel)?;
    for sample in 0..TCP_SAMPLES {
        match transfer(left, right, tunnel, streams, port + sample as u16) {
            Ok(report) => reports.push(report),
            Err(error) if error.is_lost() => return Err(error),
            Err(error) => {
                failure = Some(error.to_string());
                break;
            }
        }
    }
    let charge = charge(before, usage(left, right, tunnel)?);
    let verified = !reports.is_empty() && reports.iter().all(|report| report.verified);
    let bytes: u64 = reports.iter().map(|report| report.bytes).sum();
    let mut extra = Extra {
        bulk: Some(Bulk {
            bytes: Some(bytes),
            verified: Some(verified),
            xxh3_128: reports
                .first()
                .map(|report| report.receiver_digest.to_string()),
            ..Bulk::default()
        }),
        ..Extra::default()
    };
    if let Some(charge) = charge {
        add_cpu(&mut extra, &[charge], bytes as f64 * 8.0, true);
    }
    let samples = reports
        .iter()
        .map(|report| report.throughput_bits_per_sec)
        .collect();
    let status = match failure {
        Some(_) => MeasurementStatus::Failed,
        None => MeasurementStatus::Ok,
    };
    let mut measurement = row.measured(samples, status, extra);
    measurement.note = failure;
    Ok(measurement)
}

/// The zero-loss rate of `frame_size`-byte frames from the left host to
/// the right: the quick search between namespaces, trial for trial.
fn zero_loss_row(
    left: &RemoteHost,
    right: &RemoteHost,
    tunnel: &Tunnel,
    system: &str,
    frame_size: usize,
) -> Result<Measurement, RemoteError> {
    let mut search = ThroughputSearch::quick(FrameSizes::fixed(frame_size));
    throughput::overview(&mut search);
    let trials = HostTrials {
        sender: left,
        receiver: right,
        destination: SocketAddr::new(tunnel.right_address, UDP_PORT),
    };
    let before = usage(left, right, tunnel)?;
    let result = match search.run(&trials) {
        Err(error) if error.is_lost() => return Err(error),
        result => result.map_err(|error| error.to_string()),
    };
    let charge = charge(before, usage(left, right, tunnel)?);
    let mut measurement = throughput::zero_loss_row(
        system,
        frame_size,
        Direction::LeftToRight,
        result,
        tunnel.mtu,
        charge,
    );
    measurement.suite = "quick".into();
    Ok(measurement)
}

/// The tunnel's processes' use so far (`None`: it has none).
fn usage(
    left: &RemoteHost,
    right: &RemoteHost,
    tunnel: &Tunnel,
) -> Result<Option<CpuCharge>, RemoteError> {
    if !tunnel.has_processes() {
        return Ok(None);
    }
    tunnel.usage(left, right).map(Some)
}

/// What the tunnel's processes used between `before` and `after`.
fn charge(before: Option<CpuCharge>, after: Option<CpuCharge>) -> Option<CpuCharge> {
    let (before, after) = (before?, after?);
    Some(CpuCharge {
        cpu: after.cpu.saturating_sub(before.cpu),
        resident_bytes: after.resident_bytes,
    })
}

/// One transfer of [`TCP_BYTES`] from the left host to the right.
fn transfer(
    left: &RemoteHost,
    right: &RemoteHost,
    tunnel: &Tunnel,
    streams: usize,
    port: u16,
) -> Result<BulkReport, RemoteError> {
    let address = format!("{}", std::net::SocketAddr::new(tunnel.right_address, port));
    let streams_text = streams.to_string();
    let limit_secs = TCP_LIMIT.as_secs().to_string();
    let sink_words = [
        right.binary(),
        "lab",
        "worker",
        "tcp-sink",
        "--listen",
        &address,
        "--streams",
        &streams_text,
        "--timeout-secs",
        &limit_secs,
    ];
    let sink_command = sink_words.join(" ");
    let mut sink = right.stream("tcp-sink", &sink_words)?;
    let mut sink_lines = BufReader::new(
        sink.stdout
            .take()
            .ok_or_else(|| refused(right, "tcp-sink", "no output".into()))?,
    )
    .lines();
    if sink_lines.next().and_then(Result::ok).as_deref() != Some(READY) {
        // The sink ended before listening: its status and stderr say why.
        let ended = right
            .connection()
            .finish(&sink_command, sink.wait_with_output());
        return Err(ended.err().unwrap_or_else(|| {
            refused(
                right,
                "tcp-sink",
                format!("`{sink_command}` ended without listening"),
            )
        }));
    }
    let bytes = TCP_BYTES.to_string();
    let source_words = [
        left.binary(),
        "lab",
        "worker",
        "tcp-source",
        "--to",
        &address,
        "--bytes",
        &bytes,
        "--streams",
        &streams_text,
        "--seed",
        "1",
        "--timeout-secs",
        &limit_secs,
    ];
    let source_command = source_words.join(" ");
    let source = match left.stream("tcp-source", &source_words) {
        Ok(source) => source,
        Err(error) => {
            stop_local(sink);
            return Err(error);
        }
    };
    let (sink, source) = wait_for_both(right, sink, left, source)?;
    let received = sink_lines.next().and_then(Result::ok);
    right
        .connection()
        .finish(&sink_command, sink.wait_with_output())?;
    let sent = left
        .connection()
        .finish(&source_command, source.wait_with_output())?;
    let source_report: SourceReport =
        decode(&sent).map_err(|detail| refused(left, "tcp-source", detail))?;
    let sink_report: SinkReport = decode(received.as_deref().unwrap_or(""))
        .map_err(|detail| refused(right, "tcp-sink", detail))?;
    Ok(ends::combine(&sink_report, &source_report))
}

/// Waits until both workers' ssh sessions ended, or one of them lost its
/// host: then the other is not waited for (its host's clean-up stops it).
fn wait_for_both(
    right: &RemoteHost,
    mut sink: Child,
    left: &RemoteHost,
    mut source: Child,
) -> Result<(Child, Child), RemoteError> {
    // The workers give up at their own time limit; this is a backstop.
    let deadline = Instant::now() + TCP_LIMIT + WORKER_GRACE;
    loop {
        let sink_status = sink.try_wait().ok().flatten();
        let source_status = source.try_wait().ok().flatten();
        if sink_status.is_some_and(Connection::is_ssh_failure) {
            stop_local(source);
            return Err(lost(right, "tcp-sink", sink));
        }
        if source_status.is_some_and(Connection::is_ssh_failure) {
            stop_local(sink);
            return Err(lost(left, "tcp-source", source));
        }
        if sink_status.is_some() && source_status.is_some() {
            return Ok((sink, source));
        }
        if Instant::now() > deadline {
            stop_local(sink);
            stop_local(source);
            return Err(refused(
                left,
                "tcp-source",
                format!("no answer within {:?}", TCP_LIMIT + WORKER_GRACE),
            ));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The error of a worker whose ssh session failed.
fn lost(host: &RemoteHost, worker: &str, child: Child) -> RemoteError {
    let ended = host.connection().finish(worker, child.wait_with_output());
    ended
        .err()
        .unwrap_or_else(|| refused(host, worker, "ended".into()))
}

/// Ends a local ssh session this run started (its remote worker is
/// stopped by the host's clean-up, by its PID file).
pub(super) fn stop_local(mut child: Child) {
    let _ = child.kill();
    let _ = child.wait();
}

pub(super) fn decode<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, String> {
    serde_json::from_str(text.trim())
        .map_err(|error| format!("unreadable report {text:?}: {error}"))
}

pub(super) fn refused(host: &RemoteHost, worker: &str, detail: String) -> RemoteError {
    RemoteError::Refused {
        host: host.name().to_string(),
        detail: format!("{worker}: {detail}"),
    }
}

/// Round trips of the quick suite's pings, left to right.
fn ping_row(left: &RemoteHost, tunnel: &Tunnel, system: &str) -> Result<Measurement, RemoteError> {
    // ping exits 1 when a reply is missing; the replies still count.
    let script = format!(
        "ping -n -c {PING_COUNT} -i 0.01 -W 1 -s {PING_PAYLOAD} {} || true",
        quote(&tunnel.right_address.to_string())
    );
    let rtts = parse_ping_times(&left.connection().run("ping", &script)?);
    let row = Row::new("latency", "rtt", system, "ms")
        .param("interval_ms", 10.0)
        .param("payload", PING_PAYLOAD);
    let mut measurement = if rtts.is_empty() {
        row.failed("no ping was answered")
    } else {
        let extra = rtt_statistics(&rtts, PING_COUNT);
        row.measured(rtts, MeasurementStatus::Ok, extra)
    };
    measurement.suite = "quick".into();
    Ok(measurement)
}
