//! Routes behind members and exit nodes, end to end in namespaces.
//!
//! A LAN behind a member: node1's certificate routes 198.18.200.0/24, a
//! namespace behind node1 holds 198.18.200.2, and node0 pings it through
//! the mesh, until node1 leaves and the route goes. An exit node: node1's certificate routes 0.0.0.0/0, node0
//! sets `ExitNode = node1` and reaches 198.19.201.1, which only a
//! namespace beyond node1 holds, while its own datagrams to the members
//! still leave directly; node2, which chose no exit node, has no route
//! there. (198.19.201.0/24 stands for "the internet": every 198.18.x.x is
//! on the mesh's own LAN, whose route would win over a default route.)
//! A reload naming node2, which offers no default route, shows a warning
//! and takes the route away; its policy rules are gone once node0 stops.
//! Namespaces and processes go when the test ends, also when it fails.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::mesh::RunningFjordMesh;
use fjord_lab::systems::{self, RunningMesh};
use fjord_lab::topology::Lan;
use support::mesh::{configure, start_direct_mesh};

const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// Routes follow the mesh within a poll (half a second) of a change.
const ROUTE_TIMEOUT: Duration = Duration::from_secs(10);

/// The interface of `node` (named as its config file is).
fn ifname(mesh: &RunningFjordMesh, node: usize) -> String {
    let path: &Path = mesh.config_path(node);
    let stem = path.file_stem().expect("a config file name");
    stem.to_string_lossy().into_owned()
}

/// A namespace joined to `router` by a veth: the router gets `router_address`
/// on it and forwards; the namespace gets `address` and a route back to
/// the overlay through the router.
fn network_behind(router: &Namespace, router_address: &str, address: &str) -> Namespace {
    let behind = Namespace::create("behind").expect("namespace behind the member");
    netns::veth(router, "behind0", &behind, "eth0").expect("veth");
    router
        .ip(&["addr", "add", router_address, "dev", "behind0"])
        .expect("router address");
    behind
        .ip(&["addr", "add", address, "dev", "eth0"])
        .expect("address behind");
    let gateway = router_address.split('/').next().expect("an address");
    behind
        .ip(&["route", "add", "198.19.0.0/16", "via", gateway])
        .expect("route back to the overlay");
    router
        .exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])
        .expect("forwarding on");
    behind
}

/// Whether one ping from `host` to `address` is answered within a second.
fn pings(host: &Namespace, address: &str) -> bool {
    host.command("ping")
        .args(["-c", "1", "-W", "1", address])
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Pings until answered or `ROUTE_TIMEOUT` passes.
fn wait_for_ping(host: &Namespace, address: &str) -> bool {
    netns::wait_until(ROUTE_TIMEOUT, address, || pings(host, address)).is_ok()
}

/// What `ip route get ADDRESS` answers in `host` (its error, if none).
fn route_to(host: &Namespace, address: &str) -> String {
    match host.ip(&["route", "get", address]) {
        Ok(route) => route,
        Err(error) => error.to_string(),
    }
}

fn fjord_show(ifname: &str, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .arg("show")
        .arg(ifname)
        .args(args)
        .output()
        .expect("run fjord show");
    assert!(output.status.success(), "fjord show {ifname}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

#[test]
fn a_member_reaches_the_lan_behind_another() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(2).expect("a LAN of two hosts");
    let (_workdir, mut mesh) = configure(&lan.mesh_hosts(), "mesh-routes-lan");
    mesh.renew_certificate_routing(1, "1h", &["198.18.200.0/24"])
        .expect("node1 signed with its LAN");
    let behind = network_behind(&lan.hosts[1], "198.18.200.1/24", "198.18.200.2/24");
    start_direct_mesh(&mut mesh, &[0, 1], CONVERGENCE_TIMEOUT);

    assert!(
        wait_for_ping(&lan.hosts[0], "198.18.200.2"),
        "node0 does not reach the LAN behind node1; its route: {}",
        route_to(&lan.hosts[0], "198.18.200.2")
    );
    assert!(
        route_to(&lan.hosts[0], "198.18.200.2").contains(&ifname(&mesh, 0)),
        "not through the mesh"
    );
    let shown = fjord_show(&ifname(&mesh, 0), &[]);
    assert!(shown.contains(", routes 198.18.200.0/24, "), "{shown}");
    let json: serde_json::Value =
        serde_json::from_str(&fjord_show(&ifname(&mesh, 0), &["--json"])).expect("JSON");
    assert_eq!(
        json[0]["members"][0]["routes"],
        serde_json::json!(["198.18.200.0/24"])
    );

    // node1 leaves: its LAN is no longer routed into the mesh.
    mesh.stop_node(1);
    let withdrawn = netns::wait_until(ROUTE_TIMEOUT, "the LAN's route to go", || {
        !route_to(&lan.hosts[0], "198.18.200.2").contains(&ifname(&mesh, 0))
    });
    assert!(withdrawn.is_ok(), "{withdrawn:?}");
    drop(mesh);
    drop(behind);
    drop(lan);
}

#[test]
fn a_member_sends_everything_else_through_its_exit_node() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let lan = Lan::new(3).expect("a LAN of three hosts");
    let (_workdir, mut mesh) = configure(&lan.mesh_hosts(), "mesh-routes-exit");
    mesh.renew_certificate_routing(1, "1h", &["0.0.0.0/0"])
        .expect("node1 signed as an exit node");
    let config = mesh.config_path(0).to_path_buf();
    let mut text = std::fs::read_to_string(&config).expect("node0's config");
    text.push_str("ExitNode = node1\n");
    std::fs::write(&config, text).expect("ExitNode added");
    let internet = network_behind(&lan.hosts[1], "198.19.201.254/24", "198.19.201.1/24");
    start_direct_mesh(&mut mesh, &[0, 1, 2], CONVERGENCE_TIMEOUT);

    assert!(
        wait_for_ping(&lan.hosts[0], "198.19.201.1"),
        "node0 does not reach beyond its exit node; its route: {}\n{}",
        route_to(&lan.hosts[0], "198.19.201.1"),
        fjord_show(&ifname(&mesh, 0), &[])
    );
    assert!(
        fjord_show(&ifname(&mesh, 0), &[]).contains("  exit node: node1 (everything"),
        "{}",
        fjord_show(&ifname(&mesh, 0), &[])
    );
    // The tunnel's own datagrams still leave on the LAN: node0 reaches
    // node2 through the mesh and lists everyone as direct.
    assert!(pings(&lan.hosts[0], &mesh.overlay_address(2).to_string()));
    let listed = mesh.members(0).expect("node0 answers");
    assert!(
        listed.len() == 2 && listed.iter().all(|m| m.path == systems::MemberPath::Direct),
        "{listed:#?}"
    );

    // node2 chose no exit node: nothing of node1's default route is its.
    assert!(!pings(&lan.hosts[2], "198.19.201.1"));
    let route = route_to(&lan.hosts[2], "198.19.201.1");
    assert!(!route.contains(&ifname(&mesh, 2)), "{route}");
    let node2: serde_json::Value =
        serde_json::from_str(&fjord_show(&ifname(&mesh, 2), &["--json"])).expect("JSON");
    let default_routed = node2[0]["peers"]
        .as_array()
        .expect("peers")
        .iter()
        .any(|peer| peer["allowed_ips"].to_string().contains("0.0.0.0/0"));
    assert!(!default_routed, "{node2:#}");

    // A reload naming a member that offers no default route: a warning
    // in `fjord show`, and nothing goes to node1 any more.
    let text = std::fs::read_to_string(&config).expect("node0's config");
    std::fs::write(
        &config,
        text.replace("ExitNode = node1", "ExitNode = node2"),
    )
    .expect("ExitNode changed");
    let reloaded = mesh.reload(0).expect("reload");
    assert!(reloaded.contains("exit node now node2"), "{reloaded}");
    let shown = fjord_show(&ifname(&mesh, 0), &[]);
    assert!(
        shown.contains("  exit node: node2: warning: its certificate routes no 0.0.0.0/0"),
        "{shown}"
    );
    let withdrawn = netns::wait_until(ROUTE_TIMEOUT, "the default route to go", || {
        !route_to(&lan.hosts[0], "198.19.201.1").contains(&ifname(&mesh, 0))
    });
    assert!(withdrawn.is_ok(), "{withdrawn:?}");

    mesh.stop_node(0);
    let rules = lan.hosts[0].ip(&["rule", "show"]).expect("ip rule");
    assert!(
        !rules.contains("fwmark") && !rules.contains("suppress_prefixlength"),
        "policy rules left after stopping: {rules}"
    );
    drop(mesh);
    drop(internet);
    drop(lan);
}
