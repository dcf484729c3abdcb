//! The bootstrap member restarts (same key, same certificate): every
//! other member lists it again as direct within a few seconds. It says
//! Goodbye on the way down, so the others forget the session it no longer
//! holds and greet it again at once; the greeting rides on a handshake
//! retried every 5 s. Before, they kept sending on the dead session until
//! its keepalive timeout, and the bootstrap member was off every list for
//! 16-20 s. Namespaces and processes go when the test ends, also when it
//! fails.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fjord_lab::netns;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;

const NODES: usize = 3;
const BOOTSTRAP: usize = 0;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// One handshake retry (5 s) after the member is up, and a round trip.
const BACK_WITHIN: Duration = Duration::from_secs(7);
/// The stopped member's Goodbye is one datagram on a LAN.
const GOODBYE_WITHIN: Duration = Duration::from_secs(3);

/// Whether `node` answers and lists the member `key` as direct.
fn lists_direct(mesh: &mut dyn RunningMesh, node: usize, key: &str) -> Result<bool, String> {
    mesh.members(node).map(|members| {
        members
            .iter()
            .any(|member| member.public_key == key && member.path == MemberPath::Direct)
    })
}

fn all_list_bootstrap_direct(mesh: &mut dyn RunningMesh, key: &str) -> bool {
    (1..NODES).all(|node| lists_direct(mesh, node, key) == Ok(true))
}

fn none_list_bootstrap_direct(mesh: &mut dyn RunningMesh, key: &str) -> bool {
    (1..NODES).all(|node| lists_direct(mesh, node, key) == Ok(false))
}

#[test]
fn a_restarted_bootstrap_member_is_back_in_every_list_within_seconds() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = systems::WorkDir::create("mesh-restart").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..NODES {
        mesh.start_node(node).expect("node started");
    }
    let key = mesh.public_key(BOOTSTRAP).to_string();
    netns::wait_until(CONVERGENCE_TIMEOUT, "a direct mesh", || {
        all_list_bootstrap_direct(&mut mesh, &key)
    })
    .expect("the mesh forms");

    for round in 1..=2 {
        mesh.stop_node(BOOTSTRAP);
        // Its Goodbye arrived: no other member lists it as direct any more.
        netns::wait_until(GOODBYE_WITHIN, "the others to forget node0", || {
            none_list_bootstrap_direct(&mut mesh, &key)
        })
        .unwrap_or_else(|error| panic!("round {round}: after node0 stopped: {error}"));
        mesh.start_node(BOOTSTRAP).expect("bootstrap restarted");
        let started = Instant::now();
        let back = netns::wait_until(BACK_WITHIN, "the bootstrap member back everywhere", || {
            all_list_bootstrap_direct(&mut mesh, &key)
        });
        let lists: Vec<_> = (1..NODES).map(|node| mesh.members(node)).collect();
        assert!(back.is_ok(), "round {round}: {back:?}; lists: {lists:#?}");
        eprintln!(
            "mesh_restart: round {round}: node0 back in every list {:?} after it started again",
            started.elapsed()
        );
    }
    drop(mesh);
    drop(lan);
}
