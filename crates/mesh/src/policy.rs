//! The network policy: who may reach whom, signed once by the network
//! key and (in a later version) enforced by every member.
//!
//! A policy is text, one statement a line, `#` starting a comment:
//!
//! ```text
//! # who may reach whom in network "acme"
//! version 7
//! allow from group ops to group db port 5432/tcp
//! allow from any to any proto icmp
//! allow from group web to 10.20.0.0/16 port 443/tcp
//! allow from member build-1 to group db port 8000-8100/udp
//! ```
//!
//! - `version N` (a whole number, exactly once): a newer policy replaces
//!   an older one, so each signed edit raises it.
//! - `allow from <who> to <who> <what>`, where `<who>` is `any`,
//!   `group NAME` (a group a certificate names), `member NAME` (a
//!   certificate's name) or a prefix (`10.20.0.0/16`, `fd00::/64`, or a
//!   bare address), and `<what>` is `port N` or `port N-M` with `/tcp` or
//!   `/udp` (the destination port), or `proto tcp|udp|icmp|any`.
//!
//! Once a network has a policy, what no rule allows is denied; without
//! one, everything is allowed. Rules only allow, so their order does not
//! change the outcome; [`Policy::allows`] names the first rule that
//! matches, for counters and logs.
//!
//! Modules: [`parse`](self::parse) turns text into a [`Policy`] (every
//! error with its line), `evaluate` answers [`Policy::allows`], and
//! [`signed`] adds and checks the network's signature line.
//! Nothing here reads files: the caller passes text in.

use std::fmt;
use std::net::IpAddr;

use crate::cert::Group;
use crate::cidr::Cidr;

mod evaluate;
mod parse;
pub mod signed;
#[cfg(test)]
mod tests;

pub use evaluate::Named;
pub use parse::{
    MAX_POLICY_BYTES, MAX_POLICY_LINE_BYTES, MAX_POLICY_RULES, PolicyError, PolicyProblem,
};
pub use signed::{SIGNATURE_PREFIX, SignatureProblem, SignedPolicy};

/// A parsed policy: its version and its rules, in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    version: u64,
    rules: Vec<Rule>,
    /// The line each rule was written on (for messages; parallel to
    /// `rules`, empty for a policy built in code).
    rule_lines: Vec<usize>,
}

/// One `allow` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    pub from: Selector,
    pub to: Selector,
    pub traffic: Traffic,
}

/// The `from` or `to` side of a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Any,
    Group(Group),
    /// A certificate's name.
    Member(String),
    /// An address inside this prefix, member or not.
    Prefix(Cidr),
}

/// What a rule lets through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Traffic {
    /// `port N-M/tcp` or `/udp`: that transport to a destination port in
    /// the range.
    Ports {
        transport: Transport,
        ports: PortRange,
    },
    /// `proto ...`: every packet of the protocol.
    Protocol(Protocol),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    Tcp,
    Udp,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Tcp,
    Udp,
    /// ICMP over IPv4 or ICMPv6.
    Icmp,
    Any,
}

/// An inclusive port range; `first <= last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortRange {
    first: u16,
    last: u16,
}

impl PortRange {
    /// `None` if `first > last`.
    pub fn new(first: u16, last: u16) -> Option<Self> {
        (first <= last).then_some(Self { first, last })
    }

    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }
}

/// One end of a flow, as the enforcing member knows it: the address in
/// the packet, and the member it belongs to if any.
#[derive(Debug, Clone, Copy)]
pub struct Party<'a> {
    pub address: IpAddr,
    /// The member's certificate name; `None` for an address outside the
    /// mesh.
    pub name: Option<&'a str>,
    /// The groups its certificate (or `Member =` line) names.
    pub groups: &'a [Group],
}

/// The protocol of a packet, and its destination port for TCP and UDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Tcp {
        destination_port: u16,
    },
    Udp {
        destination_port: u16,
    },
    /// ICMP or ICMPv6.
    Icmp,
    /// Any other IP protocol, by number.
    Other(u8),
}

/// Which rule allowed a flow: its position in [`Policy::rules`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleIndex(pub usize);

impl Policy {
    /// A policy built in code; [`Policy::parse`] reads the text form.
    pub fn new(version: u64, rules: Vec<Rule>) -> Self {
        Self {
            version,
            rules,
            rule_lines: Vec::new(),
        }
    }

    pub fn version(&self) -> u64 {
        self.version
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// The line a rule was written on, for a parsed policy.
    pub fn rule_line(&self, index: RuleIndex) -> Option<usize> {
        self.rule_lines.get(index.0).copied()
    }
}

/// The canonical text: the version line, then one line per rule. It
/// parses back to an equal policy (line numbers aside).
impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "version {}", self.version)?;
        for rule in &self.rules {
            writeln!(f, "{rule}")?;
        }
        Ok(())
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allow from {} to {} {}",
            self.from, self.to, self.traffic
        )
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Any => f.write_str("any"),
            Self::Group(group) => write!(f, "group {group}"),
            Self::Member(name) => write!(f, "member {name}"),
            Self::Prefix(cidr) => write!(f, "{cidr}"),
        }
    }
}

impl fmt::Display for Traffic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Ports { transport, ports } => {
                let transport = match transport {
                    Transport::Tcp => "tcp",
                    Transport::Udp => "udp",
                };
                if ports.first == ports.last {
                    write!(f, "port {}/{transport}", ports.first)
                } else {
                    write!(f, "port {}-{}/{transport}", ports.first, ports.last)
                }
            }
            Self::Protocol(protocol) => {
                let name = match protocol {
                    Protocol::Tcp => "tcp",
                    Protocol::Udp => "udp",
                    Protocol::Icmp => "icmp",
                    Protocol::Any => "any",
                };
                write!(f, "proto {name}")
            }
        }
    }
}
