//! [`TimerQueue`]: the earliest deadline of each of many keys (peers,
//! mesh members), found without looking at every key.
//!
//! Each key has at most one *scheduled* entry: the earliest deadline known
//! for it. A deadline that moves later is not rescheduled — the entry fires
//! early, the owner finds nothing due and reports its real deadline again.
//! That keeps the hot path (a packet moves a peer's keepalive deadline
//! later) free of heap work, and bounds the heap: an entry is pushed only
//! when a key's deadline moves *earlier* than the one scheduled, which
//! happens a bounded number of times between two firings.
//!
//! Cost per operation: `update` is a comparison, plus a heap push
//! (O(log n)) only when a deadline moves earlier; `next_deadline` is O(1);
//! `pop_due` is O(log n) per entry popped. Nothing is proportional to the
//! number of keys.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Instant;

/// Deadlines of keys `0..n` (dense indices, such as `PeerId::index`).
#[derive(Debug, Default)]
pub struct TimerQueue {
    /// (deadline, key), earliest first. Entries whose deadline is not the
    /// key's `scheduled` one are stale and skipped when they surface.
    heap: BinaryHeap<Reverse<(Instant, usize)>>,
    /// Per key, the deadline of its live heap entry.
    scheduled: Vec<Option<Instant>>,
    /// Keys with a live entry (for compaction).
    live: usize,
}

impl TimerQueue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Tells the queue `key`'s earliest deadline now (`None`: no timer).
    pub fn update(&mut self, key: usize, deadline: Option<Instant>) {
        let Some(deadline) = deadline else {
            // A later firing finds nothing due and costs one pop; removing
            // the entry now would cost a heap search.
            return;
        };
        if self.scheduled.len() <= key {
            self.scheduled.resize(key + 1, None);
        }
        match self.scheduled[key] {
            Some(scheduled) if scheduled <= deadline => {}
            previous => {
                if previous.is_none() {
                    self.live += 1;
                }
                self.scheduled[key] = Some(deadline);
                self.heap.push(Reverse((deadline, key)));
                self.compact_if_bloated();
            }
        }
    }

    /// Forgets `key`'s deadline (the key is gone).
    pub fn remove(&mut self, key: usize) {
        if let Some(slot) = self.scheduled.get_mut(key)
            && slot.take().is_some()
        {
            self.live -= 1;
            self.drop_stale_front();
        }
    }

    /// Pops stale entries off the front, so that [`TimerQueue::next_deadline`]
    /// never reports the deadline of a key that was removed: a removed
    /// key's past deadline would make its owner's next timeout already due
    /// (a wasted turn of its event loop).
    fn drop_stale_front(&mut self) {
        while let Some(Reverse((deadline, key))) = self.heap.peek().copied() {
            if self.scheduled.get(key).copied().flatten() == Some(deadline) {
                return;
            }
            self.heap.pop();
        }
    }

    /// The earliest scheduled deadline. It may be earlier than any key's
    /// real deadline (see the module notes), never later, and never that
    /// of a removed key.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.heap.peek().map(|Reverse((deadline, _))| *deadline)
    }

    /// Takes the next key whose scheduled deadline is at or before `now`.
    /// The key has no entry afterwards: the caller runs what is due and
    /// calls [`TimerQueue::update`] with the key's next deadline.
    pub fn pop_due(&mut self, now: Instant) -> Option<usize> {
        while let Some(Reverse((deadline, key))) = self.heap.peek().copied() {
            if deadline > now {
                return None;
            }
            self.heap.pop();
            if self.scheduled.get(key).copied().flatten() == Some(deadline) {
                self.scheduled[key] = None;
                self.live -= 1;
                return Some(key);
            }
        }
        None
    }

    /// Drops stale entries once they outnumber live ones, so the heap stays
    /// proportional to the number of keys with timers.
    fn compact_if_bloated(&mut self) {
        if self.heap.len() <= 2 * self.live + 64 {
            return;
        }
        let scheduled = &self.scheduled;
        self.heap
            .retain(|Reverse((deadline, key))| scheduled[*key] == Some(*deadline));
    }

    #[cfg(test)]
    fn heap_len(&self) -> usize {
        self.heap.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    #[derive(Debug, Clone)]
    enum Op {
        /// Key's real deadline becomes now + ms (or none).
        Set(usize, Option<u16>),
        Remove(usize),
        /// Time moves on by ms, and the owner fires what is due.
        Advance(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (0..16usize, proptest::option::weighted(0.8, 0..5_000u16)).prop_map(|(k, d)| Op::Set(k, d)),
            1 => (0..16usize).prop_map(Op::Remove),
            2 => (0..3_000u16).prop_map(Op::Advance),
        ]
    }

    proptest! {
        /// Against a scan over every key's real deadline (the structure it
        /// replaces): the queue never reports a deadline later than the
        /// earliest real one, and firing at `now` reaches every key whose
        /// real deadline passed, and only keys that have an entry.
        #[test]
        fn agrees_with_a_scan_over_all_keys(ops in proptest::collection::vec(op(), 1..200)) {
            let start = Instant::now();
            let mut now = start;
            let mut real: Vec<Option<Instant>> = vec![None; 16];
            let mut queue = TimerQueue::new();
            for op in ops {
                match op {
                    Op::Set(key, ms) => {
                        real[key] = ms.map(|ms| now + Duration::from_millis(u64::from(ms)));
                        queue.update(key, real[key]);
                    }
                    Op::Remove(key) => {
                        real[key] = None;
                        queue.remove(key);
                    }
                    Op::Advance(ms) => {
                        now += Duration::from_millis(u64::from(ms));
                        let mut fired = Vec::new();
                        while let Some(key) = queue.pop_due(now) {
                            fired.push(key);
                            // The owner runs what is due and reports the
                            // next deadline (here: due ones are done).
                            if real[key].is_some_and(|d| d <= now) {
                                real[key] = None;
                            }
                            queue.update(key, real[key]);
                        }
                        for (key, deadline) in real.iter().enumerate() {
                            prop_assert!(
                                deadline.is_none_or(|d| d > now),
                                "key {key} due at {:?} was not fired (fired {fired:?})",
                                deadline.map(|d| d - start)
                            );
                        }
                    }
                }
                let scan = real.iter().flatten().min().copied();
                if let Some(scan) = scan {
                    prop_assert!(queue.next_deadline().is_some_and(|next| next <= scan));
                }
                prop_assert!(queue.heap_len() <= 2 * 16 + 64 + 1);
            }
        }
    }

    #[test]
    fn a_deadline_moving_later_costs_no_heap_push() {
        let now = Instant::now();
        let mut queue = TimerQueue::new();
        for step in 0..1_000u64 {
            queue.update(0, Some(now + Duration::from_millis(25_000 + step)));
        }
        assert_eq!(queue.heap_len(), 1);
        // It fires at the first deadline; the owner reports the real one.
        assert_eq!(queue.pop_due(now + Duration::from_secs(25)), Some(0));
        queue.update(0, Some(now + Duration::from_millis(25_999)));
        assert_eq!(queue.pop_due(now + Duration::from_secs(25)), None);
        assert_eq!(
            queue.next_deadline(),
            Some(now + Duration::from_millis(25_999))
        );
    }

    #[test]
    fn removed_keys_never_fire() {
        let now = Instant::now();
        let mut queue = TimerQueue::new();
        queue.update(3, Some(now));
        queue.remove(3);
        assert_eq!(queue.pop_due(now + Duration::from_secs(1)), None);
        queue.update(3, Some(now));
        assert_eq!(queue.pop_due(now), Some(3));
    }

    #[test]
    fn a_removed_keys_deadline_is_not_the_next_one() {
        // The mesh's fuzz target found a removed member's past deadline
        // reported as the next one: an event loop turn already due.
        let now = Instant::now();
        let mut queue = TimerQueue::new();
        queue.update(1, Some(now + Duration::from_secs(5)));
        queue.update(2, Some(now));
        queue.update(2, Some(now - Duration::from_secs(1)));
        queue.remove(2);
        assert_eq!(queue.next_deadline(), Some(now + Duration::from_secs(5)));
        queue.remove(1);
        assert_eq!(queue.next_deadline(), None);
    }
}
