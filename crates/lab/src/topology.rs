//! The lab's hosts: two namespaces joined directly by veth, or through a
//! middle namespace where the link emulator bridges frames between its two
//! interfaces (so impairments act where a network would lose packets).
//!
//! Addresses: underlay 198.18.0.1/24 (left) and 198.18.0.2/24 (right), on
//! one subnet in both layouts; the middle namespace has no addresses and
//! forwards nothing by itself until an emulator attaches. Tunnels between
//! the hosts use the overlay 198.19.0.1/24 (left) and 198.19.0.2/24 (right).

use std::net::Ipv4Addr;

use crate::netns::{self, Namespace, NetnsError};

/// Underlay address of the left host.
pub const LEFT_UNDERLAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 1);
/// Underlay address of the right host.
pub const RIGHT_UNDERLAY: Ipv4Addr = Ipv4Addr::new(198, 18, 0, 2);
/// Overlay (tunnel) address of the left host.
pub const LEFT_OVERLAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
/// Overlay (tunnel) address of the right host.
pub const RIGHT_OVERLAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
/// Prefix length of the overlay subnet.
pub const OVERLAY_PREFIX_LEN: u8 = 24;
/// Name of each host's underlay interface.
pub const HOST_LINK: &str = "eth0";
/// Memory each host may hold in incomplete IP reassemblies. The kernel's
/// 4 MiB fills with the first fragments of datagrams whose other fragment
/// a lossy trial dropped (about 2,000 of them); until they time out, every
/// new fragment is refused, so one overloaded trial would make the next
/// ones at 1,518 bytes (which a 1,420-byte tunnel fragments) lose
/// everything. The hosts are the lab's traffic ends, not the system
/// measured, so their reassembly must never be the limit.
const REASSEMBLY_MEMORY_BYTES: u64 = 256 << 20;
/// Seconds an incomplete reassembly is kept (the kernel's default is 30):
/// long enough for any fragment still in flight, short enough that a
/// trial's leftovers are gone before the next trial ends.
const REASSEMBLY_TIMEOUT_SECS: u32 = 1;

/// Names of the middle namespace's interfaces towards left and right.
pub const MIDDLE_LEFT_LINK: &str = "to-left";
pub const MIDDLE_RIGHT_LINK: &str = "to-right";

/// Two hosts, optionally with a middle namespace between them.
/// Field order matters: hosts drop before the middle.
pub struct TwoHosts {
    pub left: Namespace,
    pub right: Namespace,
    pub middle: Option<Namespace>,
}

impl TwoHosts {
    /// Left and right as mesh hosts, reached at their underlay addresses.
    pub fn mesh_hosts(&self) -> [MeshHost<'_>; 2] {
        [
            MeshHost {
                namespace: &self.left,
                underlay: LEFT_UNDERLAY,
            },
            MeshHost {
                namespace: &self.right,
                underlay: RIGHT_UNDERLAY,
            },
        ]
    }

    /// Left and right joined by one veth pair.
    pub fn direct() -> Result<Self, NetnsError> {
        let left = Namespace::create("l")?;
        let right = Namespace::create("r")?;
        netns::veth(&left, HOST_LINK, &right, HOST_LINK)?;
        let hosts = Self {
            left,
            right,
            middle: None,
        };
        hosts.set_up_hosts()?;
        Ok(hosts)
    }

    /// Left — middle — right, two veth pairs; segmentation offloads are off
    /// on every link so the emulator sees wire-sized frames.
    pub fn with_middle() -> Result<Self, NetnsError> {
        let left = Namespace::create("l")?;
        let right = Namespace::create("r")?;
        let middle = Namespace::create("m")?;
        netns::veth(&left, HOST_LINK, &middle, MIDDLE_LEFT_LINK)?;
        netns::veth(&right, HOST_LINK, &middle, MIDDLE_RIGHT_LINK)?;
        for (namespace, link) in [
            (&left, HOST_LINK),
            (&right, HOST_LINK),
            (&middle, MIDDLE_LEFT_LINK),
            (&middle, MIDDLE_RIGHT_LINK),
        ] {
            disable_offloads(namespace, link)?;
        }
        let hosts = Self {
            left,
            right,
            middle: Some(middle),
        };
        hosts.set_up_hosts()?;
        Ok(hosts)
    }

    /// Sets both hosts' underlay link to `mtu_bytes` (a veth takes up to
    /// 65,535), for tunnels whose packets are larger than 1,500 bytes.
    pub fn set_underlay_mtu(&self, mtu_bytes: u16) -> Result<(), NetnsError> {
        for host in [&self.left, &self.right] {
            host.ip(&[
                "link",
                "set",
                "dev",
                HOST_LINK,
                "mtu",
                &mtu_bytes.to_string(),
            ])?;
        }
        Ok(())
    }

    /// Sizes both hosts' IP reassembly (see [`REASSEMBLY_MEMORY_BYTES`])
    /// and gives them their underlay addresses.
    fn set_up_hosts(&self) -> Result<(), NetnsError> {
        for host in [&self.left, &self.right] {
            host.exec(
                "sysctl",
                &[
                    "-qw",
                    &format!("net.ipv4.ipfrag_high_thresh={REASSEMBLY_MEMORY_BYTES}"),
                    &format!("net.ipv4.ipfrag_time={REASSEMBLY_TIMEOUT_SECS}"),
                    &format!("net.ipv6.ip6frag_high_thresh={REASSEMBLY_MEMORY_BYTES}"),
                    &format!("net.ipv6.ip6frag_time={REASSEMBLY_TIMEOUT_SECS}"),
                ],
            )?;
        }
        self.left.ip(&[
            "addr",
            "add",
            &format!("{LEFT_UNDERLAY}/24"),
            "dev",
            HOST_LINK,
        ])?;
        self.right.ip(&[
            "addr",
            "add",
            &format!("{RIGHT_UNDERLAY}/24"),
            "dev",
            HOST_LINK,
        ])?;
        Ok(())
    }
}

/// Turns off TSO/GSO/GRO (and friends) on `link` so frames keep wire size.
pub fn disable_offloads(namespace: &Namespace, link: &str) -> Result<(), NetnsError> {
    namespace.exec(
        "ethtool",
        &[
            "-K", link, "tso", "off", "gso", "off", "gro", "off", "tx", "off", "rx", "off",
        ],
    )?;
    Ok(())
}

/// Name of the bridge in a [`Lan`]'s switch namespace.
pub const LAN_BRIDGE: &str = "br0";
/// Prefix length of a [`Lan`]'s underlay: 198.18.0.0/16, the underlay half
/// of the benchmarking range, so the overlay (198.19.0.0/16) never looks
/// like a neighbour on the wire.
pub const LAN_UNDERLAY_PREFIX_LEN: u8 = 16;
/// The most hosts a [`Lan`] numbers: every address stays inside its /16.
pub const LAN_MAX_HOSTS: usize = 65_000;

/// Hosts on one Ethernet segment: each host namespace has [`HOST_LINK`]
/// with its underlay address ([`lan_underlay`]), and a veth pair joins it
/// to a port (`p<index>`) of a bridge in a switch namespace. The switch
/// has no addresses, the hosts no route out.
///
/// Field order matters: hosts drop before the switch.
pub struct Lan {
    pub hosts: Vec<Namespace>,
    pub switch: Namespace,
}

/// A host a mesh node runs on: its namespace, and the address the other
/// hosts reach it at (node 0's is where every node bootstraps).
#[derive(Clone, Copy)]
pub struct MeshHost<'a> {
    pub namespace: &'a Namespace,
    pub underlay: Ipv4Addr,
}

impl Lan {
    pub fn mesh_hosts(&self) -> Vec<MeshHost<'_>> {
        self.hosts
            .iter()
            .enumerate()
            .map(|(index, namespace)| MeshHost {
                namespace,
                underlay: lan_underlay(index),
            })
            .collect()
    }
}

impl Lan {
    /// A LAN of `count` hosts (at most [`LAN_MAX_HOSTS`]). On failure
    /// everything built so far is removed.
    pub fn new(count: usize) -> Result<Self, NetnsError> {
        assert!(count <= LAN_MAX_HOSTS, "{count} hosts do not fit a /16");
        let switch = Namespace::create("sw")?;
        switch.ip(&["link", "add", LAN_BRIDGE, "type", "bridge"])?;
        switch.ip(&["link", "set", LAN_BRIDGE, "up"])?;
        // The guard exists before any host, so a failure below removes them.
        let mut lan = Self {
            hosts: Vec::with_capacity(count),
            switch,
        };
        for index in 0..count {
            let host = Namespace::create("h")?;
            let port = format!("p{index}");
            netns::veth(&host, HOST_LINK, &lan.switch, &port)?;
            lan.hosts.push(host);
            lan.switch
                .ip(&["link", "set", &port, "master", LAN_BRIDGE])?;
            let address = format!("{}/{LAN_UNDERLAY_PREFIX_LEN}", lan_underlay(index));
            let host = &lan.hosts[index];
            host.ip(&["addr", "add", &address, "dev", HOST_LINK])?;
            host.ip(&["link", "set", HOST_LINK, "address", &lan_mac(index)])?;
        }
        lan.add_static_neighbours()?;
        Ok(lan)
    }

    /// Every host learns every other host's MAC address up front, as
    /// permanent entries. Learned (ARP) entries of all namespaces share
    /// the kernel's one neighbour table, capped by `gc_thresh3` (1,024 by
    /// default): a 100-host LAN needs 9,900, and past the cap sends fail
    /// with "No buffer space available" ("neighbor table overflow" in the
    /// kernel log), which stalled the 100-node mesh. Permanent entries are
    /// not counted against the cap, and the LAN needs no ARP broadcasts,
    /// which a real mesh's members, spread over the internet, never share.
    fn add_static_neighbours(&self) -> Result<(), NetnsError> {
        for (index, host) in self.hosts.iter().enumerate() {
            let commands: String = (0..self.hosts.len())
                .filter(|&other| other != index)
                .map(|other| {
                    format!(
                        "neigh replace {} lladdr {} dev {HOST_LINK} nud permanent\n",
                        lan_underlay(other),
                        lan_mac(other)
                    )
                })
                .collect();
            host.ip_batch(&commands)?;
        }
        Ok(())
    }
}

/// MAC address of host `index` of a [`Lan`]: locally administered, unicast,
/// and unique for every index a LAN numbers.
pub fn lan_mac(index: usize) -> String {
    let [.., high, low] = (index as u32 + 1).to_be_bytes();
    format!("02:66:6a:00:{high:02x}:{low:02x}")
}

/// Underlay address of host `index` of a [`Lan`]: 198.18.0.1, 198.18.0.2, …
/// (198.18.1.0 follows 198.18.0.255).
pub fn lan_underlay(index: usize) -> Ipv4Addr {
    offset(Ipv4Addr::new(198, 18, 0, 0), index + 1)
}

/// Overlay address of host `index` of a [`Lan`]: 198.19.0.1, 198.19.0.2, …
pub fn lan_overlay(index: usize) -> Ipv4Addr {
    offset(Ipv4Addr::new(198, 19, 0, 0), index + 1)
}

/// The longest prefix length (at most 24) whose subnet of 198.19.0.0
/// holds the overlay addresses of `count` hosts, with the network and
/// broadcast addresses left free.
pub fn lan_overlay_prefix_len(count: usize) -> u8 {
    let mut prefix_len = 24;
    while prefix_len > LAN_UNDERLAY_PREFIX_LEN && (1usize << (32 - prefix_len)) < count + 2 {
        prefix_len -= 1;
    }
    prefix_len
}

fn offset(base: Ipv4Addr, by: usize) -> Ipv4Addr {
    assert!(by <= LAN_MAX_HOSTS, "host {by} is outside the /16");
    // By the assertion, `by` fits the 16 host bits of the /16.
    Ipv4Addr::from(u32::from(base) + by as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lan_macs_are_distinct_local_unicast() {
        assert_eq!(lan_mac(0), "02:66:6a:00:00:01");
        assert_eq!(lan_mac(256), "02:66:6a:00:01:01");
        assert_ne!(lan_mac(1), lan_mac(257));
    }

    #[test]
    fn lan_addresses_count_from_one_and_stay_in_their_halves() {
        assert_eq!(lan_underlay(0), Ipv4Addr::new(198, 18, 0, 1));
        assert_eq!(lan_overlay(99), Ipv4Addr::new(198, 19, 0, 100));
        assert_eq!(lan_underlay(255), Ipv4Addr::new(198, 18, 1, 0));
        assert_eq!(lan_overlay(LAN_MAX_HOSTS - 1).octets()[..2], [198, 19]);
    }

    #[test]
    fn overlay_prefix_covers_every_host() {
        assert_eq!(lan_overlay_prefix_len(4), 24);
        assert_eq!(lan_overlay_prefix_len(254), 24);
        assert_eq!(lan_overlay_prefix_len(255), 23);
        assert_eq!(lan_overlay_prefix_len(1000), 22);
    }
}
