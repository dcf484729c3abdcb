//! Port prediction rounds: the sockets `fjord_mesh` asks for when it
//! predicts ports toward a member (see the mesh's `traversal.rs` for why).
//!
//! ```text
//! NodeEvent::PredictPorts ─▶ start: PREDICTION_SOCKETS sockets, each
//!     sends a low-TTL punch to every endpoint (its own NAT mapping each)
//! a socket readable ─▶ from one of the endpoints' addresses? that socket
//!     is steered to the sender (steering.rs), the round's others close;
//!     anything else is read and dropped
//! housekeeping ─▶ rounds older than ROUND_LIFETIME close
//! ```
//!
//! Both members of a pair ask for rounds (each attempt of either side
//! arranges a rendezvous), and a member behind a symmetric NAT asks for
//! one toward every other member, hopeless ones (another symmetric NAT)
//! included. So a request toward a member whose round is open punches
//! again through that round's sockets and extends it, and with every
//! slot busy the oldest round gives way: the newest request is the one
//! whose member's probes are about to arrive. Refusing it instead left a
//! symmetric member waiting, in namespaces, for rounds toward members
//! it could never meet to expire.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use fjord_mesh::membership::PREDICTION_SOCKETS;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::udp::UdpSocket;

/// How long a round's sockets wait for the other side's probes: its
/// initiations leave `CONNECT_DELAY` after ours, and a retry is a second
/// later.
pub const ROUND_LIFETIME: Duration = Duration::from_secs(3);
/// Rounds open at once; a later one waits for the next attempt (at most
/// 512 extra file descriptors).
pub const MAX_ROUNDS: usize = 2;

/// A probe socket of a round heard from the round's member.
pub struct Hit {
    pub from: SocketAddr,
    pub transport: UdpSocket,
}

struct Round {
    sockets: Vec<Option<UdpSocket>>,
    addresses: Vec<IpAddr>,
    expires: Instant,
}

/// The open rounds, in slots; socket `i` of slot `r` polls as token
/// `first_token + r * PREDICTION_SOCKETS + i`.
pub struct PortPrediction {
    rounds: [Option<Round>; MAX_ROUNDS],
    first_token: usize,
}

impl PortPrediction {
    pub fn new(first_token: usize) -> Self {
        Self {
            rounds: Default::default(),
            first_token,
        }
    }

    /// Tokens from `first_token` up to (not including) this one are ours.
    pub fn token_end(&self) -> usize {
        self.first_token + MAX_ROUNDS * PREDICTION_SOCKETS
    }

    pub fn owns(&self, token: Token) -> bool {
        (self.first_token..self.token_end()).contains(&token.0)
    }

    /// Opens a round's sockets and punches from each toward `toward`
    /// with the TTL `ttl`, or punches again through the open round toward
    /// the same addresses. Returns how many sockets the round has.
    pub fn start(
        &mut self,
        now: Instant,
        toward: &[SocketAddr],
        ttl: u8,
        punch: &[u8],
        fwmark: u32,
        registry: &Registry,
    ) -> usize {
        let mut addresses: Vec<IpAddr> = toward.iter().map(SocketAddr::ip).collect();
        addresses.sort_unstable();
        addresses.dedup();
        if let Some(round) = self
            .rounds
            .iter_mut()
            .flatten()
            .find(|round| round.addresses == addresses)
        {
            for socket in round.sockets.iter().flatten() {
                punch_from(socket, toward, ttl, punch);
            }
            round.expires = now + ROUND_LIFETIME;
            return round.sockets.iter().flatten().count();
        }
        let slot = match self.rounds.iter().position(Option::is_none) {
            Some(free) => free,
            None => {
                let oldest = (0..MAX_ROUNDS)
                    .min_by_key(|&slot| self.rounds[slot].as_ref().map(|round| round.expires))
                    .unwrap_or(0);
                tracing::debug!("port prediction rounds all busy; the oldest gives way");
                self.close(oldest, registry);
                oldest
            }
        };
        let mut sockets = Vec::with_capacity(PREDICTION_SOCKETS);
        for index in 0..PREDICTION_SOCKETS {
            let socket = UdpSocket::bind(0, fwmark)
                .map_err(|error| error.to_string())
                .and_then(|socket| {
                    let token = Token(self.first_token + slot * PREDICTION_SOCKETS + index);
                    registry
                        .register(
                            &mut SourceFd(&socket.as_raw_fd()),
                            token,
                            Interest::READABLE,
                        )
                        .map_err(|error| error.to_string())?;
                    Ok(socket)
                });
            match socket {
                Ok(socket) => {
                    punch_from(&socket, toward, ttl, punch);
                    sockets.push(Some(socket));
                }
                // Out of file descriptors or ports: the round goes on
                // with the sockets it has.
                Err(error) => {
                    tracing::debug!(%error, "port prediction socket not opened");
                    sockets.push(None);
                }
            }
        }
        let opened = sockets.iter().flatten().count();
        self.rounds[slot] = Some(Round {
            sockets,
            addresses,
            expires: now + ROUND_LIFETIME,
        });
        opened
    }

    /// The socket of `token` is readable: a datagram from the round's
    /// member makes it the hit (left waiting, for the caller to receive
    /// through the data path), and the round ends. Others are dropped.
    pub fn readable(&mut self, token: Token, registry: &Registry) -> Option<Hit> {
        let offset = token.0.checked_sub(self.first_token)?;
        let (slot, index) = (offset / PREDICTION_SOCKETS, offset % PREDICTION_SOCKETS);
        let round = self.rounds.get_mut(slot)?.as_mut()?;
        let socket = round.sockets.get(index)?.as_ref()?;
        // Bounded: each turn consumes a datagram or an error report.
        let mut member = None;
        for _ in 0..64 {
            match socket.peek_source() {
                Ok(from) if round.addresses.contains(&from.ip()) => {
                    member = Some(from);
                    break;
                }
                Ok(_) => {
                    let _ = socket.discard();
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return None,
                // An ICMP error report, consumed by the call that saw it.
                Err(_) => {}
            }
        }
        let from = member?;
        let transport = round.sockets[index].take()?;
        let _ = registry.deregister(&mut SourceFd(&transport.as_raw_fd()));
        self.close(slot, registry);
        Some(Hit { from, transport })
    }

    /// Closes the rounds that had their time.
    pub fn expire(&mut self, now: Instant, registry: &Registry) {
        for slot in 0..MAX_ROUNDS {
            if self.rounds[slot]
                .as_ref()
                .is_some_and(|round| round.expires <= now)
            {
                self.close(slot, registry);
            }
        }
    }

    fn close(&mut self, slot: usize, registry: &Registry) {
        if let Some(round) = self.rounds[slot].take() {
            for socket in round.sockets.into_iter().flatten() {
                let _ = registry.deregister(&mut SourceFd(&socket.as_raw_fd()));
            }
        }
    }
}

/// One low-TTL punch from `socket` to each endpoint; failures only make
/// the round weaker.
fn punch_from(socket: &UdpSocket, toward: &[SocketAddr], ttl: u8, punch: &[u8]) {
    if let Err(error) = socket.set_ttl(Some(ttl)) {
        tracing::debug!(%error, "cannot lower a prediction socket's TTL");
        return;
    }
    for destination in toward {
        let _ = socket.send(*destination, None, punch);
    }
    if let Err(error) = socket.set_ttl(None) {
        tracing::debug!(%error, "cannot restore a prediction socket's TTL");
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, UdpSocket};

    use mio::Poll;

    use super::*;

    fn member(address: Ipv4Addr) -> (UdpSocket, SocketAddr) {
        let socket = UdpSocket::bind((address, 0)).expect("loopback socket");
        let endpoint = socket.local_addr().expect("bound");
        (socket, endpoint)
    }

    fn open_rounds(prediction: &PortPrediction) -> Vec<Vec<IpAddr>> {
        prediction
            .rounds
            .iter()
            .flatten()
            .map(|round| round.addresses.clone())
            .collect()
    }

    #[test]
    fn a_member_keeps_one_round_and_the_newest_request_gets_a_slot() {
        let poll = Poll::new().expect("poll");
        let mut prediction = PortPrediction::new(0);
        let now = Instant::now();
        let members: Vec<_> = [1, 2, 3]
            .map(|last| member(Ipv4Addr::new(127, 0, 0, last)))
            .into();
        let start = |prediction: &mut PortPrediction, index: usize, at: Instant| {
            prediction.start(at, &[members[index].1], 64, b"punch", 0, poll.registry())
        };

        assert_eq!(start(&mut prediction, 0, now), PREDICTION_SOCKETS);
        let later = now + Duration::from_millis(500);
        assert_eq!(start(&mut prediction, 0, later), PREDICTION_SOCKETS);
        assert_eq!(open_rounds(&prediction), vec![vec![members[0].1.ip()]]);
        assert_eq!(
            prediction.rounds[0].as_ref().map(|round| round.expires),
            Some(later + ROUND_LIFETIME),
            "a second request toward the member extends its round"
        );

        start(&mut prediction, 1, later);
        start(&mut prediction, 2, later + Duration::from_millis(10));
        let open = open_rounds(&prediction);
        assert_eq!(open.len(), MAX_ROUNDS);
        assert!(open.contains(&vec![members[2].1.ip()]), "{open:?}");
        assert!(
            !open.contains(&vec![members[0].1.ip()]),
            "the oldest round gave way: {open:?}"
        );

        // Each round's sockets punched at the member it was opened for.
        let (listener, _) = &members[2];
        listener
            .set_read_timeout(Some(Duration::from_secs(2)))
            .expect("timeout");
        let mut buffer = [0u8; 16];
        let (length, _) = listener.recv_from(&mut buffer).expect("a punch arrives");
        assert_eq!(&buffer[..length], b"punch");
    }
}
