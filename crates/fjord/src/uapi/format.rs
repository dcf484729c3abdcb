//! Replies of the configuration protocol, written from a status snapshot.

use std::fmt::Write;

use super::hex;
use crate::counters::{Section, interface_readings};
use crate::status::InterfaceStatus;

/// The body of a `get=1` reply (without the final `errno=` line).
pub fn write_get(status: &InterfaceStatus, out: &mut String) {
    if let Some(key) = &status.private_key {
        let private = zeroize::Zeroizing::new(hex(key.to_bytes().as_ref()));
        let _ = writeln!(out, "private_key={}", private.as_str());
    }
    let _ = writeln!(out, "listen_port={}", status.listen_port);
    if status.fwmark != 0 {
        let _ = writeln!(out, "fwmark={}", status.fwmark);
    }
    for peer in &status.peers {
        let _ = writeln!(out, "public_key={}", hex(peer.public_key.as_bytes()));
        if !peer.preshared_key.is_zero() {
            let psk = zeroize::Zeroizing::new(hex(peer.preshared_key.as_bytes()));
            let _ = writeln!(out, "preshared_key={}", psk.as_str());
        }
        let _ = writeln!(out, "protocol_version=1");
        if let Some(endpoint) = peer.endpoint {
            let _ = writeln!(out, "endpoint={endpoint}");
        }
        let handshake = peer.last_handshake.unwrap_or_default();
        let _ = writeln!(out, "last_handshake_time_sec={}", handshake.as_secs());
        let _ = writeln!(out, "last_handshake_time_nsec={}", handshake.subsec_nanos());
        let _ = writeln!(out, "tx_bytes={}", peer.tx_bytes);
        let _ = writeln!(out, "rx_bytes={}", peer.rx_bytes);
        let keepalive = peer.persistent_keepalive.map_or(0, |d| d.as_secs());
        let _ = writeln!(out, "persistent_keepalive_interval={keepalive}");
        for cidr in &peer.allowed_ips {
            let _ = writeln!(out, "allowed_ip={cidr}");
        }
    }
}

/// Prefix of a `get=fjord` line giving the domain of members' names
/// (`[Mesh] Domain`); absent without one.
pub const NAMES_DOMAIN_PREFIX: &str = "names_domain=";

/// Prefix of the handshake counters in a `get=fjord` reply.
pub const HANDSHAKE_PREFIX: &str = "handshake_";
/// Before each of the mesh's counters in the `get=fjord` reply.
pub const MESH_PREFIX: &str = "mesh_";

/// Prefix of a `get=fjord` reply's line that counts the MAC addresses a
/// switch-mode interface knows (absent in router mode).
pub const SWITCH_MAC_ADDRESSES: &str = "switch_mac_addresses";

/// The `get=fjord` lines giving the network policy in force: its version
/// and its number of rules (absent without one).
pub const POLICY_VERSION: &str = "policy_version";
pub const POLICY_RULES: &str = "policy_rules";
/// `1` while the member checks packets against the policy (`0` in switch
/// mode), the flows it tracks now, and those evicted from full shares.
pub const POLICY_ENFORCED: &str = "policy_enforced";
pub const POLICY_TRACKED_FLOWS: &str = "policy_tracked_flows";
pub const POLICY_EVICTED_FLOWS: &str = "policy_evicted_flows";
/// Prefix of the lines counting the flows each rule allowed, by the
/// rule's line in the policy file (`policy_rule_flows_3=120`).
pub const POLICY_RULE_FLOWS_PREFIX: &str = "policy_rule_flows_";

/// The body of a `get=fjord` reply: fjord's own counters, the MTU its
/// data path has taken up (`datapath_mtu`), the switch's MAC addresses
/// (`switch_mac_addresses`, switch mode only), and mesh members
/// (`member=`).
pub fn write_fjord_counters(status: &InterfaceStatus, out: &mut String) {
    let readings = interface_readings(status);
    let write_section = |out: &mut String, section: Section| {
        for reading in readings
            .iter()
            .filter(|r| r.section == section && r.shown())
        {
            let _ = writeln!(out, "{}={}", reading.key, reading.value);
        }
    };
    write_section(out, Section::Interface);
    for member in &status.members {
        let _ = writeln!(out, "{}", member.to_line());
    }
    if let Some(exit_node) = &status.exit_node {
        let _ = writeln!(out, "{}", exit_node.to_line());
    }
    write_section(out, Section::Mesh);
    let fallback_counted = readings
        .iter()
        .any(|r| r.section == Section::Fallback && r.value > 0);
    if !status.fallback.is_empty() || fallback_counted {
        write_section(out, Section::Fallback);
    }
    for line in &status.fallback {
        let _ = writeln!(out, "{}", line.to_line());
    }
    for peer in &status.peers {
        if let Some(cipher) = peer.sending_cipher {
            let _ = writeln!(out, "{PEER_CIPHER_PREFIX}{} {cipher}", peer.public_key);
            let _ = writeln!(
                out,
                "{PEER_COMPRESSION_PREFIX}{} {}",
                peer.public_key,
                peer.compression.to_fields()
            );
        }
    }
}

/// Prefix of a `get=fjord` line giving a peer's data cipher:
/// `peer_cipher=<public key> <cipher name>`.
pub const PEER_CIPHER_PREFIX: &str = "peer_cipher=";

/// Prefix of a `get=fjord` line giving a peer's compression:
/// `peer_compression=<public key> <lz4|zstd|off> <compressed> <raw>
/// <decompressed>` (see `crate::status::PeerCompression`; `on`, from a
/// fjord before zstd, reads as `lz4`).
pub const PEER_COMPRESSION_PREFIX: &str = "peer_compression=";
