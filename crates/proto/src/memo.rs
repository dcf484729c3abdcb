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
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::{Mutex, PoisonError};

/// Beyond this many results a cache starts over, so a long campaign that
/// meets ever new inputs (mutated keys) stays small.
const CAPACITY: usize = 1 << 16;

/// A cache for [`remembered`]: `static CACHE: Cache<K, V> = Cache::new();`.
pub struct Cache<K, V>(Mutex<Option<HashMap<K, V, BuildHasherDefault<EndsHasher>>>>);

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
    let map = cache.get_or_insert_with(HashMap::default);
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

/// Hashes each written field by its length and its first and last 16
/// bytes, in constant time. Under the fuzzer's instrumentation a hasher
/// that walks every byte (SipHash) traced a compare per 8 bytes of every
/// key, which cost more than the cache saved; keys here (keys, chaining
/// values, hashes, handshake fields) differ at their ends, and the map
/// still compares whole keys.
#[derive(Default)]
pub struct EndsHasher(u64);

impl EndsHasher {
    fn mix(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl Hasher for EndsHasher {
    fn write(&mut self, bytes: &[u8]) {
        let sampled = bytes.len().min(16);
        let mut head = [0; 16];
        head[..sampled].copy_from_slice(&bytes[..sampled]);
        let mut tail = [0; 16];
        tail[..sampled].copy_from_slice(&bytes[bytes.len() - sampled..]);
        self.mix(bytes.len() as u64);
        for word in [u128::from_le_bytes(head), u128::from_le_bytes(tail)] {
            self.mix(word as u64);
            self.mix((word >> 64) as u64);
        }
    }

    fn write_u64(&mut self, value: u64) {
        self.mix(value);
    }

    fn write_usize(&mut self, value: usize) {
        self.mix(value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}
