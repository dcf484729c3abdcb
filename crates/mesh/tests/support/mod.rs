//! What the simulated-network tests share.

use fjord_proto::Rng;

/// Seeded randomness for a node's device: each test run the same.
pub struct XorShift(pub u64);

impl Rng for XorShift {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            *byte = self.0 as u8;
        }
    }
}
