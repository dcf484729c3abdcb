//! The transport-data AEAD: ChaCha20-Poly1305 with WireGuard's counter nonce
//! and empty associated data, sealing and opening in place.
//!
//! This is the hot path's only cryptography, so it sits behind one small
//! type with two operations; the backend (ring today) can be swapped and
//! benchmarked without touching the protocol code.

use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, Nonce, Tag, UnboundKey};

use crate::crypto::{AuthenticationFailed, TAG_LEN, counter_nonce};

/// One direction's transport key.
pub struct TransportKey(LessSafeKey);

impl TransportKey {
    pub fn new(key: &[u8; 32]) -> Self {
        // Invariant: ChaCha20-Poly1305 keys are exactly 32 bytes.
        let unbound = UnboundKey::new(&CHACHA20_POLY1305, key).expect("32-byte ChaCha20 key");
        Self(LessSafeKey::new(unbound))
    }

    /// Encrypts `buf` in place and returns the tag.
    pub fn seal_in_place(&self, counter: u64, buf: &mut [u8]) -> [u8; TAG_LEN] {
        let nonce = Nonce::assume_unique_for_key(counter_nonce(counter));
        // Invariant: ring fails only for inputs above ChaCha20's 256 GiB limit;
        // packets are at most 64 KiB.
        let tag = self
            .0
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
        let tag = Tag::from(*tag);
        self.0
            .open_in_place_separate_tag(nonce, Aad::empty(), tag, buf, 0..)
            .map(|_| ())
            .map_err(|_| AuthenticationFailed)
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
    fn ring_matches_the_handshake_aead() {
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
        let key = TransportKey::new(&[1u8; 32]);
        let mut buf = [7u8; 40];
        let tag = key.seal_in_place(1, &mut buf);
        assert!(key.open_in_place(2, &mut buf, &tag).is_err());
    }
}
