//! [`Fallback`]: when UDP to a fjord peer is blocked, carry its datagrams
//! over a TCP connection to the peer's fallback port instead, keep probing
//! UDP, and go back to UDP as soon as it answers. Sans-I/O: the driver
//! reports handshake retries, endpoint moves and what happened to carrier
//! connections; the machine answers with connections to open or close and
//! peer changes to apply.
//!
//! Only peers known to be fjord and to accept the carrier take part (a
//! `[Peer]` with `FallbackPort`, or a mesh member when this node listens
//! for the carrier itself): a plain WireGuard peer never sees the carrier.
//!
//! # One peer's path
//!
//! ```text
//!    initiations toward UDP unanswered for UNANSWERED_BEFORE_FALLBACK (10 s)
//!   Udp ─────────────────────────────────────────────────────────▶ Connecting
//!    ▲                                                   Connect(peer ip : fallback port)
//!    │ connect failed / CONNECT_TIMEOUT: GiveUp, UseUdp          │ connected
//!    ├───────────────────────────────────────────────────────────┤
//!    │                                                           ▼
//!    │ the peer's endpoint moved to an address        Carried: UseCarrier (endpoint :=
//!    │ that is no carrier (our UDP probe was          carrier, initiation over it), and
//!    │ answered over UDP): Disconnect                 every PROBE_INTERVAL ProbeUdp (an
//!    └─────────────────────────────────────────────── initiation to the UDP endpoint)
//!                                                     carrier closed: Connecting again
//! ```
//!
//! Why handshakes decide: a blocked path shows as initiations that nobody
//! answers (WireGuard sends one every 5 s while it waits), while a merely
//! lossy path answers most of them; three unanswered in a row (10 s) are
//! rare below heavy loss, and a needless switch is undone by the next
//! probe.
//! The probe is a real initiation sent to the UDP endpoint: the peer
//! answers it where it came from, so an answer over UDP moves the
//! session's endpoint off the carrier (WireGuard's roaming), and that move
//! is the signal to close the carrier. Addresses of carrier connections
//! (our own, and those the peer opened to us, which the driver reports as
//! accepted) never count as UDP.
//!
//! # Call order
//!
//! ```text
//! configure(peer, Some(port))          a fjord peer that accepts the carrier
//! loop {
//!     Event::HandshakeInitiated        -> handle_initiated(now, peer, endpoint)
//!     Event::HandshakeCompleted        -> handle_handshake(peer)
//!     Event::EndpointChanged           -> handle_endpoint(now, peer, endpoint)
//!     a carrier connected / failed /
//!       was accepted / closed          -> handle_carrier(now, event)
//!     poll_timeout() reached           -> handle_timeout(now)
//!     then drain poll_action()
//! }
//! ```

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::PeerId;
use fjord_proto::timer_queue::TimerQueue;

/// How long handshake initiations toward a UDP endpoint must go
/// unanswered before the carrier is tried: the initiation that leaves
/// this long after the first unanswered one (WireGuard sends one every
/// 5 s while it waits, so the third) opens the carrier. Measured here from
/// the initiations themselves: the device's attempt count restarts with
/// every new packet (as in WireGuard), so under steady traffic it never
/// grows.
pub const UNANSWERED_BEFORE_FALLBACK: Duration = Duration::from_secs(10);
/// How long a carrier connection may take to open before the attempt is
/// given up (a firewall that drops TCP too never answers at all).
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a carried peer is probed over UDP: each probe costs one
/// handshake on each side, and a path that opens is used again within it.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(10);

/// What happened to a carrier connection, as the driver reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarrierEvent {
    /// Our connection to this address is open.
    Connected(SocketAddr),
    /// Our connection to this address could not be opened.
    Failed(SocketAddr),
    /// A peer opened a connection to us, from this address.
    Accepted(SocketAddr),
    /// A connection (ours or accepted) to or from this address closed.
    Closed(SocketAddr),
}

/// What the machine asks of its driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FallbackAction {
    /// Open a carrier connection to `carrier` (for `peer`); report the
    /// outcome with [`CarrierEvent::Connected`] or [`CarrierEvent::Failed`].
    Connect { peer: PeerId, carrier: SocketAddr },
    /// Close the carrier connection to `carrier`.
    Disconnect { carrier: SocketAddr },
    /// Close the attempt to open a carrier to `carrier`: it got no answer
    /// within [`CONNECT_TIMEOUT`] (worth a warning: TCP to the fallback
    /// port is blocked too, or nothing there answers).
    GiveUp { carrier: SocketAddr },
    /// Send to `peer` through the open carrier: make `carrier` its
    /// endpoint and handshake over it now.
    UseCarrier { peer: PeerId, carrier: SocketAddr },
    /// Send a handshake initiation to `peer` at its UDP endpoint `udp`,
    /// leaving a working session where it is.
    ProbeUdp {
        peer: PeerId,
        udp: SocketAddr,
        carrier: SocketAddr,
    },
    /// The carrier is gone: send to `peer` at its UDP endpoint again.
    UseUdp { peer: PeerId, udp: SocketAddr },
}

/// Where one peer's datagrams go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathState {
    /// Over UDP, as always.
    Udp,
    /// UDP went unanswered; the carrier connection is opening.
    Connecting {
        udp: SocketAddr,
        carrier: SocketAddr,
        deadline: Instant,
    },
    /// Over the carrier, open since `since`; UDP is probed at `next_probe`.
    Carried {
        udp: SocketAddr,
        carrier: SocketAddr,
        since: Instant,
        next_probe: Instant,
    },
}

struct PeerPath {
    peer: PeerId,
    fallback_port: u16,
    state: PathState,
    /// When the first initiation toward UDP since the last completed
    /// handshake left.
    unanswered_since: Option<Instant>,
}

impl PeerPath {
    fn deadline(&self) -> Option<Instant> {
        match self.state {
            PathState::Udp => None,
            PathState::Connecting { deadline, .. } => Some(deadline),
            PathState::Carried { next_probe, .. } => Some(next_probe),
        }
    }

    fn carrier(&self) -> Option<SocketAddr> {
        match self.state {
            PathState::Udp => None,
            PathState::Connecting { carrier, .. } | PathState::Carried { carrier, .. } => {
                Some(carrier)
            }
        }
    }
}

/// Counters for `fjord show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FallbackCounters {
    /// Times a peer moved from UDP to the carrier.
    pub fallbacks: u64,
    /// Times a carried peer moved back to UDP.
    pub returns: u64,
    /// Carrier connections that failed to open or timed out.
    pub failed_connects: u64,
}

/// The fallback state of every peer that accepts the carrier.
#[derive(Default)]
pub struct Fallback {
    /// By `PeerId::index` (the timer queue's key).
    peers: HashMap<usize, PeerPath>,
    /// Addresses of connections peers opened to us: an endpoint there is
    /// carried, not UDP.
    accepted: HashSet<SocketAddr>,
    deadlines: TimerQueue,
    actions: VecDeque<FallbackAction>,
    counters: FallbackCounters,
}

impl Fallback {
    pub fn new() -> Self {
        Self::default()
    }

    /// Makes `peer` fall back to TCP `fallback_port` at its address when
    /// UDP fails; `None` stops that (closing its carrier, if any).
    pub fn configure(&mut self, peer: PeerId, fallback_port: Option<u16>) {
        match fallback_port {
            Some(port) => {
                self.peers
                    .entry(peer.index())
                    .and_modify(|path| path.fallback_port = port)
                    .or_insert(PeerPath {
                        peer,
                        fallback_port: port,
                        state: PathState::Udp,
                        unanswered_since: None,
                    });
            }
            None => self.forget(peer),
        }
    }

    /// The peer is gone: its carrier, if any, is closed.
    pub fn forget(&mut self, peer: PeerId) {
        if let Some(carrier) = self
            .peers
            .remove(&peer.index())
            .and_then(|path| path.carrier())
        {
            self.actions
                .push_back(FallbackAction::Disconnect { carrier });
        }
        self.deadlines.remove(peer.index());
    }

    pub fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// `peer`'s path, if it accepts the carrier.
    pub fn state(&self, peer: PeerId) -> Option<PathState> {
        self.peers.get(&peer.index()).map(|path| path.state)
    }

    /// The fallback port configured for `peer`.
    pub fn fallback_port(&self, peer: PeerId) -> Option<u16> {
        self.peers.get(&peer.index()).map(|path| path.fallback_port)
    }

    pub fn counters(&self) -> FallbackCounters {
        self.counters
    }

    /// Whether `address` is the far end of a carrier connection.
    pub fn is_carrier(&self, address: SocketAddr) -> bool {
        self.accepted.contains(&address)
            || self
                .peers
                .values()
                .any(|path| path.carrier() == Some(address))
    }

    /// A handshake initiation left for `peer`, whose endpoint was
    /// `endpoint`.
    pub fn handle_initiated(&mut self, now: Instant, peer: PeerId, endpoint: Option<SocketAddr>) {
        let Some(udp) = endpoint else { return };
        if self.is_carrier(udp) {
            return;
        }
        let Some(path) = self.peers.get_mut(&peer.index()) else {
            return;
        };
        let since = *path.unanswered_since.get_or_insert(now);
        if path.state != PathState::Udp
            || now.saturating_duration_since(since) < UNANSWERED_BEFORE_FALLBACK
        {
            return;
        }
        path.unanswered_since = None;
        let carrier = SocketAddr::new(udp.ip(), path.fallback_port);
        self.connect(now, peer, udp, carrier);
    }

    /// A handshake with `peer` completed (on whatever path).
    pub fn handle_handshake(&mut self, peer: PeerId) {
        if let Some(path) = self.peers.get_mut(&peer.index()) {
            path.unanswered_since = None;
        }
    }

    /// `peer`'s session moved to `endpoint` (an authenticated datagram
    /// came from there).
    pub fn handle_endpoint(&mut self, _now: Instant, peer: PeerId, endpoint: SocketAddr) {
        if self.is_carrier(endpoint) {
            return;
        }
        let Some(path) = self.peers.get_mut(&peer.index()) else {
            return;
        };
        match path.state {
            PathState::Carried { carrier, .. } => {
                // The peer answered over UDP: the carrier has done its job.
                self.counters.returns += 1;
                path.state = PathState::Udp;
                self.actions
                    .push_back(FallbackAction::Disconnect { carrier });
            }
            PathState::Connecting { carrier, .. } => {
                // UDP answered after all, before the carrier opened.
                path.state = PathState::Udp;
                self.actions
                    .push_back(FallbackAction::Disconnect { carrier });
            }
            PathState::Udp => {}
        }
    }

    pub fn handle_carrier(&mut self, now: Instant, event: CarrierEvent) {
        match event {
            CarrierEvent::Accepted(address) => {
                self.accepted.insert(address);
            }
            CarrierEvent::Connected(address) => {
                let Some(path) = self.find_mut(address) else {
                    // Nobody waits for it any more.
                    self.actions
                        .push_back(FallbackAction::Disconnect { carrier: address });
                    return;
                };
                if let PathState::Connecting { udp, carrier, .. } = path.state {
                    let peer = path.peer;
                    path.state = PathState::Carried {
                        udp,
                        carrier,
                        since: now,
                        next_probe: now + PROBE_INTERVAL,
                    };
                    self.counters.fallbacks += 1;
                    self.actions
                        .push_back(FallbackAction::UseCarrier { peer, carrier });
                    self.deadlines
                        .update(peer.index(), Some(now + PROBE_INTERVAL));
                }
            }
            CarrierEvent::Failed(address) => {
                if let Some(path) = self.find_mut(address)
                    && let PathState::Connecting { udp, .. } = path.state
                {
                    let peer = path.peer;
                    path.state = PathState::Udp;
                    self.counters.failed_connects += 1;
                    self.actions.push_back(FallbackAction::UseUdp { peer, udp });
                }
            }
            CarrierEvent::Closed(address) => {
                self.accepted.remove(&address);
                if let Some(path) = self.find_mut(address)
                    && let PathState::Carried {
                        udp,
                        carrier,
                        since,
                        ..
                    } = path.state
                {
                    let peer = path.peer;
                    path.state = PathState::Udp;
                    if now.saturating_duration_since(since) >= PROBE_INTERVAL {
                        // The peer restarted, or the connection broke
                        // after serving a while: UDP is most likely still
                        // blocked, so open a new one at once.
                        self.connect(now, peer, udp, carrier);
                    } else {
                        // Closed as soon as it opened (the far side refuses
                        // it): UDP again, and the carrier only after UDP
                        // failed again, so the attempts are 10 s apart.
                        self.actions.push_back(FallbackAction::UseUdp { peer, udp });
                    }
                }
            }
        }
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.next_deadline()
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        while let Some(index) = self.deadlines.pop_due(now) {
            let Some(path) = self.peers.get_mut(&index) else {
                continue;
            };
            let peer = path.peer;
            match path.state {
                PathState::Connecting {
                    udp,
                    carrier,
                    deadline,
                } if deadline <= now => {
                    path.state = PathState::Udp;
                    self.counters.failed_connects += 1;
                    self.actions.push_back(FallbackAction::GiveUp { carrier });
                    self.actions.push_back(FallbackAction::UseUdp { peer, udp });
                }
                PathState::Carried {
                    udp,
                    carrier,
                    since,
                    next_probe,
                } if next_probe <= now => {
                    path.state = PathState::Carried {
                        udp,
                        carrier,
                        since,
                        next_probe: now + PROBE_INTERVAL,
                    };
                    self.actions
                        .push_back(FallbackAction::ProbeUdp { peer, udp, carrier });
                }
                _ => {}
            }
            let deadline = path.deadline();
            self.deadlines.update(index, deadline);
        }
    }

    pub fn poll_action(&mut self) -> Option<FallbackAction> {
        self.actions.pop_front()
    }

    fn connect(&mut self, now: Instant, peer: PeerId, udp: SocketAddr, carrier: SocketAddr) {
        let Some(path) = self.peers.get_mut(&peer.index()) else {
            return;
        };
        let deadline = now + CONNECT_TIMEOUT;
        path.state = PathState::Connecting {
            udp,
            carrier,
            deadline,
        };
        self.deadlines.update(peer.index(), Some(deadline));
        self.actions
            .push_back(FallbackAction::Connect { peer, carrier });
    }

    /// The peer whose own carrier goes to `carrier`.
    fn find_mut(&mut self, carrier: SocketAddr) -> Option<&mut PeerPath> {
        self.peers
            .values_mut()
            .find(|path| path.carrier() == Some(carrier))
    }
}

#[cfg(test)]
mod tests;
