//! `mesh`: how a mesh grows from one bootstrap member, at 20 and 100
//! nodes (5 and 20 with `--quick`), each node on its own host of a [`Lan`].
//!
//! For each size, on a fresh LAN:
//!
//! 1. **Convergence** (`convergence`, s): the clock starts as node 0 (the
//!    bootstrap) is spawned. Once node 0 answers, its resident size is read
//!    (a node alone), then every other node is spawned at once, each
//!    configured with node 0 as its only bootstrap. Every
//!    [`POLL_INTERVAL`] the nodes not yet complete are asked for their
//!    members (`fjord show --json`, one after the other, so a hundred
//!    nodes never meet a hundred queries at once); a node is complete when
//!    it lists every other node with path `direct`. The figure is the time
//!    until the last node is complete. After [`CONVERGENCE_TIMEOUT`] the
//!    row is `timed_out` and says which share of the ordered pairs (node,
//!    other node) were direct by then.
//! 2. **Memory** (`rss_per_node`, bytes): the resident size (VmRSS of
//!    /proc/PID/status) of every node right after convergence (or the
//!    timeout); the samples
//!    are all nodes, the median is the row's figure, `peak_bytes` the
//!    largest. `rss_per_peer` (bytes) is (that median − the resident size
//!    of node 0 alone) ÷ (N − 1): what each further member costs a node,
//!    including whatever a node touches first once it carries traffic.
//! 3. **First packet** (`first_packet`, ms): from node 1 to the last node
//!    (neither the bootstrap), the time from starting one ping through the
//!    overlay to its reply (what `ping` itself takes to start included).
//! 4. **Policy spread** (`policy_spread`, s): the time from giving the
//!    last node a signed network policy until every node holds it
//!    (`mesh_policy.rs`).
//!
//! 5. **NAT matrix** (`nat_pair`, s): for every pair of {no NAT,
//!    port-preserving, symmetric}, two members on a [`NatInternet`] (each
//!    site behind its own nftables NAT, a router between the sites), with
//!    a public bootstrap member: the time from starting the two until each
//!    lists the other with a session, and whether that path is direct or
//!    relayed (the row's note). A pair without a session after
//!    [`NAT_PAIR_TIMEOUT`] is `timed_out`.
//!
//! Relay cost (`mesh_relay.rs`): throughput and RTT through a relay as
//! ratios to the direct path, and how soon a relayed pair goes direct.
//! Path MTU (`mesh_pmtu.rs`, `path_mtu`, Gbit/s): a verified TCP transfer
//! across a 1,280-byte link whose router drops ICMP, through two members
//! and through wireguard-go in the same run. Systems without a mesh mode
//! (bare) have nothing to measure here.

use std::path::Path;
use std::time::{Duration, Instant};

use super::Setup;
use crate::measure::Row;
use crate::nat::{NatInternet, NatKind};
use crate::progress::Progress;
use crate::results::{Bulk, Extra, Measurement, MeasurementStatus, Memory, Mesh, median};
use crate::systems::{MemberPath, RunningMesh, SystemError, resident_bytes};
use crate::topology::Lan;

/// How long a mesh may take to converge before the row reports how far it got.
pub const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(120);
/// Pause between two rounds of member queries.
/// The convergence time is the end of the round that found the last node
/// complete, so it is late by at most one interval and one round.
const POLL_INTERVAL: Duration = Duration::from_millis(250);
/// A progress line this often while a mesh converges.
const REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// How long node 0 may take to answer its first query.
const BOOTSTRAP_START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the first ping through the converged overlay may take.
const FIRST_PACKET_TIMEOUT: Duration = Duration::from_secs(10);
const MIB: f64 = 1_048_576.0;

/// Mesh sizes, smallest first.
pub fn node_counts(quick: bool) -> [usize; 2] {
    if quick { [5, 20] } else { [20, 100] }
}

/// Progress steps per system: convergence with memory, first packet and
/// policy spread, per size; then the NAT matrix, the relay cost and the
/// path MTU row.
pub fn steps(quick: bool) -> u64 {
    STEPS_PER_SIZE * node_counts(quick).len() as u64 + 3
}

/// Convergence with memory, first packet, policy spread.
const STEPS_PER_SIZE: u64 = 3;

/// How long a pair of members behind NATs may take to get a session.
pub const NAT_PAIR_TIMEOUT: Duration = Duration::from_secs(20);

/// The NAT matrix's pairs: every pair of kinds, each once.
pub const NAT_PAIRS: [(NatKind, NatKind); 6] = [
    (NatKind::Public, NatKind::Public),
    (NatKind::Public, NatKind::PortPreserving),
    (NatKind::Public, NatKind::Symmetric),
    (NatKind::PortPreserving, NatKind::PortPreserving),
    (NatKind::PortPreserving, NatKind::Symmetric),
    (NatKind::Symmetric, NatKind::Symmetric),
];

/// Runs the suite for `system`, on LANs it builds itself.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let name = setup.name();
    let mut rows = Vec::new();
    let mut steps_left = steps(quick);
    for count in node_counts(quick) {
        if setup.stopping() {
            break;
        }
        setup.step(&format!(
            "mesh: {count} nodes: building the LAN and converging"
        ));
        let lan = match Lan::new(count) {
            Ok(lan) => lan,
            Err(error) => {
                rows.push(
                    convergence_row(name, count).failed(format!("building the LAN: {error}")),
                );
                setup.done();
                setup.skip(STEPS_PER_SIZE - 1);
                steps_left -= STEPS_PER_SIZE;
                continue;
            }
        };
        let mut mesh = match setup.start_mesh(&lan.mesh_hosts()) {
            Ok(mesh) => mesh,
            Err(SystemError::Unsupported(why)) => {
                setup.give_up(&format!("mesh: {why}; nothing to measure"), steps_left);
                return rows;
            }
            Err(error) => {
                rows.push(convergence_row(name, count).failed(error.to_string()));
                setup.done();
                setup.skip(STEPS_PER_SIZE - 1);
                steps_left -= STEPS_PER_SIZE;
                continue;
            }
        };
        rows.extend(converge(mesh.as_mut(), name, setup.progress));
        setup.done();

        setup.step(&format!("mesh: {count} nodes: first packet"));
        rows.push(first_packet(mesh.as_ref(), &lan, name));
        setup.done();

        setup.step(&format!("mesh: {count} nodes: policy spread"));
        rows.push(super::mesh_policy::policy_spread(
            mesh.as_mut(),
            name,
            setup.progress,
        ));
        setup.done();
        steps_left -= STEPS_PER_SIZE;
        // Nodes stop before their namespaces go.
        drop(mesh);
        drop(lan);
    }
    if !setup.stopping() {
        setup.step("mesh: NAT matrix");
        rows.extend(nat_matrix(setup));
        setup.done();
        steps_left -= 1;
    }
    if !setup.stopping() {
        setup.step("mesh: relay cost");
        rows.extend(super::mesh_relay::run(setup, quick));
        setup.done();
        steps_left -= 1;
    }
    if !setup.stopping() {
        setup.step("mesh: path MTU");
        rows.extend(super::mesh_pmtu::path_mtu_rows(setup));
        setup.done();
        steps_left -= 1;
    }
    setup.skip(steps_left);
    rows
}

/// One row per pair of NAT kinds.
fn nat_matrix(setup: &Setup<'_>) -> Vec<Measurement> {
    let name = setup.name();
    let mut rows = Vec::new();
    for (a, b) in NAT_PAIRS {
        if setup.stopping() {
            break;
        }
        let pair = format!("{} / {}", a.name(), b.name());
        let row = Row::new("mesh", "nat_pair", name, "s").param("pair", pair.as_str());
        let internet = match NatInternet::build(&[NatKind::Public, a, b]) {
            Ok(internet) => internet,
            Err(error) => {
                rows.push(row.failed(format!("building the NATs: {error}")));
                continue;
            }
        };
        let mut mesh = match setup.start_mesh(&internet.mesh_hosts()) {
            Ok(mesh) => mesh,
            Err(error) => {
                rows.push(row.failed(error.to_string()));
                continue;
            }
        };
        let measurement = match meet(mesh.as_mut()) {
            Ok((elapsed, path)) => {
                let path = if path == MemberPath::Direct {
                    "direct"
                } else {
                    "relayed"
                };
                setup.say(&format!(
                    "mesh: NAT {pair}: {path} after {:.2} s",
                    elapsed.as_secs_f64()
                ));
                let mut measurement = row.measured(
                    vec![elapsed.as_secs_f64()],
                    MeasurementStatus::Ok,
                    Extra::default(),
                );
                measurement.note = Some(path.to_string());
                measurement
            }
            Err(None) => {
                setup.say(&format!(
                    "mesh: NAT {pair}: no session after {} s",
                    NAT_PAIR_TIMEOUT.as_secs()
                ));
                let mut measurement = row.measured(
                    vec![NAT_PAIR_TIMEOUT.as_secs_f64()],
                    MeasurementStatus::TimedOut,
                    Extra::default(),
                );
                measurement.note = Some("no session".to_string());
                measurement
            }
            Err(Some(why)) => row.failed(why),
        };
        rows.push(measurement);
        drop(mesh);
        drop(internet);
    }
    rows
}

/// Starts the bootstrap member (node 0) and the pair (nodes 1 and 2);
/// the time from starting the pair until each lists the other with a
/// session, and node 1's path to node 2. `Err(None)` on timeout.
fn meet(mesh: &mut dyn RunningMesh) -> Result<(Duration, MemberPath), Option<String>> {
    start_bootstrap(mesh).map_err(Some)?;
    let started = Instant::now();
    for node in [1, 2] {
        mesh.start_node(node).map_err(Some)?;
    }
    let names = ["node1", "node2"];
    loop {
        let mut paths = [None, None];
        for (slot, (node, other)) in paths.iter_mut().zip([(1, names[1]), (2, names[0])]) {
            if let Ok(members) = mesh.members(node) {
                *slot = members
                    .iter()
                    .find(|member| member.name == other)
                    .map(|member| member.path.clone())
                    .filter(|path| matches!(path, MemberPath::Direct | MemberPath::Relayed { .. }));
            }
        }
        if let [Some(path), Some(_)] = paths {
            return Ok((started.elapsed(), path));
        }
        if started.elapsed() >= NAT_PAIR_TIMEOUT {
            return Err(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn convergence_row(system: &str, count: usize) -> Row {
    Row::new("mesh", "convergence", system, "s").param("nodes", count)
}

/// Starts every node and waits for convergence; the convergence and
/// memory rows.
fn converge(mesh: &mut dyn RunningMesh, system: &str, progress: &Progress) -> Vec<Measurement> {
    let count = mesh.nodes();
    let row = convergence_row(system, count);
    let started = Instant::now();
    if let Err(why) = start_bootstrap(mesh) {
        return vec![row.failed(why)];
    }
    let alone_bytes = mesh.pid(0).map(|pid| resident_bytes(&[pid]));
    for node in 1..count {
        if let Err(why) = mesh.start_node(node) {
            return vec![row.failed(why)];
        }
    }

    // Direct members each node listed last time; complete nodes are not asked again.
    let mut direct = vec![0usize; count];
    let mut next_report = started + REPORT_INTERVAL;
    let converged = loop {
        let incomplete: Vec<usize> = (0..count)
            .filter(|&node| direct[node] < count - 1)
            .collect();
        for (node, answer) in incomplete.iter().zip(mesh.members_of(&incomplete)) {
            match answer {
                Ok(members) => {
                    direct[*node] = members
                        .iter()
                        .filter(|member| member.path == MemberPath::Direct)
                        .count()
                        .min(count - 1);
                }
                // Not up yet; a node that exited is fatal.
                Err(why) if mesh.pid(*node).is_some_and(is_running) => {
                    tracing::debug!(node, %why, "no members yet");
                }
                Err(why) => return vec![row.failed(why)],
            }
        }
        let elapsed = started.elapsed();
        if direct.iter().all(|&listed| listed == count - 1) {
            break Some(elapsed);
        }
        if elapsed >= CONVERGENCE_TIMEOUT {
            break None;
        }
        if Instant::now() >= next_report {
            progress.line(&format!(
                "{system}: mesh: {count} nodes: {:.0} % of pairs direct after {:.0} s",
                pairs_percent(&direct),
                elapsed.as_secs_f64()
            ));
            next_report += REPORT_INTERVAL;
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    let percent = pairs_percent(&direct);
    let extra = Extra {
        bulk: Some(Bulk {
            time_limit_secs: Some(CONVERGENCE_TIMEOUT.as_secs_f64()),
            ..Bulk::default()
        }),
        mesh: Some(Mesh {
            pairs_percent: Some(percent),
            ..Mesh::default()
        }),
        ..Extra::default()
    };
    let convergence = match converged {
        Some(elapsed) => {
            progress.line(&format!(
                "{system}: mesh: {count} nodes: converged in {:.2} s",
                elapsed.as_secs_f64()
            ));
            row.measured(vec![elapsed.as_secs_f64()], MeasurementStatus::Ok, extra)
        }
        None => {
            let reached = format!(
                "{percent:.0} % of pairs direct after {} s",
                CONVERGENCE_TIMEOUT.as_secs()
            );
            progress.line(&format!("{system}: mesh: {count} nodes: {reached}"));
            let mut measurement = row.measured(
                vec![CONVERGENCE_TIMEOUT.as_secs_f64()],
                MeasurementStatus::TimedOut,
                extra,
            );
            measurement.note = Some(reached);
            measurement
        }
    };
    let mut rows = vec![convergence];
    rows.extend(memory(mesh, system, alone_bytes, progress));
    rows
}

/// Starts node 0 and waits until it answers a query.
pub(super) fn start_bootstrap(mesh: &mut dyn RunningMesh) -> Result<(), String> {
    mesh.start_node(0)?;
    let deadline = Instant::now() + BOOTSTRAP_START_TIMEOUT;
    loop {
        match mesh.members(0) {
            Ok(_) => return Ok(()),
            Err(why)
                if Instant::now() >= deadline || mesh.pid(0).is_none_or(|p| !is_running(p)) =>
            {
                return Err(format!("node 0 did not come up: {why}"));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

fn is_running(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

/// Share of ordered pairs (node, other node) where the node lists the
/// other as direct, in percent, from each node's count of direct members.
pub fn pairs_percent(direct: &[usize]) -> f64 {
    let count = direct.len();
    if count < 2 {
        return 100.0;
    }
    let listed: usize = direct.iter().sum();
    listed as f64 * 100.0 / (count * (count - 1)) as f64
}

/// What each further member costs: (median − alone) ÷ (N − 1), in bytes.
pub fn per_peer_bytes(median_bytes: f64, alone_bytes: f64, count: usize) -> Option<f64> {
    (count > 1).then(|| (median_bytes - alone_bytes) / (count - 1) as f64)
}

/// The memory rows: each node's resident size, and the cost per peer.
fn memory(
    mesh: &dyn RunningMesh,
    system: &str,
    alone_bytes: Option<u64>,
    progress: &Progress,
) -> Vec<Measurement> {
    let count = mesh.nodes();
    let per_node = Row::new("mesh", "rss_per_node", system, "bytes").param("nodes", count);
    let per_peer = Row::new("mesh", "rss_per_peer", system, "bytes").param("nodes", count);
    let sizes: Vec<f64> = (0..count)
        .filter_map(|node| mesh.pid(node))
        .map(|pid| resident_bytes(&[pid]) as f64)
        .filter(|&bytes| bytes > 0.0)
        .collect();
    if sizes.len() != count {
        let why = format!("read the resident size of {} of {count} nodes", sizes.len());
        return vec![per_node.failed(why.clone()), per_peer.failed(why)];
    }
    let typical = median(&sizes);
    let largest = sizes.iter().copied().fold(0.0, f64::max);
    let alone = alone_bytes.filter(|&bytes| bytes > 0);
    let extra = Extra {
        memory: Some(Memory {
            peak_bytes: Some(largest),
            ..Memory::default()
        }),
        mesh: alone.map(|alone| Mesh {
            alone_rss_bytes: Some(alone),
            ..Mesh::default()
        }),
        ..Extra::default()
    };
    let mut rows = vec![per_node.measured(sizes, MeasurementStatus::Ok, extra.clone())];
    let peer = alone.and_then(|alone| per_peer_bytes(typical, alone as f64, count));
    let peer_text = match peer {
        Some(bytes) => {
            rows.push(per_peer.measured(vec![bytes], MeasurementStatus::Ok, extra));
            format!("{:.1} KiB per peer", bytes / 1024.0)
        }
        None => {
            rows.push(per_peer.failed("no resident size of node 0 alone"));
            "per peer unknown".to_string()
        }
    };
    progress.line(&format!(
        "{system}: mesh: {count} nodes: resident {:.1} MiB median, {:.1} MiB max, alone {}, {peer_text}",
        typical / MIB,
        largest / MIB,
        alone.map_or("unknown".to_string(), |bytes| format!(
            "{:.1} MiB",
            bytes as f64 / MIB
        )),
    ));
    rows
}

/// The first ping from node 1 to the last node through the overlay.
fn first_packet(mesh: &dyn RunningMesh, lan: &Lan, system: &str) -> Measurement {
    let count = mesh.nodes();
    let (from, to) = (1, count - 1);
    let row = Row::new("mesh", "first_packet", system, "ms")
        .param("nodes", count)
        .param("path", "node 1 to the last node");
    match crate::traffic::wait_for_ping(
        &lan.hosts[from],
        mesh.overlay_address(to),
        FIRST_PACKET_TIMEOUT,
    ) {
        Ok(elapsed) => row.measured(
            vec![elapsed.as_secs_f64() * 1000.0],
            MeasurementStatus::Ok,
            Extra::default(),
        ),
        Err(error) => row.failed(error.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_count_each_direction() {
        assert_eq!(pairs_percent(&[2, 2, 2]), 100.0);
        assert_eq!(pairs_percent(&[2, 1, 0]), 50.0);
        assert_eq!(pairs_percent(&[0]), 100.0);
    }

    #[test]
    fn per_peer_cost_spreads_growth_over_the_other_nodes() {
        assert_eq!(per_peer_bytes(12_000.0, 10_000.0, 5), Some(500.0));
        assert_eq!(per_peer_bytes(12_000.0, 10_000.0, 1), None);
    }

    #[test]
    fn quick_runs_are_smaller() {
        assert_eq!(node_counts(true), [5, 20]);
        assert_eq!(node_counts(false), [20, 100]);
        assert_eq!(steps(true), 9);
    }
}
