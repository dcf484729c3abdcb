//! `attack`: a handshake flood against the responder of an established
//! tunnel, for each WireGuard implementation (both sides run the same
//! one; other systems speak no WireGuard and are skipped).
//!
//! On [`AttackedHosts`] (the two hosts, and an attacker on its own link to
//! the right host) the tunnel comes up, the left side initiating. First,
//! with no flood, the left side restarts once (the reference for 3.).
//! Then for each flood in [`FLOODS`] ([`PACED_RATE`] spoofed initiations
//! a second, the rate issue 15 was tried at, and as fast as the generator
//! goes), each measured [`FLOOD_SETTLE`] after the flood started, so the
//! responder has seen the load:
//!
//! 1. **Throughput** (`flood_throughput`, bit/s): [`samples`] pairs of
//!    digest-checked TCP transfers left → right through the tunnel, one
//!    without the flood and one with it, back to back. The figure that
//!    matters is the median of each pair's ratio (`no_flood_ratio`; goal
//!    ≥ 0.9): pairs cancel most of what other work on a shared machine
//!    does to one transfer. The `none` row is every transfer without.
//! 2. **Handshake work** (`flood_handshakes`, replies/s): over the flooded
//!    transfers, the cookie replies that reached the attacker's namespace
//!    per second (what any implementation can be seen to do); beside them
//!    the initiations the responder read with Diffie–Hellman work by its
//!    own count (fjord; the others do not report it: n/a), what it
//!    refused by reason by its own count (fjord's `fjord show` drops), the
//!    datagrams its kernel dropped unread at a full socket, and its CPU time.
//! 3. **Restart** (`restart_recovery`, s): under the flood, the left side
//!    (the initiator) is stopped and started again with the same keys;
//!    the time from starting it (its daemon's start and configuration
//!    included) to the first UDP echo through the tunnel (probes every
//!    10 ms from when its interface is up). Goal for fjord: under 2 s. A
//!    plain WireGuard initiator answers a cookie reply at its next retry,
//!    5 s later, by design.
//!
//! The generator takes most of a core when unpaced: on a 2-core machine
//! that flood measures the machine as much as the tunnel. So `bare` runs
//! the same floods (floor.rs) against a socket nobody reads while a bare
//! transfer runs: its `no_flood_ratio` is what the machine itself keeps,
//! the ceiling for any tunnel's under the same flood.

mod floor;
mod tunnel;

use std::time::Duration;

use super::{Setup, Suite};
use crate::attack::{AttackedHosts, FloodRate};
use crate::measure::{Row, transfers_row, verified};
use crate::results::{Bulk, Cost, Drops, Extra, Flood, Measurement, MeasurementStatus, median};
use crate::systems::System;
use crate::traffic::BulkReport;
use floor::Floor;
pub use tunnel::{FLOOD_SETTLE, RESTART_LIMIT};
use tunnel::{FloodedTransfer, HandshakeWork, Tunnel};

/// The paced flood's rate: the one issue 15 was tried at.
pub const PACED_RATE: u32 = 20_000;
/// The floods, after the reference without one.
pub const FLOODS: [FloodRate; 2] = [FloodRate::PerSecond(PACED_RATE), FloodRate::Unpaced];

/// Pairs of transfers (without, with the flood) per flood.
pub fn samples(quick: bool) -> usize {
    if quick { 1 } else { 3 }
}

/// The bare link's transfers are this many times the tunnels'.
const FLOOR_BYTES_FACTOR: u64 = 4;

fn transfer_bytes(quick: bool) -> u64 {
    if quick { 64 << 20 } else { 256 << 20 }
}

/// Progress steps per system: the reference restart, then one per flood.
pub fn steps(_quick: bool) -> u64 {
    1 + FLOODS.len() as u64
}

/// The `flood` parameter of a row.
fn flood_label(flood: Option<FloodRate>) -> String {
    flood.map_or_else(|| "none".to_string(), |rate| rate.to_string())
}

fn row(test: &'static str, system: &str, unit: &'static str, flood: Option<FloodRate>) -> Row {
    Row::new("attack", test, system, unit).param("flood", flood_label(flood))
}

/// What one flood gave.
struct FloodOutcome {
    rate: FloodRate,
    /// Per pair: the transfer without the flood, then the one with it.
    pairs: Vec<(Result<BulkReport, String>, FloodedTransfer)>,
    /// `None` for the bare link: no tunnel to restart.
    recovery: Option<Result<Option<Duration>, String>>,
}

/// Runs the suite for `system` on hosts it builds itself.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let name = setup.name();
    if name == crate::systems::Bare.name() {
        return run_floor(setup, quick);
    }
    let Some(implementation) = setup.wireguard_or_skip(Suite::Attack, quick) else {
        return Vec::new();
    };
    let failed_all = |why: String| {
        setup.give_up(&format!("attack: {why}"), steps(quick));
        std::iter::once(None)
            .chain(FLOODS.map(Some))
            .flat_map(|flood| {
                [
                    row("flood_throughput", name, "bit/s", flood).failed(why.clone()),
                    row("restart_recovery", name, "s", flood).failed(why.clone()),
                ]
            })
            .collect()
    };
    let hosts = match AttackedHosts::build() {
        Ok(hosts) => hosts,
        Err(error) => return failed_all(format!("building the hosts: {error}")),
    };
    let mut tunnel = match Tunnel::start(implementation, &hosts, setup.workdir) {
        Ok(tunnel) => tunnel,
        Err(why) => return failed_all(why),
    };

    setup.step("attack: no flood: restart");
    let reference = tunnel.restart_left(None);
    setup.say(&format!("attack: no flood: {}", recovery_text(&reference)));
    let mut rows = vec![recovery_row(name, None, &reference, None)];
    setup.done();

    let mut outcomes = Vec::new();
    for rate in FLOODS {
        if setup.stopping() {
            break;
        }
        setup.step(&format!(
            "attack: flood {rate}: {} transfers with and without it, a restart",
            samples(quick)
        ));
        let outcome = measure_flood(&mut tunnel, rate, quick);
        setup.say(&format!("attack: {}", outcome.summary()));
        rows.push(outcome.throughput_row(name));
        rows.push(outcome.handshakes_row(name));
        if let Some(recovery) = &outcome.recovery {
            rows.push(recovery_row(
                name,
                Some(rate),
                recovery,
                outcome.sent_per_sec(),
            ));
        }
        outcomes.push(outcome);
        setup.done();
    }
    rows.insert(0, unflooded_row(name, &outcomes));
    rows
}

/// The bare link under the same floods (floor.rs): throughput rows only.
fn run_floor(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let name = setup.name();
    // No tunnel, so no reference restart.
    setup.skip(1);
    let failed = |why: String| {
        setup.give_up(&format!("attack: {why}"), FLOODS.len() as u64);
        vec![row("flood_throughput", name, "bit/s", None).failed(why)]
    };
    let hosts = match AttackedHosts::build() {
        Ok(hosts) => hosts,
        Err(error) => return failed(format!("building the hosts: {error}")),
    };
    let mut floor = match Floor::start(&hosts) {
        Ok(floor) => floor,
        Err(why) => return failed(why),
    };
    // The bare link moves data several times faster than any tunnel: with
    // the tunnels' size its transfer would end before the flood's cost
    // showed.
    let bytes = FLOOR_BYTES_FACTOR * transfer_bytes(quick);
    let mut rows = Vec::new();
    let mut outcomes = Vec::new();
    for rate in FLOODS {
        if setup.stopping() {
            break;
        }
        setup.step(&format!(
            "attack: flood {rate}: {} transfers with and without it",
            samples(quick)
        ));
        let pairs = (0..samples(quick))
            .map(|_| (floor.transfer(bytes), floor.flooded_transfer(rate, bytes)))
            .collect();
        let outcome = FloodOutcome {
            rate,
            pairs,
            recovery: None,
        };
        setup.say(&format!("attack: {}", outcome.summary()));
        rows.push(outcome.throughput_row(name));
        outcomes.push(outcome);
        setup.done();
    }
    rows.insert(0, unflooded_row(name, &outcomes));
    rows
}

fn measure_flood(tunnel: &mut Tunnel<'_>, rate: FloodRate, quick: bool) -> FloodOutcome {
    let bytes = transfer_bytes(quick);
    let pairs = (0..samples(quick))
        .map(|_| {
            if let Err(why) = tunnel.check_up() {
                return (Err(why.clone()), FloodedTransfer::failed(why));
            }
            let without = tunnel.transfer(bytes);
            (without, tunnel.flooded_transfer(rate, bytes))
        })
        .collect();
    let recovery = tunnel.restart_left(Some(rate));
    FloodOutcome {
        rate,
        pairs,
        recovery: Some(recovery),
    }
}

/// Every transfer without a flood, across the floods' pairs.
fn unflooded_row(system: &str, outcomes: &[FloodOutcome]) -> Measurement {
    let transfers = outcomes
        .iter()
        .flat_map(|outcome| outcome.pairs.iter().map(|(without, _)| without));
    transfers_row(
        row("flood_throughput", system, "bit/s", None),
        transfers,
        Extra::default(),
    )
}

fn recovery_row(
    system: &str,
    flood: Option<FloodRate>,
    recovery: &Result<Option<Duration>, String>,
    sent_per_sec: Option<f64>,
) -> Measurement {
    let row = row("restart_recovery", system, "s", flood);
    let extra = Extra {
        bulk: Some(Bulk {
            time_limit_secs: Some(RESTART_LIMIT.as_secs_f64()),
            ..Bulk::default()
        }),
        flood: sent_per_sec.map(|sent| Flood {
            flood_sent_per_sec: Some(sent),
            ..Flood::default()
        }),
        ..Extra::default()
    };
    match recovery {
        Ok(Some(took)) => row.measured(vec![took.as_secs_f64()], MeasurementStatus::Ok, extra),
        Ok(None) => row.measured(
            vec![RESTART_LIMIT.as_secs_f64()],
            MeasurementStatus::TimedOut,
            extra,
        ),
        Err(why) => row.failed(why.clone()),
    }
}

fn recovery_text(recovery: &Result<Option<Duration>, String>) -> String {
    match recovery {
        Ok(Some(took)) => format!("restart: back after {:.3} s", took.as_secs_f64()),
        Ok(None) => format!("restart: not back after {} s", RESTART_LIMIT.as_secs()),
        Err(why) => format!("restart failed: {why}"),
    }
}

impl FloodOutcome {
    /// The flood's rate as sent, over its transfers.
    fn sent_per_sec(&self) -> Option<f64> {
        let rates: Vec<f64> = self
            .pairs
            .iter()
            .filter_map(|(_, flooded)| flooded.sent_per_sec)
            .collect();
        (!rates.is_empty()).then(|| median(&rates))
    }

    /// Each pair's throughput with the flood over without it, where both
    /// arrived intact.
    fn ratios(&self) -> Vec<f64> {
        self.pairs
            .iter()
            .filter_map(|(without, flooded)| {
                let without = verified(without)?.throughput_bits_per_sec;
                let with = verified(&flooded.transfer)?.throughput_bits_per_sec;
                (without > 0.0).then(|| with / without)
            })
            .collect()
    }

    fn throughput_row(&self, system: &str) -> Measurement {
        let ratios = self.ratios();
        let flood = Flood {
            flood_sent_per_sec: self.sent_per_sec(),
            no_flood_ratio: (!ratios.is_empty()).then(|| median(&ratios)),
            ..Flood::default()
        };
        let extra = Extra {
            flood: Some(flood).filter(|flood| *flood != Flood::default()),
            ..Extra::default()
        };
        let transfers = self.pairs.iter().map(|(_, flooded)| &flooded.transfer);
        transfers_row(
            row("flood_throughput", system, "bit/s", Some(self.rate)),
            transfers,
            extra,
        )
    }

    /// The handshake work over every flooded transfer that was measured.
    fn work(&self) -> Result<HandshakeWork, String> {
        let mut total: Option<HandshakeWork> = None;
        let mut first_error = None;
        for (_, flooded) in &self.pairs {
            match &flooded.work {
                Ok(work) => total = Some(total.map_or_else(|| work.clone(), |t| t.plus(work))),
                Err(why) => first_error = first_error.or(Some(why.clone())),
            }
        }
        total
            .filter(|work| !work.window.is_zero())
            .ok_or_else(|| first_error.unwrap_or_else(|| "nothing measured".to_string()))
    }

    fn handshakes_row(&self, system: &str) -> Measurement {
        let row = row("flood_handshakes", system, "replies/s", Some(self.rate));
        let work = match self.work() {
            Ok(work) => work,
            Err(why) => return row.failed(why),
        };
        let secs = work.window.as_secs_f64();
        let extra = Extra {
            cost: Some(Cost {
                cpu_seconds: Some(work.cpu.as_secs_f64()),
                ..Cost::default()
            }),
            flood: Some(Flood {
                flood_sent_per_sec: self.sent_per_sec(),
                cookie_replies: Some(work.replies.cookie_replies),
                initiations_computed: work.counters.map(|c| c.initiations_computed),
                socket_drops: Some(work.socket_drops),
                drops: work.drops.map(Drops),
                window_secs: Some(secs),
                ..Flood::default()
            }),
            ..Extra::default()
        };
        let mut measurement = row.measured(
            vec![work.replies.cookie_replies as f64 / secs],
            MeasurementStatus::Ok,
            extra,
        );
        if work.replies.responses > 0 {
            measurement.note = Some(format!(
                "{} handshake responses went to spoofed sources",
                work.replies.responses
            ));
        }
        measurement
    }

    /// One progress line.
    fn summary(&self) -> String {
        let mut parts = vec![format!("flood {}", self.rate)];
        if let Some(rate) = self.sent_per_sec() {
            parts.push(format!("sent {rate:.0}/s"));
        }
        let ratios = self.ratios();
        parts.push(if ratios.is_empty() {
            let why = self
                .pairs
                .iter()
                .find_map(|(_, flooded)| flooded.transfer.as_ref().err())
                .map_or("no transfer arrived intact", String::as_str);
            format!("transfers failed: {why}")
        } else {
            let text: Vec<String> = ratios.iter().map(|ratio| format!("{ratio:.2}")).collect();
            format!(
                "throughput {:.2}× no flood ({})",
                median(&ratios),
                text.join(", ")
            )
        });
        if let Ok(work) = self.work() {
            let secs = work.window.as_secs_f64();
            let mut text = format!(
                "{:.0} cookie replies/s",
                work.replies.cookie_replies as f64 / secs
            );
            if let Some(counters) = work.counters {
                text.push_str(&format!(
                    ", {:.0} initiations computed/s, {:.0} left unanswered/s",
                    counters.initiations_computed as f64 / secs,
                    counters.cookie_replies_withheld as f64 / secs
                ));
            }
            text.push_str(&format!(
                ", {:.0} dropped unread/s",
                work.socket_drops as f64 / secs
            ));
            parts.push(text);
        }
        if let Some(recovery) = &self.recovery {
            parts.push(recovery_text(recovery));
        }
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floods_follow_the_reference_and_label_their_rows() {
        let labels: Vec<String> = std::iter::once(None)
            .chain(FLOODS.map(Some))
            .map(flood_label)
            .collect();
        assert_eq!(labels, ["none", "20000/s", "max"]);
        assert_eq!(steps(true), 3);
    }
}
