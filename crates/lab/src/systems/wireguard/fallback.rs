//! `fjord-fallback`: fjord between two hosts whose UDP to each other is
//! dropped by nftables (in the left host's namespace, both directions),
//! so the tunnel runs over fjord's fallback carrier to the right host's
//! `FallbackPort` (443): fake TCP, fjord's default. `fjord-fallback-tcp`
//! is the same over the other carrier, a real TCP connection, so the two
//! compare in one run. The left side knows the right's endpoint and falls
//! back after its handshakes go unanswered (about 10 s); the start returns
//! once a ping crossed the tunnel and the left side reports the peer on
//! its carrier, so every figure measured after it is the carrier's.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fjord::get_fjord;
use super::{Fjord, Implementation, Initiator, RunningWireGuard, WgSide, point_to_point};
use crate::firewall::UdpFirewall;
use crate::systems::support::{self, start_failed};
use crate::systems::{StartResult, System, SystemError};
use crate::topology::{RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};

/// Where the right side accepts carrier connections: the port firewalls
/// that allow only TCP most often leave open.
pub const FALLBACK_PORT: u16 = 443;
/// UDP handshakes go unanswered for 10 s before the carrier opens;
/// then one more round trip.
const FIRST_PING_TIMEOUT: Duration = Duration::from_secs(30);

/// The carriers fjord falls back to, as `FallbackCarrier` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    FakeTcp,
    Tcp,
}

impl Carrier {
    /// The value of `FallbackCarrier`.
    pub fn key(self) -> &'static str {
        match self {
            Carrier::FakeTcp => "fake-tcp",
            Carrier::Tcp => "tcp",
        }
    }
}

/// fjord over its fallback carrier, UDP between the hosts blocked.
pub struct FjordFallback {
    fjord: Fjord,
    carrier: Carrier,
}

impl FjordFallback {
    pub fn locate(carrier: Carrier) -> Self {
        Self {
            fjord: Fjord::locate(),
            carrier,
        }
    }

    /// The binary at `binary` (tests pass `env!("CARGO_BIN_EXE_fjord")`).
    pub fn at(binary: PathBuf, carrier: Carrier) -> Self {
        Self {
            fjord: Fjord::at(binary),
            carrier,
        }
    }
}

/// The two sides of [`point_to_point`] (the left initiates): the right
/// accepts `carrier` on [`FALLBACK_PORT`], the left falls back to it.
pub fn fallback_pair(carrier: Carrier) -> Result<(WgSide, WgSide), SystemError> {
    let (mut left, mut right) = point_to_point(Initiator::Left)?;
    right.fallback_port = Some(FALLBACK_PORT);
    for side in [&mut left, &mut right] {
        side.fallback_carrier = Some(carrier.key());
    }
    for peer in &mut left.peers {
        peer.fallback_port = Some(FALLBACK_PORT);
    }
    Ok((left, right))
}

/// Whether `get=fjord` of `ifname` reports its one peer on a carrier.
pub fn carried(ifname: &str) -> Result<bool, String> {
    Ok(get_fjord(ifname)?
        .lines()
        .filter_map(|line| line.strip_prefix("fallback="))
        .any(|line| line.split_whitespace().nth(1) == Some("carrier")))
}

impl System for FjordFallback {
    fn name(&self) -> &str {
        match self.carrier {
            Carrier::FakeTcp => "fjord-fallback",
            Carrier::Tcp => "fjord-fallback-tcp",
        }
    }

    fn description(&self) -> &str {
        match self.carrier {
            Carrier::FakeTcp => {
                "fjord with UDP between the hosts dropped by nftables: the tunnel runs over its fallback carrier, fake TCP to port 443"
            }
            Carrier::Tcp => {
                "fjord-fallback over the other carrier: a real TCP connection to port 443 (FallbackCarrier = tcp)"
            }
        }
    }

    fn check(&self) -> Result<String, String> {
        let path = self.fjord.installed()?;
        support::find_program("nft", &[])
            .ok_or_else(|| "nft not found; install with `apt-get install nftables`".to_string())?;
        Ok(format!("{}, {}", path.display(), self.fjord.settings()))
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let name = self.name();
        let failed = |detail: String| start_failed(name, detail);
        self.check().map_err(SystemError::NotInstalled)?;
        let firewall = UdpFirewall::between(&hosts.left, IpAddr::V4(RIGHT_UNDERLAY))
            .map_err(|e| failed(format!("blocking UDP with nftables: {e}")))?;
        let (left_side, right_side) = fallback_pair(self.carrier)?;
        let right = self.fjord.start(&hosts.right, &right_side, workdir)?;
        let left = self.fjord.start(&hosts.left, &left_side, workdir)?;
        crate::traffic::wait_for_ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), FIRST_PING_TIMEOUT)
            .map_err(|e| failed(format!("no ping through the carrier: {e}")))?;
        if !carried(left.ifname()).map_err(failed)? {
            return Err(failed(
                "the tunnel came up, but not over the carrier".to_string(),
            ));
        }
        Ok(Box::new(RunningWireGuard {
            left,
            right,
            mtu_bytes: left_side.mtu,
            _firewall: Some(firewall),
        }))
    }
}
