//! One peer's protocol state: handshake in flight, its three session slots,
//! timers, packets staged while no session exists, and counters.
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
//! Every session and in-flight initiation owns a receiver index registered
//! in the device's index table; dropping one releases its index.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::ops::Range;
use std::time::{Duration, Instant};

use crate::context::Context;
use crate::cookie::{CookieState, MacLayout};
use crate::handshake::{self, InitiatorState, ReceivedInitiation, RemoteKeys, SessionKeys};
use crate::ip::IpHeader;
use crate::outcome::{DropReason, Event, Incoming, Outgoing, PeerId, PendingData, Received, Sent};
use crate::replay::ReplayError;
use crate::session::{DATA_HEADROOM, DATA_TAILROOM, OpenError, SealError, Session};
use crate::tai64n::Tai64N;
use crate::timers::{
    HANDSHAKE_INITIATION_RATE, KEEPALIVE_TIMEOUT, REJECT_AFTER_TIME, REKEY_AFTER_MESSAGES,
    REKEY_AFTER_TIME, REKEY_TIMEOUT, Timers,
};
use crate::wire::{
    CookieReply, HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, HandshakeResponse,
};

/// Packets kept per peer while waiting for a handshake (wireguard-go's size).
pub const MAX_STAGED_PACKETS: usize = 128;

/// Byte and handshake counters reported by `fjord show`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerStats {
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Wall-clock time of the latest completed handshake, since the Unix epoch.
    pub last_handshake: Option<Duration>,
}

pub(crate) struct Peer {
    pub remote: RemoteKeys,
    pub cookie: CookieState,
    pub endpoint: Option<SocketAddr>,
    initiation: Option<InitiatorState>,
    last_initiation_sent: Option<Instant>,
    greatest_timestamp: Option<Tai64N>,
    last_initiation_consumed: Option<Instant>,
    current: Option<Session>,
    previous: Option<Session>,
    next: Option<Session>,
    pub timers: Timers,
    staged: VecDeque<Vec<u8>>,
    sent_last_minute_handshake: bool,
    pub stats: PeerStats,
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
            endpoint,
            initiation: None,
            last_initiation_sent: None,
            greatest_timestamp: None,
            last_initiation_consumed: None,
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
        sessions.chain(self.initiation.as_ref().map(InitiatorState::local_index))
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
    }

    /// Whether the current session can carry a packet now.
    pub fn can_send(&self, now: Instant) -> bool {
        self.current
            .as_ref()
            .is_some_and(|session| session.can_send(now))
    }

    pub fn has_session(&self) -> bool {
        self.current.is_some() || self.next.is_some()
    }

    // ---- handshake ------------------------------------------------------

    /// Sends a handshake initiation unless one went out less than
    /// REKEY_TIMEOUT ago. `retry` keeps the attempt count running.
    pub fn initiate(&mut self, id: PeerId, now: Instant, ctx: &mut Context, retry: bool) {
        if !retry {
            self.timers.reset_handshake_attempts();
        }
        if self
            .last_initiation_sent
            .is_some_and(|sent| now.saturating_duration_since(sent) < REKEY_TIMEOUT)
        {
            return;
        }
        let Some(endpoint) = self.endpoint else {
            ctx.drop(DropReason::NoEndpoint);
            return;
        };
        if ctx.identity.is_none() {
            ctx.drop(DropReason::NoPrivateKey);
            return;
        }
        if let Some(old) = self.initiation.take() {
            ctx.release_index(old.local_index());
        }
        let index = ctx.allocate_index(id);
        let ephemeral = ctx.rng.bytes32();
        let mut message = vec![0u8; HANDSHAKE_INITIATION_LEN];
        let Some(out) = message.first_chunk_mut::<HANDSHAKE_INITIATION_LEN>() else {
            return;
        };
        let timestamp = ctx.timestamp(now);
        let created = match ctx.identity.as_ref() {
            Some(identity) => handshake::create_initiation(
                identity,
                &self.remote,
                index,
                ephemeral,
                timestamp,
                out,
            ),
            None => Err(handshake::HandshakeError::LowOrderPoint),
        };
        let state = match created {
            Ok(state) => state,
            Err(_) => {
                ctx.release_index(index);
                ctx.drop(DropReason::HandshakeFailed);
                return;
            }
        };
        self.cookie
            .write_macs(now, &mut message, MacLayout::INITIATION);
        self.initiation = Some(state);
        self.last_initiation_sent = Some(now);
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        let jitter = ctx.jitter();
        self.timers.handshake_initiated(now, jitter);
        self.stats.tx_bytes += message.len() as u64;
        ctx.send(endpoint, message);
    }

    /// Answers a decrypted initiation from this peer.
    pub fn respond(
        &mut self,
        id: PeerId,
        now: Instant,
        from: SocketAddr,
        received: ReceivedInitiation,
        ctx: &mut Context,
    ) -> Received {
        if self
            .greatest_timestamp
            .is_some_and(|greatest| received.timestamp <= greatest)
        {
            ctx.drop(DropReason::ReplayedInitiation);
            return Received::Dropped(DropReason::ReplayedInitiation);
        }
        if self
            .last_initiation_consumed
            .is_some_and(|last| now.saturating_duration_since(last) < HANDSHAKE_INITIATION_RATE)
        {
            ctx.drop(DropReason::InitiationFlood);
            return Received::Dropped(DropReason::InitiationFlood);
        }
        let timestamp = received.timestamp;
        let index = ctx.allocate_index(id);
        let ephemeral = ctx.rng.bytes32();
        let mut message = vec![0u8; HANDSHAKE_RESPONSE_LEN];
        let Some(out) = message.first_chunk_mut::<HANDSHAKE_RESPONSE_LEN>() else {
            return Received::Control;
        };
        let keys = match handshake::create_response(&self.remote, received, index, ephemeral, out) {
            Ok(keys) => keys,
            Err(_) => {
                ctx.release_index(index);
                ctx.drop(DropReason::HandshakeFailed);
                return Received::Dropped(DropReason::HandshakeFailed);
            }
        };
        self.greatest_timestamp = Some(timestamp);
        self.last_initiation_consumed = Some(now);
        self.stats.rx_bytes += HANDSHAKE_INITIATION_LEN as u64;
        self.set_endpoint(id, from, ctx);
        self.cookie
            .write_macs(now, &mut message, MacLayout::RESPONSE);
        self.install_responder_session(&keys, now, ctx);
        // A response counts as an initiation for rate limiting, so we do not
        // start a competing handshake while the initiator confirms ours.
        self.last_initiation_sent = Some(now);
        self.timers.session_derived(now);
        self.timers.any_authenticated_packet_received();
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        self.stats.tx_bytes += message.len() as u64;
        ctx.send(from, message);
        Received::Control
    }

    /// Finishes our handshake with the peer's response.
    pub fn handle_response(
        &mut self,
        id: PeerId,
        now: Instant,
        from: SocketAddr,
        response: &HandshakeResponse<'_>,
        ctx: &mut Context,
    ) -> Received {
        let Some(state) = self
            .initiation
            .as_ref()
            .filter(|state| state.local_index() == response.receiver_index())
        else {
            ctx.drop(DropReason::UnexpectedHandshakeMessage);
            return Received::Dropped(DropReason::UnexpectedHandshakeMessage);
        };
        let Some(identity) = ctx.identity.as_ref() else {
            ctx.drop(DropReason::NoPrivateKey);
            return Received::Dropped(DropReason::NoPrivateKey);
        };
        let keys = match handshake::consume_response(identity, &self.remote, state, response) {
            Ok(keys) => keys,
            Err(_) => {
                ctx.drop(DropReason::HandshakeFailed);
                return Received::Dropped(DropReason::HandshakeFailed);
            }
        };
        // The in-flight index now belongs to the session.
        self.initiation = None;
        self.stats.rx_bytes += response.bytes().len() as u64;
        self.set_endpoint(id, from, ctx);
        self.install_initiator_session(&keys, now, ctx);
        self.timers.session_derived(now);
        self.handshake_complete(id, now, ctx, true);
        self.timers.any_authenticated_packet_received();
        self.timers.any_authenticated_packet_traversal(now);
        if self.staged.is_empty() {
            self.send_keepalive(id, now, ctx);
        } else {
            self.send_staged(id, now, ctx);
        }
        Received::Control
    }

    pub fn handle_cookie_reply(
        &mut self,
        now: Instant,
        reply: &CookieReply<'_>,
        ctx: &mut Context,
    ) -> Received {
        match self.cookie.consume_reply(now, reply) {
            Ok(()) => Received::Control,
            Err(_) => {
                ctx.drop(DropReason::UnexpectedHandshakeMessage);
                Received::Dropped(DropReason::UnexpectedHandshakeMessage)
            }
        }
    }

    fn handshake_complete(&mut self, id: PeerId, now: Instant, ctx: &mut Context, initiator: bool) {
        self.timers.handshake_complete();
        self.sent_last_minute_handshake = false;
        self.stats.last_handshake = Some(ctx.wall_clock.since_epoch(now));
        ctx.events.push_back(Event::HandshakeCompleted {
            peer: id,
            initiator,
        });
    }

    fn install_initiator_session(&mut self, keys: &SessionKeys, now: Instant, ctx: &mut Context) {
        let session = Session::new(keys, now);
        if let Some(next) = self.next.take() {
            release(&mut self.previous, ctx);
            release(&mut self.current, ctx);
            self.previous = Some(next);
        } else {
            release(&mut self.previous, ctx);
            self.previous = self.current.take();
        }
        self.current = Some(session);
    }

    fn install_responder_session(&mut self, keys: &SessionKeys, now: Instant, ctx: &mut Context) {
        release(&mut self.next, ctx);
        release(&mut self.previous, ctx);
        self.next = Some(Session::new(keys, now));
    }

    fn set_endpoint(&mut self, id: PeerId, from: SocketAddr, ctx: &mut Context) {
        if self.endpoint != Some(from) {
            self.endpoint = Some(from);
            ctx.events.push_back(Event::EndpointChanged {
                peer: id,
                endpoint: from,
            });
        }
    }

    // ---- data -------------------------------------------------------------

    /// Seals the packet at `buf[DATA_HEADROOM..][..payload_len]` in place.
    pub fn encapsulate(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        payload_len: usize,
        ctx: &mut Context,
    ) -> Sent {
        let mtu = ctx.mtu;
        match self.encapsulate_with(id, now, buf, payload_len, ctx, |session, buf| {
            session.seal(buf, payload_len, mtu).map(|len| (len, ()))
        }) {
            Ok((len, destination, ())) => Sent::Sealed { len, destination },
            Err(sent) => sent,
        }
    }

    /// Everything [`Peer::encapsulate`] does but the encryption.
    pub fn prepare_encapsulate(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        payload_len: usize,
        ctx: &mut Context,
    ) -> Outgoing {
        let mtu = ctx.mtu;
        match self.encapsulate_with(id, now, buf, payload_len, ctx, |session, buf| {
            session.prepare_seal(buf, payload_len, mtu)
        }) {
            Ok((len, destination, seal)) => Outgoing::Ready {
                len,
                destination,
                seal,
            },
            Err(sent) => Outgoing::Done(sent),
        }
    }

    /// The protocol work around sealing, with the seal itself (done now,
    /// or prepared for later) left to `seal`.
    fn encapsulate_with<T>(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        payload_len: usize,
        ctx: &mut Context,
        seal: impl FnOnce(&mut Session, &mut [u8]) -> Result<(usize, T), SealError>,
    ) -> Result<(usize, SocketAddr, T), Sent> {
        let Some(destination) = self.endpoint else {
            ctx.drop(DropReason::NoEndpoint);
            return Err(Sent::Dropped(DropReason::NoEndpoint));
        };
        // A length past the end of `buf` is the caller's mistake; refusing it
        // here keeps the staging copy and the padding arithmetic below from
        // overflowing (a panic in debug builds).
        if payload_len > buf.len().saturating_sub(DATA_HEADROOM) {
            ctx.drop(DropReason::BufferTooSmall);
            return Err(Sent::Dropped(DropReason::BufferTooSmall));
        }
        let session = match self.current.as_mut() {
            Some(session) if session.can_send(now) => session,
            _ => {
                let Some(payload) = buf.get(DATA_HEADROOM..DATA_HEADROOM + payload_len) else {
                    ctx.drop(DropReason::BufferTooSmall);
                    return Err(Sent::Dropped(DropReason::BufferTooSmall));
                };
                self.stage(payload.to_vec(), ctx);
                self.initiate(id, now, ctx, false);
                return Err(Sent::Staged);
            }
        };
        let (len, sealed) = match seal(session, buf) {
            Ok(sealed) => sealed,
            Err(error) => {
                let reason = match error {
                    SealError::BufferTooSmall => DropReason::BufferTooSmall,
                    SealError::CounterExhausted => DropReason::CounterExhausted,
                };
                ctx.drop(reason);
                return Err(Sent::Dropped(reason));
            }
        };
        let wants_rekey = session.is_initiator()
            && (now.saturating_duration_since(session.created()) >= REKEY_AFTER_TIME
                || session.next_send_counter() > REKEY_AFTER_MESSAGES);
        self.after_send(now, payload_len > 0, len, ctx);
        if wants_rekey {
            self.initiate(id, now, ctx, false);
        }
        Ok((len, destination, sealed))
    }

    fn after_send(&mut self, now: Instant, is_data: bool, len: usize, ctx: &mut Context) {
        self.stats.tx_bytes += len as u64;
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        if is_data && !self.timers.new_handshake_pending() {
            let jitter = ctx.jitter();
            self.timers.data_sent(now, jitter);
        }
    }

    fn stage(&mut self, packet: Vec<u8>, ctx: &mut Context) {
        if self.staged.len() >= MAX_STAGED_PACKETS {
            self.staged.pop_front();
            ctx.drop(DropReason::StagingQueueFull);
        }
        self.staged.push_back(packet);
    }

    /// Seals `payload` into a new datagram queued for sending, or stages it.
    fn send_owned(&mut self, id: PeerId, now: Instant, payload: &[u8], ctx: &mut Context) {
        let mut buf = vec![0u8; DATA_HEADROOM + payload.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..DATA_HEADROOM + payload.len()].copy_from_slice(payload);
        if let Sent::Sealed { len, destination } =
            self.encapsulate(id, now, &mut buf, payload.len(), ctx)
        {
            buf.truncate(len);
            ctx.send(destination, buf);
        }
    }

    pub fn send_keepalive(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        self.send_owned(id, now, &[], ctx);
    }

    fn send_staged(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        while self.current.as_ref().is_some_and(|s| s.can_send(now)) {
            let Some(packet) = self.staged.pop_front() else {
                break;
            };
            self.send_owned(id, now, &packet, ctx);
        }
    }

    fn session_by_index(&mut self, local_index: u32) -> Option<(&mut Session, bool)> {
        let matches = |s: &&mut Session| s.local_index() == local_index;
        if let Some(s) = self.current.as_mut().filter(matches) {
            Some((s, false))
        } else if let Some(s) = self.next.as_mut().filter(matches) {
            Some((s, true))
        } else {
            self.previous.as_mut().filter(matches).map(|s| (s, false))
        }
    }

    /// The first half of receiving a data message addressed to
    /// `local_index` ([`crate::Device::handle_datagram`]): finds the session and
    /// checks the counter against its replay window.
    pub fn prepare_decapsulate(
        &mut self,
        id: PeerId,
        now: Instant,
        local_index: u32,
        counter: u64,
        ctx: &mut Context,
    ) -> Incoming {
        let Some((session, _)) = self.session_by_index(local_index) else {
            ctx.drop(DropReason::UnknownReceiverIndex);
            return Incoming::Done(Received::Dropped(DropReason::UnknownReceiverIndex));
        };
        if !session.can_receive(now) {
            ctx.drop(DropReason::ExpiredSession);
            return Incoming::Done(Received::Dropped(DropReason::ExpiredSession));
        }
        match session.prepare_open(counter) {
            Ok(open) => Incoming::Data(PendingData {
                peer: id,
                local_index,
                counter,
                open,
            }),
            Err(error) => {
                let reason = open_drop_reason(error);
                ctx.drop(reason);
                Incoming::Done(Received::Dropped(reason))
            }
        }
    }

    /// Receives a data message addressed to `local_index` in one go, the
    /// decryption included.
    #[allow(clippy::too_many_arguments)]
    pub fn decapsulate(
        &mut self,
        id: PeerId,
        now: Instant,
        from: SocketAddr,
        local_index: u32,
        counter: u64,
        datagram: &mut [u8],
        ctx: &mut Context,
    ) -> Received {
        let Some((session, is_next)) = self.session_by_index(local_index) else {
            ctx.drop(DropReason::UnknownReceiverIndex);
            return Received::Dropped(DropReason::UnknownReceiverIndex);
        };
        if !session.can_receive(now) {
            ctx.drop(DropReason::ExpiredSession);
            return Received::Dropped(DropReason::ExpiredSession);
        }
        match session.open(counter, datagram) {
            Ok(plaintext) => {
                let opened = Opened::of(session, is_next);
                self.after_open(id, now, from, opened, plaintext, datagram, ctx)
            }
            Err(error) => {
                let reason = open_drop_reason(error);
                ctx.drop(reason);
                Received::Dropped(reason)
            }
        }
    }

    /// The second half, once the decryption ran: records the counter,
    /// updates sessions and timers, and checks the inner packet.
    pub fn finish_decapsulate(
        &mut self,
        pending: &PendingData,
        now: Instant,
        from: SocketAddr,
        authenticated: bool,
        datagram: &[u8],
        ctx: &mut Context,
    ) -> Received {
        if !authenticated {
            ctx.drop(DropReason::AuthenticationFailed);
            return Received::Dropped(DropReason::AuthenticationFailed);
        }
        // The session may have gone since the first half (a handshake
        // earlier in the same batch replaced it): then nobody holds its
        // replay window any more.
        let Some((session, is_next)) = self.session_by_index(pending.local_index) else {
            ctx.drop(DropReason::UnknownReceiverIndex);
            return Received::Dropped(DropReason::UnknownReceiverIndex);
        };
        match session.commit_open(pending.counter, datagram.len()) {
            Ok(plaintext) => {
                let opened = Opened::of(session, is_next);
                self.after_open(pending.peer, now, from, opened, plaintext, datagram, ctx)
            }
            Err(error) => {
                let reason = open_drop_reason(error);
                ctx.drop(reason);
                Received::Dropped(reason)
            }
        }
    }

    /// What follows an authenticated data message: session rotation,
    /// endpoint, counters and timers, and the inner packet's check.
    #[allow(clippy::too_many_arguments)]
    fn after_open(
        &mut self,
        id: PeerId,
        now: Instant,
        from: SocketAddr,
        opened: Opened,
        plaintext: Range<usize>,
        datagram: &[u8],
        ctx: &mut Context,
    ) -> Received {
        let datagram_len = datagram.len();
        if opened.is_next {
            release(&mut self.previous, ctx);
            self.previous = self.current.take();
            self.current = self.next.take();
            self.handshake_complete(id, now, ctx, false);
            self.send_staged(id, now, ctx);
        }
        self.set_endpoint(id, from, ctx);
        self.stats.rx_bytes += datagram_len as u64;
        self.timers.any_authenticated_packet_received();
        self.timers.any_authenticated_packet_traversal(now);
        let rekey_age = REJECT_AFTER_TIME - KEEPALIVE_TIMEOUT - REKEY_TIMEOUT;
        if opened.is_initiator
            && !self.sent_last_minute_handshake
            && now.saturating_duration_since(opened.created) >= rekey_age
        {
            self.sent_last_minute_handshake = true;
            self.initiate(id, now, ctx, false);
        }
        if plaintext.is_empty() {
            return Received::Keepalive { peer: id };
        }
        let header = match IpHeader::parse(&datagram[plaintext.clone()]) {
            Ok(header) => header,
            Err(_) => {
                ctx.drop(DropReason::InvalidInnerPacket);
                return Received::Dropped(DropReason::InvalidInnerPacket);
            }
        };
        self.timers.data_received(now);
        Received::Data {
            peer: id,
            packet: plaintext.start..plaintext.start + header.total_len,
            source: header.source,
            destination: header.destination,
        }
    }

    // ---- timers -------------------------------------------------------------

    pub fn handle_timers(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        let expired = self.timers.expired(now);
        if expired.retransmit_handshake {
            if self.timers.retry_handshake() {
                self.initiate(id, now, ctx, true);
            } else {
                for _ in self.staged.drain(..) {
                    ctx.drop(DropReason::HandshakeTimedOut);
                }
                if let Some(state) = self.initiation.take() {
                    ctx.release_index(state.local_index());
                }
                self.timers.handshake_abandoned(now);
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

/// What the rest of receiving needs to know of the session that opened a
/// data message.
#[derive(Clone, Copy)]
struct Opened {
    /// It was waiting in `next`: this message confirms it.
    is_next: bool,
    is_initiator: bool,
    created: Instant,
}

impl Opened {
    fn of(session: &Session, is_next: bool) -> Self {
        Self {
            is_next,
            is_initiator: session.is_initiator(),
            created: session.created(),
        }
    }
}

fn release(slot: &mut Option<Session>, ctx: &mut Context) {
    if let Some(session) = slot.take() {
        ctx.release_index(session.local_index());
    }
}

fn open_drop_reason(error: OpenError) -> DropReason {
    match error {
        OpenError::AuthenticationFailed => DropReason::AuthenticationFailed,
        OpenError::Replay(ReplayError::Replayed) => DropReason::ReplayedCounter,
        OpenError::Replay(ReplayError::TooOld) => DropReason::CounterTooOld,
        OpenError::Replay(ReplayError::LimitReached) => DropReason::CounterExhausted,
    }
}
