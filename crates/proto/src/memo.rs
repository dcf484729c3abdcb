//! Results remembered across fuzz executions (`cfg(fuzzing)` only).
//!
//! The stateful fuzz targets seed their random numbers and sign with fixed
//! keys, so every execution computes the same few public-key operations,
//! and from them the same handshakes: the same KDF chains and the same
//! sealed handshake fields. A public-key operation costs more than the
//! rest of an execution's protocol work, and with those remembered the
//! KDFs' HMACs and the handshake AEAD still took half of it. A cache
//! returns the very value the computation would, so the code under the
//! fuzzer behaves as built for use; other builds have no such cache and
//! keep no copy of a secret.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Mutex, PoisonError};

/// Beyond this many results a cache starts over, so a long campaign that
/// meets ever new inputs (mutated keys) stays small.
const CAPACITY: usize = 1 << 16;

/// A cache for [`remembered`]: `static CACHE: Cache<K, V> = Cache::new();`.
pub struct Cache<K, V>(Mutex<Option<HashMap<K, V>>>);

impl<K, V> Cache<K, V> {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self(Mutex::new(None))
    }
}

/// The value `compute` gives for `key`, computed once.
pub fn remembered<K: Eq + Hash, V: Clone>(
    cache: &Cache<K, V>,
    key: K,
    compute: impl FnOnce() -> V,
) -> V {
    let mut cache = cache.0.lock().unwrap_or_else(PoisonError::into_inner);
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
