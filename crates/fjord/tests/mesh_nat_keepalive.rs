//! NAT mappings that time out quickly stay open while members idle: two
//! members behind port-preserving NATs whose UDP mappings expire after
//! 15 s of silence meet directly, idle for 40 s, and the direct path
//! still carries pings at once. The mesh's pings (every 10 s ± 25 %)
//! are the keepalive; without them each NAT would drop the other's
//! packets after 15 s.
//!
//! Needs root and nft; without root the test skips with one line (fails
//! under CI).

mod support;

use std::time::{Duration, Instant};

use fjord_lab::nat::NatKind;
use fjord_lab::systems::{MemberPath, RunningMesh};
use fjord_lab::traffic;
use support::mesh::{configure, lists_on, nat_internet, start_nodes, time_until_direct};

/// The NATs' UDP mapping timeout (Linux's default is 30 s, 120 s once a
/// flow has seen traffic both ways).
const MAPPING_TIMEOUT_SECS: u32 = 15;
const IDLE: Duration = Duration::from_secs(40);

/// Whether `node` lists node `other` as direct.
fn direct(mesh: &mut dyn RunningMesh, node: usize, other: usize) -> bool {
    lists_on(mesh, node, other, &MemberPath::Direct)
}

#[test]
fn members_behind_nats_with_short_mapping_timeouts_keep_their_direct_path_while_idle() {
    let kinds = [
        NatKind::Public,
        NatKind::PortPreserving,
        NatKind::PortPreserving,
    ];
    let Some(internet) = nat_internet(&kinds) else {
        return;
    };
    for nat in internet.sites.iter().filter_map(|site| site.nat.as_ref()) {
        let timeout = MAPPING_TIMEOUT_SECS.to_string();
        nat.exec(
            "sysctl",
            &[
                "-qw",
                &format!("net.netfilter.nf_conntrack_udp_timeout={timeout}"),
                &format!("net.netfilter.nf_conntrack_udp_timeout_stream={timeout}"),
            ],
        )
        .expect("a short UDP mapping timeout");
    }
    let (workdir, mut mesh) = configure(&internet.mesh_hosts(), "mesh-nat-keepalive");
    start_nodes(&mut mesh, kinds.len());
    let logs = workdir.path().display().to_string();
    let direct_within =
        time_until_direct(&mut mesh, (1, 2), Instant::now(), Duration::from_secs(20));
    assert!(direct_within.is_some(), "never direct; logs in {logs}");

    // The idle time under test: nothing but the mesh's own pings.
    std::thread::sleep(IDLE);

    // The mapping toward the other NAT is still there, with the short
    // timeout: it was kept, not merely never timed.
    let nat = internet.sites[1]
        .nat
        .as_ref()
        .expect("site 1 is behind a NAT");
    let table = nat
        .exec("cat", &["/proc/net/nf_conntrack"])
        .expect("the NAT's connection table");
    let other = internet.sites[2].public_address.to_string();
    let kept = table
        .lines()
        .filter(|line| line.contains("udp") && line.contains(&format!("dst={other} ")))
        .filter_map(|line| line.split_whitespace().nth(4)?.parse::<u32>().ok())
        .collect::<Vec<_>>();
    assert!(
        kept.iter().any(|left| *left <= MAPPING_TIMEOUT_SECS),
        "no mapping toward the other NAT with the short timeout after {IDLE:?} idle: {table}"
    );
    assert!(
        direct(&mut mesh, 1, 2) && direct(&mut mesh, 2, 1),
        "the pair lost its direct path while idle; logs in {logs}"
    );
    traffic::ping(&internet.sites[1].host, mesh.overlay_address(2), 3)
        .unwrap_or_else(|error| panic!("no ping after {IDLE:?} idle: {error}; logs in {logs}"));
    // Nodes stop before their namespaces go.
    drop(mesh);
    drop(internet);
}
