//! fjord lab: builds hosts in network namespaces, emulates links, drives
//! tunnels (fjord and its peers) and measures them. System calls go
//! through `fjord-sys`; the lab itself has no `unsafe`.

#![forbid(unsafe_code)]

pub mod attack;
pub mod emulated_peers;
pub mod emulator;
pub mod firewall;
pub mod install;
pub mod measure;
pub mod narrow_path;
pub mod nat;
pub mod netns;
pub mod progress;
pub mod relay;
pub mod remote;
pub mod report;
pub mod results;
pub mod rounds;
pub mod run;
pub mod suites;
pub mod systems;
pub mod topology;
pub mod traffic;
