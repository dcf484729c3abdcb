//! [`Device`]: a WireGuard interface's protocol state for any number of
//! peers, with no I/O. The driver owns sockets, the TUN device and the clock.
//!
//! # Call order
//!
//! ```text
//! loop {
//!     wait for: a datagram, a TUN packet, or poll_timeout()
//!     datagram   -> handle_datagram(now, from, &mut buf) -> Received
//!                   (Data: write buf[packet] to the TUN device, after the
//!                    caller's allowed-IPs check of its source)
//!     TUN packet -> encapsulate(now, peer, &mut buf, len) -> Sent
//!                   (Sealed: send buf[..len] to destination)
//!     deadline   -> handle_timeout(now)
//!     then drain poll_transmit(&mut buf) (handshakes, keepalives, staged
//!     packets) and poll_event() (for logs)
//! }
//! ```
//!
//! A driver that spreads encryption over threads splits the two data
//! calls in halves: `receive_datagram` → [`PendingData::open`] (any thread)
//! → `finish_data` (in arrival order), and `prepare_encapsulate` →
//! [`crate::PendingSeal::seal`] (any thread) → send.
//!
//! Buffers belong to the caller. A TUN packet sits at
//! `buf[DATA_HEADROOM..]` with [`DATA_TAILROOM`] spare bytes behind it, and
//! is sealed in place; a data datagram is opened in place.
//!
//! Handshake messages are checked in the order that costs an attacker the
//! most: length, mac1 (cheap, proves knowledge of our public key), then —
//! only when under load — mac2 (answered by a cookie reply), and only then
//! the Diffie–Hellman work.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::context::{Context, JitterSource, Rng, WallClock};
use crate::cookie::{CookieChecker, MacLayout};
use crate::handshake::{self, RemoteKeys, StaticIdentity};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::outcome::{
    DropCounters, DropReason, Event, Incoming, Outgoing, PeerId, PendingData, Received, Sent,
    Transmit,
};
use crate::peer::{Peer, PeerStats};
use crate::wire::{COOKIE_REPLY_LEN, HandshakeInitiation, HandshakeResponse, Message, ParseError};

pub use crate::session::{DATA_HEADROOM, DATA_TAILROOM};

/// Handshake messages per second above which mac2 (a cookie) is required.
pub const UNDER_LOAD_HANDSHAKES_PER_SECOND: u32 = 512;

/// Settings of one interface.
pub struct DeviceConfig {
    /// `None` leaves the interface unable to handshake until
    /// [`Device::set_private_key`] (as a freshly created `wg` interface).
    pub private_key: Option<PrivateKey>,
    /// MTU of the tunnel interface; padding never grows a packet past it.
    pub mtu: usize,
}

/// Settings of one peer.
#[derive(Debug, Clone)]
pub struct PeerConfig {
    pub public_key: PublicKey,
    pub preshared_key: PresharedKey,
    pub endpoint: Option<SocketAddr>,
    pub persistent_keepalive: Option<Duration>,
}

/// What `fjord show` reports about a peer.
#[derive(Debug, Clone)]
pub struct PeerStatus {
    pub public_key: PublicKey,
    pub has_preshared_key: bool,
    pub endpoint: Option<SocketAddr>,
    pub persistent_keepalive: Option<Duration>,
    pub stats: PeerStats,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("peer {0} is already configured")]
    DuplicatePeer(PublicKey),
    #[error("a peer cannot have the interface's own public key")]
    OwnKey,
}

/// Counts handshake messages per second to decide when to demand cookies.
#[derive(Debug, Default)]
struct LoadMeter {
    window_start: Option<Instant>,
    in_window: u32,
    previous_window: u32,
    forced: bool,
}

impl LoadMeter {
    fn record(&mut self, now: Instant) -> bool {
        match self.window_start {
            Some(start) if now.saturating_duration_since(start) < Duration::from_secs(1) => {}
            start => {
                // Only the window that just ended speaks for the current
                // load: a burst from long ago must not demand cookies now.
                let just_ended = start.is_some_and(|start| {
                    now.saturating_duration_since(start) < Duration::from_secs(2)
                });
                self.previous_window = if just_ended { self.in_window } else { 0 };
                self.in_window = 0;
                self.window_start = Some(now);
            }
        }
        self.in_window = self.in_window.saturating_add(1);
        self.forced || self.in_window.max(self.previous_window) > UNDER_LOAD_HANDSHAKES_PER_SECOND
    }
}

pub struct Device {
    ctx: Context,
    /// Checks MACs of handshakes addressed to our public key; `None`
    /// without a private key.
    cookie_checker: Option<CookieChecker>,
    peers: Vec<Option<Peer>>,
    peer_ids: HashMap<PublicKey, PeerId>,
    load: LoadMeter,
}

impl Device {
    /// A device with no peers. `wall_clock` pins the caller's `Instant`s to
    /// real time for TAI64N stamps; `rng` must be cryptographically secure.
    pub fn new(config: DeviceConfig, rng: Box<dyn Rng + Send>, wall_clock: WallClock) -> Self {
        let identity = config.private_key.map(StaticIdentity::new);
        let cookie_checker = identity
            .as_ref()
            .map(|i| CookieChecker::new(i.public_key()));
        let mut rng = rng;
        let jitter_state = JitterSource::seeded(rng.as_mut());
        Self {
            ctx: Context {
                identity,
                rng,
                jitter_state,
                indices: HashMap::new(),
                transmits: VecDeque::new(),
                events: VecDeque::new(),
                drops: DropCounters::default(),
                wall_clock,
                mtu: config.mtu,
            },
            cookie_checker,
            peers: Vec::new(),
            peer_ids: HashMap::new(),
            load: LoadMeter::default(),
        }
    }

    pub fn public_key(&self) -> Option<&PublicKey> {
        self.ctx.identity.as_ref().map(StaticIdentity::public_key)
    }

    pub fn private_key(&self) -> Option<&PrivateKey> {
        self.ctx.identity.as_ref().map(StaticIdentity::private_key)
    }

    /// Replaces (or removes) our private key. Every session and handshake
    /// in flight ends, since they were bound to the old key; a peer whose
    /// public key is the new own key is removed, as wireguard-go does.
    pub fn set_private_key(&mut self, private_key: Option<PrivateKey>) {
        let identity = private_key.map(StaticIdentity::new);
        if let Some(own) = identity.as_ref().map(|i| *i.public_key())
            && let Some(id) = self.peer_id(&own)
        {
            self.remove_peer(id);
        }
        self.cookie_checker = identity
            .as_ref()
            .map(|i| CookieChecker::new(i.public_key()));
        self.ctx.identity = identity;
        for peer in self.peers.iter_mut().flatten() {
            peer.remote.rekey(self.ctx.identity.as_ref());
            peer.erase_keys(&mut self.ctx);
        }
    }

    /// Changes a peer's preshared key; takes effect at the next handshake.
    pub fn set_peer_preshared_key(&mut self, id: PeerId, preshared_key: PresharedKey) {
        if let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            peer.remote.set_preshared_key(preshared_key);
        }
    }

    pub fn mtu(&self) -> usize {
        self.ctx.mtu
    }

    pub fn set_mtu(&mut self, mtu: usize) {
        self.ctx.mtu = mtu;
    }

    pub fn add_peer(&mut self, config: PeerConfig) -> Result<PeerId, DeviceError> {
        if self.peer_ids.contains_key(&config.public_key) {
            return Err(DeviceError::DuplicatePeer(config.public_key));
        }
        if Some(&config.public_key) == self.public_key() {
            return Err(DeviceError::OwnKey);
        }
        let remote = RemoteKeys::new(
            self.ctx.identity.as_ref(),
            config.public_key,
            config.preshared_key,
        );
        let id = PeerId(u32::try_from(self.peers.len()).unwrap_or(u32::MAX));
        self.peers.push(Some(Peer::new(
            remote,
            config.endpoint,
            config.persistent_keepalive,
        )));
        self.peer_ids.insert(config.public_key, id);
        Ok(id)
    }

    /// Removes a peer, erasing its keys and releasing its indices.
    pub fn remove_peer(&mut self, id: PeerId) {
        if let Some(mut peer) = self.peers.get_mut(id.index()).and_then(Option::take) {
            peer.erase_keys(&mut self.ctx);
            self.peer_ids.remove(peer.remote.public_key());
        }
    }

    pub fn peer_id(&self, public_key: &PublicKey) -> Option<PeerId> {
        self.peer_ids.get(public_key).copied()
    }

    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, peer)| peer.is_some())
            .map(|(index, _)| PeerId(index as u32))
    }

    pub fn peer_status(&self, id: PeerId) -> Option<PeerStatus> {
        let peer = self.peer(id)?;
        Some(PeerStatus {
            public_key: *peer.remote.public_key(),
            has_preshared_key: !peer.remote.preshared_key().is_zero(),
            endpoint: peer.endpoint,
            persistent_keepalive: peer.timers.persistent_keepalive_interval(),
            stats: peer.stats.clone(),
        })
    }

    /// The peer's preshared key (all zeros when none is configured).
    pub fn peer_preshared_key(&self, id: PeerId) -> Option<&PresharedKey> {
        self.peer(id).map(|peer| peer.remote.preshared_key())
    }

    pub fn set_peer_endpoint(&mut self, id: PeerId, endpoint: SocketAddr) {
        if let Some(peer) = self.peer_mut(id) {
            peer.endpoint = Some(endpoint);
        }
    }

    pub fn set_peer_persistent_keepalive(
        &mut self,
        id: PeerId,
        now: Instant,
        interval: Option<Duration>,
    ) {
        let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) else {
            return;
        };
        peer.timers.set_persistent_keepalive_interval(now, interval);
    }

    /// Sends a keepalive now (starting a handshake first if there is no
    /// session), as wireguard-go does when a persistent keepalive is set.
    pub fn send_keepalive(&mut self, id: PeerId, now: Instant) {
        if let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            peer.send_keepalive(id, now, &mut self.ctx);
        }
    }

    /// Sends a keepalive to every peer with a current session, so that
    /// each learns our new address at once (after a listen-port change).
    pub fn keepalive_all_sessions(&mut self, now: Instant) {
        for (index, slot) in self.peers.iter_mut().enumerate() {
            if let Some(peer) = slot
                && peer.can_send(now)
            {
                peer.send_keepalive(PeerId(index as u32), now, &mut self.ctx);
            }
        }
    }

    /// Whether the peer has an established (or confirming) session.
    pub fn peer_has_session(&self, id: PeerId) -> bool {
        self.peer(id).is_some_and(Peer::has_session)
    }

    /// Starts a handshake now (rate-limited to one per REKEY_TIMEOUT), as a
    /// configured persistent keepalive or an eager interface does at start.
    pub fn initiate_handshake(&mut self, id: PeerId, now: Instant) {
        let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) else {
            return;
        };
        peer.initiate(id, now, &mut self.ctx, false);
    }

    fn peer(&self, id: PeerId) -> Option<&Peer> {
        self.peers.get(id.index()).and_then(Option::as_ref)
    }

    fn peer_mut(&mut self, id: PeerId) -> Option<&mut Peer> {
        self.peers.get_mut(id.index()).and_then(Option::as_mut)
    }

    pub fn drops(&self) -> &DropCounters {
        &self.ctx.drops
    }

    /// Forces the under-load behaviour (cookies for every handshake), for tests.
    #[doc(hidden)]
    pub fn force_under_load(&mut self, forced: bool) {
        self.load.forced = forced;
    }

    // ---- inputs ---------------------------------------------------------

    /// Handles one received datagram in place.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &mut [u8],
    ) -> Received {
        self.receive_with(
            now,
            from,
            datagram,
            std::convert::identity,
            |peer, id, local_index, counter, ctx, datagram| {
                peer.decapsulate(id, now, from, local_index, counter, datagram, ctx)
            },
        )
    }

    /// The first half of [`Device::handle_datagram`]: handles handshake
    /// messages whole, and leaves a data message's decryption to the caller
    /// (see [`Incoming`]). Only handshake messages are read from `datagram`
    /// and may be changed; a data message is left as it is.
    pub fn receive_datagram(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &mut [u8],
    ) -> Incoming {
        self.receive_with(
            now,
            from,
            datagram,
            Incoming::Done,
            |peer, id, local_index, counter, ctx, _| {
                peer.prepare_decapsulate(id, now, local_index, counter, ctx)
            },
        )
    }

    /// Handles handshake messages whole (their outcome goes through
    /// `done`); a data message goes to `data` with its peer, receiver index
    /// and counter.
    fn receive_with<T>(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &mut [u8],
        done: fn(Received) -> T,
        data: impl FnOnce(&mut Peer, PeerId, u32, u64, &mut Context, &mut [u8]) -> T,
    ) -> T {
        let (local_index, counter) = match Message::parse(datagram) {
            Ok(Message::TransportData(view)) => (view.receiver_index(), view.counter()),
            Ok(Message::HandshakeInitiation(view)) => {
                return done(self.handle_initiation(now, from, &view));
            }
            Ok(Message::HandshakeResponse(view)) => {
                return done(self.handle_response(now, from, &view));
            }
            Ok(Message::CookieReply(view)) => {
                let peer = self.ctx.indices.get(&view.receiver_index()).copied();
                return done(
                    match peer
                        .and_then(|id| self.peers.get_mut(id.index()).and_then(Option::as_mut))
                    {
                        Some(peer) => peer.handle_cookie_reply(now, &view, &mut self.ctx),
                        None => self.dropped(DropReason::UnexpectedHandshakeMessage),
                    },
                );
            }
            Err(ParseError::UnknownType(_)) => {
                return done(self.dropped(DropReason::UnknownMessageType));
            }
            Err(_) => return done(self.dropped(DropReason::MalformedMessage)),
        };
        let Some(id) = self.ctx.indices.get(&local_index).copied() else {
            return done(self.dropped(DropReason::UnknownReceiverIndex));
        };
        let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) else {
            return done(self.dropped(DropReason::UnknownReceiverIndex));
        };
        data(peer, id, local_index, counter, &mut self.ctx, datagram)
    }

    /// The second half of [`Device::handle_datagram`] for a data message
    /// whose decryption ran (`authenticated` is what [`PendingData::open`]
    /// returned). Call it in the order the datagrams arrived.
    pub fn finish_data(
        &mut self,
        now: Instant,
        from: SocketAddr,
        pending: &PendingData,
        authenticated: bool,
        datagram: &[u8],
    ) -> Received {
        match self
            .peers
            .get_mut(pending.peer.index())
            .and_then(Option::as_mut)
        {
            Some(peer) => {
                peer.finish_decapsulate(pending, now, from, authenticated, datagram, &mut self.ctx)
            }
            None => self.dropped(DropReason::UnknownReceiverIndex),
        }
    }

    /// Seals the TUN packet at `buf[DATA_HEADROOM..][..payload_len]` for `peer`.
    pub fn encapsulate(
        &mut self,
        now: Instant,
        id: PeerId,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Sent {
        match self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            Some(peer) => peer.encapsulate(id, now, buf, payload_len, &mut self.ctx),
            None => {
                self.ctx.drop(DropReason::NoEndpoint);
                Sent::Dropped(DropReason::NoEndpoint)
            }
        }
    }

    /// [`Device::encapsulate`] but the encryption, which the caller runs
    /// (see [`Outgoing`]), so that a batch can be encrypted on several threads.
    pub fn prepare_encapsulate(
        &mut self,
        now: Instant,
        id: PeerId,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Outgoing {
        match self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            Some(peer) => peer.prepare_encapsulate(id, now, buf, payload_len, &mut self.ctx),
            None => {
                self.ctx.drop(DropReason::NoEndpoint);
                Outgoing::Done(Sent::Dropped(DropReason::NoEndpoint))
            }
        }
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        for (index, slot) in self.peers.iter_mut().enumerate() {
            let Some(peer) = slot else { continue };
            if peer
                .timers
                .next_deadline()
                .is_some_and(|deadline| deadline <= now)
            {
                peer.handle_timers(PeerId(index as u32), now, &mut self.ctx);
            }
        }
    }

    /// When `handle_timeout` should next run.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.peers
            .iter()
            .flatten()
            .filter_map(|peer| peer.timers.next_deadline())
            .min()
    }

    /// Writes the next queued control or staged datagram into `buf`.
    /// A datagram that does not fit `buf` is dropped (counted).
    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        while let Some(outgoing) = self.ctx.transmits.pop_front() {
            let Some(slot) = buf.get_mut(..outgoing.bytes.len()) else {
                self.ctx.drop(DropReason::BufferTooSmall);
                continue;
            };
            slot.copy_from_slice(&outgoing.bytes);
            return Some(Transmit {
                destination: outgoing.destination,
                len: outgoing.bytes.len(),
            });
        }
        None
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.ctx.events.pop_front()
    }

    fn dropped(&mut self, reason: DropReason) -> Received {
        self.ctx.drop(reason);
        Received::Dropped(reason)
    }

    /// Checks mac1 and, under load, mac2; answers with a cookie reply when
    /// mac2 is missing. `true` when the message may be processed.
    fn admit_handshake(
        &mut self,
        now: Instant,
        from: SocketAddr,
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
        if under_load && !cookie_checker.check_mac2(now, message, layout, &from) {
            let mut reply = vec![0u8; COOKIE_REPLY_LEN];
            let fresh_secret = self.ctx.rng.bytes32();
            let mut nonce = [0u8; 24];
            self.ctx.rng.fill_bytes(&mut nonce);
            if let Some(out) = reply.first_chunk_mut::<COOKIE_REPLY_LEN>() {
                cookie_checker.create_reply(now, fresh_secret, nonce, message, layout, &from, out);
                self.ctx.send(from, reply);
            }
            return Err(DropReason::CookieRequired);
        }
        Ok(())
    }

    fn handle_initiation(
        &mut self,
        now: Instant,
        from: SocketAddr,
        view: &HandshakeInitiation<'_>,
    ) -> Received {
        if let Err(reason) = self.admit_handshake(now, from, view.bytes(), MacLayout::INITIATION) {
            return self.dropped(reason);
        }
        let peers = &self.peers;
        let peer_ids = &self.peer_ids;
        let lookup = |key: &PublicKey| {
            let id = peer_ids.get(key)?;
            peers.get(id.index())?.as_ref().map(|peer| &peer.remote)
        };
        let Some(identity) = self.ctx.identity.as_ref() else {
            return self.dropped(DropReason::NoPrivateKey);
        };
        let received = match handshake::consume_initiation(identity, view, lookup) {
            Ok(received) => received,
            Err(handshake::HandshakeError::UnknownPeer) => {
                return self.dropped(DropReason::UnknownPeer);
            }
            Err(_) => return self.dropped(DropReason::HandshakeFailed),
        };
        let Some(id) = self.peer_ids.get(&received.remote_public).copied() else {
            return self.dropped(DropReason::UnknownPeer);
        };
        match self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            Some(peer) => peer.respond(id, now, from, received, &mut self.ctx),
            None => self.dropped(DropReason::UnknownPeer),
        }
    }

    fn handle_response(
        &mut self,
        now: Instant,
        from: SocketAddr,
        view: &HandshakeResponse<'_>,
    ) -> Received {
        if let Err(reason) = self.admit_handshake(now, from, view.bytes(), MacLayout::RESPONSE) {
            return self.dropped(reason);
        }
        let Some(id) = self.ctx.indices.get(&view.receiver_index()).copied() else {
            return self.dropped(DropReason::UnexpectedHandshakeMessage);
        };
        match self.peers.get_mut(id.index()).and_then(Option::as_mut) {
            Some(peer) => peer.handle_response(id, now, from, view, &mut self.ctx),
            None => self.dropped(DropReason::UnexpectedHandshakeMessage),
        }
    }
}
