//! The emulator as a [`Carrier`] for UDP trials: the trial's sender hands
//! over its payloads, and each becomes the inner packet of one peer's
//! session, peers taking turns.
//!
//! ```text
//! payload n ─ peer k = n mod N ─ IPv4/UDP from k's overlay address, port
//! 40000 + n mod 1000, to the trial's destination, checksums computed ─
//! sealed with k's session keys
//! (in place, behind the WireGuard header) ─ one sendmmsg per batch, each
//! datagram from k's underlay address to the responder (or the sink)
//! ```
//!
//! The frames form [`INNER_FLOWS`] flows whatever the number of peers N
//! (1, 10, 100 and 1,000 divide it): one peer carries a thousand flows,
//! a thousand peers one each. A ratio between peer counts then speaks of
//! peers, not of flows; with one flow per peer, one peer would enjoy what
//! a single flow gets (a receiver merging its packets) and the ratio would
//! measure that instead.
//!
//! Opening the carrier renews sessions older than [`RENEW_AFTER`] first,
//! before the trial's clock starts. A payload whose peer has no session
//! goes nowhere (the peer stages it and starts a handshake; counted as
//! unsealed) but counts as taken, so the trial counts it lost: the path
//! did not carry it. The kernel's refusals come back to the sender as
//! `sendmmsg`'s would, and the sender decides (wait, or count them lost).

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, Sent};
use fjord_sys::mmsg::{GsoMessage, send_gso_messages};

use super::{MTU, RENEW_AFTER, Shared, TRANSMIT_BUFFER_BYTES};
use crate::traffic::packet::{IPV4_UDP_HEADERS_LEN, write_ipv4_udp_packet};
use crate::traffic::udp::{Carrier, CarrierSender, SEND_BATCH};

/// Inner flows, whatever the number of peers (see the module comment).
pub const INNER_FLOWS: usize = 1000;
/// Source port of the first inner flow.
const INNER_FIRST_PORT: u16 = 40_000;
/// A slot: one inner packet of the MTU behind its header room, with room
/// for padding and tag.
const STRIDE: usize = DATA_HEADROOM + MTU as usize + DATA_TAILROOM;
/// How long renewing every session before a trial may take.
const RENEW_TIMEOUT: Duration = Duration::from_secs(30);

/// Seals trial frames into the peers' sessions.
pub(super) struct SealingCarrier {
    shared: Arc<Shared>,
    /// Where the sealed datagrams go: the responder, or a sink.
    target: SocketAddr,
    /// Renew old sessions before each trial (not needed into a sink).
    renew: bool,
}

impl SealingCarrier {
    pub(super) fn new(shared: Arc<Shared>, target: SocketAddr, renew: bool) -> Self {
        Self {
            shared,
            target,
            renew,
        }
    }
}

impl std::fmt::Debug for SealingCarrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SealingCarrier")
            .field("peers", &self.shared.peers.len())
            .field("target", &self.target)
            .finish()
    }
}

impl Carrier for SealingCarrier {
    fn open(&self, destination: SocketAddr) -> io::Result<Box<dyn CarrierSender>> {
        let SocketAddr::V4(destination) = destination else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the peer emulator carries IPv4 only",
            ));
        };
        if self.renew {
            self.shared
                .renew(RENEW_AFTER, RENEW_TIMEOUT)
                .map_err(io::Error::other)?;
        }
        Ok(Box::new(SealingSender {
            shared: self.shared.clone(),
            target: self.target,
            destination,
            next_frame: 0,
            area: vec![0; STRIDE * SEND_BATCH],
            sealed: [(0, Ipv4Addr::UNSPECIFIED); SEND_BATCH],
            scratch: vec![0; TRANSMIT_BUFFER_BYTES],
        }))
    }
}

/// One trial's sending end.
struct SealingSender {
    shared: Arc<Shared>,
    target: SocketAddr,
    /// The trial's destination, inside the tunnel.
    destination: SocketAddrV4,
    /// Payloads sealed so far: the next one's peer and flow.
    next_frame: usize,
    area: Vec<u8>,
    /// Per slot: the sealed datagram's length (zero: none) and its
    /// peer's underlay address.
    sealed: [(usize, Ipv4Addr); SEND_BATCH],
    scratch: Vec<u8>,
}

impl SealingSender {
    /// Seals `payload` into slot `slot` through the next peer's session.
    fn seal(&mut self, now: Instant, slot: usize, payload: &[u8]) -> io::Result<()> {
        if IPV4_UDP_HEADERS_LEN + payload.len() > usize::from(MTU) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "a {}-byte payload does not fit the tunnel's {MTU}-byte MTU",
                    payload.len()
                ),
            ));
        }
        let frame = self.next_frame;
        self.next_frame = (frame + 1) % (INNER_FLOWS * self.shared.peers.len());
        let buffer = &mut self.area[slot * STRIDE..(slot + 1) * STRIDE];
        let mut peer = self.shared.peer(frame % self.shared.peers.len());
        // Below 1000 by the modulo, so the port stays in range.
        let port = INNER_FIRST_PORT + (frame % INNER_FLOWS) as u16;
        let source = SocketAddrV4::new(peer.overlay, port);
        let len = write_ipv4_udp_packet(
            &mut buffer[DATA_HEADROOM..],
            source,
            self.destination,
            payload,
        );
        let responder = peer.responder;
        self.sealed[slot] = match peer.device.encapsulate(now, responder, buffer, len) {
            Sent::Sealed { len, .. } => {
                peer.sealed += 1;
                (len, peer.underlay)
            }
            Sent::Staged | Sent::Dropped(_) => {
                peer.unsealed += 1;
                (0, peer.underlay)
            }
        };
        peer.send_queued(&self.shared.socket, &mut self.scratch);
        Ok(())
    }
}

impl CarrierSender for SealingSender {
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize> {
        let datagrams = &datagrams[..datagrams.len().min(SEND_BATCH)];
        let now = Instant::now();
        for (slot, payload) in datagrams.iter().enumerate() {
            self.seal(now, slot, payload)?;
        }
        let pieces: [[IoSlice<'_>; 1]; SEND_BATCH] = std::array::from_fn(|slot| {
            let len = if slot < datagrams.len() {
                self.sealed[slot].0
            } else {
                0
            };
            [IoSlice::new(&self.area[slot * STRIDE..][..len])]
        });
        // Sealed datagrams only, with the payload each one carries.
        let mut messages = [GsoMessage::EMPTY; SEND_BATCH];
        let mut carries = [0usize; SEND_BATCH];
        let mut used = 0;
        for (slot, &(len, source)) in self.sealed[..datagrams.len()].iter().enumerate() {
            if len > 0 {
                messages[used] = GsoMessage {
                    destination: self.target,
                    source: Some(IpAddr::V4(source)),
                    pieces: &pieces[slot],
                    segment_size: None,
                };
                carries[used] = slot;
                used += 1;
            }
        }
        if used == 0 {
            return Ok(datagrams.len());
        }
        let sent = send_gso_messages(self.shared.socket.as_fd(), &messages[..used])?;
        // Payloads up to the first message not sent were taken (those
        // without a session included); the rest are sealed again when
        // the sender comes back with them.
        Ok(if sent >= used {
            datagrams.len()
        } else {
            carries[sent]
        })
    }

    fn wait_writable(&self, timeout: Duration) {
        fjord_sys::poll::wait_writable(self.shared.socket.as_fd(), timeout);
    }
}
