//! Switch mode end to end: three fjord nodes on a LAN of namespaces, each
//! with a TAP interface (`Mode = switch`) holding 198.19.0.N/24 and
//! fd00::N/64, every node a peer of the other two. Each pair pings over
//! IPv4 and IPv6, which works only if ARP and neighbour discovery cross
//! the switch (the neighbour tables must then hold each other's TAP MAC
//! addresses, which come from their public keys); a digest-checked TCP
//! transfer crosses it over each family. Two more tests pair a switch with
//! a router, where each side drops the other's traffic, counts it and says
//! why in its log once, and with wireguard-go, where the switch does.
//!
//! Needs root; without it the tests skip with one line (fail under CI).

mod support;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::wireguard::{self, Implementation, Initiator, Interface, WireguardGo};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{Lan, TwoHosts, lan_overlay};
use fjord_lab::traffic::{self, BulkTransfer};

const NODES: usize = 3;
const PING_TIMEOUT: Duration = Duration::from_secs(10);
const TRANSFER_BYTES: u64 = 16 << 20;

fn overlay_v4(node: usize) -> IpAddr {
    IpAddr::V4(lan_overlay(node))
}

fn overlay_v6(node: usize) -> IpAddr {
    IpAddr::V6(std::net::Ipv6Addr::new(
        0xfd00,
        0,
        0,
        0,
        0,
        0,
        0,
        node as u16 + 1,
    ))
}

/// The MAC address of `ifname` in `namespace`, as `ip link` prints it.
fn mac_address(namespace: &Namespace, ifname: &str) -> String {
    let link = namespace
        .ip(&["-o", "link", "show", "dev", ifname])
        .expect("ip link show");
    link.split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .unwrap_or_else(|| panic!("{ifname} is no Ethernet interface: {link}"))
        .to_string()
}

/// The link-layer address `namespace` resolved `address` to on `ifname`.
fn neighbour(namespace: &Namespace, ifname: &str, address: IpAddr) -> Option<String> {
    let shown = namespace
        .ip(&["neigh", "show", "dev", ifname, "to", &address.to_string()])
        .expect("ip neigh show");
    shown
        .split_whitespace()
        .skip_while(|word| *word != "lladdr")
        .nth(1)
        .map(str::to_string)
}

fn logs<'a>(nodes: impl IntoIterator<Item = &'a Interface>) -> String {
    nodes
        .into_iter()
        .map(|node| {
            format!(
                "\n--- {} log:{}",
                node.ifname(),
                systems::log_tail(node.log_path(), 30)
            )
        })
        .collect()
}

#[test]
fn three_switch_nodes_carry_arp_neighbour_discovery_and_transfers() {
    if !support::ready("switch") {
        return;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = WorkDir::create("switch").expect("work directory");
    let sides = wireguard::full_mesh(&lan.mesh_hosts()).expect("keys");
    let fjord = support::fjord().in_switch_mode();
    let nodes: Vec<Interface> = sides
        .iter()
        .zip(&lan.hosts)
        .map(|(side, host)| {
            fjord
                .start(host, side, workdir.path())
                .unwrap_or_else(|error| panic!("start {}: {error}", side.ifname))
        })
        .collect();
    let macs: Vec<String> = nodes
        .iter()
        .zip(&lan.hosts)
        .map(|(node, host)| mac_address(host, node.ifname()))
        .collect();
    for (side, mac) in sides.iter().zip(&macs) {
        let from_key = fjord_mesh::switch::MacAddress::for_node(&side.public_key());
        assert_eq!(
            *mac,
            from_key.to_string(),
            "the TAP's address comes from its key"
        );
    }

    // Every pair, both families: the first echo of each waits for ARP or
    // neighbour discovery (and IPv6's duplicate address detection).
    for from in 0..NODES {
        for to in (0..NODES).filter(|&to| to != from) {
            for address in [overlay_v4(to), overlay_v6(to)] {
                traffic::wait_for_ping(&lan.hosts[from], address, PING_TIMEOUT).unwrap_or_else(
                    |error| panic!("node{from} to node{to}: {error}{}", logs(&nodes)),
                );
                assert_eq!(
                    neighbour(&lan.hosts[from], nodes[from].ifname(), address).as_deref(),
                    Some(macs[to].as_str()),
                    "node{from} resolved {address} to node{to}'s TAP address"
                );
            }
        }
    }
    eprintln!("switch: all six pairs ping over IPv4 and IPv6; neighbours resolved to {macs:?}");

    for (from, to, address) in [(0, 2, overlay_v4(2)), (2, 1, overlay_v6(1))] {
        let report = BulkTransfer::new(TRANSFER_BYTES)
            .timeout(Duration::from_secs(60))
            .run(
                &lan.hosts[from],
                &lan.hosts[to],
                SocketAddr::new(address, 5301),
            )
            .unwrap_or_else(|error| {
                panic!("transfer node{from} to node{to}: {error}{}", logs(&nodes))
            });
        assert!(report.verified, "{report}");
        assert_eq!(report.bytes, TRANSFER_BYTES);
        eprintln!(
            "switch: node{from} to node{to} ({address}): {:.3} Gbit/s",
            report.throughput_gbit_per_sec()
        );
    }

    for node in &nodes {
        let shown = support::show_json(node.ifname());
        assert_eq!(shown.drops("mode_mismatch"), 0, "{:?}", shown.drops);
        assert_eq!(shown.drops("source_not_allowed"), 0, "{:?}", shown.drops);
        // Its own TAP's address and one behind each peer.
        assert_eq!(shown.switch_mac_addresses, Some(NODES as u64));
    }
}

/// A switch on the left beside `peer` on the right, both started with
/// each other's endpoint; fields drop in order, the namespaces last.
struct Mismatch {
    switch: Interface,
    peer: Interface,
    _workdir: WorkDir,
    _hosts: TwoHosts,
}

/// Starts a switch beside `peer` (which carries IP packets) and checks what
/// a user would see on the switch: nothing gets through either way, and
/// the switch counts the peer's packets as `mode_mismatch` and says why in
/// its log once.
fn switch_beside(peer: &dyn Implementation) -> Mismatch {
    let hosts = TwoHosts::direct().expect("two hosts");
    let workdir = WorkDir::create("switch-mismatch").expect("work directory");
    let (left_side, right_side) = wireguard::point_to_point(Initiator::Both).expect("keys");
    let switch = support::fjord()
        .in_switch_mode()
        .start(&hosts.left, &left_side, workdir.path())
        .expect("start the switch");
    let peer = peer
        .start(&hosts.right, &right_side, workdir.path())
        .expect("start the peer");
    // Each side sends the other what it carries: the peer IP packets, the
    // switch ARP requests. Nothing gets through.
    let ping_peer = traffic::ping(&hosts.left, support::right_overlay(), 3);
    let ping_switch = traffic::ping(&hosts.right, support::left_overlay(), 3);
    assert!(ping_peer.is_err() && ping_switch.is_err());

    let says = |text: &str| {
        support::log_lines(&switch)
            .iter()
            .filter(|line| line.contains(text))
            .count()
    };
    let warning = "peer sends IP packets, but this interface is a switch";
    let warned = netns::wait_until(Duration::from_secs(5), "the switch to warn", || {
        says(warning) > 0
    });
    assert!(warned.is_ok(), "{warned:?}{}", logs([&switch, &peer]));
    assert_eq!(says(warning), 1, "{}", logs([&switch, &peer]));
    assert!(support::show_json(switch.ifname()).drops("mode_mismatch") >= 1);
    Mismatch {
        switch,
        peer,
        _workdir: workdir,
        _hosts: hosts,
    }
}

#[test]
fn a_switch_and_a_router_refuse_each_other_and_say_why_once() {
    if !support::ready("switch_mismatch") {
        return;
    }
    let mismatch = switch_beside(&support::fjord());
    let router = &mismatch.peer;
    let warned = netns::wait_until(Duration::from_secs(5), "the router to warn", || {
        support::log_lines(router)
            .iter()
            .any(|line| line.contains("WARN"))
    });
    let both = || logs([&mismatch.switch, router]);
    assert!(warned.is_ok(), "{warned:?}{}", both());
    let router_says = |text: &str| {
        support::log_lines(router)
            .iter()
            .filter(|line| line.contains(text))
            .count()
    };
    assert_eq!(
        router_says(
            "peer sends Ethernet frames (it is fjord in switch mode), but this interface is a router"
        ),
        1,
        "{}",
        both()
    );
    let shown_router = support::show_json(router.ifname());
    assert!(shown_router.drops("mode_mismatch") >= 1);
    assert_eq!(shown_router.switch_mac_addresses, None);
}

#[test]
fn a_switch_refuses_a_plain_wireguard_peer_and_says_why_once() {
    let wireguard_go = WireguardGo::locate();
    if !support::ready("switch_plain_peer") {
        return;
    }
    if let Err(why) = wireguard_go.installed() {
        assert!(!systems::missing_is_failure(), "{why} (CI=true)");
        eprintln!("skipping: {why}");
        return;
    }
    // wireguard-go decrypts the switch's frames and drops them as invalid
    // IP packets, silently: the switch's side is the one that explains.
    switch_beside(&wireguard_go);
}
