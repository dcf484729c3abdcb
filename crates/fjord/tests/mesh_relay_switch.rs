//! A relayed pair goes direct when the path between them opens: three
//! members on one LAN, a firewall dropping UDP between two of them, so
//! the third relays; a digest-checked transfer through the relay; the
//! firewall opens; both list each other as direct within a minute (their
//! direct attempts back off to one every 30 s), and a second transfer
//! takes the direct path.
//!
//! Needs root and nft; without root the test skips with one line (fails
//! under CI).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fjord_lab::firewall::UdpFirewall;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh, WorkDir};
use fjord_lab::topology::{Lan, lan_underlay};
use fjord_lab::traffic::BulkTransfer;

const TRANSFER_BYTES: u64 = 8 << 20;

/// Waits until nodes 1 and 2 list each other on a path `wanted` accepts.
fn wait_for(
    mesh: &mut dyn RunningMesh,
    limit: Duration,
    wanted: impl Fn(&MemberPath) -> bool,
) -> Result<Duration, String> {
    let started = Instant::now();
    loop {
        let views = [mesh.member(1, 2), mesh.member(2, 1)];
        if views
            .iter()
            .all(|v| v.as_ref().is_some_and(|m| wanted(&m.path)))
        {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            return Err(format!("after {limit:?}: {views:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_relayed_pair_goes_direct_when_the_firewall_between_them_opens() {
    if !systems::running_as_root("needs root (network namespaces, nftables)") {
        return;
    }
    let lan = Lan::new(3).expect("namespaces");
    let firewall = UdpFirewall::between(&lan.hosts[1], lan_underlay(2).into()).expect("nftables");
    let workdir = WorkDir::create("mesh-relay-switch").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    for node in 0..3 {
        mesh.start_node(node).expect("node started");
    }
    let logs = workdir.path().display().to_string();

    let relayed = wait_for(&mut mesh, Duration::from_secs(30), |path| {
        *path
            == MemberPath::Relayed {
                via: "node0".to_string(),
            }
    });
    relayed.unwrap_or_else(|why| panic!("no relayed session: {why}; logs in {logs}"));
    let sink = SocketAddr::new(mesh.overlay_address(2), 5201);
    let through_relay = BulkTransfer::new(TRANSFER_BYTES)
        .run(&lan.hosts[1], &lan.hosts[2], sink)
        .expect("transfer through the relay");
    assert!(through_relay.verified, "{through_relay}");

    drop(firewall);
    let took = wait_for(&mut mesh, Duration::from_secs(60), |path| {
        *path == MemberPath::Direct
    })
    .unwrap_or_else(|why| panic!("still not direct: {why}; logs in {logs}"));
    eprintln!("direct {took:?} after the firewall opened");
    let second = BulkTransfer {
        seed: 2,
        ..BulkTransfer::new(TRANSFER_BYTES)
    };
    let direct = second
        .run(&lan.hosts[1], &lan.hosts[2], sink)
        .expect("transfer on the direct path");
    assert!(direct.verified, "{direct}");
    let endpoint = mesh.member(1, 2).and_then(|member| member.endpoint);
    assert_eq!(
        endpoint,
        Some(format!("{}:51820", lan_underlay(2))),
        "node 1 sends to node 2's own address"
    );
}
