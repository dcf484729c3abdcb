//! The implementation-neutral description of one tunnel side ([`WgSide`]),
//! rendered for `wg setconf` or as a wg-quick style file, and a matching
//! pair for the two-host topology ([`point_to_point`]) or a set for a LAN
//! of hosts that all peer with each other ([`full_mesh`]).

use std::fmt::Write as _;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};

use fjord_mesh::Cidr;
use fjord_proto::{PresharedKey, PrivateKey, PublicKey};
use zeroize::Zeroizing;

use crate::systems::SystemError;
use crate::topology::{
    LEFT_OVERLAY, LEFT_UNDERLAY, MeshHost, OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, RIGHT_UNDERLAY,
    lan_overlay, lan_overlay_prefix_len,
};

/// UDP port every side listens on in [`point_to_point`].
pub const LISTEN_PORT: u16 = 51820;
/// WireGuard's default MTU: 1500 less the outer IPv4/UDP/WireGuard headers.
pub const DEFAULT_MTU: u16 = 1420;

/// One peer of a [`WgSide`], as a `[Peer]` section describes it.
#[derive(Debug, Clone)]
pub struct WgPeer {
    pub public_key: PublicKey,
    pub preshared_key: Option<PresharedKey>,
    /// Where to send the first handshake; `None` makes this side a pure
    /// responder towards the peer.
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<Cidr>,
    pub persistent_keepalive_secs: Option<u16>,
    /// fjord only: the TCP port the peer accepts fallback carriers on.
    pub fallback_port: Option<u16>,
}

/// One side of a tunnel: the interface and its peers, implementation-neutral.
#[derive(Debug, Clone)]
pub struct WgSide {
    /// Interface name; see [`unique_ifname`].
    pub ifname: String,
    pub private_key: PrivateKey,
    pub listen_port: u16,
    /// Interface addresses with their subnet (`198.19.0.1/24`).
    pub overlay: Vec<Cidr>,
    pub mtu: u16,
    pub peers: Vec<WgPeer>,
    /// fjord only: the TCP port this side accepts fallback carriers on.
    pub fallback_port: Option<u16>,
    /// fjord only: `FallbackCarrier` (`fake-tcp`, `tcp`); `None` leaves
    /// fjord's default.
    pub fallback_carrier: Option<&'static str>,
}

impl WgSide {
    /// A side with no peers and the default MTU.
    pub fn new(
        ifname: impl Into<String>,
        private_key: PrivateKey,
        listen_port: u16,
        overlay: Vec<Cidr>,
    ) -> Self {
        Self {
            ifname: ifname.into(),
            private_key,
            listen_port,
            overlay,
            mtu: DEFAULT_MTU,
            peers: Vec::new(),
            fallback_port: None,
            fallback_carrier: None,
        }
    }

    pub fn public_key(&self) -> PublicKey {
        self.private_key.public_key()
    }

    /// The configuration `wg setconf` takes: keys, port and peers only.
    pub fn setconf_text(&self) -> Zeroizing<String> {
        let mut text = self.interface_head();
        self.write_peers(&mut text, false);
        text
    }

    /// The `[Interface]` section's keys and port, which both files open with.
    fn interface_head(&self) -> Zeroizing<String> {
        let mut text = Zeroizing::new(String::new());
        // Writing to a String cannot fail.
        let _ = writeln!(text, "[Interface]");
        let _ = writeln!(
            text,
            "PrivateKey = {}",
            self.private_key.to_base64().as_str()
        );
        let _ = writeln!(text, "ListenPort = {}", self.listen_port);
        text
    }

    /// A wg-quick style file: [`WgSide::setconf_text`] plus `Address` and `MTU`.
    pub fn wg_quick_text(&self) -> Zeroizing<String> {
        let mut text = self.interface_head();
        if !self.overlay.is_empty() {
            let _ = writeln!(text, "Address = {}", join(&self.overlay));
        }
        let _ = writeln!(text, "MTU = {}", self.mtu);
        if let Some(port) = self.fallback_port {
            let _ = writeln!(text, "FallbackPort = {port}");
        }
        if let Some(carrier) = self.fallback_carrier {
            let _ = writeln!(text, "FallbackCarrier = {carrier}");
        }
        self.write_peers(&mut text, true);
        text
    }

    /// The `[Peer]` sections; `fjord_keys` adds the keys only fjord reads.
    fn write_peers(&self, text: &mut String, fjord_keys: bool) {
        for peer in &self.peers {
            let _ = writeln!(text, "\n[Peer]");
            let _ = writeln!(text, "PublicKey = {}", peer.public_key);
            if let Some(key) = &peer.preshared_key {
                let _ = writeln!(text, "PresharedKey = {}", key.to_base64().as_str());
            }
            if let Some(endpoint) = peer.endpoint {
                let _ = writeln!(text, "Endpoint = {endpoint}");
            }
            if !peer.allowed_ips.is_empty() {
                let _ = writeln!(text, "AllowedIPs = {}", join(&peer.allowed_ips));
            }
            if let Some(secs) = peer.persistent_keepalive_secs {
                let _ = writeln!(text, "PersistentKeepalive = {secs}");
            }
            if let (true, Some(port)) = (fjord_keys, peer.fallback_port) {
                let _ = writeln!(text, "FallbackPort = {port}");
            }
        }
    }

    /// Routes wg-quick would add: every allowed network not already covered
    /// by the subnet of an interface address.
    pub fn routes(&self) -> Vec<Cidr> {
        let mut routes: Vec<Cidr> = Vec::new();
        for allowed in self.peers.iter().flat_map(|peer| &peer.allowed_ips) {
            let network = allowed.network();
            let covered = self.overlay.iter().any(|address| {
                address.prefix_len() <= network.prefix_len() && address.contains(&network.address())
            });
            if !covered && !routes.contains(&network) {
                routes.push(network);
            }
        }
        routes
    }
}

fn join(cidrs: &[Cidr]) -> String {
    cidrs
        .iter()
        .map(Cidr::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Which side of [`point_to_point`] knows the other's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Initiator {
    Left,
    Right,
    Both,
}

/// A matching pair of sides for [`crate::topology::TwoHosts`]: overlay
/// 198.19.0.1/24 (left) and 198.19.0.2/24 (right), each allowing the other's
/// /32, listening on [`LISTEN_PORT`]. Only the initiator(s) get an
/// `Endpoint`, so the other side cannot send first.
pub fn point_to_point(initiator: Initiator) -> Result<(WgSide, WgSide), SystemError> {
    point_to_point_between(
        initiator,
        [
            SideAddresses {
                underlay: IpAddr::V4(LEFT_UNDERLAY),
                overlay: LEFT_OVERLAY,
            },
            SideAddresses {
                underlay: IpAddr::V4(RIGHT_UNDERLAY),
                overlay: RIGHT_OVERLAY,
            },
        ],
        OVERLAY_PREFIX_LEN,
    )
}

/// Where one side of a point-to-point tunnel is: the address its peer
/// sends to, and its own address inside the tunnel.
#[derive(Debug, Clone, Copy)]
pub struct SideAddresses {
    pub underlay: IpAddr,
    pub overlay: Ipv4Addr,
}

/// [`point_to_point`] between any two hosts (left, right): real hosts
/// of an inventory, each with its overlay address on a subnet of
/// `overlay_prefix_len`.
pub fn point_to_point_between(
    initiator: Initiator,
    [left_at, right_at]: [SideAddresses; 2],
    overlay_prefix_len: u8,
) -> Result<(WgSide, WgSide), SystemError> {
    let left_key = generate_private_key()?;
    let right_key = generate_private_key()?;
    let host = |address: Ipv4Addr| Cidr::host(IpAddr::V4(address));
    let subnet = |address: Ipv4Addr| {
        Cidr::new(IpAddr::V4(address), overlay_prefix_len).map_err(|error| {
            SystemError::Unsupported(format!("overlay {address}/{overlay_prefix_len}: {error}"))
        })
    };
    let mut left = WgSide::new(
        unique_ifname(),
        left_key,
        LISTEN_PORT,
        vec![subnet(left_at.overlay)?],
    );
    let mut right = WgSide::new(
        unique_ifname(),
        right_key,
        LISTEN_PORT,
        vec![subnet(right_at.overlay)?],
    );
    let left_initiates = matches!(initiator, Initiator::Left | Initiator::Both);
    let right_initiates = matches!(initiator, Initiator::Right | Initiator::Both);
    left.peers.push(WgPeer {
        public_key: right.public_key(),
        preshared_key: None,
        endpoint: left_initiates.then(|| SocketAddr::new(right_at.underlay, LISTEN_PORT)),
        allowed_ips: vec![host(right_at.overlay)],
        persistent_keepalive_secs: None,
        fallback_port: None,
    });
    right.peers.push(WgPeer {
        public_key: left.public_key(),
        preshared_key: None,
        endpoint: right_initiates.then(|| SocketAddr::new(left_at.underlay, LISTEN_PORT)),
        allowed_ips: vec![host(left_at.overlay)],
        persistent_keepalive_secs: None,
        fallback_port: None,
    });
    Ok((left, right))
}

/// One side per host of `hosts` (a [`crate::topology::Lan`]'s), each a
/// peer of every other with its endpoint (so any side may start first):
/// overlay [`lan_overlay`] and `fd00::<index + 1>` on one /24 and /64,
/// each peer allowed the other's two host addresses.
pub fn full_mesh(hosts: &[MeshHost<'_>]) -> Result<Vec<WgSide>, SystemError> {
    let prefix_len = lan_overlay_prefix_len(hosts.len());
    let overlay_v6 =
        |index: usize| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, index as u16 + 1));
    let mut sides = Vec::with_capacity(hosts.len());
    for index in 0..hosts.len() {
        let overlay = vec![
            // Valid for any IPv4 address and any of these lengths.
            Cidr::new(IpAddr::V4(lan_overlay(index)), prefix_len).expect("IPv4 prefix"),
            Cidr::new(overlay_v6(index), 64).expect("/64 fits IPv6"),
        ];
        sides.push(WgSide::new(
            unique_ifname(),
            generate_private_key()?,
            LISTEN_PORT,
            overlay,
        ));
    }
    let keys: Vec<PublicKey> = sides.iter().map(WgSide::public_key).collect();
    for (index, side) in sides.iter_mut().enumerate() {
        for (other, host) in hosts
            .iter()
            .enumerate()
            .filter(|(other, _)| *other != index)
        {
            side.peers.push(WgPeer {
                public_key: keys[other],
                preshared_key: None,
                endpoint: Some(SocketAddr::new(IpAddr::V4(host.underlay), LISTEN_PORT)),
                allowed_ips: vec![
                    Cidr::host(IpAddr::V4(lan_overlay(other))),
                    Cidr::host(overlay_v6(other)),
                ],
                persistent_keepalive_secs: None,
                fallback_port: None,
            });
        }
    }
    Ok(sides)
}

/// A fresh private key, clamped as `wg genkey` clamps.
pub fn generate_private_key() -> Result<PrivateKey, SystemError> {
    let mut bytes = Zeroizing::new([0u8; 32]);
    getrandom::fill(bytes.as_mut()).map_err(|error| SystemError::Io {
        operation: "generate a private key".into(),
        source: io::Error::other(error.to_string()),
    })?;
    Ok(PrivateKey::from_bytes(*bytes))
}

static NEXT_IFNAME: AtomicU32 = AtomicU32::new(0);

/// An interface name unique on this machine while this process runs
/// (`fj<pid>t<n>`, at most 15 characters), so control sockets in
/// `/var/run/wireguard` never clash between concurrent tests.
pub fn unique_ifname() -> String {
    let n = NEXT_IFNAME.fetch_add(1, Ordering::Relaxed) % 100_000;
    format!("fj{}t{n}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn routes_skip_networks_inside_the_interface_subnet() {
        let (mut left, _) = point_to_point(Initiator::Left).unwrap();
        assert!(left.routes().is_empty(), "{:?}", left.routes());
        left.peers[0]
            .allowed_ips
            .push("198.19.7.0/24".parse().unwrap());
        left.peers[0]
            .allowed_ips
            .push("198.19.0.0/16".parse().unwrap());
        let routes: Vec<String> = left.routes().iter().map(Cidr::to_string).collect();
        assert_eq!(routes, ["198.19.7.0/24", "198.19.0.0/16"]);
    }

    #[test]
    fn only_the_initiator_has_an_endpoint() {
        let (left, right) = point_to_point(Initiator::Right).unwrap();
        assert!(left.peers[0].endpoint.is_none());
        assert_eq!(
            right.peers[0].endpoint,
            Some("198.18.0.1:51820".parse().unwrap())
        );
        let text = right.wg_quick_text();
        assert!(
            text.contains("Address = 198.19.0.2/24\n"),
            "{}",
            text.as_str()
        );
        assert!(text.contains("Endpoint = 198.18.0.1:51820\n"));
        assert!(text.contains(&format!("PublicKey = {}\n", left.public_key())));
        assert!(!right.setconf_text().contains("Address"));
    }

    #[test]
    fn interface_names_are_unique_and_short() {
        let a = unique_ifname();
        let b = unique_ifname();
        assert_ne!(a, b);
        assert!(a.len() <= 15, "{a}");
    }
}
