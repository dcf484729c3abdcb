//! Key types: Curve25519 private and public keys and the optional preshared
//! key, in WireGuard's text form (standard base64, 44 characters, padded).
//!
//! Secrets are never `Copy`, never printed by `Debug`, and are wiped on drop.

use std::fmt;
use std::str::FromStr;

use base64ct::{Base64, Encoding};
use zeroize::{Zeroize, ZeroizeOnDrop, Zeroizing};

/// Length of every key in bytes.
pub const KEY_LEN: usize = 32;
/// Length of a key in base64 text.
pub const KEY_BASE64_LEN: usize = 44;

/// Why a key string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyParseError {
    #[error("a key is 44 base64 characters ending in '=', got {0} characters")]
    WrongLength(usize),
    #[error("not valid base64 (or not in canonical form)")]
    InvalidBase64,
}

fn decode_key(text: &str) -> Result<Zeroizing<[u8; KEY_LEN]>, KeyParseError> {
    let text = text.trim();
    if text.len() != KEY_BASE64_LEN || !text.ends_with('=') {
        return Err(KeyParseError::WrongLength(text.chars().count()));
    }
    let mut bytes = Zeroizing::new([0u8; KEY_LEN]);
    let decoded = Base64::decode(text, bytes.as_mut()).map_err(|_| KeyParseError::InvalidBase64)?;
    if decoded.len() != KEY_LEN {
        return Err(KeyParseError::InvalidBase64);
    }
    Ok(bytes)
}

fn encode_key(bytes: &[u8; KEY_LEN]) -> String {
    Base64::encode_string(bytes)
}

/// A Curve25519 public key identifying a peer.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PublicKey([u8; KEY_LEN]);

impl PublicKey {
    pub const fn from_bytes(bytes: [u8; KEY_LEN]) -> Self {
        Self(bytes)
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    pub fn to_base64(&self) -> String {
        encode_key(&self.0)
    }
}

impl FromStr for PublicKey {
    type Err = KeyParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        decode_key(text).map(|bytes| Self(*bytes))
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_base64())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({})", self.to_base64())
    }
}

/// A Curve25519 private key. Wiped on drop; `Debug` prints no key material.
#[derive(Clone)]
pub struct PrivateKey(x25519_dalek::StaticSecret);

impl PrivateKey {
    /// Builds a key from 32 bytes, clamped as `wg genkey` clamps, so the
    /// stored bytes print exactly as `wg` would print them.
    pub fn from_bytes(mut bytes: [u8; KEY_LEN]) -> Self {
        clamp(&mut bytes);
        let key = Self(x25519_dalek::StaticSecret::from(bytes));
        bytes.zeroize();
        key
    }

    /// Builds a key from 32 bytes exactly as given (no clamping), as a key
    /// set through the configuration protocol is kept.
    pub fn from_raw_bytes(mut bytes: [u8; KEY_LEN]) -> Self {
        let key = Self(x25519_dalek::StaticSecret::from(bytes));
        bytes.zeroize();
        key
    }

    /// Builds a key from text exactly as given. `wg` accepts unclamped keys
    /// (X25519 clamps during multiplication), so this does too and keeps the
    /// original bytes for printing.
    pub fn from_base64(text: &str) -> Result<Self, KeyParseError> {
        let bytes = decode_key(text)?;
        Ok(Self(x25519_dalek::StaticSecret::from(*bytes)))
    }

    pub fn public_key(&self) -> PublicKey {
        PublicKey(crate::x25519::public_key(&self.0))
    }

    /// The key's bytes, wiped when dropped.
    pub fn to_bytes(&self) -> Zeroizing<[u8; KEY_LEN]> {
        Zeroizing::new(self.0.to_bytes())
    }

    pub fn to_base64(&self) -> Zeroizing<String> {
        let bytes = Zeroizing::new(self.0.to_bytes());
        Zeroizing::new(encode_key(&bytes))
    }

    pub(crate) fn secret(&self) -> &x25519_dalek::StaticSecret {
        &self.0
    }
}

impl fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PrivateKey(<redacted>)")
    }
}

/// Curve25519 clamping, as `wg genkey` applies it.
fn clamp(bytes: &mut [u8; KEY_LEN]) {
    bytes[0] &= 248;
    bytes[31] &= 127;
    bytes[31] |= 64;
}

/// The optional symmetric key mixed into the handshake (`PresharedKey`).
#[derive(Clone, Zeroize, ZeroizeOnDrop, PartialEq, Eq)]
pub struct PresharedKey([u8; KEY_LEN]);

impl PresharedKey {
    /// The all-zero key WireGuard uses when no preshared key is configured.
    pub const fn zero() -> Self {
        Self([0u8; KEY_LEN])
    }

    pub fn from_bytes(mut bytes: [u8; KEY_LEN]) -> Self {
        let key = Self(bytes);
        bytes.zeroize();
        key
    }

    pub fn from_base64(text: &str) -> Result<Self, KeyParseError> {
        decode_key(text).map(|bytes| Self(*bytes))
    }

    pub fn as_bytes(&self) -> &[u8; KEY_LEN] {
        &self.0
    }

    pub fn is_zero(&self) -> bool {
        self.0 == [0u8; KEY_LEN]
    }

    pub fn to_base64(&self) -> Zeroizing<String> {
        Zeroizing::new(encode_key(&self.0))
    }
}

impl fmt::Debug for PresharedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PresharedKey(<redacted>)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A pair produced by `wg genkey | tee priv | wg pubkey`.
    const WG_PRIVATE: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
    const WG_PUBLIC: &str = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";

    #[test]
    fn public_key_matches_wg_pubkey() {
        let private = PrivateKey::from_base64(WG_PRIVATE).unwrap();
        assert_eq!(private.public_key().to_base64(), WG_PUBLIC);
        assert_eq!(private.to_base64().as_str(), WG_PRIVATE);
    }

    #[test]
    fn from_bytes_clamps() {
        let key = PrivateKey::from_bytes([0xff; 32]);
        let bytes = key.secret().to_bytes();
        assert_eq!(bytes[0] & 7, 0);
        assert_eq!(bytes[31] & 0xc0, 0x40);
    }

    #[test]
    fn rejects_wrong_length_and_bad_base64() {
        assert_eq!(
            PublicKey::from_str("abc").unwrap_err(),
            KeyParseError::WrongLength(3)
        );
        let bad = "!Igo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";
        assert_eq!(
            PublicKey::from_str(bad).unwrap_err(),
            KeyParseError::InvalidBase64
        );
    }

    #[test]
    fn rejects_non_canonical_trailing_bits() {
        // 'x' carries bits past the 256th; canonical encodings end in 'w'.
        let non_canonical = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykx=";
        assert!(PublicKey::from_str(non_canonical).is_err());
    }

    #[test]
    fn debug_never_prints_secrets() {
        let private = PrivateKey::from_base64(WG_PRIVATE).unwrap();
        assert!(!format!("{private:?}").contains("yAnz"));
        let psk = PresharedKey::from_bytes([1; 32]);
        assert!(!format!("{psk:?}").contains("AQE"));
    }
}
