//! A host with two IPv4 and two IPv6 addresses on one interface runs fjord
//! on the wildcard address; its peer (wireguard-go, and fjord) is
//! configured with the *second* address. fjord must answer from that
//! address, as WireGuard does: the peer's firewall here drops anything
//! from the first one (as a NAT or a stateful firewall that let the
//! peer's datagram out would), so the handshake completes and pings pass
//! only if every reply leaves from the second address, and the peer's
//! `wg show` endpoint must stay on it.
//!
//! Needs root. A missing wireguard-go skips its cases with one line,
//! except under CI (`CI=true`), where it fails.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::wireguard::{self, Fjord, Implementation, Initiator, WireguardGo};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{HOST_LINK, LEFT_OVERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic;

/// The answering host's second IPv4 address, on the same subnet.
const SECOND_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const PEER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 1);
const FIRST_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 2);
const SECOND_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 3);

fn fjord() -> Fjord {
    Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")))
}

fn ready(test: &str, peer: &dyn Implementation) -> bool {
    let mut missing = Vec::new();
    if !netns::is_root() {
        missing.push("needs root (network namespaces)".to_string());
    }
    if let Err(why) = peer.installed() {
        missing.push(why);
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    assert!(!systems::missing_is_failure(), "{test}: {why} (CI=true)");
    eprintln!("skipping {test}: {why}");
    false
}

/// The right host gets a second IPv4 address and two IPv6 ones, so that
/// the "first" of each family is the kernel's own choice of source: the
/// primary (earliest) address for IPv4, the latest added for IPv6 (among
/// otherwise equal candidates). The left host gets one IPv6 address.
fn add_addresses(hosts: &TwoHosts) {
    let add = |namespace: &Namespace, address: String| {
        namespace
            .ip(&["addr", "add", &address, "dev", HOST_LINK, "nodad"])
            .unwrap_or_else(|error| panic!("add {address}: {error}"));
    };
    add(&hosts.right, format!("{SECOND_V4}/24"));
    add(&hosts.right, format!("{SECOND_V6}/64"));
    add(&hosts.right, format!("{FIRST_V6}/64"));
    add(&hosts.left, format!("{PEER_V6}/64"));
}

/// On the peer's host, drops every datagram from the answering host's
/// first addresses, the ones its kernel would pick by itself.
fn refuse_first_addresses(peer_host: &Namespace) {
    let rules = format!(
        "table inet srcaddr {{\n\
         chain input {{\n\
         type filter hook input priority 0; policy accept;\n\
         ip saddr {RIGHT_UNDERLAY} meta l4proto udp counter drop\n\
         ip6 saddr {FIRST_V6} meta l4proto udp counter drop\n\
         }}\n\
         }}\n"
    );
    let mut command = peer_host.command("nft");
    command.args(["-f", "-"]);
    command.stdin(std::process::Stdio::piped());
    let mut child = command.spawn().expect("run nft");
    std::io::Write::write_all(child.stdin.as_mut().expect("nft stdin"), rules.as_bytes())
        .expect("write rules");
    let status = child.wait().expect("nft");
    assert!(status.success(), "nft refused the rules:\n{rules}");
}

/// `peer` on the left host aims at the right host's second `family`
/// address; fjord on the right listens on the wildcard.
fn answers_from_the_address_it_was_reached_at(
    test: &str,
    peer: &dyn Implementation,
    second: IpAddr,
) {
    if !ready(test, peer) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    add_addresses(&hosts);
    refuse_first_addresses(&hosts.left);
    let workdir = WorkDir::create(test).expect("work directory");
    let (mut left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let target = SocketAddr::new(second, right_side.listen_port);
    left_side.peers[0].endpoint = Some(target);

    let right = fjord()
        .start(&hosts.right, &right_side, workdir.path())
        .unwrap_or_else(|error| panic!("start fjord: {error}"));
    let left = peer
        .start(&hosts.left, &left_side, workdir.path())
        .unwrap_or_else(|error| panic!("start {}: {error}", peer.name()));
    let context = |what: &str| {
        let mut text = what.to_string();
        for side in [&left, &right] {
            text.push_str(&format!(
                "\n--- {} log:{}",
                side.implementation(),
                systems::log_tail(side.log_path(), 30)
            ));
        }
        text
    };

    traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|error| panic!("{}", context(&format!("first ping: {error}"))));
    traffic::ping(&hosts.right, IpAddr::V4(LEFT_OVERLAY), 3)
        .unwrap_or_else(|error| panic!("{}", context(&format!("ping back: {error}"))));
    traffic::ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), 3)
        .unwrap_or_else(|error| panic!("{}", context(&format!("ping again: {error}"))));

    let stats = left
        .peer_stats()
        .expect("the peer answers wg show")
        .unwrap_or_else(|error| panic!("{}", context(&format!("wg show: {error}"))));
    let endpoints: Vec<Option<SocketAddr>> = stats.iter().map(|peer| peer.endpoint).collect();
    assert_eq!(
        endpoints,
        [Some(target)],
        "{}",
        context("the peer's endpoint moved away from the address it aimed at")
    );
    eprintln!("{test}: handshake, pings both ways, endpoint stays {target}");
}

#[test]
fn fjord_answers_wireguard_go_from_its_second_ipv4_address() {
    answers_from_the_address_it_was_reached_at(
        "fjord_answers_wireguard_go_from_its_second_ipv4_address",
        &WireguardGo::locate(),
        IpAddr::V4(SECOND_V4),
    );
}

#[test]
fn fjord_answers_wireguard_go_from_its_second_ipv6_address() {
    answers_from_the_address_it_was_reached_at(
        "fjord_answers_wireguard_go_from_its_second_ipv6_address",
        &WireguardGo::locate(),
        IpAddr::V6(SECOND_V6),
    );
}

#[test]
fn fjord_answers_fjord_from_its_second_ipv4_address() {
    answers_from_the_address_it_was_reached_at(
        "fjord_answers_fjord_from_its_second_ipv4_address",
        &fjord(),
        IpAddr::V4(SECOND_V4),
    );
}

#[test]
fn fjord_answers_fjord_from_its_second_ipv6_address() {
    answers_from_the_address_it_was_reached_at(
        "fjord_answers_fjord_from_its_second_ipv6_address",
        &fjord(),
        IpAddr::V6(SECOND_V6),
    );
}

/// fjord on the right host is reached at its second `second` address,
/// which it keeps as the source for that peer (and binds the peer's own
/// socket to); the address is then removed while the right host pings
/// the left one every 10 ms through the tunnel. As with WireGuard, the
/// next datagram leaves from whatever the route gives: at most the one
/// echo in flight at the moment of removal is lost.
fn a_removed_source_address_costs_at_most_one_ping(test: &str, second: IpAddr, prefix: u8) {
    let peer = fjord();
    if !ready(test, &peer) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    add_addresses(&hosts);
    let workdir = WorkDir::create(test).expect("work directory");
    let (mut left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let target = SocketAddr::new(second, right_side.listen_port);
    left_side.peers[0].endpoint = Some(target);
    let right = fjord()
        .start(&hosts.right, &right_side, workdir.path())
        .unwrap_or_else(|error| panic!("start fjord: {error}"));
    let left = peer
        .start(&hosts.left, &left_side, workdir.path())
        .unwrap_or_else(|error| panic!("start fjord peer: {error}"));
    let context = |what: &str| {
        let mut text = what.to_string();
        for side in [&left, &right] {
            text.push_str(&format!(
                "\n--- {} log:{}",
                side.implementation(),
                systems::log_tail(side.log_path(), 30)
            ));
        }
        text
    };
    traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .unwrap_or_else(|error| panic!("{}", context(&format!("first ping: {error}"))));

    let pings = 300;
    let ping = hosts
        .right
        .command("ping")
        .args(["-n", "-i", "0.01", "-W", "1", "-c", &pings.to_string()])
        .arg(LEFT_OVERLAY.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ping");
    std::thread::sleep(Duration::from_secs(1));
    hosts
        .right
        .ip(&[
            "addr",
            "del",
            &format!("{second}/{prefix}"),
            "dev",
            HOST_LINK,
        ])
        .unwrap_or_else(|error| panic!("remove {second}: {error}"));
    let output = ping.wait_with_output().expect("ping ends");
    let text = String::from_utf8_lossy(&output.stdout);
    let summary = traffic::parse_ping(&text)
        .unwrap_or_else(|| panic!("{}", context(&format!("no ping summary in:\n{text}"))));
    assert_eq!(summary.transmitted, pings, "{text}");
    let lost = summary.transmitted - summary.received;
    assert!(
        lost <= 1,
        "{}",
        context(&format!(
            "{lost} of {pings} pings lost after {second} was removed"
        ))
    );
    eprintln!("{test}: {lost} of {pings} pings (every 10 ms) lost when {second} went away");
}

#[test]
fn a_removed_ipv4_source_address_costs_at_most_one_ping() {
    a_removed_source_address_costs_at_most_one_ping(
        "a_removed_ipv4_source_address_costs_at_most_one_ping",
        IpAddr::V4(SECOND_V4),
        24,
    );
}

#[test]
fn a_removed_ipv6_source_address_costs_at_most_one_ping() {
    a_removed_source_address_costs_at_most_one_ping(
        "a_removed_ipv6_source_address_costs_at_most_one_ping",
        IpAddr::V6(SECOND_V6),
        64,
    );
}
