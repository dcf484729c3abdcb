//! [`Policy::allows`]: whether a flow between two parties is allowed, and
//! by which rule. A linear scan in rule order; enforcement will want an
//! index by group and prefix once policies grow large.

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
}

impl Selector {
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
