//! TCP bulk transfers with a content digest check, shared by the suites.

use std::net::SocketAddr;
use std::time::Duration;

use super::Context;
use crate::measure::{CpuCharge, add_cpu, charged};
use crate::results::{Bulk, Extra, MeasurementStatus};
use crate::traffic::tcp_bulk::{BulkReport, BulkTransfer};

/// What a series of transfers gave.
pub struct Series {
    pub reports: Vec<BulkReport>,
    pub charges: Vec<CpuCharge>,
    /// Set when a trial hit its time limit (the series stops there).
    pub timed_out: bool,
    /// Set when a trial failed for another reason.
    pub failure: Option<String>,
}

impl Series {
    pub fn status(&self) -> MeasurementStatus {
        if self.failure.is_some() {
            MeasurementStatus::Failed
        } else if self.timed_out {
            MeasurementStatus::TimedOut
        } else {
            MeasurementStatus::Ok
        }
    }

    /// Every transfer arrived intact.
    pub fn verified(&self) -> bool {
        !self.reports.is_empty() && self.reports.iter().all(|r| r.verified)
    }

    /// Bytes moved, checksums, CPU: the `extra` of a row.
    pub fn extra(&self, has_processes: bool) -> Extra {
        let bytes: u64 = self.reports.iter().map(|r| r.bytes).sum();
        let mut extra = Extra {
            bulk: Some(Bulk {
                bytes: Some(bytes),
                verified: Some(self.verified()),
                xxh3_128: self
                    .reports
                    .first()
                    .map(|first| first.receiver_digest.to_string()),
                ..Bulk::default()
            }),
            ..Extra::default()
        };
        add_cpu(&mut extra, &self.charges, bytes as f64 * 8.0, has_processes);
        extra
    }
}

/// Runs `samples` transfers of `bytes` from left to right, each limited to
/// `limit`, on consecutive ports from `port`.
pub fn series(
    context: &Context<'_>,
    bytes: u64,
    streams: usize,
    samples: usize,
    limit: Duration,
    port: u16,
) -> Series {
    let transfer = BulkTransfer::new(bytes)
        .streams(streams)
        .timeout(limit)
        .stall_timeout(limit);
    series_of(context, &transfer, samples, port)
}

/// Runs `samples` of `transfer` from left to right, on consecutive ports
/// from `port`.
pub fn series_of(
    context: &Context<'_>,
    transfer: &BulkTransfer,
    samples: usize,
    port: u16,
) -> Series {
    let mut series = Series {
        reports: Vec::new(),
        charges: Vec::new(),
        timed_out: false,
        failure: None,
    };
    for sample in 0..samples {
        let sink = SocketAddr::new(context.system.right_address(), port + sample as u16);
        let (result, charge) = charged(context.system, || {
            transfer.run(&context.hosts.left, &context.hosts.right, sink)
        });
        match result {
            Ok(report) => {
                series.reports.push(report);
                series.charges.push(charge);
            }
            Err(error) if error.is_timeout() => {
                series.timed_out = true;
                break;
            }
            Err(error) => {
                series.failure = Some(error.to_string());
                break;
            }
        }
    }
    series
}
