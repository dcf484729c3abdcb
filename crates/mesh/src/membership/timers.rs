//! Per-key deadlines of the mesh (a member's expiry, its next NAT
//! traversal attempt and its pending Connect; an unverified peer's Hello
//! deadline) in one [`TimerQueue`], so asking for the next deadline and
//! running what is due cost O(log n) per due key, never a scan over all
//! members.
//!
//! Each key holds one queue slot while it has any deadline, and the queue
//! holds the earliest of them. Code that moves one of a key's deadlines
//! *earlier* calls [`Mesh::reschedule`]; one that moves later need not
//! (a member heard from again pushes its expiry out on every message):
//! the slot fires early, `handle_timeout` finds nothing due for it and
//! reports the real deadline.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;
use fjord_proto::timer_queue::TimerQueue;

use super::{Member, Mesh, MeshAction};

#[derive(Default)]
pub(super) struct KeyTimers {
    queue: TimerQueue,
    /// The queue slot of each key that has a deadline.
    slots: HashMap<PublicKey, usize>,
    /// Slot → key, for what the queue pops.
    keys: Vec<Option<PublicKey>>,
    /// Slots given back, reused before the table grows.
    free: Vec<usize>,
    /// The keys due in the current `handle_timeout` (kept to reuse its
    /// allocation).
    due: Vec<PublicKey>,
}

impl KeyTimers {
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.queue.next_deadline()
    }

    fn set(&mut self, key: PublicKey, deadline: Option<Instant>) {
        match deadline {
            Some(deadline) => {
                let slot = match self.slots.get(&key) {
                    Some(slot) => *slot,
                    None => {
                        let slot = self.free.pop().unwrap_or(self.keys.len());
                        if slot == self.keys.len() {
                            self.keys.push(None);
                        }
                        self.keys[slot] = Some(key);
                        self.slots.insert(key, slot);
                        slot
                    }
                };
                self.queue.update(slot, Some(deadline));
            }
            None => {
                if let Some(slot) = self.slots.remove(&key) {
                    self.queue.remove(slot);
                    self.keys[slot] = None;
                    self.free.push(slot);
                }
            }
        }
    }
}

impl Member {
    /// When it expires: its certificate runs out, or nobody has heard
    /// from it for `member_timeout`.
    fn expiry(&self, mesh: &Mesh) -> Option<Instant> {
        let clock = &mesh.wall_clock;
        // The instant whose Unix second reaches `expires_at`.
        let certificate = Duration::from_secs(self.certificate.expires_at)
            .checked_sub(clock.base_since_epoch)
            .map_or(Some(clock.base), |after| clock.base.checked_add(after));
        let silence = self.last_heard.checked_add(mesh.config.member_timeout);
        certificate.into_iter().chain(silence).min()
    }

    pub(super) fn is_expired(&self, mesh: &Mesh, now: Instant) -> bool {
        mesh.unix_secs(now) >= self.certificate.expires_at
            || now.saturating_duration_since(self.last_heard) >= mesh.config.member_timeout
    }

    /// When its next traversal attempt is due, if one is planned and it
    /// is still unmet or relayed.
    pub(super) fn punch_due(&self) -> Option<Instant> {
        if self.direct && self.traversal.relay().is_none() {
            return None;
        }
        self.traversal.due()
    }
}

impl Mesh {
    /// Tells the queue `key`'s earliest deadline; call after moving one
    /// of them earlier (see the module notes).
    pub(super) fn reschedule(&mut self, key: PublicKey) {
        let member = self.members.get(&key).map(|member| {
            [
                member.expiry(self),
                member.punch_due(),
                member.traversal.connect_at(),
            ]
        });
        let verify = self.unverified.get(&key).copied();
        let deadline = member.into_iter().flatten().chain([verify]).flatten().min();
        self.timers.set(key, deadline);
    }

    /// Runs the deadlines of single keys that are due, in the order of
    /// the scans they replace: expiries, unverified peers, then (after
    /// `between`, the periodic rounds) traversal attempts and Connects.
    pub(super) fn run_due_keys(&mut self, now: Instant, between: impl FnOnce(&mut Self)) {
        let mut due = std::mem::take(&mut self.timers.due);
        while let Some(slot) = self.timers.queue.pop_due(now) {
            // A popped slot still names its key: `set` frees a slot only
            // with its queue entry.
            if let Some(key) = self.timers.keys.get(slot).copied().flatten() {
                due.push(key);
            }
        }
        for key in &due {
            if self
                .members
                .get(key)
                .is_some_and(|member| member.is_expired(self, now))
            {
                self.remove_member(*key);
            }
        }
        for key in &due {
            if self.unverified.get(key).is_some_and(|d| *d <= now) {
                self.unverified.remove(key);
                if !self.members.contains_key(key) && !self.bootstrap.contains(key) {
                    self.actions.push_back(MeshAction::Remove { key: *key });
                }
            }
        }
        between(self);
        for key in &due {
            if self
                .members
                .get(key)
                .and_then(Member::punch_due)
                .is_some_and(|at| at <= now)
            {
                self.attempt(now, *key);
            }
        }
        for key in &due {
            self.connect_due(now, *key);
        }
        for key in &due {
            self.reschedule(*key);
        }
        due.clear();
        self.timers.due = due;
    }
}
