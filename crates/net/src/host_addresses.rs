//! The addresses this host may be reached at, for a mesh Hello: a member
//! that greets one of them reaches us without passing our NAT (if we have
//! one), so it needs no rendezvous.

use std::io;
use std::net::{IpAddr, SocketAddr};

use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;

/// Up to `limit` addresses of interfaces that are up, with `port`:
/// unicast, not loopback, not IPv6 link-local (it would need a scope),
/// not on point-to-point links (tunnels, ours among them: a member that
/// aimed at our overlay address would route its datagram into its own
/// tunnel) and not on `exclude_interface`.
pub fn host_addresses(
    port: u16,
    exclude_interface: &str,
    limit: usize,
) -> io::Result<Vec<SocketAddr>> {
    let mut addresses = Vec::new();
    for interface in getifaddrs().map_err(io::Error::from)? {
        let flags = interface.flags;
        if !flags.contains(InterfaceFlags::IFF_UP)
            || flags.intersects(InterfaceFlags::IFF_LOOPBACK | InterfaceFlags::IFF_POINTOPOINT)
            || interface.interface_name == exclude_interface
        {
            continue;
        }
        let Some(address) = interface.address else {
            continue;
        };
        let ip = if let Some(v4) = address.as_sockaddr_in() {
            IpAddr::V4(v4.ip())
        } else if let Some(v6) = address.as_sockaddr_in6() {
            IpAddr::V6(v6.ip())
        } else {
            continue;
        };
        if is_reachable_unicast(ip) && !addresses.iter().any(|a: &SocketAddr| a.ip() == ip) {
            addresses.push(SocketAddr::new(ip, port));
        }
    }
    // IPv4 first: every peer can reach an IPv4 address if it has IPv4 at
    // all, and the list may be cut short.
    addresses.sort_by_key(SocketAddr::is_ipv6);
    addresses.truncate(limit);
    Ok(addresses)
}

/// Every address this host has now, on any interface and whatever its
/// kind: what a kept source address must be one of.
pub fn local_addresses() -> io::Result<std::collections::HashSet<IpAddr>> {
    Ok(getifaddrs()
        .map_err(io::Error::from)?
        .filter_map(|interface| {
            let address = interface.address?;
            if let Some(v4) = address.as_sockaddr_in() {
                Some(IpAddr::V4(v4.ip()))
            } else {
                address.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
            }
        })
        .collect())
}

fn is_reachable_unicast(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            !(v4.is_loopback() || v4.is_unspecified() || v4.is_multicast() || v4.is_link_local())
        }
        IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || v6.is_unicast_link_local())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_link_local_and_multicast_are_never_offered() {
        for ip in [
            "127.0.0.1",
            "169.254.1.1",
            "224.0.0.1",
            "0.0.0.0",
            "::1",
            "fe80::1",
            "ff02::1",
        ] {
            assert!(!is_reachable_unicast(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["198.18.0.1", "fd00::1"] {
            assert!(is_reachable_unicast(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn local_addresses_include_loopback() {
        let local = local_addresses().unwrap();
        assert!(local.contains(&"127.0.0.1".parse::<IpAddr>().unwrap()));
    }

    #[test]
    fn this_host_lists_only_usable_addresses_with_the_port() {
        let addresses = host_addresses(51820, "", 4).unwrap();
        assert!(addresses.len() <= 4);
        for address in addresses {
            assert_eq!(address.port(), 51820);
            assert!(is_reachable_unicast(address.ip()));
        }
    }
}
