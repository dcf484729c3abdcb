//! `relay`: the floor of userspace tunnelling as a reference system. Each
//! host runs `fjord lab relay` (see [`crate::relay`]), an unencrypted
//! TUN-to-UDP relay that moves one packet per system call, so a run shows
//! beside every VPN what a tunnel costs before its own work begins.
//!
//! Its MTU is WireGuard's 1420, so that it carries the same packets as
//! fjord and the WireGuard peers (a 1518-byte frame is two fragments in all
//! of them), although its own overhead is only the 28 bytes of IP and UDP.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use super::support::{self, LoggedProcess, START_TIMEOUT, WorkDir, start_failed};
use super::wireguard::{self, Fjord, Implementation};
use super::{RunningSystem, StartResult, System, SystemError};
use crate::netns::Namespace;
use crate::topology::{
    LEFT_OVERLAY, LEFT_UNDERLAY, OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts,
};

const NAME: &str = "relay";
/// The relays' UDP port on both hosts.
const PORT: u16 = 51_900;
/// WireGuard's MTU (see module docs).
pub const TUNNEL_MTU: u16 = 1420;

/// The relay runs as `fjord lab relay`, so it is found like fjord.
#[derive(Debug, Clone)]
pub struct Relay {
    fjord: Fjord,
}

impl Relay {
    /// The fjord binary [`Fjord::locate`] finds.
    pub fn locate() -> Self {
        Self {
            fjord: Fjord::locate(),
        }
    }

    /// The fjord binary at `binary`.
    pub fn at(binary: PathBuf) -> Self {
        Self {
            fjord: Fjord::at(binary),
        }
    }
}

impl System for Relay {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "the userspace floor: an unencrypted TUN-to-UDP relay, one packet per system call, sleeping in poll(2) (fjord lab relay)"
    }

    fn check(&self) -> Result<String, String> {
        let binary = self.fjord.installed()?;
        Ok(format!("fjord lab relay ({})", binary.display()))
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let binary = self.fjord.installed().map_err(SystemError::NotInstalled)?;
        let failed = |detail: String| start_failed(NAME, detail);
        let dir = WorkDir::create_in(workdir, NAME).map_err(|e| failed(e.to_string()))?;
        let mut running = RunningRelay {
            processes: Vec::new(),
            dir,
        };
        for (role, namespace, underlay, overlay, peer) in [
            (
                "left",
                &hosts.left,
                LEFT_UNDERLAY,
                LEFT_OVERLAY,
                RIGHT_UNDERLAY,
            ),
            (
                "right",
                &hosts.right,
                RIGHT_UNDERLAY,
                RIGHT_OVERLAY,
                LEFT_UNDERLAY,
            ),
        ] {
            let log = running.dir.file(&format!("{role}.log"));
            let process =
                launch(&binary, role, namespace, [underlay, overlay, peer], log).map_err(failed)?;
            running.processes.push(process);
        }
        let processes: Vec<&LoggedProcess> = running.processes.iter().collect();
        support::wait_for_first_ping(&hosts.left, RIGHT_OVERLAY, &processes).map_err(failed)?;
        Ok(Box::new(running))
    }
}

/// Starts one end and gives its device the overlay address.
fn launch(
    binary: &Path,
    role: &str,
    namespace: &Namespace,
    [underlay, overlay, peer]: [Ipv4Addr; 3],
    log: PathBuf,
) -> Result<LoggedProcess, String> {
    let ifname = wireguard::unique_ifname();
    let mut command = namespace.command(binary);
    command
        .args(["lab", "relay", "--tun", &ifname])
        .args(["--listen", &format!("{underlay}:{PORT}")])
        .args(["--peer", &format!("{peer}:{PORT}")]);
    let mut process = LoggedProcess::spawn(format!("relay ({role})"), &mut command, log)?;
    process.wait_until(
        START_TIMEOUT,
        &format!("{ifname} in {}", namespace.name()),
        |_| support::link_exists(namespace, &ifname),
    )?;
    support::configure_link(namespace, &ifname, overlay, OVERLAY_PREFIX_LEN, TUNNEL_MTU)
        .map_err(|e| format!("{e}; {}", process.tail()))?;
    Ok(process)
}

struct RunningRelay {
    processes: Vec<LoggedProcess>,
    /// Holds the logs until the relays have stopped.
    dir: WorkDir,
}

impl RunningSystem for RunningRelay {
    fn pids(&self) -> Vec<u32> {
        support::pids(&self.processes)
    }

    fn mtu(&self) -> u16 {
        TUNNEL_MTU
    }
}

impl Drop for RunningRelay {
    fn drop(&mut self) {
        for process in &mut self.processes {
            process.stop();
        }
    }
}
