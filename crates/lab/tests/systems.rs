//! The VPNs the lab compares fjord with — VpnCloud, OpenVPN, strongSwan's
//! IPsec and `ssh -w` — come up between two namespaces, carry pings both
//! ways and a verified TCP bulk transfer, charge CPU time to their
//! processes, and leave no process, tun device, route, file or namespace
//! behind.
//!
//! Each test also measures the bare link on the same hosts just before,
//! and prints both throughputs and their ratio. The tests take turns (one
//! lock), so they do not measure each other.
//!
//! Needs root. A system that is not installed skips its test with one
//! line, except under CI (`CI=true`), where it fails.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use fjord_lab::netns;
use fjord_lab::systems::{self, RunningSystem, System, WorkDir};
use fjord_lab::topology::TwoHosts;
use fjord_lab::traffic::{self, BulkReport, BulkTransfer};

const TRANSFER_BYTES: u64 = 32 << 20;
const SINK_PORT: u16 = 5201;
/// Log lines that say which cipher a system uses.
const CIPHER_LOG_MARKERS: &[&str] = &[
    "Data Channel: cipher",
    "kex: client->server cipher",
    "Crypto speeds",
    "selected proposal: ESP",
];

/// One system at a time: throughput figures are only comparable alone.
static TURN: Mutex<()> = Mutex::new(());

fn system(name: &str) -> Box<dyn System> {
    systems::select(name)
        .unwrap_or_else(|error| panic!("{error}"))
        .remove(0)
}

/// Whether the test can run; a missing prerequisite skips it, or fails it
/// under CI.
fn ready(test: &str, system: &dyn System) -> bool {
    let mut missing = Vec::new();
    if !netns::is_root() {
        missing.push("needs root (network namespaces)".to_string());
    }
    match system.check() {
        Ok(version) => eprintln!("{test}: {} is {version}", system.name()),
        Err(why) => missing.push(why),
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    assert!(
        !systems::missing_is_failure(),
        "{test}: {why} (CI=true: a missing system is a failure)"
    );
    eprintln!("skipping {test}: {why}");
    false
}

fn transfer(hosts: &TwoHosts, running: &dyn RunningSystem) -> BulkReport {
    BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(60))
        .run(
            &hosts.left,
            &hosts.right,
            SocketAddr::new(running.right_address(), SINK_PORT),
        )
        .unwrap_or_else(|error| panic!("bulk transfer to {}: {error}", running.right_address()))
}

/// Lines of the logs under `dir` that name a cipher.
fn cipher_lines(dir: &Path) -> Vec<String> {
    let mut lines = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(
                std::fs::read_dir(&path)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
        } else if path.extension().is_some_and(|ext| ext == "log") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let name = path
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            lines.extend(
                text.lines()
                    .filter(|line| {
                        CIPHER_LOG_MARKERS
                            .iter()
                            .any(|marker| line.contains(marker))
                    })
                    .map(|line| format!("{name}: {}", line.trim())),
            );
        }
    }
    lines
}

fn links(namespace: &netns::Namespace) -> BTreeSet<String> {
    namespace.links().expect("list links").into_iter().collect()
}

fn run_system(test: &str, name: &str) {
    let _turn = TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let system = system(name);
    if !ready(test, system.as_ref()) {
        return;
    }
    let namespaces;
    {
        let hosts = TwoHosts::direct().expect("build two hosts");
        namespaces = [
            hosts.left.name().to_string(),
            hosts.right.name().to_string(),
        ];
        let workdir = WorkDir::create(test).expect("work directory");
        let underlay_links = [links(&hosts.left), links(&hosts.right)];

        let bare = measure_bare(&hosts, workdir.path());

        let running = system
            .start(&hosts, workdir.path())
            .unwrap_or_else(|error| panic!("start {name}: {error}"));
        for (namespace, before) in [
            (&hosts.left, &underlay_links[0]),
            (&hosts.right, &underlay_links[1]),
        ] {
            let during = links(namespace);
            assert!(
                during.len() > before.len(),
                "{test}: no tunnel device in {}: {during:?}",
                namespace.name()
            );
        }
        traffic::ping(&hosts.left, running.right_address(), 3)
            .unwrap_or_else(|e| panic!("{test}: {e}"));
        traffic::ping(&hosts.right, running.left_address(), 3)
            .unwrap_or_else(|e| panic!("{test}: {e}"));

        let pids = running.pids();
        assert!(!pids.is_empty(), "{test}: no processes to charge CPU to");
        let cpu_before = systems::cpu_time(&pids);
        let report = transfer(&hosts, running.as_ref());
        let cpu = systems::cpu_time(&pids).saturating_sub(cpu_before);
        assert!(report.verified, "{test}: transfer not verified: {report}");
        assert_eq!(report.bytes, TRANSFER_BYTES);
        assert!(
            systems::cpu_time(&pids) > Duration::ZERO,
            "{test}: no CPU time for {pids:?}"
        );
        eprintln!(
            "{test}: {name} {:.3} Gbit/s, bare {:.3} Gbit/s in the same run ({:.1} % of bare); MTU {}; {:?} CPU in {pids:?} during the transfer",
            report.throughput_gbit_per_sec(),
            bare.throughput_gbit_per_sec(),
            100.0 * report.throughput_gbit_per_sec() / bare.throughput_gbit_per_sec(),
            running.mtu(),
            cpu,
        );
        for line in cipher_lines(workdir.path()) {
            eprintln!("{test}: {line}");
        }

        drop(running);
        let gone = netns::wait_until(Duration::from_secs(5), "tunnel processes to exit", || {
            pids.iter()
                .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
        });
        assert!(gone.is_ok(), "{test}: processes left: {pids:?}");
        for (namespace, before) in [
            (&hosts.left, &underlay_links[0]),
            (&hosts.right, &underlay_links[1]),
        ] {
            assert_eq!(
                &links(namespace),
                before,
                "{test}: devices left in {}",
                namespace.name()
            );
            let routes = namespace
                .ip(&["route", "show", "table", "all"])
                .expect("routes");
            assert!(
                !routes.contains("8.8.8.8"),
                "{test}: route left in {}: {routes}",
                namespace.name()
            );
        }
        let leftovers: Vec<_> = std::fs::read_dir(workdir.path())
            .expect("read workdir")
            .flatten()
            .collect();
        assert!(leftovers.is_empty(), "{test}: files left: {leftovers:?}");
    }
    let listing = netns::ip(&["netns", "list"]).expect("list namespaces");
    for namespace in namespaces {
        assert!(
            !listing.contains(&namespace),
            "{test}: {namespace} left behind"
        );
    }
}

/// The bare link's throughput on `hosts`, the reference for the system.
fn measure_bare(hosts: &TwoHosts, workdir: &Path) -> BulkReport {
    let bare = system("bare")
        .start(hosts, workdir)
        .expect("bare needs no setup");
    let report = transfer(hosts, bare.as_ref());
    assert!(report.verified, "bare transfer not verified: {report}");
    let expected = IpAddr::V4(fjord_lab::topology::RIGHT_UNDERLAY);
    assert_eq!(bare.right_address(), expected);
    report
}

#[test]
fn vpncloud_carries_verified_traffic_and_cleans_up() {
    run_system("vpncloud", "vpncloud");
}

#[test]
fn vpncloud_in_tap_mode_carries_verified_traffic_and_cleans_up() {
    run_system("vpncloud-tap", "vpncloud-tap");
}

#[test]
fn openvpn_carries_verified_traffic_and_cleans_up() {
    run_system("openvpn", "openvpn");
}

#[test]
fn ipsec_carries_verified_traffic_and_cleans_up() {
    run_system("ipsec", "ipsec");
}

#[test]
fn ssh_tunnel_carries_verified_traffic_and_cleans_up() {
    run_system("ssh", "ssh");
}
