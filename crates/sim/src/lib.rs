//! A deterministic simulator of whole fjord meshes, built from the real
//! sans-I/O [`fjord_mesh::Node`]: real keys, certificates signed by a
//! network key, real handshakes and encrypted datagrams; a simulated
//! clock and network (per-member latency, loss, NATs, partitions), all
//! from one seed. No sockets and no threads: one event queue drives every
//! node through the same calls `net`'s worker makes.
//!
//! It is the measuring instrument for the mesh's cost as it grows: the
//! [`scenario`] joins N members through one bootstrap member and reports
//! what a user would check (how soon a newcomer is known, how soon a
//! revocation reaches everyone, what each member sends at rest, how much
//! memory a member takes) in a [`Report`].
//!
//! ```text
//! scenario ─▶ Sim (sim.rs): members, event queue ─▶ Network (network.rs)
//!                 │                                   latency, loss, NAT, partitions
//!                 └─ member.rs: keys, certificate, Node with the mesh
//! ```

pub mod first_contact;
mod member;
mod nat;
pub mod network;
pub mod newcomer;
mod packet;
pub mod report;
pub mod revocation;
pub mod scenario;
pub mod session_memory;
mod sim;
pub mod traffic;

pub use member::{EPOCH_SECS, Identity, MTU};
pub use network::{LinkConfig, Partition};
pub use report::Report;
pub use scenario::ScenarioConfig;
pub use sim::{Member, Sessions, Sim, SimConfig};
