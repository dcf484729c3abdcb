//! What the core tells its driver: outcomes of each input, drop reasons with
//! their counters, and events worth logging.

use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use crate::aead::DataCipher;
use crate::extension::Recipient;
use crate::session::{DetachedOpen, PendingOpen, PendingSeal};

/// A peer's handle inside one [`crate::Device`]; never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerId(pub(crate) u32);

impl PeerId {
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// Why a datagram or a packet was dropped. Each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Datagram shorter than a message type, or of the wrong length for its type.
    MalformedMessage,
    /// Message type WireGuard does not know.
    UnknownMessageType,
    /// Handshake message whose mac1 is not for us.
    InvalidMac1,
    /// Under load and no valid mac2: answered with a cookie reply instead.
    CookieRequired,
    /// Handshake message that failed to decrypt or used a low-order key.
    HandshakeFailed,
    /// Initiation from a public key that is not a configured peer.
    UnknownPeer,
    /// Initiation whose timestamp is not newer than the last one accepted.
    ReplayedInitiation,
    /// Initiations from one peer arriving faster than the allowed rate.
    InitiationFlood,
    /// Response or cookie reply matching no handshake in flight.
    UnexpectedHandshakeMessage,
    /// Data for a receiver index that is not (or no longer) ours.
    UnknownReceiverIndex,
    /// Data for a session past its reject time.
    ExpiredSession,
    /// Data with a counter already received.
    ReplayedCounter,
    /// Data with a counter behind the replay window.
    CounterTooOld,
    /// Data whose tag did not authenticate.
    AuthenticationFailed,
    /// Decrypted payload that is not a well-formed IP packet (or, on a
    /// switch-mode interface, Ethernet frame).
    InvalidInnerPacket,
    /// Packet for a peer whose endpoint is unknown.
    NoEndpoint,
    /// Session used every counter; waiting for a new one.
    CounterExhausted,
    /// Caller's buffer too small for header, padding and tag.
    BufferTooSmall,
    /// Staging queue full while waiting for a handshake; oldest packet dropped.
    StagingQueueFull,
    /// Handshake attempts gave up; staged packets discarded.
    HandshakeTimedOut,
    /// Outgoing packet whose destination no peer's allowed IPs cover.
    NoRoute,
    /// Decrypted packet whose source is not in the sending peer's allowed
    /// IPs (on a switch-mode interface: a frame whose source MAC address
    /// the peer may not use).
    SourceNotAllowed,
    /// Handshake impossible: the interface has no private key yet.
    NoPrivateKey,
    /// An authenticated fjord extension payload on an interface that runs
    /// no fjord extensions (no mesh).
    UnsupportedExtension,
    /// Outgoing packet longer than the peer's path allows; its sender got
    /// an ICMP "fragmentation needed" / "packet too big" if it may.
    PacketTooBig,
    /// Data sealed with AES-256-GCM in a session where we did not offer it.
    CipherNotNegotiated,
    /// ChaCha20-Poly1305 data from a peer that had already switched its
    /// session to AES-256-GCM.
    CipherDowngraded,
    /// The peer and this interface disagree on the mode: an Ethernet frame
    /// from a fjord peer in switch mode on an interface in router mode, or
    /// an IP packet (from a plain WireGuard peer or a fjord peer in router
    /// mode) on an interface in switch mode.
    ModeMismatch,
    /// A compressed packet in a session where we did not offer compression.
    CompressionNotNegotiated,
    /// A compressed packet that is malformed, decompresses to another
    /// length than it claims, or to more than the MTU.
    DecompressionFailed,
    /// A received packet the network's policy does not let its sender
    /// send to this member (or to what lies behind it), and no tracked
    /// flow answers.
    PolicyInbound,
    /// A packet from the TUN device the network's policy does not let
    /// this member send to its destination, and no tracked flow answers.
    PolicyOutbound,
}

impl DropReason {
    pub const ALL: [DropReason; 32] = [
        Self::MalformedMessage,
        Self::UnknownMessageType,
        Self::InvalidMac1,
        Self::CookieRequired,
        Self::HandshakeFailed,
        Self::UnknownPeer,
        Self::ReplayedInitiation,
        Self::InitiationFlood,
        Self::UnexpectedHandshakeMessage,
        Self::UnknownReceiverIndex,
        Self::ExpiredSession,
        Self::ReplayedCounter,
        Self::CounterTooOld,
        Self::AuthenticationFailed,
        Self::InvalidInnerPacket,
        Self::NoEndpoint,
        Self::CounterExhausted,
        Self::BufferTooSmall,
        Self::StagingQueueFull,
        Self::HandshakeTimedOut,
        Self::NoRoute,
        Self::SourceNotAllowed,
        Self::NoPrivateKey,
        Self::UnsupportedExtension,
        Self::PacketTooBig,
        Self::CipherNotNegotiated,
        Self::CipherDowngraded,
        Self::ModeMismatch,
        Self::CompressionNotNegotiated,
        Self::DecompressionFailed,
        Self::PolicyInbound,
        Self::PolicyOutbound,
    ];

    /// Whether the reason refuses a datagram received from the network (as
    /// opposed to a packet of ours, or our own state).
    pub fn refuses_received(self) -> bool {
        matches!(
            self,
            Self::MalformedMessage
                | Self::UnknownMessageType
                | Self::InvalidMac1
                | Self::CookieRequired
                | Self::HandshakeFailed
                | Self::UnknownPeer
                | Self::ReplayedInitiation
                | Self::InitiationFlood
                | Self::UnexpectedHandshakeMessage
                | Self::UnknownReceiverIndex
                | Self::ExpiredSession
                | Self::ReplayedCounter
                | Self::CounterTooOld
                | Self::AuthenticationFailed
                | Self::InvalidInnerPacket
                | Self::SourceNotAllowed
                | Self::UnsupportedExtension
                | Self::CipherNotNegotiated
                | Self::CipherDowngraded
                | Self::ModeMismatch
                | Self::CompressionNotNegotiated
                | Self::DecompressionFailed
                | Self::PolicyInbound
        )
    }

    /// Whether a healthy, correctly configured peer on an ordinary network
    /// never causes it: junk, forgeries, replayed handshakes, or a
    /// misconfiguration (unknown key, allowed IPs). Restarts, reordering,
    /// duplicates and load cause the other received-datagram reasons.
    pub fn is_suspicious(self) -> bool {
        matches!(
            self,
            Self::MalformedMessage
                | Self::UnknownMessageType
                | Self::InvalidMac1
                | Self::HandshakeFailed
                | Self::UnknownPeer
                | Self::ReplayedInitiation
                | Self::AuthenticationFailed
                | Self::InvalidInnerPacket
                | Self::SourceNotAllowed
                | Self::CipherNotNegotiated
                | Self::CipherDowngraded
                | Self::ModeMismatch
                | Self::CompressionNotNegotiated
                | Self::DecompressionFailed
        )
    }

    /// A stable snake_case name for metrics and `fjord show`.
    pub fn name(self) -> &'static str {
        match self {
            Self::MalformedMessage => "malformed_message",
            Self::UnknownMessageType => "unknown_message_type",
            Self::InvalidMac1 => "invalid_mac1",
            Self::CookieRequired => "cookie_required",
            Self::HandshakeFailed => "handshake_failed",
            Self::UnknownPeer => "unknown_peer",
            Self::ReplayedInitiation => "replayed_initiation",
            Self::InitiationFlood => "initiation_flood",
            Self::UnexpectedHandshakeMessage => "unexpected_handshake_message",
            Self::UnknownReceiverIndex => "unknown_receiver_index",
            Self::ExpiredSession => "expired_session",
            Self::ReplayedCounter => "replayed_counter",
            Self::CounterTooOld => "counter_too_old",
            Self::AuthenticationFailed => "authentication_failed",
            Self::InvalidInnerPacket => "invalid_inner_packet",
            Self::NoEndpoint => "no_endpoint",
            Self::CounterExhausted => "counter_exhausted",
            Self::BufferTooSmall => "buffer_too_small",
            Self::StagingQueueFull => "staging_queue_full",
            Self::HandshakeTimedOut => "handshake_timed_out",
            Self::NoRoute => "no_route",
            Self::SourceNotAllowed => "source_not_allowed",
            Self::NoPrivateKey => "no_private_key",
            Self::UnsupportedExtension => "unsupported_extension",
            Self::PacketTooBig => "packet_too_big",
            Self::CipherNotNegotiated => "cipher_not_negotiated",
            Self::CipherDowngraded => "cipher_downgraded",
            Self::ModeMismatch => "mode_mismatch",
            Self::CompressionNotNegotiated => "compression_not_negotiated",
            Self::DecompressionFailed => "decompression_failed",
            Self::PolicyInbound => "policy_inbound",
            Self::PolicyOutbound => "policy_outbound",
        }
    }

    /// The reason whose [`DropReason::name`] is `name`.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.name() == name)
    }
}

/// Drop counts by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropCounters([u64; DropReason::ALL.len()]);

impl DropCounters {
    pub fn count(&mut self, reason: DropReason) {
        self.0[reason as usize] += 1;
    }

    /// Counts `count` drops for `reason` at once (counters read back from
    /// a report).
    pub fn count_many(&mut self, reason: DropReason, count: u64) {
        self.0[reason as usize] += count;
    }

    pub fn get(&self, reason: DropReason) -> u64 {
        self.0[reason as usize]
    }

    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Non-zero counters with their names.
    pub fn nonzero(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL
            .into_iter()
            .map(|reason| (reason, self.get(reason)))
            .filter(|(_, n)| *n > 0)
    }

    pub fn add(&mut self, other: &DropCounters) {
        for (mine, theirs) in self.0.iter_mut().zip(other.0.iter()) {
            *mine += theirs;
        }
    }

    /// What was counted since `earlier` (a snapshot of the same counters).
    pub fn since(&self, earlier: &DropCounters) -> DropCounters {
        let mut delta = self.clone();
        for (now, then) in delta.0.iter_mut().zip(earlier.0.iter()) {
            *now = now.saturating_sub(*then);
        }
        delta
    }
}

/// What answering handshakes cost, for `fjord show`: under a flood of
/// initiations a healthy responder moves `cookie_replies`, not
/// `initiations_computed`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HandshakeCounters {
    /// Initiations that passed mac1 (and mac2, under load) and were read
    /// with Diffie–Hellman work, whether or not they proved a known peer.
    pub initiations_computed: u64,
    /// Handshake messages answered with a cookie reply instead, under
    /// load (each also counted as [`DropReason::CookieRequired`]).
    pub cookie_replies: u64,
    /// Handshake messages that needed a cookie but got no reply: the
    /// flood had spent the reply budget (each also counted as
    /// [`DropReason::CookieRequired`]).
    pub cookie_replies_withheld: u64,
}

/// The outcome of [`crate::Device::handle_datagram`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Received {
    /// An authenticated IP packet lies at `datagram[packet]`.
    Data {
        peer: PeerId,
        packet: Range<usize>,
        source: IpAddr,
        destination: IpAddr,
    },
    /// An authenticated Ethernet frame at `datagram[frame]`, from a fjord
    /// peer of a switch-mode interface. The device never returns it: it
    /// hands fjord's extension payloads over as `Extension`, and
    /// `fjord_mesh::Node` in switch mode makes this of the frames among
    /// them.
    Frame {
        peer: PeerId,
        frame: Range<usize>,
    },
    /// An authenticated IP packet that arrived compressed, decompressed
    /// into the caller's buffer at `decompressed[packet]`
    /// (`crate::compression`).
    Decompressed {
        peer: PeerId,
        packet: Range<usize>,
        source: IpAddr,
        destination: IpAddr,
    },
    /// An authenticated keepalive.
    Keepalive {
        peer: PeerId,
    },
    /// An authenticated fjord extension payload (its first byte is
    /// [`crate::extension::EXTENSION_MARKER`]) at `datagram[payload]`,
    /// with WireGuard's zero padding still behind it, for `recipient`
    /// (never [`Recipient::Protocol`]: the device handles those). Plain
    /// WireGuard peers never send these.
    Extension {
        peer: PeerId,
        recipient: Recipient,
        payload: Range<usize>,
    },
    /// A handshake message or cookie reply was consumed; replies may be
    /// waiting in [`crate::Device::poll_transmit`].
    Control,
    Dropped(DropReason),
}

/// The outcome of [`crate::Device::encapsulate`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// The buffer now holds a `len`-byte datagram for `destination`, to
    /// leave from our address `source` (`None`: the system's choice).
    Sealed {
        len: usize,
        destination: SocketAddr,
        source: Option<IpAddr>,
    },
    /// No session yet: the packet was copied and a handshake started.
    Staged,
    Dropped(DropReason),
}

/// A TUN packet after the protocol's work on it but before its
/// encryption (from `prepare_encapsulate`). The encryption borrows the
/// peer's session key, so it runs before the next call into the device:
/// at once, or [detached](PendingSeal::detach) for another thread, which
/// lets the encryption of a batch run on several threads.
pub enum Outgoing<'k> {
    /// The header and padding are written: run `seal` on the same buffer,
    /// then send its first `len` bytes to `destination` from our address
    /// `source` (`None`: the system's choice).
    Ready {
        len: usize,
        destination: SocketAddr,
        source: Option<IpAddr>,
        seal: PendingSeal<'k>,
    },
    /// Nothing to encrypt: the packet was staged or dropped.
    Done(Sent),
}

/// A received datagram after the protocol's first look at it (from
/// `prepare_datagram`).
pub enum Incoming<'k> {
    /// A data message of a known session, not yet seen: open it
    /// ([`PendingData::open`], or [`PendingData::detach`] to open it on
    /// another thread), then hand the [`Opened`] to `finish_datagram`, in
    /// the order the datagrams arrived.
    Data(PendingData<'k>),
    /// Fully handled (a handshake message, or dropped).
    Done(Received),
}

/// A data message waiting for its decryption, borrowing its session's key.
pub struct PendingData<'k> {
    pub(crate) peer: PeerId,
    pub(crate) local_index: u32,
    pub(crate) open: PendingOpen<'k>,
}

impl PendingData<'_> {
    /// Decrypts the datagram in place, for `finish_datagram`.
    #[inline]
    pub fn open(self, datagram: &mut [u8]) -> Opened {
        let (counter, cipher) = (self.open.counter(), self.open.cipher());
        Opened {
            peer: self.peer,
            local_index: self.local_index,
            counter,
            cipher,
            authenticated: self.open.open(datagram),
        }
    }

    /// The same message holding its own reference to the key, so that it
    /// can be opened on another thread while the device goes on.
    pub fn detach(self) -> DetachedData {
        DetachedData {
            peer: self.peer,
            local_index: self.local_index,
            open: self.open.detach(),
            authenticated: false,
        }
    }
}

/// A [`PendingData`] that holds its own reference to the key, to open on
/// any thread.
pub struct DetachedData {
    peer: PeerId,
    local_index: u32,
    open: DetachedOpen,
    authenticated: bool,
}

impl DetachedData {
    /// Decrypts the datagram in place and keeps whether it authenticated.
    #[inline]
    pub fn open(&mut self, datagram: &mut [u8]) {
        self.authenticated = self.open.open(datagram);
    }

    /// What `finish_datagram` needs: not authenticated unless
    /// [`DetachedData::open`] ran and the tag matched.
    pub fn opened(&self) -> Opened {
        Opened {
            peer: self.peer,
            local_index: self.local_index,
            counter: self.open.counter(),
            cipher: self.open.cipher(),
            authenticated: self.authenticated,
        }
    }
}

/// A data message whose decryption ran, for `finish_datagram`. Only
/// opening makes one, so a caller cannot claim a datagram authenticated.
#[derive(Debug, Clone, Copy)]
pub struct Opened {
    pub(crate) peer: PeerId,
    pub(crate) local_index: u32,
    pub(crate) counter: u64,
    pub(crate) cipher: DataCipher,
    pub(crate) authenticated: bool,
}

/// Something worth logging.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    HandshakeCompleted {
        peer: PeerId,
        initiator: bool,
    },
    HandshakeAbandoned {
        peer: PeerId,
    },
    /// A handshake initiation left for the peer's endpoint (at most one
    /// per REKEY_TIMEOUT, but for [`crate::Device::initiate_toward`]).
    /// Initiations that keep leaving with no [`Event::HandshakeCompleted`]
    /// between them are a path that drops everything, long before
    /// [`Event::HandshakeAbandoned`] (which steady traffic postpones for
    /// good: every new packet restarts the attempts, as in WireGuard).
    HandshakeInitiated {
        peer: PeerId,
        /// The peer's endpoint when it left.
        endpoint: Option<SocketAddr>,
        /// When it left (a packet's arrival may have sent it, between the
        /// driver's timer calls).
        at: std::time::Instant,
    },
    EndpointChanged {
        peer: PeerId,
        endpoint: SocketAddr,
    },
    /// The peer's datagrams now arrive at another of our addresses (or at
    /// one again after [`crate::Device::forget_local_addresses`]), from
    /// the same remote endpoint: replies leave from the new one.
    LocalAddressChanged {
        peer: PeerId,
    },
    KeysErased {
        peer: PeerId,
    },
    /// A public key that no peer has completed a handshake with us and
    /// was admitted as a provisional peer (only with
    /// [`crate::Device::set_unknown_peer_limit`]); its owner decides to
    /// confirm or remove it.
    UnknownPeerAdmitted {
        peer: PeerId,
        public_key: crate::PublicKey,
    },
}

/// A datagram the core wants sent, written into the caller's buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    pub destination: SocketAddr,
    /// Our address to send from (`None`: the system's choice); see
    /// [`crate::Endpoint`].
    pub source: Option<IpAddr>,
    pub len: usize,
    /// The IP TTL (IPv6 hop limit) to send with; `None`: the socket's own.
    pub ttl: Option<u8>,
    /// Send without fragmentation (IPv4 Don't Fragment, IPv6 no
    /// fragmenting): a datagram that does not fit the path is lost.
    pub dont_fragment: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suspicious_reason_refuses_a_received_datagram() {
        for reason in DropReason::ALL {
            assert!(
                !reason.is_suspicious() || reason.refuses_received(),
                "{reason:?}"
            );
        }
        assert!(!DropReason::NoRoute.refuses_received());
        assert!(!DropReason::CounterTooOld.is_suspicious());
    }

    #[test]
    fn counters_since_a_snapshot_hold_only_what_came_after() {
        let mut counters = DropCounters::default();
        counters.count(DropReason::MalformedMessage);
        let snapshot = counters.clone();
        counters.count(DropReason::MalformedMessage);
        counters.count(DropReason::AuthenticationFailed);
        let delta = counters.since(&snapshot);
        assert_eq!(delta.get(DropReason::MalformedMessage), 1);
        assert_eq!(delta.get(DropReason::AuthenticationFailed), 1);
        assert_eq!(delta.total(), 2);
        assert_eq!(snapshot.since(&counters).total(), 0);
        let mut read_back = DropCounters::default();
        for (reason, count) in counters.nonzero() {
            read_back.count_many(DropReason::from_name(reason.name()).unwrap(), count);
        }
        assert_eq!(read_back, counters);
        assert_eq!(DropReason::from_name("no_such_reason"), None);
    }
}
