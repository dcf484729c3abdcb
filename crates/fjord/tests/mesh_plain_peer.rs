//! A mesh member stays a plain WireGuard peer to plain WireGuard peers: a
//! fjord interface with a `[Mesh]` section and a classic `[Peer]` for
//! wireguard-go, in the same process, handshakes with wireguard-go and
//! carries a verified transfer each way, and never lists it as a member
//! (fjord sends its mesh messages only to peers that proved they are
//! fjord).
//!
//! Needs root and wireguard-go; a missing one skips the test with one
//! line, except under CI (`CI=true`), where it fails.

use std::net::{IpAddr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

mod support;

use fjord_lab::netns;
use fjord_lab::systems::wireguard::{self, Implementation, Initiator, WireguardGo};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{LEFT_OVERLAY, RIGHT_OVERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkTransfer};

const TRANSFER_BYTES: u64 = 16 << 20;

#[test]
fn a_mesh_member_talks_to_wireguard_go_as_a_plain_peer() {
    let wireguard_go = WireguardGo::locate();
    let mut missing = Vec::new();
    if !netns::is_root() {
        missing.push("needs root (network namespaces)".to_string());
    }
    if let Err(why) = wireguard_go.installed() {
        missing.push(why);
    }
    if !missing.is_empty() {
        let why = missing.join("; ");
        assert!(!systems::missing_is_failure(), "{why} (CI=true)");
        eprintln!("skipping: {why}");
        return;
    }
    let hosts = TwoHosts::direct().expect("two hosts");
    let workdir = WorkDir::create("mesh-plain-peer").expect("work directory");
    let (fjord_side, plain_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let plain = wireguard_go
        .start(&hosts.right, &plain_side, workdir.path())
        .expect("wireguard-go up");

    // The fjord side: the point-to-point config plus a mesh of its own.
    let (network, certificate_path) = support::lone_member(workdir.path(), &fjord_side, "member");
    let config = format!(
        "{}\n[Mesh]\nNetwork = {}\nCertificate = {}\n",
        fjord_side.wg_quick_text().as_str(),
        network.public_key(),
        certificate_path.display()
    );
    let config_path = workdir.path().join(format!("{}.conf", fjord_side.ifname));
    std::fs::write(&config_path, config).unwrap();
    std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let log_path = workdir.path().join("fjord.log");
    let log = std::fs::File::create(&log_path).unwrap();
    let fjord = PathBuf::from(env!("CARGO_BIN_EXE_fjord"));
    let mut command = hosts.left.command(&fjord);
    command
        .arg("up")
        .arg(&config_path)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let fjord_process = hosts.left.spawn(&mut command).expect("fjord up");
    let context = |what: &str| {
        format!(
            "{what}\nfjord log:\n{}",
            std::fs::read_to_string(&log_path).unwrap_or_default()
        )
    };

    traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|error| panic!("{}", context(&format!("first ping: {error}"))));
    traffic::ping(&hosts.right, IpAddr::V4(LEFT_OVERLAY), 3)
        .unwrap_or_else(|error| panic!("{}", context(&error.to_string())));
    for (source, sink, address) in [
        (&hosts.left, &hosts.right, RIGHT_OVERLAY),
        (&hosts.right, &hosts.left, LEFT_OVERLAY),
    ] {
        let report = BulkTransfer::new(TRANSFER_BYTES)
            .timeout(Duration::from_secs(60))
            .run(source, sink, SocketAddr::new(IpAddr::V4(address), 5401))
            .unwrap_or_else(|error| panic!("{}", context(&format!("transfer: {error}"))));
        assert!(report.verified, "{report}");
    }

    let shown = hosts
        .left
        .exec(
            fjord.to_str().unwrap(),
            &["show", &fjord_side.ifname, "--json"],
        )
        .expect("fjord show");
    let report: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    assert_eq!(
        report[0]["members"].as_array().map(Vec::len),
        Some(0),
        "wireguard-go is a peer, not a member: {shown}"
    );
    assert_eq!(report[0]["peers"].as_array().map(Vec::len), Some(1));
    assert!(
        report[0]["peers"][0]["latest_handshake_unix_secs"].is_u64(),
        "{shown}"
    );
    drop(fjord_process);
    drop(plain);
}
