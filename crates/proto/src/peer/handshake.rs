//! The handshake half of a peer: initiations, responses and cookie
//! replies, and installing the sessions they derive.

use std::net::SocketAddr;
use std::time::Instant;

use zeroize::Zeroizing;

use super::{Crossing, InFlight, Peer, release};
use crate::context::Context;
use crate::cookie::MacLayout;
use crate::endpoint::Endpoint;
use crate::handshake::{self, ReceivedInitiation, SessionKeys};
use crate::outcome::{DropReason, Event, PeerId, Received};
use crate::session::Session;
use crate::wire::{
    CookieReply, HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, HandshakeResponse,
};

impl Peer {
    /// Sends a handshake initiation unless one went out less than
    /// REKEY_TIMEOUT ago. `retry` keeps the attempt count running.
    pub fn initiate(&mut self, id: PeerId, now: Instant, ctx: &mut Context, retry: bool) {
        let endpoint = self.endpoint;
        self.initiate_to(id, now, ctx, retry, endpoint.as_slice());
    }

    /// An initiation toward `destinations` now, whatever went out before
    /// (a path just learned). One that went out less than the
    /// responder's minimum gap between initiations ago is sent again as
    /// it is instead: a new one would reach the peer right behind it,
    /// be refused there (as a flood, or as a replay within one timestamp
    /// step), and leave us waiting for the answer to the new one while
    /// the answer to the first is dropped, both sides without a session
    /// until the retry seconds later.
    pub fn initiate_afresh_to(
        &mut self,
        id: PeerId,
        now: Instant,
        ctx: &mut Context,
        destinations: &[SocketAddr],
    ) {
        let just_sent = self.initiation.as_ref().filter(|sent| {
            now.saturating_duration_since(sent.sent_at) < ctx.timing.handshake_initiation_rate
        });
        if let Some(sent) = just_sent {
            let message = sent.message.clone();
            self.send_initiation(ctx, destinations, message);
            return;
        }
        self.last_initiation_sent = None;
        self.initiate_to(id, now, ctx, false, destinations);
    }

    /// [`Peer::initiate`], with a copy of the one initiation to each of
    /// `destinations` (none: counted as [`DropReason::NoEndpoint`]).
    pub fn initiate_to<E: Into<Endpoint> + Copy>(
        &mut self,
        id: PeerId,
        now: Instant,
        ctx: &mut Context,
        retry: bool,
        destinations: &[E],
    ) {
        if !retry {
            self.timers.reset_handshake_attempts();
        }
        if self
            .last_initiation_sent
            .is_some_and(|sent| now.saturating_duration_since(sent) < ctx.timing.rekey_timeout)
        {
            return;
        }
        if destinations.is_empty() {
            ctx.drop(DropReason::NoEndpoint);
            return;
        }
        if ctx.identity.is_none() {
            ctx.drop(DropReason::NoPrivateKey);
            return;
        }
        if let Some(old) = self.initiation.take() {
            ctx.release_index(old.state.local_index());
        }
        let index = ctx.allocate_index(id);
        let ephemeral = Zeroizing::new(ctx.rng.bytes32());
        let mut message = vec![0u8; HANDSHAKE_INITIATION_LEN];
        let Some(out) = message.first_chunk_mut::<HANDSHAKE_INITIATION_LEN>() else {
            return;
        };
        let timestamp = ctx.timestamp(now).later_than(self.last_timestamp_sent);
        let created = match ctx.identity.as_ref() {
            Some(identity) => handshake::create_initiation(
                identity,
                &self.remote,
                index,
                *ephemeral,
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
        self.last_initiation_sent = Some(now);
        self.last_timestamp_sent = timestamp;
        self.resent_for_cookie = false;
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        let jitter = ctx.jitter();
        self.timers.handshake_initiated(now, jitter, &ctx.timing);
        ctx.events.push_back(Event::HandshakeInitiated {
            peer: id,
            endpoint: self.endpoint.map(|endpoint| endpoint.remote),
            at: now,
        });
        self.initiation = Some(InFlight {
            state,
            message: message.clone(),
            sent_at: now,
        });
        self.send_initiation(ctx, destinations, message);
    }

    /// A copy of our initiation `message` to each of `destinations`.
    fn send_initiation<E: Into<Endpoint> + Copy>(
        &mut self,
        ctx: &mut Context,
        destinations: &[E],
        message: Vec<u8>,
    ) {
        let Some((&last, others)) = destinations.split_last() else {
            return;
        };
        // The peer's own address keeps the local address it reached us at.
        let known = self.endpoint;
        let from_where_known = |destination: E| {
            let destination = destination.into();
            match known {
                Some(known) if known.remote == destination.remote => known,
                _ => destination,
            }
        };
        for &destination in others {
            self.stats.tx_bytes += message.len() as u64;
            ctx.send(from_where_known(destination), message.clone());
        }
        self.stats.tx_bytes += message.len() as u64;
        ctx.send(from_where_known(last), message);
    }

    /// Answers a decrypted initiation from this peer.
    pub fn respond(
        &mut self,
        id: PeerId,
        now: Instant,
        from: Endpoint,
        received: ReceivedInitiation,
        ctx: &mut Context,
    ) -> Received {
        if self
            .greatest_timestamp
            .is_some_and(|greatest| received.timestamp <= greatest)
        {
            ctx.drop(DropReason::ReplayedInitiation);
            self.answer_stale_initiation(id, now, ctx);
            return Received::Dropped(DropReason::ReplayedInitiation);
        }
        if self.last_initiation_consumed.is_some_and(|last| {
            now.saturating_duration_since(last) < ctx.timing.handshake_initiation_rate
        }) {
            ctx.drop(DropReason::InitiationFlood);
            return Received::Dropped(DropReason::InitiationFlood);
        }
        let timestamp = received.timestamp;
        let peer_marked = timestamp.has_fjord_mark() && ctx.speaks_fjord;
        let index = ctx.allocate_index(id);
        let ephemeral = Zeroizing::new(ctx.rng.bytes32());
        let mut message = vec![0u8; HANDSHAKE_RESPONSE_LEN];
        let Some(out) = message.first_chunk_mut::<HANDSHAKE_RESPONSE_LEN>() else {
            return Received::Control;
        };
        let keys = match handshake::create_response(&self.remote, received, index, *ephemeral, out)
        {
            Ok(keys) => keys,
            Err(_) => {
                ctx.release_index(index);
                ctx.drop(DropReason::HandshakeFailed);
                return Received::Dropped(DropReason::HandshakeFailed);
            }
        };
        self.greatest_timestamp = Some(timestamp);
        self.last_initiation_consumed = Some(now);
        self.last_received = Some(now);
        self.stats.rx_bytes += HANDSHAKE_INITIATION_LEN as u64;
        self.set_endpoint(id, from, ctx);
        self.cookie
            .write_macs(now, &mut message, MacLayout::RESPONSE);
        self.install_responder_session(&keys, now, ctx, peer_marked);
        self.timers.session_derived(now, &ctx.timing);
        // A response counts as an initiation for rate limiting, so we do not
        // start a competing handshake while the initiator confirms ours.
        self.last_initiation_sent = Some(now);
        self.timers.any_authenticated_packet_received();
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        self.stats.tx_bytes += message.len() as u64;
        ctx.send(from, message);
        Received::Control
    }

    /// An authentic initiation whose timestamp is not newer than one
    /// accepted before is a replay, or the peer itself after its clock
    /// went back (restarted on a clock that stepped, or without a
    /// real-time clock). Its initiations stay refused until its clock
    /// passes ours, but ours to it are not: so when the peer has been
    /// silent for REKEY_TIMEOUT (a live session would have spoken), we
    /// start a handshake toward where we know it is, at most one per
    /// REKEY_TIMEOUT as always. A replayer can so cause one handshake per
    /// REKEY_TIMEOUT with a silent peer, never move the endpoint, and
    /// never make us send to it.
    fn answer_stale_initiation(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        let silent = self
            .last_received
            .is_none_or(|last| now.saturating_duration_since(last) >= ctx.timing.rekey_timeout);
        if silent && self.endpoint.is_some() {
            self.initiate(id, now, ctx, false);
        }
    }

    /// Finishes our handshake with the peer's response.
    pub fn handle_response(
        &mut self,
        id: PeerId,
        now: Instant,
        from: Endpoint,
        response: &HandshakeResponse<'_>,
        ctx: &mut Context,
    ) -> Received {
        let Some(state) = self
            .initiation
            .as_ref()
            .map(|sent| &sent.state)
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
        self.last_received = Some(now);
        self.stats.rx_bytes += response.bytes().len() as u64;
        self.set_endpoint(id, from, ctx);
        self.install_initiator_session(&keys, now, ctx);
        self.timers.session_derived(now, &ctx.timing);
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

    /// Keeps the cookie of a reply to our last handshake message. A reply
    /// to the initiation in flight means the responder is under load and
    /// dropped it unread, so no response will come: the initiation goes
    /// again at once, now with mac2, instead of at the retransmission
    /// timeout (under a flood that wait is the whole outage). Once per
    /// attempt, so replies cannot drive our initiations at their pace; a
    /// WireGuard responder sees nothing new, only the retry it would have
    /// got five seconds later.
    pub fn handle_cookie_reply(
        &mut self,
        id: PeerId,
        now: Instant,
        reply: &CookieReply<'_>,
        ctx: &mut Context,
    ) -> Received {
        if self.cookie.consume_reply(now, reply).is_err() {
            ctx.drop(DropReason::UnexpectedHandshakeMessage);
            return Received::Dropped(DropReason::UnexpectedHandshakeMessage);
        }
        let answers_initiation = self
            .initiation
            .as_ref()
            .is_some_and(|sent| sent.state.local_index() == reply.receiver_index());
        if answers_initiation && !self.resent_for_cookie {
            self.last_initiation_sent = None;
            self.initiate(id, now, ctx, true);
            self.resent_for_cookie = true;
        }
        Received::Control
    }

    pub(super) fn handshake_complete(
        &mut self,
        id: PeerId,
        now: Instant,
        ctx: &mut Context,
        initiator: bool,
    ) {
        self.timers.handshake_complete();
        self.sent_last_minute_handshake = false;
        self.stats.last_handshake = Some(ctx.wall_clock.since_epoch(now));
        self.stats.handshakes_completed += 1;
        ctx.events.push_back(Event::HandshakeCompleted {
            peer: id,
            initiator,
        });
    }

    /// Our handshake completed: its session sends from now on, and the
    /// one it replaces still receives what is in flight. A `next` (the
    /// other side's handshake, crossing ours) stays where it is until data
    /// arrives on it (see the module documentation).
    fn install_initiator_session(&mut self, keys: &SessionKeys, now: Instant, ctx: &mut Context) {
        let session = Session::new(keys, now, &ctx.timing, ctx.cipher_policy, false)
            .with_compression(ctx.compression_policy);
        self.crossing = if self.next.is_some() {
            Crossing::Pending
        } else {
            Crossing::None
        };
        release(&mut self.previous, ctx);
        self.previous = self.current.take();
        self.current = Some(session);
    }

    /// `peer_marked`: the initiation said it came from fjord, so the
    /// session will offer once confirmed (`crate::negotiation`).
    fn install_responder_session(
        &mut self,
        keys: &SessionKeys,
        now: Instant,
        ctx: &mut Context,
        peer_marked: bool,
    ) {
        self.crossing = Crossing::None;
        release(&mut self.next, ctx);
        release(&mut self.previous, ctx);
        let session = Session::new(keys, now, &ctx.timing, ctx.cipher_policy, peer_marked)
            .with_compression(ctx.compression_policy);
        self.next = Some(session);
    }

    pub(super) fn set_endpoint(&mut self, id: PeerId, from: Endpoint, ctx: &mut Context) {
        let known = self.endpoint.replace(from);
        if known.is_none_or(|known| known.remote != from.remote) {
            ctx.events.push_back(Event::EndpointChanged {
                peer: id,
                endpoint: from.remote,
            });
        } else if known.is_some_and(|known| known.local != from.local) && from.local.is_some() {
            ctx.events
                .push_back(Event::LocalAddressChanged { peer: id });
        }
    }
}
