//! A point-in-time picture of an interface, taken on the worker and
//! rendered by the configuration protocol (`get=1`), `fjord show` and
//! metrics.

use std::net::SocketAddr;
use std::time::Duration;

use fjord_mesh::fallback::PathState;
use fjord_mesh::policy::RuleIndex;
use fjord_mesh::{Cidr, Node};
use fjord_net::{ControlContext, DataStats};
use fjord_proto::{
    Codec, DataCipher, DropReason, HandshakeCounters, PresharedKey, PrivateKey, PublicKey,
};
use serde::Serialize;
use serde::ser::{SerializeStruct, Serializer};

/// One interface.
#[derive(Debug, Clone)]
pub struct InterfaceStatus {
    pub name: String,
    /// `None` until a private key is configured.
    pub private_key: Option<PrivateKey>,
    pub public_key: Option<PublicKey>,
    pub listen_port: u16,
    pub fwmark: u32,
    /// The MTU the data path works with. It follows `ip link set mtu`
    /// within the worker's housekeeping interval, so it may lag the link.
    pub datapath_mtu: usize,
    pub peers: Vec<PeerStatus>,
    /// Dropped packets by reason, every reason (zeros too: metrics carry
    /// them all; `get=fjord` prints the others).
    pub drops: Vec<(&'static str, u64)>,
    /// Handshakes read with Diffie–Hellman work and answered with cookies.
    pub handshakes: HandshakeCounters,
    pub data: DataStats,
    /// Members of the fjord mesh, if the interface is in one.
    pub members: Vec<MemberLine>,
    /// Peers that fall back to a carrier when UDP fails, with their path.
    pub fallback: Vec<FallbackLine>,
    /// Counters of the fallback: moves to carriers and back, and what the
    /// carriers carried, by name.
    pub fallback_counters: Vec<(&'static str, u64)>,
    /// The mesh's counters by name (traversals, relays, refusals); empty
    /// outside a mesh.
    pub mesh_counters: Vec<(&'static str, u64)>,
    /// In switch mode, the MAC addresses the switch knows now (its own
    /// port's and those behind peers); `None` in router mode.
    pub mac_addresses: Option<usize>,
    /// The network policy in force and what enforcing it counted; `None`:
    /// none given, everything allowed.
    pub policy: Option<PolicyStatus>,
    /// The offloads the data path uses now.
    pub offloads: fjord_net::Offloads,
    /// This node's choice of exit node (`[Mesh] ExitNode`), if it made one.
    pub exit_node: Option<ExitNodeLine>,
}

pub use fjord_mesh::report::{ExitNodeLine, MemberLine};

/// The network policy in force, for `get=fjord` and metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyStatus {
    pub version: u64,
    pub rules: usize,
    /// Whether packets are checked against it (not in switch mode).
    pub enforced: bool,
    pub tracked_flows: usize,
    pub evicted_flows: u64,
    /// Flows each rule allowed, by the line the rule is written on.
    pub flows_by_line: Vec<(usize, u64)>,
}

/// One peer's fallback path, as `get=fjord` reports it:
/// `fallback=<public key> <path>`, the path one of `udp`, `connecting
/// <kind> to <address>`, `carrier <kind> to <address>` (ours, to the
/// peer's fallback port) or `carrier <kind> from <address>` (the peer
/// opened it; the address is its TCP source, not a UDP endpoint), where
/// `<kind>` is `fake-tcp` or `tcp`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FallbackLine {
    pub public_key: String,
    pub path: String,
}

impl FallbackLine {
    pub fn to_line(&self) -> String {
        format!("fallback={} {}", self.public_key, self.path)
    }

    /// Reads what follows `fallback=`.
    pub fn parse(text: &str) -> Option<Self> {
        let (public_key, path) = text.split_once(' ')?;
        Some(Self {
            public_key: public_key.to_string(),
            path: path.to_string(),
        })
    }
}

/// One peer of an interface.
#[derive(Debug, Clone)]
pub struct PeerStatus {
    pub public_key: PublicKey,
    pub preshared_key: PresharedKey,
    pub endpoint: Option<SocketAddr>,
    pub allowed_ips: Vec<Cidr>,
    /// Wall-clock time of the latest handshake, since the Unix epoch.
    pub last_handshake: Option<Duration>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    /// Data messages (keepalives included) each way, and handshakes
    /// completed and given up (see `fjord_proto::PeerStats`).
    pub rx_datagrams: u64,
    pub tx_datagrams: u64,
    pub handshakes_completed: u64,
    pub handshakes_abandoned: u64,
    pub persistent_keepalive: Option<Duration>,
    /// The cipher our data to the peer uses now (none without a session).
    pub sending_cipher: Option<DataCipher>,
    pub compression: PeerCompression,
}

/// Compression toward one peer (fjord's; see `fjord_proto::compression`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCompression {
    /// The codec our data to the peer is compressed with now (both
    /// enabled compression), or none.
    pub codec: Option<Codec>,
    /// IP packets sent compressed.
    pub compressed_packets: u64,
    /// IP packets sent raw while compression was on: too short, too
    /// random, or no shorter compressed.
    pub raw_packets: u64,
    /// Compressed packets received from the peer.
    pub decompressed_packets: u64,
}

impl PeerCompression {
    /// Whether our data to the peer is compressed now.
    pub fn on(&self) -> bool {
        self.codec.is_some()
    }

    /// `lz4`, `zstd` or `off`.
    pub fn codec_name(&self) -> &'static str {
        self.codec.map_or("off", Codec::name)
    }

    /// `zstd 120 7 98`: the fields of a `get=fjord` line (the codec, or
    /// `off`).
    pub fn to_fields(&self) -> String {
        format!(
            "{} {} {} {}",
            self.codec_name(),
            self.compressed_packets,
            self.raw_packets,
            self.decompressed_packets
        )
    }

    /// Reads [`PeerCompression::to_fields`]' text.
    pub fn parse(fields: &str) -> Option<Self> {
        let mut parts = fields.split(' ');
        // `on`: a fjord from before zstd, which had only LZ4.
        let codec = match parts.next()? {
            "on" | "lz4" => Some(Codec::Lz4),
            "zstd" => Some(Codec::Zstd),
            "off" => None,
            _ => return None,
        };
        let mut number = || parts.next()?.parse::<u64>().ok();
        let parsed = Self {
            codec,
            compressed_packets: number()?,
            raw_packets: number()?,
            decompressed_packets: number()?,
        };
        parts.next().is_none().then_some(parsed)
    }
}

/// `--json` keeps `on` beside `codec` (`lz4`, `zstd`, or null): readers
/// from before zstd know only `on`.
impl Serialize for PeerCompression {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut fields = serializer.serialize_struct("PeerCompression", 5)?;
        fields.serialize_field("on", &self.on())?;
        fields.serialize_field("codec", &self.codec.map(Codec::name))?;
        fields.serialize_field("compressed_packets", &self.compressed_packets)?;
        fields.serialize_field("raw_packets", &self.raw_packets)?;
        fields.serialize_field("decompressed_packets", &self.decompressed_packets)?;
        fields.end()
    }
}

impl InterfaceStatus {
    /// Takes the snapshot on the worker.
    pub fn capture(context: &ControlContext<'_>) -> Self {
        let node: &Node = context.node;
        let device = node.device();
        let mut allowed_ips = node.allowed_ips_by_peer();
        let peers = device
            .peer_ids()
            .filter_map(|id| {
                let status = device.peer_status(id)?;
                Some(PeerStatus {
                    public_key: status.public_key,
                    preshared_key: device
                        .peer_preshared_key(id)
                        .cloned()
                        .unwrap_or(PresharedKey::zero()),
                    endpoint: status.endpoint,
                    allowed_ips: allowed_ips.remove(&id).unwrap_or_default(),
                    last_handshake: status.stats.last_handshake,
                    rx_bytes: status.stats.rx_bytes,
                    tx_bytes: status.stats.tx_bytes,
                    rx_datagrams: status.stats.rx_datagrams,
                    tx_datagrams: status.stats.tx_datagrams,
                    handshakes_completed: status.stats.handshakes_completed,
                    handshakes_abandoned: status.stats.handshakes_abandoned,
                    persistent_keepalive: status.persistent_keepalive,
                    sending_cipher: status.sending_cipher,
                    compression: PeerCompression {
                        codec: status.sending_codec,
                        compressed_packets: status.stats.compressed_packets,
                        raw_packets: status.stats.uncompressed_packets,
                        decompressed_packets: status.stats.decompressed_packets,
                    },
                })
            })
            .collect();
        Self {
            name: context.interface.to_string(),
            private_key: device.private_key().cloned(),
            public_key: device.public_key().copied(),
            listen_port: context.listen_port(),
            fwmark: context.fwmark(),
            datapath_mtu: device.mtu(),
            peers,
            drops: {
                let drops = node.drops();
                DropReason::ALL
                    .into_iter()
                    .map(|reason| (reason.name(), drops.get(reason)))
                    .collect()
            },
            handshakes: device.handshake_counters(),
            data: context.stats.clone(),
            members: member_lines(node),
            fallback: fallback_lines(context),
            fallback_counters: fallback_counters(context),
            mesh_counters: node
                .mesh()
                .map(|mesh| mesh.counters().named().to_vec())
                .unwrap_or_default(),
            mac_addresses: node
                .mac_table()
                .map(|table| table.entries(context.now).count()),
            policy: policy_status(node),
            offloads: context.offloads(),
            exit_node: node
                .mesh()
                .and_then(|mesh| ExitNodeLine::of(&mesh.exit_node())),
        }
    }
}

/// The policy in force, with the firewall's counters when it enforces
/// it (not in switch mode).
fn policy_status(node: &Node) -> Option<PolicyStatus> {
    let policy = &node.mesh()?.policy()?.policy;
    let firewall = node.firewall_report();
    Some(PolicyStatus {
        version: policy.version(),
        rules: policy.rules().len(),
        enforced: firewall.is_some(),
        tracked_flows: firewall.as_ref().map_or(0, |report| report.tracked_flows),
        evicted_flows: firewall.as_ref().map_or(0, |report| report.evicted_flows),
        flows_by_line: firewall
            .map(|report| {
                report
                    .flows_by_rule
                    .iter()
                    .enumerate()
                    .map(|(index, flows)| {
                        let line = policy.rule_line(RuleIndex(index)).unwrap_or(index + 1);
                        (line, *flows)
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Each peer that falls back or reaches us over a carrier it opened,
/// with where its datagrams go now.
fn fallback_lines(context: &ControlContext<'_>) -> Vec<FallbackLine> {
    let node: &Node = context.node;
    let device = node.device();
    let kind = context.carrier_kind();
    device
        .peer_ids()
        .filter_map(|id| {
            let endpoint = device.peer_status(id)?.endpoint;
            let accepted = endpoint.filter(|endpoint| {
                context
                    .carrier_to(*endpoint)
                    .is_some_and(|(_, accepted)| accepted)
            });
            let path = match (node.fallback_state(id), accepted) {
                (Some(PathState::Carried { carrier, .. }), _) => {
                    format!("carrier {kind} to {carrier}")
                }
                (_, Some(source)) => format!("carrier {kind} from {source}"),
                (Some(PathState::Connecting { carrier, .. }), None) => {
                    format!("connecting {kind} to {carrier}")
                }
                (Some(PathState::Udp), None) => "udp".to_string(),
                (None, None) => return None,
            };
            Some(FallbackLine {
                public_key: device.peer_public_key(id)?.to_base64(),
                path,
            })
        })
        .collect()
}

fn fallback_counters(context: &ControlContext<'_>) -> Vec<(&'static str, u64)> {
    let moves = context.node.fallback_counters();
    let carriers = context.carrier_stats();
    vec![
        ("fallback_to_carrier", moves.fallbacks),
        ("fallback_back_to_udp", moves.returns),
        ("fallback_failed_connects", moves.failed_connects),
        ("carrier_datagrams_sent", carriers.datagrams_sent),
        ("carrier_datagrams_dropped", carriers.datagrams_dropped),
        ("carrier_datagrams_received", carriers.datagrams_received),
        ("carrier_connections_opened", carriers.connections_opened),
        (
            "carrier_connections_accepted",
            carriers.connections_accepted,
        ),
        ("carrier_connections_refused", carriers.connections_refused),
    ]
}

/// Members with their path: `direct`, `relay <name>` (a session through
/// that member), `connecting` (no session yet) or `on-demand` (no session
/// kept: sessions are on demand and no traffic asked for one).
fn member_lines(node: &Node) -> Vec<MemberLine> {
    let members = node.members();
    let name_of = |key: &PublicKey| {
        members
            .iter()
            .find(|(member, _)| member.key == *key)
            .map_or_else(|| key.to_base64(), |(member, _)| member.name.clone())
    };
    members
        .iter()
        .map(|(member, session)| MemberLine {
            public_key: member.key.to_base64(),
            name: member.name.clone(),
            addresses: member.addresses.iter().map(Cidr::to_string).collect(),
            endpoint: member.endpoints.first().map(SocketAddr::to_string),
            path: match (session, &member.relay) {
                (false, _) if member.on_demand => "on-demand".to_string(),
                (false, _) => "connecting".to_string(),
                (true, None) => "direct".to_string(),
                (true, Some(relay)) => format!("relay {}", name_of(relay)),
            },
            rtt_micros: member.rtt.map(|rtt| rtt.as_micros() as u64),
            path_mtu: node.path_mtu(&member.key).map(|mtu| mtu as u64),
            // A listed member's "certificate" never expires (u64::MAX).
            expires_at: Some(member.expires_at).filter(|at| *at != u64::MAX),
            groups: member.groups.iter().map(ToString::to_string).collect(),
            routes: member.routes.iter().map(Cidr::to_string).collect(),
        })
        .collect()
}

/// The JSON form of `fjord show --json`; never includes private or
/// preshared keys.
#[derive(Debug, Serialize)]
pub struct InterfaceReport {
    pub interface: String,
    pub public_key: String,
    pub listen_port: u16,
    pub fwmark: Option<u32>,
    pub peers: Vec<PeerReport>,
    pub drops: std::collections::BTreeMap<String, u64>,
    /// `initiations_computed` and `cookie_replies` (fjord only).
    pub handshakes: std::collections::BTreeMap<String, u64>,
    /// Mesh members (empty outside a mesh).
    pub members: Vec<MemberLine>,
    /// The mesh's counters (`port_predictions`, `traversals_failed`, ...;
    /// empty outside a mesh).
    pub mesh: std::collections::BTreeMap<String, u64>,
    /// Peers that fall back to a carrier, with their path (fjord only).
    pub fallback: Vec<FallbackLine>,
    /// The fallback's counters (`carrier_datagrams_sent`, ...; fjord only).
    pub carriers: std::collections::BTreeMap<String, u64>,
    /// MAC addresses a switch-mode interface knows; absent in router mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub switch_mac_addresses: Option<u64>,
    /// The domain of members' names (`[Mesh] Domain`); absent without.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// Each member's `NAME.DOMAIN` by public key; absent without a domain.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub dns_names: std::collections::BTreeMap<String, String>,
    /// The network policy in force (mesh members only; `null`: none, so
    /// everything is allowed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<PolicyReport>,
    /// The exit node this member chose (`[Mesh] ExitNode`) and its state:
    /// `serving`, `unknown` or `no-default-route`; absent without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_node: Option<ExitNodeLine>,
}

/// The network policy a member holds, and what enforcing it counted.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct PolicyReport {
    pub version: u64,
    pub rules: u64,
    /// Whether this member checks packets against it (switch mode does
    /// not: the policy speaks of IP packets).
    pub enforced: bool,
    /// Flows tracked now, so their replies pass.
    pub tracked_flows: u64,
    /// Flows evicted because their member's share of the table was full.
    pub evicted_flows: u64,
    /// Flows each rule allowed, by the policy file's line.
    pub flows_by_line: std::collections::BTreeMap<u64, u64>,
}

#[derive(Debug, Serialize)]
pub struct PeerReport {
    pub public_key: String,
    pub preshared_key: bool,
    pub endpoint: Option<String>,
    pub allowed_ips: Vec<String>,
    pub latest_handshake_unix_secs: Option<u64>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub persistent_keepalive_secs: Option<u64>,
    /// The data cipher toward the peer (fjord only; none without a session).
    pub cipher: Option<String>,
    /// Compression toward the peer (fjord only; none without a session).
    pub compression: Option<PeerCompression>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compression_fields_round_trip_and_refuse_junk() {
        let compression = PeerCompression {
            codec: Some(Codec::Zstd),
            compressed_packets: 120,
            raw_packets: 7,
            decompressed_packets: 98,
        };
        assert_eq!(compression.to_fields(), "zstd 120 7 98");
        assert_eq!(
            PeerCompression::parse(&compression.to_fields()),
            Some(compression)
        );
        let lz4 = PeerCompression {
            codec: Some(Codec::Lz4),
            ..compression
        };
        assert_eq!(PeerCompression::parse("on 120 7 98"), Some(lz4));
        assert_eq!(PeerCompression::parse("lz4 120 7 98"), Some(lz4));
        assert_eq!(
            PeerCompression::parse("off 0 0 0"),
            Some(PeerCompression::default())
        );
        for junk in ["", "on", "yes 1 2 3", "on 1 2", "on 1 2 3 4", "on -1 2 3"] {
            assert_eq!(PeerCompression::parse(junk), None, "{junk}");
        }
    }

    #[test]
    fn compression_json_names_the_codec_and_keeps_on() {
        let zstd = PeerCompression {
            codec: Some(Codec::Zstd),
            compressed_packets: 3,
            ..PeerCompression::default()
        };
        let json = serde_json::to_value(zstd).unwrap();
        assert_eq!(json["on"], true);
        assert_eq!(json["codec"], "zstd");
        assert_eq!(json["compressed_packets"], 3);
        let off = serde_json::to_value(PeerCompression::default()).unwrap();
        assert_eq!(off["on"], false);
        assert!(off["codec"].is_null());
    }
}
