//! Steering: what goes to one remote endpoint leaves through a socket of
//! its own instead of the interface's socket, and what arrives on that
//! socket is received like what arrives on the interface's socket.
//!
//! Two kinds of socket are steered:
//!
//! - **Connected sockets**, one per peer endpoint a handshake proved
//!   (`UdpSocket::connected`): on the interface's port, connected to
//!   the endpoint, so the kernel queues that endpoint's datagrams apart.
//!   A flood of handshake initiations from spoofed addresses then fills
//!   the interface's socket only, and the kernel drops its excess there,
//!   never the tunnels' data (before, the flood crowded the data out of
//!   the one shared queue, and the tunnel failed). The worker opens one
//!   when a handshake completes or an endpoint moves.
//! - **Port prediction sockets** (`port_prediction.rs`): behind a
//!   symmetric NAT, the one extra socket whose NAT mapping the other
//!   side's probe hit; only datagrams from that socket pass the other
//!   side's NAT, which filters by address and port.
//!
//! Either way every datagram to that endpoint — handshakes, data,
//! control, probes — leaves through its socket. A socket whose endpoint no
//! peer uses any more is closed (the worker's housekeeping). Lookups by
//! endpoint are one hash lookup per send call.

use std::collections::HashSet;
use std::net::SocketAddr;

use crate::udp::UdpSocket;

/// Most endpoints steered at once; past it, peers share the interface's
/// socket as before (a file descriptor and an 8 MiB receive buffer limit
/// each).
pub const MAX_STEERED: usize = 256;

/// Steered endpoints in stable slots (a slot is the socket's poll token).
#[derive(Default)]
pub struct Steering {
    slots: Vec<Option<(SocketAddr, UdpSocket)>>,
    /// Endpoint → slot of every slot in use; looked up for every send
    /// call, its keys are endpoints that handshakes proved (at most
    /// [`MAX_STEERED`]), so a fast hasher is safe here.
    by_endpoint: foldhash::HashMap<SocketAddr, usize>,
}

impl Steering {
    pub fn is_empty(&self) -> bool {
        self.by_endpoint.is_empty()
    }

    pub fn len(&self) -> usize {
        self.by_endpoint.len()
    }

    pub fn contains(&self, remote: SocketAddr) -> bool {
        self.by_endpoint.contains_key(&remote)
    }

    pub fn iter(&self) -> impl Iterator<Item = (SocketAddr, &UdpSocket)> {
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

    pub fn get(&self, slot: usize) -> Option<&UdpSocket> {
        self.slots
            .get(slot)?
            .as_ref()
            .map(|(_, transport)| transport)
    }

    pub(crate) fn find(&self, remote: SocketAddr) -> Option<&UdpSocket> {
        self.get(self.slot_of(remote)?)
    }

    pub fn slot_of(&self, remote: SocketAddr) -> Option<usize> {
        self.by_endpoint.get(&remote).copied()
    }

    /// Slots whose socket is bound to a local address that `is_gone`
    /// says the host no longer has.
    pub fn bound_to_gone(&self, is_gone: impl Fn(std::net::IpAddr) -> bool) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, entry)| {
                let (_, socket) = entry.as_ref()?;
                socket.bound_local().is_some_and(&is_gone).then_some(slot)
            })
            .collect()
    }

    /// Sends to `remote` through `transport` from now on; the slot, or
    /// `None` when [`MAX_STEERED`] are in use (the transport is dropped).
    /// A socket already steering `remote` is replaced.
    pub fn insert(&mut self, remote: SocketAddr, transport: UdpSocket) -> Option<usize> {
        if let Some(&slot) = self.by_endpoint.get(&remote) {
            self.slots[slot] = Some((remote, transport));
            return Some(slot);
        }
        if self.len() >= MAX_STEERED {
            return None;
        }
        let slot = match self.slots.iter().position(Option::is_none) {
            Some(slot) => slot,
            None => {
                self.slots.push(None);
                self.slots.len() - 1
            }
        };
        self.slots[slot] = Some((remote, transport));
        self.by_endpoint.insert(remote, slot);
        Some(slot)
    }

    /// Slots whose endpoint is not in `used` and whose socket has nothing
    /// waiting to be read.
    ///
    /// Closing a socket discards what waits in it, and an endpoint can
    /// stop being used while its datagrams still queue: a peer's packets
    /// that a replayed copy from elsewhere outran move the endpoint there
    /// and back within a millisecond. A socket with datagrams waiting
    /// stays (still watched, the worker's next turn reads them) until a
    /// later look finds it empty; only what arrives between that look and
    /// the close is lost.
    pub fn closable(&self, used: &HashSet<SocketAddr>) -> Vec<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter_map(|(slot, entry)| {
                let (remote, socket) = entry.as_ref()?;
                (!used.contains(remote) && !socket.has_datagrams_waiting()).then_some(slot)
            })
            .collect()
    }

    /// Closes the slot's socket; sends to its endpoint go through the
    /// interface's socket again.
    pub fn remove(&mut self, slot: usize) {
        if let Some((remote, _)) = self.slots.get_mut(slot).and_then(Option::take) {
            self.by_endpoint.remove(&remote);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn_udp::RecvMeta;
    use std::io::IoSliceMut;

    /// Of two endpoints no peer uses, the one whose socket holds a
    /// datagram is kept until it is read; a used one is never closable.
    #[test]
    fn sockets_with_datagrams_waiting_are_not_closable() {
        let mut steering = Steering::default();
        let quiet = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let talking = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut slot_of = |remote: &std::net::UdpSocket| {
            let remote = remote.local_addr().unwrap();
            let steered = UdpSocket::bind(0, 0).unwrap();
            (steering.insert(remote, steered).unwrap(), remote)
        };
        let (quiet_slot, quiet_address) = slot_of(&quiet);
        let (talking_slot, _) = slot_of(&talking);
        let talking_socket = steering.get(talking_slot).unwrap();
        let to = SocketAddr::from(([127, 0, 0, 1], talking_socket.port()));
        talking.send_to(b"in flight", to).unwrap();

        let nobody = HashSet::new();
        assert_eq!(steering.closable(&nobody), [quiet_slot]);
        let only_quiet = HashSet::from([quiet_address]);
        assert!(steering.closable(&only_quiet).is_empty());

        let mut buf = [0u8; 64];
        let mut meta = [RecvMeta::default()];
        let socket = steering.get(talking_slot).unwrap();
        let read = socket.recv(&mut [IoSliceMut::new(&mut buf)], &mut meta);
        assert_eq!(read.unwrap(), 1);
        assert_eq!(meta[0].len, 9);
        assert_eq!(steering.closable(&only_quiet), [talking_slot]);
    }
}
