//! Rows of the result record ([`Measurement`]) from the UDP procedures.
//! Each helper takes the repetitions of one figure (one per run) and makes
//! one row whose samples are the runs' values and whose median is theirs.
//!
//! | test | suite | params | unit |
//! |---|---|---|---|
//! | `rfc2544_throughput` | throughput | frame_size, direction | frames/s |
//! | `overload_receive_rate` | throughput | frame_size, direction | frames/s |
//! | `imix` | throughput | mix | frames/s |
//! | `latency_under_load` | latency | frame_size, load_percent | ms (p50) |
//! | `frame_loss_rate` | loss | frame_size, offered_percent | percent |
//!
//! `frame_size` is a number of bytes, or a mix's name for mixed sizes.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::frame::FrameSizes;
use super::latency::LatencyResult;
use super::rfc2544::{LossPoint, OverloadResult, ThroughputResult};
use crate::measure::Row;
use crate::results::{
    Extra, FrameLatency, FrameRate, Measurement, MeasurementStatus, TrialRecord, median,
};

fn frame_size_param(frames: &FrameSizes) -> Value {
    match frames.single() {
        Some(size) => json!(size),
        None => json!(frames.name()),
    }
}

fn row(
    suite: &'static str,
    test: &'static str,
    system: &str,
    params: BTreeMap<String, Value>,
    unit: &'static str,
    samples: Vec<f64>,
    extra: Extra,
) -> Measurement {
    let status = if samples.is_empty() {
        MeasurementStatus::Failed
    } else {
        MeasurementStatus::Ok
    };
    Row {
        params,
        ..Row::new(suite, test, system, unit)
    }
    .measured(samples, status, extra)
}

fn milliseconds(duration: std::time::Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

fn throughput_extra(runs: &[ThroughputResult]) -> Extra {
    let Some(first) = runs.first() else {
        return Extra::default();
    };
    let trials: Vec<TrialRecord> = runs
        .iter()
        .enumerate()
        .flat_map(|(run, result)| {
            result.trials.iter().map(move |trial| TrialRecord {
                run,
                offered_fps: trial.offered_frames_per_sec,
                sent_fps: trial.sent_frames_per_sec,
                offered: trial.offered,
                received: trial.received,
                lost: trial.lost,
                sender_max_lag_ms: milliseconds(trial.sender_max_lag),
                passed: trial.passed,
                discarded: trial.discarded,
            })
        })
        .collect();
    let bits: Vec<f64> = runs
        .iter()
        .filter_map(|run| run.frame_bits_per_sec)
        .collect();
    Extra {
        frame_rate: Some(FrameRate {
            theoretical_max_fps: Some(first.theoretical_max_frames_per_sec),
            link_bits_per_sec: Some(first.link_bits_per_sec),
            loss_tolerance: Some(first.loss_tolerance),
            trial_duration_secs: Some(first.trial_duration.as_secs_f64()),
            frame_bits_per_sec: Some(median(&bits)),
            average_frame_bytes: Some(first.frames.average_bytes()),
            generator_limited: Some(runs.iter().any(|run| run.generator_limited)),
            trials: Some(trials),
            ..FrameRate::default()
        }),
        ..Extra::default()
    }
}

/// `rfc2544_throughput`: the zero-loss rate of each run.
pub fn throughput_measurement(
    system: &str,
    direction: &str,
    runs: &[ThroughputResult],
) -> Measurement {
    let frames = runs
        .first()
        .map(|run| frame_size_param(&run.frames))
        .unwrap_or(Value::Null);
    let mut measurement = row(
        "throughput",
        "rfc2544_throughput",
        system,
        BTreeMap::from([
            ("frame_size".into(), frames),
            ("direction".into(), json!(direction)),
        ]),
        "frames/s",
        runs.iter().filter_map(|run| run.frames_per_sec).collect(),
        throughput_extra(runs),
    );
    if runs.iter().any(|run| run.generator_limited) {
        measurement.note = Some("the traffic generator, not the path, set the limit".into());
    }
    measurement
}

/// `imix`: the zero-loss rate of a mix, frames/s (bits/s in `extra`).
pub fn imix_measurement(system: &str, runs: &[ThroughputResult]) -> Measurement {
    let mix = runs
        .first()
        .map(|run| run.frames.name().to_string())
        .unwrap_or_default();
    let mut measurement = throughput_measurement(system, "", runs);
    measurement.test = "imix".into();
    measurement.params = BTreeMap::from([("mix".into(), json!(mix))]);
    measurement
}

/// `overload_receive_rate`: frames/s arriving while the sender floods.
pub fn overload_measurement(system: &str, direction: &str, runs: &[OverloadResult]) -> Measurement {
    let frames = runs
        .first()
        .map(|run| frame_size_param(&run.frames))
        .unwrap_or(Value::Null);
    let mut extra = Extra::default();
    if let Some(first) = runs.first() {
        let sent: Vec<f64> = runs.iter().map(|run| run.sent_frames_per_sec).collect();
        let bits: Vec<f64> = runs
            .iter()
            .map(|run| run.received_frame_bits_per_sec)
            .collect();
        let lost: u64 = runs.iter().map(|run| run.trial.lost()).sum();
        extra = Extra {
            frame_rate: Some(FrameRate {
                theoretical_max_fps: Some(first.theoretical_max_frames_per_sec),
                link_bits_per_sec: Some(first.link_bits_per_sec),
                sent_fps: Some(median(&sent)),
                frame_bits_per_sec: Some(median(&bits)),
                ..FrameRate::default()
            }),
            frame_latency: Some(FrameLatency {
                lost: Some(lost),
                ..FrameLatency::default()
            }),
            ..Extra::default()
        };
    }
    row(
        "throughput",
        "overload_receive_rate",
        system,
        BTreeMap::from([
            ("frame_size".into(), frames),
            ("direction".into(), json!(direction)),
        ]),
        "frames/s",
        runs.iter().map(|run| run.received_frames_per_sec).collect(),
        extra,
    )
}

/// `latency_under_load`: median p50 in ms; the other statistics of the
/// runs (medians) in `extra`.
pub fn latency_measurement(system: &str, runs: &[LatencyResult]) -> Measurement {
    let (frames, load) = runs
        .first()
        .map(|run| (frame_size_param(&run.frames), json!(run.load_percent)))
        .unwrap_or((Value::Null, Value::Null));
    let of = |pick: fn(&LatencyResult) -> f64| median(&runs.iter().map(pick).collect::<Vec<_>>());
    let extra = Extra {
        frame_latency: Some(FrameLatency {
            min_ms: Some(of(|run| milliseconds(run.summary.min))),
            mean_ms: Some(of(|run| milliseconds(run.summary.mean))),
            p90_ms: Some(of(|run| milliseconds(run.summary.p90))),
            p99_ms: Some(of(|run| milliseconds(run.summary.p99))),
            p999_ms: Some(of(|run| milliseconds(run.summary.p999))),
            max_ms: Some(of(|run| milliseconds(run.summary.max))),
            offered_fps: Some(of(|run| run.offered_frames_per_sec)),
            lost: Some(runs.iter().map(|run| run.lost).sum()),
            clock: Some("CLOCK_MONOTONIC, sender and receiver on one host".into()),
            ..FrameLatency::default()
        }),
        ..Extra::default()
    };
    row(
        "latency",
        "latency_under_load",
        system,
        BTreeMap::from([("frame_size".into(), frames), ("load_percent".into(), load)]),
        "ms",
        runs.iter()
            .map(|run| milliseconds(run.summary.p50))
            .collect(),
        extra,
    )
}

/// `frame_loss_rate`: one row per offered load, loss in percent.
/// `runs[i]` is one §26.3 sweep; rows gather the same load across sweeps.
pub fn frame_loss_measurements(
    system: &str,
    frames: &FrameSizes,
    runs: &[Vec<LossPoint>],
) -> Vec<Measurement> {
    let mut loads: Vec<f64> = runs
        .iter()
        .flat_map(|points| points.iter().map(|point| point.offered_percent))
        .collect();
    loads.sort_by(|a, b| b.total_cmp(a));
    loads.dedup();
    loads
        .into_iter()
        .map(|load| {
            let points: Vec<&LossPoint> = runs
                .iter()
                .flat_map(|points| {
                    points
                        .iter()
                        .filter(move |point| point.offered_percent == load)
                })
                .collect();
            let extra = Extra {
                frame_latency: Some(FrameLatency {
                    offered_fps: Some(
                        points
                            .first()
                            .map_or(0.0, |point| point.offered_frames_per_sec),
                    ),
                    offered: Some(points.iter().map(|point| point.offered).sum()),
                    lost: Some(points.iter().map(|point| point.lost).sum()),
                    ..FrameLatency::default()
                }),
                ..Extra::default()
            };
            row(
                "loss",
                "frame_loss_rate",
                system,
                BTreeMap::from([
                    ("frame_size".into(), frame_size_param(frames)),
                    ("offered_percent".into(), json!(load)),
                ]),
                "percent",
                points.iter().map(|point| point.loss_percent).collect(),
                extra,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::traffic::rfc2544::TrialOutcome;

    fn search(rate: Option<f64>) -> ThroughputResult {
        ThroughputResult {
            frames: FrameSizes::fixed(64),
            frames_per_sec: rate,
            frame_bits_per_sec: rate.map(|r| r * 512.0),
            theoretical_max_frames_per_sec: 14_880_952.0,
            link_bits_per_sec: 10e9,
            loss_tolerance: 0.0,
            trial_duration: Duration::from_secs(2),
            upper_bound_frames_per_sec: 1e6,
            probe_frames_per_sec: None,
            generator_limited: false,
            trials: vec![TrialOutcome {
                offered_frames_per_sec: 1e6,
                sent_frames_per_sec: 1e6,
                offered: 2_000_000,
                received: 2_000_000,
                lost: 0,
                offered_in_full: true,
                receiver_drops: 0,
                sender_max_lag: Duration::ZERO,
                passed: true,
                discarded: false,
            }],
        }
    }

    #[test]
    fn throughput_rows_carry_the_agreed_names() {
        let row = throughput_measurement(
            "bare",
            "left_to_right",
            &[search(Some(1e6)), search(Some(3e6))],
        );
        assert_eq!(
            (row.suite.as_str(), row.test.as_str()),
            ("throughput", "rfc2544_throughput")
        );
        assert_eq!(row.param("frame_size").as_deref(), Some("64"));
        assert_eq!(row.param("direction").as_deref(), Some("left_to_right"));
        assert_eq!(row.unit, "frames/s");
        assert_eq!(row.median, 2e6);
        assert_eq!(row.status, MeasurementStatus::Ok);
        // The names results.json carries.
        let extra = serde_json::to_value(&row.extra).unwrap();
        for key in [
            "theoretical_max_fps",
            "link_bits_per_sec",
            "loss_tolerance",
            "trials",
        ] {
            assert!(extra.get(key).is_some(), "{key}: {extra}");
        }
        assert_eq!(extra["trials"].as_array().unwrap().len(), 2);

        let failed = throughput_measurement("x", "left_to_right", &[search(None)]);
        assert_eq!(failed.status, MeasurementStatus::Failed);

        let mut mix = search(Some(5.0));
        mix.frames = FrameSizes::pattern("simple", vec![64, 570]);
        let imix = imix_measurement("bare", &[mix]);
        assert_eq!(imix.test, "imix");
        assert_eq!(imix.param("mix").as_deref(), Some("simple"));
    }

    #[test]
    fn loss_rows_one_per_load() {
        let point = |percent: f64, lost: u64| LossPoint {
            offered_percent: percent,
            offered_frames_per_sec: percent * 10.0,
            sent_frames_per_sec: percent * 10.0,
            offered: 1000,
            received: 1000 - lost,
            lost,
            loss_percent: lost as f64 / 10.0,
        };
        let rows = frame_loss_measurements(
            "bare",
            &FrameSizes::fixed(1518),
            &[vec![point(100.0, 50), point(90.0, 0), point(80.0, 0)]],
        );
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].param("offered_percent").as_deref(), Some("100.0"));
        assert_eq!(rows[0].median, 5.0);
        assert_eq!(rows[0].unit, "percent");
        assert_eq!(rows[2].median, 0.0);
    }
}
