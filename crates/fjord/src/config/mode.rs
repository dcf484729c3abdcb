//! `Mode` in `[Interface]`: router (a TUN interface, IP packets routed by
//! allowed IPs) or switch (a TAP interface, Ethernet frames switched by
//! MAC address), and what a file in switch mode may not hold.

use std::fmt;

use super::error::{ConfigError, Problem, ValueError};

/// `Mode`: what the interface carries, and how packets find their peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum InterfaceMode {
    /// `router`, the default: a TUN interface carrying IP packets, routed
    /// to peers by their allowed IPs (WireGuard's cryptokey routing).
    /// Works with every WireGuard peer.
    #[default]
    Router,
    /// `switch`: a TAP interface carrying Ethernet frames, switched to
    /// peers by MAC address (learned, aged, flooded when unknown), so ARP,
    /// neighbour discovery and any layer-2 protocol cross the tunnel.
    /// Every peer must be fjord in switch mode.
    Switch,
}

impl InterfaceMode {
    /// `router` or `switch`, any case.
    pub(super) fn parse(text: &str) -> Result<InterfaceMode, ValueError> {
        if text.eq_ignore_ascii_case("router") {
            Ok(InterfaceMode::Router)
        } else if text.eq_ignore_ascii_case("switch") {
            Ok(InterfaceMode::Switch)
        } else {
            Err(ValueError::invalid(text, "router or switch"))
        }
    }
}

impl fmt::Display for InterfaceMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            InterfaceMode::Router => "router",
            InterfaceMode::Switch => "switch",
        })
    }
}

/// Lines of a file where it holds what switch mode cannot work with.
pub(super) struct SwitchConflicts {
    /// The `Mode` line.
    pub mode_line: Option<usize>,
    /// The `[Mesh]` header: mesh members route by their certificates'
    /// addresses and need not be in switch mode.
    pub mesh_line: Option<usize>,
    /// The first non-empty `AllowedIPs`: frames go by MAC address, so
    /// allowed IPs would route and check nothing.
    pub allowed_ips_line: Option<usize>,
}

impl SwitchConflicts {
    /// The first conflict, as `file:line: key: problem`, if `mode` is switch.
    pub(super) fn check(&self, source_name: &str, mode: InterfaceMode) -> Result<(), ConfigError> {
        if mode != InterfaceMode::Switch {
            return Ok(());
        }
        let at = |line: Option<usize>, key: &'static str, problem: String| {
            ConfigError::invalid(source_name, line, Problem::SwitchMode { key, problem })
        };
        if let Some(mesh_line) = self.mesh_line {
            return Err(at(
                self.mode_line,
                "Mode",
                format!(
                    "switch mode works with [Peer] sections only, not with the [Mesh] at line {mesh_line}"
                ),
            ));
        }
        if let Some(line) = self.allowed_ips_line {
            return Err(at(
                Some(line),
                "AllowedIPs",
                "not used in switch mode (Mode = switch routes frames by MAC address); remove it, or set Mode = router".to_string(),
            ));
        }
        Ok(())
    }
}
