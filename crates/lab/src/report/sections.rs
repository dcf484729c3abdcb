//! Shaping the run record into sections, shared by every renderer.
//!
//! Measurements are grouped by suite and test into [`Section`]s: rows are
//! the distinct values of the parameters that vary (the frame size for RFC
//! 2544, the drop rate for loss sweeps, the payload for latency), columns
//! are systems in report order (bare, fjord, then the peers as recorded).
//! Parameters that are constant within a section become its caption; for
//! tests with a natural row parameter, every other varying parameter (the
//! direction, say) splits the test into one section per value, so each
//! section is one table and one chart.
//! Nothing here formats a figure: `tables` and `charts` do that from the
//! sections.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde_json::Value;

use super::format;
use crate::results::{Measurement, MeasurementStatus, RunRecord};

/// The reference system every figure is compared with.
pub const REFERENCE: &str = "bare";
const FJORD: &str = "fjord";
/// A cell with no measurement.
pub const MISSING: &str = "–";

/// Names the column a column is compared with: bare in a run's own report;
/// in a merged one the bare of the column's own run, as each run's ratios
/// are to its own bare.
/// `None`: the column is compared with none (its run had no bare).
pub type ReferenceOf<'r> = dyn Fn(&str) -> Option<String> + 'r;

/// Every column is compared with bare: a run's own report.
pub fn bare_reference(_: &str) -> Option<String> {
    Some(REFERENCE.to_string())
}

/// Every system named in the record, bare first, fjord second, then the
/// others in record order (listed systems first, then measured ones).
pub fn system_order(record: &RunRecord) -> Vec<&str> {
    let listed = record.systems.iter().map(|s| s.name.as_str());
    let measured = record.measurements.iter().map(|m| m.system.as_str());
    let mut names: Vec<&str> = Vec::new();
    for name in listed.chain(measured) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    // Stable: peers keep their record order.
    names.sort_by_key(|name| match *name {
        REFERENCE => 0,
        FJORD => 1,
        _ => 2,
    });
    names
}

/// Suites in the order run, then any that only appear in measurements.
pub fn suite_order(record: &RunRecord) -> Vec<&str> {
    let listed = record.suites.iter().map(String::as_str);
    let measured = record.measurements.iter().map(|m| m.suite.as_str());
    let mut suites: Vec<&str> = Vec::new();
    for suite in listed.chain(measured) {
        if !suites.contains(&suite) {
            suites.push(suite);
        }
    }
    suites
}

/// A heading for a suite name.
pub fn suite_title(suite: &str) -> String {
    match suite {
        "quick" => "Quick check".to_string(),
        "throughput" => "Throughput (RFC 2544, IMIX, overload)".to_string(),
        "latency" => "Latency".to_string(),
        "loss" => "Transfers under packet loss".to_string(),
        "bdp" => "Long fat pipe (bandwidth-delay product)".to_string(),
        "soak" => "Soak: memory, transfers and counters under sustained load".to_string(),
        "mesh" => "Mesh from one bootstrap member".to_string(),
        "attack" => "Handshake flood on the responder".to_string(),
        "peers" => "Many peers of one responder".to_string(),
        "compress" => "Compression on a 100 Mbit/s link".to_string(),
        "mtu" => "Tunnel MTU (1,400 to 16,384 bytes) on a jumbo underlay".to_string(),
        other => {
            let mut chars = other.chars();
            match chars.next() {
                Some(first) => first.to_uppercase().chain(chars).collect(),
                None => String::new(),
            }
        }
    }
}

/// One line under a suite's heading about what it leaves out or does
/// differently from its study, if anything.
pub fn suite_remark(suite: &str) -> Option<&'static str> {
    // Every suite measures what its issue asks for; the mesh suite's last
    // gap (path MTU) is closed.
    match suite {
        "mtu" => Some(
            "Unlike the VpnCloud study, whose 1,500-byte underlay fragmented the large tunnel \
             packets, the underlay veth here is raised to the tunnel MTU + 98 bytes, so every \
             tunnel packet crosses whole; bare runs on the same underlay and is the reference.",
        ),
        _ => None,
    }
}

/// Tests the report lays out specially; everything else is `Other`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestKind {
    Rfc2544,
    Overload,
    Imix,
    Rtt,
    /// The VpnCloud study's ping test: the best run's average round trip.
    PingAverage,
    /// Latency of frames while the link carries a given load.
    LatencyUnderLoad,
    TransferTime,
    /// RFC 2544 frame loss rate against offered load.
    FrameLoss,
    TcpBulk,
    /// Resident size of the tunnel processes during a soak, by minute.
    Memory,
    /// How much that resident size grew over the soak.
    MemoryGrowth,
    /// A mesh figure by number of nodes: convergence, memory, first packet,
    /// policy spread.
    Mesh,
    NatMatrix,
    /// Throughput and RTT through a relay and on the direct path, and the
    /// time to switch from one to the other.
    RelayCost,
    /// A transfer across a path MTU black hole: throughput, or black-holed.
    PathMtu,
    /// A figure by handshake flood: throughput against no flood, cookie
    /// replies against Diffie–Hellman work, a restarted side's return.
    Flood,
    /// A figure by number of peers of one responder, against one peer:
    /// zero-loss frame rate, memory, TCP.
    Peers,
    /// A soak's totals: transfers, restarts, rekeys.
    SoakSummary,
    /// A soak's counters, one side's against the other's, by direction.
    CounterBalance,
    /// A member's transfers and connection tracking under a network
    /// policy and a flood of flows.
    Policy,
    Other,
}

impl TestKind {
    pub fn of(test: &str) -> Self {
        match test {
            "rfc2544_throughput" => TestKind::Rfc2544,
            "overload_receive_rate" => TestKind::Overload,
            "imix" => TestKind::Imix,
            "rtt" => TestKind::Rtt,
            "ping_average" => TestKind::PingAverage,
            "latency_under_load" => TestKind::LatencyUnderLoad,
            "transfer_time" => TestKind::TransferTime,
            "frame_loss_rate" => TestKind::FrameLoss,
            "tcp_bulk" => TestKind::TcpBulk,
            "rss_under_load" => TestKind::Memory,
            "rss_growth" => TestKind::MemoryGrowth,
            "convergence" | "rss_per_node" | "rss_per_peer" | "first_packet" | "policy_spread" => {
                TestKind::Mesh
            }
            "nat_pair" => TestKind::NatMatrix,
            "relay_throughput" | "relay_rtt" | "relay_switch" => TestKind::RelayCost,
            "path_mtu" => TestKind::PathMtu,
            "flood_throughput" | "flood_handshakes" | "restart_recovery" => TestKind::Flood,
            "peers_zero_loss" | "peers_memory" | "peers_tcp" => TestKind::Peers,
            "soak_transfers" | "soak_restarts" | "soak_rekeys" => TestKind::SoakSummary,
            "counter_balance" => TestKind::CounterBalance,
            "policy_transfer" | "policy_tracked_flows" => TestKind::Policy,
            _ => TestKind::Other,
        }
    }

    /// The parameter that makes the rows (and a chart's x axis).
    pub fn row_key(self) -> Option<&'static str> {
        match self {
            TestKind::Rfc2544 | TestKind::Overload => Some("frame_size"),
            TestKind::Rtt | TestKind::PingAverage => Some("payload"),
            TestKind::LatencyUnderLoad => Some("load_percent"),
            TestKind::TransferTime => Some("drop_percent"),
            TestKind::FrameLoss => Some("offered_percent"),
            TestKind::Memory => Some("minute"),
            TestKind::Mesh => Some("nodes"),
            TestKind::NatMatrix => Some("pair"),
            TestKind::RelayCost => Some("path"),
            TestKind::PathMtu => Some("path"),
            TestKind::Flood => Some("flood"),
            TestKind::Peers => Some("peers"),
            TestKind::CounterBalance => Some("direction"),
            TestKind::Policy => Some("phase"),
            TestKind::Imix
            | TestKind::TcpBulk
            | TestKind::MemoryGrowth
            | TestKind::SoakSummary
            | TestKind::Other => None,
        }
    }

    pub fn title(self, test: &str) -> String {
        match self {
            TestKind::Rfc2544 => "RFC 2544 throughput (zero-loss rate)".to_string(),
            TestKind::Overload => "Receive rate under overload".to_string(),
            TestKind::Imix => "IMIX throughput".to_string(),
            TestKind::Rtt => "Round-trip time".to_string(),
            TestKind::PingAverage => {
                "Round-trip time of ping every 1 ms: the best run's average (and its p50)".to_string()
            }
            TestKind::LatencyUnderLoad => "Latency under load".to_string(),
            TestKind::TransferTime => "Transfer time under random drop".to_string(),
            TestKind::FrameLoss => "Frame loss rate".to_string(),
            TestKind::TcpBulk => "TCP bulk throughput".to_string(),
            TestKind::Memory => "Resident memory under load".to_string(),
            TestKind::MemoryGrowth => "Resident memory growth".to_string(),
            TestKind::Mesh => match test {
                "convergence" => "Time until every node lists every other as direct",
                "rss_per_node" => "Resident memory per node (median of the nodes)",
                "rss_per_peer" => "Resident memory per peer ((median − node alone) ÷ (N − 1))",
                "first_packet" => "First ping through the overlay after convergence",
                "policy_spread" => {
                    "Time from giving one member a network policy until every node holds it"
                }
                other => other,
            }
            .to_string(),
            TestKind::Policy => match test {
                "policy_transfer" => "TCP transfers between two members, without and with a 100-rule network policy, alone and while a third member opens 1,000,000 UDP flows to the receiver",
                "policy_tracked_flows" => "Flows the receiver tracks after a third member's port scan and flood of UDP flows",
                other => other,
            }
            .to_string(),
            TestKind::NatMatrix => {
                "Time until two members behind NATs have a session (direct or relayed: see the notes)"
                    .to_string()
            }
            TestKind::RelayCost => match test {
                "relay_throughput" => "TCP throughput through a relay and direct (verified transfer)",
                "relay_rtt" => "Round-trip time through a relay and direct",
                "relay_switch" => "Time until a relayed pair goes direct once UDP between them opens",
                other => other,
            }
            .to_string(),
            TestKind::PathMtu => "Verified TCP transfer across a path MTU black hole (throughput; the path MTU found, or black-holed)".to_string(),
            TestKind::Flood => match test {
                "flood_throughput" => "Verified TCP transfer through the tunnel during the flood (ratio to no flood)",
                "flood_handshakes" => "Handshakes answered during those transfers: cookie replies seen on the wire, initiations computed (Diffie-Hellman) by the responder's own count",
                "restart_recovery" => "Time until a restarted initiator carries traffic again during the flood",
                other => other,
            }
            .to_string(),
            TestKind::Peers => match test {
                "peers_zero_loss" => "RFC 2544 zero-loss rate with the load spread over N peers (ratio to one peer; the peer emulator alone)",
                "peers_memory" => "Resident memory of the responder with N peers (and per peer: (RSS − RSS with one) ÷ (N − 1))",
                "peers_tcp" => "TCP throughput over parallel flows spread over N peers (verified transfers; ratio to one peer)",
                other => other,
            }
            .to_string(),
            TestKind::SoakSummary => match test {
                "soak_transfers" => "Digest-checked transfers, back to back",
                "soak_restarts" => "Time until a restarted side carries a ping again, under load",
                "soak_rekeys" => "Rekeys, by the sides' own handshake counters",
                other => other,
            }
            .to_string(),
            TestKind::CounterBalance => {
                "Counters: bytes one side sent against bytes the other received, between readings with the load held"
                    .to_string()
            }
            TestKind::Other => test.to_string(),
        }
    }
}

/// One table's worth of measurements: one suite and test, one value of
/// each splitting parameter.
#[derive(Debug)]
pub struct Section<'a> {
    pub suite: &'a str,
    pub test: &'a str,
    pub kind: TestKind,
    pub unit: &'a str,
    /// Parameters that vary within the test but not within this section
    /// (the direction of an RFC 2544 sweep): they name the section.
    pub split: Vec<Param<'a>>,
    /// Other parameters with one value throughout, in key order.
    pub fixed: Vec<Param<'a>>,
    /// Parameters that label rows, the kind's row key first.
    pub row_keys: Vec<&'a str>,
    pub rows: Vec<Row<'a>>,
    /// Columns, in report order.
    pub systems: Vec<&'a str>,
    /// For each column, the index of the column it is compared with.
    references: Vec<Option<usize>>,
}

#[derive(Debug)]
pub struct Row<'a> {
    /// The value of each row key (`None` where a measurement lacks it).
    pub key: ParamValues<'a>,
    /// One per system of the section.
    pub cells: Vec<Option<&'a Measurement>>,
}

impl Row<'_> {
    pub fn labels(&self) -> Vec<String> {
        self.key
            .iter()
            .map(|value| value.map_or_else(|| MISSING.to_string(), format::param_value))
            .collect()
    }

    /// The row key's value as a number (a chart's x), if it is one.
    pub fn x(&self) -> Option<f64> {
        self.key.first().copied().flatten().and_then(Value::as_f64)
    }
}

impl<'a> Section<'a> {
    /// The kind's title, with the splitting parameters:
    /// `RFC 2544 throughput (zero-loss rate), direction: left_to_right`.
    pub fn title(&self) -> String {
        let mut title = self.kind.title(self.test);
        for (key, value) in &self.split {
            title.push_str(", ");
            title.push_str(&format::param_pair(key, value));
        }
        title
    }

    /// The measurement in `row` that column `index` is compared with
    /// (bare's, or its run's bare's), when it ran fine; none for the
    /// reference's own column.
    pub fn reference(&self, row: &Row<'a>, index: usize) -> Option<&'a Measurement> {
        let reference = self.references.get(index).copied().flatten()?;
        if reference == index {
            return None;
        }
        row.cells[reference].filter(|m| m.status == MeasurementStatus::Ok)
    }

    /// `k: v` pairs of the fixed parameters.
    pub fn fixed_text(&self) -> Vec<String> {
        self.fixed
            .iter()
            .map(|(key, value)| format::param_pair(key, value))
            .collect()
    }

    /// The row's labels as `k: v` pairs (for notes).
    pub fn row_text(&self, row: &Row) -> String {
        self.row_keys
            .iter()
            .zip(&row.key)
            .map(|(key, value)| match value {
                Some(value) => format::param_pair(key, value),
                None => format!("{key}: {MISSING}"),
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// All sections of the record, suite by suite, tests in order of first
/// appearance; every column compared with bare.
pub fn sections(record: &RunRecord) -> Vec<Section<'_>> {
    sections_against(record, &bare_reference)
}

/// [`sections`], each column compared with the column `reference_of` names.
pub fn sections_against<'a>(record: &'a RunRecord, reference_of: &ReferenceOf) -> Vec<Section<'a>> {
    let order = system_order(record);
    let mut sections = Vec::new();
    for suite in suite_order(record) {
        let mut tests: Vec<&str> = Vec::new();
        for m in record.measurements.iter().filter(|m| m.suite == suite) {
            if !tests.contains(&m.test.as_str()) {
                tests.push(&m.test);
            }
        }
        for test in tests {
            let group: Vec<&Measurement> = record
                .measurements
                .iter()
                .filter(|m| m.suite == suite && m.test == test)
                .collect();
            sections.extend(split(suite, test, group, &order, reference_of));
        }
    }
    sections
}

fn keys<'a>(group: &[&'a Measurement]) -> BTreeSet<&'a str> {
    group
        .iter()
        .flat_map(|m| m.params.keys().map(String::as_str))
        .collect()
}

fn varies(group: &[&Measurement], key: &str) -> bool {
    group
        .windows(2)
        .any(|pair| pair[0].params.get(key) != pair[1].params.get(key))
}

/// A parameter's name and value.
type Param<'a> = (&'a str, &'a Value);

/// The values of some parameters of one measurement (`None`: absent).
type ParamValues<'a> = Vec<Option<&'a Value>>;

/// One section per combination of the splitting parameters.
fn split<'a>(
    suite: &'a str,
    test: &'a str,
    group: Vec<&'a Measurement>,
    order: &[&'a str],
    reference_of: &ReferenceOf,
) -> Vec<Section<'a>> {
    let kind = TestKind::of(test);
    let keys = keys(&group);
    let splitting: Vec<&str> = match kind.row_key() {
        Some(row_key) if keys.contains(row_key) => keys
            .iter()
            .copied()
            .filter(|key| *key != row_key && varies(&group, key))
            .collect(),
        _ => Vec::new(),
    };
    let mut parts: Vec<(ParamValues, Vec<&Measurement>)> = Vec::new();
    for m in group {
        let values: ParamValues = splitting.iter().map(|k| m.params.get(*k)).collect();
        match parts.iter_mut().find(|(v, _)| *v == values) {
            Some((_, members)) => members.push(m),
            None => parts.push((values, vec![m])),
        }
    }
    parts
        .into_iter()
        .map(|(_, members)| {
            let mut section = section(suite, test, kind, &splitting, members, order);
            section.references = section
                .systems
                .iter()
                .map(|system| {
                    let reference = reference_of(system)?;
                    section.systems.iter().position(|s| *s == reference)
                })
                .collect();
            section
        })
        .collect()
}

/// Sort rank of a parameter value: numbers by value, then other values in
/// order of first appearance, then missing ones.
fn rank(value: Option<&Value>, seen: &[&Value]) -> (u8, f64) {
    match value {
        Some(value) => match value.as_f64() {
            Some(number) => (0, number),
            None => (1, seen.iter().position(|s| *s == value).unwrap_or(0) as f64),
        },
        None => (2, 0.0),
    }
}

fn section<'a>(
    suite: &'a str,
    test: &'a str,
    kind: TestKind,
    splitting: &[&str],
    members: Vec<&'a Measurement>,
    order: &[&'a str],
) -> Section<'a> {
    let keys = keys(&members);
    let mut row_keys: Vec<&str> = keys
        .iter()
        .copied()
        .filter(|key| varies(&members, key))
        .collect();
    if let Some(position) = kind
        .row_key()
        .and_then(|k| row_keys.iter().position(|key| *key == k))
    {
        let key = row_keys.remove(position);
        row_keys.insert(0, key);
    }
    let (split, fixed): (Vec<Param>, Vec<Param>) = keys
        .iter()
        .filter(|key| !row_keys.contains(key))
        .filter_map(|key| Some((*key, members[0].params.get(*key)?)))
        .partition(|(key, _)| splitting.contains(key));

    let mut row_values: Vec<ParamValues> = Vec::new();
    for m in &members {
        let values: ParamValues = row_keys.iter().map(|k| m.params.get(*k)).collect();
        if !row_values.contains(&values) {
            row_values.push(values);
        }
    }
    let seen: Vec<Vec<&Value>> = (0..row_keys.len())
        .map(|index| {
            let mut seen: Vec<&Value> = Vec::new();
            for value in row_values.iter().filter_map(|values| values[index]) {
                if !seen.contains(&value) {
                    seen.push(value);
                }
            }
            seen
        })
        .collect();
    row_values.sort_by(|a, b| {
        for (index, seen) in seen.iter().enumerate() {
            let (a, b) = (rank(a[index], seen), rank(b[index], seen));
            let ordering = a.0.cmp(&b.0).then(a.1.total_cmp(&b.1));
            if ordering != Ordering::Equal {
                return ordering;
            }
        }
        Ordering::Equal
    });

    let systems: Vec<&str> = order
        .iter()
        .copied()
        .filter(|system| members.iter().any(|m| m.system == *system))
        .collect();
    let rows = row_values
        .into_iter()
        .map(|key| {
            let cells = systems
                .iter()
                .map(|system| {
                    members.iter().copied().find(|m| {
                        m.system == *system
                            && row_keys
                                .iter()
                                .zip(&key)
                                .all(|(k, v)| m.params.get(*k) == *v)
                    })
                })
                .collect();
            Row { key, cells }
        })
        .collect();
    Section {
        suite,
        test,
        kind,
        unit: &members[0].unit,
        split,
        fixed,
        row_keys,
        rows,
        systems,
        references: Vec::new(),
    }
}
