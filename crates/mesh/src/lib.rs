//! fjord's sans-I/O node logic on top of the WireGuard core: cryptokey
//! routing (longest-prefix match over allowed IPs) or, in switch mode,
//! a learning Ethernet switch (MAC table), membership
//! certificates, and gossip discovery of a full mesh from one bootstrap
//! member. No sockets, threads or clocks: time and randomness are passed
//! in, so a whole mesh runs deterministically in a unit test.

pub mod allowed_ips;
pub mod cert;
pub mod cidr;
mod codec;
pub mod control;
pub mod fallback;
pub mod firewall;
pub mod membership;
pub mod names;
mod node;
pub mod pmtu;
pub mod policy;
pub mod relay;
pub mod report;
pub mod switch;
#[cfg(test)]
mod test_support;

pub use allowed_ips::AllowedIps;
pub use cert::{Certificate, Grant, Group, NetworkPublicKey, NetworkSecret, Revocation};
pub use cidr::{Cidr, CidrParseError};
pub use codec::DecodeError;
pub use control::RefusalReason;
pub use membership::{
    Bootstrap, BootstrapChange, DEFAULT_EAGER_SESSIONS, DEFAULT_IDLE_TIMEOUT, ExitNodeStatus,
    GOSSIP_PARTNERS_EACH_SIDE, MemberStatus, Mesh, MeshAction, MeshConfig, PolicyOffer, Refusal,
    Trust,
};
pub use node::{
    CarrierCommand, InnerLayout, MAX_HELD_PACKETS, ModeMismatch, Node, NodeEvent, PUNCH_DATAGRAM,
    PUNCH_TTL, PeerSends,
};
