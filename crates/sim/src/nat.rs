//! A home router's NAT in front of one member: it keeps the member's port
//! (one mapping per socket, whatever the destination) and lets a reply in
//! only from an address and port the member sent to, as Linux conntrack
//! does. The mesh meets such members by punching (see
//! `fjord_mesh::membership` traversal); symmetric NATs, which need port
//! prediction sockets the simulator does not open, are left out.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

pub(crate) struct Nat {
    public: IpAddr,
    inside: SocketAddr,
    /// Remote endpoints the member has sent to: the only ones let in.
    asked: HashSet<SocketAddr>,
}

impl Nat {
    pub(crate) fn new(public: IpAddr, inside: SocketAddr) -> Self {
        Self {
            public,
            inside,
            asked: HashSet::new(),
        }
    }

    /// The source a datagram from the member to `to` leaves with; the
    /// mapping now lets `to` answer.
    pub(crate) fn outbound(&mut self, to: SocketAddr) -> SocketAddr {
        self.asked.insert(to);
        SocketAddr::new(self.public, self.inside.port())
    }

    /// Where a datagram from `from` to the public `to` goes inside, if the
    /// filter lets it in.
    pub(crate) fn inbound(&self, from: SocketAddr, to: SocketAddr) -> Option<SocketAddr> {
        (to.port() == self.inside.port() && self.asked.contains(&from)).then_some(self.inside)
    }
}
