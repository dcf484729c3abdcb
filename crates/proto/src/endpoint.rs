//! Where a peer is reached: its address, and ours that it reached us at.
//!
//! A host with several addresses on one interface must answer a peer from
//! the address the peer sent to, or the peer sees replies from a stranger:
//! its endpoint moves to the wrong address, and firewalls and NATs that
//! let the peer's datagram out drop the reply. The driver passes the local
//! address each datagram arrived at; the peer keeps it with the remote
//! one, and every datagram for the peer carries it back as its source.

use std::net::{IpAddr, SocketAddr};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    pub remote: SocketAddr,
    /// Our address the peer's datagrams arrived at; `None` until one
    /// arrived (a configured endpoint), when the system picks the source.
    pub local: Option<IpAddr>,
}

impl Endpoint {
    pub fn new(remote: SocketAddr, local: Option<IpAddr>) -> Self {
        Self { remote, local }
    }
}

impl From<SocketAddr> for Endpoint {
    fn from(remote: SocketAddr) -> Self {
        Self {
            remote,
            local: None,
        }
    }
}
