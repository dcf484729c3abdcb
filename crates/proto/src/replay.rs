//! The receive-side replay window (RFC 6479 style bitmap ring).
//!
//! A counter is accepted once, and only if it is newer than the highest seen
//! counter minus [`REPLAY_WINDOW_SIZE`]. The window moves forward when a
//! higher counter arrives, clearing whole 64-bit blocks, so each check is
//! O(1) apart from a bounded clear when the window jumps.
//!
//! Call [`ReplayWindow::check`] before decrypting (cheap rejection of obvious
//! replays) and [`ReplayWindow::accept`] only after the packet authenticated,
//! so that forged counters can never move the window.

const BLOCK_BITS: u64 = 64;
const RING_BLOCKS: usize = 64;
const BLOCK_INDEX_MASK: u64 = RING_BLOCKS as u64 - 1;

/// Number of counters behind the newest one that are still accepted.
pub const REPLAY_WINDOW_SIZE: u64 = (RING_BLOCKS as u64 - 1) * BLOCK_BITS;

/// Why a counter was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("counter already received")]
    Replayed,
    #[error("counter is older than the replay window")]
    TooOld,
    #[error("counter at or beyond the message limit")]
    LimitReached,
}

#[derive(Debug, Clone)]
pub struct ReplayWindow {
    newest: u64,
    ring: [u64; RING_BLOCKS],
    limit: u64,
}

impl ReplayWindow {
    /// A window that refuses counters at or above `limit`.
    pub fn new(limit: u64) -> Self {
        Self {
            newest: 0,
            ring: [0; RING_BLOCKS],
            limit,
        }
    }

    /// Whether `counter` could be accepted, without changing the window.
    pub fn check(&self, counter: u64) -> Result<(), ReplayError> {
        if counter >= self.limit {
            return Err(ReplayError::LimitReached);
        }
        if counter > self.newest {
            return Ok(());
        }
        if self.newest - counter > REPLAY_WINDOW_SIZE {
            return Err(ReplayError::TooOld);
        }
        let (block, bit) = Self::position(counter);
        if self.ring[block] & bit != 0 {
            Err(ReplayError::Replayed)
        } else {
            Ok(())
        }
    }

    /// Records `counter` as received; call only for authenticated packets.
    pub fn accept(&mut self, counter: u64) -> Result<(), ReplayError> {
        self.check(counter)?;
        if counter > self.newest {
            let current_block = self.newest / BLOCK_BITS;
            let target_block = counter / BLOCK_BITS;
            let blocks_to_clear = (target_block - current_block).min(RING_BLOCKS as u64);
            for step in 1..=blocks_to_clear {
                self.ring[((current_block + step) & BLOCK_INDEX_MASK) as usize] = 0;
            }
            self.newest = counter;
        }
        let (block, bit) = Self::position(counter);
        self.ring[block] |= bit;
        Ok(())
    }

    fn position(counter: u64) -> (usize, u64) {
        let block = ((counter / BLOCK_BITS) & BLOCK_INDEX_MASK) as usize;
        (block, 1u64 << (counter % BLOCK_BITS))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;

    /// The obviously correct model: remember every counter.
    struct NaiveWindow {
        seen: HashSet<u64>,
        newest: Option<u64>,
        limit: u64,
    }

    impl NaiveWindow {
        fn accept(&mut self, counter: u64) -> Result<(), ReplayError> {
            if counter >= self.limit {
                return Err(ReplayError::LimitReached);
            }
            let newest = self.newest.unwrap_or(0);
            if counter <= newest && newest - counter > REPLAY_WINDOW_SIZE {
                return Err(ReplayError::TooOld);
            }
            if !self.seen.insert(counter) {
                return Err(ReplayError::Replayed);
            }
            self.newest = Some(newest.max(counter));
            Ok(())
        }
    }

    #[test]
    fn accepts_in_order_and_refuses_repeats() {
        let mut window = ReplayWindow::new(u64::MAX);
        for counter in 0..10_000 {
            window.accept(counter).unwrap();
        }
        assert_eq!(window.accept(9_999), Err(ReplayError::Replayed));
        assert_eq!(window.accept(0), Err(ReplayError::TooOld));
    }

    #[test]
    fn accepts_reordering_within_the_window() {
        let mut window = ReplayWindow::new(u64::MAX);
        window.accept(5000).unwrap();
        window.accept(5000 - REPLAY_WINDOW_SIZE).unwrap();
        assert_eq!(
            window.accept(5000 - REPLAY_WINDOW_SIZE - 1),
            Err(ReplayError::TooOld)
        );
        window.accept(4999).unwrap();
        assert_eq!(window.accept(4999), Err(ReplayError::Replayed));
        const { assert!(REPLAY_WINDOW_SIZE >= 2048) };
    }

    #[test]
    fn large_jump_clears_the_ring() {
        let mut window = ReplayWindow::new(u64::MAX);
        for counter in 0..4096 {
            window.accept(counter).unwrap();
        }
        window.accept(1_000_000).unwrap();
        window.accept(1_000_000 - 64).unwrap();
        window.accept(999_999).unwrap();
    }

    #[test]
    fn check_does_not_move_the_window() {
        let mut window = ReplayWindow::new(u64::MAX);
        window.check(1_000_000).unwrap();
        window.accept(1).unwrap();
        window.accept(2).unwrap();
    }

    #[test]
    fn limit_is_enforced() {
        let mut window = ReplayWindow::new(100);
        assert_eq!(window.accept(100), Err(ReplayError::LimitReached));
        window.accept(99).unwrap();
    }

    proptest! {
        #[test]
        fn matches_naive_model(steps in prop::collection::vec((0u64..3, 0u64..6000), 1..400)) {
            let mut window = ReplayWindow::new(1 << 20);
            let mut naive = NaiveWindow { seen: HashSet::new(), newest: None, limit: 1 << 20 };
            let mut base = 0u64;
            for (kind, offset) in steps {
                // Mix small steps, jitter around the front and big jumps.
                let counter = match kind {
                    0 => base + offset % 8,
                    1 => base.saturating_sub(offset),
                    _ => { base += offset; base }
                };
                prop_assert_eq!(window.accept(counter), naive.accept(counter), "counter {}", counter);
            }
        }
    }
}
