//! [`Firewall`]: the network policy enforced on packets, statefully. A
//! member checks every packet it would deliver to its TUN device
//! (inbound) and every packet it would send (outbound); a packet passes
//! when it belongs to a tracked flow, or when it opens a flow the policy
//! allows from its sender to its receiver, which is then tracked so its
//! replies pass both ways. An ICMP error passes when the packet it
//! reports on belongs to a tracked flow.
//!
//! ```text
//! packet ─▶ read (packet.rs): tuple, or ICMP error about a tuple
//!        ─▶ the peer's flows (flows.rs): tracked? ─▶ pass
//!        ─▶ Policy::allows(opener, receiver, flow) ─▶ track, pass
//!                                                 └▶ drop (the caller counts
//!                                                    policy_inbound/_outbound)
//! ```
//!
//! Parties are named by what the firewall was told of each peer
//! ([`Scope`]): a member's certificate name and groups apply to its own
//! addresses only, so a rule `to group db` does not open the networks
//! routed behind a db member; prefixes name those. Peers outside the
//! policy ([`Scope::Exempt`]: plain WireGuard peers) pass untracked.
//! When the policy or this member's identity changes, tracked flows are
//! checked again before their next packet, so a withdrawn rule closes
//! open connections too.
//!
//! Sans-I/O like the rest of the crate: the caller passes `now`.

mod flows;
mod fragments;
pub mod packet;
#[cfg(test)]
mod tests;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use fjord_proto::PeerId;

use crate::cert::Group;
use crate::cidr::Cidr;
use crate::policy::{Named, Party, Policy, RuleIndex};
use flows::{FlowKey, Inserted, PeerFlows, Side};
use fragments::PassedDatagrams;
use packet::{Packet, Signature, Tuple};

/// Flows each peer may hold in each share (those it opened, those this
/// member opened toward it) before its oldest go.
pub const FLOWS_PER_PEER_SIDE: usize = 4096;

/// How often timed-out flows are swept out of every table.
const SWEEP_INTERVAL_SECS: u32 = 30;

/// Who a party is, for the policy's `member` and `group` selectors.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Identity {
    /// The certificate's name; `None` for a configured peer.
    pub name: Option<String>,
    pub groups: Vec<Group>,
    /// Its own addresses: the name and groups apply to these only.
    pub addresses: Vec<Cidr>,
}

impl Identity {
    fn named(&self) -> Named<'_> {
        Named {
            name: self.name.as_deref(),
            groups: &self.groups,
        }
    }

    fn party(&self, address: IpAddr) -> Party<'_> {
        if self.addresses.iter().any(|cidr| cidr.contains(&address)) {
            Party {
                address,
                name: self.name.as_deref(),
                groups: &self.groups,
            }
        } else {
            Party {
                address,
                name: None,
                groups: &[],
            }
        }
    }
}

/// Whether a peer's packets are checked against the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// A plain WireGuard peer: outside the policy, every packet passes.
    Exempt,
    Enforced(Identity),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Received from a peer, on its way to the TUN device.
    Inbound,
    /// Read from the TUN device, on its way to a peer.
    Outbound,
}

enum PeerSlot {
    /// Not asked yet: the next packet asks the caller.
    Unknown,
    Exempt,
    Enforced(Box<EnforcedPeer>),
}

struct EnforcedPeer {
    identity: Identity,
    flows: PeerFlows,
    fragmented: PassedDatagrams,
    /// By direction (`opener` index): the signature of its last TCP or
    /// UDP packet that passed, in that second under that generation. The
    /// next packet of the same flow in the same second passes on a
    /// compare of raw header bytes, without reading the header or the
    /// table: its flow's `last_seen` already says this second.
    recent: [Option<RecentFlow>; 2],
    /// The rules a flow between this peer and us can match, by opener
    /// (`Side::index`), and the generation they were taken at: a policy
    /// of teams and services asks a new flow about a few rules, not all.
    candidates: Option<(u32, [Vec<u16>; 2])>,
}

#[derive(Clone, Copy)]
struct RecentFlow {
    signature: Signature,
    secs: u32,
    generation: u32,
}

impl EnforcedPeer {
    /// Takes the peer's candidate rules under `policy` again when the
    /// policy or our identity changed since (a compare per packet).
    fn refresh_candidates(&mut self, policy: &Policy, local: &Identity, generation: u32) {
        if self
            .candidates
            .as_ref()
            .is_none_or(|(taken, _)| *taken != generation)
        {
            let (us, them) = (local.named(), self.identity.named());
            let opened_by_us = policy.candidates(&us, &them);
            let opened_by_them = policy.candidates(&them, &us);
            self.candidates = Some((generation, [opened_by_us, opened_by_them]));
        }
    }
}

/// The firewall's counters, for `fjord show` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FirewallReport {
    pub policy_version: u64,
    /// Flows tracked now, over every peer.
    pub tracked_flows: usize,
    /// Flows evicted because their peer's share was full.
    pub evicted_flows: u64,
    /// Per rule (in the policy's order), the flows it allowed.
    pub flows_by_rule: Vec<u64>,
}

pub struct Firewall {
    policy: Policy,
    /// Raised when the policy or this member's identity changes.
    generation: u32,
    local: Identity,
    /// By `PeerId::index`.
    peers: Vec<PeerSlot>,
    flows_by_rule: Vec<u64>,
    evicted_flows: u64,
    epoch: Instant,
    /// The whole seconds since `epoch` that `now` last fell in, and when
    /// that second starts and ends: the clock read per packet is two
    /// compares most of the time.
    second: (u32, Instant, Instant),
    next_sweep_secs: u32,
    flows_per_side: usize,
}

impl Firewall {
    pub fn new(policy: Policy, local: Identity, now: Instant) -> Self {
        Self {
            flows_by_rule: vec![0; policy.rules().len()],
            policy,
            generation: 0,
            local,
            peers: Vec::new(),
            evicted_flows: 0,
            epoch: now,
            second: (0, now, now + Duration::from_secs(1)),
            next_sweep_secs: SWEEP_INTERVAL_SECS,
            flows_per_side: FLOWS_PER_PEER_SIDE,
        }
    }

    /// The cap of each peer's shares (tests and benchmarks lower it).
    pub fn set_flows_per_side(&mut self, flows: usize) {
        self.flows_per_side = flows.max(1);
    }

    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// Enforces `policy` from now on; tracked flows are checked against it
    /// before their next packet.
    pub fn set_policy(&mut self, policy: Policy) {
        self.flows_by_rule = vec![0; policy.rules().len()];
        self.policy = policy;
        self.generation = self.generation.wrapping_add(1);
    }

    /// This member's own name, groups and addresses changed (a renewed
    /// certificate).
    pub fn set_local(&mut self, local: Identity) {
        if local != self.local {
            self.local = local;
            self.generation = self.generation.wrapping_add(1);
        }
    }

    pub fn local(&self) -> &Identity {
        &self.local
    }

    /// Forgets what is known of `peer` and its flows: it left, or its
    /// certificate changed; its next packet asks who it is again.
    pub fn forget_peer(&mut self, peer: PeerId) {
        if let Some(slot) = self.peers.get_mut(peer.index()) {
            *slot = PeerSlot::Unknown;
        }
    }

    pub fn forget_all_peers(&mut self) {
        self.peers.clear();
    }

    /// Whether `packet` may pass in `direction` to or from `peer`.
    /// `identify` is called the first time a peer is seen (and after
    /// [`Firewall::forget_peer`]).
    #[inline]
    pub fn admits(
        &mut self,
        now: Instant,
        direction: Direction,
        peer: PeerId,
        packet: &[u8],
        identify: impl FnOnce() -> Scope,
    ) -> bool {
        let now_secs = self.seconds(now);
        // The common cases inline, without the rest's stack frame: a peer
        // outside the policy, and the next packet of this direction's
        // last flow in the same second.
        match self.peers.get(peer.index()) {
            Some(PeerSlot::Exempt) => return true,
            Some(PeerSlot::Enforced(enforced)) => {
                let recent = enforced.recent[Side::opening(direction).index()];
                if let Some(last) = recent
                    && last.secs == now_secs
                    && last.generation == self.generation
                    && packet::signature(packet) == Some(last.signature)
                {
                    return true;
                }
            }
            _ => {}
        }
        self.admits_read(now_secs, direction, peer, packet, identify)
    }

    /// [`Firewall::admits`] past its common cases: the packet is read.
    #[inline(never)]
    fn admits_read(
        &mut self,
        now_secs: u32,
        direction: Direction,
        peer: PeerId,
        packet: &[u8],
        identify: impl FnOnce() -> Scope,
    ) -> bool {
        let index = peer.index();
        if index >= self.peers.len() {
            self.peers.resize_with(index + 1, || PeerSlot::Unknown);
        }
        let slot = &mut self.peers[index];
        if matches!(slot, PeerSlot::Unknown) {
            *slot = match identify() {
                Scope::Exempt => PeerSlot::Exempt,
                Scope::Enforced(identity) => PeerSlot::Enforced(Box::new(EnforcedPeer {
                    identity,
                    flows: PeerFlows::default(),
                    fragmented: PassedDatagrams::default(),
                    recent: [None; 2],
                    candidates: None,
                })),
            };
        }
        let PeerSlot::Enforced(enforced) = slot else {
            return true;
        };
        let opener = Side::opening(direction);
        let slot = opener.index();
        let signature = packet::signature(packet);
        let recent = signature.map(|signature| RecentFlow {
            signature,
            secs: now_secs,
            generation: self.generation,
        });
        let (tuple, datagram) = match packet::read(packet) {
            Packet::Flow(tuple) => (tuple, None),
            Packet::FirstFragment { tuple, datagram } => (tuple, Some(datagram)),
            Packet::LaterFragment(datagram) => {
                return enforced.fragmented.passed(&datagram, now_secs);
            }
            Packet::IcmpError { error, about } => {
                // The reported packet went the other way.
                let reported = match direction {
                    Direction::Inbound => FlowKey::outbound(&about),
                    Direction::Outbound => FlowKey::inbound(&about),
                };
                if enforced.flows.get(&reported, now_secs).is_some() {
                    return true;
                }
                (error, None)
            }
            Packet::Unreadable => return false,
        };
        let key = match direction {
            Direction::Inbound => FlowKey::inbound(&tuple),
            Direction::Outbound => FlowKey::outbound(&tuple),
        };
        let admitted = 'decided: {
            // Then any flow tracked under the policy in force.
            let tracked = enforced.flows.get(&key, now_secs);
            if let Some(entry) = tracked
                && entry.generation == self.generation
            {
                entry.touch(now_secs);
                enforced.recent[slot] = recent;
                break 'decided true;
            }
            enforced.refresh_candidates(&self.policy, &self.local, self.generation);
            let checked = Checker {
                policy: &self.policy,
                local: &self.local,
                remote: &enforced.identity,
                candidates: enforced.candidates.as_ref().map(|(_, by_opener)| by_opener),
            };
            if let Some(entry) = enforced.flows.get(&key, now_secs) {
                if checked
                    .allows(&key.opening_packet(entry.opened_by), entry.opened_by)
                    .is_some()
                {
                    entry.generation = self.generation;
                    entry.touch(now_secs);
                    enforced.recent[slot] = recent;
                    break 'decided true;
                }
                // The rule that let it open is gone; this packet may still
                // open the flow the other way.
                enforced.flows.remove(&key);
                enforced.recent = [None; 2];
            }
            let Some(rule) = checked.allows(&tuple, opener) else {
                break 'decided false;
            };
            if let Some(count) = self.flows_by_rule.get_mut(rule.0) {
                *count += 1;
            }
            let inserted =
                enforced
                    .flows
                    .insert(key, opener, self.generation, now_secs, self.flows_per_side);
            if inserted == Inserted::Evicted {
                self.evicted_flows += 1;
                // The evicted flow may be a recent one.
                enforced.recent = [None; 2];
            }
            enforced.recent[slot] = recent;
            true
        };
        if admitted && let Some(datagram) = datagram {
            enforced.fragmented.remember(datagram, now_secs);
        }
        admitted
    }

    /// Whole seconds from the epoch to `now`.
    #[inline]
    fn seconds(&mut self, now: Instant) -> u32 {
        let (secs, starts, ends) = self.second;
        if now >= starts && now < ends {
            return secs;
        }
        let secs = now.saturating_duration_since(self.epoch).as_secs() as u32;
        let starts = self.epoch + Duration::from_secs(u64::from(secs));
        self.second = (secs, starts, starts + Duration::from_secs(1));
        secs
    }

    /// Removes timed-out flows when a sweep is due; cheap otherwise.
    pub fn sweep(&mut self, now: Instant) {
        let now_secs = self.seconds(now);
        if now_secs < self.next_sweep_secs {
            return;
        }
        self.next_sweep_secs = now_secs + SWEEP_INTERVAL_SECS;
        for slot in &mut self.peers {
            if let PeerSlot::Enforced(enforced) = slot {
                enforced.flows.sweep(now_secs);
            }
        }
    }

    pub fn report(&self) -> FirewallReport {
        FirewallReport {
            policy_version: self.policy.version(),
            tracked_flows: self
                .peers
                .iter()
                .map(|slot| match slot {
                    PeerSlot::Enforced(enforced) => enforced.flows.len(),
                    _ => 0,
                })
                .sum(),
            evicted_flows: self.evicted_flows,
            flows_by_rule: self.flows_by_rule.clone(),
        }
    }

    /// Flows tracked for `peer`, for tests and `fjord show`.
    pub fn tracked_flows(&self, peer: PeerId) -> usize {
        match self.peers.get(peer.index()) {
            Some(PeerSlot::Enforced(enforced)) => enforced.flows.len(),
            _ => 0,
        }
    }
}

/// The policy question for one peer: may the opener send this first
/// packet?
struct Checker<'a> {
    policy: &'a Policy,
    local: &'a Identity,
    remote: &'a Identity,
    /// The peer's candidate rules by opener; all rules when `None`.
    candidates: Option<&'a [Vec<u16>; 2]>,
}

impl Checker<'_> {
    fn allows(&self, opening: &Tuple, opener: Side) -> Option<RuleIndex> {
        let (from, to) = match opener {
            Side::Us => (
                self.local.party(opening.source),
                self.remote.party(opening.destination),
            ),
            Side::Them => (
                self.remote.party(opening.source),
                self.local.party(opening.destination),
            ),
        };
        let flow = opening.policy_flow();
        match self.candidates {
            Some(by_opener) => {
                self.policy
                    .allows_among(&by_opener[opener.index()], &from, &to, &flow)
            }
            None => self.policy.allows(&from, &to, &flow),
        }
    }
}
