//! The flows one peer takes part in: connection tracking with a share
//! per side. Flows the peer opened and flows this member opened toward it
//! fill separate shares, each capped, so a peer that opens a million flows
//! evicts only its own, never the ones this member depends on.
//!
//! A flow lives while packets keep coming within its protocol's timeout.
//! When a share is full, the oldest flow of that share goes, unless it
//! carried a packet in the last seconds: that one is moved back once
//! (a second chance), so a busy long-lived connection survives a burst
//! of short ones.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;

use super::packet::{ICMP, ICMPV6, TCP, Tuple, UDP};

/// Seconds a flow stays without a packet, by protocol: TCP as long as an
/// idle SSH session is commonly kept, UDP as long as a NAT would, ICMP
/// just past an echo's usual wait.
const TCP_TIMEOUT_SECS: u32 = 15 * 60;
const UDP_TIMEOUT_SECS: u32 = 3 * 60;
const ICMP_TIMEOUT_SECS: u32 = 30;

/// A flow that carried a packet this recently is not evicted first.
const ACTIVE_SECS: u32 = 10;

/// Most active flows moved back per eviction, so one insert stays cheap
/// even when every flow of a share is busy.
const SECOND_CHANCES: usize = 8;

/// Who opened a flow: its first packet went from this member (`Us`) or
/// came from the peer (`Them`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Us,
    Them,
}

impl Side {
    /// Who would have opened the flow of a packet going `direction`.
    pub(super) fn opening(direction: super::Direction) -> Self {
        match direction {
            super::Direction::Inbound => Self::Them,
            super::Direction::Outbound => Self::Us,
        }
    }

    pub(super) fn index(self) -> usize {
        match self {
            Self::Us => 0,
            Self::Them => 1,
        }
    }
}

/// A flow seen from this member: the same key whichever way a packet
/// goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    protocol: u8,
    local: IpAddr,
    remote: IpAddr,
    local_port: u16,
    remote_port: u16,
}

impl FlowKey {
    /// The key of a packet this member sends.
    pub fn outbound(tuple: &Tuple) -> Self {
        Self {
            protocol: tuple.protocol,
            local: tuple.source,
            remote: tuple.destination,
            local_port: tuple.source_port,
            remote_port: tuple.destination_port,
        }
    }

    /// The key of a packet this member receives.
    pub fn inbound(tuple: &Tuple) -> Self {
        Self {
            protocol: tuple.protocol,
            local: tuple.destination,
            remote: tuple.source,
            local_port: tuple.destination_port,
            remote_port: tuple.source_port,
        }
    }

    /// The first packet of the flow, as `opened_by` sent it.
    pub fn opening_packet(&self, opened_by: Side) -> Tuple {
        let (source, destination, source_port, destination_port) = match opened_by {
            Side::Us => (self.local, self.remote, self.local_port, self.remote_port),
            Side::Them => (self.remote, self.local, self.remote_port, self.local_port),
        };
        Tuple {
            protocol: self.protocol,
            source,
            destination,
            source_port,
            destination_port,
        }
    }

    fn timeout_secs(&self) -> u32 {
        match self.protocol {
            TCP => TCP_TIMEOUT_SECS,
            ICMP | ICMPV6 => ICMP_TIMEOUT_SECS,
            UDP => UDP_TIMEOUT_SECS,
            _ => UDP_TIMEOUT_SECS,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Entry {
    /// Seconds since the firewall's epoch.
    last_seen: u32,
    pub opened_by: Side,
    /// The policy generation it was allowed under; an older one is checked
    /// again before its next packet passes.
    pub generation: u32,
    /// Its place in the share's eviction order.
    serial: u32,
}

impl Entry {
    pub fn touch(&mut self, now_secs: u32) {
        self.last_seen = now_secs;
    }
}

/// What inserting a flow did to its share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    Fresh,
    /// The share was full: another of its flows went.
    Evicted,
}

type FastMap<K, V> = HashMap<K, V, foldhash::fast::RandomState>;

#[derive(Default)]
pub struct PeerFlows {
    flows: FastMap<FlowKey, Entry>,
    /// Per side, keys in the order they were inserted with their serial; an
    /// entry whose serial differs (removed, or inserted again) is stale.
    order: [VecDeque<(FlowKey, u32)>; 2],
    open: [usize; 2],
    next_serial: u32,
}

impl PeerFlows {
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// The live flow of `key`. An expired one is `None` and stays until
    /// the flow is inserted again, evicted or swept: one hash lookup a
    /// packet.
    #[inline]
    pub fn get(&mut self, key: &FlowKey, now_secs: u32) -> Option<&mut Entry> {
        self.flows
            .get_mut(key)
            .filter(|entry| now_secs.saturating_sub(entry.last_seen) <= key.timeout_secs())
    }

    pub fn remove(&mut self, key: &FlowKey) {
        if let Some(entry) = self.flows.remove(key) {
            self.open[entry.opened_by.index()] -= 1;
        }
    }

    /// Tracks a new flow, evicting from its side's share when that holds
    /// `cap` flows already.
    pub fn insert(
        &mut self,
        key: FlowKey,
        opened_by: Side,
        generation: u32,
        now_secs: u32,
        cap: usize,
    ) -> Inserted {
        let side = opened_by.index();
        let mut inserted = Inserted::Fresh;
        if self.open[side] >= cap {
            self.evict_one(side, now_secs);
            inserted = Inserted::Evicted;
        }
        let serial = self.next_serial;
        self.next_serial = self.next_serial.wrapping_add(1);
        let entry = Entry {
            last_seen: now_secs,
            opened_by,
            generation,
            serial,
        };
        if let Some(replaced) = self.flows.insert(key, entry) {
            self.open[replaced.opened_by.index()] -= 1;
        }
        self.open[side] += 1;
        self.order[side].push_back((key, serial));
        if self.order[side].len() > 2 * cap + 64 {
            self.compact(side);
        }
        inserted
    }

    /// Removes the flows that timed out; returns how many.
    pub fn sweep(&mut self, now_secs: u32) -> usize {
        let before = self.flows.len();
        self.flows
            .retain(|key, entry| now_secs.saturating_sub(entry.last_seen) <= key.timeout_secs());
        self.open = [0, 0];
        for entry in self.flows.values() {
            self.open[entry.opened_by.index()] += 1;
        }
        for side in 0..2 {
            self.compact(side);
        }
        before - self.flows.len()
    }

    fn evict_one(&mut self, side: usize, now_secs: u32) {
        let mut chances = SECOND_CHANCES;
        while let Some((key, serial)) = self.order[side].pop_front() {
            let Some(entry) = self.flows.get(&key) else {
                continue;
            };
            if entry.serial != serial {
                continue;
            }
            let active = now_secs.saturating_sub(entry.last_seen) < ACTIVE_SECS;
            if active && chances > 0 {
                chances -= 1;
                self.order[side].push_back((key, serial));
                continue;
            }
            self.remove(&key);
            return;
        }
    }

    /// Rebuilds a side's order from its live flows, dropping stale keys.
    fn compact(&mut self, side: usize) {
        let mut live: Vec<(u32, FlowKey)> = self
            .flows
            .iter()
            .filter(|(_, entry)| entry.opened_by.index() == side)
            .map(|(key, entry)| (entry.serial, *key))
            .collect();
        // Serials wrap only after 4 billion inserts; order by distance
        // from the newest so a wrap keeps the oldest first.
        let newest = self.next_serial;
        live.sort_by_key(|(serial, _)| std::cmp::Reverse(newest.wrapping_sub(*serial)));
        self.order[side] = live
            .into_iter()
            .map(|(serial, key)| (key, serial))
            .collect();
    }
}
