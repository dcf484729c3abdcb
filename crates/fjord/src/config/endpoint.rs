//! `Endpoint = host:port`: a peer's UDP address, as an IP literal or a
//! hostname resolved when the file is read.

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use super::error::quote;

/// A peer's endpoint: the text as written (`vpn.example.com:51820`,
/// `192.0.2.1:51820`, `[2001:db8::1]:51820`) and the address it resolved to
/// when the configuration was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    text: String,
    address: SocketAddr,
}

/// Why an `Endpoint` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    #[error("empty value")]
    Empty,
    #[error("'{0}' contains whitespace, a control character or '#'")]
    InvalidCharacter(String),
    #[error("'{0}' has no port; write host:port or [IPv6]:port")]
    MissingPort(String),
    #[error("'{0}' has no host; write host:port or [IPv6]:port")]
    MissingHost(String),
    #[error("'{0}' needs brackets around the IPv6 address: [address]:port")]
    UnbracketedIpv6(String),
    #[error("'{0}' is not a port number (1 to 65535)")]
    InvalidPort(String),
    #[error("cannot resolve host '{host}': {reason}")]
    Resolve { host: String, reason: String },
}

impl Endpoint {
    /// Parses `host:port` or `[IPv6]:port`. An IP literal needs no lookup;
    /// any other host is passed to `resolver`.
    pub fn parse(text: &str, resolver: &dyn Resolve) -> Result<Endpoint, EndpointError> {
        if text.is_empty() {
            return Err(EndpointError::Empty);
        }
        if text
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '#')
        {
            return Err(EndpointError::InvalidCharacter(quote(text)));
        }
        let (host, port_text) = split_host_port(text)?;
        let port =
            parse_port(port_text).ok_or_else(|| EndpointError::InvalidPort(quote(port_text)))?;
        let address = match host.parse::<IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => resolver
                .resolve(host, port)
                .map_err(|error| EndpointError::Resolve {
                    host: quote(host),
                    reason: error.to_string().replace('\n', " "),
                })?,
        };
        Ok(Endpoint {
            text: text.to_string(),
            address,
        })
    }

    /// The address the endpoint resolved to.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The endpoint as written in the configuration.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host name and port to look up again, when the host was written
    /// as a name rather than an IP literal.
    pub fn name_and_port(&self) -> Option<(&str, u16)> {
        let (host, port) = split_host_port(&self.text).ok()?;
        if host.parse::<IpAddr>().is_ok() {
            return None;
        }
        Some((host, parse_port(port)?))
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(address: SocketAddr) -> Self {
        Endpoint {
            text: address.to_string(),
            address,
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Splits `host:port` at the last colon, or `[host]:port` at the bracket.
fn split_host_port(text: &str) -> Result<(&str, &str), EndpointError> {
    let (host, port) = if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| EndpointError::MissingPort(quote(text)))?;
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| EndpointError::MissingPort(quote(text)))?;
        (host, port)
    } else {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| EndpointError::MissingPort(quote(text)))?;
        if host.contains(':') {
            return Err(EndpointError::UnbracketedIpv6(quote(text)));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(EndpointError::MissingHost(quote(text)));
    }
    if port.is_empty() {
        return Err(EndpointError::MissingPort(quote(text)));
    }
    Ok((host, port))
}

/// A decimal port, 1 to 65535.
fn parse_port(text: &str) -> Option<u16> {
    if !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u16>().ok().filter(|&port| port != 0)
}

/// Turns a hostname into one address. Injected so tests and fuzzing never
/// touch the network.
pub trait Resolve {
    /// The address to use for `host` and `port`; `host` is never an IP
    /// literal.
    fn resolve(&self, host: &str, port: u16) -> io::Result<SocketAddr>;
}

/// Resolves with the operating system (`getaddrinfo`) and takes the first
/// address, as `wg` does.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve(&self, host: &str, port: u16) -> io::Result<SocketAddr> {
        (host, port)
            .to_socket_addrs()?
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no addresses found"))
    }
}
