//! One transport session: the pair of keys from a completed handshake, the
//! sending counter and the receive replay window.
//!
//! Data message layout (all offsets from the datagram start):
//!
//! ```text
//! 0..4    type = 4 (LE)          4..8  receiver index (the peer's)
//! 8..16   counter (LE u64)       16..  AEAD(plaintext ‖ zero padding) ‖ tag
//! ```
//!
//! The AEAD is ChaCha20-Poly1305 (type 4), or AES-256-GCM (type 0x104)
//! once two fjord nodes agreed on it in this session: the session carries
//! its [`Negotiation`], builds the AES-256-GCM keys when the negotiation
//! needs them, and checks each received message's cipher against it
//! (`crate::negotiation` has the rules). The negotiation also says
//! whether the session's data may be compressed; the peer compresses and
//! decompresses (`crate::compression`), the session only seals and opens.
//!
//! The nonce is the counter, so a counter is never reused for sending and
//! the session refuses to send at [`REJECT_AFTER_MESSAGES`]. Both
//! directions expire after the timing's reject time
//! ([`crate::timers::REJECT_AFTER_TIME`] for WireGuard).
//!
//! Sealing and opening work in place: the caller's buffer holds the
//! plaintext at [`TRANSPORT_HEADER_LEN`] with room for padding and the tag
//! behind it ([`DATA_TAILROOM`]), so no packet is copied or allocated.
//!
//! Each operation runs in phases, so that a driver can spread the
//! encryption of a batch over several threads while the protocol state
//! stays with one: `prepare_seal` takes the counter and writes the header,
//! and the returned [`PendingSeal`] encrypts; `prepare_open` checks the
//! replay window, [`PendingOpen`] decrypts, and `commit_open` records the
//! counter once the tag authenticated. `seal` and `open` run the phases
//! back to back.
//!
//! The middle step borrows the session's key: a driver that runs it at
//! once (one thread) touches no reference count. Only a step handed to
//! other threads, which must outlive the borrow (the session may be
//! replaced before it runs), is detached ([`PendingSeal::detach`],
//! [`PendingOpen::detach`]) and then holds its own reference to the key.

use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use crate::aead::{DataCipher, TransportKey, aes_key_for};
use crate::compression::CompressionPolicy;
use crate::crypto::{SymmetricKey, TAG_LEN};
use crate::handshake::SessionKeys;
use crate::negotiation::{CipherPolicy, CipherRefused, Negotiation, Offer, OfferOutcome};
use crate::replay::{ReplayError, ReplayWindow};
use crate::timers::{REJECT_AFTER_MESSAGES, REKEY_AFTER_MESSAGES, Timing};
use crate::wire::{PADDING_MULTIPLE, TRANSPORT_HEADER_LEN, padded_len, write_transport_header};

/// Bytes a caller leaves in front of a plaintext packet for in-place sealing.
pub const DATA_HEADROOM: usize = TRANSPORT_HEADER_LEN;
/// Bytes a caller leaves behind a plaintext packet for padding and the tag.
pub const DATA_TAILROOM: usize = PADDING_MULTIPLE - 1 + TAG_LEN;

/// Why a packet could not be sealed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SealError {
    #[error("buffer lacks room for header, padding and tag")]
    BufferTooSmall,
    #[error("session has used every counter it may")]
    CounterExhausted,
}

/// Why a received data message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    #[error(transparent)]
    Replay(#[from] ReplayError),
    #[error("data message failed to authenticate")]
    AuthenticationFailed,
    #[error(transparent)]
    Cipher(#[from] CipherRefused),
}

/// In declaration order (`repr(C)`, on a cache line of its own): what
/// sealing a packet reads comes first, then what opening one reads,
/// then the rest; with many peers each line a packet touches is a miss.
#[repr(C, align(64))]
pub struct Session {
    next_send_counter: u64,
    /// The session's age limits, as instants (`None`: past the clock's
    /// range, never reached). Every packet checks them, and comparing two
    /// instants is a few instructions where an age (`now - created`) is a
    /// call into std.
    reject_at: Option<Instant>,
    rekey_at: Option<Instant>,
    /// Borrowed by the [`PendingSeal`]s and [`PendingOpen`]s of this
    /// session; shared with the [`DetachedSeal`]s and [`DetachedOpen`]s in
    /// flight on other threads.
    sending: Arc<TransportKey>,
    /// The AES-256-GCM twins of `sending` and `receiving`, built when the
    /// negotiation needs them: the sending one once both sides offered
    /// AES, the receiving one once we offered it. Shared like those.
    sending_aes: Option<Arc<TransportKey>>,
    remote_index: u32,
    is_initiator: bool,
    negotiation: Negotiation,
    receiving: Arc<TransportKey>,
    receiving_aes: Option<Arc<TransportKey>>,
    local_index: u32,
    replay: ReplayWindow,
    last_minute_rekey_at: Option<Instant>,
    /// What the twins are built from, derived at creation when our policy
    /// offers AES; wiped once both are built.
    aes_keys: Option<Box<AesKeys>>,
}

/// A session's AES-256-GCM keys before they are built ([`aes_key_for`]).
struct AesKeys {
    sending: SymmetricKey,
    receiving: SymmetricKey,
}

fn reached(deadline: Option<Instant>, now: Instant) -> bool {
    deadline.is_some_and(|deadline| now >= deadline)
}

impl Session {
    /// A session derived at `now`, aging by `timing`'s rules, negotiating
    /// by `policy`; `peer_marked` when it came from an initiation marked
    /// as fjord's (we are its responder).
    pub fn new(
        keys: &SessionKeys,
        now: Instant,
        timing: &Timing,
        policy: CipherPolicy,
        peer_marked: bool,
    ) -> Self {
        let aes_keys = (policy == CipherPolicy::OfferAes256Gcm).then(|| {
            Box::new(AesKeys {
                sending: aes_key_for(&keys.sending),
                receiving: aes_key_for(&keys.receiving),
            })
        });
        Self {
            sending: Arc::new(TransportKey::new(&keys.sending)),
            receiving: Arc::new(TransportKey::new(&keys.receiving)),
            sending_aes: None,
            receiving_aes: None,
            aes_keys,
            negotiation: Negotiation::new(policy, peer_marked),
            local_index: keys.local_index,
            remote_index: keys.remote_index,
            is_initiator: keys.is_initiator,
            reject_at: now.checked_add(timing.reject_after_time),
            rekey_at: now.checked_add(timing.rekey_after_time),
            last_minute_rekey_at: now.checked_add(
                timing
                    .reject_after_time
                    .saturating_sub(timing.keepalive_timeout + timing.rekey_timeout),
            ),
            next_send_counter: 0,
            replay: ReplayWindow::new(REJECT_AFTER_MESSAGES),
        }
    }

    /// The same session offering fjord peers `compression` too
    /// (`crate::compression`).
    pub fn with_compression(mut self, compression: CompressionPolicy) -> Self {
        self.negotiation = self.negotiation.with_compression(compression);
        self
    }

    pub fn local_index(&self) -> u32 {
        self.local_index
    }

    pub fn remote_index(&self) -> u32 {
        self.remote_index
    }

    pub fn is_initiator(&self) -> bool {
        self.is_initiator
    }

    /// The counter the next sealed packet will carry.
    pub fn next_send_counter(&self) -> u64 {
        self.next_send_counter
    }

    pub fn negotiation(&self) -> &Negotiation {
        &self.negotiation
    }

    /// The cipher the next sealed packet will use.
    pub fn sending_cipher(&self) -> DataCipher {
        if self.sending_aes.is_some() {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        }
    }

    /// Our offer went out at `now`: from now on the peer may seal to us
    /// with AES-256-GCM if we offered it.
    pub fn offer_sent(&mut self, now: Instant) {
        self.negotiation.offer_sent(now);
        if self.negotiation.accepts_aes()
            && self.receiving_aes.is_none()
            && let Some(keys) = &self.aes_keys
        {
            self.receiving_aes = Some(Arc::new(TransportKey::with_cipher(
                DataCipher::Aes256Gcm,
                &keys.receiving,
            )));
        }
        self.wipe_built_aes_keys();
    }

    /// Takes the peer's offer; the cipher we seal with follows it.
    pub fn handle_offer(&mut self, offer: Offer) -> OfferOutcome {
        let outcome = self.negotiation.handle_offer(offer);
        if self.negotiation.sending_cipher() == DataCipher::Aes256Gcm
            && self.sending_aes.is_none()
            && let Some(keys) = &self.aes_keys
        {
            self.sending_aes = Some(Arc::new(TransportKey::with_cipher(
                DataCipher::Aes256Gcm,
                &keys.sending,
            )));
        }
        self.wipe_built_aes_keys();
        outcome
    }

    fn wipe_built_aes_keys(&mut self) {
        if self.sending_aes.is_some() && self.receiving_aes.is_some() {
            self.aes_keys = None;
        }
    }

    fn expired(&self, now: Instant) -> bool {
        reached(self.reject_at, now)
    }

    /// Whether an initiator should start a new handshake after sending on
    /// this session: it is REKEY_AFTER_TIME old or has used its counters.
    pub fn wants_rekey_after_send(&self, now: Instant) -> bool {
        self.is_initiator
            && (reached(self.rekey_at, now) || self.next_send_counter > REKEY_AFTER_MESSAGES)
    }

    /// Whether an initiator receiving on this session should handshake
    /// once more before it expires (the session is REJECT_AFTER_TIME -
    /// KEEPALIVE_TIMEOUT - REKEY_TIMEOUT old), so that a peer that only
    /// receives keeps a session.
    pub fn wants_rekey_after_receive(&self, now: Instant) -> bool {
        self.is_initiator && reached(self.last_minute_rekey_at, now)
    }

    pub fn can_send(&self, now: Instant) -> bool {
        !self.expired(now) && self.next_send_counter < REJECT_AFTER_MESSAGES
    }

    pub fn can_receive(&self, now: Instant) -> bool {
        !self.expired(now)
    }

    /// Seals the `payload_len` plaintext bytes at `buf[DATA_HEADROOM..]`,
    /// padded for an interface of `mtu` bytes, and returns the datagram
    /// length: both phases at once.
    pub fn seal(
        &mut self,
        buf: &mut [u8],
        payload_len: usize,
        mtu: usize,
    ) -> Result<usize, SealError> {
        let (total, pending) = self.prepare_seal(buf, payload_len, mtu)?;
        pending.seal(buf)?;
        Ok(total)
    }

    /// The first phase of sealing: takes a counter, writes the header and
    /// the padding, and returns the datagram length with the encryption to
    /// run next (at once, or [detached](PendingSeal::detach) for another
    /// thread).
    pub fn prepare_seal(
        &mut self,
        buf: &mut [u8],
        payload_len: usize,
        mtu: usize,
    ) -> Result<(usize, PendingSeal<'_>), SealError> {
        let (total, ticket) = self.take_counter(buf, payload_len, mtu)?;
        Ok((total, ticket.with_key(self)))
    }

    /// Takes the next counter and writes the header and the padding:
    /// returns the datagram length and what the encryption needs but the
    /// key, which the caller attaches once it has finished changing the
    /// peer ([`SealTicket::with_key`]).
    pub(crate) fn take_counter(
        &mut self,
        buf: &mut [u8],
        payload_len: usize,
        mtu: usize,
    ) -> Result<(usize, SealTicket), SealError> {
        let padded = padded_len(payload_len, mtu);
        let total = TRANSPORT_HEADER_LEN + padded + TAG_LEN;
        if buf.len() < total {
            return Err(SealError::BufferTooSmall);
        }
        let counter = self.next_send_counter;
        if counter >= REJECT_AFTER_MESSAGES {
            return Err(SealError::CounterExhausted);
        }
        self.next_send_counter += 1;
        let (header, rest) = buf.split_at_mut(TRANSPORT_HEADER_LEN);
        rest[payload_len..padded].fill(0);
        // Invariant: split_at_mut(TRANSPORT_HEADER_LEN) gives exactly that many bytes.
        let header: &mut [u8; TRANSPORT_HEADER_LEN] = header.try_into().expect("header split");
        let cipher = self.sending_cipher();
        write_transport_header(header, self.remote_index, counter, cipher);
        Ok((
            total,
            SealTicket {
                counter,
                padded_len: padded,
                cipher,
            },
        ))
    }

    /// Authenticates and decrypts the data message in `datagram` (already
    /// classified, so at least header plus tag long) in place, and returns
    /// where its padded plaintext lies: all three phases at once.
    pub fn open(
        &mut self,
        counter: u64,
        cipher: DataCipher,
        datagram: &mut [u8],
    ) -> Result<Range<usize>, OpenError> {
        if !self.prepare_open(counter, cipher)?.open(datagram) {
            return Err(OpenError::AuthenticationFailed);
        }
        self.commit_open(counter, cipher, datagram.len())
    }

    /// The first phase of [`Session::open`]: refuses a counter the replay
    /// window has seen and a cipher the negotiation does not allow, and
    /// returns the decryption to run next (at once, or
    /// [detached](PendingOpen::detach) for another thread).
    pub fn prepare_open(
        &self,
        counter: u64,
        cipher: DataCipher,
    ) -> Result<PendingOpen<'_>, OpenError> {
        self.replay.check(counter)?;
        self.negotiation.check_receive(cipher, counter)?;
        let key = match cipher {
            DataCipher::ChaCha20Poly1305 => &self.receiving,
            DataCipher::Aes256Gcm => self
                .receiving_aes
                .as_ref()
                .ok_or(CipherRefused::NotNegotiated)?,
        };
        Ok(PendingOpen {
            key,
            counter,
            cipher,
        })
    }

    /// The last phase of [`Session::open`], after the decryption
    /// authenticated: records the counter (refusing it if an earlier
    /// packet of the same batch carried it too, or switched the peer to
    /// another cipher) and returns where the padded plaintext of the
    /// `datagram_len`-byte datagram lies.
    pub fn commit_open(
        &mut self,
        counter: u64,
        cipher: DataCipher,
        datagram_len: usize,
    ) -> Result<Range<usize>, OpenError> {
        let body_end = datagram_len
            .checked_sub(TAG_LEN)
            .filter(|end| *end >= TRANSPORT_HEADER_LEN)
            .ok_or(OpenError::AuthenticationFailed)?;
        self.negotiation.check_receive(cipher, counter)?;
        self.replay.accept(counter)?;
        self.negotiation.record_received(cipher, counter);
        Ok(TRANSPORT_HEADER_LEN..body_end)
    }
}

/// Encrypts the body of the datagram in `buf` in place and appends the tag.
fn seal_with(
    key: &TransportKey,
    counter: u64,
    padded_len: usize,
    buf: &mut [u8],
) -> Result<(), SealError> {
    let body_end = TRANSPORT_HEADER_LEN + padded_len;
    let Some(datagram) = buf.get_mut(..body_end + TAG_LEN) else {
        return Err(SealError::BufferTooSmall);
    };
    let (head, tail) = datagram.split_at_mut(body_end);
    let tag = key.seal_in_place(counter, &mut head[TRANSPORT_HEADER_LEN..]);
    tail.copy_from_slice(&tag);
    Ok(())
}

/// Decrypts `datagram` (header, ciphertext, tag) in place; `false` if it
/// does not authenticate (or is too short to hold a tag).
fn open_with(key: &TransportKey, counter: u64, datagram: &mut [u8]) -> bool {
    let Some(body_end) = datagram
        .len()
        .checked_sub(TAG_LEN)
        .filter(|end| *end >= TRANSPORT_HEADER_LEN)
    else {
        return false;
    };
    let (head, tag) = datagram.split_at_mut(body_end);
    let Ok(tag) = <&[u8; TAG_LEN]>::try_from(&*tag) else {
        return false;
    };
    key.open_in_place(counter, &mut head[TRANSPORT_HEADER_LEN..], tag)
        .is_ok()
}

/// What sealing a prepared datagram needs but the key: the peer takes the
/// counter while it still changes its own state (timers, a rekey), and
/// attaches the key, a borrow of the session, after that.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SealTicket {
    counter: u64,
    padded_len: usize,
    /// The cipher the header announces.
    cipher: DataCipher,
}

impl SealTicket {
    /// The encryption, with the key of `session`: the session whose
    /// counter this ticket took.
    pub(crate) fn with_key(self, session: &Session) -> PendingSeal<'_> {
        // A ticket says AES only when the session had its key; the
        // session never drops a built key.
        let key = match (self.cipher, &session.sending_aes) {
            (DataCipher::Aes256Gcm, Some(aes)) => aes,
            _ => &session.sending,
        };
        PendingSeal {
            key,
            counter: self.counter,
            padded_len: self.padded_len,
        }
    }
}

/// The encryption of one prepared datagram, borrowing its session's key:
/// run it at once, or [`detach`](PendingSeal::detach) it for another
/// thread.
#[must_use = "a prepared datagram leaves unencrypted unless it is sealed"]
pub struct PendingSeal<'k> {
    key: &'k Arc<TransportKey>,
    counter: u64,
    padded_len: usize,
}

impl PendingSeal<'_> {
    /// Encrypts, in place, the datagram prepared in `buf` and appends its
    /// tag. Taken by value: sealing twice would encrypt the ciphertext
    /// again under the same nonce.
    #[inline]
    pub fn seal(self, buf: &mut [u8]) -> Result<(), SealError> {
        seal_with(self.key, self.counter, self.padded_len, buf)
    }

    /// The same encryption holding its own reference to the key, so that
    /// it can wait for another thread while the session changes or goes.
    pub fn detach(self) -> DetachedSeal {
        DetachedSeal {
            key: Arc::clone(self.key),
            counter: self.counter,
            padded_len: self.padded_len,
        }
    }
}

/// A [`PendingSeal`] that holds its own reference to the key, to run on
/// any thread.
pub struct DetachedSeal {
    key: Arc<TransportKey>,
    counter: u64,
    padded_len: usize,
}

impl DetachedSeal {
    /// Encrypts, in place, the datagram prepared in `buf` and appends its
    /// tag; run it once.
    #[inline]
    pub fn seal(&self, buf: &mut [u8]) -> Result<(), SealError> {
        seal_with(&self.key, self.counter, self.padded_len, buf)
    }
}

/// The decryption of one received data message, borrowing its session's
/// key: run it at once, or [`detach`](PendingOpen::detach) it for another
/// thread.
pub struct PendingOpen<'k> {
    key: &'k Arc<TransportKey>,
    counter: u64,
    cipher: DataCipher,
}

impl PendingOpen<'_> {
    /// Decrypts `datagram` (header, ciphertext, tag) in place; `false` if
    /// it does not authenticate (or is too short to hold a tag).
    #[inline]
    pub fn open(self, datagram: &mut [u8]) -> bool {
        open_with(self.key, self.counter, datagram)
    }

    /// The counter the data message carries.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The cipher it is opened with.
    pub fn cipher(&self) -> DataCipher {
        self.cipher
    }

    /// The same decryption holding its own reference to the key, so that
    /// it can wait for another thread while the session changes or goes.
    pub fn detach(self) -> DetachedOpen {
        DetachedOpen {
            key: Arc::clone(self.key),
            counter: self.counter,
            cipher: self.cipher,
        }
    }
}

/// A [`PendingOpen`] that holds its own reference to the key, to run on
/// any thread.
pub struct DetachedOpen {
    key: Arc<TransportKey>,
    counter: u64,
    cipher: DataCipher,
}

impl DetachedOpen {
    /// Decrypts `datagram` (header, ciphertext, tag) in place; `false` if
    /// it does not authenticate (or is too short to hold a tag).
    #[inline]
    pub fn open(&self, datagram: &mut [u8]) -> bool {
        open_with(&self.key, self.counter, datagram)
    }

    /// The counter the data message carries.
    pub fn counter(&self) -> u64 {
        self.counter
    }

    /// The cipher it is opened with.
    pub fn cipher(&self) -> DataCipher {
        self.cipher
    }
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("local_index", &self.local_index)
            .field("remote_index", &self.remote_index)
            .field("is_initiator", &self.is_initiator)
            .field("next_send_counter", &self.next_send_counter)
            .field("sending_cipher", &self.sending_cipher())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timers::REJECT_AFTER_TIME;
    use crate::wire::{Message, TRANSPORT_MIN_LEN};
    use zeroize::Zeroizing;

    fn pair(now: Instant) -> (Session, Session) {
        pair_with(now, CipherPolicy::ChaCha20Poly1305Only)
    }

    /// An initiator's and a responder's session (the initiation was marked).
    fn pair_with(now: Instant, policy: CipherPolicy) -> (Session, Session) {
        let a = SessionKeys {
            sending: Zeroizing::new([1; 32]),
            receiving: Zeroizing::new([2; 32]),
            local_index: 10,
            remote_index: 20,
            is_initiator: true,
        };
        let b = SessionKeys {
            sending: Zeroizing::new([2; 32]),
            receiving: Zeroizing::new([1; 32]),
            local_index: 20,
            remote_index: 10,
            is_initiator: false,
        };
        (
            Session::new(&a, now, &Timing::default(), policy, false),
            Session::new(&b, now, &Timing::default(), policy, true),
        )
    }

    fn seal_text(session: &mut Session, text: &[u8]) -> Vec<u8> {
        let mut buf = vec![0u8; DATA_HEADROOM + text.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..DATA_HEADROOM + text.len()].copy_from_slice(text);
        let len = session.seal(&mut buf, text.len(), 1420).unwrap();
        buf.truncate(len);
        buf
    }

    fn open(session: &mut Session, datagram: &mut [u8]) -> Result<Vec<u8>, OpenError> {
        let Ok(Message::TransportData(view)) = Message::parse(datagram) else {
            panic!()
        };
        let (counter, cipher) = (view.counter(), view.cipher());
        session
            .open(counter, cipher, datagram)
            .map(|range| datagram[range].to_vec())
    }

    #[test]
    fn seal_pads_and_open_recovers() {
        let now = Instant::now();
        let (mut a, mut b) = pair(now);
        let mut datagram = seal_text(&mut a, b"hello");
        assert_eq!(datagram.len(), TRANSPORT_HEADER_LEN + 16 + TAG_LEN);
        assert_eq!(&datagram[4..8], &20u32.to_le_bytes());
        let plain = open(&mut b, &mut datagram).unwrap();
        assert_eq!(&plain[..5], b"hello");
        assert!(plain[5..].iter().all(|&b| b == 0));
    }

    #[test]
    fn keepalive_is_header_and_tag() {
        let now = Instant::now();
        let (mut a, mut b) = pair(now);
        let mut datagram = seal_text(&mut a, b"");
        assert_eq!(datagram.len(), TRANSPORT_MIN_LEN);
        assert!(open(&mut b, &mut datagram).unwrap().is_empty());
    }

    #[test]
    fn tampered_replayed_and_reordered() {
        let now = Instant::now();
        let (mut a, mut b) = pair(now);
        let first = seal_text(&mut a, b"one");
        let second = seal_text(&mut a, b"two");
        let mut tampered = first.clone();
        tampered[20] ^= 0x80;
        assert_eq!(
            open(&mut b, &mut tampered),
            Err(OpenError::AuthenticationFailed)
        );
        // Reordered within the window: second before first, both accepted.
        assert!(open(&mut b, &mut second.clone()).is_ok());
        assert!(open(&mut b, &mut first.clone()).is_ok());
        assert_eq!(
            open(&mut b, &mut first.clone()),
            Err(OpenError::Replay(ReplayError::Replayed))
        );
    }

    #[test]
    fn a_forged_counter_does_not_move_the_window() {
        let now = Instant::now();
        let (mut a, mut b) = pair(now);
        let mut forged = seal_text(&mut a, b"x");
        forged[8..16].copy_from_slice(&1_000_000u64.to_le_bytes());
        assert_eq!(
            open(&mut b, &mut forged),
            Err(OpenError::AuthenticationFailed)
        );
        let genuine = seal_text(&mut a, b"y");
        assert!(open(&mut b, &mut genuine.clone()).is_ok());
    }

    #[test]
    fn too_old_counter_is_refused() {
        let now = Instant::now();
        let (mut a, mut b) = pair(now);
        let old = seal_text(&mut a, b"old");
        for _ in 0..crate::replay::REPLAY_WINDOW_SIZE + 1 {
            seal_text(&mut a, b"");
        }
        let newest = seal_text(&mut a, b"new");
        assert!(open(&mut b, &mut newest.clone()).is_ok());
        assert_eq!(
            open(&mut b, &mut old.clone()),
            Err(OpenError::Replay(ReplayError::TooOld))
        );
    }

    #[test]
    fn sessions_expire() {
        let now = Instant::now();
        let (a, _) = pair(now);
        assert!(a.can_send(now + REJECT_AFTER_TIME - std::time::Duration::from_millis(1)));
        assert!(!a.can_send(now + REJECT_AFTER_TIME));
        assert!(!a.can_receive(now + REJECT_AFTER_TIME));
    }

    /// Runs the offer exchange between two sessions by hand.
    fn negotiate(initiator: &mut Session, responder: &mut Session, now: Instant) {
        let first = responder.negotiation().offer_due(now).unwrap();
        responder.offer_sent(now);
        initiator.handle_offer(first);
        let answer = initiator.negotiation().offer_due(now).unwrap();
        initiator.offer_sent(now);
        responder.handle_offer(answer);
    }

    #[test]
    fn negotiated_sessions_seal_and_open_with_aes() {
        let now = Instant::now();
        let (mut a, mut b) = pair_with(now, CipherPolicy::OfferAes256Gcm);
        let mut before = seal_text(&mut a, b"before");
        assert_eq!(before[0..4], [4, 0, 0, 0]);
        negotiate(&mut a, &mut b, now);
        assert_eq!(a.sending_cipher(), DataCipher::Aes256Gcm);
        assert_eq!(b.sending_cipher(), DataCipher::Aes256Gcm);
        let mut after = seal_text(&mut a, b"after");
        assert_eq!(after[0..4], [4, 1, 0, 0]);
        assert_eq!(&open(&mut b, &mut after).unwrap()[..5], b"after");
        // In flight before the switch, below it: still taken.
        assert_eq!(&open(&mut b, &mut before).unwrap()[..6], b"before");
        let mut back = seal_text(&mut b, b"back");
        assert_eq!(&open(&mut a, &mut back).unwrap()[..4], b"back");
    }

    #[test]
    fn chacha_after_the_switch_and_unoffered_aes_are_refused() {
        let now = Instant::now();
        let (mut a, mut b) = pair_with(now, CipherPolicy::OfferAes256Gcm);
        negotiate(&mut a, &mut b, now);
        let mut switched = seal_text(&mut a, b"aes");
        open(&mut b, &mut switched).unwrap();
        // A peer that claims AES and then seals with ChaCha20-Poly1305
        // (its header says type 4): refused, whatever the tag says.
        let keys_a = SessionKeys {
            sending: Zeroizing::new([1; 32]),
            receiving: Zeroizing::new([2; 32]),
            local_index: 10,
            remote_index: 20,
            is_initiator: true,
        };
        let mut chacha_a = Session::new(
            &keys_a,
            now,
            &Timing::default(),
            CipherPolicy::default(),
            false,
        );
        chacha_a.next_send_counter = a.next_send_counter;
        let mut downgraded = seal_text(&mut chacha_a, b"chacha");
        assert_eq!(
            open(&mut b, &mut downgraded),
            Err(OpenError::Cipher(CipherRefused::Downgraded))
        );
        // AES toward a side that never offered it.
        let (_, mut chacha_only) = pair(now);
        let mut aes_datagram = seal_text(&mut a, b"aes again");
        assert_eq!(
            open(&mut chacha_only, &mut aes_datagram),
            Err(OpenError::Cipher(CipherRefused::NotNegotiated))
        );
    }

    #[test]
    fn buffer_too_small() {
        let (mut a, _) = pair(Instant::now());
        let mut buf = [0u8; 40];
        assert_eq!(a.seal(&mut buf, 10, 1420), Err(SealError::BufferTooSmall));
    }
}
