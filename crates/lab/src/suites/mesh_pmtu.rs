//! The mesh suite's path MTU row (`path_mtu`, Gbit/s): on a
//! [`narrow_path`] (a 1,280-byte link behind a router that drops all
//! ICMP), two members of the system's mesh wait until each lists the
//! other as direct with a path MTU, then one digest-checked TCP transfer
//! of [`TRANSFER_BYTES`] runs from the left member to the right one.
//! In the same run, on the same hosts, wireguard-go (point to point, if
//! installed) carries the same transfer. The figure is the throughput of
//! a verified transfer; the note says the path MTU found, or
//! `black-holed` with what stopped it (no progress for [`STALL`]).

use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::Setup;
use crate::measure::Row;
use crate::narrow_path::{self, NARROW_LINK_MTU, TransferOutcome};
use crate::progress::Progress;
use crate::results::{Bulk, Extra, Measurement, MeasurementStatus};
use crate::systems::wireguard::{self, Implementation, Initiator, WireguardGo};
use crate::systems::{MemberPath, RunningMesh};
use crate::topology::{RIGHT_OVERLAY, TwoHosts};

/// Bytes of the transfer through each tunnel.
pub const TRANSFER_BYTES: u64 = 32 << 20;
/// No progress for this long is a black hole.
pub const STALL: Duration = Duration::from_secs(5);
/// How long the members may take to find each other and the path MTU.
const DISCOVERY_TIMEOUT: Duration = Duration::from_secs(20);
const COMPARED: &str = "wireguard-go";

fn row(system: &str) -> Row {
    Row::new("mesh", "path_mtu", system, "Gbit/s")
        .param("path", format!("{NARROW_LINK_MTU}-byte link, ICMP dropped"))
}

/// The system's row and wireguard-go's.
pub fn path_mtu_rows(setup: &Setup<'_>) -> Vec<Measurement> {
    let name = setup.name();
    let hosts = match narrow_path::build() {
        Ok(hosts) => hosts,
        Err(error) => return vec![row(name).failed(format!("building the path: {error}"))],
    };
    let mut rows = vec![through_mesh(setup, &hosts)];
    rows.extend(through_wireguard_go(&hosts, setup.progress, setup.workdir));
    rows
}

fn through_mesh(setup: &Setup<'_>, hosts: &TwoHosts) -> Measurement {
    let name = setup.name();
    let mesh_hosts = hosts.mesh_hosts();
    let mut mesh = match setup.start_mesh(&mesh_hosts) {
        Ok(mesh) => mesh,
        Err(error) => return row(name).failed(error.to_string()),
    };
    for node in 0..2 {
        if let Err(why) = mesh.start_node(node) {
            return row(name).failed(why);
        }
    }
    let started = Instant::now();
    let path_mtu = loop {
        if let Some(found) = path_mtu(mesh.as_mut(), 0, 1) {
            break found;
        }
        if started.elapsed() >= DISCOVERY_TIMEOUT {
            return row(name).failed(format!(
                "no direct path with a path MTU after {} s",
                DISCOVERY_TIMEOUT.as_secs()
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let outcome =
        narrow_path::transfer_through(hosts, mesh.overlay_address(1), 5311, TRANSFER_BYTES, STALL);
    let measurement = measured(name, outcome, Some(path_mtu));
    setup.say(&format!(
        "mesh: path MTU: {} (found {path_mtu} B after {:.2} s)",
        summary(&measurement),
        started.elapsed().as_secs_f64()
    ));
    // Nodes stop before wireguard-go takes the same overlay addresses.
    drop(mesh);
    measurement
}

fn through_wireguard_go(
    hosts: &TwoHosts,
    progress: &Progress,
    workdir: &Path,
) -> Option<Measurement> {
    let wireguard_go = WireguardGo::locate();
    if let Err(why) = wireguard_go.installed() {
        progress.line(&format!("mesh: path MTU: {COMPARED} skipped: {why}"));
        return None;
    }
    let sides = match wireguard::point_to_point(Initiator::Left) {
        Ok(sides) => sides,
        Err(error) => return Some(row(COMPARED).failed(error.to_string())),
    };
    let started = wireguard_go
        .start(&hosts.left, &sides.0, workdir)
        .and_then(|left| Ok((left, wireguard_go.start(&hosts.right, &sides.1, workdir)?)));
    let interfaces = match started {
        Ok(interfaces) => interfaces,
        Err(error) => return Some(row(COMPARED).failed(error.to_string())),
    };
    let sink = IpAddr::V4(RIGHT_OVERLAY);
    if let Err(error) = crate::traffic::wait_for_ping(&hosts.left, sink, Duration::from_secs(20)) {
        return Some(row(COMPARED).failed(format!("no handshake: {error}")));
    }
    let outcome = narrow_path::transfer_through(hosts, sink, 5312, TRANSFER_BYTES, STALL);
    let measurement = measured(COMPARED, outcome, None);
    progress.line(&format!(
        "mesh: path MTU: {COMPARED}: {}",
        summary(&measurement)
    ));
    drop(interfaces);
    Some(measurement)
}

/// Node `node`'s path MTU to node `other`, once it lists it as direct.
fn path_mtu(mesh: &mut dyn RunningMesh, node: usize, other: usize) -> Option<u64> {
    mesh.member(node, other)
        .filter(|member| member.path == MemberPath::Direct)
        .and_then(|member| member.path_mtu)
}

fn measured(system: &str, outcome: TransferOutcome, path_mtu: Option<u64>) -> Measurement {
    match outcome {
        TransferOutcome::Verified(report) => {
            let extra = Extra {
                bulk: Some(Bulk {
                    bytes: Some(report.bytes),
                    verified: Some(true),
                    xxh3_128: Some(report.receiver_digest.to_string()),
                    ..Bulk::default()
                }),
                ..Extra::default()
            };
            let mut measurement = row(system).measured(
                vec![report.throughput_gbit_per_sec()],
                MeasurementStatus::Ok,
                extra,
            );
            measurement.note = Some(match path_mtu {
                Some(mtu) => format!("ok, path MTU {mtu} B"),
                None => "ok".to_string(),
            });
            measurement
        }
        TransferOutcome::BlackHoled(why) => {
            let extra = Extra {
                bulk: Some(Bulk {
                    verified: Some(false),
                    ..Bulk::default()
                }),
                ..Extra::default()
            };
            let mut measurement = row(system).measured(vec![0.0], MeasurementStatus::Ok, extra);
            measurement.note = Some(format!("black-holed: {why}"));
            measurement
        }
    }
}

/// One line for the progress output.
fn summary(measurement: &Measurement) -> String {
    let note = measurement.note.as_deref().unwrap_or("");
    if note.starts_with("black-holed") {
        note.to_string()
    } else {
        format!("{:.3} Gbit/s, {note}", measurement.median)
    }
}
