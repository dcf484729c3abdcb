//! Building [`Measurement`] rows, and charging a test's CPU time to the
//! tunnel processes that did the work.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::results::{Extra, Measurement, MeasurementStatus, median};
use crate::systems::{RunningSystem, cpu_time, resident_bytes};

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
    extra.cpu_seconds = Some(cpu);
    if bits > 0.0 {
        extra.cpu_seconds_per_gbit = Some(cpu / (bits / 1e9));
    }
    if let Some(rss) = charges.iter().map(|c| c.resident_bytes).max() {
        extra.rss_bytes = Some(rss);
    }
}
