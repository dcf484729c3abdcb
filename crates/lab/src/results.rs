//! The lab's result record (`results.json`), versioned. Every report is
//! rendered from this record alone, so `fjord lab report DIR` can redraw
//! a run later.
//!
//! One [`Measurement`] is one figure for one system under one set of
//! parameters: its samples, their median, the unit, and the ratio of the
//! median to bare's median for the same test and parameters in the same run.

use std::collections::BTreeMap;

use fjord_proto::{DropCounters, DropReason};
use serde::{Deserialize, Serialize};

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
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    pub cpus: usize,
    pub kernel: String,
    pub cpu_model: String,
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

/// The supporting figures of a [`Measurement`], each recorded only by the
/// tests it belongs to; in `results.json` an object with the figures a row
/// has (`{"bytes": 1048576, "verified": true, …}`).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Extra {
    // TCP bulk transfers (quick, bdp, loss).
    /// Bytes moved, over all repetitions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// Every transfer arrived intact (soak: in every interval).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verified: Option<bool>,
    /// Digest of the first transfer's bytes, as the receiver computed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub xxh3_128: Option<String>,
    /// bdp: the link's goodput for one TCP stream, at best.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theoretical_goodput_bits_per_sec: Option<f64>,
    /// bdp: median over the theoretical goodput.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub efficiency: Option<f64>,
    /// loss: the time limit of one transfer; mesh: of convergence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time_limit_secs: Option<f64>,
    /// loss: the emulated one-way delay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_way_delay_ms: Option<f64>,

    // Cost of the tunnel's processes over the test.
    /// TCP retransmits; in records of earlier versions only, which reports
    /// still show.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_seconds_per_gbit: Option<f64>,
    /// Resident size of both endpoints after the test.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rss_bytes: Option<u64>,
    /// mtu: CPU time of the left (sending) host's tunnel processes over
    /// the transfers' time, in % of one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_left_percent: Option<f64>,
    /// mtu: the same of the right (receiving) host's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_right_percent: Option<f64>,

    // Round trips of ping (latency suite, `rtt`), in ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p50: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max: Option<f64>,
    /// Pings sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent: Option<u64>,
    /// Pings answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answered: Option<u64>,

    // Resident memory under load (soak).
    /// Highest resident size of the interval (growth: of the whole soak;
    /// mesh: of any node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_bytes: Option<f64>,
    /// TCP throughput carried meanwhile.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_per_sec: Option<f64>,
    /// Growth: peak of the first interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_peak_bytes: Option<f64>,
    /// Growth: peak of the last interval.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_peak_bytes: Option<f64>,

    // Soak (issue 15): transfers, restarts, counters.
    /// Transfers run, back to back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transfers: Option<u64>,
    /// Transfers that completed with other bytes than were sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest_mismatches: Option<u64>,
    /// Transfers that did not complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_transfers: Option<u64>,
    /// Restarts of one side.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub restarts: Option<u64>,
    /// Counter balance: bytes one side sent, by its own count, over the
    /// intervals checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_bytes: Option<u64>,
    /// Counter balance: bytes the other side received of them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub received_bytes: Option<u64>,
    /// Counter balance: datagrams the receiver refused or its kernel
    /// dropped, and sends that failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dropped_datagrams: Option<u64>,
    /// Counter balance: intervals between readings checked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intervals: Option<u64>,
    /// Counter balance: intervals whose difference the drops do not explain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unexplained_intervals: Option<u64>,

    // Meshes (mesh suite).
    /// Convergence: share of ordered pairs of nodes where the first listed
    /// the second as a direct member, when the row was taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pairs_percent: Option<f64>,
    /// Memory: resident size of the bootstrap node alone, before any other
    /// node started (peers: of the responder with one peer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alone_rss_bytes: Option<u64>,

    // Many peers of one responder (peers suite).
    /// The figure over the same system's with one peer, same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub one_peer_ratio: Option<f64>,
    /// Frames the peer emulator seals and sends per second of its own CPU
    /// time (the same frames for the same peers, into a sink that drops
    /// them): its ceiling on one core.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator_ceiling_fps: Option<f64>,
    /// Peers whose session carried data, by the responder's own counters.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peers_carrying: Option<u64>,
    /// CPU seconds the peer emulator spent per Gbit carried (tunnel mode).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub emulator_cpu_seconds_per_gbit: Option<f64>,
    /// Resident size per peer: (the figure − with one peer) ÷ (peers − 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub per_peer_bytes: Option<f64>,

    // Handshake floods (attack suite).
    /// Spoofed initiations per second the flood generator sent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flood_sent_per_sec: Option<f64>,
    /// The figure over the same system's without a flood, same run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub no_flood_ratio: Option<f64>,
    /// Cookie replies to spoofed sources, counted where they arrived.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cookie_replies: Option<u64>,
    /// Initiations the responder read with Diffie–Hellman work, by its
    /// own count (only implementations that keep one); soak: both sides'
    /// over the run, every handshake.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub initiations_computed: Option<u64>,
    /// Datagrams the responder's kernel dropped unread (full UDP socket).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub socket_drops: Option<u64>,
    /// What the responder refused, by reason, by its own count (fjord's
    /// `fjord show` drops; the others keep none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub drops: Option<Drops>,
    /// Seconds over which the counts above were taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<f64>,

    // UDP frame rates (RFC 2544 throughput, overload, IMIX).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub theoretical_max_fps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub link_bits_per_sec: Option<f64>,
    /// Share of frames a trial may lose and still pass.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loss_tolerance: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trial_duration_secs: Option<f64>,
    /// The rate in bits/s of Ethernet frames (median of the runs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub frame_bits_per_sec: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub average_frame_bytes: Option<f64>,
    /// The traffic generator, not the path, set the limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generator_limited: Option<bool>,
    /// Every trial of every run of the search.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trials: Option<Vec<TrialRecord>>,
    /// Overload: frames/s the sender managed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sent_fps: Option<f64>,

    // UDP latency under load and frame loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p90_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p999_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered_fps: Option<f64>,
    /// Frames offered, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offered: Option<u64>,
    /// Frames lost, over all runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lost: Option<u64>,
    /// Which clock timed the frames.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clock: Option<String>,

    // Runs of several rounds (`--rounds`, `crate::rounds`).
    /// Each round's figure, in round order, of the rounds that measured
    /// it; the row's median is theirs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub round_medians: Option<Vec<f64>>,
}

/// Drop counts by reason; in `results.json` an object from reason names
/// (`fjord show`'s) to counts, reasons never counted left out:
/// `{"invalid_mac1": 12, "cookie_required": 59870}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drops(pub DropCounters);

impl Serialize for Drops {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (reason, count) in self.0.nonzero() {
            map.serialize_entry(reason.name(), &count)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Drops {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_name = BTreeMap::<String, u64>::deserialize(deserializer)?;
        let mut counters = DropCounters::default();
        for (name, count) in by_name {
            // A reason of a later fjord this build does not know is left out.
            if let Some(reason) = DropReason::from_name(&name) {
                counters.count_many(reason, count);
            }
        }
        Ok(Self(counters))
    }
}

/// One trial of an RFC 2544 throughput search.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrialRecord {
    /// Which repetition of the search.
    pub run: usize,
    pub offered_fps: f64,
    pub sent_fps: f64,
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    pub sender_max_lag_ms: f64,
    pub passed: bool,
    pub discarded: bool,
}

/// A statistic of a latency row, as the tables and charts pick them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    P50,
    P99,
    P999,
}

impl Extra {
    /// `statistic` in ms, as ping's round trips or UDP latency under load
    /// recorded it.
    pub fn latency_ms(&self, statistic: Statistic) -> Option<f64> {
        match statistic {
            Statistic::P50 => self.p50,
            Statistic::P99 => self.p99.or(self.p99_ms),
            Statistic::P999 => self.p999.or(self.p999_ms),
        }
    }
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

    #[test]
    fn extras_keep_the_json_shape_of_schema_1() {
        let text = r#"{"bytes":1048576,"verified":true,"xxh3_128":"ab","cpu_seconds":0.5,
            "rss_bytes":4096,"p99":0.2,"lost":3,"clock":"CLOCK_MONOTONIC",
            "trials":[{"run":0,"offered_fps":10.0,"sent_fps":9.5,"offered":10,
            "received":10,"lost":0,"sender_max_lag_ms":0.1,"passed":true,"discarded":false}]}"#;
        let written: serde_json::Value = serde_json::from_str(text).unwrap();
        let extra: Extra = serde_json::from_str(text).unwrap();
        assert_eq!(extra.bytes, Some(1 << 20));
        assert_eq!(extra.latency_ms(Statistic::P99), Some(0.2));
        assert_eq!(serde_json::to_value(&extra).unwrap(), written);
        assert_eq!(serde_json::to_string(&Extra::default()).unwrap(), "{}");
    }

    #[test]
    fn drops_are_an_object_of_counted_reasons() {
        let mut counters = DropCounters::default();
        counters.count_many(DropReason::CookieRequired, 59_870);
        counters.count(DropReason::InvalidMac1);
        let extra = Extra {
            drops: Some(Drops(counters)),
            ..Extra::default()
        };
        let text = serde_json::to_string(&extra).unwrap();
        assert_eq!(
            text,
            r#"{"drops":{"invalid_mac1":1,"cookie_required":59870}}"#
        );
        let back: Extra = serde_json::from_str(&text).unwrap();
        assert_eq!(back, extra);
        let later: Extra =
            serde_json::from_str(r#"{"drops":{"invalid_mac1":2,"reason_of_the_future":5}}"#)
                .unwrap();
        let drops = later.drops.unwrap().0;
        assert_eq!(drops.get(DropReason::InvalidMac1), 2);
        assert_eq!(drops.total(), 2);
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
        };
        record.compute_ratios();
        assert_eq!(record.measurements[1].ratio_to_bare, Some(0.4));
        assert_eq!(record.measurements[0].ratio_to_bare, Some(1.0));
        let text = serde_json::to_string(&record).unwrap();
        let back: RunRecord = serde_json::from_str(&text).unwrap();
        assert_eq!(back, record);
    }
}
