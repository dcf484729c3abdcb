//! Replies of the configuration protocol, written from a status snapshot.

use std::fmt::Write;

use super::hex;
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

/// Prefix of the handshake counters in a `get=fjord` reply.
pub const HANDSHAKE_PREFIX: &str = "handshake_";
/// Before each of the mesh's counters in the `get=fjord` reply.
pub const MESH_PREFIX: &str = "mesh_";

/// Prefix of a `get=fjord` reply's line that counts the MAC addresses a
/// switch-mode interface knows (absent in router mode).
pub const SWITCH_MAC_ADDRESSES: &str = "switch_mac_addresses";

/// The body of a `get=fjord` reply: fjord's own counters, the MTU its
/// data path has taken up (`datapath_mtu`), the switch's MAC addresses
/// (`switch_mac_addresses`, switch mode only), and mesh members
/// (`member=`).
pub fn write_fjord_counters(status: &InterfaceStatus, out: &mut String) {
    let _ = writeln!(out, "datapath_mtu={}", status.datapath_mtu);
    if let Some(count) = status.mac_addresses {
        let _ = writeln!(out, "{SWITCH_MAC_ADDRESSES}={count}");
    }
    for (reason, count) in &status.drops {
        let _ = writeln!(out, "drop_{reason}={count}");
    }
    let handshakes = &status.handshakes;
    let _ = writeln!(
        out,
        "{HANDSHAKE_PREFIX}initiations_computed={}",
        handshakes.initiations_computed
    );
    let _ = writeln!(
        out,
        "{HANDSHAKE_PREFIX}cookie_replies={}",
        handshakes.cookie_replies
    );
    let _ = writeln!(
        out,
        "{HANDSHAKE_PREFIX}cookie_replies_withheld={}",
        handshakes.cookie_replies_withheld
    );
    let data = &status.data;
    for (name, value) in [
        ("tx_packets", data.tx_packets),
        ("rx_packets", data.rx_packets),
        ("rx_datagrams", data.rx_datagrams),
        ("tun_reads", data.tun_reads),
        ("tun_writes", data.tun_writes),
        ("crypto_splits", data.crypto_splits),
        ("udp_sends", data.udp_sends),
        ("udp_recvs", data.udp_recvs),
        ("tun_read_errors", data.tun_read_errors),
        ("tun_write_errors", data.tun_write_errors),
        ("udp_send_errors", data.udp_send_errors),
        ("udp_recv_errors", data.udp_recv_errors),
        ("idle_turns", data.idle_turns),
    ] {
        let _ = writeln!(out, "{name}={value}");
    }
    for member in &status.members {
        let _ = writeln!(out, "{}", member.to_line());
    }
    for (name, value) in &status.mesh_counters {
        let _ = writeln!(out, "{MESH_PREFIX}{name}={value}");
    }
    if !status.fallback.is_empty() || status.fallback_counters.iter().any(|(_, n)| *n > 0) {
        for (name, value) in &status.fallback_counters {
            let _ = writeln!(out, "{name}={value}");
        }
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
