//! A firewall between two hosts: nftables rules in one host's namespace
//! that drop UDP to and from one address, removed on drop.

use std::net::IpAddr;
use std::process::Command;

use crate::netns::{self, Namespace, NetnsError};

/// The nftables table the rules live in.
const FIREWALL_TABLE: &str = "fjord_lab_udp_firewall";

/// Drops UDP between a host and one address, both ways, while it lives.
/// It holds the namespace's name, not the namespace, so a running system
/// can keep it; it must drop before the namespace does.
pub struct UdpFirewall {
    namespace: String,
}

impl UdpFirewall {
    pub fn between(host: &Namespace, other: IpAddr) -> Result<Self, NetnsError> {
        let family = if other.is_ipv4() { "ip" } else { "ip6" };
        host.exec("nft", &["add", "table", "inet", FIREWALL_TABLE])?;
        let firewall = Self {
            namespace: host.name().to_string(),
        };
        for (chain, hook, direction) in [("out", "output", "daddr"), ("in", "input", "saddr")] {
            let spec = format!("{{ type filter hook {hook} priority 0; }}");
            host.exec(
                "nft",
                &["add", "chain", "inet", FIREWALL_TABLE, chain, &spec],
            )?;
            let other = other.to_string();
            host.exec(
                "nft",
                &[
                    "add",
                    "rule",
                    "inet",
                    FIREWALL_TABLE,
                    chain,
                    family,
                    direction,
                    &other,
                    "meta",
                    "l4proto",
                    "udp",
                    "drop",
                ],
            )?;
        }
        Ok(firewall)
    }
}

impl Drop for UdpFirewall {
    fn drop(&mut self) {
        let removed = netns::run(Command::new("ip").args([
            "netns",
            "exec",
            &self.namespace,
            "nft",
            "delete",
            "table",
            "inet",
            FIREWALL_TABLE,
        ]));
        if let Err(error) = removed {
            tracing::warn!(%error, "removing a UDP firewall");
        }
    }
}
