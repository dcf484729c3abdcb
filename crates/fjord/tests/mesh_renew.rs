//! A member renews its own certificate while it runs: the operator signs
//! a new one (`fjord network sign --valid 2h`), puts it in place of the
//! file and reloads (`fjord reload`); no restart. Every other member
//! learns the new expiry within seconds, and none drops the member or its
//! session meanwhile (checked at every poll). Namespaces and processes go
//! when the test ends, also when it fails.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fjord_lab::netns;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, Member, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;

const NODES: usize = 3;
const RENEWING: usize = 1;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
const SPREAD_TIMEOUT: Duration = Duration::from_secs(10);

fn renewing_member<'a>(members: &'a [Member], key: &str) -> Option<&'a Member> {
    members.iter().find(|member| member.public_key == key)
}

#[test]
fn a_renewed_certificate_takes_a_reload_and_no_member_drops_the_node() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = systems::WorkDir::create("mesh-renew").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..NODES {
        mesh.start_node(node).expect("node started");
    }
    let key = mesh.public_key(RENEWING).to_string();
    let others = [0, 2];
    let mut listed = Vec::new();
    let converged = netns::wait_until(CONVERGENCE_TIMEOUT, "a direct mesh", || {
        listed = others
            .iter()
            .map(|&node| mesh.members(node).unwrap_or_default())
            .collect();
        listed.iter().all(|members| {
            renewing_member(members, &key).is_some_and(|member| member.path == MemberPath::Direct)
        })
    });
    assert!(converged.is_ok(), "{converged:?}: {listed:#?}");
    let expires_before = renewing_member(&listed[0], &key).and_then(|m| m.expires_at);
    assert!(expires_before.is_some(), "no expiry listed: {listed:#?}");

    // A certificate issued in a later second than the first.
    std::thread::sleep(Duration::from_millis(1_100));
    mesh.renew_certificate(RENEWING, "2h").expect("renewed");
    let reloaded = mesh.reload(RENEWING).expect("reloaded");
    assert!(reloaded.contains("certificate renewed"), "{reloaded}");
    let started = Instant::now();
    let mut dropped = Vec::new();
    let spread = netns::wait_until(SPREAD_TIMEOUT, "the new expiry everywhere", || {
        listed = others
            .iter()
            .map(|&node| mesh.members(node).unwrap_or_default())
            .collect();
        for (members, node) in listed.iter().zip(others) {
            if renewing_member(members, &key).is_none_or(|m| m.path != MemberPath::Direct) {
                dropped.push((node, started.elapsed()));
            }
        }
        listed.iter().all(|members| {
            renewing_member(members, &key)
                .and_then(|m| m.expires_at)
                .is_some_and(|expires| Some(expires) != expires_before)
        })
    });
    assert!(spread.is_ok(), "{spread:?}: {listed:#?}");
    assert!(
        dropped.is_empty(),
        "members lost node1 meanwhile: {dropped:?}"
    );
    let expires_after = renewing_member(&listed[0], &key).and_then(|m| m.expires_at);
    eprintln!(
        "mesh_renew: {reloaded:?}; every member took the new certificate {:?} after the reload (expiry {expires_before:?} -> {expires_after:?}); none dropped node1",
        started.elapsed()
    );
    drop(mesh);
    drop(lan);
}
