//! Port prediction rounds: the sockets `fjord_mesh` asks for when it
//! predicts ports toward a member (see the mesh's `traversal.rs` for why).
//!
//! ```text
//! Node::poll_port_prediction ─▶ start: PREDICTION_SOCKETS sockets, each
//!     sends a low-TTL punch to every endpoint (its own NAT mapping each)
//! a socket readable ─▶ from one of the endpoints' addresses? that socket
//!     is steered to the sender (steering.rs), the round's others close;
//!     anything else is read and dropped
//! housekeeping ─▶ rounds older than ROUND_LIFETIME close
//! ```

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use fjord_mesh::membership::PREDICTION_SOCKETS;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::udp::UdpTransport;

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
    pub transport: UdpTransport,
}

struct Round {
    sockets: Vec<Option<UdpTransport>>,
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
    /// with the TTL `ttl`. Returns how many sockets opened.
    pub fn start(
        &mut self,
        now: Instant,
        toward: &[SocketAddr],
        ttl: u8,
        punch: &[u8],
        fwmark: u32,
        registry: &Registry,
    ) -> usize {
        let Some(slot) = self.rounds.iter().position(Option::is_none) else {
            tracing::debug!("port prediction rounds all busy; this one waits for the next attempt");
            return 0;
        };
        let mut sockets = Vec::with_capacity(PREDICTION_SOCKETS);
        for index in 0..PREDICTION_SOCKETS {
            let socket = UdpTransport::bind(0, fwmark)
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
        let mut addresses: Vec<IpAddr> = toward.iter().map(SocketAddr::ip).collect();
        addresses.dedup();
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
fn punch_from(socket: &UdpTransport, toward: &[SocketAddr], ttl: u8, punch: &[u8]) {
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
