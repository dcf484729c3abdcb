//! The two ends of a [`BulkTransfer`](super::BulkTransfer) apart, for a
//! sink and a source on different hosts (each run by the lab's worker
//! there, [`crate::remote::worker`]). Same streams, header, content and
//! digests as a transfer between namespaces; what differs is the clock:
//! the sink times from its first accepted connection to its last EOF,
//! since the source's clock is another host's.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::report::{ReceivedStream, SentStream, report};
use super::{BulkReport, Content, Limits, join, receive_all, send_stream, split};
use crate::traffic::TrafficError;
use crate::traffic::tcp_bulk::keystream::stream_seed;

/// One stream as the sink saw it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinkStream {
    pub index: usize,
    pub expected: u64,
    pub bytes: u64,
    /// XXH3-128, as 32 hex digits.
    pub digest: String,
    /// From the first connection's accept to this stream's start and end.
    pub started_after_secs: f64,
    pub finished_after_secs: f64,
}

/// What a sink received.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SinkReport {
    pub streams: Vec<SinkStream>,
}

/// One stream as the source sent it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceStream {
    pub index: usize,
    pub bytes: u64,
    pub digest: String,
}

/// What a source sent.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SourceReport {
    pub streams: Vec<SourceStream>,
}

fn limits(timeout: Duration, stall: Duration) -> Limits {
    Limits {
        deadline: Instant::now() + timeout,
        stall,
        abort: Arc::new(AtomicBool::new(false)),
    }
}

/// Listens on `address` (calling `on_ready` once it does), receives
/// `streams` connections to EOF and says what arrived.
pub fn sink(
    address: SocketAddr,
    streams: usize,
    timeout: Duration,
    stall: Duration,
    on_ready: impl FnOnce() + Send,
) -> Result<SinkReport, TrafficError> {
    let limits = limits(timeout, stall);
    let (ready_tx, ready_rx) = mpsc::channel();
    std::thread::scope(|scope| {
        let receiver = scope.spawn(|| receive_all(address, streams.max(1), &limits, ready_tx));
        if ready_rx.recv().is_ok() {
            on_ready();
        }
        let received = receiver
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("sink panicked")))
            .map_err(|source| TrafficError::Io {
                operation: "bulk sink".into(),
                source,
            })?;
        let first = received
            .iter()
            .map(|stream| stream.started)
            .min()
            .unwrap_or_else(Instant::now);
        let after = |at: Instant| at.duration_since(first).as_secs_f64();
        Ok(SinkReport {
            streams: received
                .iter()
                .map(|stream| SinkStream {
                    index: stream.index,
                    expected: stream.expected,
                    bytes: stream.bytes,
                    digest: format!("{:032x}", stream.digest),
                    started_after_secs: after(stream.started),
                    finished_after_secs: after(stream.finished),
                })
                .collect(),
        })
    })
}

/// Sends `bytes` of `content` from `seed` over `streams` connections to
/// `address` and says what went out.
pub fn source(
    address: SocketAddr,
    bytes: u64,
    streams: usize,
    seed: u64,
    timeout: Duration,
    stall: Duration,
) -> Result<SourceReport, TrafficError> {
    let limits = limits(timeout, stall);
    let content = Content::Random;
    let handles: Vec<_> = split(bytes, streams.max(1))
        .into_iter()
        .enumerate()
        .map(|(index, length)| {
            let limits = limits.clone();
            let seed = stream_seed(seed, index);
            std::thread::spawn(move || send_stream(address, index, length, content, seed, &limits))
        })
        .collect();
    let mut sent = Vec::with_capacity(handles.len());
    for (index, handle) in handles.into_iter().enumerate() {
        let stream = join(&format!("bulk source {index}"), handle)?;
        sent.push(SourceStream {
            index: stream.index,
            bytes: stream.bytes,
            digest: format!("{:032x}", stream.digest),
        });
    }
    Ok(SourceReport { streams: sent })
}

/// Both ends' accounts as one report, timed by the sink.
pub fn combine(sink: &SinkReport, source: &SourceReport) -> BulkReport {
    let start = Instant::now();
    let at = |secs: f64| start + Duration::from_secs_f64(secs.max(0.0));
    let digest = |hex: &str| u128::from_str_radix(hex, 16).unwrap_or(0);
    let received = sink
        .streams
        .iter()
        .map(|stream| ReceivedStream {
            index: stream.index,
            expected: stream.expected,
            bytes: stream.bytes,
            digest: digest(&stream.digest),
            started: at(stream.started_after_secs),
            finished: at(stream.finished_after_secs),
        })
        .collect();
    let sent = source
        .streams
        .iter()
        .map(|stream| SentStream {
            index: stream.index,
            bytes: stream.bytes,
            digest: digest(&stream.digest),
        })
        .collect();
    report(start, sent, received)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_ends_agree_over_loopback() {
        let address: SocketAddr = "127.0.0.1:0".parse().unwrap();
        // Port 0 cannot be told to the source: pick a free port first.
        let port = std::net::TcpListener::bind(address)
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let address = SocketAddr::new(address.ip(), port);
        let timeout = Duration::from_secs(20);
        let (ready_tx, ready_rx) = mpsc::channel();
        let sink_thread = std::thread::spawn(move || {
            sink(address, 2, timeout, timeout, move || {
                let _ = ready_tx.send(());
            })
        });
        ready_rx.recv().unwrap();
        let sent = source(address, 3 << 20, 2, 7, timeout, timeout).unwrap();
        let received = sink_thread.join().unwrap().unwrap();
        let report = combine(&received, &sent);
        assert!(report.verified, "{report}");
        assert_eq!(report.bytes, 3 << 20);
        let corrupted = SourceReport {
            streams: vec![SourceStream {
                digest: "0".repeat(32),
                ..sent.streams[0].clone()
            }],
        };
        assert!(!combine(&received, &corrupted).verified);
    }
}
