//! Frames waiting for their release time, earliest first.
//!
//! With a fixed delay (and FIFO jitter) release times only grow, so a plain
//! FIFO holds everything at O(1) per frame. Frames scheduled earlier than
//! the FIFO's tail (free jitter, reordering) go to a binary heap instead;
//! popping takes the earlier of the two heads. Ties leave in the order they
//! were pushed. Both containers are preallocated and never shrink, so a
//! steady stream allocates nothing.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

#[derive(Debug)]
struct Entry<T> {
    at: Duration,
    sequence: u64,
    item: T,
}

impl<T> Entry<T> {
    fn key(&self) -> (Duration, u64) {
        (self.at, self.sequence)
    }
}

impl<T> PartialEq for Entry<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Entry<T> {}

impl<T> PartialOrd for Entry<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Entry<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

/// Items ordered by release time.
#[derive(Debug)]
pub struct ReleaseQueue<T> {
    in_order: VecDeque<Entry<T>>,
    out_of_order: BinaryHeap<Reverse<Entry<T>>>,
    next_sequence: u64,
}

impl<T> ReleaseQueue<T> {
    /// Room for `capacity` items before either container grows.
    pub fn with_capacity(capacity: usize) -> Self {
        Self {
            in_order: VecDeque::with_capacity(capacity),
            out_of_order: BinaryHeap::with_capacity(capacity.min(1 << 16)),
            next_sequence: 0,
        }
    }

    pub fn push(&mut self, at: Duration, item: T) {
        let entry = Entry {
            at,
            sequence: self.next_sequence,
            item,
        };
        self.next_sequence += 1;
        match self.in_order.back() {
            Some(last) if last.at > at => self.out_of_order.push(Reverse(entry)),
            _ => self.in_order.push_back(entry),
        }
    }

    /// When the earliest item is due.
    pub fn next_release(&self) -> Option<Duration> {
        match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(a), Some(Reverse(b))) => Some(a.at.min(b.at)),
            (Some(a), None) => Some(a.at),
            (None, Some(Reverse(b))) => Some(b.at),
            (None, None) => None,
        }
    }

    /// The earliest item if it is due at `now`.
    pub fn pop_due(&mut self, now: Duration) -> Option<T> {
        let take_heap = match (self.in_order.front(), self.out_of_order.peek()) {
            (Some(a), Some(Reverse(b))) => b.key() < a.key(),
            (Some(_), None) => false,
            (None, Some(_)) => true,
            (None, None) => return None,
        };
        if take_heap {
            if self
                .out_of_order
                .peek()
                .is_some_and(|Reverse(b)| b.at <= now)
            {
                return self.out_of_order.pop().map(|Reverse(entry)| entry.item);
            }
        } else if self.in_order.front().is_some_and(|a| a.at <= now) {
            return self.in_order.pop_front().map(|entry| entry.item);
        }
        None
    }

    pub fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every item, earliest first.
    pub fn drain_all(&mut self) -> impl Iterator<Item = T> + '_ {
        std::iter::from_fn(move || self.pop_due(Duration::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::emulator::rng::Rng;

    fn us(value: u64) -> Duration {
        Duration::from_micros(value)
    }

    #[test]
    fn releases_in_time_order_only_when_due() {
        let mut queue = ReleaseQueue::with_capacity(8);
        queue.push(us(30), "c");
        queue.push(us(10), "a");
        queue.push(us(20), "b");
        assert_eq!(queue.next_release(), Some(us(10)));
        assert_eq!(queue.pop_due(us(5)), None);
        assert_eq!(queue.pop_due(us(25)), Some("a"));
        assert_eq!(queue.pop_due(us(25)), Some("b"));
        assert_eq!(queue.pop_due(us(25)), None);
        assert_eq!(queue.pop_due(us(30)), Some("c"));
        assert!(queue.is_empty());
        assert_eq!(queue.next_release(), None);
    }

    #[test]
    fn ties_leave_in_push_order_across_both_containers() {
        let mut queue = ReleaseQueue::with_capacity(8);
        queue.push(us(10), 1);
        queue.push(us(20), 2);
        queue.push(us(10), 3); // goes to the heap
        queue.push(us(20), 4);
        let order: Vec<_> = queue.drain_all().collect();
        assert_eq!(order, [1, 3, 2, 4]);
    }

    #[test]
    fn matches_a_sorted_reference_on_random_schedules() {
        let mut rng = Rng::seeded(9);
        let mut queue = ReleaseQueue::with_capacity(64);
        let mut reference: Vec<(Duration, u64)> = Vec::new();
        let mut now = Duration::ZERO;
        let mut id = 0u64;
        for _ in 0..20_000 {
            if rng.below_or_equal(2) > 0 {
                // Mostly monotone, sometimes early: like delay plus reordering.
                let at = now + us(1000) + us(rng.below_or_equal(3)) * 300
                    - us(rng.below_or_equal(1)) * 900;
                queue.push(at, id);
                reference.push((at, id));
                id += 1;
            }
            now += us(rng.below_or_equal(50));
            let mut due: Vec<_> = reference
                .iter()
                .filter(|(at, _)| *at <= now)
                .copied()
                .collect();
            due.sort();
            reference.retain(|(at, _)| *at > now);
            let popped: Vec<_> = std::iter::from_fn(|| queue.pop_due(now)).collect();
            let expected: Vec<_> = due.iter().map(|&(_, id)| id).collect();
            assert_eq!(popped, expected);
            assert_eq!(queue.len(), reference.len());
        }
    }
}
