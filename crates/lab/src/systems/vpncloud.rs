//! VpnCloud (`cargo install vpncloud`), a peer-to-peer VPN in Rust: a TUN
//! device per host, UDP between the underlay addresses, one shared password.
//!
//! The left host connects to the right (`-c 198.18.0.2:3210`); each
//! claims its own overlay /32 (`--claim`) so VpnCloud's router mode knows
//! where to send what. Nothing reaches out: no port forwarding (UPnP), no
//! beacons, no statsd, no stats file. The password comes through the
//! environment (`PASSWORD`), not the command line.
//!
//! Three quirks of VpnCloud 2.3 shape the driver:
//! - At start and on every housekeeping tick it finds its own address by
//!   `connect()`ing a UDP socket towards 8.8.8.8 — a route lookup, no packet
//!   is sent — and panics if there is no route. The lab's hosts have none,
//!   so each host gets `8.8.8.8/32 dev lo` while VpnCloud runs: the lookup
//!   succeeds, and anything ever sent there would stay in the namespace.
//! - Its `--ip` writes a wrong address (`0.1.0.0/8` for `198.19.0.1/24`)
//!   and auto-claiming reads one back (`0.0.0.1/32`), so the lab assigns
//!   the overlay address with `ip` and claims explicitly.
//! - It sizes the MTU from the default route's device, and there is no
//!   default route; the lab sets what it would have set on a 1500-byte
//!   underlay: 1500 − 73 (IPv6 + UDP headers, 8-byte crypto header,
//!   16-byte tag, 1-byte message type) = [`TUNNEL_MTU`].
//!
//! In TAP mode ([`VpnCloud::in_tap_mode`], the lab system `vpncloud-tap`,
//! as the VpnCloud study ran it) each host has a TAP device and VpnCloud
//! switches Ethernet frames by learned MAC address (`--type tap`, its
//! default `normal` mode); nothing is claimed, and the MTU is 14 bytes
//! (the Ethernet header) below the TUN one: [`TAP_TUNNEL_MTU`].
//!
//! The cipher is VpnCloud's own choice: each side benchmarks AES-128-GCM,
//! AES-256-GCM and ChaCha20-Poly1305 at start and logs the speeds; the
//! handshake picks the algorithm whose slower side is fastest. The driver
//! reads both logs and logs the same choice.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::support::{self, LoggedProcess, START_TIMEOUT, WorkDir, start_failed};
use super::wireguard;
use super::{RunningSystem, StartResult, System, SystemError};
use crate::netns::Namespace;
use crate::topology::{
    LEFT_OVERLAY, LEFT_UNDERLAY, OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts,
};

const NAME: &str = "vpncloud";
/// VpnCloud's default UDP port, on both hosts.
const PORT: u16 = 3210;
/// 1500 less VpnCloud's per-packet overhead in TUN mode (see module docs).
pub const TUNNEL_MTU: u16 = 1500 - 73;
/// [`TUNNEL_MTU`] less the Ethernet header each frame carries in TAP mode.
pub const TAP_TUNNEL_MTU: u16 = TUNNEL_MTU - 14;
/// The name of VpnCloud in TAP mode, as a lab system.
const TAP_NAME: &str = "vpncloud-tap";
/// The address VpnCloud `connect()`s to in order to learn its own.
const ADDRESS_PROBE_ROUTE: &str = "8.8.8.8/32";
/// What VpnCloud logs after benchmarking its ciphers.
const SPEEDS_LOG: &str = "Crypto speeds: ";

/// Environment variable naming the vpncloud binary explicitly.
pub const BINARY_ENV: &str = "VPNCLOUD_BIN";

#[derive(Debug, Clone)]
pub struct VpnCloud {
    binary: Option<PathBuf>,
    /// `--type tap`: Ethernet frames switched by MAC address.
    tap: bool,
}

impl VpnCloud {
    /// `$VPNCLOUD_BIN`, else `vpncloud` on PATH, else `~/.cargo/bin`.
    pub fn locate() -> Self {
        if let Some(path) = std::env::var_os(BINARY_ENV) {
            return Self::at(PathBuf::from(path));
        }
        let fallbacks: Vec<PathBuf> = support::home_path(".cargo/bin/vpncloud")
            .into_iter()
            .collect();
        Self {
            binary: support::find_program("vpncloud", &fallbacks),
            tap: false,
        }
    }

    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
            tap: false,
        }
    }

    /// Runs VpnCloud on TAP devices (named `vpncloud-tap` as a lab system).
    pub fn in_tap_mode(mut self) -> Self {
        self.tap = true;
        self
    }

    fn binary(&self) -> Result<PathBuf, String> {
        support::require_binary(
            self.binary.as_deref(),
            "vpncloud",
            "install with `fjord lab install-peers` or `cargo install vpncloud`",
        )
    }
}

/// One host's part.
struct Side<'a> {
    role: &'static str,
    namespace: &'a Namespace,
    underlay: Ipv4Addr,
    overlay: Ipv4Addr,
    /// Where to connect; `None` waits to be connected to.
    connect_to: Option<Ipv4Addr>,
}

impl System for VpnCloud {
    fn name(&self) -> &str {
        if self.tap { TAP_NAME } else { NAME }
    }

    fn description(&self) -> &str {
        if self.tap {
            "VpnCloud in TAP mode: Ethernet frames switched by MAC address, as the VpnCloud study ran it"
        } else {
            "VpnCloud: peer-to-peer VPN in Rust over UDP, shared password, fastest AES-GCM/ChaCha20 by startup benchmark"
        }
    }

    fn check(&self) -> Result<String, String> {
        // "VpnCloud v2.3.0"
        support::first_output_line(&self.binary()?, &["--version"])
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let mtu_bytes = if self.tap { TAP_TUNNEL_MTU } else { TUNNEL_MTU };
        self.start_with_mtu(hosts, workdir, mtu_bytes)
    }

    fn start_with_mtu(&self, hosts: &TwoHosts, workdir: &Path, mtu_bytes: u16) -> StartResult {
        let binary = self.binary().map_err(SystemError::NotInstalled)?;
        let name = self.name();
        let failed = |detail: String| start_failed(name, detail);
        let dir = WorkDir::create_in(workdir, name).map_err(|e| failed(e.to_string()))?;
        let password = random_password().map_err(failed)?;
        let mut running = RunningVpnCloud {
            processes: Vec::new(),
            probe_routes: Vec::new(),
            tap: self.tap,
            mtu_bytes,
            dir,
        };
        let right = Side {
            role: "right",
            namespace: &hosts.right,
            underlay: RIGHT_UNDERLAY,
            overlay: RIGHT_OVERLAY,
            connect_to: None,
        };
        let left = Side {
            role: "left",
            namespace: &hosts.left,
            underlay: LEFT_UNDERLAY,
            overlay: LEFT_OVERLAY,
            connect_to: Some(RIGHT_UNDERLAY),
        };
        // The right first, so the left's first message finds it listening.
        for side in [&right, &left] {
            let process = running.launch(&binary, side, &password).map_err(failed)?;
            running.processes.push(process);
        }
        let processes: Vec<&LoggedProcess> = running.processes.iter().collect();
        support::wait_for_first_ping(&hosts.left, RIGHT_OVERLAY, &processes).map_err(failed)?;
        let speeds: Vec<Vec<(String, f64)>> = running
            .processes
            .iter()
            .map(|process| crypto_speeds(&process.log()))
            .collect();
        let cipher = chosen_cipher(&speeds).unwrap_or_else(|| "unknown".to_string());
        tracing::info!(%cipher, ?speeds, "vpncloud tunnel up");
        Ok(Box::new(running))
    }
}

/// 32 random bytes, hex.
fn random_password() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("random password: {e}"))?;
    Ok(bytes.iter().map(|byte| format!("{byte:02x}")).collect())
}

/// Parses "Crypto speeds: AES_128_GCM: 870.6 MiB/s, AES_256_GCM: 476.4 MiB/s, …".
fn crypto_speeds(log: &str) -> Vec<(String, f64)> {
    let Some(line) = log
        .lines()
        .find_map(|line| line.split_once(SPEEDS_LOG).map(|(_, rest)| rest))
    else {
        return Vec::new();
    };
    line.split(", ")
        .filter_map(|entry| {
            let (algorithm, speed) = entry.split_once(": ")?;
            let speed = speed.trim().strip_suffix(" MiB/s")?.parse().ok()?;
            Some((algorithm.trim().to_string(), speed))
        })
        .collect()
}

/// VpnCloud's rule: of the algorithms every side supports, the one whose
/// slowest side is fastest.
fn chosen_cipher(speeds: &[Vec<(String, f64)>]) -> Option<String> {
    let first = speeds.first()?;
    first
        .iter()
        .filter_map(|(algorithm, _)| {
            let slowest = speeds
                .iter()
                .map(|side| {
                    side.iter()
                        .find(|(a, _)| a == algorithm)
                        .map(|(_, speed)| *speed)
                })
                .collect::<Option<Vec<f64>>>()?
                .into_iter()
                .fold(f64::INFINITY, f64::min);
            Some((algorithm, slowest))
        })
        .max_by(|(_, a), (_, b)| a.total_cmp(b))
        .map(|(algorithm, _)| algorithm.clone())
}

struct RunningVpnCloud {
    processes: Vec<LoggedProcess>,
    /// Namespaces (by name) where the 8.8.8.8 route was added.
    probe_routes: Vec<String>,
    /// `--type tap` rather than `tun`.
    tap: bool,
    mtu_bytes: u16,
    // Last: the processes stop before their files go.
    dir: WorkDir,
}

impl RunningVpnCloud {
    /// Starts VpnCloud on `side` and configures its device.
    fn launch(
        &mut self,
        binary: &Path,
        side: &Side,
        password: &str,
    ) -> Result<LoggedProcess, String> {
        let namespace = side.namespace;
        namespace
            .ip(&["route", "add", ADDRESS_PROBE_ROUTE, "dev", "lo"])
            .map_err(|e| {
                format!(
                    "add VpnCloud's address-probe route in {}: {e}",
                    namespace.name()
                )
            })?;
        self.probe_routes.push(namespace.name().to_string());

        let ifname = wireguard::unique_ifname();
        let mut command = namespace.command(binary);
        let device_type = if self.tap { "tap" } else { "tun" };
        command
            .env("PASSWORD", password)
            .args(["--type", device_type, "--device", &ifname])
            .args(["--listen", &format!("{}:{PORT}", side.underlay)])
            .arg("--no-auto-claim")
            .arg("--no-port-forwarding");
        if !self.tap {
            // A switch learns where addresses are; a router must be told.
            command.args(["--claim", &format!("{}/32", side.overlay)]);
        }
        if let Some(peer) = side.connect_to {
            command.args(["--peer", &format!("{peer}:{PORT}")]);
        }
        let role = side.role;
        let log = self.dir.file(&format!("{role}.log"));
        let mut process = LoggedProcess::spawn(format!("vpncloud ({role})"), &mut command, log)?;
        process.wait_until(
            START_TIMEOUT,
            &format!("{ifname} in {}", namespace.name()),
            |_| support::link_exists(namespace, &ifname),
        )?;
        support::configure_link(
            namespace,
            &ifname,
            side.overlay,
            OVERLAY_PREFIX_LEN,
            self.mtu_bytes,
        )
        .map_err(|e| format!("{e}; {}", process.tail()))?;
        Ok(process)
    }
}

impl RunningSystem for RunningVpnCloud {
    fn pids(&self) -> Vec<u32> {
        support::pids(&self.processes)
    }

    fn pids_by_side(&self) -> Option<[Vec<u32>; 2]> {
        // Started right first, then left.
        let pid = |index: usize| self.processes.get(index).and_then(LoggedProcess::pid);
        Some([pid(1).into_iter().collect(), pid(0).into_iter().collect()])
    }

    fn mtu(&self) -> u16 {
        self.mtu_bytes
    }
}

impl Drop for RunningVpnCloud {
    fn drop(&mut self) {
        // Each process removes its own tun device as it exits.
        for process in &mut self.processes {
            process.stop();
        }
        for namespace in &self.probe_routes {
            let _ = crate::netns::ip(&[
                "-n",
                namespace,
                "route",
                "del",
                ADDRESS_PROBE_ROUTE,
                "dev",
                "lo",
            ]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_cipher_vpncloud_picks() {
        let left = crypto_speeds(
            "INFO - Crypto speeds: AES_128_GCM: 2097.2 MiB/s, AES_256_GCM: 1316.9 MiB/s, CHACHA20_POLY1305: 788.7 MiB/s\n",
        );
        let right = crypto_speeds(
            "INFO - Crypto speeds: AES_128_GCM: 897.0 MiB/s, AES_256_GCM: 1014.7 MiB/s, CHACHA20_POLY1305: 516.3 MiB/s\n",
        );
        assert_eq!(left.len(), 3);
        assert_eq!(left[2], ("CHACHA20_POLY1305".to_string(), 788.7));
        // min(AES-128) = 897.0 < min(AES-256) = 1014.7.
        assert_eq!(
            chosen_cipher(&[left, right]).as_deref(),
            Some("AES_256_GCM")
        );
        assert_eq!(chosen_cipher(&[]), None);
        assert!(crypto_speeds("no speeds here").is_empty());
    }
}
