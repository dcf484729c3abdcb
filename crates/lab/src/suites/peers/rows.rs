//! The `peers` suite's rows, made from its typed outcomes once every peer
//! count ran, so each figure can carry its ratio to the same system's
//! one-peer figure:
//!
//! | test | params | unit | figure |
//! |---|---|---|---|
//! | `peers_zero_loss` | peers, frame_size | frames/s | RFC 2544 zero-loss rate; `one_peer_ratio`, `emulator_ceiling_fps`, `peers_carrying`, CPU |
//! | `peers_memory` | peers | bytes | the responder's resident size; `per_peer_bytes`, `alone_rss_bytes` (one peer) |
//! | `peers_tcp` | peers, flows | bit/s | verified transfers through 1 peer and through all; `one_peer_ratio` (median of the pairs'), CPU per Gbit of the responder and of the emulator |
//!
//! A count whose work ended in a failure after some rows were measured
//! (the emulator's control thread stopped, tunnel mode would not end)
//! notes it on those rows.

use super::tcp::{TcpPair, TcpSample};
use super::{CountOutcome, FRAME_SIZES, FrameRate, TCP_FLOWS, TCP_PEERS};
use crate::measure::{Row, add_cpu, transfers_row, verified};
use crate::results::{Cost, Extra, Measurement, MeasurementStatus, Mesh, Peers, median};
use crate::traffic::udp_measurements::throughput_measurement;

const SUITE: &str = "peers";

fn zero_loss_row(system: &str, peers: usize, frame_size: usize) -> Row {
    Row::new(SUITE, "peers_zero_loss", system, "frames/s")
        .param("peers", peers)
        .param("frame_size", frame_size)
}

fn memory_row(system: &str, peers: usize) -> Row {
    Row::new(SUITE, "peers_memory", system, "bytes").param("peers", peers)
}

fn tcp_row(system: &str, peers: usize) -> Row {
    Row::new(SUITE, "peers_tcp", system, "bit/s")
        .param("peers", peers)
        .param("flows", TCP_FLOWS)
}

/// `value` over `reference`, when both exist and the reference is not 0.
fn ratio(value: Option<f64>, reference: Option<f64>) -> Option<f64> {
    value
        .zip(reference)
        .filter(|(_, reference)| *reference > 0.0)
        .map(|(value, reference)| value / reference)
}

/// The zero-loss rate a search found.
fn rate(frame_rate: &FrameRate) -> Option<f64> {
    frame_rate.search.as_ref().ok()?.frames_per_sec
}

/// Each pair's throughput spread over all peers over that through one,
/// where both arrived intact.
fn pair_ratios(pairs: &[TcpPair]) -> Vec<f64> {
    pairs
        .iter()
        .filter_map(|pair| {
            let one = verified(&pair.one.transfer)?.throughput_bits_per_sec;
            let spread = verified(&pair.spread.transfer)?.throughput_bits_per_sec;
            (one > 0.0).then(|| spread / one)
        })
        .collect()
}

/// CPU seconds per Gbit over the transfers that arrived intact, of the
/// responder and of the emulator.
fn tcp_cpu_per_gbit<'a>(samples: impl Iterator<Item = &'a TcpSample>) -> Option<(f64, f64)> {
    let intact = samples.filter_map(|sample| Some((verified(&sample.transfer)?, sample)));
    let (gbit, responder, emulator) = intact.fold(
        (0.0, 0.0, 0.0),
        |(gbit, responder, emulator), (report, sample)| {
            (
                gbit + report.bytes as f64 * 8.0 / 1e9,
                responder + sample.responder_cpu.as_secs_f64(),
                emulator + sample.emulator_cpu.as_secs_f64(),
            )
        },
    );
    (gbit > 0.0).then(|| (responder / gbit, emulator / gbit))
}

/// Every row of the suite for `system`.
pub(super) fn rows(system: &str, outcomes: &[CountOutcome]) -> Vec<Measurement> {
    let one = outcomes.iter().find(|outcome| outcome.peers == 1);
    let mut rows = Vec::new();
    for outcome in outcomes {
        let first_row = rows.len();
        let failed = |row: Row| {
            row.failed(
                outcome
                    .failure
                    .clone()
                    .unwrap_or_else(|| "not measured".to_string()),
            )
        };
        for frame_size in FRAME_SIZES {
            let row = zero_loss_row(system, outcome.peers, frame_size);
            let found = outcome
                .frame_rates
                .iter()
                .find(|frame_rate| frame_rate.frame_size == frame_size);
            let reference = one
                .and_then(|one| {
                    one.frame_rates
                        .iter()
                        .find(|frame_rate| frame_rate.frame_size == frame_size)
                })
                .and_then(rate);
            rows.push(match found {
                Some(frame_rate) => zero_loss(row, frame_rate, reference),
                None => failed(row),
            });
        }
        let alone = one.and_then(|one| one.resident_bytes);
        rows.push(match outcome.resident_bytes {
            Some(bytes) => {
                let per_peer = alone
                    .filter(|_| outcome.peers > 1)
                    .map(|alone| (bytes as f64 - alone as f64) / (outcome.peers - 1) as f64);
                let extra = Extra {
                    mesh: alone.map(|alone| Mesh {
                        alone_rss_bytes: Some(alone),
                        ..Mesh::default()
                    }),
                    peers: per_peer.map(|per_peer| Peers {
                        per_peer_bytes: Some(per_peer),
                        ..Peers::default()
                    }),
                    ..Extra::default()
                };
                memory_row(system, outcome.peers).measured(
                    vec![bytes as f64],
                    MeasurementStatus::Ok,
                    extra,
                )
            }
            None => failed(memory_row(system, outcome.peers)),
        });
        if outcome.peers == TCP_PEERS {
            match &outcome.tcp {
                Some(pairs) => rows.extend(tcp_rows(system, pairs)),
                None => {
                    rows.push(failed(tcp_row(system, 1)));
                    rows.push(failed(tcp_row(system, TCP_PEERS)));
                }
            }
        }
        if let Some(why) = &outcome.failure {
            for row in &mut rows[first_row..] {
                if row.status == MeasurementStatus::Ok && row.note.is_none() {
                    row.note = Some(format!("afterwards: {why}"));
                }
            }
        }
    }
    rows
}

/// The TCP rows: through one peer, and spread over all with the median
/// of the pairs' ratios.
fn tcp_rows(system: &str, pairs: &[TcpPair]) -> [Measurement; 2] {
    let half = |samples: &dyn Fn(&TcpPair) -> &TcpSample, peers: usize, one_peer_ratio| {
        let cpu = tcp_cpu_per_gbit(pairs.iter().map(samples));
        let extra = Extra {
            cost: cpu.map(|(responder, _)| Cost {
                cpu_seconds_per_gbit: Some(responder),
                ..Cost::default()
            }),
            peers: Some(Peers {
                one_peer_ratio,
                emulator_cpu_seconds_per_gbit: cpu.map(|(_, emulator)| emulator),
                ..Peers::default()
            })
            .filter(|peers| *peers != Peers::default()),
            ..Extra::default()
        };
        let transfers = pairs.iter().map(|pair| &samples(pair).transfer);
        transfers_row(tcp_row(system, peers), transfers, extra)
    };
    let ratios = pair_ratios(pairs);
    [
        half(&|pair| &pair.one, 1, None),
        half(
            &|pair| &pair.spread,
            TCP_PEERS,
            (!ratios.is_empty()).then(|| median(&ratios)),
        ),
    ]
}

/// The row of one search: the throughput suite's figures, under this
/// suite's name and parameters, with the ceiling, the ratio to one peer,
/// the peers that carried frames and the responder's CPU time.
fn zero_loss(row: Row, frame_rate: &FrameRate, one_peer_rate: Option<f64>) -> Measurement {
    let result = match &frame_rate.search {
        Ok(result) => result,
        Err(why) => return row.failed(why.clone()),
    };
    let mut measurement = throughput_measurement(&row.system, "", std::slice::from_ref(result));
    measurement.suite = row.suite.to_string();
    measurement.test = row.test.to_string();
    measurement.params = row.params;
    let extra = &mut measurement.extra;
    let peers = Peers {
        one_peer_ratio: ratio(result.frames_per_sec, one_peer_rate),
        emulator_ceiling_fps: frame_rate.ceiling.as_ref().ok().copied(),
        peers_carrying: frame_rate.carrying.map(|peers| peers as u64),
        ..Peers::default()
    };
    extra.peers = Some(peers).filter(|peers| *peers != Peers::default());
    // CPU over the whole search per bit received in its trials, as the
    // throughput suite counts it.
    let received: u64 = result.trials.iter().map(|trial| trial.received).sum();
    let bits = received as f64 * frame_rate.frame_size as f64 * 8.0;
    add_cpu(extra, std::slice::from_ref(&frame_rate.charge), bits, true);
    if let Err(why) = &frame_rate.ceiling {
        measurement.add_note(format!("the emulator's ceiling was not measured: {why}"));
    }
    measurement
}

/// One progress line for a search.
pub(super) fn frame_rate_summary(frame_rate: &FrameRate) -> String {
    let mut text = format!("{}-byte frames: ", frame_rate.frame_size);
    match (&frame_rate.search, rate(frame_rate)) {
        (Ok(_), Some(rate)) => text.push_str(&format!("{rate:.0} frames/s without loss")),
        (Ok(_), None) => text.push_str("not even the lowest rate passed"),
        (Err(why), _) => text.push_str(&format!("search failed: {why}")),
    }
    match &frame_rate.ceiling {
        Ok(ceiling) => text.push_str(&format!(" (emulator alone {ceiling:.0})")),
        Err(why) => text.push_str(&format!(" (emulator alone: {why})")),
    }
    if let Some(carrying) = frame_rate.carrying {
        text.push_str(&format!(", {carrying} peers' sessions carried data"));
    }
    text
}

/// One progress line for the TCP pairs.
pub(super) fn tcp_summary(pairs: &[TcpPair]) -> String {
    let gbit = |sample: &TcpSample| match verified(&sample.transfer) {
        Some(report) => format!("{:.3}", report.throughput_bits_per_sec / 1e9),
        None => "failed".to_string(),
    };
    let shown: Vec<String> = pairs
        .iter()
        .map(|pair| format!("{} → {}", gbit(&pair.one), gbit(&pair.spread)))
        .collect();
    let mut text = format!(
        "TCP over {TCP_FLOWS} flows, Gbit/s through one peer → through {TCP_PEERS}: {}",
        shown.join(", ")
    );
    let ratios = pair_ratios(pairs);
    if !ratios.is_empty() {
        text.push_str(&format!(" (median ratio {:.2})", median(&ratios)));
    }
    let samples = || pairs.iter().flat_map(|pair| [&pair.one, &pair.spread]);
    if let Some((responder, emulator)) = tcp_cpu_per_gbit(samples()) {
        text.push_str(&format!(
            ", CPU per Gbit: responder {responder:.2} s, emulator {emulator:.2} s"
        ));
    }
    if let Some(why) = samples().find_map(|sample| sample.transfer.as_ref().err()) {
        text.push_str(&format!("; failed: {why}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::measure::CpuCharge;
    use crate::traffic::BulkReport;
    use crate::traffic::frame::FrameSizes;
    use crate::traffic::rfc2544::ThroughputResult;

    fn search(frames_per_sec: f64) -> ThroughputResult {
        ThroughputResult {
            frames: FrameSizes::fixed(64),
            frames_per_sec: Some(frames_per_sec),
            frame_bits_per_sec: Some(frames_per_sec * 512.0),
            theoretical_max_frames_per_sec: 14_880_952.0,
            link_bits_per_sec: 10e9,
            loss_tolerance: 0.0,
            trial_duration: Duration::from_secs(1),
            upper_bound_frames_per_sec: frames_per_sec * 1.1,
            probe_frames_per_sec: None,
            generator_limited: false,
            trials: Vec::new(),
        }
    }

    fn outcome(
        peers: usize,
        fps: f64,
        resident: u64,
        tcp_bits: Option<Vec<(f64, f64)>>,
    ) -> CountOutcome {
        let frame_rates = FRAME_SIZES
            .iter()
            .map(|&frame_size| FrameRate {
                frame_size,
                search: Ok(search(fps)),
                ceiling: Ok(4.0 * fps),
                charge: CpuCharge {
                    cpu: Duration::from_secs(1),
                    resident_bytes: resident,
                },
                carrying: Some(peers),
            })
            .collect();
        let sample = |bits: f64| TcpSample {
            transfer: Ok(BulkReport {
                bytes: 125_000_000,
                elapsed: Duration::from_millis(10),
                sender_digest: crate::traffic::ContentDigest(7),
                receiver_digest: crate::traffic::ContentDigest(7),
                verified: true,
                throughput_bits_per_sec: bits,
                streams: Vec::new(),
            }),
            responder_cpu: Duration::from_millis(500),
            emulator_cpu: Duration::from_millis(250),
        };
        let tcp = tcp_bits.map(|pairs: Vec<(f64, f64)>| {
            pairs
                .into_iter()
                .map(|(one, spread)| TcpPair {
                    one: sample(one),
                    spread: sample(spread),
                })
                .collect()
        });
        CountOutcome {
            peers,
            failure: None,
            frame_rates,
            resident_bytes: Some(resident),
            tcp,
        }
    }

    fn find<'a>(rows: &'a [Measurement], test: &str, peers: usize) -> &'a Measurement {
        rows.iter()
            .find(|m| m.test == test && m.params["peers"] == json!(peers))
            .unwrap_or_else(|| panic!("no {test} row for {peers} peers"))
    }

    #[test]
    fn figures_carry_their_ratio_to_one_peer_and_memory_per_peer() {
        let outcomes = [
            outcome(1, 100_000.0, 10 << 20, None),
            outcome(10, 95_000.0, (10 << 20) + 9 * 4096, None),
            outcome(
                100,
                90_000.0,
                (10 << 20) + 99 * 4096,
                Some(vec![(2e9, 1.5e9), (1e9, 0.9e9), (2e9, 1e9)]),
            ),
        ];
        let rows = rows("fjord", &outcomes);
        // Two frame sizes and memory per count, TCP through 1 and 100.
        assert_eq!(rows.len(), 3 * 3 + 2);
        let ten = find(&rows, "peers_zero_loss", 10);
        assert_eq!(ten.median, 95_000.0);
        let peers = |row: &Measurement| row.extra.peers.clone().unwrap_or_default();
        let ten_peers = peers(ten);
        assert_eq!(ten_peers.one_peer_ratio, Some(0.95));
        assert_eq!(ten_peers.emulator_ceiling_fps, Some(380_000.0));
        assert_eq!(ten_peers.peers_carrying, Some(10));
        assert!(ten.extra.cost.as_ref().unwrap().cpu_seconds.is_some());
        let memory = find(&rows, "peers_memory", 100);
        assert_eq!(peers(memory).per_peer_bytes, Some(4096.0));
        assert_eq!(
            memory.extra.mesh.as_ref().unwrap().alone_rss_bytes,
            Some(10 << 20)
        );
        assert_eq!(peers(find(&rows, "peers_memory", 1)).per_peer_bytes, None);
        let tcp = find(&rows, "peers_tcp", 100);
        // The median of the pairs' ratios (0.75, 0.9, 0.5), not of medians.
        assert_eq!(peers(tcp).one_peer_ratio, Some(0.75));
        assert_eq!(find(&rows, "peers_tcp", 1).median, 2e9);
        assert_eq!(
            tcp.extra.cost.as_ref().unwrap().cpu_seconds_per_gbit,
            Some(0.5)
        );
        assert_eq!(peers(tcp).emulator_cpu_seconds_per_gbit, Some(0.25));
        assert_eq!(tcp.params["flows"], json!(TCP_FLOWS));
    }

    #[test]
    fn a_count_that_failed_fails_its_rows_with_the_reason() {
        let mut failed = outcome(1000, 0.0, 0, None);
        failed.failure = Some("handshakes: 10 of 1000".to_string());
        failed.frame_rates.clear();
        failed.resident_bytes = None;
        let rows = rows("boringtun", &[outcome(1, 1.0, 1, None), failed]);
        let thousand: Vec<&Measurement> = rows
            .iter()
            .filter(|m| m.params["peers"] == json!(1000))
            .collect();
        assert_eq!(thousand.len(), FRAME_SIZES.len() + 1);
        for m in thousand {
            assert_eq!(m.status, MeasurementStatus::Failed);
            assert_eq!(m.note.as_deref(), Some("handshakes: 10 of 1000"));
        }
    }
}
