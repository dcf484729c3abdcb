//! Building [`Measurement`] rows (one from a series of verified
//! transfers among them), and charging a test's CPU time to the tunnel
//! processes that did the work.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::results::{Extra, Measurement, MeasurementStatus, median};
use crate::systems::{RunningSystem, cpu_time, resident_bytes};
use crate::traffic::BulkReport;

/// One row of results, before its samples are known.
pub struct Row {
    pub suite: &'static str,
    pub test: &'static str,
    pub system: String,
    pub params: BTreeMap<String, Value>,
    pub unit: &'static str,
}

impl Row {
    pub fn new(suite: &'static str, test: &'static str, system: &str, unit: &'static str) -> Self {
        Self {
            suite,
            test,
            system: system.to_string(),
            params: BTreeMap::new(),
            unit,
        }
    }

    pub fn param(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.params.insert(key.to_string(), value.into());
        self
    }

    /// The finished measurement.
    pub fn measured(
        self,
        samples: Vec<f64>,
        status: MeasurementStatus,
        extra: Extra,
    ) -> Measurement {
        Measurement {
            suite: self.suite.to_string(),
            test: self.test.to_string(),
            system: self.system,
            params: self.params,
            unit: self.unit.to_string(),
            median: median(&samples),
            samples,
            ratio_to_bare: None,
            status,
            extra,
            note: None,
        }
    }

    /// The finished measurement: failed, with `failure` as its note, if
    /// there is one; else ok.
    pub fn concluded(
        self,
        samples: Vec<f64>,
        extra: Extra,
        failure: Option<String>,
    ) -> Measurement {
        let status = match failure {
            Some(_) => MeasurementStatus::Failed,
            None => MeasurementStatus::Ok,
        };
        let mut measurement = self.measured(samples, status, extra);
        measurement.note = failure;
        measurement
    }

    /// A row for a test that could not run; the note says why.
    pub fn failed(self, why: impl Into<String>) -> Measurement {
        self.concluded(Vec::new(), Extra::default(), Some(why.into()))
    }
}

/// CPU time of the tunnel's processes across `work`, and their memory after.
pub struct CpuCharge {
    pub cpu: Duration,
    pub resident_bytes: u64,
}

pub fn charged<T>(system: &dyn RunningSystem, work: impl FnOnce() -> T) -> (T, CpuCharge) {
    let pids = system.pids();
    let before = cpu_time(&pids);
    let result = work();
    let charge = CpuCharge {
        cpu: cpu_time(&pids).saturating_sub(before),
        resident_bytes: resident_bytes(&pids),
    };
    (result, charge)
}

/// Adds CPU figures to `extra`: seconds, and seconds per Gbit carried.
pub fn add_cpu(extra: &mut Extra, charges: &[CpuCharge], bits: f64, has_processes: bool) {
    if !has_processes {
        return;
    }
    let cpu: f64 = charges.iter().map(|c| c.cpu.as_secs_f64()).sum();
    let cost = extra.cost.get_or_insert_default();
    cost.cpu_seconds = Some(cpu);
    if bits > 0.0 {
        cost.cpu_seconds_per_gbit = Some(cpu / (bits / 1e9));
    }
    if let Some(rss) = charges.iter().map(|c| c.resident_bytes).max() {
        cost.rss_bytes = Some(rss);
    }
}

/// Throughput of a transfer that arrived intact.
pub fn verified(transfer: &Result<BulkReport, String>) -> Option<&BulkReport> {
    transfer.as_ref().ok().filter(|report| report.verified)
}

/// A figure's row from the transfers that arrived intact: their
/// throughputs, bytes and digest; failed with the first failure if none
/// did, with a note counting the failures otherwise.
pub fn transfers_row<'a>(
    row: Row,
    transfers: impl Iterator<Item = &'a Result<BulkReport, String>>,
    mut extra: Extra,
) -> Measurement {
    let transfers: Vec<_> = transfers.collect();
    let good: Vec<&BulkReport> = transfers.iter().filter_map(|t| verified(t)).collect();
    let failures: Vec<String> = transfers
        .iter()
        .filter_map(|transfer| match transfer {
            Err(why) => Some(why.clone()),
            Ok(report) if !report.verified => Some("the data arrived corrupted".to_string()),
            Ok(_) => None,
        })
        .collect();
    let Some(first) = good.first() else {
        return row.failed(
            failures
                .first()
                .cloned()
                .unwrap_or_else(|| "no transfer ran".to_string()),
        );
    };
    let transfer = extra.bulk.get_or_insert_default();
    transfer.bytes = Some(good.iter().map(|report| report.bytes).sum());
    // Failed transfers are the note's; `verified` speaks of the data.
    transfer.verified = Some(
        !transfers
            .iter()
            .any(|transfer| matches!(transfer, Ok(report) if !report.verified)),
    );
    transfer.xxh3_128 = Some(first.receiver_digest.to_string());
    let samples = good
        .iter()
        .map(|report| report.throughput_bits_per_sec)
        .collect();
    let mut measurement = row.measured(samples, MeasurementStatus::Ok, extra);
    if let Some(why) = failures.first() {
        measurement.note = Some(format!(
            "{} of {} transfers failed: {why}",
            failures.len(),
            transfers.len()
        ));
    }
    measurement
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_transfers_fail_the_row_or_leave_a_note() {
        let failed: Result<BulkReport, String> = Err("no progress for 15s".to_string());
        let row_of = |transfers: &[&Result<BulkReport, String>]| {
            transfers_row(
                Row::new("attack", "flood_throughput", "fjord", "bit/s"),
                transfers.iter().copied(),
                Extra::default(),
            )
        };
        let all_failed = row_of(&[&failed, &failed]);
        assert_eq!(all_failed.status, MeasurementStatus::Failed);
        assert_eq!(all_failed.note.as_deref(), Some("no progress for 15s"));

        // One that timed out beside one intact: the intact one is the
        // figure, its data verified, the failure a note.
        let intact: Result<BulkReport, String> = Ok(BulkReport {
            bytes: 1 << 20,
            elapsed: Duration::from_millis(10),
            sender_digest: crate::traffic::ContentDigest(7),
            receiver_digest: crate::traffic::ContentDigest(7),
            verified: true,
            throughput_bits_per_sec: 8e8,
            streams: Vec::new(),
        });
        let partly = row_of(&[&intact, &failed]);
        assert_eq!(partly.status, MeasurementStatus::Ok);
        assert_eq!(partly.samples, [8e8]);
        assert_eq!(partly.extra.bulk.unwrap().verified, Some(true));
        assert_eq!(
            partly.note.as_deref(),
            Some("1 of 2 transfers failed: no progress for 15s")
        );
    }
}
