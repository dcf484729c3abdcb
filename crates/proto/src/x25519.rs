//! The two X25519 operations the handshake needs.
//!
//! Fuzz builds (`cfg(fuzzing)`, set by `cargo fuzz`) remember every result
//! they compute (`crate::memo`, which only they have): the stateful fuzz
//! targets derive the same few ephemeral keys in every execution, and the
//! multiplications took 95 % of `device_datagram`'s time, which held it at
//! 450 executions a second.

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
    use crate::memo::{Cache, remembered};

    use super::*;

    static PUBLIC_KEYS: Cache<[u8; 32], [u8; 32]> = Cache::new();
    static SHARED_SECRETS: Cache<([u8; 32], [u8; 32]), Option<[u8; 32]>> = Cache::new();

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
