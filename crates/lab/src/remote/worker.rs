//! The lab's worker (`fjord lab worker …`): what the lab runs on a host
//! over SSH, one traffic generator end per process. It answers on stdout,
//! one line each: `ready` once it listens (sinks), then one JSON object,
//! its report; an error goes to stderr with a failing exit status.
//!
//! The controller ([`super::quick`]) starts the sink on one host, waits
//! for `ready`, runs the source on the other and reads both reports. A
//! UDP trial's ends ([`udp_ends`]) also read lines on stdin: the source
//! waits for `warm`, relayed from its sink; the sink drains once told
//! `sent` ([`super::udp`]).

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use crate::traffic::frame::FrameSizes;
use crate::traffic::tcp_bulk::ends;
use crate::traffic::udp::{Trial, ends as udp_ends};

/// The line a sink prints once it listens.
pub const READY: &str = "ready";

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error(transparent)]
    Traffic(#[from] crate::traffic::TrafficError),
    #[error("writing the report: {0}")]
    Output(#[from] std::io::Error),
    #[error("encoding the report: {0}")]
    Encode(#[from] serde_json::Error),
    #[error("--offer {0}")]
    Offer(String),
}

/// One UDP trial as a worker runs it: `offer` (see
/// [`udp_ends::offer_text`]) of `frame_size`-byte frames, stream `stream`,
/// drained for `drain` after the source finished.
pub struct UdpTrial<'a> {
    pub offer: &'a str,
    pub frame_size: usize,
    pub stream: u16,
    pub drain: Duration,
}

impl UdpTrial<'_> {
    fn trial(&self) -> Result<Trial, WorkerError> {
        let offer = udp_ends::parse_offer(self.offer).map_err(WorkerError::Offer)?;
        Ok(Trial::new(offer, FrameSizes::fixed(self.frame_size)).drain(self.drain))
    }
}

/// The UDP trial's receiver on `listen`: `ready`, `warm`, its report.
pub fn udp_sink(
    trial: &UdpTrial<'_>,
    listen: SocketAddr,
    out: &mut dyn Write,
) -> Result<(), WorkerError> {
    let control = std::io::BufReader::new(std::io::stdin());
    let report = udp_ends::sink(&trial.trial()?, listen, trial.stream, control, |event| {
        let line = match event {
            udp_ends::SinkEvent::Ready => READY,
            udp_ends::SinkEvent::Warm => udp_ends::WARM,
        };
        writeln!(out, "{line}").and_then(|()| out.flush())
    })?;
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}

/// The UDP trial's sender to `to`, offering once told `warm`: its report.
pub fn udp_source(
    trial: &UdpTrial<'_>,
    to: SocketAddr,
    out: &mut dyn Write,
) -> Result<(), WorkerError> {
    let control = std::io::BufReader::new(std::io::stdin());
    let report = udp_ends::source(&trial.trial()?, to, trial.stream, control)?;
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}

/// The TCP bulk sink: listens on `listen` for `streams` connections.
pub fn tcp_sink(
    listen: SocketAddr,
    streams: usize,
    timeout: Duration,
    out: &mut (dyn Write + Send),
) -> Result<(), WorkerError> {
    let mut ready_error = None;
    let report = ends::sink(listen, streams, timeout, timeout, || {
        if let Err(error) = writeln!(out, "{READY}").and_then(|()| out.flush()) {
            ready_error = Some(error);
        }
    })?;
    if let Some(error) = ready_error {
        return Err(error.into());
    }
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}

/// The TCP bulk source: `bytes` over `streams` connections to `to`.
pub fn tcp_source(
    to: SocketAddr,
    bytes: u64,
    streams: usize,
    seed: u64,
    timeout: Duration,
    out: &mut dyn Write,
) -> Result<(), WorkerError> {
    let report = ends::source(to, bytes, streams, seed, timeout, timeout)?;
    writeln!(out, "{}", serde_json::to_string(&report)?)?;
    out.flush()?;
    Ok(())
}
