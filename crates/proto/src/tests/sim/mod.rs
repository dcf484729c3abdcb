//! A deterministic two-node simulator for [`crate::Device`].
//!
//! Alice and Bob each own a `Device` configured with the other as its only
//! peer. Nothing sleeps and nothing is random: time is a base `Instant`
//! that the test moves forward, each device draws from a seeded
//! [`SeededRng`], and a simulated network carries every datagram from one
//! device's `poll_transmit` to the other's `handle_datagram`.
//!
//! ```text
//! test ──send()──▶ encapsulate ──▶ link hook ──▶ in flight ──(latency)──▶ handle_datagram
//!       advance() ─▶ handle_timeout on both at each deadline, then delivery
//! ```
//!
//! The link hook sees every datagram before it enters the network and can
//! drop, duplicate, delay (and so reorder) or tamper with it. Every
//! datagram put on the wire is also logged, so a test can replay one later.
//!
//! When a `Pair` goes out of scope it checks that every `Dropped` outcome
//! either device returned was also counted in its `drops()`.

mod node;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

pub use node::*;

use crate::wire::{
    COOKIE_REPLY_LEN, HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, TRANSPORT_MIN_LEN,
};
use crate::{DropReason, Received, Sent};

/// WireGuard message kinds, for the link hook and the wire log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Initiation,
    Response,
    CookieReply,
    Data,
    Keepalive,
    Other,
}

impl Kind {
    pub fn of(bytes: &[u8]) -> Kind {
        match (bytes.first(), bytes.len()) {
            (Some(1), HANDSHAKE_INITIATION_LEN) => Kind::Initiation,
            (Some(2), HANDSHAKE_RESPONSE_LEN) => Kind::Response,
            (Some(3), COOKIE_REPLY_LEN) => Kind::CookieReply,
            (Some(4), TRANSPORT_MIN_LEN) => Kind::Keepalive,
            (Some(4), len) if len > TRANSPORT_MIN_LEN => Kind::Data,
            _ => Kind::Other,
        }
    }
}

/// A datagram on the simulated wire.
#[derive(Debug, Clone)]
pub struct Datagram {
    /// Who put it on the wire.
    pub sender: Who,
    pub from: SocketAddr,
    pub to: SocketAddr,
    pub bytes: Vec<u8>,
}

impl Datagram {
    pub fn kind(&self) -> Kind {
        Kind::of(&self.bytes)
    }
}

/// What the link does with a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    Deliver,
    Drop,
    Duplicate,
    /// Deliver this much later than the link's latency (reordering).
    Delay(Duration),
}

/// Reasons a device also counts for work whose outcome no caller sees
/// (timers, its own handshakes and keepalives, staged packets).
const COUNTED_WITHOUT_OUTCOME: [DropReason; 7] = [
    DropReason::NoEndpoint,
    DropReason::NoPrivateKey,
    DropReason::HandshakeFailed,
    DropReason::BufferTooSmall,
    DropReason::StagingQueueFull,
    DropReason::HandshakeTimedOut,
    DropReason::CounterExhausted,
];

type Link = Box<dyn FnMut(&mut Datagram) -> Fate>;

pub struct Pair {
    pub alice: Node,
    pub bob: Node,
    /// When the simulation started.
    pub epoch: Instant,
    /// The simulated present.
    pub now: Instant,
    /// One-way delay of every datagram.
    pub latency: Duration,
    link: Option<Link>,
    /// (deliver at, sequence number for a stable order, datagram)
    in_flight: Vec<(Instant, u64, Datagram)>,
    sequence: u64,
    /// Every datagram a node sent, before the link hook saw it.
    pub wire: Vec<(Instant, Datagram)>,
    /// Datagrams addressed to nobody (e.g. to an address a node left).
    pub undeliverable: usize,
}

impl Default for Pair {
    fn default() -> Self {
        Self::new()
    }
}

impl Pair {
    pub fn new() -> Self {
        Self::with(PairConfig::default())
    }

    pub fn with(config: PairConfig) -> Self {
        let epoch = Instant::now();
        Self {
            alice: Node::new(Alice, config.alice, bob_addr(), epoch),
            bob: Node::new(Bob, config.bob, alice_addr(), epoch),
            epoch,
            now: epoch,
            latency: Duration::ZERO,
            link: None,
            in_flight: Vec::new(),
            sequence: 0,
            wire: Vec::new(),
            undeliverable: 0,
        }
    }

    /// A pair that has completed a handshake (Alice initiating) and
    /// exchanged one packet each way.
    pub fn connected() -> Self {
        let mut pair = Self::new();
        pair.connect();
        pair
    }

    /// Completes a handshake by sending one packet each way.
    pub fn connect(&mut self) {
        self.send(Alice, b"hello bob");
        self.send(Bob, b"hello alice");
        assert!(
            self.alice.has_session() && self.bob.has_session(),
            "handshake did not complete"
        );
    }

    pub fn node(&self, who: Who) -> &Node {
        match who {
            Alice => &self.alice,
            Bob => &self.bob,
        }
    }

    pub fn node_mut(&mut self, who: Who) -> &mut Node {
        match who {
            Alice => &mut self.alice,
            Bob => &mut self.bob,
        }
    }

    /// Time since the simulation started.
    pub fn elapsed(&self) -> Duration {
        self.now - self.epoch
    }

    /// Routes every datagram through `link` from now on.
    pub fn set_link(&mut self, link: impl FnMut(&mut Datagram) -> Fate + 'static) {
        self.link = Some(Box::new(link));
    }

    /// A perfect link again.
    pub fn clear_link(&mut self) {
        self.link = None;
    }

    /// Drops every datagram of `kind` sent by `sender`.
    pub fn drop_all(&mut self, sender: Who, kind: Kind) {
        self.set_link(move |datagram| {
            if datagram.sender == sender && datagram.kind() == kind {
                Fate::Drop
            } else {
                Fate::Deliver
            }
        });
    }

    /// `who`'s driver reads `body` (wrapped in an IPv4 header to the other
    /// node) from its TUN device; a sealed datagram goes on the wire.
    pub fn send(&mut self, who: Who, body: &[u8]) -> Sent {
        let other = self.node(who.other()).tunnel_ip;
        let packet = ipv4_packet(self.node(who).tunnel_ip, other, body);
        self.send_packet(who, &packet)
    }

    /// Like [`Pair::send`] with a complete IP packet.
    pub fn send_packet(&mut self, who: Who, packet: &[u8]) -> Sent {
        let (mut buf, len) = tun_buffer(packet);
        let now = self.now;
        let node = self.node_mut(who);
        let sent = node.device.encapsulate(now, node.peer, &mut buf, len);
        match sent {
            Sent::Sealed {
                len, destination, ..
            } => {
                buf.truncate(len);
                let from = node.addr;
                self.put_on_wire(Datagram {
                    sender: who,
                    from,
                    to: destination,
                    bytes: buf,
                });
            }
            Sent::Dropped(reason) => node.observed_drops.count(reason),
            Sent::Staged => {}
        }
        self.run();
        sent
    }

    /// Hands `bytes` to `to` as if received from `from`, bypassing the
    /// link, and returns the outcome; any replies go on the wire.
    pub fn inject(&mut self, to: Who, from: SocketAddr, bytes: &[u8]) -> Received {
        let outcome = self.deliver_to(to, from, bytes.to_vec());
        self.run();
        outcome
    }

    /// The datagrams `sender` put on the wire, of `kind`, in order.
    pub fn sent_by(&self, sender: Who, kind: Kind) -> Vec<(Instant, Datagram)> {
        self.wire
            .iter()
            .filter(|(_, datagram)| datagram.sender == sender && datagram.kind() == kind)
            .cloned()
            .collect()
    }

    /// The last datagram of `kind` that `sender` put on the wire.
    pub fn last_sent(&self, sender: Who, kind: Kind) -> Datagram {
        self.sent_by(sender, kind)
            .pop()
            .map(|(_, datagram)| datagram)
            .unwrap_or_else(|| panic!("{sender:?} sent no {kind:?}"))
    }

    /// Moves `who` to a new address, as a NAT rebinding or roaming does.
    pub fn move_node(&mut self, who: Who, addr: SocketAddr) {
        self.node_mut(who).addr = addr;
    }

    /// Restarts `who`: a fresh device with the same keys and configuration.
    pub fn restart(&mut self, who: Who) {
        self.restart_with_clock_step(who, 0);
    }

    /// Restarts `who` on a host whose wall clock was stepped by
    /// `step_secs` (negative: back) since the simulation started.
    pub fn restart_with_clock_step(&mut self, who: Who, step_secs: i64) {
        let other_addr = self.node(who.other()).addr;
        let (now, since_start) = (self.now, self.elapsed());
        self.node_mut(who)
            .restart(who.other(), other_addr, now, since_start, step_secs);
    }

    /// Processes everything due at the current time: transmits queued in
    /// either device and datagrams whose delivery time has come.
    pub fn run(&mut self) {
        for _ in 0..100_000 {
            self.flush(Alice);
            self.flush(Bob);
            let Some(position) = self.next_due() else {
                return;
            };
            let (_, _, datagram) = self.in_flight.remove(position);
            let target = [Alice, Bob]
                .into_iter()
                .find(|who| self.node(*who).addr == datagram.to);
            match target {
                Some(who) => {
                    self.deliver_to(who, datagram.from, datagram.bytes);
                }
                None => self.undeliverable += 1,
            }
        }
        panic!("the network never went quiet");
    }

    /// Moves time forward by `duration`, firing every timer and delivering
    /// every datagram at its exact time along the way.
    pub fn advance(&mut self, duration: Duration) {
        let target = self.now + duration;
        self.run();
        for _ in 0..100_000 {
            let next = [
                self.alice.device.poll_timeout(),
                self.bob.device.poll_timeout(),
                self.in_flight.iter().map(|(at, _, _)| *at).min(),
            ]
            .into_iter()
            .flatten()
            .min();
            match next {
                Some(next) if next <= target => {
                    self.now = self.now.max(next);
                    self.fire_timers();
                    self.run();
                }
                _ => {
                    self.now = target;
                    self.fire_timers();
                    self.run();
                    return;
                }
            }
        }
        panic!("timers kept firing without time moving on");
    }

    /// Advances to `since_start` after the simulation started.
    pub fn advance_to(&mut self, since_start: Duration) {
        let target = self.epoch + since_start;
        assert!(target >= self.now, "time only moves forward");
        self.advance(target - self.now);
    }

    /// Advances in `step`s until `done` holds or `limit` has passed;
    /// returns the simulated time it took.
    pub fn advance_until(
        &mut self,
        step: Duration,
        limit: Duration,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> Option<Duration> {
        let start = self.now;
        while self.now - start <= limit {
            if done(self) {
                return Some(self.now - start);
            }
            self.advance(step);
        }
        None
    }

    /// Checks that every `Dropped` outcome a device returned was counted
    /// in its `drops()`, exactly for the reasons only an input can cause.
    pub fn assert_every_drop_counted(&self) {
        for node in [&self.alice, &self.bob] {
            for reason in DropReason::ALL {
                let (counted, observed) = (
                    node.device.drops().get(reason),
                    node.observed_drops.get(reason),
                );
                if COUNTED_WITHOUT_OUTCOME.contains(&reason) {
                    assert!(
                        counted >= observed,
                        "{observed} {reason:?} outcomes, {counted} counted"
                    );
                } else {
                    assert_eq!(
                        counted, observed,
                        "{reason:?} outcomes and drops() disagree"
                    );
                }
            }
        }
    }

    fn fire_timers(&mut self) {
        let now = self.now;
        self.alice.device.handle_timeout(now);
        self.bob.device.handle_timeout(now);
    }

    fn next_due(&self) -> Option<usize> {
        self.in_flight
            .iter()
            .enumerate()
            .filter(|(_, (at, _, _))| *at <= self.now)
            .min_by_key(|(_, (at, sequence, _))| (*at, *sequence))
            .map(|(position, _)| position)
    }

    /// Drains `who`'s transmits onto the wire and its events into the log.
    fn flush(&mut self, who: Who) {
        let mut buf = vec![0u8; 65_536];
        loop {
            let node = self.node_mut(who);
            let Some(transmit) = node.device.poll_transmit(&mut buf) else {
                break;
            };
            let from = node.addr;
            self.put_on_wire(Datagram {
                sender: who,
                from,
                to: transmit.destination,
                bytes: buf[..transmit.len].to_vec(),
            });
        }
        let now = self.now;
        let node = self.node_mut(who);
        while let Some(event) = node.device.poll_event() {
            node.events.push((now, event));
        }
    }

    fn put_on_wire(&mut self, mut datagram: Datagram) {
        self.wire.push((self.now, datagram.clone()));
        let fate = match self.link.as_mut() {
            Some(link) => link(&mut datagram),
            None => Fate::Deliver,
        };
        let at = self.now + self.latency;
        match fate {
            Fate::Deliver => self.enqueue(at, datagram),
            Fate::Drop => {}
            Fate::Duplicate => {
                self.enqueue(at, datagram.clone());
                self.enqueue(at, datagram);
            }
            Fate::Delay(extra) => self.enqueue(at + extra, datagram),
        }
    }

    fn enqueue(&mut self, at: Instant, datagram: Datagram) {
        self.sequence += 1;
        self.in_flight.push((at, self.sequence, datagram));
    }

    fn deliver_to(&mut self, who: Who, from: SocketAddr, mut bytes: Vec<u8>) -> Received {
        let now = self.now;
        let node = self.node_mut(who);
        let mut decompressed = std::mem::take(&mut node.decompressed);
        let outcome = node
            .device
            .handle_datagram(now, from, &mut bytes, &mut decompressed);
        if let Received::Data { peer, .. }
        | Received::Decompressed { peer, .. }
        | Received::Keepalive { peer } = outcome
        {
            assert_eq!(peer, node.peer, "data attributed to the wrong peer");
        }
        node.record(&outcome, &bytes, &decompressed);
        node.decompressed = decompressed;
        self.flush(who);
        outcome
    }
}

impl Drop for Pair {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.assert_every_drop_counted();
        }
    }
}
