//! Mesh members behind real Linux NATs (nftables masquerade in
//! namespaces, a router between the sites) find each other from one
//! bootstrap member: two port-preserving NATs meet directly through a
//! rendezvous and carry a digest-checked transfer through the punched
//! hole; a member behind a symmetric NAT meets a port-preserving one
//! directly by port prediction; two symmetric members, which nothing
//! predicts, are relayed by the public member. Each path carries a
//! digest-checked transfer.
//!
//! Needs root and nft; without root the test skips with one line (fails
//! under CI).

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_lab::nat::NatKind;
use fjord_lab::systems::{MemberPath, RunningMesh};
use fjord_lab::traffic::BulkTransfer;
use support::mesh::{configure, lists_on, nat_internet, start_nodes, time_until_direct};

const TRANSFER_BYTES: u64 = 8 << 20;

#[test]
fn members_behind_nats_meet_through_a_rendezvous() {
    let kinds = [
        NatKind::Public,
        NatKind::PortPreserving,
        NatKind::PortPreserving,
        NatKind::Symmetric,
        NatKind::Symmetric,
    ];
    let Some(internet) = nat_internet(&kinds) else {
        return;
    };
    let (workdir, mut mesh) = configure(&internet.mesh_hosts(), "mesh-nat");
    let started = Instant::now();
    start_nodes(&mut mesh, kinds.len());

    for (index, kind) in kinds.iter().enumerate().skip(1) {
        let took = time_until_direct(&mut mesh, (0, index), started, Duration::from_secs(20));
        assert!(
            took.is_some(),
            "{} member never reached the public one; logs in {}",
            kind.name(),
            workdir.path().display()
        );
    }
    let took = time_until_direct(&mut mesh, (1, 2), started, Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!(
                "two port-preserving NATs never met directly; logs in {}",
                workdir.path().display()
            )
        });
    eprintln!("port-preserving <-> port-preserving: direct {took:.2?} after start");

    let report = BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(60))
        .run(
            &internet.sites[1].host,
            &internet.sites[2].host,
            SocketAddr::new(mesh.overlay_address(2), 5201),
        )
        .expect("transfer through the punched hole");
    assert!(report.verified, "{report}");
    assert_eq!(report.bytes, TRANSFER_BYTES);

    // A symmetric NAT maps each destination to a new random port, which
    // no member can see; port prediction finds one of the many mappings
    // the symmetric side opens toward the port-preserving one.
    let took = time_until_direct(&mut mesh, (1, 3), started, Duration::from_secs(30))
        .unwrap_or_else(|| {
            panic!(
                "port prediction never met the symmetric member; logs in {}",
                workdir.path().display()
            )
        });
    eprintln!("port-preserving <-> symmetric: direct {took:.2?} after start");
    let symmetric_log = std::fs::read_to_string(mesh.dir().join("node3.log")).unwrap_or_default();
    assert!(
        symmetric_log.contains("port prediction met a member"),
        "the symmetric member's log names no port prediction hit:\n{symmetric_log}"
    );
    // What `fjord show` prints: the port-preserving side counts the
    // rendezvous in which it sprayed predicted ports.
    let predictions = mesh
        .mesh_counter(1, "port_predictions")
        .expect("the port-preserving member's counters");
    assert!(predictions >= 1, "port_predictions = {predictions}");
    let report = BulkTransfer::new(TRANSFER_BYTES / 2)
        .timeout(Duration::from_secs(60))
        .run(
            &internet.sites[3].host,
            &internet.sites[1].host,
            SocketAddr::new(mesh.overlay_address(1), 5202),
        )
        .expect("transfer through the predicted port");
    assert!(report.verified, "{report}");

    // Two symmetric NATs: each side's mapping is random, so the public
    // member relays them, end to end encrypted.
    let through_node0 = MemberPath::Relayed {
        via: "node0".to_string(),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lists_on(&mut mesh, 3, 4, &through_node0) {
        assert!(
            Instant::now() < deadline,
            "the symmetric members never reached each other through the relay; logs in {}",
            workdir.path().display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "symmetric <-> symmetric: relayed {:.2?} after start",
        started.elapsed()
    );
    let report = BulkTransfer::new(TRANSFER_BYTES / 2)
        .timeout(Duration::from_secs(60))
        .run(
            &internet.sites[3].host,
            &internet.sites[4].host,
            SocketAddr::new(mesh.overlay_address(4), 5203),
        )
        .expect("transfer through the relay");
    assert!(report.verified, "{report}");
    assert!(
        lists_on(&mut mesh, 3, 0, &MemberPath::Direct),
        "the symmetric member lost the public member"
    );
    // Nodes stop before their namespaces go.
    drop(mesh);
    drop(internet);
}
