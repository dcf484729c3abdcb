//! Path MTU discovery across a black hole: two mesh members on either
//! side of a router whose far link carries 1,280-byte packets and which
//! drops all ICMP (`fjord_lab::narrow_path`). The members find the path's
//! MTU by probing, tell the inner TCP sender with ICMP "fragmentation
//! needed" from the tunnel interface (its route cache shows the lowered
//! MTU), and carry a digest-checked transfer. wireguard-go over the same
//! path, in the same run, shows what happens without probing.
//!
//! Needs root; without it the test skips with one line (fails under CI).
//! Without wireguard-go only its half is skipped (fails under CI).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use fjord_lab::narrow_path::{self, TransferOutcome};
use fjord_lab::systems::wireguard::{self, Fjord, Implementation, Initiator, WireguardGo};
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh, WorkDir};
use fjord_lab::topology::RIGHT_OVERLAY;
use fjord_lab::traffic;

const TRANSFER_BYTES: u64 = 8 << 20;
/// 20 + 8 + 32 + 1216: the largest probe size a 1,280-byte IPv4 link carries.
const EXPECTED_PATH_MTU: u64 = 1276;
/// What the inner sender is told: 1276 minus the tunnel's 60 bytes.
const EXPECTED_INNER_MTU: u64 = 1216;

/// Node `node`'s path MTU to node `other`, once it lists it as direct.
fn path_mtu(mesh: &mut dyn RunningMesh, node: usize, other: usize) -> Option<u64> {
    mesh.member(node, other)
        .filter(|member| member.path == MemberPath::Direct)
        .and_then(|member| member.path_mtu)
}

#[test]
fn members_find_a_1280_byte_path_that_drops_icmp() {
    if !systems::running_as_root("needs root (network namespaces, nftables)") {
        return;
    }
    let hosts = narrow_path::build().expect("hosts and the ICMP-dropping router");
    let workdir = WorkDir::create("mesh-pmtu").expect("work directory");
    let mesh_hosts = hosts.mesh_hosts();
    let mut mesh = FjordMesh::new(Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord"))))
        .configure(&mesh_hosts, workdir.path())
        .expect("mesh configured");
    for node in 0..2 {
        mesh.start_node(node).expect("node started");
    }
    let logs = workdir.path().display().to_string();
    let deadline = Instant::now() + Duration::from_secs(20);
    let found = loop {
        if let (Some(a), Some(b)) = (path_mtu(&mut mesh, 0, 1), path_mtu(&mut mesh, 1, 0)) {
            break (a, b);
        }
        assert!(
            Instant::now() < deadline,
            "no path MTU within 20 s; logs in {logs}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(
        found,
        (EXPECTED_PATH_MTU, EXPECTED_PATH_MTU),
        "logs in {logs}"
    );

    let sink = mesh.overlay_address(1);
    let outcome =
        narrow_path::transfer_through(&hosts, sink, 5301, TRANSFER_BYTES, Duration::from_secs(10));
    let TransferOutcome::Verified(report) = outcome else {
        panic!("fjord black-holed: {outcome:?}; logs in {logs}");
    };
    eprintln!("fjord across the trap: {report}");
    // The inner sender heard "fragmentation needed" from the tunnel
    // interface: its kernel caches the lowered MTU for the destination.
    let route = hosts
        .left
        .ip(&["-4", "route", "get", &sink.to_string()])
        .expect("ip route get");
    assert!(
        route.contains(&format!("mtu {EXPECTED_INNER_MTU}")),
        "no cached path MTU for {sink}: {route}"
    );
    // Nodes stop before wireguard-go takes the same overlay addresses.
    drop(mesh);

    let wireguard_go = WireguardGo::locate();
    if let Err(why) = wireguard_go.installed() {
        assert!(!systems::missing_is_failure(), "{why} (CI=true)");
        eprintln!("skipping the wireguard-go half: {why}");
        return;
    }
    let (left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let left = wireguard_go
        .start(&hosts.left, &left_side, workdir.path())
        .expect("wireguard-go up (left)");
    let right = wireguard_go
        .start(&hosts.right, &right_side, workdir.path())
        .expect("wireguard-go up (right)");
    traffic::wait_for_ping(
        &hosts.left,
        std::net::IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .expect("small packets pass wireguard-go");
    let outcome = narrow_path::transfer_through(
        &hosts,
        std::net::IpAddr::V4(RIGHT_OVERLAY),
        5302,
        TRANSFER_BYTES,
        Duration::from_secs(5),
    );
    eprintln!("wireguard-go across the trap: {outcome:?}");
    // wireguard-go's GSO batches leave without Don't Fragment; the router
    // fragments them and drops the fragments (see `narrow_path`).
    assert!(
        !outcome.is_verified(),
        "wireguard-go crossed the trap: the trap does not trap"
    );
    drop((left, right));
}
