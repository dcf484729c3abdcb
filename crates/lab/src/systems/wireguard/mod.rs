//! Systems that speak the WireGuard protocol (fjord, wireguard-go,
//! boringtun), brought up from one side description ([`WgSide`]) per host.
//! The left host initiates.
//!
//! Each [`Implementation`] starts one side of a tunnel inside a namespace,
//! so any two pair up (fjord↔wireguard-go, boringtun↔fjord, …): the interop
//! tests pair them across implementations; as a lab system
//! ([`WireGuardSystem`]) both hosts run the same one, except in the mixed
//! pair `fjord-wireguard-go` (fjord on the left, initiating and sending,
//! wireguard-go on the right), which shows what fjord costs a plain
//! WireGuard peer.
//!
//! Starting a side: the userspace daemon runs in the foreground with its
//! stdout and stderr in a log file in the caller's work directory, the
//! interface is configured (keys and peers through `wg setconf`, addresses,
//! MTU and routes through `ip`, as wg-quick would, or by fjord itself from
//! a wg-quick style file), and the start returns once the interface is up.
//! The returned [`Interface`] stops the daemon on drop.
//!
//! wireguard-go and boringtun keep their control sockets in
//! `/var/run/wireguard/IFNAME.sock`, which every namespace shares, so
//! interface names must be unique across concurrently running tests:
//! [`unique_ifname`] makes them so.

pub mod fallback;
pub(crate) mod fjord;
mod interface;
mod pair;
mod scraper;
mod side;
mod userspace;

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use fjord_proto::{DropCounters, HandshakeCounters};

pub use fallback::FjordFallback;
pub use fjord::{Fjord, use_binary as use_fjord_binary, use_threads as use_fjord_threads};
pub use interface::{Interface, PeerStats};
pub use pair::{End, Pair};
pub use side::{
    DEFAULT_MTU, Initiator, LISTEN_PORT, SideAddresses, WgPeer, WgSide, full_mesh,
    generate_private_key, point_to_point, point_to_point_between, unique_ifname,
};
pub use userspace::{Boringtun, BoringtunCli, Daemon, Userspace, WireguardGo, WireguardGoDaemon};

use super::support::{self, start_failed};
use super::{RunningMesh, RunningSystem, StartResult, System, SystemError};
use crate::netns::Namespace;
use crate::topology::{MeshHost, RIGHT_OVERLAY, TwoHosts};

/// What starting one side gives: its interface, up and configured, or why
/// it did not come up.
pub type SideResult = Result<Interface, SystemError>;

/// A WireGuard implementation that can run one side of a tunnel.
pub trait Implementation: Send + Sync {
    /// Short name used in logs and reports (`fjord`, `wireguard-go`, …).
    fn name(&self) -> &'static str;
    /// The program that would run, or one line saying why it cannot.
    fn installed(&self) -> Result<PathBuf, String>;
    /// Settings that change its figures, for the report (empty: none).
    fn settings(&self) -> String {
        String::new()
    }
    /// Starts `side` inside `namespace` and returns once its interface is up
    /// and configured. Logs and config files go to `workdir`.
    fn start(&self, namespace: &Namespace, side: &WgSide, workdir: &Path) -> SideResult;
    /// Handshake work of the running `side` by its own account
    /// (initiations read with Diffie–Hellman work, cookie replies sent);
    /// `None` where the implementation does not report it.
    fn handshake_counters(&self, _side: &Interface) -> Option<Result<HandshakeCounters, String>> {
        None
    }
    /// What the running `side` refused so far, by reason, by its own
    /// count; `None` where the implementation does not report it.
    fn drop_counters(&self, _side: &Interface) -> Option<Result<DropCounters, String>> {
        None
    }

    /// The same implementation with its rekey cycle `divisor` times
    /// faster (a rekey every 120 s ÷ `divisor`), where it has a test
    /// switch for that (fjord's `--test-rekey-divisor`); `None` where it
    /// rekeys on WireGuard's timers only. Both ends must run the same.
    fn with_fast_rekeys(&self, _divisor: u32) -> Option<Box<dyn Implementation>> {
        None
    }
    /// Configures a mesh of this implementation across `lan`; see
    /// [`System::start_mesh`].
    fn start_mesh(
        &self,
        _hosts: &[MeshHost<'_>],
        _workdir: &Path,
    ) -> Result<Box<dyn RunningMesh>, SystemError> {
        Err(super::no_mesh_mode(self.name()))
    }
}

/// One implementation on both hosts, or a mixed pair, as a lab system.
pub struct WireGuardSystem {
    /// The left host's (the initiator's), and the right host's unless
    /// `mixed` says otherwise.
    implementation: Box<dyn Implementation>,
    /// A mixed pair: the system's name and the right host's implementation.
    mixed: Option<(&'static str, Box<dyn Implementation>)>,
    description: &'static str,
}

impl WireGuardSystem {
    fn same_on_both(implementation: Box<dyn Implementation>, description: &'static str) -> Self {
        Self {
            implementation,
            mixed: None,
            description,
        }
    }

    fn right_implementation(&self) -> &dyn Implementation {
        match &self.mixed {
            Some((_, right)) => right.as_ref(),
            None => self.implementation.as_ref(),
        }
    }
}

pub fn all() -> Vec<WireGuardSystem> {
    vec![
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate()),
            "fjord: this project's WireGuard-compatible VPN",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().with_scraped_metrics()),
            "fjord serving Prometheus metrics (--metrics), scraped every second",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().chacha_only()),
            "fjord with its data cipher forced to ChaCha20-Poly1305",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().in_switch_mode()),
            "fjord in switch mode: a TAP interface, Ethernet frames switched by MAC address",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().compressed()),
            "fjord with LZ4 compression on both sides (Compression = lz4)",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().compressed_with(fjord_proto::Codec::Zstd)),
            "fjord with zstd compression on both sides (Compression = zstd)",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Fjord::locate().compressed().with_mtu(fjord::JUMBO_MTU)),
            "fjord-compress at tunnel MTU 9,000 (the underlay fragments each packet)",
        ),
        WireGuardSystem::same_on_both(
            Box::new(
                Fjord::locate()
                    .compressed_with(fjord_proto::Codec::Zstd)
                    .with_mtu(fjord::JUMBO_MTU),
            ),
            "fjord-zstd at tunnel MTU 9,000: more text per packet for zstd to find (the underlay fragments each packet)",
        ),
        WireGuardSystem {
            implementation: Box::new(Fjord::locate()),
            mixed: Some(("fjord-wireguard-go", Box::new(WireguardGo::locate()))),
            description: "fjord (left, sending) to wireguard-go (right): a mixed pair, on ChaCha20-Poly1305",
        },
        WireGuardSystem::same_on_both(
            Box::new(WireguardGo::locate()),
            "wireguard-go: the official userspace WireGuard (Go)",
        ),
        WireGuardSystem::same_on_both(
            Box::new(Boringtun::locate()),
            "boringtun: Cloudflare's userspace WireGuard (Rust)",
        ),
    ]
}

struct RunningWireGuard {
    // Right (responder) last: it must outlive the initiator's shutdown.
    left: Interface,
    right: Interface,
    mtu_bytes: u16,
    /// What blocks UDP between the hosts (`fjord-fallback`), removed
    /// after both sides stopped.
    _firewall: Option<crate::firewall::UdpFirewall>,
}

impl System for WireGuardSystem {
    fn name(&self) -> &str {
        match &self.mixed {
            Some((name, _)) => name,
            None => self.implementation.name(),
        }
    }

    fn description(&self) -> &str {
        self.description
    }

    fn check(&self) -> Result<String, String> {
        let describe = |implementation: &dyn Implementation| -> Result<String, String> {
            let path = implementation.installed()?;
            let settings = implementation.settings();
            Ok(if settings.is_empty() {
                path.display().to_string()
            } else {
                format!("{}, {settings}", path.display())
            })
        };
        let left = describe(self.implementation.as_ref())?;
        match &self.mixed {
            Some((_, right)) => Ok(format!("left {left}; right {}", describe(right.as_ref())?)),
            None => Ok(left),
        }
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        self.start_with_mtu(hosts, workdir, DEFAULT_MTU)
    }

    fn start_with_mtu(&self, hosts: &TwoHosts, workdir: &Path, mtu_bytes: u16) -> StartResult {
        let failed = |detail: String| start_failed(self.name(), detail);
        self.check().map_err(SystemError::NotInstalled)?;
        let (mut left_side, mut right_side) =
            point_to_point(Initiator::Left).map_err(|e| failed(e.to_string()))?;
        left_side.mtu = mtu_bytes;
        right_side.mtu = mtu_bytes;
        // Failures already name the implementation, which is this system.
        let right = self
            .right_implementation()
            .start(&hosts.right, &right_side, workdir)?;
        let left = self
            .implementation
            .start(&hosts.left, &left_side, workdir)?;
        crate::traffic::wait_for_ping(
            &hosts.left,
            IpAddr::V4(RIGHT_OVERLAY),
            support::FIRST_PING_TIMEOUT,
        )
        .map_err(|e| failed(format!("no ping through the tunnel: {e}")))?;
        Ok(Box::new(RunningWireGuard {
            left,
            right,
            mtu_bytes,
            _firewall: None,
        }))
    }

    fn start_mesh(
        &self,
        hosts: &[MeshHost<'_>],
        workdir: &Path,
    ) -> Result<Box<dyn RunningMesh>, SystemError> {
        if self.mixed.is_some() {
            return Err(super::no_mesh_mode(self.name()));
        }
        self.check().map_err(SystemError::NotInstalled)?;
        self.implementation.start_mesh(hosts, workdir)
    }

    /// Refused for a mixed pair: suites that restart or query one side
    /// assume both run the same implementation.
    fn wireguard(&self) -> Result<&dyn Implementation, String> {
        match &self.mixed {
            Some((_, right)) => Err(format!(
                "a mixed pair ({} beside {}), where the suite drives one implementation on both sides",
                self.implementation.name(),
                right.name()
            )),
            None => Ok(self.implementation.as_ref()),
        }
    }
}

impl RunningSystem for RunningWireGuard {
    fn pids(&self) -> Vec<u32> {
        let mut pids = self.left.pids();
        pids.extend(self.right.pids());
        pids
    }

    fn pids_by_side(&self) -> Option<[Vec<u32>; 2]> {
        Some([self.left.pids(), self.right.pids()])
    }

    fn mtu(&self) -> u16 {
        self.mtu_bytes
    }
}
