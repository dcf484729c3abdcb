//! What the mesh tests share: starting members, what each lists, and
//! waiting until those lists say what a test expects.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fjord_lab::nat::{NatInternet, NatKind};
use fjord_lab::netns;
use fjord_lab::systems::mesh::RunningFjordMesh;
use fjord_lab::systems::{self, FjordMesh, Member, MemberPath, RunningMesh, WorkDir};
use fjord_lab::topology::MeshHost;

/// A work directory named `name`, and this build's fjord mesh of `hosts`
/// configured in it (no node started). The mesh goes before the
/// directory when both drop in order.
pub fn configure(hosts: &[MeshHost<'_>], name: &str) -> (WorkDir, RunningFjordMesh) {
    let workdir = WorkDir::create(name).expect("work directory");
    let mesh = FjordMesh::new(super::fjord())
        .configure(hosts, workdir.path())
        .expect("mesh configured");
    (workdir, mesh)
}

/// Starts nodes 0 to `count` - 1.
pub fn start_nodes(mesh: &mut dyn RunningMesh, count: usize) {
    for node in 0..count {
        mesh.start_node(node).expect("node started");
    }
}

/// Whether `node` lists node `other` (named `node<other>`) on `path`.
pub fn lists_on(mesh: &mut dyn RunningMesh, node: usize, other: usize, path: &MemberPath) -> bool {
    mesh.member(node, other)
        .is_some_and(|member| member.path == *path)
}

/// How long after `started` until `a` and `b` list each other as direct,
/// polled until `limit` has passed since `started`.
pub fn time_until_direct(
    mesh: &mut dyn RunningMesh,
    (a, b): (usize, usize),
    started: Instant,
    limit: Duration,
) -> Option<Duration> {
    let direct = MemberPath::Direct;
    while started.elapsed() < limit {
        if lists_on(mesh, a, b, &direct) && lists_on(mesh, b, a, &direct) {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// What each of `nodes` lists (nothing, for a node that does not answer).
pub fn listings(mesh: &mut dyn RunningMesh, nodes: &[usize]) -> HashMap<usize, Vec<Member>> {
    nodes
        .iter()
        .map(|&node| (node, mesh.members(node).unwrap_or_default()))
        .collect()
}

/// Whether `members` holds the member with public key `key`.
pub fn lists(members: &[Member], key: &str) -> bool {
    members.iter().any(|member| member.public_key == key)
}

/// Whether a node in a mesh of `size` lists every other member as direct.
pub fn all_direct(members: &[Member], size: usize) -> bool {
    members.len() == size - 1
        && members
            .iter()
            .all(|member| member.path == MemberPath::Direct)
}

/// Polls the listings of `nodes` until `done` holds for them, and returns
/// them; panics with the last listings if that takes over `timeout`.
pub fn wait_for_listings(
    mesh: &mut dyn RunningMesh,
    nodes: &[usize],
    timeout: Duration,
    what: &str,
    mut done: impl FnMut(&HashMap<usize, Vec<Member>>) -> bool,
) -> HashMap<usize, Vec<Member>> {
    let mut last = HashMap::new();
    let waited = netns::wait_until(timeout, what, || {
        last = listings(mesh, nodes);
        done(&last)
    });
    assert!(waited.is_ok(), "{waited:?}; members listed: {last:#?}");
    last
}

/// Starts `nodes` and waits until each lists all the others as direct
/// members.
pub fn start_direct_mesh(mesh: &mut dyn RunningMesh, nodes: &[usize], timeout: Duration) {
    for &node in nodes {
        mesh.start_node(node).expect("node started");
    }
    let what = format!("nodes {nodes:?} to form a direct mesh");
    wait_for_listings(mesh, nodes, timeout, &what, |last| {
        last.values().all(|listed| all_direct(listed, nodes.len()))
    });
}

/// Sites behind NATs of these kinds on one simulated internet, or `None`
/// (the test skips, saying why) when not running as root.
pub fn nat_internet(kinds: &[NatKind]) -> Option<NatInternet> {
    if !systems::running_as_root("needs root (network namespaces, nftables)") {
        return None;
    }
    Some(NatInternet::build(kinds).expect("namespaces and NATs"))
}
