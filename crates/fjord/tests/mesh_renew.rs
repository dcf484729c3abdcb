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
    let key = mesh.public_key(RENEWING).to_string();
    let others = [0, 2];
    let mut listed = start_a_direct_mesh(&mut mesh, &key, &others);
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
        listed = listings(&mut mesh, &others);
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

/// A certificate that runs out while its node runs: every other member
/// drops the node, and with it the session, within the README's promise
/// (10 s after the expiry, by the member's own clock), and not before.
#[test]
fn a_certificate_that_expires_while_the_node_runs_is_dropped_within_ten_seconds() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    const PROMISE: Duration = Duration::from_secs(10);
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = systems::WorkDir::create("mesh-expire").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    let key = mesh.public_key(RENEWING).to_string();
    let others = [0, 2];
    start_a_direct_mesh(&mut mesh, &key, &others);

    // The shortest certificate `fjord network sign` issues, put in place
    // by a reload; issued in a later second than the first, so members
    // take it.
    std::thread::sleep(Duration::from_millis(1_100));
    mesh.renew_certificate(RENEWING, "1m").expect("renewed");
    mesh.reload(RENEWING).expect("reloaded");
    let expires_at = unix_now() + 60;
    let mut listed = Vec::new();
    let mut expiry = None;
    let taken = netns::wait_until(
        SPREAD_TIMEOUT,
        "the one-minute certificate everywhere",
        || {
            listed = listings(&mut mesh, &others);
            let expiries: Vec<Option<u64>> = listed
                .iter()
                .map(|members| renewing_member(members, &key).and_then(|m| m.expires_at))
                .collect();
            expiry = expiries[0];
            expiries
                .iter()
                .all(|e| e.is_some_and(|e| e.abs_diff(expires_at) <= 2))
        },
    );
    assert!(taken.is_ok(), "{taken:?}: {listed:#?}");
    let expiry = expiry.expect("an expiry");

    let mut dropped_after = None;
    let wait = Duration::from_secs(expiry.saturating_sub(unix_now())) + PROMISE + SPREAD_TIMEOUT;
    let gone = netns::wait_until(wait, "node1 dropped by every member", || {
        listed = listings(&mut mesh, &others);
        let listed_anywhere = listed
            .iter()
            .any(|members| renewing_member(members, &key).is_some());
        if !listed_anywhere {
            dropped_after = Some(unix_now_secs_f64() - expiry as f64);
        }
        !listed_anywhere
    });
    assert!(gone.is_ok(), "{gone:?}: {listed:#?}");
    let after = dropped_after.expect("a time");
    eprintln!(
        "mesh_renew: node1's certificate expired; every member had dropped it {after:.2} s after its expiry"
    );
    assert!(
        after >= -1.0 && after <= PROMISE.as_secs_f64(),
        "dropped {after:.2} s after the expiry (promise: within {PROMISE:?}, not before)"
    );
    drop(mesh);
    drop(lan);
}

/// Starts every node and waits until each of `others` lists `key` as a
/// direct member; returns the last listings.
fn start_a_direct_mesh(
    mesh: &mut dyn RunningMesh,
    key: &str,
    others: &[usize],
) -> Vec<Vec<Member>> {
    for node in 0..NODES {
        mesh.start_node(node).expect("node started");
    }
    let mut listed = Vec::new();
    let converged = netns::wait_until(CONVERGENCE_TIMEOUT, "a direct mesh", || {
        listed = listings(mesh, others);
        listed.iter().all(|members| {
            renewing_member(members, key).is_some_and(|member| member.path == MemberPath::Direct)
        })
    });
    assert!(converged.is_ok(), "{converged:?}: {listed:#?}");
    listed
}

fn listings(mesh: &mut dyn RunningMesh, nodes: &[usize]) -> Vec<Vec<Member>> {
    nodes
        .iter()
        .map(|&node| mesh.members(node).unwrap_or_default())
        .collect()
}

fn unix_now() -> u64 {
    unix_now_secs_f64() as u64
}

fn unix_now_secs_f64() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs_f64()
}
