//! Members' names over DNS (`Domain =` in `[Mesh]`): one thread per
//! overlay address of this interface answers UDP port 53 with
//! [`fjord_mesh::names`], and where systemd-resolved runs, the interface
//! is registered with it for the domain only (split DNS).
//!
//! ```text
//! request ─► UDP socket (overlay address, port 53)
//!              │  member view older than REFRESH_AFTER?
//!              │      ask the worker for its members (a control call)
//!              ▼
//!            Names::answer ─► response (or silence) ─► the asker
//! ```
//!
//! The view is this node and the members the mesh knows, so members who
//! join, leave or are revoked show up or go within REFRESH_AFTER. UDP
//! only: answers for one name fit 512 bytes (a certificate names at most
//! eight prefixes), and one that would not is cut with TC set.
//!
//! The sockets are bound before fjord gives up root (port 53 needs it),
//! with IP_FREEBIND so an IPv6 address still in duplicate address
//! detection can be bound. The threads end with the process.

use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use fjord_mesh::Cidr;
use fjord_mesh::names::{Domain, NamedMember, Names};
use fjord_net::{ControlContext, ControlHandle};
use socket2::{Domain as SocketDomain, Protocol, Socket, Type};

/// The DNS port.
pub const DNS_PORT: u16 = 53;
/// How old the member view may be when a request comes in.
const REFRESH_AFTER: Duration = Duration::from_secs(1);
/// The largest request read (the largest EDNS buffer a client may offer).
const MAX_REQUEST_BYTES: usize = 4096;

/// Bound sockets waiting for the worker to exist.
pub struct NameServer {
    sockets: Vec<UdpSocket>,
    names: Names,
    own: NamedMember,
}

/// A member as names see it: its name and the addresses of its host
/// prefixes (a /32 or /128; wider prefixes are networks behind it).
pub fn named_member(name: &str, prefixes: &[Cidr]) -> NamedMember {
    NamedMember {
        name: name.to_string(),
        addresses: prefixes
            .iter()
            .filter(|prefix| **prefix == Cidr::host(prefix.address()))
            .map(Cidr::address)
            .collect(),
    }
}

/// Binds UDP port 53 on each of `addresses` (the interface's own).
pub fn bind(domain: Domain, addresses: &[IpAddr], own: NamedMember) -> anyhow::Result<NameServer> {
    let sockets = addresses
        .iter()
        .map(|address| {
            bind_one(SocketAddr::new(*address, DNS_PORT))
                .with_context(|| format!("binding the name server to {address} port {DNS_PORT}"))
        })
        .collect::<anyhow::Result<_>>()?;
    Ok(NameServer {
        sockets,
        names: Names::new(domain),
        own,
    })
}

fn bind_one(address: SocketAddr) -> io::Result<UdpSocket> {
    let socket = Socket::new(
        SocketDomain::for_address(address),
        Type::DGRAM,
        Some(Protocol::UDP),
    )?;
    if address.is_ipv4() {
        socket.set_freebind_v4(true)?;
    } else {
        socket.set_only_v6(true)?;
        socket.set_freebind_v6(true)?;
    }
    socket.bind(&address.into())?;
    Ok(socket.into())
}

impl NameServer {
    /// Starts one answering thread per socket.
    pub fn spawn(self, control: ControlHandle) -> io::Result<()> {
        for socket in self.sockets {
            let address = socket.local_addr()?;
            let names = self.names.clone();
            let own = self.own.clone();
            let control = control.clone();
            std::thread::Builder::new()
                .name("names".into())
                .spawn(move || serve(&socket, names, &own, &control))?;
            tracing::info!(%address, domain = %self.names.domain(), "answering members' names");
        }
        Ok(())
    }
}

/// Answers until the worker stops.
fn serve(socket: &UdpSocket, mut names: Names, own: &NamedMember, control: &ControlHandle) {
    let mut request = vec![0; MAX_REQUEST_BYTES];
    let mut response = Vec::with_capacity(512);
    let mut refreshed: Option<Instant> = None;
    loop {
        let (len, from) = match socket.recv_from(&mut request) {
            Ok(received) => received,
            Err(error) => {
                tracing::debug!(%error, "name server: receive failed");
                continue;
            }
        };
        if refreshed.is_none_or(|at| at.elapsed() >= REFRESH_AFTER) {
            let Ok(members) = control.call(member_view) else {
                return;
            };
            names.set_members(std::iter::once(own).chain(&members));
            refreshed = Some(Instant::now());
        }
        if names.answer(&request[..len], &mut response)
            && let Err(error) = socket.send_to(&response, from)
        {
            tracing::debug!(%error, %from, "name server: send failed");
        }
    }
}

fn member_view(context: &mut ControlContext<'_>) -> Vec<NamedMember> {
    context
        .node
        .members()
        .iter()
        .map(|(member, _)| named_member(&member.name, &member.addresses))
        .collect()
}

/// The interface's registration with systemd-resolved; dropping it
/// reverts the interface's DNS settings.
pub struct ResolvedRegistration {
    interface: String,
}

/// Registers `addresses` as the interface's DNS servers for `domain` only
/// (`~domain`: split DNS), where systemd-resolved runs; `None` elsewhere
/// or when `resolvectl` fails (logged).
pub fn register(
    interface: &str,
    domain: &Domain,
    addresses: &[IpAddr],
) -> Option<ResolvedRegistration> {
    if !Path::new("/run/systemd/resolve").is_dir() {
        tracing::debug!("systemd-resolved is not running; the names are not registered with it");
        return None;
    }
    let servers: Vec<String> = addresses.iter().map(IpAddr::to_string).collect();
    let mut dns = vec!["dns", interface];
    dns.extend(servers.iter().map(String::as_str));
    let routing = format!("~{domain}");
    for args in [dns, vec!["domain", interface, &routing]] {
        if let Err(error) = resolvectl(&args) {
            tracing::warn!(%error, "registering the names with systemd-resolved");
            return None;
        }
    }
    tracing::info!(interface, %domain, "registered with systemd-resolved (split DNS)");
    Some(ResolvedRegistration {
        interface: interface.to_string(),
    })
}

impl Drop for ResolvedRegistration {
    fn drop(&mut self) {
        if let Err(error) = resolvectl(&["revert", &self.interface]) {
            tracing::warn!(%error, "reverting the interface's systemd-resolved settings");
        }
    }
}

fn resolvectl(args: &[&str]) -> anyhow::Result<()> {
    let command = format!("resolvectl {}", args.join(" "));
    tracing::debug!(%command, "run");
    let output = Command::new("resolvectl")
        .args(args)
        .output()
        .with_context(|| format!("running {command}"))?;
    if !output.status.success() {
        anyhow::bail!(
            "{command}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_are_named_with_their_host_addresses_only() {
        let prefixes: Vec<Cidr> = ["198.19.0.1/32", "fd00::1/128", "198.19.8.0/24"]
            .iter()
            .map(|text| text.parse().expect("a prefix"))
            .collect();
        let member = named_member("alpha", &prefixes);
        assert_eq!(member.name, "alpha");
        let expected: Vec<IpAddr> = vec![
            "198.19.0.1".parse().expect("an address"),
            "fd00::1".parse().expect("an address"),
        ];
        assert_eq!(member.addresses, expected);
    }
}
