//! A mesh defined by an explicit member list instead of a network key:
//! three members, each listing all three keys with their overlay
//! addresses and bootstrapped from node 0 only, find each other, open
//! direct sessions and ping over the overlay (nodes 1 and 2 met only
//! through gossip); a fourth node that is not on the list (it lists only
//! itself) is never admitted.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::path::PathBuf;
use std::time::Duration;

use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, RunningMesh};
use fjord_lab::topology::Lan;
use fjord_lab::traffic;
use support::mesh::{all_direct, lists, wait_for_listings};

const MEMBERS: usize = 3;
/// Host index of the node left out of the list.
const OUTSIDER: usize = MEMBERS;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);

#[test]
fn listed_members_find_each_other_and_ping_and_others_stay_out() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(MEMBERS + 1).expect("a LAN of four hosts");
    let workdir = systems::WorkDir::create("mesh-members").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .with_member_list()
        .with_outsider(OUTSIDER)
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..=OUTSIDER {
        mesh.start_node(node).expect("node started");
    }

    let outsider = mesh.public_key(OUTSIDER).to_string();
    let members: Vec<usize> = (0..MEMBERS).collect();
    let what = "listed members to converge";
    wait_for_listings(&mut mesh, &members, CONVERGENCE_TIMEOUT, what, |last| {
        for (node, listed) in last {
            assert!(
                !lists(listed, &outsider),
                "node{node} lists the unlisted node: {listed:?}"
            );
        }
        last.values().all(|listed| all_direct(listed, MEMBERS))
    });

    traffic::ping(&lan.hosts[1], mesh.overlay_address(2), 3)
        .expect("node1 pings node2 over the overlay");
    traffic::ping(&lan.hosts[2], mesh.overlay_address(0), 3)
        .expect("node2 pings node0 over the overlay");
    assert!(
        traffic::ping(&lan.hosts[OUTSIDER], mesh.overlay_address(0), 1).is_err(),
        "the unlisted node reached a member"
    );
    assert!(
        mesh.pid(OUTSIDER).is_some(),
        "the unlisted node kept running (it was refused, not crashed)"
    );
}
