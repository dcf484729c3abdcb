//! Steering: what goes to one remote endpoint leaves through a socket of
//! its own instead of the interface's socket.
//!
//! Port prediction (`port_prediction.rs`) finds, behind a symmetric NAT,
//! the one extra socket whose NAT mapping the other side's probe hit; only
//! datagrams from that socket pass the other side's NAT, which filters by
//! address and port. So every datagram to that endpoint — handshakes,
//! data, control, probes — must leave through it, and what arrives on it
//! is received like what arrives on the interface's socket. With nothing
//! steered (the common case) a send costs one `is_empty` check.

use std::net::SocketAddr;

use crate::udp::UdpTransport;

/// Most endpoints steered at once: each is a member behind a symmetric
/// NAT met by port prediction.
pub const MAX_STEERED: usize = 64;

/// Steered endpoints in stable slots (a slot is the socket's poll token).
#[derive(Default)]
pub struct Steering {
    slots: Vec<Option<(SocketAddr, UdpTransport)>>,
    len: usize,
}

impl Steering {
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &UdpTransport)> {
        self.slots
            .iter()
            .flatten()
            .map(|(remote, transport)| (*remote, transport))
    }

    /// Slots in use, with their endpoints.
    pub fn slots(&self) -> impl Iterator<Item = (usize, SocketAddr)> + '_ {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, entry)| entry.as_ref().map(|(remote, _)| (slot, *remote)))
    }

    pub fn get(&self, slot: usize) -> Option<&UdpTransport> {
        self.slots
            .get(slot)?
            .as_ref()
            .map(|(_, transport)| transport)
    }

    fn find(&self, remote: SocketAddr) -> Option<&UdpTransport> {
        self.slots
            .iter()
            .flatten()
            .find(|(steered, _)| *steered == remote)
            .map(|(_, transport)| transport)
    }

    /// Sends to `remote` through `transport` from now on; the slot, or
    /// `None` when [`MAX_STEERED`] are in use (the transport is dropped).
    /// A socket already steering `remote` is replaced.
    pub fn insert(&mut self, remote: SocketAddr, transport: UdpTransport) -> Option<usize> {
        if let Some(slot) = self.slots.iter().position(|entry| {
            entry
                .as_ref()
                .is_some_and(|(steered, _)| *steered == remote)
        }) {
            self.slots[slot] = Some((remote, transport));
            return Some(slot);
        }
        if self.len >= MAX_STEERED {
            return None;
        }
        self.len += 1;
        if let Some(slot) = self.slots.iter().position(Option::is_none) {
            self.slots[slot] = Some((remote, transport));
            return Some(slot);
        }
        self.slots.push(Some((remote, transport)));
        Some(self.slots.len() - 1)
    }

    /// Closes the slot's socket; sends to its endpoint go through the
    /// interface's socket again.
    pub fn remove(&mut self, slot: usize) {
        if let Some(entry) = self.slots.get_mut(slot)
            && entry.take().is_some()
        {
            self.len -= 1;
        }
    }
}

impl UdpTransport {
    /// The socket that datagrams to `destination` leave through.
    pub(crate) fn route(&self, destination: SocketAddr) -> &UdpTransport {
        if self.steered.is_empty() {
            return self;
        }
        self.steered.find(destination).unwrap_or(self)
    }

    pub fn steering(&self) -> &Steering {
        &self.steered
    }

    pub fn steering_mut(&mut self) -> &mut Steering {
        &mut self.steered
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    /// Datagrams to a steered endpoint leave from the steered socket's
    /// port, others from the interface's; removing the steering restores
    /// the interface's socket.
    #[test]
    fn steered_endpoints_are_sent_from_their_own_socket() {
        let mut udp = UdpTransport::bind(0, 0).unwrap();
        let steered_port = {
            let steered = UdpTransport::bind(0, 0).unwrap();
            let port = steered.port();
            let far = UdpSocket::bind("127.0.0.1:0").unwrap();
            let near = UdpSocket::bind("127.0.0.1:0").unwrap();
            let far_address = far.local_addr().unwrap();
            let slot = udp.steering_mut().insert(far_address, steered).unwrap();
            let source_of = |socket: &UdpSocket, udp: &UdpTransport| {
                let destination = socket.local_addr().unwrap();
                udp.send(destination, None, b"hello").unwrap();
                let mut buf = [0u8; 16];
                socket.recv_from(&mut buf).unwrap().1.port()
            };
            assert_eq!(source_of(&far, &udp), port);
            assert_eq!(source_of(&near, &udp), udp.port());
            udp.steering_mut().remove(slot);
            assert_eq!(source_of(&far, &udp), udp.port());
            assert!(udp.steering().is_empty());
            port
        };
        assert_ne!(steered_port, udp.port());
    }
}
