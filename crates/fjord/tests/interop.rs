//! Interoperability with real WireGuard implementations, in namespaces:
//! fjord against wireguard-go and boringtun, each way round as initiator,
//! and wireguard-go against boringtun to check the drivers themselves.
//!
//! The initiator is the only side with an `Endpoint`, so the responder
//! cannot send first: the initiator's handshake must be accepted as is.
//! Each pair must handshake, ping both ways, and carry 64 MiB each way
//! with identical XXH3-128 digests at both ends.
//!
//! Needs root. A peer that is not installed skips the test with one line,
//! except under CI (`CI=true`), where it fails.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use fjord_lab::netns;
use fjord_lab::systems::wireguard::{
    self, Boringtun, Fjord, Implementation, Initiator, Interface, WireguardGo,
};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{LEFT_OVERLAY, RIGHT_OVERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkTransfer};

const TRANSFER_BYTES: u64 = 64 * 1024 * 1024;
const SINK_PORT: u16 = 5201;

/// The ping above left a packet queued in the responder, so once the
/// initiator's handshake tells it the endpoint it initiates too. When the
/// two responses cross, one side may keep sending on a session the other
/// has already replaced (seen with boringtun → wireguard-go: the replies
/// arrive and are dropped). The protocol's own way out is the initiator's
/// "no reply to data" timer: a new handshake after KEEPALIVE (10 s) +
/// REKEY_TIMEOUT (5 s) + up to 333 ms of jitter. The budget covers it.
const FIRST_PING_BUDGET: Duration = Duration::from_secs(20);

/// One pair at a time: six pairs pushing 64 MiB each on two cores starved
/// each other's handshakes (a first ping missed its 10 s twice), and the
/// throughput they print means more without neighbours.
static ONE_PAIR_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn fjord() -> Fjord {
    Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")))
}

/// Whether the test can run; a missing prerequisite skips it, or fails it
/// under CI.
fn ready(test: &str, implementations: &[&dyn Implementation]) -> bool {
    let mut missing = Vec::new();
    if !netns::is_root() {
        missing.push("needs root (network namespaces)".to_string());
    }
    for implementation in implementations {
        if let Err(why) = implementation.installed() {
            missing.push(why);
        }
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    assert!(
        !systems::missing_is_failure(),
        "{test}: {why} (CI=true: a missing peer is a failure)"
    );
    eprintln!("skipping {test}: {why}");
    false
}

/// `initiator` on the left host, `responder` on the right; only the left
/// knows the right's endpoint.
fn pair(test: &str, initiator: &dyn Implementation, responder: &dyn Implementation) {
    if !ready(test, &[initiator, responder]) {
        return;
    }
    // A panicking pair poisons the lock; the next one can still run.
    let _turn = ONE_PAIR_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let hosts = TwoHosts::direct().expect("build two hosts");
    let workdir = WorkDir::create(test).expect("work directory");
    let (left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let left_overlay = IpAddr::V4(LEFT_OVERLAY);
    let right_overlay = IpAddr::V4(RIGHT_OVERLAY);

    // The responder first, so the first initiation finds it listening.
    let right: Interface = responder
        .start(&hosts.right, &right_side, workdir.path())
        .unwrap_or_else(|error| panic!("start {} (responder): {error}", responder.name()));
    // Without an endpoint the responder has nowhere to send a handshake.
    // (Asked before the initiator starts: fjord handshakes as it comes up.)
    assert!(
        traffic::ping(&hosts.right, left_overlay, 1).is_err(),
        "the responder reached the initiator before any handshake\n{}",
        logs(&[&right])
    );
    let left: Interface = initiator
        .start(&hosts.left, &left_side, workdir.path())
        .unwrap_or_else(|error| panic!("start {} (initiator): {error}", initiator.name()));
    let context = |what: &str| format!("{what}\n{}", logs(&[&left, &right]));

    let waited = traffic::wait_for_ping(&hosts.left, right_overlay, FIRST_PING_BUDGET)
        .unwrap_or_else(|error| panic!("{}", context(&format!("first ping: {error}"))));
    eprintln!(
        "{test}: {} → {} handshake and first ping in {waited:?}",
        initiator.name(),
        responder.name()
    );
    for side in [&left, &right] {
        check_handshake(side, &context);
    }
    traffic::ping(&hosts.left, right_overlay, 3)
        .unwrap_or_else(|error| panic!("{}", context(&error.to_string())));
    traffic::ping(&hosts.right, left_overlay, 3)
        .unwrap_or_else(|error| panic!("{}", context(&error.to_string())));
    // Echoes over the tunnel's MTU leave as IPv4 fragments, which fjord
    // re-cuts into halves when it sends and joins when it receives.
    for (from, to) in [(&hosts.left, right_overlay), (&hosts.right, left_overlay)] {
        traffic::ping_over_tunnel_mtu(from, to)
            .unwrap_or_else(|error| panic!("{}", context(&error.to_string())));
    }

    let transfer = BulkTransfer::new(TRANSFER_BYTES).timeout(Duration::from_secs(90));
    for (direction, source, sink, sink_address) in [
        (
            "initiator → responder",
            &hosts.left,
            &hosts.right,
            right_overlay,
        ),
        (
            "responder → initiator",
            &hosts.right,
            &hosts.left,
            left_overlay,
        ),
    ] {
        let report = transfer
            .run(source, sink, SocketAddr::new(sink_address, SINK_PORT))
            .unwrap_or_else(|error| {
                panic!("{}", context(&format!("{direction} transfer: {error}")))
            });
        eprintln!("{test}: {direction}: {report}");
        assert!(
            report.verified,
            "{}",
            context(&format!("{direction}: {report:?}"))
        );
        assert_eq!(report.bytes, TRANSFER_BYTES);
        assert_eq!(report.sender_digest, report.receiver_digest);
    }
    // Sides stop (and remove their interfaces) before the namespaces go.
    drop(left);
    drop(right);
}

/// Where the side answers `wg show`, its one peer has completed a handshake
/// (boringtun does not report handshake times as a responder, so received
/// bytes count too).
fn check_handshake(side: &Interface, context: &dyn Fn(&str) -> String) {
    let Some(stats) = side.peer_stats() else {
        return;
    };
    let stats = stats.unwrap_or_else(|error| panic!("{}", context(&format!("wg show: {error}"))));
    assert_eq!(
        stats.len(),
        1,
        "{}",
        context(&format!("{} peers: {stats:?}", side.implementation()))
    );
    assert!(
        stats[0].latest_handshake.is_some() || stats[0].rx_bytes > 0,
        "{}",
        context(&format!(
            "{} reports no handshake: {stats:?}",
            side.implementation()
        ))
    );
}

fn logs(sides: &[&Interface]) -> String {
    sides
        .iter()
        .map(|side| {
            format!(
                "--- {} ({}) log:{}",
                side.implementation(),
                side.ifname(),
                systems::log_tail(side.log_path(), 30)
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn wireguard_go_initiates_to_boringtun() {
    pair(
        "wireguard_go_initiates_to_boringtun",
        &WireguardGo::locate(),
        &Boringtun::locate(),
    );
}

#[test]
fn boringtun_initiates_to_wireguard_go() {
    pair(
        "boringtun_initiates_to_wireguard_go",
        &Boringtun::locate(),
        &WireguardGo::locate(),
    );
}

#[test]
fn fjord_initiates_to_wireguard_go() {
    pair(
        "fjord_initiates_to_wireguard_go",
        &fjord(),
        &WireguardGo::locate(),
    );
}

#[test]
fn wireguard_go_initiates_to_fjord() {
    pair(
        "wireguard_go_initiates_to_fjord",
        &WireguardGo::locate(),
        &fjord(),
    );
}

#[test]
fn fjord_initiates_to_boringtun() {
    pair(
        "fjord_initiates_to_boringtun",
        &fjord(),
        &Boringtun::locate(),
    );
}

#[test]
fn boringtun_initiates_to_fjord() {
    pair(
        "boringtun_initiates_to_fjord",
        &Boringtun::locate(),
        &fjord(),
    );
}
