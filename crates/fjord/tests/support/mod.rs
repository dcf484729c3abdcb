//! What the rekey, restart and junk tests share: a fjord↔fjord tunnel
//! between two namespaces joined by veth (underlay 198.18.0.1/.2, overlay
//! 198.19.0.1/24 and .2/24), and reading what fjord reports about itself
//! (`fjord show --json`, its log).
//!
//! Everything is removed when the [`Tunnel`] drops, also when a test fails.

#![allow(dead_code)] // Each test binary uses its own part.

pub mod mesh;

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use fjord_lab::netns::{self, Namespace, Process};

use fjord_lab::systems::wireguard::{self, Fjord, Implementation, Initiator, Interface, WgSide};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{LEFT_OVERLAY, RIGHT_OVERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkReport, BulkTransfer};

pub fn fjord() -> Fjord {
    Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")))
}

/// Whether the test can run (root); otherwise one line, or a failure under CI.
pub fn ready(test: &str) -> bool {
    systems::running_as_root(&format!("{test} needs root (network namespaces)"))
}

/// Whether the test can run: root, and nothing in `missing` (why each
/// other thing it needs is not there); otherwise one line naming all of
/// it, or a failure under CI.
pub fn ready_unless(test: &str, mut missing: Vec<String>) -> bool {
    if !netns::is_root() {
        missing.insert(0, "needs root (network namespaces)".to_string());
    }
    if missing.is_empty() {
        return true;
    }
    let why = missing.join("; ");
    assert!(!systems::missing_is_failure(), "{test}: {why} (CI=true)");
    eprintln!("skipping {test}: {why}");
    false
}

/// `what`, followed by the log tails of `sides`.
pub fn with_logs(what: &str, sides: &[&Interface]) -> String {
    let mut text = what.to_string();
    for side in sides {
        text.push_str(&format!(
            "\n--- {} {} log:{}",
            side.implementation(),
            side.ifname(),
            systems::log_tail(side.log_path(), 30)
        ));
    }
    text
}

pub fn left_overlay() -> IpAddr {
    IpAddr::V4(LEFT_OVERLAY)
}

pub fn right_overlay() -> IpAddr {
    IpAddr::V4(RIGHT_OVERLAY)
}

/// Two fjord sides that know each other's endpoint, up and pinging.
pub struct Tunnel {
    pub left: Interface,
    pub right: Interface,
    pub left_side: WgSide,
    pub right_side: WgSide,
    /// How the left side was started (both sides, unless `up_pair`).
    pub fjord: Fjord,
    // Dropped after the sides: the work directory, then the namespaces.
    pub workdir: WorkDir,
    pub hosts: TwoHosts,
}

impl Tunnel {
    pub fn up(test: &str, fjord: Fjord) -> Self {
        let hosts = TwoHosts::direct().expect("build two hosts");
        Self::up_on(test, fjord, hosts)
    }

    /// The tunnel on hosts the caller prepared.
    pub fn up_on(test: &str, fjord: Fjord, hosts: TwoHosts) -> Self {
        Self::up_pair(test, fjord.clone(), fjord, hosts)
    }

    /// Each side started its own way (different settings on each end).
    pub fn up_pair(test: &str, fjord: Fjord, right_fjord: Fjord, hosts: TwoHosts) -> Self {
        let sides = wireguard::point_to_point(Initiator::Both).expect("keys");
        Self::up_with_sides(test, fjord, right_fjord, hosts, sides)
    }

    /// The tunnel with sides the caller prepared (from
    /// [`wireguard::point_to_point`], changed as the test needs).
    pub fn up_with_sides(
        test: &str,
        fjord: Fjord,
        right_fjord: Fjord,
        hosts: TwoHosts,
        (left_side, right_side): (WgSide, WgSide),
    ) -> Self {
        let workdir = WorkDir::create(test).expect("work directory");
        let right = right_fjord
            .start(&hosts.right, &right_side, workdir.path())
            .unwrap_or_else(|error| panic!("start right fjord: {error}"));
        let left = fjord
            .start(&hosts.left, &left_side, workdir.path())
            .unwrap_or_else(|error| panic!("start left fjord: {error}"));
        let tunnel = Self {
            left,
            right,
            left_side,
            right_side,
            fjord,
            workdir,
            hosts,
        };
        let waited =
            traffic::wait_for_ping(&tunnel.hosts.left, right_overlay(), Duration::from_secs(10))
                .unwrap_or_else(|error| {
                    panic!("{}", tunnel.context(&format!("first ping: {error}")))
                });
        eprintln!("{test}: handshake and first ping in {waited:?}");
        tunnel
    }

    /// `bytes` of TCP from left to right through the tunnel (to `port` on
    /// the right overlay address), checked by digest on both ends.
    pub fn verified_transfer(&self, bytes: u64, port: u16) -> BulkReport {
        let report = BulkTransfer::new(bytes)
            .timeout(Duration::from_secs(120))
            .run(
                &self.hosts.left,
                &self.hosts.right,
                SocketAddr::new(right_overlay(), port),
            )
            .unwrap_or_else(|error| panic!("{}", self.context(&format!("transfer: {error}"))));
        assert!(report.verified, "{}", self.context(&format!("{report:?}")));
        assert_eq!(report.bytes, bytes);
        report
    }

    /// `what`, followed by both sides' log tails.
    pub fn context(&self, what: &str) -> String {
        with_logs(what, &[&self.left, &self.right])
    }
}

/// fjord started as an operator starts it: `fjord up` on a wg-quick file,
/// logging at `info` to a file. It stops when dropped.
pub struct ByHand {
    pub log_path: PathBuf,
    _process: Process,
}

impl ByHand {
    /// Writes `config` to `<dir>/<ifname>.conf` (private, as keys are),
    /// runs `fjord up` on it in `host`, and returns once `ifname` exists:
    /// the file was read.
    pub fn up(host: &Namespace, dir: &Path, ifname: &str, config: &str) -> Self {
        let config_path = dir.join(format!("{ifname}.conf"));
        std::fs::write(&config_path, config).expect("write the config");
        std::fs::set_permissions(
            &config_path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .expect("keys are private");
        let log_path = dir.join(format!("{ifname}-up.log"));
        let log = std::fs::File::create(&log_path).expect("log file");
        let mut command = host.command(env!("CARGO_BIN_EXE_fjord"));
        command
            .arg("up")
            .arg(&config_path)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(log);
        let process = Process::spawn(&mut command).expect("start fjord up");
        let started = Self {
            log_path,
            _process: process,
        };
        netns::wait_until(Duration::from_secs(10), &format!("{ifname} up"), || {
            systems::link_exists(host, ifname)
        })
        .unwrap_or_else(|error| panic!("{error}\n{}", started.log_tail()));
        started
    }

    pub fn log_tail(&self) -> String {
        systems::log_tail(&self.log_path, 30)
    }
}

/// What `fjord show IFNAME --json` reports, the parts these tests read.
#[derive(Debug, Clone)]
pub struct Shown {
    pub drops: BTreeMap<String, u64>,
    /// Each peer's endpoint as printed.
    pub endpoints: Vec<Option<String>>,
    /// Each peer's data cipher as printed.
    pub ciphers: Vec<Option<String>>,
    /// MAC addresses a switch-mode interface knows (`None`: a router).
    pub switch_mac_addresses: Option<u64>,
    /// Each peer's compression as printed.
    pub compression: Vec<Option<ShownCompression>>,
    /// The network policy in force and its counters (`null`: none).
    pub policy: serde_json::Value,
}

/// A peer's `compression` in `fjord show --json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShownCompression {
    pub on: bool,
    pub compressed_packets: u64,
    pub raw_packets: u64,
    pub decompressed_packets: u64,
}

impl Shown {
    pub fn drops(&self, reason: &str) -> u64 {
        self.drops.get(reason).copied().unwrap_or(0)
    }
}

/// Runs `fjord show IFNAME --json` as a user would.
pub fn show_json(ifname: &str) -> Shown {
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args(["show", ifname, "--json"])
        .output()
        .expect("run fjord show");
    assert!(
        output.status.success(),
        "fjord show --json: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let reports: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("fjord show --json prints JSON");
    let report = &reports[0];
    let drops = report["drops"]
        .as_object()
        .map(|drops| {
            drops
                .iter()
                .filter_map(|(reason, n)| Some((reason.clone(), n.as_u64()?)))
                .collect()
        })
        .unwrap_or_default();
    let peer_field = |field: &str| -> Vec<Option<String>> {
        report["peers"]
            .as_array()
            .map(|peers| {
                peers
                    .iter()
                    .map(|peer| peer[field].as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let compression = report["peers"]
        .as_array()
        .map(|peers| {
            peers
                .iter()
                .map(|peer| {
                    let shown = &peer["compression"];
                    let count = |field: &str| shown[field].as_u64();
                    Some(ShownCompression {
                        on: shown["on"].as_bool()?,
                        compressed_packets: count("compressed_packets")?,
                        raw_packets: count("raw_packets")?,
                        decompressed_packets: count("decompressed_packets")?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    Shown {
        drops,
        endpoints: peer_field("endpoint"),
        ciphers: peer_field("cipher"),
        switch_mac_addresses: report["switch_mac_addresses"].as_u64(),
        compression,
        policy: report["policy"].clone(),
    }
}

/// Runs `fjord show IFNAME` (text) as a user would.
pub fn show_text(ifname: &str) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args(["show", ifname])
        .output()
        .expect("run fjord show");
    assert!(output.status.success(), "fjord show failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// "handshake completed" lines in a side's log.
pub fn handshakes_logged(side: &Interface) -> usize {
    log_lines(side)
        .iter()
        .filter(|line| line.contains("handshake completed"))
        .count()
}

/// The lines of a side's log.
pub fn log_lines(side: &Interface) -> Vec<String> {
    std::fs::read_to_string(side.log_path())
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Sends one request (`get=1\n\n`, `set=1\n…\n\n`) to `ifname`'s
/// configuration socket as `wg` would; the reply up to its `errno=` line.
pub fn uapi_request(ifname: &str, request: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let path = format!("/var/run/wireguard/{ifname}.sock");
    let mut socket = std::os::unix::net::UnixStream::connect(&path).expect("configuration socket");
    socket
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    socket
        .write_all(request.as_bytes())
        .expect("send the request");
    let mut reply = String::new();
    for line in BufReader::new(socket).lines() {
        let line = line.expect("read the reply");
        reply.push_str(&line);
        reply.push('\n');
        if line.starts_with("errno=") {
            break;
        }
    }
    reply
}

/// The errno a configuration reply ended with.
pub fn reply_errno(reply: &str) -> i32 {
    reply
        .lines()
        .find_map(|line| line.strip_prefix("errno=")?.parse().ok())
        .unwrap_or_else(|| panic!("no errno in {reply:?}"))
}

/// A network of its own and a certificate of it for `side`'s key, named
/// `name`, at the left host's overlay address, valid from a minute ago
/// for an hour, written to `dir/<name>.cert`: the `[Mesh]` of a member
/// beside plain `[Peer]`s. The network's secret signs what else the test
/// needs (a policy).
pub fn lone_member(dir: &Path, side: &WgSide, name: &str) -> (fjord_mesh::NetworkSecret, PathBuf) {
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).expect("randomness");
    let network = fjord_mesh::NetworkSecret::from_seed(seed);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("a clock after 1970")
        .as_secs();
    let certificate = network
        .sign(
            side.public_key(),
            name,
            &[fjord_mesh::Cidr::host(IpAddr::V4(LEFT_OVERLAY))],
            now - 60,
            now + 3600,
        )
        .expect("certificate");
    let certificate_path = dir.join(format!("{name}.cert"));
    std::fs::write(&certificate_path, certificate.to_base64() + "\n").expect("certificate written");
    (network, certificate_path)
}
