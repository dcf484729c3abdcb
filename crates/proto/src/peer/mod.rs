//! One peer's protocol state: handshake in flight, its three session slots,
//! timers, packets staged while no session exists, and counters.
//!
//! The work is split by concern: [`handshake`] creates and consumes
//! handshake messages and installs sessions, [`data`] carries transport
//! data in its two phases, and this file holds the state and the timers.
//!
//! Session slots follow wireguard-go:
//!
//! - `current` sends; `previous` still receives what was in flight when the
//!   current one arrived.
//! - An initiator's new session becomes `current` at once (the response
//!   proves the responder has it).
//! - A responder's new session waits in `next` until the first data packet
//!   (usually the initiator's immediate keepalive) arrives on it: only then
//!   is it known the initiator has it, and it becomes `current`.
//!
//! Where fjord parts from wireguard-go: when both sides initiate at once,
//! each answers the other's initiation (a `next`) before its own response
//! arrives. wireguard-go then makes `next` the previous session and drops
//! `current`, losing what the other side sent on it in the last round
//! trip. fjord keeps `current` as `previous` and leaves `next` waiting.
//! When data arrives on it, both sides settle on the same one of the two
//! new sessions to send on (the one begun by the greater public key
//! between fjord nodes, the peer's own with a plain WireGuard peer), and
//! keep the other only to receive. Were each to send on its own, each
//! side's `previous` would be the session its peer sends on, and the next
//! one-sided rekey would release it while the initiator still sends on it
//! until the response arrives, and neither side would be the initiator of
//! the session it sends on, which alone rekeys by age. Whether the
//! handshakes crossed is known from the order of events ([`Crossing`]);
//! should reordered handshake messages let only one side see the
//! crossing, that side follows the peer once data shows where the peer
//! sends.
//!
//! Every session and in-flight initiation owns a receiver index registered
//! in the device's index table; dropping one releases its index.

mod data;
mod handshake;

pub(crate) use data::dropped;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::aead::DataCipher;
use crate::compression::Codec;
use crate::context::Context;
use crate::cookie::CookieState;
use crate::endpoint::Endpoint;
use crate::handshake::{InitiatorState, RemoteKeys};
use crate::outcome::{DropReason, Event, PeerId};
use crate::session::Session;
use crate::tai64n::Tai64N;
use crate::timers::Timers;

/// Packets kept per peer while waiting for a handshake (wireguard-go's size).
pub const MAX_STAGED_PACKETS: usize = 128;

/// Byte and handshake counters reported by `fjord show`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Wall-clock time of the latest completed handshake, since the Unix epoch.
    pub last_handshake: Option<Duration>,
    /// IP packets sent compressed, in sessions that agreed on compression.
    pub compressed_packets: u64,
    /// IP packets sent raw in such sessions: too short, too random, or no
    /// shorter compressed.
    pub uncompressed_packets: u64,
    /// Compressed packets received and decompressed.
    pub decompressed_packets: u64,
    /// Transport data messages (keepalives included) received and
    /// accepted, and sent.
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    /// Handshakes that completed, and rounds of attempts given up
    /// unanswered (after 90 s).
    pub handshakes_completed: u64,
    pub handshakes_abandoned: u64,
}

/// Where the sessions of two crossing handshakes stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Crossing {
    None,
    /// `next` (the peer's) was waiting when our own handshake completed
    /// into `current`: which of the two sends is decided when data
    /// arrives on `next`. Known from the order of events, not from clock
    /// readings: a daemon may read both handshake messages in one batch.
    Pending,
    /// We gave the crossing to the peer: `current` is its session,
    /// `previous` our own. Data on `previous` from now on means the peer
    /// saw no crossing (a reordered handshake message) and sends on ours,
    /// so we follow it there.
    Yielded,
    /// We kept our own session at `at`: `previous` is the peer's. The
    /// peer sends on it until our data reaches it, so data there is
    /// expected for a round trip; still arriving REKEY_TIMEOUT later, it
    /// means the peer saw no crossing and stays on its own session, so we
    /// follow it there.
    Won {
        at: Instant,
    },
}

/// In declaration order (`repr(C)`): what every data packet reads or
/// writes comes first, then the current session, then what handshakes
/// use. Left to the compiler, the fields a packet touches lay across
/// about five cache lines of a 2.7 KB struct; with a thousand peers those
/// are misses (the `peers` benchmark).
#[repr(C)]
pub(crate) struct Peer {
    pub endpoint: Option<Endpoint>,
    pub timers: Timers,
    pub stats: PeerStats,
    /// When the latest authenticated message from the peer arrived.
    last_received: Option<Instant>,
    sent_last_minute_handshake: bool,
    current: Option<Session>,
    previous: Option<Session>,
    next: Option<Session>,
    pub remote: RemoteKeys,
    pub cookie: CookieState,
    initiation: Option<InFlight>,
    crossing: Crossing,
    pub(crate) last_initiation_sent: Option<Instant>,
    /// The timestamp of our last initiation, so that the next is later
    /// even when it follows within one whitening step.
    last_timestamp_sent: Tai64N,
    /// The initiation in flight was sent again at once for a cookie reply;
    /// cleared by every other initiation, so replies (forged ones too)
    /// can add at most one initiation per attempt.
    resent_for_cookie: bool,
    greatest_timestamp: Option<Tai64N>,
    last_initiation_consumed: Option<Instant>,
    staged: VecDeque<Vec<u8>>,
}

/// Our handshake in flight: its secrets, and the initiation as it went
/// out (macs included) and when, to send again toward other endpoints
/// (`initiate_afresh_to`). The bytes go with the handshake.
struct InFlight {
    state: InitiatorState,
    message: Vec<u8>,
    sent_at: Instant,
}

impl Peer {
    pub fn new(
        remote: RemoteKeys,
        endpoint: Option<SocketAddr>,
        keepalive: Option<Duration>,
    ) -> Self {
        let cookie = CookieState::new(remote.public_key());
        Self {
            remote,
            cookie,
            endpoint: endpoint.map(Endpoint::from),
            initiation: None,
            crossing: Crossing::None,
            last_initiation_sent: None,
            last_timestamp_sent: Tai64N::default(),
            resent_for_cookie: false,
            greatest_timestamp: None,
            last_initiation_consumed: None,
            last_received: None,
            current: None,
            previous: None,
            next: None,
            timers: Timers::new(keepalive),
            staged: VecDeque::new(),
            sent_last_minute_handshake: false,
            stats: PeerStats::default(),
        }
    }

    /// Every receiver index this peer owns, for releasing on removal.
    pub fn indices(&self) -> impl Iterator<Item = u32> + '_ {
        let sessions = [&self.current, &self.previous, &self.next]
            .into_iter()
            .flatten()
            .map(Session::local_index);
        sessions.chain(
            self.initiation
                .as_ref()
                .map(|sent| sent.state.local_index()),
        )
    }

    /// Forgets every session and handshake (keys are wiped on drop).
    pub fn erase_keys(&mut self, ctx: &mut Context) {
        for index in self.indices().collect::<Vec<_>>() {
            ctx.release_index(index);
        }
        self.current = None;
        self.previous = None;
        self.next = None;
        self.initiation = None;
        self.crossing = Crossing::None;
    }

    /// Whether the current session can carry a packet now.
    pub fn can_send(&self, now: Instant) -> bool {
        self.current
            .as_ref()
            .is_some_and(|session| session.can_send(now))
    }

    /// The cipher of our data to the peer, while a session can carry it.
    pub fn sending_cipher(&self) -> Option<DataCipher> {
        self.current.as_ref().map(Session::sending_cipher)
    }

    /// How our data to the peer is compressed (both offered the codec).
    pub fn sending_codec(&self) -> Option<Codec> {
        self.current
            .as_ref()
            .and_then(|session| session.negotiation().sending_codec())
    }

    /// Whether the peer showed in its current session that it is fjord.
    pub fn speaks_fjord(&self) -> bool {
        self.current
            .as_ref()
            .is_some_and(|session| session.negotiation().peer_speaks_fjord())
    }

    pub fn staged_len(&self) -> usize {
        self.staged.len()
    }

    pub fn has_session(&self) -> bool {
        self.current.is_some() || self.next.is_some()
    }

    /// Runs the timers due at `now`.
    pub fn handle_timers(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        let expired = self.timers.expired(now, &ctx.timing);
        if expired.retransmit_handshake {
            if self.timers.retry_handshake(&ctx.timing) {
                self.initiate(id, now, ctx, true);
            } else {
                for _ in self.staged.drain(..) {
                    ctx.drop(DropReason::HandshakeTimedOut);
                }
                if let Some(sent) = self.initiation.take() {
                    ctx.release_index(sent.state.local_index());
                }
                self.timers.handshake_abandoned(now, &ctx.timing);
                self.stats.handshakes_abandoned += 1;
                ctx.events.push_back(Event::HandshakeAbandoned { peer: id });
            }
        }
        if expired.send_keepalive || expired.persistent_keepalive {
            self.send_keepalive(id, now, ctx);
        }
        if expired.new_handshake {
            self.initiate(id, now, ctx, false);
        }
        if expired.zero_key_material {
            self.erase_keys(ctx);
            ctx.events.push_back(Event::KeysErased { peer: id });
        }
    }
}

fn release(slot: &mut Option<Session>, ctx: &mut Context) {
    if let Some(session) = slot.take() {
        ctx.release_index(session.local_index());
    }
}
