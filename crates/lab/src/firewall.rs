//! A firewall between two members: nftables rules in one host's namespace
//! that drop UDP to and from one address, removed on drop.

use std::net::IpAddr;

use crate::netns::{Namespace, NetnsError};

/// The nftables table the rules live in.
const FIREWALL_TABLE: &str = "fjord_lab_udp_firewall";

/// Drops UDP between `host` and one address, both ways, while it lives.
pub struct UdpFirewall<'a> {
    host: &'a Namespace,
}

impl<'a> UdpFirewall<'a> {
    pub fn between(host: &'a Namespace, other: IpAddr) -> Result<Self, NetnsError> {
        let family = if other.is_ipv4() { "ip" } else { "ip6" };
        host.exec("nft", &["add", "table", "inet", FIREWALL_TABLE])?;
        let firewall = Self { host };
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

impl Drop for UdpFirewall<'_> {
    fn drop(&mut self) {
        if let Err(error) = self
            .host
            .exec("nft", &["delete", "table", "inet", FIREWALL_TABLE])
        {
            tracing::warn!(%error, "removing a UDP firewall");
        }
    }
}
