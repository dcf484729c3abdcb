//! The datagrams whose first fragment a peer's firewall let through:
//! their later fragments carry no ports, so they pass on that decision
//! alone. A small ring per peer, so a member sending a flood of
//! fragmented datagrams overwrites only its own entries.

use super::packet::FragmentKey;

/// Datagrams remembered per peer: far more than are in flight at once
/// between two members that reassemble within the kernel's time.
const REMEMBERED: usize = 64;
/// How long later fragments may follow the first: Linux's reassembly
/// time (`ipfrag_time`), after which the datagram is lost anyway.
const LIFETIME_SECS: u32 = 30;

#[derive(Default)]
pub(super) struct PassedDatagrams {
    /// The datagram and when its first fragment passed.
    entries: Vec<(FragmentKey, u32)>,
    /// The entry the next new datagram replaces once the ring is full.
    next: usize,
}

impl PassedDatagrams {
    pub(super) fn remember(&mut self, datagram: FragmentKey, now_secs: u32) {
        if let Some(entry) = self.entries.iter_mut().find(|(key, _)| *key == datagram) {
            entry.1 = now_secs;
        } else if self.entries.len() < REMEMBERED {
            self.entries.push((datagram, now_secs));
        } else {
            self.entries[self.next] = (datagram, now_secs);
            self.next = (self.next + 1) % REMEMBERED;
        }
    }

    pub(super) fn passed(&self, datagram: &FragmentKey, now_secs: u32) -> bool {
        self.entries
            .iter()
            .any(|(key, at)| key == datagram && now_secs.saturating_sub(*at) <= LIFETIME_SECS)
    }
}
