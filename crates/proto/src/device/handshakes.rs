//! The device's handshake messages, checked in the order that costs an
//! attacker the most: length, mac1, under load mac2 (a cookie reply
//! instead of work), and only then the Diffie–Hellman work; an
//! initiation from a key nobody configured goes to the provisional-peer
//! hook (mesh members not yet known).

use std::time::Instant;

use crate::cookie::{Answering, MacLayout};
use crate::endpoint::Endpoint;
use crate::handshake;
use crate::keys::{PresharedKey, PublicKey};
use crate::outcome::{DropReason, Event, Received};
use crate::wire::{COOKIE_REPLY_LEN, HandshakeInitiation, HandshakeResponse};

use super::{Device, PeerConfig};

impl Device {
    /// Checks mac1 and, under load, mac2; answers with a cookie reply when
    /// mac2 is missing and the reply budget allows (under_load.rs).
    /// `Ok` when the message may be processed.
    fn admit_handshake(
        &mut self,
        now: Instant,
        from: Endpoint,
        message: &[u8],
        layout: MacLayout,
    ) -> Result<(), DropReason> {
        let Some(cookie_checker) = self.cookie_checker.as_mut() else {
            return Err(DropReason::NoPrivateKey);
        };
        if !cookie_checker.check_mac1(message, layout) {
            return Err(DropReason::InvalidMac1);
        }
        let under_load = self.load.record(now);
        if !under_load || cookie_checker.check_mac2(now, message, layout, &from.remote) {
            return Ok(());
        }
        let peers = &self.peers;
        let answer = self.cookie_replies.allow(now, from.remote.ip(), || {
            peers
                .iter()
                .flatten()
                .filter_map(|peer| Some(peer.endpoint?.remote.ip()))
        });
        if !answer {
            self.handshakes.cookie_replies_withheld += 1;
            return Err(DropReason::CookieRequired);
        }
        let mut reply = vec![0u8; COOKIE_REPLY_LEN];
        let mut nonce = [0u8; 24];
        self.ctx.rng.fill_bytes(&mut nonce);
        let rng = &mut self.ctx.rng;
        if let Some(out) = reply.first_chunk_mut::<COOKIE_REPLY_LEN>() {
            cookie_checker.create_reply(
                now,
                || rng.bytes32(),
                nonce,
                Answering {
                    message,
                    layout,
                    source: &from.remote,
                },
                out,
            );
            self.ctx.send(from, reply);
            self.handshakes.cookie_replies += 1;
        }
        Err(DropReason::CookieRequired)
    }

    pub(super) fn handle_initiation(
        &mut self,
        now: Instant,
        from: Endpoint,
        view: &HandshakeInitiation<'_>,
    ) -> Received {
        if let Err(reason) = self.admit_handshake(now, from, view.bytes(), MacLayout::INITIATION) {
            return self.dropped(reason);
        }
        self.handshakes.initiations_computed += 1;
        let unknown = std::cell::Cell::new(None);
        let received = {
            let peers = &self.peers;
            let peer_ids = &self.peer_ids;
            let lookup = |key: &PublicKey| {
                let found = peer_ids
                    .get(key)
                    .and_then(|id| peers.get(id.index())?.as_ref())
                    .map(|peer| &peer.remote);
                if found.is_none() {
                    unknown.set(Some(*key));
                }
                found
            };
            let Some(identity) = self.ctx.identity.as_ref() else {
                return self.dropped(DropReason::NoPrivateKey);
            };
            handshake::consume_initiation(identity, view, lookup)
        };
        let received = match (received, unknown.get()) {
            (Ok(received), _) => received,
            (Err(handshake::HandshakeError::UnknownPeer), Some(key)) => {
                match self.admit_unknown_peer(from, key, view) {
                    Some(received) => received,
                    None => return self.dropped(DropReason::UnknownPeer),
                }
            }
            (Err(handshake::HandshakeError::UnknownPeer), None) => {
                return self.dropped(DropReason::UnknownPeer);
            }
            (Err(_), _) => return self.dropped(DropReason::HandshakeFailed),
        };
        let responded = self
            .peer_ids
            .get(&received.remote_public)
            .copied()
            .and_then(|id| {
                self.with_peer(id, |peer, ctx| peer.respond(id, now, from, received, ctx))
            });
        responded.unwrap_or_else(|| self.dropped(DropReason::UnknownPeer))
    }

    /// An initiation from an unconfigured key: within the limit, the key
    /// becomes a provisional peer and the initiation is read again with
    /// it (the second read repeats the Diffie–Hellman work, paid only
    /// once per newcomer, after mac1 and under-load cookies).
    fn admit_unknown_peer(
        &mut self,
        from: Endpoint,
        key: PublicKey,
        view: &HandshakeInitiation<'_>,
    ) -> Option<handshake::ReceivedInitiation> {
        let limit = self.unknown_peer_limit?;
        if self.provisional.len() >= limit {
            return None;
        }
        let id = self
            .add_peer(PeerConfig {
                public_key: key,
                preshared_key: PresharedKey::zero(),
                endpoint: Some(from.remote),
                persistent_keepalive: None,
            })
            .ok()?;
        let identity = self.ctx.identity.as_ref()?;
        let remote = self.peer(id).map(|peer| &peer.remote);
        match handshake::consume_initiation(identity, view, |_| remote) {
            Ok(received) => {
                self.provisional.insert(id);
                self.ctx.events.push_back(Event::UnknownPeerAdmitted {
                    peer: id,
                    public_key: key,
                });
                Some(received)
            }
            Err(_) => {
                self.remove_peer(id);
                None
            }
        }
    }

    pub(super) fn handle_response(
        &mut self,
        now: Instant,
        from: Endpoint,
        view: &HandshakeResponse<'_>,
    ) -> Received {
        if let Err(reason) = self.admit_handshake(now, from, view.bytes(), MacLayout::RESPONSE) {
            return self.dropped(reason);
        }
        let handled = self
            .ctx
            .indices
            .get(&view.receiver_index())
            .copied()
            .and_then(|id| {
                self.with_peer(id, |peer, ctx| {
                    peer.handle_response(id, now, from, view, ctx)
                })
            });
        handled.unwrap_or_else(|| self.dropped(DropReason::UnexpectedHandshakeMessage))
    }
}
