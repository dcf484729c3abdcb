//! A fjord mesh on a LAN of namespaces, end to end: four members, each
//! bootstrapped from node 0 only, find each other and open direct
//! sessions; two members that never met before carry a digest-checked TCP
//! transfer; a node certified by another network is never admitted; a
//! member stopped with SIGTERM says Goodbye and disappears from the others'
//! lists at once (not after the minutes-long member timeout); and nothing
//! is left behind.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fjord_lab::netns;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, Member, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;
use fjord_lab::traffic::BulkTransfer;

const MEMBERS: usize = 4;
/// Host index of the node whose certificate another network signed.
const OUTSIDER: usize = MEMBERS;
const TRANSFER_BYTES: u64 = 16 << 20;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Far below the 3-minute member timeout: only a Goodbye explains it.
const LEAVE_TIMEOUT: Duration = Duration::from_secs(5);

/// What every node lists now, by node index (nodes that do not answer yet
/// list nothing).
fn listings(mesh: &mut dyn RunningMesh, nodes: &[usize]) -> HashMap<usize, Vec<Member>> {
    nodes
        .iter()
        .map(|&node| (node, mesh.members(node).unwrap_or_default()))
        .collect()
}

fn direct_members(members: &[Member]) -> usize {
    members
        .iter()
        .filter(|member| member.path == MemberPath::Direct)
        .count()
}

/// Panics if any of `listings` names the outsider.
fn assert_outsider_absent(mesh: &dyn RunningMesh, listings: &HashMap<usize, Vec<Member>>) {
    let outsider = mesh.public_key(OUTSIDER).to_string();
    for (node, members) in listings {
        assert!(
            members.iter().all(|member| member.public_key != outsider),
            "node{node} lists the outsider: {members:?}"
        );
    }
}

#[test]
fn members_find_each_other_from_one_bootstrap_and_leave_cleanly() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(MEMBERS + 1).expect("a LAN of five hosts");
    let namespaces: Vec<String> = std::iter::once(lan.switch.name())
        .chain(lan.hosts.iter().map(|host| host.name()))
        .map(String::from)
        .collect();
    let workdir = systems::WorkDir::create("mesh").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .with_outsider(OUTSIDER)
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..=OUTSIDER {
        mesh.start_node(node).expect("node started");
    }
    let pids: Vec<u32> = (0..=OUTSIDER).filter_map(|node| mesh.pid(node)).collect();
    assert_eq!(pids.len(), MEMBERS + 1);

    // Every member lists the three others as direct; the outsider never
    // shows up anywhere while we watch.
    let members: Vec<usize> = (0..MEMBERS).collect();
    let started = std::time::Instant::now();
    let mut last = HashMap::new();
    let converged = netns::wait_until(CONVERGENCE_TIMEOUT, "members to converge", || {
        last = listings(&mut mesh, &members);
        assert_outsider_absent(&mesh, &last);
        last.values()
            .all(|listed| direct_members(listed) == MEMBERS - 1 && listed.len() == MEMBERS - 1)
    });
    assert!(
        converged.is_ok(),
        "{converged:?}; members listed: {last:#?}"
    );
    eprintln!(
        "mesh: {MEMBERS} members converged in {:?}",
        started.elapsed()
    );

    // Nodes 1 and 2 met only through gossip; their session carries 16 MiB.
    let to = SocketAddr::new(mesh.overlay_address(2), 5301);
    let report = BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(30))
        .run(&lan.hosts[1], &lan.hosts[2], to)
        .expect("transfer from node1 to node2 over the overlay");
    assert!(report.verified, "{report}");
    assert_eq!(report.bytes, TRANSFER_BYTES);
    eprintln!(
        "mesh: node1 to node2: {:.3} Gbit/s",
        report.throughput_gbit_per_sec()
    );
    let after_transfer = listings(&mut mesh, &members);
    assert_outsider_absent(&mesh, &after_transfer);
    assert!(
        mesh.pid(OUTSIDER).is_some() && mesh.members(OUTSIDER).is_ok(),
        "the outsider kept running (it was refused, not crashed)"
    );

    // Node 3 leaves: SIGTERM, exit 0, and the others forget it at once.
    let leaving = mesh.public_key(3).to_string();
    let leave_started = std::time::Instant::now();
    let status = mesh.stop_node(3).expect("node3 was running");
    assert!(status.success(), "node3 exited with {status}");
    let stayers = [0, 1, 2];
    let forgotten = netns::wait_until(LEAVE_TIMEOUT, "node3 to be forgotten", || {
        last = listings(&mut mesh, &stayers);
        last.values().all(|listed| {
            listed.len() == MEMBERS - 2 && listed.iter().all(|m| m.public_key != leaving)
        })
    });
    assert!(
        forgotten.is_ok(),
        "{forgotten:?}; members listed: {last:#?}"
    );
    eprintln!(
        "mesh: node3 forgotten {:?} after it stopped",
        leave_started.elapsed()
    );

    drop(mesh);
    netns::wait_until(Duration::from_secs(5), "mesh nodes to exit", || {
        pids.iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    })
    .expect("every node stopped");
    drop(lan);
    let left = netns::ip(&["netns", "list"]).expect("ip netns list");
    for name in &namespaces {
        assert!(
            !left
                .lines()
                .any(|line| line.split_whitespace().next() == Some(name)),
            "namespace {name} is left"
        );
    }
}
