//! The systems the lab compares: `bare` (no tunnel, the reference), `relay`
//! (the floor of any userspace tunnel), fjord, and the VPNs people would pick
//! instead. Each brings a tunnel up between the two hosts of a [`TwoHosts`]
//! topology and says which addresses the traffic generators should use, and
//! which processes to charge CPU to.
//!
//! A new system is one [`System`] here, built from the shared pieces in
//! `support.rs`: a [`WorkDir`] for its keys, configs and logs, a logged
//! process per daemon that errors quote, link and process queries.
//! WireGuard implementations are one system each, and also the sides of
//! [`wireguard`] tunnels that tests pair across implementations.

mod bare;
mod ipsec;
pub mod members;
pub mod mesh;
mod openvpn;
mod relay;
mod ssh;
mod support;
mod vpncloud;
pub mod wireguard;

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

pub use bare::Bare;
pub use ipsec::Ipsec;
pub use members::FjordMembers;
pub use mesh::{FjordMesh, Member, MemberPath, PolicyFlows, RunningMesh};
pub use openvpn::OpenVpn;
pub use relay::Relay;
pub use ssh::SshTunnel;
pub(crate) use support::home_path;
pub use support::{
    WorkDir, find_program, link_exists, log_tail, missing_is_failure, running_as_root,
};
pub use vpncloud::VpnCloud;
pub use wireguard::WireGuardSystem;

use crate::topology::{LEFT_OVERLAY, MeshHost, RIGHT_OVERLAY, TwoHosts};

#[derive(Debug, thiserror::Error)]
pub enum SystemError {
    /// Not installed; the text says how to install it.
    #[error("{0}")]
    NotInstalled(String),
    /// The system cannot do what was asked (a mesh of a point-to-point
    /// tunnel); the text says so.
    #[error("{0}")]
    Unsupported(String),
    #[error("{system} did not come up: {detail}")]
    StartFailed { system: String, detail: String },
    #[error("{operation}: {source}")]
    Io {
        operation: String,
        #[source]
        source: std::io::Error,
    },
}

/// What starting a system gives: the tunnel, up, or why it did not come up.
pub type StartResult = Result<Box<dyn RunningSystem>, SystemError>;

/// A tunnel implementation the lab can run.
pub trait System: Send + Sync {
    /// The name used on the command line and in reports.
    fn name(&self) -> &str;
    /// One line describing the system for `fjord lab list`.
    fn description(&self) -> &str;
    /// Whether it can run here: its version, or how to install it.
    fn check(&self) -> Result<String, String>;
    /// Brings the tunnel up between `hosts.left` and `hosts.right`.
    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult;
    /// Brings the tunnel up as [`System::start`] does, with its interfaces
    /// at `mtu_bytes` (the `mtu` suite sets the underlay large enough to
    /// carry them). Systems whose driver cannot choose the MTU answer
    /// [`SystemError::Unsupported`].
    fn start_with_mtu(&self, _hosts: &TwoHosts, _workdir: &Path, _mtu_bytes: u16) -> StartResult {
        Err(SystemError::Unsupported(format!(
            "the lab's {} driver cannot choose the tunnel MTU",
            self.name()
        )))
    }
    /// Configures a mesh across every host of `lan` (see [`RunningMesh`]);
    /// nodes start one by one with [`RunningMesh::start_node`]. Systems
    /// without a mesh mode answer [`SystemError::Unsupported`].
    fn start_mesh(
        &self,
        _hosts: &[MeshHost<'_>],
        _workdir: &Path,
    ) -> Result<Box<dyn RunningMesh>, SystemError> {
        Err(no_mesh_mode(self.name()))
    }
    /// The WireGuard implementation behind the system, for suites that
    /// drive its two sides one by one (the attack suite restarts one
    /// while the other is flooded); otherwise why there is none to drive.
    fn wireguard(&self) -> Result<&dyn wireguard::Implementation, String> {
        Err("speaks no WireGuard".to_string())
    }
}

/// Why a system without a mesh mode cannot start a mesh.
pub fn no_mesh_mode(system: &str) -> SystemError {
    SystemError::Unsupported(format!("{system} has no mesh mode"))
}

/// A tunnel that is up. Dropping it takes it down.
pub trait RunningSystem: Send {
    /// The left host's address as the right host reaches it: its overlay
    /// address, [`LEFT_OVERLAY`], for every tunnel (bare answers its
    /// underlay address).
    fn left_address(&self) -> IpAddr {
        IpAddr::V4(LEFT_OVERLAY)
    }
    /// The right host's address as the left host reaches it:
    /// [`RIGHT_OVERLAY`] for every tunnel.
    fn right_address(&self) -> IpAddr {
        IpAddr::V4(RIGHT_OVERLAY)
    }
    /// The tunnel's processes on both hosts, for CPU accounting (empty for
    /// kernel-only systems).
    fn pids(&self) -> Vec<u32>;
    /// The tunnel's processes on the left host and on the right, for CPU
    /// per side; `None` where the driver does not tell them apart.
    fn pids_by_side(&self) -> Option<[Vec<u32>; 2]> {
        None
    }
    /// MTU of the tunnel interface (1500 for bare).
    fn mtu(&self) -> u16;
}

/// Every system the lab knows, in report order (bare first).
pub fn all() -> Vec<Box<dyn System>> {
    let mut systems: Vec<Box<dyn System>> = vec![Box::new(Bare), Box::new(Relay::locate())];
    systems.extend(
        wireguard::all()
            .into_iter()
            .map(|s| Box::new(s) as Box<dyn System>),
    );
    for carrier in [
        wireguard::fallback::Carrier::FakeTcp,
        wireguard::fallback::Carrier::Tcp,
    ] {
        systems.push(Box::new(wireguard::FjordFallback::locate(carrier)));
    }
    systems.push(Box::new(FjordMembers::locate()));
    systems.push(Box::new(FjordMembers::locate().with_policy()));
    systems.push(Box::new(VpnCloud::locate()));
    systems.push(Box::new(VpnCloud::locate().in_tap_mode()));
    systems.push(Box::new(OpenVpn::locate()));
    systems.push(Box::new(Ipsec::locate()));
    systems.push(Box::new(SshTunnel::locate()));
    systems.push(Box::new(SshTunnel::locate().compressed()));
    systems
}

/// Names of every known system.
pub fn names() -> Vec<String> {
    all().iter().map(|s| s.name().to_string()).collect()
}

/// The systems named in `list` (comma-separated), in the order given;
/// an unknown name is an error that lists the valid ones.
pub fn select(list: &str) -> Result<Vec<Box<dyn System>>, String> {
    let mut known = all();
    let mut chosen: Vec<Box<dyn System>> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(position) = known.iter().position(|s| s.name() == name) else {
            if chosen.iter().any(|s| s.name() == name) {
                continue;
            }
            return Err(format!(
                "unknown system '{name}'; valid systems: {}",
                names().join(", ")
            ));
        };
        chosen.push(known.remove(position));
    }
    if chosen.is_empty() {
        return Err(format!(
            "no systems given; valid systems: {}",
            names().join(", ")
        ));
    }
    Ok(chosen)
}

/// CPU time (user + system) of `pids` so far, summed; processes that are
/// gone count zero.
pub fn cpu_time(pids: &[u32]) -> Duration {
    // Clock ticks per second: 100 on every Linux this runs on; /proc reports ticks.
    const TICKS_PER_SECOND: u64 = 100;
    let ticks: u64 = pids
        .iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command name (which may contain spaces) start at ')'.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let user: u64 = fields.get(11)?.parse().ok()?;
            let system: u64 = fields.get(12)?.parse().ok()?;
            Some(user + system)
        })
        .sum();
    Duration::from_millis(ticks * 1000 / TICKS_PER_SECOND)
}

/// Resident set size of `pids`, summed, in bytes.
pub fn resident_bytes(pids: &[u32]) -> u64 {
    pids.iter()
        .filter_map(|pid| std::fs::read_to_string(format!("/proc/{pid}/status")).ok())
        .filter_map(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_keeps_order_and_rejects_unknown_names() {
        let chosen = select("fjord, bare").unwrap();
        assert_eq!(
            chosen.iter().map(|s| s.name()).collect::<Vec<_>>(),
            ["fjord", "bare"]
        );
        let error = select("bare,nope").err().unwrap();
        assert!(
            error.contains("unknown system 'nope'") && error.contains("wireguard-go"),
            "{error}"
        );
        assert!(select("").is_err());
    }

    #[test]
    fn own_cpu_time_and_memory_are_visible() {
        let me = std::process::id();
        // Burn at least a few clock ticks of CPU (a tick is 10 ms).
        let started = std::time::Instant::now();
        let mut x = 0u64;
        while started.elapsed() < Duration::from_millis(100) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(1));
        }
        assert!(cpu_time(&[me]) > Duration::ZERO);
        assert!(resident_bytes(&[me]) > 1 << 20);
        assert_eq!(cpu_time(&[u32::MAX]), Duration::ZERO);
    }
}
