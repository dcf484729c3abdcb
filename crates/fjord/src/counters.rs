//! Every interface-wide number fjord reports, in one list: the
//! `get=fjord` reply prints each as `key=value`, and the metrics endpoint
//! exposes each as a Prometheus family. A counter added here appears in
//! both; nothing is named twice.
//!
//! The values come from an [`InterfaceStatus`] snapshot taken on the
//! worker: the data path keeps plain integers and never learns whether
//! anyone reads them.

use crate::status::{InterfaceStatus, PolicyStatus};

/// How Prometheus should treat a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only ever grows while the process runs (the exposition appends
    /// `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
}

/// Which part of the `get=fjord` reply a reading belongs to (the reply
/// keeps the order older readers saw).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    /// Before the `member=` lines.
    Interface,
    /// `mesh_*`, after the `member=` lines.
    Mesh,
    /// The fallback's counters, printed only while the fallback is in use.
    Fallback,
}

/// One number, with both of its names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    /// Its key in the `get=fjord` reply (`drop_replayed_counter`,
    /// `mesh_relays_offered`, `tx_packets`).
    pub key: String,
    /// Its metric family without the `fjord_` prefix and the `_total`
    /// suffix (`drops`, `mesh_relays_offered`, `transmit_packets`).
    pub family: String,
    /// The family's `# HELP` text.
    pub help: &'static str,
    pub kind: Kind,
    /// The one label that tells the family's members apart (`reason` of a
    /// drop), if the family has several.
    pub label: Option<(&'static str, String)>,
    pub value: u64,
    pub section: Section,
    /// Left out of `get=fjord` while zero (drop reasons: thirty lines of
    /// zeros would bury the ones that count). Metrics always carry it, so
    /// a rate starts from zero.
    pub hidden_while_zero: bool,
}

impl Reading {
    fn new(key: &str, family: &str, help: &'static str, kind: Kind, value: u64) -> Self {
        Self {
            key: key.to_string(),
            family: family.to_string(),
            help,
            kind,
            label: None,
            value,
            section: Section::Interface,
            hidden_while_zero: false,
        }
    }

    fn counter(key: &str, family: &str, help: &'static str, value: u64) -> Self {
        Self::new(key, family, help, Kind::Counter, value)
    }

    fn in_section(mut self, section: Section) -> Self {
        self.section = section;
        self
    }

    /// Whether the `get=fjord` reply prints it.
    pub fn shown(&self) -> bool {
        !(self.hidden_while_zero && self.value == 0)
    }
}

/// The `get=fjord` key prefix of the drop counters.
pub const DROP_PREFIX: &str = "drop_";

/// The policy in force and what enforcing it counted.
fn policy_readings(policy: &PolicyStatus) -> Vec<Reading> {
    let mut readings = vec![
        Reading::new(
            crate::uapi::POLICY_VERSION,
            "network_policy_version",
            "Version of the network policy in force (absent: none given).",
            Kind::Gauge,
            policy.version,
        ),
        Reading::new(
            crate::uapi::POLICY_RULES,
            "network_policy_rules",
            "Rules of the network policy in force.",
            Kind::Gauge,
            policy.rules as u64,
        ),
        Reading::new(
            crate::uapi::POLICY_ENFORCED,
            "network_policy_enforced",
            "1 while packets are checked against the policy (0 in switch mode).",
            Kind::Gauge,
            u64::from(policy.enforced),
        ),
        Reading::new(
            crate::uapi::POLICY_TRACKED_FLOWS,
            "network_policy_tracked_flows",
            "Flows the policy's connection tracking holds now.",
            Kind::Gauge,
            policy.tracked_flows as u64,
        ),
        Reading::counter(
            crate::uapi::POLICY_EVICTED_FLOWS,
            "network_policy_evicted_flows",
            "Tracked flows evicted because their member's share was full.",
            policy.evicted_flows,
        ),
    ];
    for &(line, flows) in &policy.flows_by_line {
        readings.push(Reading {
            label: Some(("line", line.to_string())),
            ..Reading::counter(
                &format!("{}{line}", crate::uapi::POLICY_RULE_FLOWS_PREFIX),
                "network_policy_rule_flows",
                "Flows each rule of the policy allowed, by the rule's line in the policy file.",
                flows,
            )
        });
    }
    readings
}

/// Every interface-wide reading of `status`, in `get=fjord` order within
/// each [`Section`].
pub fn interface_readings(status: &InterfaceStatus) -> Vec<Reading> {
    let mut readings = Vec::with_capacity(64);
    readings.push(Reading::new(
        "datapath_mtu",
        "datapath_mtu_bytes",
        "The MTU the data path works with now (follows `ip link set mtu` within its housekeeping interval).",
        Kind::Gauge,
        status.datapath_mtu as u64,
    ));
    if let Some(count) = status.mac_addresses {
        readings.push(Reading::new(
            crate::uapi::SWITCH_MAC_ADDRESSES,
            "switch_mac_addresses",
            "MAC addresses the switch knows now (switch mode only).",
            Kind::Gauge,
            count as u64,
        ));
    }
    if let Some(policy) = &status.policy {
        readings.extend(policy_readings(policy));
    }
    for &(reason, count) in &status.drops {
        readings.push(Reading {
            label: Some(("reason", reason.to_string())),
            hidden_while_zero: true,
            ..Reading::counter(
                &format!("{DROP_PREFIX}{reason}"),
                "drops",
                "Packets and datagrams dropped, by reason.",
                count,
            )
        });
    }
    let prefix = crate::uapi::HANDSHAKE_PREFIX;
    let handshakes = &status.handshakes;
    readings.extend([
        Reading::counter(
            &format!("{prefix}initiations_computed"),
            "handshake_initiations_computed",
            "Handshake initiations read with Diffie-Hellman work (past mac1, and mac2 under load).",
            handshakes.initiations_computed,
        ),
        Reading::counter(
            &format!("{prefix}cookie_replies"),
            "cookie_replies",
            "Handshake messages answered with a cookie reply, under load.",
            handshakes.cookie_replies,
        ),
        Reading::counter(
            &format!("{prefix}cookie_replies_withheld"),
            "unanswered_initiations",
            "Handshake messages that needed a cookie but got no reply: the flood had spent the reply budget.",
            handshakes.cookie_replies_withheld,
        ),
    ]);
    let data = &status.data;
    readings.extend([
        Reading::counter(
            "tx_packets",
            "transmit_packets",
            "IP packets read from the tunnel interface and sent to peers.",
            data.tx_packets,
        ),
        Reading::counter(
            "rx_packets",
            "receive_packets",
            "IP packets received from peers and written to the tunnel interface.",
            data.rx_packets,
        ),
        Reading::counter(
            "rx_datagrams",
            "receive_datagrams",
            "UDP datagrams received (after GRO splitting).",
            data.rx_datagrams,
        ),
        Reading::counter(
            "tun_reads",
            "tun_reads",
            "Reads from the tunnel interface; transmit_packets over this is the read batch size.",
            data.tun_reads,
        ),
        Reading::counter(
            "tun_writes",
            "tun_writes",
            "Writes to the tunnel interface; fewer than receive_packets when packets were merged (offload).",
            data.tun_writes,
        ),
        Reading::counter(
            "crypto_splits",
            "crypto_splits",
            "Batches whose encryption or decryption was shared with other threads (--threads).",
            data.crypto_splits,
        ),
        Reading::counter(
            "udp_sends",
            "udp_sends",
            "UDP send calls (each a batch: sendmmsg and GSO).",
            data.udp_sends,
        ),
        Reading::counter(
            "udp_recvs",
            "udp_receives",
            "UDP receive calls (each a batch: recvmmsg and GRO).",
            data.udp_recvs,
        ),
        Reading::counter(
            "tun_read_errors",
            "tun_read_errors",
            "Failed reads from the tunnel interface.",
            data.tun_read_errors,
        ),
        Reading::counter(
            "tun_write_errors",
            "tun_write_errors",
            "Packets lost to failed writes to the tunnel interface.",
            data.tun_write_errors,
        ),
        Reading::counter(
            "udp_send_errors",
            "udp_send_errors",
            "Failed UDP sends.",
            data.udp_send_errors,
        ),
        Reading::counter(
            "udp_recv_errors",
            "udp_receive_errors",
            "Failed UDP receives.",
            data.udp_recv_errors,
        ),
        Reading::counter(
            "idle_turns",
            "worker_idle_turns",
            "Turns of the worker's loop that found a source ready and moved no data; near zero unless it loops without progress.",
            data.idle_turns,
        ),
    ]);
    let offloads = status.offloads;
    for (kind, on) in [
        ("tun_vnet_hdr", offloads.tun_vnet_hdr),
        ("udp_gso", offloads.udp_gso),
        ("udp_gro", offloads.udp_gro),
    ] {
        readings.push(Reading {
            label: Some(("kind", kind.to_string())),
            ..Reading::new(
                &format!("offload_{kind}"),
                "offload_enabled",
                "Whether the data path uses an offload now (1) or runs without it (0): TUN virtio-net headers, UDP GSO, UDP GRO. GSO goes to 0 for good if the kernel refuses it.",
                Kind::Gauge,
                u64::from(on),
            )
        });
    }
    let mesh_prefix = crate::uapi::MESH_PREFIX;
    for &(name, value) in &status.mesh_counters {
        readings.push(
            Reading::counter(
                &format!("{mesh_prefix}{name}"),
                &format!("mesh_{name}"),
                mesh_help(name),
                value,
            )
            .in_section(Section::Mesh),
        );
    }
    for &(name, value) in &status.fallback_counters {
        readings.push(
            Reading::counter(name, name, fallback_help(name), value).in_section(Section::Fallback),
        );
    }
    readings
}

fn mesh_help(name: &str) -> &'static str {
    match name {
        "members_learned" => "Mesh members learned.",
        "members_removed" => "Mesh members removed.",
        "revocations_learned" => "Certificate revocations learned from other members.",
        "policies_learned" => "Network policies fetched from other members and put in force.",
        "policies_refused" => {
            "Network policies fetched from other members and refused (hash, signature or text)."
        }
        "policy_transfers_failed" => "Network policy transfers given up (requests unanswered).",
        "policy_chunks_dropped" => {
            "Network policy chunks of no transfer in progress, or that did not fit it."
        }
        "introductions_requested" => "Introductions this node asked a mutual member for.",
        "rendezvous_arranged" => {
            "Rendezvous this node arranged between two members (NAT traversal)."
        }
        "port_predictions" => "Rendezvous in which this node predicted ports.",
        "traversals_failed" => "Members this node gave up reaching directly.",
        "relays_offered" => "Pairs of members this node agreed to relay for.",
        "relays_left" => "Relayed members reached directly later (the relay left behind).",
        "malformed" => "Mesh control messages dropped as malformed.",
        "refused_certificates" => "Member certificates refused.",
        "not_a_member" => "Mesh messages from peers that are not members.",
        _ => "A mesh counter (see `fjord show`).",
    }
}

fn fallback_help(name: &str) -> &'static str {
    match name {
        "fallback_to_carrier" => "Moves of a peer from UDP to a fallback carrier.",
        "fallback_back_to_udp" => "Moves of a peer from a fallback carrier back to UDP.",
        "fallback_failed_connects" => "Fallback carrier connections that failed.",
        "carrier_datagrams_sent" => "Datagrams sent over fallback carriers.",
        "carrier_datagrams_dropped" => "Datagrams a fallback carrier could not take.",
        "carrier_datagrams_received" => "Datagrams received over fallback carriers.",
        "carrier_connections_opened" => "Fallback carrier connections opened.",
        "carrier_connections_accepted" => "Fallback carrier connections accepted.",
        "carrier_connections_refused" => "Fallback carrier connections refused.",
        _ => "A fallback counter (see `fjord show`).",
    }
}
