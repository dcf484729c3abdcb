//! WireGuard's Noise `IKpsk2_25519_ChaChaPoly_BLAKE2s` handshake.
//!
//! Message flow (I = initiator, R = responder; `ck` chaining key, `h` hash):
//!
//! ```text
//! I -> R  initiation: sender index, ephemeral Ei, AEAD(static Si), AEAD(TAI64N)
//!         ck/h mix: e, es, s, ss
//! R -> I  response:   sender index, receiver index, ephemeral Er, AEAD(empty)
//!         ck/h mix: e, ee, se, psk
//! both    (send, receive) = KDF2(ck, "") — the initiator's first key sends
//! ```
//!
//! Every AEAD in the handshake uses counter 0 and the running hash `h` as
//! associated data, so any altered byte makes the next decryption fail.
//! Every Diffie–Hellman result is checked for contribution: a low-order
//! point from a peer (which would give an all-zero secret) ends the
//! handshake with [`HandshakeError::LowOrderPoint`].
//!
//! This module is pure computation: indices, ephemeral secrets and the
//! timestamp come from the caller, and MAC1/MAC2 are added by
//! [`crate::cookie`]. Replay and flood checks on the timestamp are the
//! caller's, because they need per-peer state.

use std::sync::LazyLock;

use x25519_dalek::StaticSecret;
use zeroize::{Zeroize, Zeroizing};

use crate::crypto::{self, HASH_LEN, Hash, SymmetricKey, TAG_LEN, aead_open, aead_seal, hash};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::tai64n::{TAI64N_LEN, Tai64N};
use crate::wire::{
    HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, HandshakeInitiation, HandshakeResponse,
    MESSAGE_TYPE_HANDSHAKE_INITIATION, MESSAGE_TYPE_HANDSHAKE_RESPONSE, initiation, response,
};
use crate::x25519;

const CONSTRUCTION: &[u8] = b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s";
const IDENTIFIER: &[u8] = b"WireGuard v1 zx2c4 Jason@zx2c4.com";

/// Why a handshake message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HandshakeError {
    #[error("handshake field failed to decrypt")]
    DecryptionFailed,
    #[error("initiation from a public key that is not a configured peer")]
    UnknownPeer,
    #[error("Diffie-Hellman with a low-order point")]
    LowOrderPoint,
}

/// `C0 = HASH(CONSTRUCTION)` and `H0 = HASH(C0 || IDENTIFIER)`: constants,
/// hashed once per process instead of twice per handshake message.
fn initial_chain() -> (Hash, Hash) {
    static CHAIN: LazyLock<(Hash, Hash)> = LazyLock::new(|| {
        let chaining_key = hash(&[CONSTRUCTION]);
        let hash0 = hash(&[&chaining_key, IDENTIFIER]);
        (chaining_key, hash0)
    });
    *CHAIN
}

fn dh(secret: &StaticSecret, public: &[u8; 32]) -> Result<Zeroizing<[u8; 32]>, HandshakeError> {
    x25519::shared_secret(secret, public).ok_or(HandshakeError::LowOrderPoint)
}

/// Our own static key with the values derived from it once.
pub struct StaticIdentity {
    private: PrivateKey,
    public: PublicKey,
    /// `HASH(H0 || our public key)`: the responder's starting hash.
    responder_hash: Hash,
}

impl StaticIdentity {
    pub fn new(private: PrivateKey) -> Self {
        let public = private.public_key();
        let (_, hash0) = initial_chain();
        let responder_hash = hash(&[&hash0, public.as_bytes()]);
        Self {
            private,
            public,
            responder_hash,
        }
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    pub fn private_key(&self) -> &PrivateKey {
        &self.private
    }
}

/// A configured peer's keys, with the values derived from them once.
pub struct RemoteKeys {
    public: PublicKey,
    preshared: PresharedKey,
    /// `DH(our static, their static)`, cached; `None` for a low-order key,
    /// with which no handshake can succeed.
    static_static: Option<Zeroizing<[u8; 32]>>,
    /// `HASH(H0 || their public key)`: the initiator's starting hash.
    initiator_hash: Hash,
}

impl RemoteKeys {
    /// Keys for `public`; without our own `identity` (no private key yet)
    /// no handshake with this peer can succeed until [`RemoteKeys::rekey`].
    pub fn new(
        identity: Option<&StaticIdentity>,
        public: PublicKey,
        preshared: PresharedKey,
    ) -> Self {
        let static_static =
            identity.and_then(|identity| dh(identity.private.secret(), public.as_bytes()).ok());
        let (_, hash0) = initial_chain();
        let initiator_hash = hash(&[&hash0, public.as_bytes()]);
        Self {
            public,
            preshared,
            static_static,
            initiator_hash,
        }
    }

    pub fn public_key(&self) -> &PublicKey {
        &self.public
    }

    pub fn preshared_key(&self) -> &PresharedKey {
        &self.preshared
    }

    /// Recomputes the cached values after our private key changed.
    pub fn rekey(&mut self, identity: Option<&StaticIdentity>) {
        self.static_static = identity
            .and_then(|identity| dh(identity.private.secret(), self.public.as_bytes()).ok());
    }

    pub fn set_preshared_key(&mut self, preshared: PresharedKey) {
        self.preshared = preshared;
    }

    fn static_static(&self) -> Result<&[u8; 32], HandshakeError> {
        self.static_static
            .as_deref()
            .ok_or(HandshakeError::LowOrderPoint)
    }
}

/// Transport keys and indices produced by a completed handshake.
pub struct SessionKeys {
    pub sending: SymmetricKey,
    pub receiving: SymmetricKey,
    pub local_index: u32,
    pub remote_index: u32,
    pub is_initiator: bool,
}

/// What the initiator remembers between sending an initiation and
/// receiving the response.
pub struct InitiatorState {
    local_index: u32,
    chaining_key: SymmetricKey,
    hash: Hash,
    ephemeral: StaticSecret,
}

impl InitiatorState {
    pub fn local_index(&self) -> u32 {
        self.local_index
    }
}

/// A decrypted, not yet answered initiation.
pub struct ReceivedInitiation {
    pub remote_public: PublicKey,
    pub remote_index: u32,
    pub timestamp: Tai64N,
    chaining_key: SymmetricKey,
    hash: Hash,
    remote_ephemeral: [u8; 32],
}

fn seal_field(key: &[u8; HASH_LEN], h: &Hash, plaintext: &[u8], out: &mut [u8]) {
    let (body, tag) = out.split_at_mut(plaintext.len());
    body.copy_from_slice(plaintext);
    let sealed_tag = aead_seal(key, 0, body, h);
    tag[..TAG_LEN].copy_from_slice(&sealed_tag);
}

fn open_field<const N: usize>(
    key: &[u8; HASH_LEN],
    h: &Hash,
    sealed: &[u8],
) -> Result<Zeroizing<[u8; N]>, HandshakeError> {
    let mut plaintext = Zeroizing::new([0u8; N]);
    let (body, tag) = sealed.split_at(N);
    plaintext.copy_from_slice(body);
    let tag: &[u8; TAG_LEN] = tag
        .try_into()
        .map_err(|_| HandshakeError::DecryptionFailed)?;
    aead_open(key, 0, plaintext.as_mut(), tag, h).map_err(|_| HandshakeError::DecryptionFailed)?;
    Ok(plaintext)
}

/// Writes an initiation to `remote` into `out` (MACs left zero) and returns
/// the state needed to finish the handshake.
pub fn create_initiation(
    identity: &StaticIdentity,
    remote: &RemoteKeys,
    local_index: u32,
    mut ephemeral_secret: [u8; 32],
    timestamp: Tai64N,
    out: &mut [u8; HANDSHAKE_INITIATION_LEN],
) -> Result<InitiatorState, HandshakeError> {
    let ephemeral = StaticSecret::from(ephemeral_secret);
    ephemeral_secret.zeroize();
    let static_static = remote.static_static()?;
    let (chaining_key, _) = initial_chain();
    let mut h = remote.initiator_hash;
    let ephemeral_public = x25519::public_key(&ephemeral);

    out.fill(0);
    out[..4].copy_from_slice(&MESSAGE_TYPE_HANDSHAKE_INITIATION.to_le_bytes());
    out[initiation::SENDER..initiation::SENDER + 4].copy_from_slice(&local_index.to_le_bytes());
    out[initiation::EPHEMERAL..initiation::EPHEMERAL + 32].copy_from_slice(&ephemeral_public);

    let ck = crypto::kdf1(&chaining_key, &ephemeral_public);
    h = hash(&[&h, &ephemeral_public]);

    let es = dh(&ephemeral, remote.public.as_bytes())?;
    let (ck, key) = crypto::kdf2(&ck, es.as_ref());
    let static_field = &mut out[initiation::STATIC..initiation::STATIC + initiation::STATIC_LEN];
    seal_field(&key, &h, identity.public.as_bytes(), static_field);
    h = hash(&[&h, static_field]);

    let (ck, key) = crypto::kdf2(&ck, static_static);
    let timestamp_field =
        &mut out[initiation::TIMESTAMP..initiation::TIMESTAMP + initiation::TIMESTAMP_LEN];
    seal_field(&key, &h, timestamp.as_bytes(), timestamp_field);
    h = hash(&[&h, timestamp_field]);

    Ok(InitiatorState {
        local_index,
        chaining_key: ck,
        hash: h,
        ephemeral,
    })
}

/// Decrypts an initiation addressed to `identity`. `lookup` maps the
/// initiator's public key to its configured keys.
pub fn consume_initiation<'r>(
    identity: &StaticIdentity,
    message: &HandshakeInitiation<'_>,
    lookup: impl FnOnce(&PublicKey) -> Option<&'r RemoteKeys>,
) -> Result<ReceivedInitiation, HandshakeError> {
    let (chaining_key, _) = initial_chain();
    let mut h = identity.responder_hash;
    let remote_ephemeral = *message.ephemeral();

    let ck = crypto::kdf1(&chaining_key, &remote_ephemeral);
    h = hash(&[&h, &remote_ephemeral]);

    let es = dh(identity.private.secret(), &remote_ephemeral)?;
    let (ck, key) = crypto::kdf2(&ck, es.as_ref());
    let remote_static = open_field::<32>(&key, &h, message.encrypted_static())?;
    h = hash(&[&h, message.encrypted_static()]);
    let remote_public = PublicKey::from_bytes(*remote_static);

    let remote = lookup(&remote_public).ok_or(HandshakeError::UnknownPeer)?;
    let (ck, key) = crypto::kdf2(&ck, remote.static_static()?);
    let timestamp = open_field::<TAI64N_LEN>(&key, &h, message.encrypted_timestamp())?;
    h = hash(&[&h, message.encrypted_timestamp()]);

    Ok(ReceivedInitiation {
        remote_public,
        remote_index: message.sender_index(),
        timestamp: Tai64N::from_bytes(*timestamp),
        chaining_key: ck,
        hash: h,
        remote_ephemeral,
    })
}

/// Writes the response to `received` into `out` (MACs left zero) and
/// returns the responder's transport keys.
pub fn create_response(
    remote: &RemoteKeys,
    received: ReceivedInitiation,
    local_index: u32,
    mut ephemeral_secret: [u8; 32],
    out: &mut [u8; HANDSHAKE_RESPONSE_LEN],
) -> Result<SessionKeys, HandshakeError> {
    let ephemeral = StaticSecret::from(ephemeral_secret);
    ephemeral_secret.zeroize();
    let ephemeral_public = x25519::public_key(&ephemeral);
    let mut h = received.hash;

    out.fill(0);
    out[..4].copy_from_slice(&MESSAGE_TYPE_HANDSHAKE_RESPONSE.to_le_bytes());
    out[response::SENDER..response::SENDER + 4].copy_from_slice(&local_index.to_le_bytes());
    out[response::RECEIVER..response::RECEIVER + 4]
        .copy_from_slice(&received.remote_index.to_le_bytes());
    out[response::EPHEMERAL..response::EPHEMERAL + 32].copy_from_slice(&ephemeral_public);

    let ck = crypto::kdf1(&received.chaining_key, &ephemeral_public);
    h = hash(&[&h, &ephemeral_public]);
    let ee = dh(&ephemeral, &received.remote_ephemeral)?;
    let ck = crypto::kdf1(&ck, ee.as_ref());
    let se = dh(&ephemeral, remote.public.as_bytes())?;
    let ck = crypto::kdf1(&ck, se.as_ref());
    let (ck, tau, key) = crypto::kdf3(&ck, remote.preshared.as_bytes());
    h = hash(&[&h, tau.as_ref()]);
    let empty_field = &mut out[response::EMPTY..response::EMPTY + TAG_LEN];
    seal_field(&key, &h, &[], empty_field);

    let (initiator_sending, initiator_receiving) = crypto::kdf2(&ck, &[]);
    Ok(SessionKeys {
        sending: initiator_receiving,
        receiving: initiator_sending,
        local_index,
        remote_index: received.remote_index,
        is_initiator: false,
    })
}

/// Finishes the handshake from the initiator's side.
pub fn consume_response(
    identity: &StaticIdentity,
    remote: &RemoteKeys,
    state: &InitiatorState,
    message: &HandshakeResponse<'_>,
) -> Result<SessionKeys, HandshakeError> {
    let remote_ephemeral = *message.ephemeral();
    let ck = crypto::kdf1(&state.chaining_key, &remote_ephemeral);
    let mut h = hash(&[&state.hash, &remote_ephemeral]);
    let ee = dh(&state.ephemeral, &remote_ephemeral)?;
    let ck = crypto::kdf1(&ck, ee.as_ref());
    let se = dh(identity.private.secret(), &remote_ephemeral)?;
    let ck = crypto::kdf1(&ck, se.as_ref());
    let (ck, tau, key) = crypto::kdf3(&ck, remote.preshared.as_bytes());
    h = hash(&[&h, tau.as_ref()]);
    open_field::<0>(&key, &h, message.encrypted_nothing())?;

    let (sending, receiving) = crypto::kdf2(&ck, &[]);
    Ok(SessionKeys {
        sending,
        receiving,
        local_index: state.local_index,
        remote_index: message.sender_index(),
        is_initiator: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Message;
    use std::time::Duration;

    fn identity(seed: u8) -> StaticIdentity {
        StaticIdentity::new(PrivateKey::from_bytes([seed; 32]))
    }

    struct Pair {
        alice: StaticIdentity,
        bob: StaticIdentity,
        bob_seen_by_alice: RemoteKeys,
        alice_seen_by_bob: RemoteKeys,
    }

    impl Pair {
        /// Alice's initiation to Bob, with a fixed index, ephemeral key
        /// and timestamp.
        fn alice_initiates(&self) -> (InitiatorState, [u8; HANDSHAKE_INITIATION_LEN]) {
            let mut init = [0u8; HANDSHAKE_INITIATION_LEN];
            let state = create_initiation(
                &self.alice,
                &self.bob_seen_by_alice,
                1,
                [3; 32],
                Tai64N::default(),
                &mut init,
            )
            .unwrap();
            (state, init)
        }
    }

    fn pair(psk: PresharedKey) -> Pair {
        let alice = identity(1);
        let bob = identity(2);
        let bob_seen_by_alice = RemoteKeys::new(Some(&alice), *bob.public_key(), psk.clone());
        let alice_seen_by_bob = RemoteKeys::new(Some(&bob), *alice.public_key(), psk);
        Pair {
            alice,
            bob,
            bob_seen_by_alice,
            alice_seen_by_bob,
        }
    }

    fn handshake(p: &Pair) -> (SessionKeys, SessionKeys, Tai64N) {
        let stamp = Tai64N::from_unix(Duration::from_secs(1_700_000_000));
        let mut init = [0u8; HANDSHAKE_INITIATION_LEN];
        let state = create_initiation(
            &p.alice,
            &p.bob_seen_by_alice,
            11,
            [3; 32],
            stamp,
            &mut init,
        )
        .unwrap();
        let Ok(Message::HandshakeInitiation(view)) = Message::parse(&init) else {
            panic!("initiation must parse")
        };
        let received = consume_initiation(&p.bob, &view, |key| {
            (key == p.alice.public_key()).then_some(&p.alice_seen_by_bob)
        })
        .unwrap();
        assert_eq!(received.remote_index, 11);
        let mut resp = [0u8; HANDSHAKE_RESPONSE_LEN];
        let bob_keys =
            create_response(&p.alice_seen_by_bob, received, 22, [4; 32], &mut resp).unwrap();
        let Ok(Message::HandshakeResponse(view)) = Message::parse(&resp) else {
            panic!("response must parse")
        };
        assert_eq!(view.receiver_index(), 11);
        let alice_keys = consume_response(&p.alice, &p.bob_seen_by_alice, &state, &view).unwrap();
        (alice_keys, bob_keys, stamp)
    }

    #[test]
    fn both_sides_derive_mirrored_keys() {
        for psk in [PresharedKey::zero(), PresharedKey::from_bytes([9; 32])] {
            let (alice, bob, _) = handshake(&pair(psk));
            assert_eq!(*alice.sending, *bob.receiving);
            assert_eq!(*alice.receiving, *bob.sending);
            assert_ne!(*alice.sending, *alice.receiving);
            assert_eq!((alice.local_index, alice.remote_index), (11, 22));
            assert_eq!((bob.local_index, bob.remote_index), (22, 11));
            assert!(alice.is_initiator && !bob.is_initiator);
        }
    }

    #[test]
    fn responder_learns_timestamp_and_identity() {
        let p = pair(PresharedKey::zero());
        let stamp = Tai64N::from_unix(Duration::from_secs(5));
        let mut init = [0u8; HANDSHAKE_INITIATION_LEN];
        create_initiation(&p.alice, &p.bob_seen_by_alice, 1, [3; 32], stamp, &mut init).unwrap();
        let Ok(Message::HandshakeInitiation(view)) = Message::parse(&init) else {
            panic!()
        };
        let received = consume_initiation(&p.bob, &view, |_| Some(&p.alice_seen_by_bob)).unwrap();
        assert_eq!(received.timestamp, stamp);
        assert_eq!(received.remote_public, *p.alice.public_key());
    }

    #[test]
    fn unknown_initiator_is_refused() {
        let p = pair(PresharedKey::zero());
        let (_, init) = p.alice_initiates();
        let Ok(Message::HandshakeInitiation(view)) = Message::parse(&init) else {
            panic!()
        };
        assert_eq!(
            consume_initiation(&p.bob, &view, |_| None).err(),
            Some(HandshakeError::UnknownPeer)
        );
    }

    #[test]
    fn every_flipped_bit_of_the_encrypted_fields_is_detected() {
        let p = pair(PresharedKey::zero());
        let (_, init) = p.alice_initiates();
        for byte in initiation::EPHEMERAL..initiation::MAC1 {
            let mut tampered = init;
            tampered[byte] ^= 0x01;
            let Ok(Message::HandshakeInitiation(view)) = Message::parse(&tampered) else {
                panic!()
            };
            assert!(
                consume_initiation(&p.bob, &view, |_| Some(&p.alice_seen_by_bob)).is_err(),
                "flip at byte {byte} went unnoticed"
            );
        }
    }

    #[test]
    fn mismatched_preshared_keys_fail_at_the_initiator() {
        let mut p = pair(PresharedKey::zero());
        p.alice_seen_by_bob = RemoteKeys::new(
            Some(&p.bob),
            *p.alice.public_key(),
            PresharedKey::from_bytes([1; 32]),
        );
        let (state, init) = p.alice_initiates();
        let Ok(Message::HandshakeInitiation(view)) = Message::parse(&init) else {
            panic!()
        };
        let received = consume_initiation(&p.bob, &view, |_| Some(&p.alice_seen_by_bob)).unwrap();
        let mut resp = [0u8; HANDSHAKE_RESPONSE_LEN];
        create_response(&p.alice_seen_by_bob, received, 2, [4; 32], &mut resp).unwrap();
        let Ok(Message::HandshakeResponse(view)) = Message::parse(&resp) else {
            panic!()
        };
        assert_eq!(
            consume_response(&p.alice, &p.bob_seen_by_alice, &state, &view).err(),
            Some(HandshakeError::DecryptionFailed)
        );
    }

    #[test]
    fn low_order_ephemeral_is_refused() {
        let p = pair(PresharedKey::zero());
        let (_, mut init) = p.alice_initiates();
        // The all-zero point has order 1; DH with it gives zero.
        init[initiation::EPHEMERAL..initiation::EPHEMERAL + 32].fill(0);
        let Ok(Message::HandshakeInitiation(view)) = Message::parse(&init) else {
            panic!()
        };
        assert_eq!(
            consume_initiation(&p.bob, &view, |_| Some(&p.alice_seen_by_bob)).err(),
            Some(HandshakeError::LowOrderPoint)
        );
    }
}
