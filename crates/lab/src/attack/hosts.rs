//! The lab's two hosts and an attacker beside the right one (the
//! responder), on a link of its own:
//!
//! ```text
//! left ─eth0── 198.18.0.1/24 ═ 198.18.0.2/24 ──eth0─ right ─eth1── 198.18.1.2/24
//!                                                                      ║
//!                                     attacker ─eth0── 198.18.1.1/24 ══╝
//! ```
//!
//! The attacker sends frames with sources spoofed from [`SPOOFED_SOURCES`]
//! to the right host's tunnel address (198.18.0.2, as a real attacker
//! would aim); the right host routes that prefix back through the
//! attacker, so whatever it answers (cookie replies) crosses the attack
//! link and ends there: the attacker's namespace forwards nothing and owns
//! none of those addresses. Nothing reaches the left host or leaves the
//! namespaces, and the right host learns one neighbour, not one per
//! spoofed address.

use std::net::Ipv4Addr;

use super::frames::SourcePrefix;
use crate::netns::{self, Namespace, NetnsError};
use crate::topology::TwoHosts;

/// Where the spoofed sources come from: the top half of the underlay
/// range, which no lab host uses.
pub const SPOOFED_SOURCES: (Ipv4Addr, u8) = (Ipv4Addr::new(198, 18, 128, 0), 17);
/// The right host's address on the attack link.
pub const TARGET_ATTACK_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 2);
/// The attacker's address on the attack link.
pub const ATTACKER_ADDRESS: Ipv4Addr = Ipv4Addr::new(198, 18, 1, 1);
/// The right host's interface towards the attacker.
pub const TARGET_ATTACK_LINK: &str = "eth1";
/// The attacker's only interface.
pub const ATTACKER_LINK: &str = "eth0";

/// [`TwoHosts`] joined directly, plus the attacker.
/// Field order matters: the hosts drop before the attacker.
pub struct AttackedHosts {
    pub hosts: TwoHosts,
    pub attacker: Namespace,
}

impl AttackedHosts {
    pub fn build() -> Result<Self, NetnsError> {
        let hosts = TwoHosts::direct()?;
        let attacker = Namespace::create("atk")?;
        let built = Self { hosts, attacker };
        let right = &built.hosts.right;
        netns::veth(right, TARGET_ATTACK_LINK, &built.attacker, ATTACKER_LINK)?;
        right.ip(&[
            "addr",
            "add",
            &format!("{TARGET_ATTACK_ADDRESS}/24"),
            "dev",
            TARGET_ATTACK_LINK,
        ])?;
        built.attacker.ip(&[
            "addr",
            "add",
            &format!("{ATTACKER_ADDRESS}/24"),
            "dev",
            ATTACKER_LINK,
        ])?;
        right.ip(&[
            "route",
            "add",
            &spoofed_sources().to_string(),
            "via",
            &ATTACKER_ADDRESS.to_string(),
        ])?;
        // Known up front: the first spoofed frames must not wait for ARP,
        // and the answers to them need none.
        let right_mac = mac_address(right, TARGET_ATTACK_LINK)?;
        let attacker_mac = mac_address(&built.attacker, ATTACKER_LINK)?;
        for (namespace, address, mac, link) in [
            (right, ATTACKER_ADDRESS, attacker_mac, TARGET_ATTACK_LINK),
            (
                &built.attacker,
                TARGET_ATTACK_ADDRESS,
                right_mac,
                ATTACKER_LINK,
            ),
        ] {
            namespace.ip(&[
                "neigh",
                "replace",
                &address.to_string(),
                "lladdr",
                &format_mac(&mac),
                "dev",
                link,
                "nud",
                "permanent",
            ])?;
        }
        Ok(built)
    }

    /// MAC addresses of the attack link: (the right host's, the attacker's).
    pub fn attack_link_macs(&self) -> Result<([u8; 6], [u8; 6]), NetnsError> {
        Ok((
            mac_address(&self.hosts.right, TARGET_ATTACK_LINK)?,
            mac_address(&self.attacker, ATTACKER_LINK)?,
        ))
    }
}

pub fn spoofed_sources() -> SourcePrefix {
    let (network, prefix_len) = SPOOFED_SOURCES;
    // A /17 leaves hosts to draw.
    SourcePrefix::new(network, prefix_len).expect("a /17 is a valid source prefix")
}

/// The hardware address of `link` in `namespace` (`ip -o link show`).
pub fn mac_address(namespace: &Namespace, link: &str) -> Result<[u8; 6], NetnsError> {
    let shown = namespace.ip(&["-o", "link", "show", "dev", link])?;
    shown
        .split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .and_then(parse_mac)
        .ok_or_else(|| NetnsError::Failed {
            command: format!("ip -n {} -o link show dev {link}", namespace.name()),
            status: "ok".to_string(),
            stderr: format!("no Ethernet address in: {}", shown.trim()),
        })
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in &mut mac {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn format_mac(mac: &[u8; 6]) -> String {
    mac.iter()
        .map(|byte| format!("{byte:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_round_trip() {
        let mac = parse_mac("02:66:6a:00:0a:ff").unwrap();
        assert_eq!(mac, [2, 0x66, 0x6a, 0, 0x0a, 0xff]);
        assert_eq!(format_mac(&mac), "02:66:6a:00:0a:ff");
        assert!(parse_mac("02:66:6a:00:0a").is_none());
        assert!(parse_mac("02:66:6a:00:0a:ff:00").is_none());
        assert!(parse_mac("zz:66:6a:00:0a:ff").is_none());
    }

    #[test]
    fn spoofed_sources_stay_clear_of_the_lab_hosts() {
        let sources = spoofed_sources();
        for used in [
            crate::topology::LEFT_UNDERLAY,
            crate::topology::RIGHT_UNDERLAY,
            TARGET_ATTACK_ADDRESS,
            ATTACKER_ADDRESS,
        ] {
            assert!(!sources.contains(used), "{used}");
        }
        assert!(sources.contains(Ipv4Addr::new(198, 18, 200, 9)));
    }
}
