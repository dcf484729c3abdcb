//! Systems that speak the WireGuard protocol (fjord, wireguard-go,
//! boringtun), brought up from one [`crate::peers`] side description per
//! host. The left host initiates.

use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use super::{RunningSystem, System, SystemError};
use crate::peers::{
    self, Boringtun, DEFAULT_MTU, Fjord, Initiator, LEFT_OVERLAY, RIGHT_OVERLAY, RunningSide,
    TunnelImpl, WireguardGo,
};
use crate::topology::TwoHosts;

/// How long a fresh tunnel may take to carry its first ping.
const FIRST_PING_TIMEOUT: Duration = Duration::from_secs(15);

pub struct WireGuardSystem {
    implementation: Box<dyn TunnelImpl>,
    description: &'static str,
}

pub fn all() -> Vec<WireGuardSystem> {
    vec![
        WireGuardSystem {
            implementation: Box::new(Fjord::locate()),
            description: "fjord: this project's WireGuard-compatible VPN",
        },
        WireGuardSystem {
            implementation: Box::new(WireguardGo::locate()),
            description: "wireguard-go: the official userspace WireGuard (Go)",
        },
        WireGuardSystem {
            implementation: Box::new(Boringtun::locate()),
            description: "boringtun: Cloudflare's userspace WireGuard (Rust)",
        },
    ]
}

struct RunningWireGuard {
    // Right (responder) last: it must outlive the initiator's shutdown.
    left: Box<dyn RunningSide>,
    right: Box<dyn RunningSide>,
}

impl System for WireGuardSystem {
    fn name(&self) -> &str {
        self.implementation.name()
    }

    fn description(&self) -> &str {
        self.description
    }

    fn check(&self) -> Result<String, String> {
        let path = self.implementation.installed()?;
        let settings = self.implementation.settings();
        Ok(if settings.is_empty() {
            path.display().to_string()
        } else {
            format!("{}, {settings}", path.display())
        })
    }

    fn start(
        &self,
        hosts: &TwoHosts,
        workdir: &Path,
    ) -> Result<Box<dyn RunningSystem>, SystemError> {
        let failed = |detail: String| SystemError::StartFailed {
            system: self.name().to_string(),
            detail,
        };
        self.check().map_err(SystemError::NotInstalled)?;
        let (left_side, right_side) =
            peers::point_to_point(Initiator::Left).map_err(|e| failed(e.to_string()))?;
        let right = self
            .implementation
            .start(&hosts.right, &right_side, workdir)
            .map_err(|e| failed(e.to_string()))?;
        let left = self
            .implementation
            .start(&hosts.left, &left_side, workdir)
            .map_err(|e| failed(e.to_string()))?;
        crate::traffic::wait_for_ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), FIRST_PING_TIMEOUT)
            .map_err(|e| failed(format!("no ping through the tunnel: {e}")))?;
        Ok(Box::new(RunningWireGuard { left, right }))
    }
}

impl RunningSystem for RunningWireGuard {
    fn left_address(&self) -> IpAddr {
        IpAddr::V4(LEFT_OVERLAY)
    }

    fn right_address(&self) -> IpAddr {
        IpAddr::V4(RIGHT_OVERLAY)
    }

    fn pids(&self) -> Vec<u32> {
        let mut pids = self.left.pids();
        pids.extend(self.right.pids());
        pids
    }

    fn mtu(&self) -> u16 {
        DEFAULT_MTU
    }
}
