//! The data half of a peer: transport data in two phases.
//!
//! ```text
//! outbound:  prepare_encapsulate (session, compression in place where
//!            the session agreed on it, counter, header, padding, timers)
//!            ─  with_sending_key  ─  PendingSeal::seal (at once, or
//!            detached for another thread)  ─  send
//! inbound:   prepare_decapsulate (session, replay check)  ─
//!            PendingData::open (at once, or detached for another thread)
//!            ─  finish_decapsulate (replay commit, session rotation,
//!            endpoint, timers, inner packet — decompressed into the
//!            caller's buffer if it came compressed —, our session offer
//!            when due)
//! ```
//!
//! A driver with one thread runs the middle step at once, borrowing the
//! session's key; one with several detaches the middle steps of a batch
//! (each then holds its own reference to the key), runs them on other
//! threads, then finishes the batch in arrival order. Either way it is the
//! same code.

use std::time::Instant;

use super::{Crossing, MAX_STAGED_PACKETS, Peer, PeerStats};
use crate::aead::DataCipher;
use crate::compression::{Codec, Compressed, Compressor, DecompressError};
use crate::context::Context;
use crate::endpoint::Endpoint;
use crate::extension::{EXTENSION_MARKER, Recipient};
use crate::ip::IpHeader;
use crate::negotiation::{CipherRefused, Offer, OfferOutcome};
use crate::outcome::{DropReason, Incoming, Opened, Outgoing, PeerId, PendingData, Received, Sent};
use crate::replay::ReplayError;
use crate::session::{DATA_HEADROOM, DATA_TAILROOM, OpenError, SealError, SealTicket, Session};

/// A TUN packet after the peer's work on it, before the key is attached:
/// the peer changes its own state (timers, perhaps a rekey) after taking
/// the counter, and the key, a borrow of the session, can only be taken
/// once that is over ([`Peer::with_sending_key`]).
///
/// It carries no endpoint: [`Peer::with_sending_key`] reads the peer's,
/// which nothing in between changes. Copying the address through here
/// cost a stalled load per packet (the 16-byte read of an address just
/// written field by field cannot be forwarded from the store buffer):
/// half of the node's own send-path samples at 64 bytes.
pub(crate) enum Encapsulated {
    Sealing { len: usize, ticket: SealTicket },
    Done(Sent),
}

/// Which of a peer's sessions a data message arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Slot {
    Current,
    Next,
    Previous,
}

impl Peer {
    /// Everything sending the packet at `buf[DATA_HEADROOM..][..payload_len]`
    /// needs but the encryption, which the caller runs next with the key
    /// [`Peer::with_sending_key`] attaches (see [`Outgoing`]).
    pub fn prepare_encapsulate(
        &mut self,
        id: PeerId,
        now: Instant,
        buf: &mut [u8],
        payload_len: usize,
        ctx: &mut Context,
    ) -> Encapsulated {
        if self.endpoint.is_none() {
            return Encapsulated::Done(dropped_sent(ctx, DropReason::NoEndpoint));
        }
        // A length past the end of `buf` is the caller's mistake; refusing it
        // here keeps the staging copy and the padding arithmetic below from
        // overflowing (a panic in debug builds).
        if payload_len > buf.len().saturating_sub(DATA_HEADROOM) {
            return Encapsulated::Done(dropped_sent(ctx, DropReason::BufferTooSmall));
        }
        let mtu = ctx.mtu;
        let session = match self.current.as_mut() {
            Some(session) if session.can_send(now) => session,
            _ => {
                let payload = buf[DATA_HEADROOM..DATA_HEADROOM + payload_len].to_vec();
                self.stage(payload, ctx);
                self.initiate(id, now, ctx, false);
                return Encapsulated::Done(Sent::Staged);
            }
        };
        // One branch for a session that does not compress.
        let payload_len = match session.negotiation().sending_codec() {
            Some(codec) => compress(
                ctx.compressor.as_deref_mut(),
                &mut self.stats,
                buf,
                payload_len,
                mtu,
                codec,
            ),
            None => payload_len,
        };
        let (len, ticket) = match session.take_counter(buf, payload_len, mtu) {
            Ok(prepared) => prepared,
            Err(error) => {
                let reason = match error {
                    SealError::BufferTooSmall => DropReason::BufferTooSmall,
                    SealError::CounterExhausted => DropReason::CounterExhausted,
                };
                return Encapsulated::Done(dropped_sent(ctx, reason));
            }
        };
        let wants_rekey = session.wants_rekey_after_send(now);
        self.after_send(now, payload_len > 0, len, ctx);
        if wants_rekey {
            self.initiate(id, now, ctx, false);
        }
        Encapsulated::Sealing { len, ticket }
    }

    /// Attaches the key of the session that took the counter: a borrow of
    /// the peer, so it comes after every change to the peer.
    pub fn with_sending_key(&self, prepared: Encapsulated, ctx: &mut Context) -> Outgoing<'_> {
        match prepared {
            Encapsulated::Done(sent) => Outgoing::Done(sent),
            Encapsulated::Sealing { len, ticket } => match (&self.current, &self.endpoint) {
                (Some(session), Some(endpoint)) => Outgoing::Ready {
                    len,
                    destination: endpoint.remote,
                    source: endpoint.local,
                    seal: ticket.with_key(session),
                },
                // Cannot happen: the ticket came from the current session
                // and was only taken with an endpoint; only a handshake
                // message replaces either, never the send path between
                // taking the counter and this.
                _ => Outgoing::Done(dropped_sent(ctx, DropReason::ExpiredSession)),
            },
        }
    }

    fn after_send(&mut self, now: Instant, is_data: bool, len: usize, ctx: &mut Context) {
        self.stats.tx_bytes += len as u64;
        self.stats.tx_datagrams += 1;
        self.timers.any_authenticated_packet_traversal(now);
        self.timers.any_authenticated_packet_sent();
        if is_data && !self.timers.new_handshake_pending() {
            let jitter = ctx.jitter();
            self.timers.data_sent(now, jitter, &ctx.timing);
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
        let prepared = self.prepare_encapsulate(id, now, &mut buf, payload.len(), ctx);
        if let Outgoing::Ready {
            len,
            destination,
            source,
            seal,
        } = self.with_sending_key(prepared, ctx)
        {
            // Cannot fail: the buffer was sized for header, padding and tag.
            if seal.seal(&mut buf).is_ok() {
                buf.truncate(len);
                ctx.send(Endpoint::new(destination, source), buf);
            }
        }
    }

    pub fn send_keepalive(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        self.send_owned(id, now, &[], ctx);
    }

    /// Seals a fjord extension payload (or stages it and starts a
    /// handshake when no session is up).
    pub fn send_extension(&mut self, id: PeerId, now: Instant, payload: &[u8], ctx: &mut Context) {
        self.send_owned(id, now, payload, ctx);
    }

    #[inline(never)]
    pub(super) fn send_staged(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        while self.current.as_ref().is_some_and(|s| s.can_send(now)) {
            let Some(packet) = self.staged.pop_front() else {
                break;
            };
            self.send_owned(id, now, &packet, ctx);
        }
    }

    /// Data arrived on `next`: the peer has the session, and it sends
    /// from now on, except after crossing handshakes (see the module
    /// documentation of `peer`): then both sides must send on the same
    /// one of the two, so that the session each keeps only to receive is
    /// one that neither sends on. Either way the oldest session goes.
    #[inline(never)]
    fn confirm_next(&mut self, now: Instant, ctx: &mut Context) {
        let Some(next) = self.next.take() else {
            return;
        };
        let crossed = std::mem::replace(&mut self.crossing, Crossing::None) == Crossing::Pending;
        let ours_wins = crossed && self.wins_crossing(&next, ctx);
        if crossed {
            self.crossing = if ours_wins {
                Crossing::Won { at: now }
            } else {
                Crossing::Yielded
            };
        }
        let oldest = if ours_wins {
            self.previous.replace(next)
        } else {
            let replaced = self.current.replace(next);
            std::mem::replace(&mut self.previous, replaced)
        };
        if let Some(oldest) = oldest {
            ctx.release_index(oldest.local_index());
        }
    }

    /// Data arrived on `previous`. Normally the last of what was in flight
    /// when `current` took over; after a crossing, proof (at once if we
    /// yielded, after REKEY_TIMEOUT if we won) that the peer sends on the
    /// other session of the two, so ours sends there too.
    #[inline(never)]
    fn follow_peer_after_crossing(&mut self, now: Instant, ctx: &Context) {
        let follow = match self.crossing {
            Crossing::Yielded => true,
            Crossing::Won { at } => now.saturating_duration_since(at) >= ctx.timing.rekey_timeout,
            Crossing::None | Crossing::Pending => false,
        };
        if follow {
            self.crossing = Crossing::None;
            std::mem::swap(&mut self.current, &mut self.previous);
        }
    }

    /// Whether our session wins against the peer's, `theirs`, that crossed
    /// it. A plain WireGuard node (wireguard-go and the kernel alike) keeps
    /// sending on its own, so ours wins when we play one, and never
    /// against one. Between fjord nodes the two sides compare the same two
    /// public keys: the session begun by the greater key wins on both.
    /// That the peer speaks fjord is known alike on both sides: each
    /// side's `theirs` is marked only if both speak it.
    fn wins_crossing(&self, theirs: &Session, ctx: &Context) -> bool {
        if !ctx.speaks_fjord {
            return true;
        }
        theirs.negotiation().peer_speaks_fjord()
            && ctx
                .identity
                .as_ref()
                .is_some_and(|identity| identity.public_key() > self.remote.public_key())
    }

    fn session_by_index(&mut self, local_index: u32) -> Option<(&mut Session, Slot)> {
        let matches = |s: &&mut Session| s.local_index() == local_index;
        if let Some(s) = self.current.as_mut().filter(matches) {
            Some((s, Slot::Current))
        } else if let Some(s) = self.next.as_mut().filter(matches) {
            Some((s, Slot::Next))
        } else {
            self.previous
                .as_mut()
                .filter(matches)
                .map(|s| (s, Slot::Previous))
        }
    }

    /// The first phase of receiving a data message addressed to
    /// `local_index`: finds the session and checks the counter against its
    /// replay window. It changes nothing in the peer, so the decryption it
    /// returns can borrow the session's key.
    pub fn prepare_decapsulate(
        &self,
        id: PeerId,
        now: Instant,
        local_index: u32,
        counter: u64,
        cipher: DataCipher,
        ctx: &mut Context,
    ) -> Incoming<'_> {
        let matches = |session: &&Session| session.local_index() == local_index;
        let session = self
            .current
            .as_ref()
            .filter(matches)
            .or_else(|| self.next.as_ref().filter(matches))
            .or_else(|| self.previous.as_ref().filter(matches));
        let Some(session) = session else {
            return Incoming::Done(dropped(ctx, DropReason::UnknownReceiverIndex));
        };
        if !session.can_receive(now) {
            return Incoming::Done(dropped(ctx, DropReason::ExpiredSession));
        }
        match session.prepare_open(counter, cipher) {
            Ok(open) => Incoming::Data(PendingData {
                peer: id,
                local_index,
                open,
            }),
            Err(error) => Incoming::Done(dropped(ctx, open_drop_reason(error))),
        }
    }

    /// The last phase, once the decryption ran: records the counter,
    /// rotates sessions, updates endpoint, counters and timers, and checks
    /// the inner packet (decompressing it into `decompressed` if it came
    /// compressed).
    pub fn finish_decapsulate(
        &mut self,
        opened: Opened,
        now: Instant,
        from: Endpoint,
        datagram: &[u8],
        decompressed: &mut [u8],
        ctx: &mut Context,
    ) -> Received {
        if !opened.authenticated {
            return dropped(ctx, DropReason::AuthenticationFailed);
        }
        // The session may have gone since the first phase (a handshake
        // earlier in the same batch replaced it): then nobody holds its
        // replay window any more.
        let Some((session, slot)) = self.session_by_index(opened.local_index) else {
            return dropped(ctx, DropReason::UnknownReceiverIndex);
        };
        let plaintext = match session.commit_open(opened.counter, opened.cipher, datagram.len()) {
            Ok(plaintext) => plaintext,
            Err(error) => return dropped(ctx, open_drop_reason(error)),
        };
        let rekey_before_expiry = session.wants_rekey_after_receive(now);
        let id = opened.peer;
        // Before the staged packets below leave, so they go where (and from
        // where) this authenticated datagram says.
        self.set_endpoint(id, from, ctx);
        match slot {
            Slot::Current => {}
            Slot::Next => {
                self.confirm_next(now, ctx);
                self.handshake_complete(id, now, ctx, false);
                self.send_staged(id, now, ctx);
            }
            Slot::Previous => self.follow_peer_after_crossing(now, ctx),
        }
        self.last_received = Some(now);
        self.stats.rx_bytes += datagram.len() as u64;
        self.stats.rx_datagrams += 1;
        self.timers.any_authenticated_packet_received();
        self.timers.any_authenticated_packet_traversal(now);
        if rekey_before_expiry && !self.sent_last_minute_handshake {
            self.sent_last_minute_handshake = true;
            self.initiate(id, now, ctx, false);
        }
        let received = self.inner_packet(
            id,
            now,
            opened.local_index,
            &datagram[plaintext.clone()],
            plaintext.start,
            decompressed,
            ctx,
        );
        self.offer_if_due(id, now, ctx);
        received
    }

    /// Sends our session offer when the current session's negotiation
    /// asks for it. Two flag checks for a session that is done
    /// negotiating, or whose peer is plain WireGuard.
    fn offer_if_due(&mut self, id: PeerId, now: Instant, ctx: &mut Context) {
        let due = self
            .current
            .as_ref()
            .and_then(|session| session.negotiation().offer_due(now));
        if let Some(offer) = due {
            self.send_offer(id, now, offer, ctx);
        }
    }

    /// Seals `offer` on the current session (never staged: an offer
    /// belongs to the session it describes).
    #[inline(never)]
    fn send_offer(&mut self, id: PeerId, now: Instant, offer: Offer, ctx: &mut Context) {
        if !self.can_send(now) {
            return;
        }
        self.send_owned(id, now, &offer.encode(), ctx);
        if let Some(current) = self.current.as_mut() {
            current.offer_sent(now);
        }
    }

    /// A session offer arrived on the session `local_index`.
    #[inline(never)]
    fn handle_offer(
        &mut self,
        id: PeerId,
        now: Instant,
        local_index: u32,
        plaintext: &[u8],
        ctx: &mut Context,
    ) -> Received {
        let Ok(offer) = Offer::decode(plaintext) else {
            return dropped(ctx, DropReason::InvalidInnerPacket);
        };
        let Some((session, _)) = self.session_by_index(local_index) else {
            return dropped(ctx, DropReason::UnknownReceiverIndex);
        };
        let outcome = session.handle_offer(offer);
        let on_current = self
            .current
            .as_ref()
            .is_some_and(|current| current.local_index() == local_index);
        if outcome == OfferOutcome::Answer && on_current {
            let ours = self
                .current
                .as_ref()
                .map(|current| current.negotiation().our_offer());
            if let Some(ours) = ours {
                self.send_offer(id, now, ours, ctx);
            }
        }
        Received::Control
    }

    /// What an authenticated (padded) plaintext, which lies at `offset`
    /// in its datagram, carries: nothing (a keepalive), a fjord extension
    /// payload, or one IP packet, trimmed of its padding — decompressed
    /// into `decompressed` if it came compressed.
    // Its arguments stay apart: passing the session's identity as one
    // value (the `Opened`, or a struct of peer, time and index) counted 4
    // to 8 more instructions per received packet (count-instructions.sh).
    #[allow(clippy::too_many_arguments)]
    fn inner_packet(
        &mut self,
        id: PeerId,
        now: Instant,
        local_index: u32,
        plaintext: &[u8],
        offset: usize,
        decompressed: &mut [u8],
        ctx: &mut Context,
    ) -> Received {
        let Some(&first) = plaintext.first() else {
            return Received::Keepalive { peer: id };
        };
        if first == EXTENSION_MARKER {
            if !ctx.speaks_fjord {
                return dropped(ctx, DropReason::InvalidInnerPacket);
            }
            // The one place a received kind is classified
            // (`crate::extension`); the recipient travels with it.
            return match Recipient::of_code(plaintext.get(1).copied()) {
                Recipient::Protocol => self.handle_offer(id, now, local_index, plaintext, ctx),
                recipient => Received::Extension {
                    peer: id,
                    recipient,
                    payload: offset..offset + plaintext.len(),
                },
            };
        }
        if let Some(codec) = Codec::of(plaintext) {
            return self.decompress(id, now, local_index, codec, plaintext, decompressed, ctx);
        }
        let header = match IpHeader::parse(plaintext) {
            Ok(header) => header,
            Err(_) => return dropped(ctx, DropReason::InvalidInnerPacket),
        };
        self.timers.data_received(now, &ctx.timing);
        Received::Data {
            peer: id,
            packet: offset..offset + header.total_len,
            source: header.source,
            destination: header.destination,
        }
    }

    /// A compressed packet, authenticated, on the session `local_index`:
    /// decompressed into `out` (at most the MTU) if we offered its codec
    /// in that session.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn decompress(
        &mut self,
        id: PeerId,
        now: Instant,
        local_index: u32,
        codec: Codec,
        plaintext: &[u8],
        out: &mut [u8],
        ctx: &mut Context,
    ) -> Received {
        let accepted = self
            .session_by_index(local_index)
            .is_some_and(|(session, _)| session.negotiation().accepts_compressed(codec));
        let Some(compressor) = ctx.compressor.as_deref_mut().filter(|_| accepted) else {
            return dropped(ctx, DropReason::CompressionNotNegotiated);
        };
        let len = match compressor.decompress(plaintext, out, ctx.mtu) {
            Ok(len) => len,
            // Within the MTU but not the caller's buffer: the driver's
            // mistake, not the peer's.
            Err(DecompressError::TooLong { original, .. }) if original <= ctx.mtu => {
                return dropped(ctx, DropReason::BufferTooSmall);
            }
            Err(_) => return dropped(ctx, DropReason::DecompressionFailed),
        };
        let header = match IpHeader::parse(&out[..len]) {
            Ok(header) => header,
            Err(_) => return dropped(ctx, DropReason::InvalidInnerPacket),
        };
        self.stats.decompressed_packets += 1;
        self.timers.data_received(now, &ctx.timing);
        Received::Decompressed {
            peer: id,
            packet: 0..header.total_len,
            source: header.source,
            destination: header.destination,
        }
    }
}

/// The length of the payload at `buf[DATA_HEADROOM..]` after compressing
/// it in place where that pays, counting IP packets sent compressed and
/// raw.
fn compress(
    compressor: Option<&mut Compressor>,
    stats: &mut PeerStats,
    buf: &mut [u8],
    payload_len: usize,
    mtu: usize,
    codec: Codec,
) -> usize {
    // The compressor exists whenever the policy offers compression, which
    // a session that compresses was made under.
    let Some(compressor) = compressor else {
        return payload_len;
    };
    match compressor.compress_in_place(&mut buf[DATA_HEADROOM..], payload_len, mtu, codec) {
        Compressed::Yes(len) => {
            stats.compressed_packets += 1;
            len
        }
        Compressed::Raw => {
            stats.uncompressed_packets += 1;
            payload_len
        }
        Compressed::NotData => payload_len,
    }
}

/// Counts `reason` and says so: a received datagram's end when it is refused.
pub(crate) fn dropped(ctx: &mut Context, reason: DropReason) -> Received {
    ctx.drop(reason);
    Received::Dropped(reason)
}

fn dropped_sent(ctx: &mut Context, reason: DropReason) -> Sent {
    ctx.drop(reason);
    Sent::Dropped(reason)
}

fn open_drop_reason(error: OpenError) -> DropReason {
    match error {
        OpenError::AuthenticationFailed => DropReason::AuthenticationFailed,
        OpenError::Replay(ReplayError::Replayed) => DropReason::ReplayedCounter,
        OpenError::Replay(ReplayError::TooOld) => DropReason::CounterTooOld,
        OpenError::Replay(ReplayError::LimitReached) => DropReason::CounterExhausted,
        OpenError::Cipher(CipherRefused::NotNegotiated) => DropReason::CipherNotNegotiated,
        OpenError::Cipher(CipherRefused::Downgraded) => DropReason::CipherDowngraded,
    }
}
