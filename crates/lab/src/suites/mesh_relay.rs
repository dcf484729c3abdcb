//! Relay cost: what carrying a session through a third member costs, as
//! ratios to the direct path between the same two members in the same run.
//!
//! ```text
//! LAN of 3; on host 1, a firewall drops UDP to and from host 2
//! start node 0, then nodes 1 and 2 (both bootstrap from node 0)
//! wait until node 1 lists node 2 as relayed (through node 0)
//! relayed: verified TCP transfer 1 → 2 over the overlay, then pings
//! remove the firewall; wait until both list each other as direct
//!          (the switch: fjord keeps trying the direct path)
//! direct:  the same transfer and pings
//! ```

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use super::Setup;
use super::mesh::start_bootstrap;
use crate::firewall::UdpFirewall;
use crate::measure::Row;
use crate::results::{Extra, Measurement, MeasurementStatus};
use crate::systems::{MemberPath, RunningMesh};
use crate::topology::{Lan, lan_underlay};
use crate::traffic::{self, BulkTransfer};

/// How long node 1 may take to reach node 2 through the relay.
const RELAYED_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the pair may take to find the direct path once it opens:
/// retries back off to 30 s, and a few go by while the relay is measured.
const SWITCH_TIMEOUT: Duration = Duration::from_secs(75);
/// The sink's port on node 2's overlay address.
const SINK_PORT: u16 = 5201;
const PINGS: u32 = 20;

fn transfer_bytes(quick: bool) -> u64 {
    if quick { 64 << 20 } else { 256 << 20 }
}

/// The rows: throughput and RTT by path, and the switch time.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let name = setup.name();
    let throughput =
        |path: &str| Row::new("mesh", "relay_throughput", name, "bit/s").param("path", path);
    let rtt = |path: &str| Row::new("mesh", "relay_rtt", name, "ms").param("path", path);
    let switch = || Row::new("mesh", "relay_switch", name, "s").param("path", "relayed to direct");
    let failed = |why: String| {
        vec![
            throughput("relayed").failed(why.clone()),
            rtt("relayed").failed(why.clone()),
            switch().failed(why),
        ]
    };

    let lan = match Lan::new(3) {
        Ok(lan) => lan,
        Err(error) => return failed(format!("building the LAN: {error}")),
    };
    let firewall = match UdpFirewall::between(&lan.hosts[1], lan_underlay(2).into()) {
        Ok(firewall) => firewall,
        Err(error) => return failed(format!("the firewall between hosts 1 and 2: {error}")),
    };
    let mut mesh = match setup.start_mesh(&lan.mesh_hosts()) {
        Ok(mesh) => mesh,
        Err(error) => return failed(error.to_string()),
    };
    if let Err(why) = start_pair(mesh.as_mut()) {
        return failed(why);
    }
    let relayed = wait_for_paths(mesh.as_mut(), RELAYED_TIMEOUT, |path| {
        matches!(path, MemberPath::Relayed { .. })
    });
    if let Err(why) = relayed {
        return failed(format!("no relayed session between nodes 1 and 2: {why}"));
    }
    let bytes = transfer_bytes(quick);
    let sink = SocketAddr::new(mesh.overlay_address(2), SINK_PORT);
    let destination = mesh.overlay_address(2);
    let relayed = measure_path(&lan, sink, destination, bytes);
    setup.say(&format!("mesh: relayed path: {}", relayed.summary()));

    drop(firewall);
    let opened = Instant::now();
    let switched = wait_for_paths(mesh.as_mut(), SWITCH_TIMEOUT, |path| {
        *path == MemberPath::Direct
    });
    let mut rows = Vec::new();
    let direct = match switched {
        Ok(()) => {
            let took = opened.elapsed();
            setup.say(&format!(
                "mesh: relayed pair went direct {:.1} s after the firewall opened",
                took.as_secs_f64()
            ));
            rows.push(switch().measured(
                vec![took.as_secs_f64()],
                MeasurementStatus::Ok,
                Extra::default(),
            ));
            let direct = measure_path(&lan, sink, destination, bytes);
            setup.say(&format!("mesh: direct path: {}", direct.summary()));
            Some(direct)
        }
        Err(why) => {
            let mut row = switch().measured(
                vec![SWITCH_TIMEOUT.as_secs_f64()],
                MeasurementStatus::TimedOut,
                Extra::default(),
            );
            row.note = Some(why);
            rows.push(row);
            None
        }
    };
    rows.extend(path_rows(&relayed, direct.as_ref(), throughput, rtt));
    rows
}

/// Node 0 first (the relay), then the pair.
fn start_pair(mesh: &mut dyn RunningMesh) -> Result<(), String> {
    start_bootstrap(mesh)?;
    mesh.start_node(1)?;
    mesh.start_node(2)
}

/// Waits until node 1 lists node 2, and node 2 lists node 1, with a path
/// that `wanted` accepts.
fn wait_for_paths(
    mesh: &mut dyn RunningMesh,
    timeout: Duration,
    wanted: impl Fn(&MemberPath) -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    let mut seen = String::new();
    loop {
        let answers = mesh.members_of(&[1, 2]);
        let mut ok = true;
        seen.clear();
        for ((node, other), answer) in [(1, "node2"), (2, "node1")].into_iter().zip(answers) {
            let path = answer
                .ok()
                .and_then(|members| members.into_iter().find(|m| m.name == other))
                .map(|member| member.path);
            seen.push_str(&format!("node{node} lists {other} as {path:?}; "));
            ok &= path.as_ref().is_some_and(&wanted);
        }
        if ok {
            return Ok(());
        }
        if started.elapsed() >= timeout {
            return Err(format!(
                "after {} s: {}",
                timeout.as_secs(),
                seen.trim_end_matches("; ")
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One path's figures (each may have failed on its own).
struct PathFigures {
    throughput: Result<f64, String>,
    rtt_ms: Result<f64, String>,
}

impl PathFigures {
    fn summary(&self) -> String {
        let throughput = match &self.throughput {
            Ok(bits) => format!("{:.2} Gbit/s", bits / 1e9),
            Err(why) => format!("transfer failed ({why})"),
        };
        let rtt = match &self.rtt_ms {
            Ok(ms) => format!("RTT {ms:.3} ms"),
            Err(why) => format!("ping failed ({why})"),
        };
        format!("{throughput}, {rtt}")
    }
}

fn measure_path(lan: &Lan, sink: SocketAddr, destination: IpAddr, bytes: u64) -> PathFigures {
    let throughput = BulkTransfer::new(bytes)
        .run(&lan.hosts[1], &lan.hosts[2], sink)
        .map_err(|error| error.to_string())
        .and_then(|report| {
            if report.verified {
                Ok(report.throughput_bits_per_sec)
            } else {
                Err(format!("content mismatch: {report}"))
            }
        });
    let rtt_ms = traffic::ping(&lan.hosts[1], destination, PINGS)
        .map_err(|error| error.to_string())
        .and_then(|summary| {
            summary
                .rtt_avg
                .map(|rtt| rtt.as_secs_f64() * 1000.0)
                .ok_or_else(|| "no reply".to_string())
        });
    PathFigures { throughput, rtt_ms }
}

/// A row per figure and path; the relayed rows carry their ratio to the
/// direct path in their note.
fn path_rows(
    relayed: &PathFigures,
    direct: Option<&PathFigures>,
    throughput: impl Fn(&str) -> Row,
    rtt: impl Fn(&str) -> Row,
) -> Vec<Measurement> {
    let mut rows = Vec::new();
    let figure = |row: Row,
                  value: &Result<f64, String>,
                  reference: Option<&Result<f64, String>>| {
        match value {
            Ok(value) => {
                let mut measurement =
                    row.measured(vec![*value], MeasurementStatus::Ok, Extra::default());
                if let Some(Ok(reference)) = reference
                    && *reference > 0.0
                {
                    measurement.note = Some(format!("{:.2}× the direct path", value / reference));
                }
                measurement
            }
            Err(why) => row.failed(why.clone()),
        }
    };
    rows.push(figure(
        throughput("relayed"),
        &relayed.throughput,
        direct.map(|d| &d.throughput),
    ));
    rows.push(figure(
        rtt("relayed"),
        &relayed.rtt_ms,
        direct.map(|d| &d.rtt_ms),
    ));
    if let Some(direct) = direct {
        rows.push(figure(throughput("direct"), &direct.throughput, None));
        rows.push(figure(rtt("direct"), &direct.rtt_ms, None));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures(throughput: f64, rtt_ms: f64) -> PathFigures {
        PathFigures {
            throughput: Ok(throughput),
            rtt_ms: Ok(rtt_ms),
        }
    }

    #[test]
    fn relayed_rows_carry_their_ratio_to_the_direct_path() {
        let throughput =
            |path: &str| Row::new("mesh", "relay_throughput", "fjord", "bit/s").param("path", path);
        let rtt = |path: &str| Row::new("mesh", "relay_rtt", "fjord", "ms").param("path", path);
        let rows = path_rows(
            &figures(1e9, 0.4),
            Some(&figures(2e9, 0.2)),
            throughput,
            rtt,
        );
        assert_eq!(rows.len(), 4);
        assert_eq!(rows[0].note.as_deref(), Some("0.50× the direct path"));
        assert_eq!(rows[1].note.as_deref(), Some("2.00× the direct path"));
        assert_eq!(rows[2].note, None);
    }

    #[test]
    fn without_a_direct_path_only_the_relayed_rows_remain() {
        let throughput =
            |path: &str| Row::new("mesh", "relay_throughput", "fjord", "bit/s").param("path", path);
        let rtt = |path: &str| Row::new("mesh", "relay_rtt", "fjord", "ms").param("path", path);
        let rows = path_rows(&figures(1e9, 0.4), None, throughput, rtt);
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|row| row.note.is_none()));
    }
}
