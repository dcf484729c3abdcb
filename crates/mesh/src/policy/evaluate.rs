//! [`Policy::allows`]: whether a flow between two parties is allowed, and
//! by which rule. A linear scan in rule order; a firewall that asks
//! often about the same two parties first narrows the scan to
//! [`Policy::candidates`] for them, the rules whose `member` and `group`
//! selectors they can meet at all, and asks [`Policy::allows_among`].

use super::{Flow, Party, Policy, Protocol, RuleIndex, Selector, Traffic, Transport};

impl Policy {
    /// The first rule that allows `flow` from `from` to `to`, or `None`:
    /// denied. (Without a policy everything is allowed; that is the
    /// caller's `Option<Policy>`.)
    pub fn allows(&self, from: &Party<'_>, to: &Party<'_>, flow: &Flow) -> Option<RuleIndex> {
        self.rules
            .iter()
            .position(|rule| {
                rule.from.matches(from) && rule.to.matches(to) && rule.traffic.matches(flow)
            })
            .map(RuleIndex)
    }

    /// The rules (in order) that a flow from `from` to `to` can match for
    /// some addresses: those whose `member` and `group` selectors name
    /// them, and every `any` and prefix selector (the address decides
    /// those, packet by packet). A party's name and groups are those its
    /// own addresses carry; an address outside them carries neither.
    pub fn candidates(&self, from: &Named<'_>, to: &Named<'_>) -> Vec<u16> {
        self.rules
            .iter()
            .enumerate()
            .filter(|(_, rule)| rule.from.could_match(from) && rule.to.could_match(to))
            // The parser caps a policy at 10,000 rules.
            .filter_map(|(index, _)| u16::try_from(index).ok())
            .collect()
    }

    /// [`Policy::allows`], trying only `candidates` (from
    /// [`Policy::candidates`] for the same two parties).
    pub fn allows_among(
        &self,
        candidates: &[u16],
        from: &Party<'_>,
        to: &Party<'_>,
        flow: &Flow,
    ) -> Option<RuleIndex> {
        candidates
            .iter()
            .map(|index| usize::from(*index))
            .find(|index| {
                self.rules.get(*index).is_some_and(|rule| {
                    rule.from.matches(from) && rule.to.matches(to) && rule.traffic.matches(flow)
                })
            })
            .map(RuleIndex)
    }
}

/// What a party's own addresses carry, for [`Policy::candidates`].
#[derive(Debug, Clone, Copy)]
pub struct Named<'a> {
    pub name: Option<&'a str>,
    pub groups: &'a [crate::cert::Group],
}

impl Selector {
    fn could_match(&self, party: &Named<'_>) -> bool {
        match self {
            Self::Any | Self::Prefix(_) => true,
            Self::Group(group) => party.groups.contains(group),
            Self::Member(name) => party.name == Some(name.as_str()),
        }
    }

    fn matches(&self, party: &Party<'_>) -> bool {
        match self {
            Self::Any => true,
            Self::Group(group) => party.groups.contains(group),
            Self::Member(name) => party.name == Some(name.as_str()),
            Self::Prefix(cidr) => cidr.contains(&party.address),
        }
    }
}

impl Traffic {
    fn matches(&self, flow: &Flow) -> bool {
        match (self, flow) {
            (Self::Protocol(Protocol::Any), _)
            | (Self::Protocol(Protocol::Tcp), Flow::Tcp { .. })
            | (Self::Protocol(Protocol::Udp), Flow::Udp { .. })
            | (Self::Protocol(Protocol::Icmp), Flow::Icmp) => true,
            (
                Self::Ports {
                    transport: Transport::Tcp,
                    ports,
                },
                Flow::Tcp { destination_port },
            )
            | (
                Self::Ports {
                    transport: Transport::Udp,
                    ports,
                },
                Flow::Udp { destination_port },
            ) => ports.contains(*destination_port),
            _ => false,
        }
    }
}
