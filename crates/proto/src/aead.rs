//! The transport-data AEADs, with WireGuard's counter nonce and empty
//! associated data, sealing and opening in place.
//!
//! ChaCha20-Poly1305 is WireGuard's, used with every peer. AES-256-GCM is
//! fjord's, used only between two fjord nodes that both have hardware AES
//! and agreed on it inside their session ([`crate::negotiation`]); its key
//! for a direction is derived from that direction's ChaCha20-Poly1305 key
//! with a fjord-specific label ([`aes_key_for`]), so no key is ever used
//! under two ciphers.
//!
//! This is the hot path's only cryptography, so it sits behind one small
//! type with two operations. The backend is ring; the `aws-lc-rs` feature
//! swaps in aws-lc-rs, so that `cargo bench -p fjord-mesh --bench
//! datapath` can compare the two on a machine's own AES. Measured on this
//! project's 2-vCPU AMD EPYC (VAES, AVX-512): equal at 1,420 bytes (ring
//! 41.7, aws-lc-rs 41.0 Gbit/s, one seal per call over 64 buffers), ring
//! 16 % ahead at 64 bytes (12.2 against 10.5 Mpps), and in the node's own
//! path ring as fast or faster (README, "Choosing the AEAD crate").

use std::mem::MaybeUninit;

#[cfg(feature = "aws-lc-rs")]
use aws_lc_rs::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, UnboundKey};
#[cfg(not(feature = "aws-lc-rs"))]
use ring::aead::{AES_256_GCM, Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::crypto::{AuthenticationFailed, SymmetricKey, TAG_LEN, counter_nonce, kdf1};

/// The label mixed into a session key to derive its AES-256-GCM twin.
const AES_KEY_LABEL: &[u8] = b"fjord transport data aes-256-gcm v1";

/// A transport-data cipher, as its id travels in the data header's second
/// byte (see [`crate::wire::MESSAGE_TYPE_TRANSPORT_DATA_AES`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum DataCipher {
    /// WireGuard's cipher; every session starts with it.
    #[default]
    ChaCha20Poly1305,
    /// fjord to fjord, both with hardware AES, after agreeing.
    Aes256Gcm,
}

impl DataCipher {
    /// The name `fjord show` and the configuration use.
    pub fn name(self) -> &'static str {
        match self {
            Self::ChaCha20Poly1305 => "chacha20-poly1305",
            Self::Aes256Gcm => "aes-256-gcm",
        }
    }
}

impl std::fmt::Display for DataCipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether this CPU has the instructions that make AES-256-GCM fast and
/// constant-time (AES rounds and carry-less multiplication). Without them
/// ring falls back to a slower bitsliced AES, and ChaCha20-Poly1305 is the
/// better cipher. The one platform query of this crate: the protocol never
/// calls it, the driver does and passes the answer in
/// ([`crate::Device::set_cipher_policy`]).
pub fn hardware_aes() -> bool {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    {
        std::arch::is_x86_feature_detected!("aes")
            && std::arch::is_x86_feature_detected!("pclmulqdq")
    }
    #[cfg(target_arch = "aarch64")]
    {
        std::arch::is_aarch64_feature_detected!("aes")
            && std::arch::is_aarch64_feature_detected!("pmull")
    }
    #[cfg(not(any(target_arch = "x86", target_arch = "x86_64", target_arch = "aarch64")))]
    {
        false
    }
}

/// The AES-256-GCM key of the direction whose ChaCha20-Poly1305 key is
/// `chacha_key`: a PRF of it under a fjord label (WireGuard's KDF1, i.e.
/// HKDF-BLAKE2s), so knowing one key reveals nothing of the other.
pub fn aes_key_for(chacha_key: &[u8; 32]) -> SymmetricKey {
    kdf1(chacha_key, AES_KEY_LABEL)
}

/// One direction's transport key, wiped when dropped.
///
/// ring keeps the key (ChaCha20's key, AES's round keys and GHASH table)
/// in plain memory with no `Drop`, so a session's keys would outlive it in
/// freed memory. Held as `MaybeUninit` because all-zero is not a valid
/// `LessSafeKey` (it holds a reference); it is initialised from
/// construction until `drop` wipes it. Sessions keep their keys behind an
/// `Arc`, so the key does not move once built (ring builds it on the
/// stack, where a transient copy is left to be overwritten). aws-lc-rs
/// keeps its key in memory of its C library, which wipes it on freeing
/// (`OPENSSL_free` cleanses what it frees), so there the key is dropped
/// as usual.
pub struct TransportKey(MaybeUninit<LessSafeKey>);

impl TransportKey {
    /// A ChaCha20-Poly1305 key (WireGuard's transport cipher).
    pub fn new(key: &[u8; 32]) -> Self {
        Self::with_cipher(DataCipher::ChaCha20Poly1305, key)
    }

    pub fn with_cipher(cipher: DataCipher, key: &[u8; 32]) -> Self {
        let algorithm = match cipher {
            DataCipher::ChaCha20Poly1305 => &CHACHA20_POLY1305,
            DataCipher::Aes256Gcm => &AES_256_GCM,
        };
        // Invariant: both algorithms take exactly 32-byte keys.
        let unbound = UnboundKey::new(algorithm, key).expect("32-byte AEAD key");
        Self(MaybeUninit::new(LessSafeKey::new(unbound)))
    }

    fn key(&self) -> &LessSafeKey {
        // SAFETY: initialised in `with_cipher`, the only constructor, and
        // wiped only in `drop`, after which nothing can borrow it.
        unsafe { self.0.assume_init_ref() }
    }

    /// Encrypts `buf` in place and returns the tag.
    pub fn seal_in_place(&self, counter: u64, buf: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = Nonce::assume_unique_for_key(counter_nonce(counter));
        // Invariant: ring fails only for inputs above the AEAD's length
        // limit (64 GiB for GCM, 256 GiB for ChaCha20); packets are at
        // most 64 KiB.
        let tag = self
            .key()
            .seal_in_place_separate_tag(nonce, Aad::empty(), buf)
            .expect("packets are far below the AEAD length limit");
        let mut out = [0u8; TAG_LEN];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Decrypts `buf` in place if `tag` authenticates it.
    pub fn open_in_place(
        &self,
        counter: u64,
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), AuthenticationFailed> {
        let nonce = Nonce::assume_unique_for_key(counter_nonce(counter));
        #[cfg(feature = "aws-lc-rs")]
        let opened = self
            .key()
            .open_in_place_separate_tag(nonce, Aad::empty(), tag, buf);
        #[cfg(not(feature = "aws-lc-rs"))]
        let opened =
            self.key()
                .open_in_place_separate_tag(nonce, Aad::empty(), Tag::from(*tag), buf, 0..);
        opened.map(|_| ()).map_err(|_| AuthenticationFailed)
    }
}

impl Drop for TransportKey {
    fn drop(&mut self) {
        // ring: a volatile write of zeros over every byte, which the
        // compiler may not remove as a dead store.
        #[cfg(not(feature = "aws-lc-rs"))]
        zeroize::Zeroize::zeroize(&mut self.0);
        // SAFETY: initialised since `with_cipher`, dropped once, here.
        #[cfg(feature = "aws-lc-rs")]
        unsafe {
            self.0.assume_init_drop()
        };
    }
}

impl std::fmt::Debug for TransportKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TransportKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backend_matches_the_handshake_aead() {
        // Both AEAD implementations must agree on WireGuard's nonce layout.
        let key = [0x42u8; 32];
        let mut by_ring = *b"sixteen byte msg";
        let mut by_rustcrypto = by_ring;
        let tag_ring = TransportKey::new(&key).seal_in_place(77, &mut by_ring);
        let tag_rc = crate::crypto::aead_seal(&key, 77, &mut by_rustcrypto, &[]);
        assert_eq!(by_ring, by_rustcrypto);
        assert_eq!(tag_ring, tag_rc);
        TransportKey::new(&key)
            .open_in_place(77, &mut by_ring, &tag_ring)
            .unwrap();
        assert_eq!(&by_ring, b"sixteen byte msg");
    }

    #[test]
    fn open_refuses_wrong_counter() {
        for cipher in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            let key = TransportKey::with_cipher(cipher, &[1u8; 32]);
            let mut buf = [7u8; 40];
            let tag = key.seal_in_place(1, &mut buf);
            assert!(key.open_in_place(2, &mut buf, &tag).is_err());
        }
    }

    #[test]
    fn a_packet_sealed_under_one_cipher_does_not_open_under_the_other() {
        let chacha_key = [9u8; 32];
        let aes_key = aes_key_for(&chacha_key);
        assert_ne!(*aes_key, chacha_key);
        let chacha = TransportKey::with_cipher(DataCipher::ChaCha20Poly1305, &chacha_key);
        let aes = TransportKey::with_cipher(DataCipher::Aes256Gcm, &aes_key);
        let mut buf = *b"a packet of data";
        let tag = aes.seal_in_place(3, &mut buf);
        assert!(chacha.open_in_place(3, &mut buf.clone(), &tag).is_err());
        aes.open_in_place(3, &mut buf, &tag).unwrap();
        assert_eq!(&buf, b"a packet of data");
    }

    #[test]
    fn aes_256_gcm_matches_a_published_vector() {
        // NIST GCM test case 14 (AES-256, zero key, zero IV, one zero
        // block): the IV is 12 zero bytes, which is counter 0 here.
        let key = TransportKey::with_cipher(DataCipher::Aes256Gcm, &[0u8; 32]);
        let mut block = [0u8; 16];
        let tag = key.seal_in_place(0, &mut block);
        assert_eq!(block, hex("cea7403d4d606b6e074ec5d3baf39d18"));
        assert_eq!(tag, hex("d0d1c8a799996bf0265b98b5d48ab919"));
    }

    /// aws-lc-rs's key is behind a pointer into its C library's memory,
    /// which the library wipes when freeing it; nothing to read back here.
    #[cfg(not(feature = "aws-lc-rs"))]
    #[test]
    fn a_dropped_key_leaves_only_zeros() {
        for cipher in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            let mut slot = MaybeUninit::new(TransportKey::with_cipher(cipher, &[0xA5; 32]));
            // SAFETY: the slot holds a key until the drop below.
            let key = unsafe { slot.assume_init_ref() };
            let mut packet = *b"a packet of data";
            key.seal_in_place(1, &mut packet);
            assert_ne!(&packet, b"a packet of data");
            // SAFETY: dropped once, and only its bytes are read after it.
            unsafe { slot.assume_init_drop() };
            // SAFETY: the drop wrote every byte of the slot (a zeroed
            // `MaybeUninit` has no padding left uninitialised).
            let left = unsafe {
                std::slice::from_raw_parts(slot.as_ptr().cast::<u8>(), size_of::<TransportKey>())
            };
            assert!(left.iter().all(|&byte| byte == 0), "{cipher}");
        }
    }

    fn hex(text: &str) -> [u8; 16] {
        let mut out = [0u8; 16];
        for (i, byte) in out.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).unwrap();
        }
        out
    }
}
