//! An internet with NATs: a router namespace and, around it, sites that
//! are either a public host or a host behind a NAT namespace (nftables
//! masquerade), for NAT traversal tests and the mesh suite.
//!
//! ```text
//!  public host ─┐                  ┌─ NAT (wan 198.18.i.1) ─ host 198.18.(100+i).2
//!  198.18.i.1   ├── router .254 ───┤
//!               …                  └─ …
//! ```
//!
//! Site `i` (from 1) owns 198.18.i.0/24 toward the router; a NAT's inside
//! is 198.18.(100+i).0/24. The router forwards between sites, so a
//! packet's TTL drops once there: fjord's low-TTL punches die at it, as
//! they would at an ISP's first router. NATs filter replies by address
//! and port, as Linux conntrack does; a port-preserving NAT keeps the
//! inside port when it can, a symmetric one (`fully-random`) maps every
//! destination to a random port. Nothing has a route out of the lab.

use std::io::Write;
use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use crate::netns::{self, Namespace, NetnsError};

/// What stands between a site's host and the router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NatKind {
    /// The host sits on the router's subnet with a public address.
    Public,
    /// Masquerade that keeps the inside port (the usual home router).
    PortPreserving,
    /// Masquerade with a random port per destination (`fully-random`).
    Symmetric,
}

impl NatKind {
    pub fn name(self) -> &'static str {
        match self {
            NatKind::Public => "no NAT",
            NatKind::PortPreserving => "port-preserving",
            NatKind::Symmetric => "symmetric",
        }
    }
}

/// One site: a host, and its NAT if it has one.
pub struct NatSite {
    /// Field order: the host goes before its NAT.
    pub host: Namespace,
    pub nat: Option<Namespace>,
    pub kind: NatKind,
    /// The host's own address.
    pub address: Ipv4Addr,
    /// Where the rest of the internet sees it (its NAT's address).
    pub public_address: Ipv4Addr,
}

impl NatInternet {
    /// The sites' hosts for a mesh; a site behind a NAT is reached at its
    /// NAT's address (so a bootstrap site must be public).
    pub fn mesh_hosts(&self) -> Vec<crate::topology::MeshHost<'_>> {
        self.sites
            .iter()
            .map(|site| crate::topology::MeshHost {
                namespace: &site.host,
                underlay: site.public_address,
            })
            .collect()
    }
}

/// The router and its sites; sites are dropped before the router.
pub struct NatInternet {
    pub sites: Vec<NatSite>,
    pub router: Namespace,
}

impl NatInternet {
    pub fn build(kinds: &[NatKind]) -> Result<Self, NetnsError> {
        let router = Namespace::create("rt")?;
        router.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
        let mut sites = Vec::new();
        for (offset, kind) in kinds.iter().enumerate() {
            let index = u8::try_from(offset + 1).unwrap_or(u8::MAX).min(99);
            sites.push(site(&router, index, *kind)?);
        }
        Ok(Self { sites, router })
    }
}

fn site(router: &Namespace, index: u8, kind: NatKind) -> Result<NatSite, NetnsError> {
    let router_link = format!("site{index}");
    let wan = Ipv4Addr::new(198, 18, index, 1);
    let gateway = Ipv4Addr::new(198, 18, index, 254).to_string();
    let host = Namespace::create("h")?;
    let edge = match kind {
        NatKind::Public => None,
        _ => Some(Namespace::create("nat")?),
    };
    let outer = edge.as_ref().unwrap_or(&host);
    netns::veth(router, &router_link, outer, "wan")?;
    router.ip(&["addr", "add", &format!("{gateway}/24"), "dev", &router_link])?;
    outer.ip(&["addr", "add", &format!("{wan}/24"), "dev", "wan"])?;
    outer.ip(&["route", "add", "default", "via", &gateway])?;
    let Some(nat) = edge else {
        return Ok(NatSite {
            host,
            nat: None,
            kind,
            address: wan,
            public_address: wan,
        });
    };
    let inside_gateway = Ipv4Addr::new(198, 18, 100 + index, 1);
    let inside = Ipv4Addr::new(198, 18, 100 + index, 2);
    netns::veth(&nat, "lan", &host, "eth0")?;
    nat.ip(&["addr", "add", &format!("{inside_gateway}/24"), "dev", "lan"])?;
    host.ip(&["addr", "add", &format!("{inside}/24"), "dev", "eth0"])?;
    host.ip(&[
        "route",
        "add",
        "default",
        "via",
        &inside_gateway.to_string(),
    ])?;
    nat.exec("sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
    let flags = if kind == NatKind::Symmetric {
        " fully-random"
    } else {
        ""
    };
    let rules = format!(
        "table ip nat {{\n\
         \tchain postrouting {{ type nat hook postrouting priority 100; oifname \"wan\" masquerade{flags}; }}\n\
         }}\n\
         table ip filter {{\n\
         \tchain forward {{ type filter hook forward priority 0; policy drop; ct state established,related accept; iifname \"lan\" accept; }}\n\
         }}\n"
    );
    load_rules(&nat, &rules)?;
    Ok(NatSite {
        host,
        nat: Some(nat),
        kind,
        address: inside,
        public_address: wan,
    })
}

/// `nft -f -` inside `namespace`.
pub(crate) fn load_rules(namespace: &Namespace, rules: &str) -> Result<(), NetnsError> {
    let mut command: Command = namespace.command("nft");
    command
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let what = format!("nft -f - in {}", namespace.name());
    let spawn_error = |source| NetnsError::Spawn {
        command: what.clone(),
        source,
    };
    let mut child = command.spawn().map_err(spawn_error)?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin.write_all(rules.as_bytes()).map_err(spawn_error)?;
    }
    let output = child.wait_with_output().map_err(spawn_error)?;
    if !output.status.success() {
        return Err(NetnsError::Failed {
            command: what,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(())
}
