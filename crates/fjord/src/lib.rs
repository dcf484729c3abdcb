//! The fjord binary's library: configuration files, key commands, the
//! `up` and `show` commands, and the WireGuard configuration protocol.
//! `cli.rs` defines the command line; `main.rs` only parses it and maps
//! errors to exit codes.

pub mod cli;
pub mod config;
pub mod counters;
pub mod keycmd;
#[cfg(feature = "lab")]
pub mod labcmd;
#[cfg(feature = "lab")]
pub mod labhosts;
pub mod member_routes;
pub mod metrics;
pub mod nameserver;
pub mod netconf;
pub mod networkcmd;
pub mod privilege;
pub mod reload;
pub mod reresolve;
pub mod service;
pub mod show;
pub mod status;
pub mod uapi;
pub mod up;
pub mod userspace;
