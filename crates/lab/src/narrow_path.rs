//! A path MTU trap: two hosts behind a router whose link to the right
//! host carries only [`NARROW_LINK_MTU`]-byte packets, and which drops
//! every ICMP and ICMPv6 packet it would forward or send. A tunnel that
//! sends full-size datagrams from the left never hears why they vanish:
//! a black hole, unless it finds the path's MTU itself.
//!
//! The router does not let fragments through either. The kernel sets DF
//! on a UDP datagram only when it fits the sender's route MTU, so a batch
//! sent with UDP GSO (wireguard-go's, up to 64 KB) leaves without it;
//! when the router fragmented such segments, wireguard-go crossed in some
//! runs while its single datagrams vanished, so the trap trapped by
//! chance.
//!
//! ```text
//!  left 198.18.0.1/32 ── eth0 ─ to-left (198.18.0.254)  router  to-right (198.18.0.253) ─ eth0 ── right 198.18.0.2/32
//!        MTU 1500            nft: drop ICMP and fragments           MTU 1280 on both ends
//! ```
//!
//! The hosts keep the lab's usual underlay addresses (host routes through
//! the router instead of one subnet), so every point-to-point system
//! configures itself as on [`TwoHosts::direct`]. Segmentation offloads
//! are off on the router's links, so it forwards wire-sized packets.
//!
//! [`transfer_through`] runs one digest-checked TCP transfer from left to
//! right through a tunnel and says whether it got through.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use crate::nat::load_rules;
use crate::netns::{self, Namespace, NetnsError};
use crate::topology::{HOST_LINK, LEFT_UNDERLAY, RIGHT_UNDERLAY, TwoHosts, disable_offloads};
use crate::traffic::{BulkReport, BulkTransfer};

/// The MTU of the router's link to the right host.
pub const NARROW_LINK_MTU: u16 = 1280;
const ROUTER_LEFT: &str = "198.18.0.254";
const ROUTER_RIGHT: &str = "198.18.0.253";
const ROUTER_LEFT_LINK: &str = "to-left";
const ROUTER_RIGHT_LINK: &str = "to-right";
/// The router forwards, but neither forwards nor sends any ICMP: no
/// "fragmentation needed", no "packet too big", as on paths whose
/// firewalls drop them. Nor do the fragments it makes leave (a
/// fragment has More Fragments or an offset): the egress hook sees them
/// after the router fragmented, while a GSO batch whose segments fit
/// passes whole and is cut into wire-sized datagrams later.
fn trap_rules() -> String {
    format!(
        "table inet pmtu_trap {{\n\
         \tchain forward {{ type filter hook forward priority 0; meta l4proto {{ icmp, ipv6-icmp }} drop; }}\n\
         \tchain output {{ type filter hook output priority 0; meta l4proto {{ icmp, ipv6-icmp }} drop; }}\n\
         }}\n\
         table netdev pmtu_trap_fragments {{\n\
         \tchain egress {{ type filter hook egress device \"{ROUTER_RIGHT_LINK}\" priority 0; ip frag-off & 0x3fff != 0 drop; }}\n\
         }}\n"
    )
}

/// Builds the hosts and the router (as the middle namespace).
pub fn build() -> Result<TwoHosts, NetnsError> {
    let left = Namespace::create("l")?;
    let right = Namespace::create("r")?;
    let router = Namespace::create("rt")?;
    netns::veth(&left, HOST_LINK, &router, ROUTER_LEFT_LINK)?;
    netns::veth(&right, HOST_LINK, &router, ROUTER_RIGHT_LINK)?;
    for (namespace, link) in [(&router, ROUTER_LEFT_LINK), (&router, ROUTER_RIGHT_LINK)] {
        disable_offloads(namespace, link)?;
    }
    let mtu = NARROW_LINK_MTU.to_string();
    right.ip(&["link", "set", HOST_LINK, "mtu", &mtu])?;
    router.ip(&["link", "set", ROUTER_RIGHT_LINK, "mtu", &mtu])?;

    router.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    router.ip(&[
        "addr",
        "add",
        &format!("{ROUTER_LEFT}/32"),
        "dev",
        ROUTER_LEFT_LINK,
    ])?;
    router.ip(&[
        "addr",
        "add",
        &format!("{ROUTER_RIGHT}/32"),
        "dev",
        ROUTER_RIGHT_LINK,
    ])?;
    router.ip(&[
        "route",
        "add",
        &format!("{LEFT_UNDERLAY}/32"),
        "dev",
        ROUTER_LEFT_LINK,
    ])?;
    router.ip(&[
        "route",
        "add",
        &format!("{RIGHT_UNDERLAY}/32"),
        "dev",
        ROUTER_RIGHT_LINK,
    ])?;
    load_rules(&router, &trap_rules())?;

    for (host, own, gateway, far) in [
        (&left, LEFT_UNDERLAY, ROUTER_LEFT, RIGHT_UNDERLAY),
        (&right, RIGHT_UNDERLAY, ROUTER_RIGHT, LEFT_UNDERLAY),
    ] {
        host.ip(&["addr", "add", &format!("{own}/32"), "dev", HOST_LINK])?;
        host.ip(&["route", "add", &format!("{gateway}/32"), "dev", HOST_LINK])?;
        host.ip(&["route", "add", &format!("{far}/32"), "via", gateway])?;
    }
    Ok(TwoHosts {
        left,
        right,
        middle: Some(router),
    })
}

/// How a transfer through the trap ended.
#[derive(Debug)]
pub enum TransferOutcome {
    /// Every byte arrived with the digest it was sent with.
    Verified(BulkReport),
    /// The transfer stalled or arrived damaged: the tunnel black-holes.
    BlackHoled(String),
}

impl TransferOutcome {
    pub fn is_verified(&self) -> bool {
        matches!(self, TransferOutcome::Verified(_))
    }
}

/// Sends `bytes` over TCP from the left host to `sink` (an overlay
/// address of the right host) and checks what arrived. A black hole shows
/// as a stall: nothing moves for `stall`.
pub fn transfer_through(
    hosts: &TwoHosts,
    sink: IpAddr,
    port: u16,
    bytes: u64,
    stall: Duration,
) -> TransferOutcome {
    let transfer = BulkTransfer::new(bytes)
        .timeout(Duration::from_secs(60))
        .stall_timeout(stall);
    match transfer.run(&hosts.left, &hosts.right, SocketAddr::new(sink, port)) {
        Ok(report) if report.verified => TransferOutcome::Verified(report),
        Ok(report) => TransferOutcome::BlackHoled(format!("arrived damaged: {report}")),
        Err(error) => TransferOutcome::BlackHoled(error.to_string()),
    }
}
