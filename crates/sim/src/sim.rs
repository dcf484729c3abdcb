//! [`Sim`]: whole meshes of real [`Node`]s on the simulated network, in
//! simulated time. One event queue orders everything by `Instant`:
//! datagrams in flight, and each node's next deadline.
//!
//! ```text
//!            ┌──────── earliest of ────────┐
//!   in flight (arrival, sequence)    node deadlines (TimerQueue)
//!            │                             │
//!   Node::handle_datagram         Node::handle_timeout
//!            └──────────┬──────────────────┘
//!            drain the node that was touched, as net's worker does:
//!              poll_transmit ─▶ Network::send ─▶ in flight (or lost)
//!              poll_event    ─▶ (nothing to do: no TUN, no sockets)
//!              poll_timeout  ─▶ its deadline in the queue
//! ```
//!
//! Nothing reads a real clock or the OS's randomness: time is an offset
//! from one `Instant`, keys and every random draw come from the seed, and
//! ties are broken by a sequence number, so a seed replays exactly.
//! Crypto is real, so an event costs what a node's work costs: a
//! datagram's seal and open, a handshake's Diffie–Hellman, a
//! certificate's signature check.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use fjord_mesh::{NetworkSecret, Node, Revocation};
use fjord_proto::timer_queue::TimerQueue;
use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, Received, Sent};

use crate::member::{self, EPOCH_SECS, Identity};
use crate::network::{LinkConfig, Network};
use crate::packet::ipv4_packet;
use crate::traffic::{ControlKinds, Traffic, WireKind};

/// What a simulated mesh is made of.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Drives keys, the network key, placement, loss and every node's
    /// random source.
    pub seed: u64,
    pub link: LinkConfig,
    /// When members keep sessions (the `[Mesh]` keys of that name).
    pub sessions: Sessions,
}

impl SimConfig {
    /// A mesh on `link`, its sessions as `fjord up` keeps them by default.
    pub fn new(seed: u64, link: LinkConfig) -> Self {
        Self {
            seed,
            link,
            sessions: Sessions::default(),
        }
    }
}

/// `EagerSessions` and `IdleTimeout` of every member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sessions {
    /// Up to this many members, all meet all; above, on demand.
    pub eager: usize,
    /// An on-demand session without user traffic this long closes.
    pub idle_timeout: Duration,
}

impl Default for Sessions {
    fn default() -> Self {
        Self {
            eager: fjord_mesh::DEFAULT_EAGER_SESSIONS,
            idle_timeout: fjord_mesh::DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// One member: its node and what it sent.
pub struct Member {
    pub identity: Identity,
    pub node: Node,
    pub traffic: Traffic,
    pub behind_nat: bool,
    /// User packets it received: (from whose overlay address, when).
    pub received: Vec<(std::net::IpAddr, Instant)>,
}

/// A datagram on its way, ordered by arrival, then by when it was sent.
struct InFlight {
    arrives: Instant,
    sequence: u64,
    to: usize,
    from: std::net::SocketAddr,
    sender: usize,
    datagram: Vec<u8>,
}

impl PartialEq for InFlight {
    fn eq(&self, other: &Self) -> bool {
        (self.arrives, self.sequence) == (other.arrives, other.sequence)
    }
}

impl Eq for InFlight {}

impl PartialOrd for InFlight {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for InFlight {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.arrives, self.sequence).cmp(&(other.arrives, other.sequence))
    }
}

pub struct Sim {
    seed: u64,
    sessions: Sessions,
    network_secret: NetworkSecret,
    /// The simulated clock's origin: every `Instant` is an offset from it.
    start: Instant,
    now: Instant,
    pub network: Network,
    pub members: Vec<Member>,
    timers: TimerQueue,
    in_flight: BinaryHeap<Reverse<InFlight>>,
    sequence: u64,
    /// `poll_transmit`'s buffer, reused.
    buffer: Vec<u8>,
    /// Events run (deliveries and timeouts), for the cost of a run.
    pub events: u64,
    /// Datagrams the network lost.
    pub lost: u64,
    /// Control messages delivered, by kind, for the whole mesh.
    pub control_kinds: ControlKinds,
}

impl Sim {
    pub fn new(config: SimConfig) -> Self {
        // Any instant will do as the origin: only offsets from it matter.
        let start = Instant::now();
        Self {
            seed: config.seed,
            sessions: config.sessions,
            network_secret: member::network_secret(config.seed),
            start,
            now: start,
            network: Network::new(config.link, config.seed),
            members: Vec::new(),
            timers: TimerQueue::new(),
            in_flight: BinaryHeap::new(),
            sequence: 0,
            buffer: vec![0; 65_536],
            events: 0,
            lost: 0,
            control_kinds: ControlKinds::default(),
        }
    }

    pub fn now(&self) -> Instant {
        self.now
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.now - self.start
    }

    /// Whether member `at` lists member `other` among its members.
    pub fn knows(&self, at: usize, other: usize) -> bool {
        let key = &self.members[other].identity.key;
        self.members[at]
            .node
            .mesh()
            .is_some_and(|mesh| mesh.is_member(key))
    }

    /// Whether member `at` lists member `other` and has a session with it.
    pub fn knows_with_session(&self, at: usize, other: usize) -> bool {
        self.knows(at, other) && self.in_session(at, other)
    }

    /// Whether member `at` has a session with member `other` (known or
    /// not).
    pub fn in_session(&self, at: usize, other: usize) -> bool {
        let device = self.members[at].node.device();
        device
            .peer_id(&self.members[other].identity.key)
            .is_some_and(|id| device.peer_has_session(id))
    }

    /// Whether member `at`'s mesh is past the eager threshold, so it
    /// meets members only on demand.
    pub fn on_demand(&self, at: usize) -> bool {
        self.members[at]
            .node
            .mesh()
            .is_some_and(fjord_mesh::Mesh::on_demand)
    }

    /// Starts the next member now, joining through member `bootstrap`;
    /// its index.
    pub fn start_member(&mut self, bootstrap: Option<usize>) -> usize {
        let index = self.members.len();
        let behind_nat = self.network.place(index);
        let bootstrap = bootstrap.map(|b| self.members[b].identity);
        let (identity, node) = member::start_node(
            self.seed,
            self.sessions,
            &self.network_secret,
            index,
            self.start,
            self.now,
            bootstrap.as_ref(),
        );
        self.members.push(Member {
            identity,
            node,
            traffic: Traffic::default(),
            behind_nat,
            received: Vec::new(),
        });
        self.drain(index);
        index
    }

    /// The network key's revocation of member `index`'s key, as
    /// `fjord network revoke` writes it.
    pub fn revocation_of(&self, index: usize) -> Revocation {
        self.network_secret
            .revoke(self.members[index].identity.key, EPOCH_SECS)
    }

    /// Gives member `at` a revocation, as a reload of its `Revocations`
    /// file does.
    pub fn revoke(&mut self, at: usize, revocation: Revocation) {
        let now = self.now;
        // A revocation the network key signed is never refused.
        let _ = self.members[at].node.revoke(now, revocation);
        self.drain(at);
    }

    /// Member `from` sends one user packet (IPv4, 32 bytes of payload)
    /// to member `to`'s overlay address, as its TUN device would hand it.
    /// What became of it: sealed, staged behind a handshake, or dropped.
    pub fn send_packet(&mut self, from: usize, to: usize) -> Sent {
        let packet = ipv4_packet(
            self.members[from].identity.overlay,
            self.members[to].identity.overlay,
            &[0x5a; 32],
        );
        let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..][..packet.len()].copy_from_slice(&packet);
        let now = self.now;
        let sent = self.members[from]
            .node
            .handle_tun_packet(now, &mut buf, packet.len());
        if let Sent::Sealed {
            len, destination, ..
        } = sent
        {
            self.put_on_wire(from, destination, &buf[..len]);
        }
        self.drain(from);
        sent
    }

    /// Runs until simulated time `end`.
    pub fn run_until(&mut self, end: Instant) {
        self.run_watching(end, |_, _| false);
    }

    pub fn run_for(&mut self, duration: Duration) {
        self.run_until(self.now + duration);
    }

    /// Runs until `end`, or until `done(sim, member)` says so after an
    /// event at `member`; the time of that event, if it came.
    pub fn run_watching(
        &mut self,
        end: Instant,
        mut done: impl FnMut(&Sim, usize) -> bool,
    ) -> Option<Instant> {
        while let Some(touched) = self.step(end) {
            if done(self, touched) {
                return Some(self.now);
            }
        }
        self.now = self.now.max(end);
        None
    }

    /// Runs the next event due by `end`: a delivery before a timeout at
    /// the same instant. The member it touched; `None` when nothing is
    /// due by `end`.
    fn step(&mut self, end: Instant) -> Option<usize> {
        loop {
            let delivery = self.in_flight.peek().map(|Reverse(d)| d.arrives);
            let deadline = self.timers.next_deadline();
            let next = delivery.into_iter().chain(deadline).min()?;
            if next > end {
                return None;
            }
            self.now = self.now.max(next);
            if delivery == Some(next) {
                let Reverse(datagram) = self.in_flight.pop()?;
                self.events += 1;
                return Some(self.deliver(datagram));
            }
            // A stale entry (its key rescheduled) yields nothing: look again.
            let Some(index) = self.timers.pop_due(self.now) else {
                continue;
            };
            self.events += 1;
            let now = self.now;
            let node = &mut self.members[index].node;
            // The queue may fire early (a deadline that moved later).
            if node.poll_timeout().is_some_and(|deadline| deadline <= now) {
                node.handle_timeout(now);
            }
            self.drain(index);
            return Some(index);
        }
    }

    /// Hands a datagram to its receiver; the receiver's index.
    fn deliver(&mut self, mut datagram: InFlight) -> usize {
        let to = datagram.to;
        let kind = WireKind::of(&datagram.datagram);
        let len = datagram.datagram.len();
        let now = self.now;
        let member = &mut self.members[to];
        let outcome =
            member
                .node
                .handle_datagram(now, datagram.from, &mut datagram.datagram, &mut []);
        if let Received::Data { source, .. } = outcome {
            member.received.push((source, now));
        }
        self.members[datagram.sender]
            .traffic
            .delivered(kind, len, &outcome);
        if kind == WireKind::Transport {
            self.control_kinds
                .delivered(&datagram.datagram, len, &outcome);
        }
        self.drain(to);
        to
    }

    /// After every input to a member: its datagrams onto the wire, its
    /// events taken (nothing here acts on them), its next deadline into
    /// the queue. Pumping for an event may queue more datagrams, so both
    /// are drained until neither gives anything.
    fn drain(&mut self, index: usize) {
        let now = self.now;
        let mut buffer = std::mem::take(&mut self.buffer);
        loop {
            let mut progressed = false;
            while let Some(transmit) = self.members[index].node.poll_transmit(now, &mut buffer) {
                progressed = true;
                let datagram = &buffer[..transmit.len];
                if transmit.ttl.is_some() {
                    // A punch dies between the NATs: it only opens ours.
                    self.members[index]
                        .traffic
                        .sent(WireKind::Other, datagram.len());
                    self.network.punch(index, transmit.destination);
                    continue;
                }
                self.put_on_wire(index, transmit.destination, datagram);
            }
            // Port predictions, carriers and ICMP replies need sockets or
            // a TUN device the simulator does not have.
            while self.members[index].node.poll_event(now).is_some() {
                progressed = true;
            }
            if !progressed {
                break;
            }
        }
        self.buffer = buffer;
        let deadline = self.members[index].node.poll_timeout();
        self.timers.update(index, deadline);
    }

    /// Member `from` sends `datagram` to `destination`: counted, then lost
    /// or in flight.
    fn put_on_wire(&mut self, from: usize, destination: std::net::SocketAddr, datagram: &[u8]) {
        self.members[from]
            .traffic
            .sent(WireKind::of(datagram), datagram.len());
        match self.network.send(self.now, from, destination) {
            Ok(route) => {
                self.sequence += 1;
                self.in_flight.push(Reverse(InFlight {
                    arrives: route.arrives,
                    sequence: self.sequence,
                    to: route.to,
                    from: route.from,
                    sender: from,
                    datagram: datagram.to_vec(),
                }));
            }
            Err(_) => self.lost += 1,
        }
    }
}
