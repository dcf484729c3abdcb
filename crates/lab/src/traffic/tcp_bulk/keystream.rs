//! Random content: per-stream keystreams, fast to generate.

use super::CHUNK_BYTES;

/// Bytes of the next chunk when `left` remain.
pub(super) fn chunk_len(left: u64) -> usize {
    usize::try_from(left).map_or(CHUNK_BYTES, |left| left.min(CHUNK_BYTES))
}

/// Stream `index`'s seed: splitmix64 over the run seed and the index.
pub(super) fn stream_seed(seed: u64, index: usize) -> u64 {
    let mut z = seed ^ (index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Four interleaved xorshift64* generators: not cryptographic, just fast
/// (several GB/s, never the bottleneck) and
/// incompressible enough that no layer can shortcut the transfer.
pub(super) struct Keystream {
    lanes: [u64; LANES],
}

const LANES: usize = 4;

impl Keystream {
    pub(super) fn new(seed: u64) -> Self {
        // xorshift's state must never be zero; splitmix64 outputs of
        // distinct inputs are distinct, and zero is replaced.
        let lanes = std::array::from_fn(|lane| match stream_seed(seed, lane) {
            0 => 0x853C_49E6_748F_EA9B,
            state => state,
        });
        Self { lanes }
    }

    fn step(state: &mut u64) -> u64 {
        let mut x = *state;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        *state = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Fills `buffer`; the output does not depend on how calls split it as
    /// long as every call but the last covers a multiple of 32 bytes.
    pub(super) fn fill(&mut self, buffer: &mut [u8]) {
        let mut blocks = buffer.chunks_exact_mut(8 * LANES);
        for block in &mut blocks {
            for (word, state) in block.chunks_exact_mut(8).zip(self.lanes.iter_mut()) {
                word.copy_from_slice(&Self::step(state).to_le_bytes());
            }
        }
        let rest = blocks.into_remainder();
        for (word, state) in rest.chunks_mut(8).zip(self.lanes.iter_mut()) {
            let bytes = Self::step(state).to_le_bytes();
            word.copy_from_slice(&bytes[..word.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keystream_is_deterministic_and_chunking_independent() {
        let mut whole = vec![0u8; 64];
        Keystream::new(7).fill(&mut whole);
        let mut pieces = vec![0u8; 64];
        let mut keystream = Keystream::new(7);
        keystream.fill(&mut pieces[..32]);
        keystream.fill(&mut pieces[32..]);
        assert_eq!(whole, pieces);
        assert_ne!(stream_seed(1, 0), stream_seed(1, 1));
        assert!(whole.iter().any(|&byte| byte != 0));
    }
}
