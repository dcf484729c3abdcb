//! fjord's sans-I/O node logic on top of the WireGuard core: cryptokey
//! routing (longest-prefix match over allowed IPs) today; gossip discovery,
//! NAT traversal and relay choice later. No sockets, threads or clocks.

pub mod allowed_ips;
pub mod cidr;
mod node;

pub use allowed_ips::AllowedIps;
pub use cidr::{Cidr, CidrParseError};
pub use node::Node;
