//! The lab's worker (`fjord lab worker …`): what the lab runs on a host
//! over SSH, one traffic generator end per process. It answers on stdout,
//! one line each: `ready` once it listens (sinks), then one JSON object,
//! its report; an error goes to stderr with a failing exit status.
//!
//! The controller ([`super::quick`]) starts the sink on one host, waits
//! for `ready`, runs the source on the other and reads both reports.

use std::io::Write;
use std::net::SocketAddr;
use std::time::Duration;

use crate::traffic::tcp_bulk::ends;

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
