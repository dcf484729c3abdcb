//! The fjord binary's library: configuration files, key commands, the
//! `up` and `show` commands, and the WireGuard configuration protocol.
//! `main.rs` only parses the command line and maps errors to exit codes.

pub mod config;
pub mod counters;
pub mod keycmd;
pub mod labcmd;
pub mod metrics;
pub mod netconf;
pub mod networkcmd;
pub mod privilege;
pub mod reresolve;
pub mod show;
pub mod status;
pub mod uapi;
pub mod up;
pub mod userspace;
