//! The cross-platform userspace configuration protocol of WireGuard
//! (`wg` talks it to wireguard-go and boringtun over
//! `/var/run/wireguard/IFACE.sock`), so `wg show` works on fjord interfaces
//! and `fjord show` works on any userspace implementation's.
//!
//! A request is `get=1` or `set=1` followed by `key=value` lines and an
//! empty line; a reply is `key=value` lines ending in `errno=N` and an
//! empty line. Keys are hex, times are split into seconds and nanoseconds.

mod apply;
mod client;
mod format;
pub mod lines;
mod server;
mod set;

pub use client::{
    UapiClientError, UapiInterface, UapiPeer, parse_get, query, reload, socket_path, socket_paths,
};
pub use format::{
    HANDSHAKE_PREFIX, MESH_PREFIX, NAMES_DOMAIN_PREFIX, PEER_CIPHER_PREFIX,
    PEER_COMPRESSION_PREFIX, POLICY_ENFORCED, POLICY_EVICTED_FLOWS, POLICY_RULE_FLOWS_PREFIX,
    POLICY_RULES, POLICY_TRACKED_FLOWS, POLICY_VERSION, SWITCH_MAC_ADDRESSES, write_fjord_counters,
    write_get,
};
pub use server::{SocketGuard, UapiServerError, bind, serve};
pub use set::{PeerChange, SetError, SetRequest, parse_set};

/// Where userspace implementations put their configuration sockets.
pub const SOCKET_DIRECTORY: &str = "/var/run/wireguard";

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn unhex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// IPv4 endpoints are kept as IPv4 even when written v4-mapped.
pub(crate) fn canonical_endpoint(address: std::net::SocketAddr) -> std::net::SocketAddr {
    fjord_net::udp::canonical(address)
}
