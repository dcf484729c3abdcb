//! Session negotiation between two fjord nodes: inside each authenticated
//! WireGuard session they agree on what its data may use beyond WireGuard.
//! Today that is the data cipher (AES-256-GCM where both have hardware
//! AES, ChaCha20-Poly1305 otherwise) and whether data is compressed (zstd
//! or LZ4 where both enabled it; see [`crate::compression`]).
//!
//! # Who speaks first
//!
//! A fjord initiator marks its handshake initiation (the timestamp's
//! whitened bits, [`crate::tai64n::FJORD_MARK`]; encrypted and
//! authenticated by the handshake). A responder that sees the mark sends
//! an [`Offer`] once the session is confirmed; the initiator learns from
//! that offer that the responder speaks fjord and answers with its own.
//! A plain WireGuard peer never marks and never offers, so nothing
//! fjord-only reaches it, and a fjord node never waits for anything from
//! it: every session starts, and with a plain peer stays, WireGuard's.
//!
//! ```text
//! initiator (marks its initiation)          responder (sees the mark)
//!     ── initiation ──▶ ◀── response ──  ── keepalive ──▶
//!                                        ◀── Offer {ciphers, has_yours: no}
//!     Offer {ciphers, has_yours: yes} ──▶
//!     (sends AES from here if both offer it)
//!                                        ◀── Offer {ciphers, has_yours: yes}
//!                                            (sends AES from here)
//! ```
//!
//! # Wire layout
//!
//! The plaintext of a transport data message, in the extension format the
//! mesh uses too (`crate::extension`, where the kind is registered), with
//! a kind from the range this crate owns ([`PROTOCOL_KINDS`]):
//!
//! ```text
//! 0x1f | kind 0x40 | body length u16 BE | ciphers u8 | flags u8 | compression u8 | (more, ignored)
//! ciphers:     bit 0 ChaCha20-Poly1305 (always), bit 1 AES-256-GCM
//! flags:       bit 0 "I have your offer"
//! compression: bit 0 LZ4 block, bit 1 zstd frame
//! ```
//!
//! Unknown bits and trailing body bytes are ignored, so a later version
//! can add fields that this one skips; a body without the compression
//! byte (from a fjord that predates it) offers no compression.
//!
//! # Delivery
//!
//! Offers ride datagrams that may be lost. A side sends its offer again
//! while the peer has not said it has it, at most every
//! [`OFFER_RESEND_INTERVAL`] and [`MAX_OFFER_SENDS`] times in all (checked
//! as authenticated packets arrive, so an idle session sends nothing). A
//! side answers the first offer of a session, and any offer that says it
//! lacks ours, with its own. An offer lost for good leaves the session on
//! ChaCha20-Poly1305 until the next handshake (two minutes at most).
//!
//! # The cipher, per direction
//!
//! A side seals with AES-256-GCM once it offers AES itself and holds the
//! peer's offer of it: the peer offered, so it accepts. Until then, and
//! for good with a peer that offers only ChaCha20-Poly1305, it seals with
//! ChaCha20-Poly1305. The message type says which ([`crate::wire`]); the
//! counter, nonce, replay window and timers are the session's, shared by
//! both ciphers, so no counter is ever sealed twice.
//!
//! # Compression, per direction
//!
//! The same rule: a side compresses once it offers a codec itself and
//! holds the peer's offer of it (zstd if both offer it, else LZ4), and
//! accepts a packet of a codec only in a session where it sent its own
//! offer of that codec ([`crate::DropReason::CompressionNotNegotiated`]
//! otherwise). Each packet says by its first byte whether and how it is
//! compressed, so the two directions need no switch-over point.
//!
//! # Receiving the cipher
//!
//! Receiving fails closed:
//! - AES-256-GCM is opened only in a session where we sent our offer of
//!   it ([`crate::DropReason::CipherNotNegotiated`] otherwise);
//! - once the peer's first AES-256-GCM packet authenticated at counter
//!   `k`, a ChaCha20-Poly1305 packet with a counter above `k` is refused
//!   ([`crate::DropReason::CipherDowngraded`]); the ones below `k` were in
//!   flight before the switch and are still taken;
//! - the first offer of a session is the peer's; one that differs later
//!   is ignored, and a replayed one never gets past the replay window.
//!
//! # Why this is sound
//!
//! Offers travel inside the session, so only the authenticated peer can
//! send one; someone on the path can drop offers, which leaves the
//! session on ChaCha20-Poly1305 — WireGuard's own cipher, so that is no
//! loss of security, only of speed (and dropping packets is open to such
//! an attacker anyway). The AES-256-GCM key of a direction is derived from
//! its ChaCha20-Poly1305 key by a PRF under a fjord label
//! ([`crate::aead::aes_key_for`]), so no key is used by two ciphers. A
//! message with its type flipped to the other cipher is opened with the
//! other key and fails to authenticate, like any tampered packet.

use std::time::{Duration, Instant};

use crate::aead::DataCipher;
use crate::compression::{Codec, CompressionPolicy};
pub use crate::extension::PROTOCOL_KINDS;
use crate::extension::{
    EXTENSION_HEADER_LEN as HEADER_LEN, EXTENSION_MARKER, ExtensionKind, Recipient,
};

/// The kind of an [`Offer`].
pub const KIND_SESSION_OFFER: u8 = ExtensionKind::SessionOffer.code();
/// Ciphers, flags and compression.
const OFFER_BODY_LEN: usize = 3;
/// Ciphers and flags: what the first fjord with offers sent, and the
/// least a body must hold.
const OFFER_BODY_MIN_LEN: usize = 2;
const CIPHER_CHACHA: u8 = 1 << 0;
const CIPHER_AES: u8 = 1 << 1;
const FLAG_HAS_YOUR_OFFER: u8 = 1 << 0;
const COMPRESSION_LZ4: u8 = 1 << 0;
const COMPRESSION_ZSTD: u8 = 1 << 1;

/// Least time between two sends of the same session's offer.
pub const OFFER_RESEND_INTERVAL: Duration = Duration::from_secs(1);
/// Most sends of one session's offer.
pub const MAX_OFFER_SENDS: u8 = 5;

/// Which ciphers this node offers its fjord peers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CipherPolicy {
    /// ChaCha20-Poly1305 only, as WireGuard. The default of the protocol
    /// core; the driver offers AES where the CPU has it.
    #[default]
    ChaCha20Poly1305Only,
    /// AES-256-GCM too, used in every session whose peer offers it.
    OfferAes256Gcm,
}

impl CipherPolicy {
    fn offers_aes(self) -> bool {
        self == Self::OfferAes256Gcm
    }
}

/// A fjord node's offer for one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offer {
    pub aes_256_gcm: bool,
    /// The sender compresses with LZ4 toward a peer that offers it too,
    /// and accepts LZ4-compressed packets.
    pub lz4: bool,
    /// The same for zstd, preferred over LZ4 where both offer both.
    pub zstd: bool,
    /// The sender holds the receiver's offer for this session.
    pub has_your_offer: bool,
}

/// Why a received offer was not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OfferError {
    #[error("not a session offer")]
    NotAnOffer,
    #[error("offer shorter than its header or its stated body")]
    Truncated,
    #[error("offer without ChaCha20-Poly1305, which every fjord node must accept")]
    NoBaseCipher,
}

impl Offer {
    /// Whether `plaintext` is an extension this crate handles itself.
    pub fn is_protocol_extension(plaintext: &[u8]) -> bool {
        crate::extension::recipient_of(plaintext) == Some(Recipient::Protocol)
    }

    pub fn encode(&self) -> [u8; HEADER_LEN + OFFER_BODY_LEN] {
        let length = (OFFER_BODY_LEN as u16).to_be_bytes();
        let mut ciphers = CIPHER_CHACHA;
        if self.aes_256_gcm {
            ciphers |= CIPHER_AES;
        }
        let flags = if self.has_your_offer {
            FLAG_HAS_YOUR_OFFER
        } else {
            0
        };
        let mut compression = 0;
        if self.lz4 {
            compression |= COMPRESSION_LZ4;
        }
        if self.zstd {
            compression |= COMPRESSION_ZSTD;
        }
        [
            EXTENSION_MARKER,
            KIND_SESSION_OFFER,
            length[0],
            length[1],
            ciphers,
            flags,
            compression,
        ]
    }

    /// Reads an offer from an authenticated plaintext (WireGuard's zero
    /// padding may follow the body); never panics.
    pub fn decode(plaintext: &[u8]) -> Result<Self, OfferError> {
        let Some(&[marker, kind, length_high, length_low]) = plaintext.first_chunk::<HEADER_LEN>()
        else {
            return Err(OfferError::Truncated);
        };
        if marker != EXTENSION_MARKER || kind != KIND_SESSION_OFFER {
            return Err(OfferError::NotAnOffer);
        }
        let body_len = usize::from(u16::from_be_bytes([length_high, length_low]));
        let body = plaintext
            .get(HEADER_LEN..HEADER_LEN + body_len)
            .ok_or(OfferError::Truncated)?;
        let Some(&[ciphers, flags]) = body.first_chunk::<OFFER_BODY_MIN_LEN>() else {
            return Err(OfferError::Truncated);
        };
        if ciphers & CIPHER_CHACHA == 0 {
            return Err(OfferError::NoBaseCipher);
        }
        let compression = body.get(OFFER_BODY_MIN_LEN).copied().unwrap_or(0);
        Ok(Self {
            aes_256_gcm: ciphers & CIPHER_AES != 0,
            lz4: compression & COMPRESSION_LZ4 != 0,
            zstd: compression & COMPRESSION_ZSTD != 0,
            has_your_offer: flags & FLAG_HAS_YOUR_OFFER != 0,
        })
    }
}

/// What to do after a received offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OfferOutcome {
    /// Send our offer now (the peer lacks it, or this was its first).
    Answer,
    /// Nothing to send.
    Taken,
    /// A second offer of the session that differs from the first: ignored.
    Changed,
}

/// One session's negotiation, on one side. Pure state: the session owns
/// it and the peer sends what it asks for.
#[derive(Debug, Clone)]
pub struct Negotiation {
    policy: CipherPolicy,
    compression: CompressionPolicy,
    /// The peer marked its initiation, or sent an offer.
    peer_speaks_fjord: bool,
    /// When our offer last went, and how many times it went.
    last_sent: Option<Instant>,
    sends: u8,
    peer_has_our_offer: bool,
    /// The peer's first offer of this session.
    peer_offer: Option<Offer>,
    /// The lowest counter of an authenticated AES-256-GCM packet from the
    /// peer: its switch, above which ChaCha20-Poly1305 is refused.
    peer_switched_at: Option<u64>,
}

impl Negotiation {
    /// A new session's negotiation; `peer_marked` when the session came
    /// from a marked initiation (we are the responder).
    pub fn new(policy: CipherPolicy, peer_marked: bool) -> Self {
        Self {
            policy,
            compression: CompressionPolicy::Off,
            peer_speaks_fjord: peer_marked,
            last_sent: None,
            sends: 0,
            peer_has_our_offer: false,
            peer_offer: None,
            peer_switched_at: None,
        }
    }

    /// The same negotiation offering `compression` too.
    pub fn with_compression(mut self, compression: CompressionPolicy) -> Self {
        self.compression = compression;
        self
    }

    /// Our offer, if it is due at `now`: the peer speaks fjord, has not
    /// said it has our offer, and the last send is long enough ago. Call
    /// [`Negotiation::offer_sent`] once it is sealed.
    pub fn offer_due(&self, now: Instant) -> Option<Offer> {
        if !self.peer_speaks_fjord || self.peer_has_our_offer || self.sends >= MAX_OFFER_SENDS {
            return None;
        }
        let resend_due = self
            .last_sent
            .is_none_or(|last| now.saturating_duration_since(last) >= OFFER_RESEND_INTERVAL);
        resend_due.then(|| self.our_offer())
    }

    /// Our offer as it would go now.
    pub fn our_offer(&self) -> Offer {
        Offer {
            aes_256_gcm: self.policy.offers_aes(),
            lz4: self.compression.offers_lz4(),
            zstd: self.compression.offers_zstd(),
            has_your_offer: self.peer_offer.is_some(),
        }
    }

    pub fn offer_sent(&mut self, now: Instant) {
        self.last_sent = Some(now);
        self.sends = self.sends.saturating_add(1);
    }

    /// Takes the peer's offer.
    pub fn handle_offer(&mut self, offer: Offer) -> OfferOutcome {
        self.peer_speaks_fjord = true;
        if offer.has_your_offer {
            self.peer_has_our_offer = true;
        }
        let first = match self.peer_offer {
            None => {
                self.peer_offer = Some(offer);
                true
            }
            Some(first)
                if first.aes_256_gcm != offer.aes_256_gcm
                    || first.lz4 != offer.lz4
                    || first.zstd != offer.zstd =>
            {
                return OfferOutcome::Changed;
            }
            Some(_) => false,
        };
        if first || !offer.has_your_offer {
            OfferOutcome::Answer
        } else {
            OfferOutcome::Taken
        }
    }

    /// The cipher our data to the peer uses now.
    pub fn sending_cipher(&self) -> DataCipher {
        let agreed = self.policy.offers_aes() && self.peer_offer.is_some_and(|o| o.aes_256_gcm);
        if agreed {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        }
    }

    /// How our data to the peer is compressed: zstd where both offered
    /// it, else LZ4 where both offered that; `None`, not at all.
    pub fn sending_codec(&self) -> Option<Codec> {
        let offer = self.peer_offer?;
        if self.compression.offers_zstd() && offer.zstd {
            Some(Codec::Zstd)
        } else if self.compression.offers_lz4() && offer.lz4 {
            Some(Codec::Lz4)
        } else {
            None
        }
    }

    /// Whether our data to the peer is compressed.
    pub fn sending_compressed(&self) -> bool {
        self.sending_codec().is_some()
    }

    /// Whether the peer may send us packets compressed with `codec`: we
    /// offered it.
    pub fn accepts_compressed(&self, codec: Codec) -> bool {
        let offered = match codec {
            Codec::Lz4 => self.compression.offers_lz4(),
            Codec::Zstd => self.compression.offers_zstd(),
        };
        offered && self.sends > 0
    }

    /// Whether the peer may seal to us with AES-256-GCM: we offered it.
    pub fn accepts_aes(&self) -> bool {
        self.policy.offers_aes() && self.sends > 0
    }

    /// Whether a packet of `cipher` with `counter` may be opened.
    pub fn check_receive(&self, cipher: DataCipher, counter: u64) -> Result<(), CipherRefused> {
        match cipher {
            DataCipher::Aes256Gcm if !self.accepts_aes() => Err(CipherRefused::NotNegotiated),
            DataCipher::ChaCha20Poly1305
                if self.peer_switched_at.is_some_and(|switch| counter > switch) =>
            {
                Err(CipherRefused::Downgraded)
            }
            _ => Ok(()),
        }
    }

    /// A packet of `cipher` with `counter` authenticated.
    pub fn record_received(&mut self, cipher: DataCipher, counter: u64) {
        if cipher == DataCipher::Aes256Gcm {
            self.peer_switched_at = Some(self.peer_switched_at.map_or(counter, |k| k.min(counter)));
        }
    }

    /// Whether the peer has shown it speaks fjord in this session.
    pub fn peer_speaks_fjord(&self) -> bool {
        self.peer_speaks_fjord
    }
}

/// Why a data message's cipher was refused before or after opening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CipherRefused {
    #[error("AES-256-GCM in a session where we did not offer it")]
    NotNegotiated,
    #[error("ChaCha20-Poly1305 after the peer switched to AES-256-GCM")]
    Downgraded,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Instant {
        Instant::now()
    }

    #[test]
    fn offers_round_trip_and_ignore_what_later_versions_add() {
        for aes_256_gcm in [false, true] {
            for (lz4, zstd) in [(false, false), (true, false), (true, true), (false, true)] {
                for has_your_offer in [false, true] {
                    let offer = Offer {
                        aes_256_gcm,
                        lz4,
                        zstd,
                        has_your_offer,
                    };
                    let mut bytes = offer.encode().to_vec();
                    assert!(Offer::is_protocol_extension(&bytes));
                    assert_eq!(Offer::decode(&bytes), Ok(offer));
                    // WireGuard's padding behind the body.
                    bytes.extend_from_slice(&[0; 10]);
                    assert_eq!(Offer::decode(&bytes), Ok(offer));
                }
            }
        }
        // A longer body (a later version) with unknown bits set.
        let longer = [
            0x1f,
            0x40,
            0,
            5,
            0b1111_0011,
            0b1111_0001,
            0b1111_1001,
            9,
            9,
        ];
        assert_eq!(
            Offer::decode(&longer),
            Ok(Offer {
                aes_256_gcm: true,
                lz4: true,
                zstd: false,
                has_your_offer: true
            })
        );
        // The two-byte body of a fjord from before compression, with
        // WireGuard's padding behind it: no compression offered.
        let older = [0x1f, 0x40, 0, 2, 0b0000_0011, 0b0000_0001, 0, 0xff, 0xff];
        assert_eq!(
            Offer::decode(&older),
            Ok(Offer {
                aes_256_gcm: true,
                lz4: false,
                zstd: false,
                has_your_offer: true
            })
        );
    }

    #[test]
    fn malformed_offers_are_refused() {
        assert_eq!(Offer::decode(&[]), Err(OfferError::Truncated));
        assert_eq!(Offer::decode(&[0x1f, 0x40, 0]), Err(OfferError::Truncated));
        assert_eq!(
            Offer::decode(&[0x1f, 0x40, 0, 5, 1, 0]),
            Err(OfferError::Truncated)
        );
        assert_eq!(
            Offer::decode(&[0x1f, 0x40, 0, 1, 1]),
            Err(OfferError::Truncated)
        );
        assert_eq!(
            Offer::decode(&[0x1f, 0x05, 0, 2, 1, 0]),
            Err(OfferError::NotAnOffer)
        );
        assert_eq!(
            Offer::decode(&[0x1f, 0x40, 0, 2, 2, 0]),
            Err(OfferError::NoBaseCipher)
        );
        assert!(!Offer::is_protocol_extension(&[0x1f, 0x05]));
        assert!(!Offer::is_protocol_extension(&[0x45, 0x40]));
    }

    /// Two sides' negotiations, passing offers by hand.
    fn agree(responder: CipherPolicy, initiator: CipherPolicy) -> (Negotiation, Negotiation) {
        let at = now();
        let mut r = Negotiation::new(responder, true);
        let mut i = Negotiation::new(initiator, false);
        assert_eq!(
            i.offer_due(at),
            None,
            "the initiator waits for the mark's answer"
        );
        let first = r.offer_due(at).unwrap();
        r.offer_sent(at);
        assert!(!first.has_your_offer);
        assert_eq!(i.handle_offer(first), OfferOutcome::Answer);
        let answer = i.offer_due(at).unwrap();
        i.offer_sent(at);
        assert!(answer.has_your_offer);
        assert_eq!(r.handle_offer(answer), OfferOutcome::Answer);
        let last = r.our_offer();
        r.offer_sent(at);
        assert_eq!(i.handle_offer(last), OfferOutcome::Taken);
        assert_eq!(r.offer_due(at + Duration::from_secs(9)), None);
        assert_eq!(i.offer_due(at + Duration::from_secs(9)), None);
        (r, i)
    }

    #[test]
    fn both_with_aes_send_aes_both_ways() {
        let (r, i) = agree(CipherPolicy::OfferAes256Gcm, CipherPolicy::OfferAes256Gcm);
        assert_eq!(r.sending_cipher(), DataCipher::Aes256Gcm);
        assert_eq!(i.sending_cipher(), DataCipher::Aes256Gcm);
        assert!(r.accepts_aes() && i.accepts_aes());
    }

    #[test]
    fn one_without_aes_keeps_both_on_chacha() {
        for (r_policy, i_policy) in [
            (
                CipherPolicy::OfferAes256Gcm,
                CipherPolicy::ChaCha20Poly1305Only,
            ),
            (
                CipherPolicy::ChaCha20Poly1305Only,
                CipherPolicy::OfferAes256Gcm,
            ),
        ] {
            let (r, i) = agree(r_policy, i_policy);
            assert_eq!(r.sending_cipher(), DataCipher::ChaCha20Poly1305);
            assert_eq!(i.sending_cipher(), DataCipher::ChaCha20Poly1305);
        }
    }

    #[test]
    fn a_plain_peer_is_never_offered_anything() {
        let unmarked = Negotiation::new(CipherPolicy::OfferAes256Gcm, false);
        assert_eq!(unmarked.offer_due(now()), None);
        assert_eq!(unmarked.sending_cipher(), DataCipher::ChaCha20Poly1305);
        assert_eq!(
            unmarked.check_receive(DataCipher::Aes256Gcm, 0),
            Err(CipherRefused::NotNegotiated)
        );
    }

    #[test]
    fn an_unanswered_offer_goes_again_each_second_up_to_its_limit() {
        let at = now();
        let mut r = Negotiation::new(CipherPolicy::OfferAes256Gcm, true);
        let mut sends = 0;
        for tenth in 0..100 {
            let t = at + Duration::from_millis(100 * tenth);
            if r.offer_due(t).is_some() {
                r.offer_sent(t);
                sends += 1;
            }
        }
        assert_eq!(sends, MAX_OFFER_SENDS);
    }

    #[test]
    fn a_changed_offer_is_ignored() {
        let mut i = Negotiation::new(CipherPolicy::OfferAes256Gcm, false);
        let aes = Offer {
            aes_256_gcm: true,
            lz4: false,
            zstd: false,
            has_your_offer: false,
        };
        i.handle_offer(aes);
        let chacha_only = Offer {
            aes_256_gcm: false,
            ..aes
        };
        assert_eq!(i.handle_offer(chacha_only), OfferOutcome::Changed);
        assert_eq!(i.sending_cipher(), DataCipher::Aes256Gcm);
        let compressing = Offer { lz4: true, ..aes };
        assert_eq!(i.handle_offer(compressing), OfferOutcome::Changed);
        let zstd = Offer { zstd: true, ..aes };
        assert_eq!(i.handle_offer(zstd), OfferOutcome::Changed);
    }

    /// Two sides' negotiations with compression policies, passing offers
    /// by hand.
    fn agree_compression(
        responder: CompressionPolicy,
        initiator: CompressionPolicy,
    ) -> (Negotiation, Negotiation) {
        let at = now();
        let policy = CipherPolicy::default();
        let mut r = Negotiation::new(policy, true).with_compression(responder);
        let mut i = Negotiation::new(policy, false).with_compression(initiator);
        for codec in [Codec::Lz4, Codec::Zstd] {
            assert!(!r.accepts_compressed(codec) && !i.accepts_compressed(codec));
        }
        let first = r.offer_due(at).unwrap();
        r.offer_sent(at);
        i.handle_offer(first);
        let answer = i.offer_due(at).unwrap();
        i.offer_sent(at);
        r.handle_offer(answer);
        (r, i)
    }

    #[test]
    fn compression_needs_both_offers_and_is_accepted_only_where_offered() {
        use CompressionPolicy::{Lz4, Off, Zstd};
        let (r, i) = agree_compression(Lz4, Lz4);
        assert_eq!(
            (r.sending_codec(), i.sending_codec()),
            (Some(Codec::Lz4), Some(Codec::Lz4))
        );
        assert!(r.accepts_compressed(Codec::Lz4) && i.accepts_compressed(Codec::Lz4));
        assert!(!r.accepts_compressed(Codec::Zstd) && !i.accepts_compressed(Codec::Zstd));
        for (r_policy, i_policy) in [(Lz4, Off), (Off, Lz4), (Off, Off), (Zstd, Off)] {
            let (r, i) = agree_compression(r_policy, i_policy);
            assert!(!r.sending_compressed() && !i.sending_compressed());
            assert_eq!(r.accepts_compressed(Codec::Lz4), r_policy != Off);
            assert_eq!(i.accepts_compressed(Codec::Lz4), i_policy != Off);
        }
        // zstd where both chose it; LZ4, both ways, where one did.
        let (r, i) = agree_compression(Zstd, Zstd);
        assert_eq!(
            (r.sending_codec(), i.sending_codec()),
            (Some(Codec::Zstd), Some(Codec::Zstd))
        );
        assert!(r.accepts_compressed(Codec::Zstd) && r.accepts_compressed(Codec::Lz4));
        for (r_policy, i_policy) in [(Zstd, Lz4), (Lz4, Zstd)] {
            let (r, i) = agree_compression(r_policy, i_policy);
            assert_eq!(
                (r.sending_codec(), i.sending_codec()),
                (Some(Codec::Lz4), Some(Codec::Lz4))
            );
            assert_eq!(r.accepts_compressed(Codec::Zstd), r_policy == Zstd);
            assert_eq!(i.accepts_compressed(Codec::Zstd), i_policy == Zstd);
        }
        // A plain peer: nothing offered, nothing compressed either way.
        let plain = Negotiation::new(CipherPolicy::default(), false).with_compression(Zstd);
        assert!(!plain.sending_compressed());
        assert!(!plain.accepts_compressed(Codec::Lz4) && !plain.accepts_compressed(Codec::Zstd));
    }

    #[test]
    fn after_the_peers_switch_chacha_is_refused_above_it() {
        let (mut r, _) = agree(CipherPolicy::OfferAes256Gcm, CipherPolicy::OfferAes256Gcm);
        assert_eq!(r.check_receive(DataCipher::ChaCha20Poly1305, 50), Ok(()));
        r.record_received(DataCipher::Aes256Gcm, 40);
        assert_eq!(r.check_receive(DataCipher::ChaCha20Poly1305, 39), Ok(()));
        assert_eq!(
            r.check_receive(DataCipher::ChaCha20Poly1305, 41),
            Err(CipherRefused::Downgraded)
        );
        // A reordered earlier AES packet moves the switch down.
        r.record_received(DataCipher::Aes256Gcm, 30);
        assert_eq!(
            r.check_receive(DataCipher::ChaCha20Poly1305, 35),
            Err(CipherRefused::Downgraded)
        );
        assert_eq!(r.check_receive(DataCipher::Aes256Gcm, 99), Ok(()));
    }
}
