//! `fjord show [IFACE] [--json]`: what `wg show` prints, for fjord's
//! interfaces and any other userspace implementation's, plus fjord's drop
//! counters.

use std::fmt::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fjord_mesh::names::Domain;

use crate::status::{InterfaceReport, PeerReport, PolicyReport};
use crate::uapi::{self, UapiInterface};

/// Text for one interface, shaped like `wg show`.
pub fn render_text(name: &str, interface: &UapiInterface, now: SystemTime) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "interface: {name}");
    if let Some(key) = &interface.public_key {
        let _ = writeln!(out, "  public key: {key}");
    }
    if interface.has_private_key {
        let _ = writeln!(out, "  private key: (hidden)");
    }
    if interface.listen_port != 0 {
        let _ = writeln!(out, "  listening port: {}", interface.listen_port);
    }
    if interface.fwmark != 0 {
        let _ = writeln!(out, "  fwmark: {:#x}", interface.fwmark);
    }
    let drops: Vec<String> = interface
        .counters
        .iter()
        .filter_map(|(key, n)| {
            key.strip_prefix("drop_")
                .map(|reason| format!("{n} {reason}"))
        })
        .collect();
    if !drops.is_empty() {
        let _ = writeln!(out, "  dropped: {}", drops.join(", "));
    }
    // Turns that found work and moved no data: near zero unless the
    // worker loops without progress (it then waits between turns).
    let idle_turns = interface
        .counters
        .iter()
        .find_map(|(key, n)| (key == "idle_turns").then_some(*n))
        .unwrap_or(0);
    if idle_turns > 0 {
        let _ = writeln!(out, "  worker: {idle_turns} turns without progress");
    }
    let handshakes = handshake_counters(interface);
    let computed = handshakes.get("initiations_computed").copied();
    let cookies = handshakes.get("cookie_replies").copied();
    let withheld = handshakes
        .get("cookie_replies_withheld")
        .copied()
        .unwrap_or(0);
    if computed.unwrap_or(0) > 0 || cookies.unwrap_or(0) > 0 || withheld > 0 {
        let _ = write!(
            out,
            "  handshakes: {} initiations computed, {} cookie replies",
            computed.unwrap_or(0),
            cookies.unwrap_or(0)
        );
        // Only under a flood faster than the reply budget.
        if withheld > 0 {
            let _ = write!(out, ", {withheld} left unanswered (reply budget spent)");
        }
        out.push('\n');
    }
    if let Some(count) = switch_mac_addresses(interface) {
        let _ = writeln!(out, "  switch: {count} MAC addresses known");
    }
    let carriers = carrier_counters(interface);
    if carriers.values().any(|n| *n > 0) {
        let count = |name: &str| carriers.get(name).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "  fallback: {} to a carrier, {} back to UDP; carriers: {} datagrams sent, {} dropped, {} received",
            count("fallback_to_carrier"),
            count("fallback_back_to_udp"),
            count("carrier_datagrams_sent"),
            count("carrier_datagrams_dropped"),
            count("carrier_datagrams_received"),
        );
    }
    if !interface.members.is_empty() {
        let in_session = interface
            .members
            .iter()
            .filter(|member| member.path == "direct" || member.path.starts_with("relay "))
            .count();
        let _ = writeln!(
            out,
            "  mesh members: {} ({in_session} with a session)",
            interface.members.len()
        );
        match policy(interface) {
            Some(policy) => {
                let _ = writeln!(out, "  network policy: {}", policy_summary(&policy));
            }
            None => {
                let _ = writeln!(
                    out,
                    "  network policy: none (every member may reach every other)"
                );
            }
        }
    }
    if let Some(domain) = &interface.domain {
        let _ = writeln!(out, "  names: NAME.{domain} (answered on port 53)");
    }
    if let Some(exit_node) = &interface.exit_node {
        let _ = writeln!(out, "  exit node: {}", exit_node.describe());
    }
    let mesh: Vec<String> = mesh_counters(interface)
        .iter()
        .filter(|(_, n)| **n > 0)
        .map(|(name, n)| format!("{n} {}", name.replace('_', " ")))
        .collect();
    if !mesh.is_empty() {
        let _ = writeln!(out, "  mesh: {}", mesh.join(", "));
    }
    for member in &interface.members {
        let rtt = member.rtt_micros.map_or("-".to_string(), |us| {
            format!("{:.3} ms", us as f64 / 1000.0)
        });
        let path_mtu = member
            .path_mtu
            .map_or("-".to_string(), |mtu| format!("{mtu} B"));
        let _ = writeln!(
            out,
            "  member {} ({}){}: {}{}, {}, rtt {rtt}, path mtu {path_mtu}{}",
            member_label(&member.name, interface.domain.as_deref()),
            member.public_key,
            member_groups(&member.groups),
            member.addresses.join(", "),
            member_routes(&member.routes),
            member_path(&member.path, member.endpoint.as_deref()),
            certificate_expiry(member.expires_at, now),
        );
    }
    for peer in &interface.peers {
        let _ = writeln!(out, "\npeer: {}", peer.public_key);
        if peer.has_preshared_key {
            let _ = writeln!(out, "  preshared key: (hidden)");
        }
        let path = fallback_path(interface, &peer.public_key);
        match (peer.endpoint, path) {
            // The endpoint is the carrier's far end (a fallback port, or
            // the peer's TCP source port), which the path line names.
            (Some(endpoint), Some(path)) if path.starts_with("carrier") => {
                let _ = writeln!(out, "  endpoint: {} (over the carrier)", endpoint.ip());
            }
            (Some(endpoint), _) => {
                let _ = writeln!(out, "  endpoint: {endpoint}");
            }
            (None, _) => {}
        }
        if let Some(path) = path {
            let _ = writeln!(out, "  path: {path}");
        }
        let allowed = if peer.allowed_ips.is_empty() {
            "(none)".to_string()
        } else {
            peer.allowed_ips.join(", ")
        };
        let _ = writeln!(out, "  allowed ips: {allowed}");
        if let Some(at) = peer.last_handshake {
            let since = now
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .saturating_sub(at);
            let _ = writeln!(out, "  latest handshake: {}", ago(since));
        }
        if peer.rx_bytes > 0 || peer.tx_bytes > 0 {
            let _ = writeln!(
                out,
                "  transfer: {} received, {} sent",
                bytes(peer.rx_bytes),
                bytes(peer.tx_bytes)
            );
        }
        if peer.persistent_keepalive > 0 {
            let _ = writeln!(
                out,
                "  persistent keepalive: every {}",
                ago_units(u64::from(peer.persistent_keepalive))
            );
        }
        if let Some(cipher) = &peer.cipher {
            let _ = writeln!(out, "  cipher: {cipher}");
        }
        if let Some(compression) = &peer.compression {
            let _ = writeln!(
                out,
                "  compression: {}, {} packets compressed, {} sent raw, {} received compressed",
                compression.codec_name(),
                compression.compressed_packets,
                compression.raw_packets,
                compression.decompressed_packets
            );
        }
    }
    out
}

/// A member's name, with its DNS name when the mesh has a domain:
/// `node2 [node2.fjord.test]`.
fn member_label(name: &str, domain: Option<&str>) -> String {
    match dns_name(name, domain) {
        Some(full) => format!("{name} [{full}]"),
        None => name.to_string(),
    }
}

/// `NAME.DOMAIN`, when there is a domain and the name is one DNS label.
fn dns_name(name: &str, domain: Option<&str>) -> Option<String> {
    domain?.parse::<Domain>().ok()?.qualify(name)
}

/// The JSON report (no secrets).
pub fn report(name: &str, interface: &UapiInterface) -> InterfaceReport {
    InterfaceReport {
        interface: name.to_string(),
        public_key: interface
            .public_key
            .map(|k| k.to_base64())
            .unwrap_or_default(),
        listen_port: interface.listen_port,
        fwmark: (interface.fwmark != 0).then_some(interface.fwmark),
        peers: interface
            .peers
            .iter()
            .map(|peer| PeerReport {
                public_key: peer.public_key.to_base64(),
                preshared_key: peer.has_preshared_key,
                endpoint: peer.endpoint.map(|e| e.to_string()),
                allowed_ips: peer.allowed_ips.clone(),
                latest_handshake_unix_secs: peer.last_handshake.map(|d| d.as_secs()),
                rx_bytes: peer.rx_bytes,
                tx_bytes: peer.tx_bytes,
                persistent_keepalive_secs: (peer.persistent_keepalive > 0)
                    .then_some(u64::from(peer.persistent_keepalive)),
                cipher: peer.cipher.clone(),
                compression: peer.compression,
            })
            .collect(),
        drops: interface
            .counters
            .iter()
            .filter_map(|(key, n)| Some((key.strip_prefix("drop_")?.to_string(), *n)))
            .collect(),
        handshakes: handshake_counters(interface),
        members: interface.members.clone(),
        mesh: mesh_counters(interface),
        fallback: interface.fallback.clone(),
        carriers: carrier_counters(interface),
        switch_mac_addresses: switch_mac_addresses(interface),
        policy: policy(interface),
        exit_node: interface.exit_node.clone(),
        domain: interface.domain.clone(),
        dns_names: interface
            .members
            .iter()
            .filter_map(|member| {
                let full = dns_name(&member.name, interface.domain.as_deref())?;
                Some((member.public_key.clone(), full))
            })
            .collect(),
    }
}

/// `version 8, 4 rules, enforced: 12 flows tracked; flows by rule: line
/// 3: 10, line 5: 2`.
fn policy_summary(policy: &PolicyReport) -> String {
    let mut text = format!("version {}, {} rules", policy.version, policy.rules);
    if !policy.enforced {
        text.push_str(" (not enforced: switch mode carries Ethernet frames)");
        return text;
    }
    let _ = write!(text, ", enforced: {} flows tracked", policy.tracked_flows);
    if policy.evicted_flows > 0 {
        let _ = write!(text, ", {} evicted from full shares", policy.evicted_flows);
    }
    let by_line: Vec<String> = policy
        .flows_by_line
        .iter()
        .filter(|(_, flows)| **flows > 0)
        .map(|(line, flows)| format!("line {line}: {flows}"))
        .collect();
    if !by_line.is_empty() {
        let _ = write!(text, "; flows by rule: {}", by_line.join(", "));
    }
    text
}

/// The network policy in force, from its `get=fjord` lines.
fn policy(interface: &UapiInterface) -> Option<PolicyReport> {
    let reading = |name: &str| {
        interface
            .counters
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| *value)
    };
    let flows_by_line = interface
        .counters
        .iter()
        .filter_map(|(key, flows)| {
            let line = key.strip_prefix(uapi::POLICY_RULE_FLOWS_PREFIX)?;
            Some((line.parse().ok()?, *flows))
        })
        .collect();
    Some(PolicyReport {
        version: reading(uapi::POLICY_VERSION)?,
        rules: reading(uapi::POLICY_RULES)?,
        enforced: reading(uapi::POLICY_ENFORCED) == Some(1),
        tracked_flows: reading(uapi::POLICY_TRACKED_FLOWS).unwrap_or(0),
        evicted_flows: reading(uapi::POLICY_EVICTED_FLOWS).unwrap_or(0),
        flows_by_line,
    })
}

/// How many MAC addresses a switch-mode interface knows; `None` for a
/// router (or another implementation).
fn switch_mac_addresses(interface: &UapiInterface) -> Option<u64> {
    interface
        .counters
        .iter()
        .find(|(key, _)| key == uapi::SWITCH_MAC_ADDRESSES)
        .map(|(_, count)| *count)
}

/// The fallback's counters (moves between UDP and carriers, what carriers
/// carried); empty for other implementations.
fn carrier_counters(interface: &UapiInterface) -> std::collections::BTreeMap<String, u64> {
    interface
        .counters
        .iter()
        .filter(|(key, _)| key.starts_with("fallback_") || key.starts_with("carrier_"))
        .map(|(key, n)| (key.clone(), *n))
        .collect()
}

/// Where a peer that falls back sends now (`FallbackLine`): `udp`,
/// `connecting <kind> to <address>`, `carrier <kind> to <address>` or
/// `carrier <kind> from <address>`.
fn fallback_path<'a>(
    interface: &'a UapiInterface,
    key: &fjord_proto::PublicKey,
) -> Option<&'a str> {
    let key = key.to_base64();
    interface
        .fallback
        .iter()
        .find(|line| line.public_key == key)
        .map(|line| line.path.as_str())
}

/// The mesh's counters by name (`port_predictions`, ...); empty outside a
/// mesh and for other implementations.
fn mesh_counters(interface: &UapiInterface) -> std::collections::BTreeMap<String, u64> {
    interface
        .counters
        .iter()
        .filter_map(|(key, n)| Some((key.strip_prefix(uapi::MESH_PREFIX)?.to_string(), *n)))
        .collect()
}

/// fjord's handshake counters by name (`initiations_computed`,
/// `cookie_replies`); empty for other implementations.
fn handshake_counters(interface: &UapiInterface) -> std::collections::BTreeMap<String, u64> {
    interface
        .counters
        .iter()
        .filter_map(|(key, n)| Some((key.strip_prefix(uapi::HANDSHAKE_PREFIX)?.to_string(), *n)))
        .collect()
}

/// Runs `fjord show`; returns what to print.
pub fn show(interface: Option<&str>, json: bool) -> anyhow::Result<String> {
    let names = match interface {
        Some(name) => vec![name.to_string()],
        None => uapi::socket_paths(),
    };
    let mut texts = Vec::new();
    let mut reports = Vec::new();
    for name in &names {
        let state = uapi::query(name)?;
        if json {
            reports.push(report(name, &state));
        } else {
            texts.push(render_text(name, &state, SystemTime::now()));
        }
    }
    if json {
        let mut text = serde_json::to_string_pretty(&reports)?;
        text.push('\n');
        Ok(text)
    } else {
        Ok(texts.join("\n"))
    }
}

fn ago(elapsed: Duration) -> String {
    if elapsed.as_secs() == 0 {
        return "Now".to_string();
    }
    format!("{} ago", ago_units(elapsed.as_secs()))
}

/// `1 minute, 5 seconds`, as wg prints durations.
fn ago_units(total_secs: u64) -> String {
    let units = [
        (365 * 24 * 3600, "year"),
        (24 * 3600, "day"),
        (3600, "hour"),
        (60, "minute"),
        (1, "second"),
    ];
    let mut left = total_secs;
    let mut parts = Vec::new();
    for (size, name) in units {
        let count = left / size;
        left %= size;
        if count > 0 {
            parts.push(format!(
                "{count} {name}{}",
                if count == 1 { "" } else { "s" }
            ));
        }
    }
    parts.join(", ")
}

/// `1.23 MiB`, as wg prints byte counts.
fn bytes(count: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if count < 1024 {
        return format!("{count} B");
    }
    let mut value = count as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// ` @ops @db` after a member's name, as a `Member =` line writes its
/// groups; nothing for a member in none.
/// The networks behind a member, after its addresses.
fn member_routes(routes: &[String]) -> String {
    if routes.is_empty() {
        String::new()
    } else {
        format!(", routes {}", routes.join(" "))
    }
}

fn member_groups(groups: &[String]) -> String {
    groups.iter().map(|group| format!(" @{group}")).collect()
}

/// A member's path as a user reads it: where its traffic goes. Through a
/// relay it goes to the relay, and the member's own address is only what
/// was last seen of it.
fn member_path(path: &str, endpoint: Option<&str>) -> String {
    let endpoint = endpoint.unwrap_or("unknown");
    match path.strip_prefix("relay ") {
        Some(relay) => format!("relayed by {relay} (its own address last seen: {endpoint})"),
        None if path == "direct" => format!("direct to {endpoint}"),
        None if path == "on-demand" => {
            format!("no session, opened by the first packet (last known address: {endpoint})")
        }
        None => format!("{path} (last known address: {endpoint})"),
    }
}

/// `, certificate expires in 11 hours, 59 minutes` when the member has a
/// certificate (short-lived ones are renewed by reload).
fn certificate_expiry(expires_at: Option<u64>, now: SystemTime) -> String {
    let Some(expires_at) = expires_at else {
        return String::new();
    };
    let now = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
    match expires_at.checked_sub(now) {
        Some(left) if left > 0 => format!(", certificate expires in {}", ago_units(left)),
        _ => ", certificate expired".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relayed_member_shows_the_relay_as_its_path() {
        assert_eq!(
            member_path("relay node0", Some("203.0.113.7:51820")),
            "relayed by node0 (its own address last seen: 203.0.113.7:51820)"
        );
        assert_eq!(
            member_path("direct", Some("198.18.0.2:51820")),
            "direct to 198.18.0.2:51820"
        );
        assert_eq!(
            member_path("connecting", None),
            "connecting (last known address: unknown)"
        );
        assert_eq!(
            member_path("on-demand", Some("198.18.0.3:51820")),
            "no session, opened by the first packet (last known address: 198.18.0.3:51820)"
        );
        let now = UNIX_EPOCH + Duration::from_secs(1_000);
        assert_eq!(certificate_expiry(None, now), "");
        assert_eq!(
            certificate_expiry(Some(1_000 + 3_600), now),
            ", certificate expires in 1 hour"
        );
        assert_eq!(certificate_expiry(Some(900), now), ", certificate expired");
    }

    #[test]
    fn durations_and_sizes_print_like_wg() {
        assert_eq!(ago(Duration::from_secs(65)), "1 minute, 5 seconds ago");
        assert_eq!(ago(Duration::ZERO), "Now");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.50 KiB");
        assert_eq!(bytes(3 * 1024 * 1024), "3.00 MiB");
        assert_eq!(ago_units(25), "25 seconds");
    }

    #[test]
    fn handshake_counters_show_in_text_and_json() {
        let mut interface = UapiInterface {
            counters: vec![
                ("drop_cookie_required".to_string(), 7),
                ("handshake_initiations_computed".to_string(), 512),
                ("handshake_cookie_replies".to_string(), 7),
                ("tx_packets".to_string(), 3),
            ],
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains("  handshakes: 512 initiations computed, 7 cookie replies\n"),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(json["handshakes"]["cookie_replies"], 7);
        assert_eq!(json["handshakes"]["initiations_computed"], 512);
        assert_eq!(json["drops"]["cookie_required"], 7);
        // A flood faster than the reply budget: the handshakes left
        // unanswered are said too.
        interface
            .counters
            .push(("handshake_cookie_replies_withheld".to_string(), 90));
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains(
                "  handshakes: 512 initiations computed, 7 cookie replies, \
                 90 left unanswered (reply budget spent)\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(json["handshakes"]["cookie_replies_withheld"], 90);
        // Other implementations keep no such counters: no line.
        interface.counters.clear();
        assert!(!render_text("fj0", &interface, UNIX_EPOCH).contains("handshakes"));
    }

    #[test]
    fn members_show_their_dns_names_with_a_domain() {
        let member = crate::status::MemberLine {
            public_key: "KEY".to_string(),
            name: "node2".to_string(),
            addresses: vec!["198.19.0.3/32".to_string()],
            endpoint: None,
            path: "direct".to_string(),
            rtt_micros: None,
            path_mtu: None,
            expires_at: None,
            groups: Vec::new(),
            routes: Vec::new(),
        };
        let mut interface = UapiInterface {
            members: vec![member],
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(text.contains("  member node2 (KEY): "), "{text}");
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert!(json.get("domain").is_none() && json.get("dns_names").is_none());
        interface.domain = Some("fjord.test".to_string());
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains("  names: NAME.fjord.test (answered on port 53)\n"),
            "{text}"
        );
        assert!(
            text.contains("  member node2 [node2.fjord.test] (KEY): "),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(json["domain"], "fjord.test");
        assert_eq!(json["dns_names"]["KEY"], "node2.fjord.test");
    }

    #[test]
    fn mesh_counters_show_when_they_count() {
        let mut interface = UapiInterface {
            counters: vec![
                ("mesh_port_predictions".to_string(), 2),
                ("mesh_traversals_failed".to_string(), 1),
                ("mesh_relays_offered".to_string(), 0),
            ],
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains("  mesh: 2 port predictions, 1 traversals failed\n"),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(json["mesh"]["port_predictions"], 2);
        assert_eq!(json["mesh"]["relays_offered"], 0);
        interface.counters.clear();
        assert!(!render_text("fj0", &interface, UNIX_EPOCH).contains("mesh"));
    }

    #[test]
    fn a_switch_shows_its_mac_addresses_and_a_router_nothing() {
        let mut interface = UapiInterface {
            counters: vec![("switch_mac_addresses".to_string(), 3)],
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(text.contains("  switch: 3 MAC addresses known\n"), "{text}");
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(json["switch_mac_addresses"], 3);
        interface.counters.clear();
        assert!(!render_text("fj0", &interface, UNIX_EPOCH).contains("switch"));
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert!(json.get("switch_mac_addresses").is_none());
    }

    #[test]
    fn members_show_their_groups_and_the_policy_in_force() {
        let member = |name: &str, groups: &[&str]| crate::status::MemberLine {
            public_key: "KEY".to_string(),
            name: name.to_string(),
            addresses: vec!["198.19.0.2/32".to_string()],
            endpoint: None,
            path: "connecting".to_string(),
            rtt_micros: None,
            path_mtu: None,
            expires_at: None,
            groups: groups.iter().map(ToString::to_string).collect(),
            routes: Vec::new(),
        };
        let interface = UapiInterface {
            members: vec![member("db-1", &["ops", "db"]), member("web-1", &[])],
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains("  member db-1 (KEY) @ops @db: 198.19.0.2/32, "),
            "{text}"
        );
        assert!(
            text.contains("  member web-1 (KEY): 198.19.0.2/32, "),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(
            json["members"][0]["groups"],
            serde_json::json!(["ops", "db"])
        );
        assert_eq!(json["members"][1]["groups"], serde_json::json!([]));

        let mut with_policy = interface;
        assert!(
            text.contains("  network policy: none (every member may reach every other)\n"),
            "{text}"
        );
        with_policy.counters = vec![
            ("policy_version".to_string(), 4),
            ("policy_rules".to_string(), 12),
            ("policy_enforced".to_string(), 1),
            ("policy_tracked_flows".to_string(), 7),
            ("policy_evicted_flows".to_string(), 0),
            ("policy_rule_flows_3".to_string(), 5),
            ("policy_rule_flows_4".to_string(), 0),
            ("policy_rule_flows_9".to_string(), 2),
        ];
        let text = render_text("fj0", &with_policy, UNIX_EPOCH);
        assert!(
            text.contains(
                "  network policy: version 4, 12 rules, enforced: 7 flows tracked; \
                 flows by rule: line 3: 5, line 9: 2\n"
            ),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &with_policy)).unwrap();
        assert_eq!(
            json["policy"],
            serde_json::json!({
                "version": 4, "rules": 12, "enforced": true,
                "tracked_flows": 7, "evicted_flows": 0,
                "flows_by_line": {"3": 5, "4": 0, "9": 2}
            })
        );
    }

    #[test]
    fn members_show_their_routes_and_the_exit_node_its_state() {
        let gateway = crate::status::MemberLine {
            public_key: "KEY".to_string(),
            name: "gw-1".to_string(),
            addresses: vec!["198.19.0.9/32".to_string()],
            endpoint: None,
            path: "connecting".to_string(),
            rtt_micros: None,
            path_mtu: None,
            expires_at: None,
            groups: Vec::new(),
            routes: vec!["198.18.200.0/24".to_string(), "0.0.0.0/0".to_string()],
        };
        let exit_node = crate::status::ExitNodeLine {
            name: "gw-2".to_string(),
            state: "unknown".to_string(),
        };
        let interface = UapiInterface {
            members: vec![gateway],
            exit_node: Some(exit_node),
            ..UapiInterface::default()
        };
        let text = render_text("fj0", &interface, UNIX_EPOCH);
        assert!(
            text.contains("  member gw-1 (KEY): 198.19.0.9/32, routes 198.18.200.0/24 0.0.0.0/0, "),
            "{text}"
        );
        assert!(
            text.contains("  exit node: gw-2: warning: no member of that name is known"),
            "{text}"
        );
        let json = serde_json::to_value(report("fj0", &interface)).unwrap();
        assert_eq!(
            json["exit_node"],
            serde_json::json!({"name": "gw-2", "state": "unknown"})
        );
        assert_eq!(
            json["members"][0]["routes"],
            serde_json::json!(["198.18.200.0/24", "0.0.0.0/0"])
        );
    }
}
