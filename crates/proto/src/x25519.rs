//! The two X25519 operations the handshake needs.
//!
//! Fuzz builds (`cfg(fuzzing)`, set by `cargo fuzz`) remember every result
//! they compute. The stateful fuzz targets seed their random numbers, so
//! every execution derives the same few ephemeral keys; a scalar
//! multiplication under coverage instrumentation costs more than the rest
//! of an execution together (95 % of `device_datagram`'s time, which held
//! it at 450 executions a second). The cache returns the very values the
//! multiplication would, so the protocol under the fuzzer is unchanged;
//! other builds compute every time and keep no copy of a secret.

use x25519_dalek::StaticSecret;
use zeroize::Zeroizing;

/// The public key of `secret`.
pub(crate) fn public_key(secret: &StaticSecret) -> [u8; 32] {
    #[cfg(fuzzing)]
    return memo::public_key(secret);
    #[cfg(not(fuzzing))]
    compute_public_key(secret)
}

/// The shared secret of `secret` and `public`, or `None` when `public` is
/// a low-order point (the result would not depend on `secret`).
pub(crate) fn shared_secret(
    secret: &StaticSecret,
    public: &[u8; 32],
) -> Option<Zeroizing<[u8; 32]>> {
    #[cfg(fuzzing)]
    return memo::shared_secret(secret, public);
    #[cfg(not(fuzzing))]
    compute_shared_secret(secret, public)
}

fn compute_public_key(secret: &StaticSecret) -> [u8; 32] {
    x25519_dalek::PublicKey::from(secret).to_bytes()
}

fn compute_shared_secret(secret: &StaticSecret, public: &[u8; 32]) -> Option<Zeroizing<[u8; 32]>> {
    let shared = secret.diffie_hellman(&x25519_dalek::PublicKey::from(*public));
    shared
        .was_contributory()
        .then(|| Zeroizing::new(shared.to_bytes()))
}

#[cfg(fuzzing)]
mod memo {
    use std::collections::HashMap;
    use std::sync::{Mutex, PoisonError};

    use super::*;

    /// Beyond this many results the cache starts over, so a long campaign
    /// that meets ever new keys (mutated ephemerals) stays small.
    const CAPACITY: usize = 1 << 16;

    type Cache<K, V> = Mutex<Option<HashMap<K, V>>>;

    static PUBLIC_KEYS: Cache<[u8; 32], [u8; 32]> = Mutex::new(None);
    static SHARED_SECRETS: Cache<([u8; 32], [u8; 32]), Option<[u8; 32]>> = Mutex::new(None);

    fn remembered<K: Eq + std::hash::Hash, V: Clone>(
        cache: &Cache<K, V>,
        key: K,
        compute: impl FnOnce() -> V,
    ) -> V {
        let mut cache = cache.lock().unwrap_or_else(PoisonError::into_inner);
        let map = cache.get_or_insert_with(HashMap::new);
        if let Some(value) = map.get(&key) {
            return value.clone();
        }
        if map.len() >= CAPACITY {
            map.clear();
        }
        let value = compute();
        map.insert(key, value.clone());
        value
    }

    pub(super) fn public_key(secret: &StaticSecret) -> [u8; 32] {
        remembered(&PUBLIC_KEYS, secret.to_bytes(), || {
            compute_public_key(secret)
        })
    }

    pub(super) fn shared_secret(
        secret: &StaticSecret,
        public: &[u8; 32],
    ) -> Option<Zeroizing<[u8; 32]>> {
        remembered(&SHARED_SECRETS, (secret.to_bytes(), *public), || {
            compute_shared_secret(secret, public).map(|shared| *shared)
        })
        .map(Zeroizing::new)
    }
}
