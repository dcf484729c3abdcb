//! The Noise primitives WireGuard is built from, named as in the whitepaper.
//!
//! - `hash`: BLAKE2s-256 over the concatenation of its inputs.
//! - `mac`: keyed BLAKE2s with a 16-byte output (MAC1, MAC2, cookies).
//! - `hmac`: HMAC-BLAKE2s-256, and `kdf1`/`kdf2`/`kdf3` built on it (HKDF
//!   with an empty info string, written out as the whitepaper defines it).
//! - `aead_seal`/`aead_open`: ChaCha20-Poly1305 with associated data, used
//!   only for handshake fields (rare, so the pure-Rust crate is fine here;
//!   the transport data path lives in [`crate::aead`]).
//! - `xaead_seal`/`xaead_open`: XChaCha20-Poly1305 for cookie replies.
//!
//! Every intermediate secret is returned wrapped in [`Zeroizing`] so that the
//! chaining-key and key material does not linger on the stack after use.

use blake2::digest::{Digest, KeyInit, Mac};
use blake2::{Blake2s256, Blake2sMac};
use chacha20poly1305::aead::AeadInOut;
use chacha20poly1305::aead::consts::U16;
use chacha20poly1305::{ChaCha20Poly1305, XChaCha20Poly1305};
use hmac::SimpleHmac;
use zeroize::Zeroizing;

/// Length of BLAKE2s-256 output, chaining keys and symmetric keys.
pub const HASH_LEN: usize = 32;
/// Length of a MAC (MAC1, MAC2, cookie value).
pub const MAC_LEN: usize = 16;
/// Length of a Poly1305 tag.
pub const TAG_LEN: usize = 16;
/// Length of an XChaCha20 nonce.
pub const XNONCE_LEN: usize = 24;

pub type Hash = [u8; HASH_LEN];
pub type SymmetricKey = Zeroizing<[u8; HASH_LEN]>;

/// The AEAD failed to authenticate: wrong key, tampered data or wrong AAD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("authentication failed")]
pub struct AuthenticationFailed;

/// BLAKE2s-256 of the concatenation of `parts`.
pub fn hash(parts: &[&[u8]]) -> Hash {
    let mut hasher = Blake2s256::new();
    for part in parts {
        hasher.update(part);
    }
    hasher.finalize().into()
}

/// Keyed BLAKE2s with a 16-byte output. Keys are 16 (cookie) or 32 bytes.
pub fn mac(key: &[u8], parts: &[&[u8]]) -> [u8; MAC_LEN] {
    // Invariant: callers pass keys of 16 or 32 bytes, within BLAKE2s's 32-byte limit.
    let mut mac = <Blake2sMac<U16> as KeyInit>::new_from_slice(key)
        .expect("BLAKE2s accepts keys up to 32 bytes");
    for part in parts {
        Mac::update(&mut mac, part);
    }
    mac.finalize().into_bytes().into()
}

/// HMAC-BLAKE2s-256.
pub fn hmac(key: &[u8], parts: &[&[u8]]) -> SymmetricKey {
    // Invariant: HMAC accepts keys of any length.
    let mut mac = <SimpleHmac<Blake2s256> as KeyInit>::new_from_slice(key)
        .expect("HMAC accepts keys of any length");
    for part in parts {
        Mac::update(&mut mac, part);
    }
    Zeroizing::new(mac.finalize().into_bytes().into())
}

/// KDF1: one output derived from chaining key `key` and `input`.
pub fn kdf1(key: &[u8; HASH_LEN], input: &[u8]) -> SymmetricKey {
    let [first] = kdf(key, input);
    first
}

/// KDF2: two outputs derived from chaining key `key` and `input`.
pub fn kdf2(key: &[u8; HASH_LEN], input: &[u8]) -> (SymmetricKey, SymmetricKey) {
    let [first, second] = kdf(key, input);
    (first, second)
}

/// KDF3: three outputs derived from chaining key `key` and `input`.
pub fn kdf3(key: &[u8; HASH_LEN], input: &[u8]) -> (SymmetricKey, SymmetricKey, SymmetricKey) {
    let [first, second, third] = kdf(key, input);
    (first, second, third)
}

/// The first `N` outputs of the KDF chain. Fuzz builds remember them
/// (`crate::memo`): the stateful targets run the same handshakes in every
/// execution, and their KDFs' HMACs were a third of the time.
fn kdf<const N: usize>(key: &[u8; HASH_LEN], input: &[u8]) -> [SymmetricKey; N] {
    #[cfg(fuzzing)]
    return memo::kdf(key, input);
    #[cfg(not(fuzzing))]
    compute_kdf(key, input)
}

fn compute_kdf<const N: usize>(key: &[u8; HASH_LEN], input: &[u8]) -> [SymmetricKey; N] {
    let prk = hmac(key, &[input]);
    let mut outputs: [SymmetricKey; N] = std::array::from_fn(|_| Zeroizing::new([0; HASH_LEN]));
    for index in 0..N {
        // Output i is HMAC(prk, output i-1 || i); the first has no predecessor.
        let counter = [index as u8 + 1];
        let previous: &[u8] = match index.checked_sub(1) {
            Some(before) => outputs[before].as_ref(),
            None => &[],
        };
        outputs[index] = hmac(prk.as_ref(), &[previous, &counter]);
    }
    outputs
}

#[cfg(fuzzing)]
mod memo {
    use crate::memo::{Cache, remembered};

    use super::*;

    /// Keyed by the chaining key, the input and how many outputs.
    static OUTPUTS: Cache<([u8; HASH_LEN], Vec<u8>, usize), Vec<[u8; HASH_LEN]>> = Cache::new();

    pub(super) fn kdf<const N: usize>(key: &[u8; HASH_LEN], input: &[u8]) -> [SymmetricKey; N] {
        let outputs = remembered(&OUTPUTS, (*key, input.to_vec(), N), || {
            compute_kdf::<N>(key, input)
                .iter()
                .map(|output| **output)
                .collect()
        });
        std::array::from_fn(|index| Zeroizing::new(outputs[index]))
    }

    type Sealing = ([u8; HASH_LEN], u64, Vec<u8>, Vec<u8>);
    static SEALED: Cache<Sealing, (Vec<u8>, [u8; TAG_LEN])> = Cache::new();

    pub(super) fn aead_seal(
        key: &[u8; HASH_LEN],
        counter: u64,
        buf: &mut [u8],
        aad: &[u8],
    ) -> [u8; TAG_LEN] {
        let (sealed, tag) =
            remembered(&SEALED, (*key, counter, buf.to_vec(), aad.to_vec()), || {
                let mut sealed = buf.to_vec();
                let tag = compute_aead_seal(key, counter, &mut sealed, aad);
                (sealed, tag)
            });
        buf.copy_from_slice(&sealed);
        tag
    }

    type Opening = ([u8; HASH_LEN], u64, Vec<u8>, [u8; TAG_LEN], Vec<u8>);
    static OPENED: Cache<Opening, Option<Vec<u8>>> = Cache::new();

    pub(super) fn aead_open(
        key: &[u8; HASH_LEN],
        counter: u64,
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
        aad: &[u8],
    ) -> Result<(), AuthenticationFailed> {
        let opened = remembered(
            &OPENED,
            (*key, counter, buf.to_vec(), *tag, aad.to_vec()),
            || {
                let mut opened = buf.to_vec();
                compute_aead_open(key, counter, &mut opened, tag, aad)
                    .ok()
                    .map(|()| opened)
            },
        );
        buf.copy_from_slice(&opened.ok_or(AuthenticationFailed)?);
        Ok(())
    }
}

/// WireGuard's 96-bit nonce: 32 zero bits, then the 64-bit counter little-endian.
pub fn counter_nonce(counter: u64) -> [u8; 12] {
    let mut nonce = [0u8; 12];
    nonce[4..].copy_from_slice(&counter.to_le_bytes());
    nonce
}

/// ChaCha20-Poly1305 seal of `buf` in place with `aad`; returns the tag.
/// Fuzz builds remember the results, as they do the KDF's.
pub fn aead_seal(key: &[u8; HASH_LEN], counter: u64, buf: &mut [u8], aad: &[u8]) -> [u8; TAG_LEN] {
    #[cfg(fuzzing)]
    return memo::aead_seal(key, counter, buf, aad);
    #[cfg(not(fuzzing))]
    compute_aead_seal(key, counter, buf, aad)
}

fn compute_aead_seal(
    key: &[u8; HASH_LEN],
    counter: u64,
    buf: &mut [u8],
    aad: &[u8],
) -> [u8; TAG_LEN] {
    let cipher = ChaCha20Poly1305::new(key.into());
    let nonce = counter_nonce(counter);
    // Invariant: handshake fields are far below ChaCha20's 256 GiB message limit.
    let tag = cipher
        .encrypt_inout_detached(&nonce.into(), aad, buf.into())
        .expect("handshake fields are short");
    tag.into()
}

/// ChaCha20-Poly1305 open of `buf` in place with `aad` and detached `tag`;
/// `buf` is left as it was when the tag does not match. Fuzz builds
/// remember the results.
pub fn aead_open(
    key: &[u8; HASH_LEN],
    counter: u64,
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    aad: &[u8],
) -> Result<(), AuthenticationFailed> {
    #[cfg(fuzzing)]
    return memo::aead_open(key, counter, buf, tag, aad);
    #[cfg(not(fuzzing))]
    compute_aead_open(key, counter, buf, tag, aad)
}

fn compute_aead_open(
    key: &[u8; HASH_LEN],
    counter: u64,
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    aad: &[u8],
) -> Result<(), AuthenticationFailed> {
    let cipher = ChaCha20Poly1305::new(key.into());
    let nonce = counter_nonce(counter);
    cipher
        .decrypt_inout_detached(&nonce.into(), aad, buf.into(), tag.into())
        .map_err(|_| AuthenticationFailed)
}

/// XChaCha20-Poly1305 seal, for the cookie in a cookie reply.
pub fn xaead_seal(
    key: &[u8; HASH_LEN],
    nonce: &[u8; XNONCE_LEN],
    buf: &mut [u8],
    aad: &[u8],
) -> [u8; TAG_LEN] {
    let cipher = XChaCha20Poly1305::new(key.into());
    // Invariant: a cookie is 16 bytes.
    let tag = cipher
        .encrypt_inout_detached(nonce.into(), aad, buf.into())
        .expect("cookies are short");
    tag.into()
}

/// XChaCha20-Poly1305 open, for the cookie in a cookie reply.
pub fn xaead_open(
    key: &[u8; HASH_LEN],
    nonce: &[u8; XNONCE_LEN],
    buf: &mut [u8],
    tag: &[u8; TAG_LEN],
    aad: &[u8],
) -> Result<(), AuthenticationFailed> {
    let cipher = XChaCha20Poly1305::new(key.into());
    cipher
        .decrypt_inout_detached(nonce.into(), aad, buf.into(), tag.into())
        .map_err(|_| AuthenticationFailed)
}

/// Constant-time comparison of equal-length byte strings.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn blake2s_known_answer() {
        // RFC 7693 Appendix B.
        assert_eq!(
            hex(&hash(&[b"abc"])),
            "508c5e8c327c14e2e1a72ba34eeb452f37458b209ed63a294d999b4c86675982"
        );
    }

    #[test]
    fn initial_chaining_key_matches_wireguard() {
        let ck = hash(&[b"Noise_IKpsk2_25519_ChaChaPoly_BLAKE2s"]);
        assert_eq!(
            hex(&ck),
            "60e26daef327efc02ec335e2a025d2d016eb4206f87277f52d38d1988b78cd36"
        );
    }

    #[test]
    fn hash_concatenates_parts() {
        assert_eq!(hash(&[b"ab", b"c"]), hash(&[b"abc"]));
    }

    #[test]
    fn hmac_blake2s_matches_manual_construction() {
        // HMAC(K, m) = H((K ^ opad) || H((K ^ ipad) || m)), block size 64.
        let key = [7u8; 32];
        let mut ipad = [0x36u8; 64];
        let mut opad = [0x5cu8; 64];
        for i in 0..32 {
            ipad[i] ^= key[i];
            opad[i] ^= key[i];
        }
        let inner = hash(&[&ipad, b"message"]);
        let expected = hash(&[&opad, &inner]);
        assert_eq!(*hmac(&key, &[b"message"]), expected);
    }

    #[test]
    fn kdf_outputs_chain() {
        let ck = [1u8; 32];
        let (a, b, c) = kdf3(&ck, b"input");
        let (a2, b2) = kdf2(&ck, b"input");
        assert_eq!(*a, *a2);
        assert_eq!(*b, *b2);
        assert_eq!(*kdf1(&ck, b"input"), *a);
        let prk = hmac(&ck, &[b"input"]);
        assert_eq!(*a, *hmac(prk.as_ref(), &[&[1]]));
        assert_eq!(*b, *hmac(prk.as_ref(), &[a.as_ref(), &[2]]));
        assert_eq!(*c, *hmac(prk.as_ref(), &[b.as_ref(), &[3]]));
    }

    #[test]
    fn aead_round_trip_and_tamper() {
        let key = [9u8; 32];
        let mut buf = *b"hello handshake";
        let tag = aead_seal(&key, 0, &mut buf, b"aad");
        let mut opened = buf;
        aead_open(&key, 0, &mut opened, &tag, b"aad").unwrap();
        assert_eq!(&opened, b"hello handshake");
        let mut wrong_aad = buf;
        assert!(aead_open(&key, 0, &mut wrong_aad, &tag, b"aae").is_err());
        let mut wrong_counter = buf;
        assert!(aead_open(&key, 1, &mut wrong_counter, &tag, b"aad").is_err());
        assert_eq!((wrong_aad, wrong_counter), (buf, buf), "left sealed");
    }

    #[test]
    fn xaead_round_trip() {
        let key = [3u8; 32];
        let nonce = [5u8; 24];
        let mut cookie = [1u8; 16];
        let tag = xaead_seal(&key, &nonce, &mut cookie, b"mac1");
        xaead_open(&key, &nonce, &mut cookie, &tag, b"mac1").unwrap();
        assert_eq!(cookie, [1u8; 16]);
    }

    #[test]
    fn mac_accepts_short_and_long_keys() {
        assert_ne!(mac(&[1u8; 16], &[b"x"]), mac(&[1u8; 32], &[b"x"]));
    }
}
