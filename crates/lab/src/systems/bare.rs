//! `bare`: no tunnel. Traffic goes straight over the underlay veth; every
//! other system's figures are reported as ratios to this one.

use std::net::IpAddr;
use std::path::Path;

use super::{RunningSystem, StartResult, System};
use crate::topology::{LEFT_UNDERLAY, RIGHT_UNDERLAY, TwoHosts};

pub struct Bare;

struct BareLink;

impl System for Bare {
    fn name(&self) -> &str {
        "bare"
    }

    fn description(&self) -> &str {
        "no tunnel: the underlay link itself (the reference)"
    }

    fn check(&self) -> Result<String, String> {
        Ok("kernel".to_string())
    }

    fn start(&self, _hosts: &TwoHosts, _workdir: &Path) -> StartResult {
        Ok(Box::new(BareLink))
    }

    /// Bare has no tunnel interface: it runs on the underlay at whatever
    /// MTU the suite gave it, the reference for tunnels at `_mtu_bytes`.
    fn start_with_mtu(&self, hosts: &TwoHosts, workdir: &Path, _mtu_bytes: u16) -> StartResult {
        self.start(hosts, workdir)
    }
}

impl RunningSystem for BareLink {
    fn left_address(&self) -> IpAddr {
        IpAddr::V4(LEFT_UNDERLAY)
    }

    fn right_address(&self) -> IpAddr {
        IpAddr::V4(RIGHT_UNDERLAY)
    }

    fn pids(&self) -> Vec<u32> {
        Vec::new()
    }

    fn mtu(&self) -> u16 {
        1500
    }
}
