//! What a scrape reports: the interface's snapshot (taken on the worker
//! through the same control call as `get=fjord`) and the process's CPU
//! time and resident memory (from `/proc/self`), encoded as OpenMetrics
//! families named `fjord_*`.
//!
//! Interface-wide numbers come from [`crate::counters`], the list the
//! `get=fjord` reply prints; per-peer and per-member families are here.

use std::collections::HashMap;
use std::fmt;

use fjord_net::ControlHandle;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;

use crate::counters::{Kind, Reading, interface_readings};
use crate::status::InterfaceStatus;

/// The interface's numbers, read from the worker at each scrape.
pub(super) struct InterfaceCollector {
    pub(super) control: ControlHandle,
}

impl fmt::Debug for InterfaceCollector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("InterfaceCollector")
    }
}

impl Collector for InterfaceCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        // A stopped worker fails the scrape (503) rather than reporting
        // zeros.
        let status = self
            .control
            .call(|context| InterfaceStatus::capture(context))
            .map_err(|_| fmt::Error)?;
        encode_interface(&status, &mut encoder)
    }
}

/// Path names of a member's `fjord_member_path` gauge, one of them 1.
const MEMBER_PATHS: [&str; 5] = ["direct", "relay", "fallback", "connecting", "on-demand"];

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Every family of one interface's snapshot.
pub fn encode_interface(status: &InterfaceStatus, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let own_key = status.public_key.map(|key| key.to_base64());
    let info_labels: Labels = [("interface", status.name.as_str())]
        .into_iter()
        .chain(own_key.as_deref().map(|key| ("public_key", key)))
        .collect();
    let mut info = encoder.encode_descriptor(
        "fjord_interface",
        "The interface this endpoint reports on, with its public key (always 1).",
        None,
        MetricType::Gauge,
    )?;
    info.encode_family(&info_labels)?.encode_gauge(&1u64)?;

    encode_readings(&interface_readings(status), encoder)?;
    encode_peers(status, encoder)?;
    encode_members(status, encoder)
}

/// Readings in families: consecutive readings of one family share its
/// descriptor.
fn encode_readings(readings: &[Reading], encoder: &mut DescriptorEncoder) -> fmt::Result {
    let mut rest = readings;
    while let Some(first) = rest.first() {
        let count = rest
            .iter()
            .take_while(|reading| reading.family == first.family)
            .count();
        let (family, next) = rest.split_at(count);
        rest = next;
        let name = format!("fjord_{}", first.family);
        let metric_type = match first.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        let mut metric = encoder.encode_descriptor(&name, first.help, None, metric_type)?;
        for reading in family {
            match &reading.label {
                Some((name, value)) => encode_value(
                    &mut metric.encode_family(&[(*name, value.as_str())])?,
                    reading,
                )?,
                None => encode_value(&mut metric, reading)?,
            }
        }
    }
    Ok(())
}

fn encode_value(metric: &mut MetricEncoder, reading: &Reading) -> fmt::Result {
    match reading.kind {
        Kind::Counter => metric.encode_counter::<NoLabelSet, _, u64>(&reading.value, None),
        Kind::Gauge => metric.encode_gauge(&reading.value),
    }
}

/// One family over every peer.
struct PeerFamily {
    name: &'static str,
    help: &'static str,
    kind: Kind,
    value: fn(&crate::status::PeerStatus) -> u64,
}

const PEER_FAMILIES: [PeerFamily; 7] = [
    PeerFamily {
        name: "fjord_peer_receive_bytes",
        help: "Bytes of WireGuard datagrams received from the peer, handshakes included (as `wg show` counts them).",
        kind: Kind::Counter,
        value: |peer| peer.rx_bytes,
    },
    PeerFamily {
        name: "fjord_peer_transmit_bytes",
        help: "Bytes of WireGuard datagrams sent to the peer, handshakes included (as `wg show` counts them).",
        kind: Kind::Counter,
        value: |peer| peer.tx_bytes,
    },
    PeerFamily {
        name: "fjord_peer_receive_datagrams",
        help: "WireGuard data messages received from the peer and accepted, keepalives included.",
        kind: Kind::Counter,
        value: |peer| peer.rx_datagrams,
    },
    PeerFamily {
        name: "fjord_peer_transmit_datagrams",
        help: "WireGuard data messages sent to the peer, keepalives included.",
        kind: Kind::Counter,
        value: |peer| peer.tx_datagrams,
    },
    PeerFamily {
        name: "fjord_peer_handshakes_completed",
        help: "Handshakes with the peer that completed (about one every two minutes while traffic flows).",
        kind: Kind::Counter,
        value: |peer| peer.handshakes_completed,
    },
    PeerFamily {
        name: "fjord_peer_handshakes_abandoned",
        help: "Rounds of handshake attempts with the peer given up unanswered (after 90 s each).",
        kind: Kind::Counter,
        value: |peer| peer.handshakes_abandoned,
    },
    PeerFamily {
        name: "fjord_peer_latest_handshake_seconds",
        help: "Unix time of the peer's latest completed handshake; 0 if none yet.",
        kind: Kind::Gauge,
        value: |peer| peer.last_handshake.map_or(0, |at| at.as_secs()),
    },
];

/// Per-peer families, labelled by public key and, for mesh members, name.
fn encode_peers(status: &InterfaceStatus, encoder: &mut DescriptorEncoder) -> fmt::Result {
    let names: HashMap<&str, &str> = status
        .members
        .iter()
        .map(|member| (member.public_key.as_str(), member.name.as_str()))
        .collect();
    let keys: Vec<String> = status
        .peers
        .iter()
        .map(|peer| peer.public_key.to_base64())
        .collect();
    let labels: Vec<Labels> = keys
        .iter()
        .map(|key| {
            let mut labels = vec![("public_key", key.as_str())];
            if let Some(name) = names.get(key.as_str()) {
                labels.push(("name", name));
            }
            labels
        })
        .collect();
    for family in &PEER_FAMILIES {
        let metric_type = match family.kind {
            Kind::Counter => MetricType::Counter,
            Kind::Gauge => MetricType::Gauge,
        };
        let mut metric = encoder.encode_descriptor(family.name, family.help, None, metric_type)?;
        for (peer, labels) in status.peers.iter().zip(&labels) {
            let value = (family.value)(peer);
            let mut labelled = metric.encode_family(labels)?;
            match family.kind {
                Kind::Counter => labelled.encode_counter::<NoLabelSet, _, u64>(&value, None)?,
                Kind::Gauge => labelled.encode_gauge(&value)?,
            }
        }
    }
    Ok(())
}

/// Mesh members: their count, path and path MTU (nothing outside a mesh).
fn encode_members(status: &InterfaceStatus, encoder: &mut DescriptorEncoder) -> fmt::Result {
    if status.members.is_empty() && status.mesh_counters.is_empty() {
        return Ok(());
    }
    let mut count = encoder.encode_descriptor(
        "fjord_mesh_members",
        "Members of the mesh this node knows now.",
        None,
        MetricType::Gauge,
    )?;
    count.encode_gauge(&(status.members.len() as u64))?;

    let carried: Vec<&str> = status
        .fallback
        .iter()
        .filter(|line| line.path.starts_with("carrier"))
        .map(|line| line.public_key.as_str())
        .collect();
    let mut path = encoder.encode_descriptor(
        "fjord_member_path",
        "How data reaches the member: 1 for the current path (direct, relay, fallback, connecting, or on-demand: no session kept), 0 for the others.",
        None,
        MetricType::Gauge,
    )?;
    for member in &status.members {
        let current = if carried.contains(&member.public_key.as_str()) {
            "fallback"
        } else {
            member.path.split(' ').next().unwrap_or("connecting")
        };
        for name in MEMBER_PATHS {
            let labels = [
                ("public_key", member.public_key.as_str()),
                ("name", member.name.as_str()),
                ("path", name),
            ];
            path.encode_family(&labels)?
                .encode_gauge(&u64::from(name == current))?;
        }
    }
    let member_labels = |member: &'_ crate::status::MemberLine| {
        [
            ("public_key", member.public_key.clone()),
            ("name", member.name.clone()),
        ]
    };
    let mut mtu = encoder.encode_descriptor(
        "fjord_member_path_mtu_bytes",
        "The largest datagram (IP header included) probing found to get through to the member; absent until the first search settles.",
        None,
        MetricType::Gauge,
    )?;
    for member in &status.members {
        if let Some(bytes) = member.path_mtu {
            mtu.encode_family(&member_labels(member))?
                .encode_gauge(&bytes)?;
        }
    }
    let mut rtt = encoder.encode_descriptor(
        "fjord_member_rtt_seconds",
        "Round-trip time to the member, as last measured; absent until measured.",
        None,
        MetricType::Gauge,
    )?;
    for member in &status.members {
        if let Some(micros) = member.rtt_micros {
            rtt.encode_family(&member_labels(member))?
                .encode_gauge(&(micros as f64 / 1e6))?;
        }
    }
    Ok(())
}

/// The process's CPU time and resident memory.
#[derive(Debug)]
pub(super) struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        // An unreadable /proc leaves the families out rather than failing
        // the scrape.
        let stat = std::fs::read_to_string("/proc/self/stat").ok();
        if let Some(ticks) = stat.as_deref().and_then(cpu_ticks) {
            let seconds = ticks as f64 / fjord_sys::process::clock_ticks_per_second() as f64;
            let mut metric = encoder.encode_descriptor(
                "fjord_process_cpu_seconds",
                "CPU time the fjord process has used, user and system.",
                None,
                MetricType::Counter,
            )?;
            metric.encode_counter::<NoLabelSet, _, u64>(&seconds, None)?;
        }
        let statm = std::fs::read_to_string("/proc/self/statm").ok();
        if let Some(pages) = statm.as_deref().and_then(resident_pages) {
            let bytes = pages.saturating_mul(fjord_sys::process::page_size_bytes());
            let gauge = ConstGauge::new(bytes);
            let metric = encoder.encode_descriptor(
                "fjord_process_resident_memory_bytes",
                "Resident memory of the fjord process.",
                None,
                gauge.metric_type(),
            )?;
            gauge.encode(metric)?;
        }
        Ok(())
    }
}

/// User plus system time, in clock ticks, from `/proc/PID/stat` (fields
/// 14 and 15; the command name in field 2 may hold spaces and brackets,
/// so fields are counted from its closing bracket).
fn cpu_ticks(stat: &str) -> Option<u64> {
    let after_name = &stat[stat.rfind(')')? + 1..];
    let mut fields = after_name.split_ascii_whitespace().skip(11);
    let user: u64 = fields.next()?.parse().ok()?;
    let system: u64 = fields.next()?.parse().ok()?;
    Some(user + system)
}

/// Resident pages, the second field of `/proc/PID/statm`.
fn resident_pages(statm: &str) -> Option<u64> {
    statm.split_ascii_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_fields_are_counted_past_the_command_name() {
        let stat = "4242 (fjord (x) 1) S 1 4242 4242 0 -1 4194560 500 0 0 0 \
                    250 75 0 0 20 0 3 0 1000 12345678 900 18446744073709551615";
        assert_eq!(cpu_ticks(stat), Some(325));
        assert_eq!(cpu_ticks("garbage"), None);
        assert_eq!(resident_pages("5000 900 300 100 0 400 0\n"), Some(900));
        assert_eq!(resident_pages("5000"), None);
    }

    #[test]
    fn this_process_has_cpu_time_and_memory() {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("/proc/self/stat");
        assert!(cpu_ticks(&stat).is_some(), "{stat}");
        let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
        assert!(resident_pages(&statm).is_some_and(|pages| pages > 0));
    }
}
