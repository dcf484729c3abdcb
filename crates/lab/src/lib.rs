//! fjord lab: builds hosts in network namespaces, emulates links, drives
//! tunnels (fjord and its peers) and measures them.

pub mod emulator;
pub mod netns;
pub mod peers;
pub mod report;
pub mod results;
pub mod topology;
pub mod traffic;
