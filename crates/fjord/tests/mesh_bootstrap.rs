//! Joining through the second `Bootstrap =` member when the first is
//! down: node0 (everyone's bootstrap member), node1 and node2 form a
//! mesh; node0 stops; node3, whose config lists node0 first and node1
//! second, joins through node1, meets node2 through node1's member list,
//! and pings both through the overlay. Namespaces and processes go when
//! the test ends, also when it fails.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::time::Duration;

use fjord_lab::systems::{self, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;
use fjord_lab::traffic;

use support::mesh::{configure, lists_on, start_direct_mesh};

const NODES: usize = 4;
const DOWN: usize = 0;
const SECOND: usize = 1;
const OTHER: usize = 2;
const NEWCOMER: usize = 3;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// The Hello to node1 leaves with node3's first handshake, at start.
const JOIN_WITHIN: Duration = Duration::from_secs(15);

#[test]
fn a_member_joins_through_its_second_bootstrap_when_the_first_is_down() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of four hosts");
    let hosts = lan.mesh_hosts();
    let (_workdir, mut mesh) = configure(&hosts, "mesh-bootstrap");
    start_direct_mesh(&mut mesh, &[DOWN, SECOND, OTHER], CONVERGENCE_TIMEOUT);
    assert!(mesh.stop_node(DOWN).is_some(), "node0 was running");

    // node3's config names node0 (configured by the lab); node1 follows.
    let path = mesh.config_path(NEWCOMER).to_path_buf();
    let config = std::fs::read_to_string(&path).expect("read node3's config");
    assert_eq!(config.matches("Bootstrap = ").count(), 1, "{config}");
    let second = format!(
        "Bootstrap = {}@{}:51820\n",
        mesh.public_key(SECOND),
        hosts[SECOND].underlay
    );
    std::fs::write(&path, format!("{config}{second}")).expect("write node3's config");
    mesh.start_node(NEWCOMER).expect("node3 started");

    let direct = MemberPath::Direct;
    let met = fjord_lab::netns::wait_until(JOIN_WITHIN, "node3 to meet node1 and node2", || {
        lists_on(&mut mesh, NEWCOMER, SECOND, &direct)
            && lists_on(&mut mesh, NEWCOMER, OTHER, &direct)
    });
    let listed = mesh.members(NEWCOMER);
    assert!(met.is_ok(), "{met:?}; node3 lists {listed:#?}");
    for other in [SECOND, OTHER] {
        traffic::ping(&lan.hosts[NEWCOMER], mesh.overlay_address(other), 2)
            .unwrap_or_else(|error| panic!("node3 to node{other} over the overlay: {error}"));
    }
    drop(mesh);
    drop(lan);
}
