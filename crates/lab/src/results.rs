//! The lab's result record (`results.json`), versioned. Every report is
//! rendered from this record alone, so `fjord lab report DIR` can redraw
//! a run later.
//!
//! One [`Measurement`] is one figure for one system under one set of
//! parameters: its samples, their median, the unit, and the ratio of the
//! median to bare's median for the same test and parameters in the same run.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod extra;

pub use extra::{
    Bulk, Cost, Drops, Extra, Flood, FrameLatency, FrameRate, Memory, Mesh, Peers, Ping, Rounds,
    Soak, Statistic, Tracking, TrialRecord,
};

/// Bumped whenever a field changes meaning or disappears.
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct RunRecord {
    pub schema_version: u32,
    pub fjord_version: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    pub duration_secs: f64,
    /// Interleaved rounds of every suite on every system (`--rounds`);
    /// each figure is the median of its rounds'.
    #[serde(default = "one_round", skip_serializing_if = "is_one_round")]
    pub rounds: u32,
    pub machine: Machine,
    /// Suites run, in order.
    pub suites: Vec<String>,
    /// Systems asked for, with what happened to each.
    pub systems: Vec<SystemOutcome>,
    pub measurements: Vec<Measurement>,
    /// The inventory's hosts of a run across hosts (`--hosts`), as found;
    /// empty for a run in namespaces, where `machine` says it all.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub hosts: Vec<HostFacts>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpus: usize,
    pub kernel: String,
    pub cpu_model: String,
}

/// One host of a run across hosts, as the lab found it there.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct HostFacts {
    /// The inventory's name and role (`left`, `right`, `router`).
    pub name: String,
    pub role: String,
    pub underlay: String,
    pub kernel: String,
    pub cpu_model: String,
    pub cores: usize,
    /// The interface holding the underlay address, its driver, speed
    /// (`None` where the driver reports none) and MTU.
    pub nic: String,
    pub nic_driver: String,
    pub nic_speed_mbps: Option<u64>,
    pub mtu: Option<u32>,
    /// Version of each system there, by system name.
    pub systems: BTreeMap<String, String>,
    /// Connecting, checking and bringing the lab's binary, in seconds.
    pub setup_secs: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SystemStatus {
    Ran,
    /// Not installed; `reason` says how to install it.
    Skipped,
    /// Could not be brought up; `reason` says why.
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SystemOutcome {
    pub name: String,
    pub status: SystemStatus,
    pub reason: Option<String>,
    /// Version string of the implementation, when it reports one.
    pub version: Option<String>,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MeasurementStatus {
    Ok,
    /// The trial hit its time limit; `median` is the limit (a lower bound).
    TimedOut,
    Failed,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// `throughput`, `latency`, `loss`, `bdp`, `quick`.
    pub suite: String,
    /// What was measured, e.g. `rfc2544_throughput`, `tcp_bulk`, `rtt`,
    /// `imix`, `transfer_time`, `overload_receive_rate`.
    pub test: String,
    pub system: String,
    /// Parameters that distinguish rows: frame size, direction, drop rate,
    /// streams, payload size, percentile… Values are strings or numbers.
    pub params: BTreeMap<String, serde_json::Value>,
    /// e.g. `bit/s`, `frames/s`, `ms`, `s`, `percent`.
    pub unit: String,
    pub samples: Vec<f64>,
    pub median: f64,
    /// `median / bare's median` for the same suite, test and params, when
    /// bare ran; for times (lower is better) still median over bare's.
    pub ratio_to_bare: Option<f64>,
    pub status: MeasurementStatus,
    /// Supporting figures: theoretical maximum, CPU seconds, verified
    /// checksum, lost packets…
    pub extra: Extra,
    pub note: Option<String>,
}

/// How a failed row's note begins when the system cannot take the
/// measurement at all (an MTU its driver cannot set), rather than failed at it.
pub const UNSUPPORTED_PREFIX: &str = "unsupported:";

impl Measurement {
    /// What a table cell says of a failed row: `unsupported` when the
    /// system cannot take the measurement, `failed` otherwise.
    pub fn failure_word(&self) -> &'static str {
        let unsupported = self
            .note
            .as_deref()
            .is_some_and(|note| note.starts_with(UNSUPPORTED_PREFIX));
        if unsupported { "unsupported" } else { "failed" }
    }

    /// Adds `note` after any the row has.
    pub fn add_note(&mut self, note: impl Into<String>) {
        let note = note.into();
        self.note = Some(match self.note.take() {
            Some(earlier) => format!("{earlier}; {note}"),
            None => note,
        });
    }

    /// The value of parameter `key` as text (numbers printed plainly).
    pub fn param(&self, key: &str) -> Option<String> {
        self.params.get(key).map(|value| match value {
            serde_json::Value::String(text) => text.clone(),
            other => other.to_string(),
        })
    }

    /// True when this and `other` measure the same thing (maybe on
    /// different systems).
    pub fn same_test(&self, other: &Measurement) -> bool {
        self.suite == other.suite && self.test == other.test && self.params == other.params
    }
}

fn one_round() -> u32 {
    1
}

fn is_one_round(rounds: &u32) -> bool {
    *rounds == 1
}

/// Median of `samples` (mean of the middle two for even counts); 0 if empty.
pub fn median(samples: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
    if sorted.is_empty() {
        return 0.0;
    }
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

impl RunRecord {
    /// Fills `ratio_to_bare` of every measurement from bare's rows.
    pub fn compute_ratios(&mut self) {
        let bare: Vec<Measurement> = self
            .measurements
            .iter()
            .filter(|m| m.system == "bare" && m.status == MeasurementStatus::Ok)
            .cloned()
            .collect();
        for measurement in &mut self.measurements {
            measurement.ratio_to_bare = bare
                .iter()
                .find(|b| b.same_test(measurement))
                .filter(|b| b.median != 0.0)
                .map(|b| measurement.median / b.median);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(system: &str, median_value: f64) -> Measurement {
        Measurement {
            suite: "quick".into(),
            test: "tcp_bulk".into(),
            system: system.into(),
            params: BTreeMap::from([("streams".into(), serde_json::json!(1))]),
            unit: "bit/s".into(),
            samples: vec![median_value],
            median: median_value,
            ratio_to_bare: None,
            status: MeasurementStatus::Ok,
            extra: Extra::default(),
            note: None,
        }
    }

    /// A row the system could not take says so in the tables; any other
    /// failure says failed.
    #[test]
    fn unsupported_rows_are_not_called_failed() {
        let mut unsupported = row("ssh", 0.0);
        unsupported.status = MeasurementStatus::Failed;
        unsupported.add_note(format!(
            "{UNSUPPORTED_PREFIX} the driver cannot set the MTU"
        ));
        assert_eq!(unsupported.failure_word(), "unsupported");
        let mut failed = row("fjord", 0.0);
        failed.status = MeasurementStatus::Failed;
        assert_eq!(failed.failure_word(), "failed");
        failed.add_note("receiver exited early; unsupported: no");
        assert_eq!(failed.failure_word(), "failed");
    }

    /// A run as schema 1's one `Extra` struct wrote it (the report
    /// fixture plus rows of every suite, rewritten by `fjord lab report`
    /// before the records were split) reads and writes back byte for
    /// byte: every key, in its place.
    #[test]
    fn a_stored_run_writes_back_byte_identical() {
        let stored = include_str!("../tests/data/results/schema1_results.json");
        let record: RunRecord = serde_json::from_str(stored).unwrap();
        let written = serde_json::to_string_pretty(&record).unwrap() + "\n";
        assert!(written == stored, "results.json changed on the way back");
        let keys = |text: &str| -> Vec<String> {
            text.lines()
                .filter_map(|line| line.trim_start().strip_prefix('"'))
                .filter_map(|rest| rest.split_once("\":").map(|(key, _)| key.to_string()))
                .collect()
        };
        assert_eq!(keys(&written), keys(stored));
        assert!(keys(stored).iter().any(|key| key == "trials"));
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
    }

    #[test]
    fn ratios_use_bare_of_the_same_test() {
        let mut record = RunRecord {
            schema_version: SCHEMA_VERSION,
            fjord_version: "test".into(),
            started_at: "2026-11-22T00:00:00Z".into(),
            duration_secs: 1.0,
            rounds: 1,
            machine: Machine {
                cpus: 2,
                kernel: "6".into(),
                cpu_model: "x".into(),
            },
            suites: vec!["quick".into()],
            systems: vec![],
            measurements: vec![row("bare", 10.0), row("fjord", 4.0)],
            hosts: Vec::new(),
        };
        record.compute_ratios();
        assert_eq!(record.measurements[1].ratio_to_bare, Some(0.4));
        assert_eq!(record.measurements[0].ratio_to_bare, Some(1.0));
        let text = serde_json::to_string(&record).unwrap();
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
    }
}
