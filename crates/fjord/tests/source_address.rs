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

mod support;

use std::io::BufRead;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fjord_lab::netns::Namespace;
use fjord_lab::systems::WorkDir;
use fjord_lab::systems::wireguard::{self, Implementation, Initiator, Interface, WireguardGo};
use fjord_lab::topology::{HOST_LINK, LEFT_OVERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic;

/// The answering host's second IPv4 address, on the same subnet.
const SECOND_V4: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 3);
const PEER_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 1);
const FIRST_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 2);
const SECOND_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0x5a, 0, 0, 0, 0, 0, 3);

use support::fjord;

/// Echo replies seen before the source address goes: the pings are under way.
const REPLIES_BEFORE_REMOVAL: usize = 20;

fn ready(test: &str, peer: &dyn Implementation) -> bool {
    support::ready_unless(test, peer.installed().err().into_iter().collect())
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

/// `peer` on the left host aiming at the right host's `second` address,
/// fjord on the right on the wildcard, up and pinging. The sides drop
/// before the work directory, then the namespaces.
struct Aimed {
    left: Interface,
    right: Interface,
    /// Where the peer aims: `second`, fjord's port.
    target: SocketAddr,
    _workdir: WorkDir,
}

impl Aimed {
    fn up(test: &str, hosts: &TwoHosts, peer: &dyn Implementation, second: IpAddr) -> Self {
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
        let aimed = Self {
            left,
            right,
            target,
            _workdir: workdir,
        };
        traffic::wait_for_ping(
            &hosts.left,
            IpAddr::V4(RIGHT_OVERLAY),
            Duration::from_secs(20),
        )
        .unwrap_or_else(|error| panic!("{}", aimed.context(&format!("first ping: {error}"))));
        aimed
    }

    fn context(&self, what: &str) -> String {
        support::with_logs(what, &[&self.left, &self.right])
    }
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
    let aimed = Aimed::up(test, &hosts, peer, second);
    let (target, context) = (aimed.target, |what: &str| aimed.context(what));
    traffic::ping(&hosts.right, IpAddr::V4(LEFT_OVERLAY), 3)
        .unwrap_or_else(|error| panic!("{}", context(&format!("ping back: {error}"))));
    traffic::ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), 3)
        .unwrap_or_else(|error| panic!("{}", context(&format!("ping again: {error}"))));

    let stats = aimed
        .left
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
    let aimed = Aimed::up(test, &hosts, &peer, second);
    let context = |what: &str| aimed.context(what);

    let pings = 300;
    let mut ping = hosts
        .right
        .command("ping")
        .args(["-n", "-i", "0.01", "-W", "1", "-c", &pings.to_string()])
        .arg(LEFT_OVERLAY.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start ping");
    // ping's lines as they come, so the address goes while echoes flow.
    let (lines, received) = mpsc::channel();
    let stdout = ping.stdout.take().expect("ping's stdout is piped");
    let reader = std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    let mut text = String::new();
    let mut replies = 0;
    let deadline = Instant::now() + Duration::from_secs(10);
    while replies < REPLIES_BEFORE_REMOVAL {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = received.recv_timeout(left).unwrap_or_else(|_| {
            panic!(
                "{}",
                context(&format!(
                    "{replies} echo replies, not {REPLIES_BEFORE_REMOVAL}, within 10 s:\n{text}"
                ))
            )
        });
        replies += usize::from(line.contains(" bytes from "));
        text.push_str(&line);
        text.push('\n');
    }
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
    ping.wait().expect("ping ends");
    reader.join().expect("ping reader");
    for line in received.try_iter() {
        text.push_str(&line);
        text.push('\n');
    }
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
