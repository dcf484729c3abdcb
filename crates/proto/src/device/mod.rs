//! [`Device`]: a WireGuard interface's protocol state for any number of
//! peers, with no I/O. The driver owns sockets, the TUN device and the clock.
//!
//! # Call order
//!
//! ```text
//! loop {
//!     wait for: a datagram, a TUN packet, or poll_timeout()
//!     datagram   -> prepare_datagram(now, from, &mut buf) -> Incoming
//!                   Data(pending): pending.open(&mut buf) -> Opened (or
//!                   pending.detach() to open on another thread), then
//!                   finish_datagram(now, from, opened, &buf, &mut out)
//!                   -> Received (Data: write buf[packet] to the TUN
//!                   device; Decompressed: out[packet]; either after the
//!                   caller's allowed-IPs check of its source)
//!     TUN packet -> prepare_encapsulate(now, peer, &mut buf, len) -> Outgoing
//!                   Ready: seal.seal(&mut buf) (or seal.detach() to seal
//!                   on another thread), then send buf[..len] to destination
//!     deadline   -> handle_timeout(now)
//!     then drain poll_transmit(&mut buf) (handshakes, keepalives, staged
//!     packets) and poll_event() (for logs)
//! }
//! ```
//!
//! There is one data path, in phases: the protocol work runs in order on
//! the driver's thread, the AEAD call in the middle runs wherever the
//! driver likes (at once, or on other threads for a batch), and receiving
//! finishes in arrival order. [`Device::handle_datagram`] and
//! [`Device::encapsulate`] run the phases back to back, for drivers and
//! tests that handle one packet at a time.
//!
//! The middle step borrows the session's key from the device, so run at
//! once it costs no reference counting; the borrow ends before the next
//! call into the device. A step meant for another thread is detached
//! first and then holds its own reference to the key, which keeps it valid
//! whatever the device does with the session meanwhile.
//!
//! Timers: each peer's earliest deadline sits in a [`TimerQueue`], so
//! `poll_timeout` and `handle_timeout` cost the same with ten thousand
//! peers as with one.
//!
//! Buffers belong to the caller. A TUN packet sits at
//! `buf[DATA_HEADROOM..]` with [`DATA_TAILROOM`] spare bytes behind it, and
//! is sealed in place (compressed in place first, where a fjord peer
//! agreed: `crate::compression`); a data datagram is opened in place, and
//! a packet that came compressed is decompressed into a second buffer of
//! the caller's, at least the MTU long.
//!
//! Handshake messages are checked in the order that costs an attacker the
//! most: length, mac1 (cheap, proves knowledge of our public key), then —
//! only when under load — mac2 (answered by a cookie reply), and only then
//! the Diffie–Hellman work.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::aead::DataCipher;
use crate::compression::{Codec, CompressionPolicy};
use crate::context::{Context, JitterSource, Rng, WallClock};
use crate::cookie::CookieChecker;
use crate::endpoint::Endpoint;
use crate::handshake::StaticIdentity;
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::negotiation::CipherPolicy;
use crate::outcome::{
    DropCounters, DropReason, Event, HandshakeCounters, Incoming, Opened, Outgoing, PeerId,
    Received, Sent, Transmit,
};
use crate::peer::{Peer, PeerStats, dropped};
use crate::timer_queue::TimerQueue;
use crate::timers::Timing;
use crate::under_load::{CookieReplyBudget, LoadMeter};
use crate::wire::{Message, ParseError};

mod handshakes;
mod peers;

pub use crate::session::{DATA_HEADROOM, DATA_TAILROOM};

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
    /// Our address the peer's datagrams arrive at, which ours to it leave
    /// from; `None` until one arrived.
    pub local_address: Option<IpAddr>,
    pub persistent_keepalive: Option<Duration>,
    pub stats: PeerStats,
    /// The cipher our data to the peer uses now (none without a session).
    pub sending_cipher: Option<DataCipher>,
    /// The peer showed in its current session that it is a fjord node.
    pub speaks_fjord: bool,
    /// How our data to the peer is compressed (both offered the codec);
    /// `None`, not at all.
    pub sending_codec: Option<Codec>,
    /// Packets waiting for a session (sent once a handshake completes).
    pub staged_packets: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DeviceError {
    #[error("peer {0} is already configured")]
    DuplicatePeer(PublicKey),
    #[error("a peer cannot have the interface's own public key")]
    OwnKey,
}

pub struct Device {
    ctx: Context,
    /// Checks MACs of handshakes addressed to our public key; `None`
    /// without a private key.
    cookie_checker: Option<CookieChecker>,
    peers: Vec<Option<Peer>>,
    peer_ids: HashMap<PublicKey, PeerId>,
    /// Each peer's earliest timer deadline, by `PeerId::index`.
    deadlines: TimerQueue,
    /// Reused by `handle_timeout` for the peers found due.
    due_scratch: Vec<usize>,
    load: LoadMeter,
    /// Which handshakes needing a cookie get a reply (under_load.rs).
    cookie_replies: CookieReplyBudget,
    handshakes: HandshakeCounters,
    /// How many unconfigured initiators may be admitted at once.
    unknown_peer_limit: Option<usize>,
    /// Peers admitted that way and not yet confirmed by their owner.
    provisional: HashSet<PeerId>,
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
                indices: Default::default(),
                transmits: VecDeque::new(),
                events: VecDeque::new(),
                drops: DropCounters::default(),
                wall_clock,
                mtu: config.mtu,
                timing: Timing::default(),
                cipher_policy: CipherPolicy::default(),
                compression_policy: CompressionPolicy::default(),
                compressor: None,
                speaks_fjord: true,
            },
            cookie_checker,
            peers: Vec::new(),
            peer_ids: HashMap::new(),
            deadlines: TimerQueue::new(),
            due_scratch: Vec::new(),
            load: LoadMeter::default(),
            cookie_replies: CookieReplyBudget::default(),
            handshakes: HandshakeCounters::default(),
            unknown_peer_limit: None,
            provisional: HashSet::new(),
        }
    }

    fn peer(&self, id: PeerId) -> Option<&Peer> {
        self.peers.get(id.index()).and_then(Option::as_ref)
    }

    /// Runs `work` on a peer, then files any timer deadline it armed or
    /// moved earlier: every change to a peer goes through here, so the
    /// timer queue never misses one. Deadlines that moved later or went
    /// away need no filing (the queue's entry fires early and is
    /// corrected), which keeps the data path to one branch here.
    fn with_peer<T>(
        &mut self,
        id: PeerId,
        work: impl FnOnce(&mut Peer, &mut Context) -> T,
    ) -> Option<T> {
        self.with_peer_then(id, work, |_, _, result| Some(result), |_| None)
    }

    /// [`Device::with_peer`], then `keep`, which may return a borrow of
    /// the peer (a session key for the data path's middle step): it runs
    /// once the peer has stopped changing and its deadlines are filed.
    /// `missing` answers for a peer that does not exist.
    fn with_peer_then<'d, T, R>(
        &'d mut self,
        id: PeerId,
        work: impl FnOnce(&mut Peer, &mut Context) -> T,
        keep: impl FnOnce(&'d Peer, &mut Context, T) -> R,
        missing: impl FnOnce(&mut Context) -> R,
    ) -> R {
        let Some(peer) = self.peers.get_mut(id.index()).and_then(Option::as_mut) else {
            return missing(&mut self.ctx);
        };
        let result = work(peer, &mut self.ctx);
        if let Some(armed) = peer.timers.take_armed() {
            self.deadlines.update(id.index(), Some(armed));
        }
        keep(peer, &mut self.ctx, result)
    }

    pub fn drops(&self) -> &DropCounters {
        &self.ctx.drops
    }

    /// Replaces WireGuard's timer durations, for tests that speed up
    /// rekeys ([`Timing::fast_rekeys`]); a peer on the standard timers
    /// would refuse the extra initiations as a flood. Takes effect for
    /// sessions and deadlines set from now on.
    pub fn set_timing(&mut self, timing: Timing) {
        self.ctx.timing = timing;
    }

    pub fn timing(&self) -> &Timing {
        &self.ctx.timing
    }

    /// Which ciphers sessions offer fjord peers: ChaCha20-Poly1305 only
    /// (the default, as WireGuard), or AES-256-GCM too, which the driver
    /// should ask for only where [`crate::aead::hardware_aes`] says the CPU
    /// has it. Takes effect for sessions from the next handshake on.
    pub fn set_cipher_policy(&mut self, policy: CipherPolicy) {
        self.ctx.cipher_policy = policy;
    }

    /// Whether sessions offer fjord peers compression: off (the default),
    /// LZ4, or zstd (and LZ4), used toward each peer that offers it too.
    /// Takes effect for sessions from the next handshake on. An error, and
    /// the policy unchanged, if zstd's library cannot allocate its
    /// contexts.
    pub fn set_compression_policy(&mut self, policy: CompressionPolicy) -> std::io::Result<()> {
        if policy == CompressionPolicy::Off {
            self.ctx.compression_policy = policy;
            return Ok(());
        }
        let compressor = self.ctx.compressor.get_or_insert_default();
        if policy == CompressionPolicy::Zstd {
            compressor.add_zstd()?;
        }
        self.ctx.compression_policy = policy;
        Ok(())
    }

    pub fn handshake_counters(&self) -> HandshakeCounters {
        self.handshakes
    }

    /// Whether handshake messages arrive faster than
    /// [`crate::UNDER_LOAD_HANDSHAKES_PER_SECOND`] (in this second or the
    /// last), so that cookies are required: a handshake flood. A driver
    /// may then spend less on the socket that the flood fills.
    pub fn under_load(&self, now: Instant) -> bool {
        self.load.is_loaded(now)
    }

    /// Behaves as a plain WireGuard peer does: no mark in initiations, no
    /// session offers, fjord extensions dropped as malformed inner
    /// packets. For tests that need a plain peer in the simulator.
    #[doc(hidden)]
    pub fn speak_plain_wireguard_only(&mut self) {
        self.ctx.speaks_fjord = false;
    }

    /// Forces the under-load behaviour (cookies for every handshake), for tests.
    #[doc(hidden)]
    pub fn force_under_load(&mut self, forced: bool) {
        self.load.forced = forced;
    }

    // ---- inputs ---------------------------------------------------------

    /// Handles one received datagram in place: [`Device::prepare_datagram`],
    /// the decryption and [`Device::finish_datagram`] back to back.
    pub fn handle_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        datagram: &mut [u8],
        decompressed: &mut [u8],
    ) -> Received {
        let from = from.into();
        match self.prepare_datagram(now, from, datagram) {
            Incoming::Data(pending) => {
                let opened = pending.open(datagram);
                self.finish_datagram(now, from, opened, datagram, decompressed)
            }
            Incoming::Done(received) => received,
        }
    }

    /// The first phase of receiving: handles handshake messages whole, and
    /// for a data message checks its session and counter and returns the
    /// decryption to run (see [`Incoming`]). Only handshake messages are
    /// read from `datagram` and may be changed; a data message is left as
    /// it is.
    pub fn prepare_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        datagram: &mut [u8],
    ) -> Incoming<'_> {
        let from = from.into();
        let (local_index, counter, cipher) = match Message::parse(datagram) {
            Ok(Message::TransportData(view)) => {
                (view.receiver_index(), view.counter(), view.cipher())
            }
            Ok(Message::HandshakeInitiation(view)) => {
                return Incoming::Done(self.handle_initiation(now, from, &view));
            }
            Ok(Message::HandshakeResponse(view)) => {
                return Incoming::Done(self.handle_response(now, from, &view));
            }
            Ok(Message::CookieReply(view)) => {
                let peer = self.ctx.indices.get(&view.receiver_index()).copied();
                let handled = peer.and_then(|id| {
                    self.with_peer(id, |peer, ctx| {
                        peer.handle_cookie_reply(id, now, &view, ctx)
                    })
                });
                return Incoming::Done(
                    handled.unwrap_or_else(|| self.dropped(DropReason::UnexpectedHandshakeMessage)),
                );
            }
            Err(ParseError::UnknownType(_)) => {
                return Incoming::Done(self.dropped(DropReason::UnknownMessageType));
            }
            Err(_) => return Incoming::Done(self.dropped(DropReason::MalformedMessage)),
        };
        // The first phase of a data message changes no peer (it only
        // reads the replay window), so it needs no deadline filing and
        // may lend out the session's key.
        let peer = self
            .ctx
            .indices
            .get(&local_index)
            .and_then(|id| Some((*id, self.peers.get(id.index())?.as_ref()?)));
        match peer {
            Some((id, peer)) => {
                peer.prepare_decapsulate(id, now, local_index, counter, cipher, &mut self.ctx)
            }
            None => {
                self.ctx.drop(DropReason::UnknownReceiverIndex);
                Incoming::Done(Received::Dropped(DropReason::UnknownReceiverIndex))
            }
        }
    }

    /// The last phase of receiving a data message whose decryption ran
    /// (see [`Opened`]). Call it in the order the datagrams arrived. A
    /// packet that came compressed is decompressed into `decompressed`
    /// ([`Received::Decompressed`]), which must hold the MTU; a driver
    /// whose device never enables compression may pass an empty slice.
    #[inline]
    pub fn finish_datagram(
        &mut self,
        now: Instant,
        from: impl Into<Endpoint>,
        opened: Opened,
        datagram: &[u8],
        decompressed: &mut [u8],
    ) -> Received {
        let from = from.into();
        // Not `with_peer`: wrapping the outcome in an `Option` and out
        // again copied it twice more, and the second copy read back an odd
        // -sized value the first had just written in overlapping pieces,
        // a load the store buffer cannot forward (a tenth of the 64-byte
        // receive path's own time).
        self.with_peer_then(
            opened.peer,
            |peer, ctx| peer.finish_decapsulate(opened, now, from, datagram, decompressed, ctx),
            |_, _, received| received,
            |ctx| dropped(ctx, DropReason::UnknownReceiverIndex),
        )
    }

    /// Seals the TUN packet at `buf[DATA_HEADROOM..][..payload_len]` for
    /// `peer`: [`Device::prepare_encapsulate`] and the seal back to back.
    pub fn encapsulate(
        &mut self,
        now: Instant,
        id: PeerId,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Sent {
        match self.prepare_encapsulate(now, id, buf, payload_len) {
            Outgoing::Ready {
                len,
                destination,
                source,
                seal,
            } => match seal.seal(buf) {
                Ok(()) => Sent::Sealed {
                    len,
                    destination,
                    source,
                },
                // The first phase checked the buffer; this cannot happen.
                Err(_) => {
                    self.ctx.drop(DropReason::BufferTooSmall);
                    Sent::Dropped(DropReason::BufferTooSmall)
                }
            },
            Outgoing::Done(sent) => sent,
        }
    }

    /// The first phase of sending the TUN packet at
    /// `buf[DATA_HEADROOM..][..payload_len]` to `peer`: everything but the
    /// encryption, which the caller runs next (see [`Outgoing`]).
    #[inline]
    pub fn prepare_encapsulate(
        &mut self,
        now: Instant,
        id: PeerId,
        buf: &mut [u8],
        payload_len: usize,
    ) -> Outgoing<'_> {
        self.with_peer_then(
            id,
            |peer, ctx| peer.prepare_encapsulate(id, now, buf, payload_len, ctx),
            |peer, ctx, prepared| peer.with_sending_key(prepared, ctx),
            |ctx| {
                ctx.drop(DropReason::UnknownPeer);
                Outgoing::Done(Sent::Dropped(DropReason::UnknownPeer))
            },
        )
    }

    /// Runs every timer due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        let mut due = std::mem::take(&mut self.due_scratch);
        while let Some(index) = self.deadlines.pop_due(now) {
            due.push(index);
        }
        for index in due.drain(..) {
            let Some(peer) = self.peers.get_mut(index).and_then(Option::as_mut) else {
                continue;
            };
            if peer
                .timers
                .next_deadline()
                .is_some_and(|deadline| deadline <= now)
            {
                peer.handle_timers(PeerId(index as u32), now, &mut self.ctx);
            }
            // The queue dropped this peer's entry when it came due: file
            // every deadline the peer still has, not only those armed since.
            peer.timers.take_armed();
            self.deadlines.update(index, peer.timers.next_deadline());
        }
        self.due_scratch = due;
    }

    /// When `handle_timeout` should next run. It may be a little early
    /// (a deadline that moved later is found out when it fires), never late.
    pub fn poll_timeout(&self) -> Option<Instant> {
        self.deadlines.next_deadline()
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
                destination: outgoing.destination.remote,
                source: outgoing.destination.local,
                len: outgoing.bytes.len(),
                ttl: None,
                dont_fragment: false,
            });
        }
        None
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.ctx.events.pop_front()
    }

    fn dropped(&mut self, reason: DropReason) -> Received {
        dropped(&mut self.ctx, reason)
    }
}
