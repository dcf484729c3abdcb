//! Writes a [`Config`] back in wg-quick syntax (for `fjord showconf` and
//! `SaveConfig`). Values are written so that [`super::parse`] reads them back
//! unchanged: lists one per line where a key repeats, `FwMark` in hex as
//! `wg showconf` prints it.

use std::fmt::{Display, Write};

use zeroize::Zeroizing;

use super::Config;

/// Room for a typical file, so the buffer holding the private key is not
/// reallocated (leaving unwiped copies behind) while it is written.
const INTERFACE_CAPACITY_BYTES: usize = 1024;
const PEER_CAPACITY_BYTES: usize = 512;

pub(super) fn to_wg_format(config: &Config) -> Zeroizing<String> {
    let capacity = INTERFACE_CAPACITY_BYTES + PEER_CAPACITY_BYTES * config.peers.len();
    let mut out = Zeroizing::new(String::with_capacity(capacity));
    let interface = &config.interface;

    out.push_str("[Interface]\n");
    out.push_str("PrivateKey = ");
    out.push_str(&interface.private_key.to_base64());
    out.push('\n');
    if let Some(port) = interface.listen_port {
        line(&mut out, "ListenPort", port);
    }
    if let Some(mark) = interface.fwmark {
        line(&mut out, "FwMark", format_args!("{:#x}", mark.get()));
    }
    if !interface.addresses.is_empty() {
        line(&mut out, "Address", comma_list(&interface.addresses));
    }
    if let Some(mtu) = interface.mtu {
        line(&mut out, "MTU", mtu);
    }
    if let Some(port) = interface.fallback_port {
        line(&mut out, "FallbackPort", port);
    }
    if let Some(carrier) = interface.fallback_carrier {
        line(&mut out, "FallbackCarrier", carrier);
    }
    if let Some(cipher) = interface.cipher {
        line(&mut out, "Cipher", cipher);
    }
    if interface.mode != super::InterfaceMode::Router {
        line(&mut out, "Mode", interface.mode);
    }
    if let Some(compression) = interface.compression {
        line(&mut out, "Compression", compression);
    }
    if let Some(metrics) = interface.metrics {
        line(&mut out, "Metrics", metrics);
    }
    let wg_quick = &interface.wg_quick;
    if !wg_quick.dns.is_empty() {
        line(&mut out, "DNS", comma_list(&wg_quick.dns));
    }
    if let Some(table) = &wg_quick.table {
        line(&mut out, "Table", table);
    }
    for (key, hooks) in [
        ("PreUp", &wg_quick.pre_up),
        ("PostUp", &wg_quick.post_up),
        ("PreDown", &wg_quick.pre_down),
        ("PostDown", &wg_quick.post_down),
    ] {
        for hook in hooks {
            line(&mut out, key, hook);
        }
    }
    if wg_quick.save_config {
        line(&mut out, "SaveConfig", "true");
    }

    for peer in &config.peers {
        out.push_str("\n[Peer]\n");
        line(&mut out, "PublicKey", peer.public_key);
        if let Some(psk) = &peer.preshared_key {
            out.push_str("PresharedKey = ");
            out.push_str(&psk.to_base64());
            out.push('\n');
        }
        if !peer.allowed_ips.is_empty() {
            line(&mut out, "AllowedIPs", comma_list(&peer.allowed_ips));
        }
        if let Some(endpoint) = &peer.endpoint {
            line(&mut out, "Endpoint", endpoint);
        }
        if let Some(keepalive) = peer.persistent_keepalive {
            line(&mut out, "PersistentKeepalive", keepalive.secs());
        }
        if let Some(port) = peer.fallback_port {
            line(&mut out, "FallbackPort", port);
        }
        if let Some(groups) = &peer.groups {
            line(&mut out, "Groups", comma_list(groups));
        }
    }
    if let Some(mesh) = &config.mesh {
        out.push_str("\n[Mesh]\n");
        if let Some(network) = mesh.network {
            line(&mut out, "Network", network);
        }
        if let Some(certificate) = &mesh.certificate {
            line(&mut out, "Certificate", certificate.path.display());
        }
        for member in &mesh.members {
            line(&mut out, "Member", member);
        }
        for member in &mesh.bootstrap {
            line(&mut out, "Bootstrap", member);
        }
        if let Some(revocations) = &mesh.revocations {
            line(&mut out, "Revocations", revocations.path.display());
        }
        if let Some(policy) = &mesh.policy {
            line(&mut out, "Policy", policy.path.display());
        }
        if let Some(domain) = &mesh.domain {
            line(&mut out, "Domain", domain);
        }
        if let Some(exit_node) = &mesh.exit_node {
            line(&mut out, "ExitNode", exit_node);
        }
        if let Some(members) = mesh.eager_sessions {
            line(&mut out, "EagerSessions", members);
        }
        if let Some(timeout) = mesh.idle_timeout {
            line(&mut out, "IdleTimeout", timeout.as_secs());
        }
    }
    out
}

fn line(out: &mut String, key: &str, value: impl Display) {
    // Writing into a String cannot fail.
    let _ = writeln!(out, "{key} = {value}");
}

fn comma_list<T: Display>(items: &[T]) -> String {
    let mut list = String::new();
    for (index, item) in items.iter().enumerate() {
        if index > 0 {
            list.push_str(", ");
        }
        // Writing into a String cannot fail.
        let _ = write!(list, "{item}");
    }
    list
}
