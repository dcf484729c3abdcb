//! fjord↔fjord with UDP between the hosts dropped by nftables: the side
//! that knows the other's endpoint falls back to its carrier (port 443;
//! fake TCP, the default, and real TCP, one test each), a digest-checked transfer crosses it, and once the firewall
//! opens both sides go back to UDP by themselves (the next UDP probe is
//! answered) and the carrier closes; a second transfer then leaves the
//! carrier's counters alone. Checked the way a user would: `fjord show
//! --json`.
//!
//! Needs root and nft; without root the test skips with one line (fails
//! under CI).

mod support;

use std::net::{IpAddr, SocketAddr};
use std::process::Command;
use std::time::{Duration, Instant};

use fjord_lab::firewall::UdpFirewall;
use fjord_lab::systems::wireguard::fallback::{Carrier, FALLBACK_PORT, fallback_pair};
use fjord_lab::systems::wireguard::{Implementation, Interface, LISTEN_PORT};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkTransfer};
use support::{fjord, ready, right_overlay};

const TRANSFER_BYTES: u64 = 8 << 20;
const SINK_PORT: u16 = 5201;

/// What `fjord show --json` says about the fallback of an interface with
/// one peer: the peer's path and endpoint, and the carrier counters.
#[derive(Debug)]
struct Fallback {
    path: Option<String>,
    endpoint: Option<String>,
    counters: serde_json::Map<String, serde_json::Value>,
}

impl Fallback {
    fn count(&self, name: &str) -> u64 {
        self.counters
            .get(name)
            .and_then(serde_json::Value::as_u64)
            .unwrap_or(0)
    }
}

fn fallback_of(side: &Interface) -> Fallback {
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args(["show", side.ifname(), "--json"])
        .output()
        .expect("run fjord show");
    assert!(output.status.success(), "fjord show --json failed");
    let reports: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("fjord show --json prints JSON");
    let report = &reports[0];
    Fallback {
        path: report["fallback"][0]["path"].as_str().map(str::to_string),
        endpoint: report["peers"][0]["endpoint"].as_str().map(str::to_string),
        counters: report["carriers"].as_object().cloned().unwrap_or_default(),
    }
}

/// Waits until `side`'s fallback report satisfies `wanted`.
fn wait_for(
    side: &Interface,
    limit: Duration,
    wanted: impl Fn(&Fallback) -> bool,
) -> Result<Duration, Fallback> {
    let started = Instant::now();
    loop {
        let seen = fallback_of(side);
        if wanted(&seen) {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            return Err(seen);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn blocked_udp_falls_back_to_fake_tcp_and_returns_when_it_opens() {
    falls_back_and_returns(
        "blocked_udp_falls_back_to_fake_tcp_and_returns_when_it_opens",
        Carrier::FakeTcp,
    );
}

#[test]
fn blocked_udp_falls_back_to_tcp_and_returns_when_it_opens() {
    falls_back_and_returns(
        "blocked_udp_falls_back_to_tcp_and_returns_when_it_opens",
        Carrier::Tcp,
    );
}

fn falls_back_and_returns(test: &str, carrier_kind: Carrier) {
    if !ready(test) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    let firewall = UdpFirewall::between(&hosts.left, IpAddr::V4(RIGHT_UNDERLAY)).expect("nftables");
    let workdir = WorkDir::create(test).expect("work directory");
    let (left_side, right_side) = fallback_pair(carrier_kind).expect("keys");
    let fjord = fjord();
    let right = fjord
        .start(&hosts.right, &right_side, workdir.path())
        .expect("start right fjord");
    let left = fjord
        .start(&hosts.left, &left_side, workdir.path())
        .expect("start left fjord");
    let context = |what: &str| {
        let mut text = what.to_string();
        for side in [&left, &right] {
            text.push_str(&format!(
                "\n--- {} log:{}",
                side.ifname(),
                systems::log_tail(side.log_path(), 30)
            ));
        }
        text
    };

    let waited = traffic::wait_for_ping(&hosts.left, right_overlay(), Duration::from_secs(30))
        .unwrap_or_else(|error| {
            panic!("{}", context(&format!("no ping over the carrier: {error}")))
        });
    eprintln!("{test}: first ping over the carrier after {waited:?}");
    let carrier = SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), FALLBACK_PORT).to_string();
    let before = fallback_of(&left);
    assert_eq!(
        before.path.as_deref(),
        Some(format!("carrier {carrier}").as_str()),
        "{}",
        context(&format!("{before:?}"))
    );
    assert_eq!(before.endpoint.as_deref(), Some(carrier.as_str()));
    assert_eq!(before.count("fallback_to_carrier"), 1);

    let sink = SocketAddr::new(right_overlay(), SINK_PORT);
    let over_carrier = BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(120))
        .run(&hosts.left, &hosts.right, sink)
        .unwrap_or_else(|error| {
            panic!(
                "{}",
                context(&format!("transfer over the carrier: {error}"))
            )
        });
    eprintln!("{test}: over the carrier: {over_carrier}");
    assert!(
        over_carrier.verified,
        "{}",
        context(&format!("{over_carrier:?}"))
    );
    let sender = fallback_of(&left);
    assert!(
        sender.count("carrier_datagrams_sent") > TRANSFER_BYTES / 1500,
        "the transfer went out over the carrier: {sender:?}"
    );
    let receiver = fallback_of(&right);
    assert!(
        receiver.count("carrier_datagrams_sent") > 100,
        "its acknowledgements came back through the accepted carrier: {receiver:?}"
    );

    drop(firewall);
    let udp = SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), LISTEN_PORT).to_string();
    let back = wait_for(&left, Duration::from_secs(30), |seen| {
        seen.path.as_deref() == Some("udp") && seen.endpoint.as_deref() == Some(udp.as_str())
    })
    .unwrap_or_else(|seen| panic!("{}", context(&format!("still not on UDP: {seen:?}"))));
    eprintln!("{test}: back on UDP {back:?} after the firewall opened");
    let returned = fallback_of(&left);
    assert_eq!(returned.count("fallback_back_to_udp"), 1);

    let over_udp = BulkTransfer {
        seed: 2,
        ..BulkTransfer::new(TRANSFER_BYTES)
    }
    .timeout(Duration::from_secs(120))
    .run(
        &hosts.left,
        &hosts.right,
        SocketAddr::new(right_overlay(), SINK_PORT + 1),
    )
    .unwrap_or_else(|error| panic!("{}", context(&format!("transfer over UDP: {error}"))));
    eprintln!("{test}: over UDP: {over_udp}");
    assert!(over_udp.verified, "{}", context(&format!("{over_udp:?}")));
    let after = fallback_of(&left);
    assert_eq!(
        after.count("carrier_datagrams_sent"),
        returned.count("carrier_datagrams_sent"),
        "nothing more went over the carrier: {after:?}"
    );
    assert_eq!(after.path.as_deref(), Some("udp"));
}
