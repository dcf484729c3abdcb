//! The supporting figures of a [`Measurement`](super::Measurement): one
//! record per kind of figure, each set only by the tests it belongs to.
//!
//! In `results.json` they are one flat object (`{"bytes": 1048576,
//! "verified": true, …}`): [`Extra`] flattens its records in the order
//! their fields had when they were one struct (schema 1), so the keys and
//! their order are those of every earlier run. A record none of whose
//! fields a row has is left out (`None`), reading as writing.

use std::collections::BTreeMap;

use fjord_proto::{DropCounters, DropReason};
use serde::{Deserialize, Deserializer, Serialize};

/// The supporting figures of a row, by kind; a row has the records its
/// test sets (a TCP transfer: [`Bulk`] and [`Cost`]; a soak interval:
/// [`Memory`], and so on).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Extra {
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub bulk: Option<Bulk>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub cost: Option<Cost>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub ping: Option<Ping>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub memory: Option<Memory>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub soak: Option<Soak>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub mesh: Option<Mesh>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub peers: Option<Peers>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub flood: Option<Flood>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub frame_rate: Option<FrameRate>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub frame_latency: Option<FrameLatency>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub rounds: Option<Rounds>,
    #[serde(
        flatten,
        deserialize_with = "unless_empty",
        skip_serializing_if = "Option::is_none"
    )]
    pub tracking: Option<Tracking>,
}

impl Extra {
    /// The TCP throughput carried while a memory figure was taken.
    pub fn carried_bits_per_sec(&self) -> Option<f64> {
        self.memory.as_ref()?.bits_per_sec
    }
}

/// `None` for a record none of whose fields the row has: flattened, every
/// record would otherwise read as present.
fn unless_empty<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default + PartialEq,
{
    let record = T::deserialize(deserializer)?;
    Ok((record != T::default()).then_some(record))
}

/// Declares a record of optional figures: each field is left out of the
/// JSON when it is `None`, and a missing key reads as `None`.
macro_rules! figures {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $type:ty,)*
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
        #[serde(default)]
        pub struct $name {
            $(
                $(#[$field_meta])*
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $field: $type,
            )*
        }
    };
}

figures! {
    /// TCP bulk transfers (quick, bdp, loss, compress, mtu, mesh_pmtu);
    /// `verified` also soak's intervals, `time_limit_secs` also mesh
    /// convergence and the attack suite's restart.
    pub struct Bulk {
        /// Bytes moved, over all repetitions.
        pub bytes: Option<u64>,
        /// Every transfer arrived intact (soak: in every interval).
        pub verified: Option<bool>,
        /// Digest of the first transfer's bytes, as the receiver computed it.
        pub xxh3_128: Option<String>,
        /// bdp: the link's goodput for one TCP stream, at best.
        pub theoretical_goodput_bits_per_sec: Option<f64>,
        /// bdp: median over the theoretical goodput.
        pub efficiency: Option<f64>,
        /// loss: the time limit of one transfer; mesh: of convergence.
        pub time_limit_secs: Option<f64>,
        /// loss: the emulated one-way delay.
        pub one_way_delay_ms: Option<f64>,
    }
}

figures! {
    /// The cost of the tunnel's processes over the test.
    pub struct Cost {
        /// TCP retransmits; in records of earlier versions only, which reports
        /// still show.
        pub retransmits: Option<u64>,
        pub cpu_seconds: Option<f64>,
        pub cpu_seconds_per_gbit: Option<f64>,
        /// Resident size of both endpoints after the test.
        pub rss_bytes: Option<u64>,
        /// mtu: CPU time of the left (sending) host's tunnel processes over
        /// the transfers' time, in % of one core.
        pub cpu_left_percent: Option<f64>,
        /// mtu: the same of the right (receiving) host's.
        pub cpu_right_percent: Option<f64>,
    }
}

figures! {
    /// Round trips of ping (latency suite, `rtt`), in ms; `max` also the
    /// soak's longest restart, in s.
    pub struct Ping {
        pub min: Option<f64>,
        pub p50: Option<f64>,
        pub p99: Option<f64>,
        pub p999: Option<f64>,
        pub max: Option<f64>,
        /// Pings sent.
        pub sent: Option<u64>,
        /// Pings answered.
        pub answered: Option<u64>,
    }
}

figures! {
    /// Resident memory under load (soak); `peak_bytes` also the mesh suite's
    /// memory rows.
    pub struct Memory {
        /// Highest resident size of the interval (growth: of the whole soak;
        /// mesh: of any node).
        pub peak_bytes: Option<f64>,
        /// TCP throughput carried meanwhile.
        pub bits_per_sec: Option<f64>,
        /// Growth: peak of the first interval.
        pub first_peak_bytes: Option<f64>,
        /// Growth: peak of the last interval.
        pub last_peak_bytes: Option<f64>,
    }
}

figures! {
    /// Soak (issue 15): transfers, restarts, counters.
    pub struct Soak {
        /// Transfers run, back to back.
        pub transfers: Option<u64>,
        /// Transfers that completed with other bytes than were sent.
        pub digest_mismatches: Option<u64>,
        /// Transfers that did not complete.
        pub failed_transfers: Option<u64>,
        /// Restarts of one side.
        pub restarts: Option<u64>,
        /// Counter balance: bytes one side sent, by its own count, over the
        /// intervals checked.
        pub sent_bytes: Option<u64>,
        /// Counter balance: bytes the other side received of them.
        pub received_bytes: Option<u64>,
        /// Counter balance: datagrams the receiver refused or its kernel
        /// dropped, and sends that failed.
        pub dropped_datagrams: Option<u64>,
        /// Counter balance: intervals between readings checked.
        pub intervals: Option<u64>,
        /// Counter balance: intervals whose difference the drops do not explain.
        pub unexplained_intervals: Option<u64>,
    }
}

figures! {
    /// Meshes (mesh suite); `alone_rss_bytes` also the peers suite's memory.
    pub struct Mesh {
        /// Convergence: share of ordered pairs of nodes where the first listed
        /// the second as a direct member, when the row was taken.
        pub pairs_percent: Option<f64>,
        /// Memory: resident size of the bootstrap node alone, before any other
        /// node started (peers: of the responder with one peer).
        pub alone_rss_bytes: Option<u64>,
    }
}

figures! {
    /// Many peers of one responder (peers suite).
    pub struct Peers {
        /// The figure over the same system's with one peer, same run.
        pub one_peer_ratio: Option<f64>,
        /// Frames the peer emulator seals and sends per second of its own CPU
        /// time (the same frames for the same peers, into a sink that drops
        /// them): its ceiling on one core.
        pub emulator_ceiling_fps: Option<f64>,
        /// Peers whose session carried data, by the responder's own counters.
        pub peers_carrying: Option<u64>,
        /// CPU seconds the peer emulator spent per Gbit carried (tunnel mode).
        pub emulator_cpu_seconds_per_gbit: Option<f64>,
        /// Resident size per peer: (the figure − with one peer) ÷ (peers − 1).
        pub per_peer_bytes: Option<f64>,
    }
}

figures! {
    /// Handshake floods (attack suite); `initiations_computed` also soak's
    /// rekeys.
    pub struct Flood {
        /// Spoofed initiations per second the flood generator sent.
        pub flood_sent_per_sec: Option<f64>,
        /// The figure over the same system's without a flood, same run.
        pub no_flood_ratio: Option<f64>,
        /// Cookie replies to spoofed sources, counted where they arrived.
        pub cookie_replies: Option<u64>,
        /// Initiations the responder read with Diffie–Hellman work, by its
        /// own count (only implementations that keep one); soak: both sides'
        /// over the run, every handshake.
        pub initiations_computed: Option<u64>,
        /// Datagrams the responder's kernel dropped unread (full UDP socket).
        pub socket_drops: Option<u64>,
        /// What the responder refused, by reason, by its own count (fjord's
        /// `fjord show` drops; the others keep none).
        pub drops: Option<Drops>,
        /// Seconds over which the counts above were taken.
        pub window_secs: Option<f64>,
    }
}

figures! {
    /// A member's connection tracking under a network policy (policy
    /// suite).
    pub struct Tracking {
        /// Flows the generator opened toward the member.
        pub flows_opened: Option<u64>,
        /// Of a port scan, the ports that answered (a reset or an accept).
        pub ports_answered: Option<u64>,
        /// Flows the member's firewall evicted because a peer's share was
        /// full, by its own count.
        pub evicted_flows: Option<u64>,
        /// The most flows the member may track for one peer (both shares).
        pub flows_cap_per_peer: Option<u64>,
        /// The member's resident memory after less before the flows.
        pub rss_growth_bytes: Option<i64>,
        /// The figure over the same transfers without a policy, same run.
        pub no_policy_ratio: Option<f64>,
    }
}

figures! {
    /// UDP frame rates (RFC 2544 throughput, overload, IMIX).
    pub struct FrameRate {
        pub theoretical_max_fps: Option<f64>,
        pub link_bits_per_sec: Option<f64>,
        /// Share of frames a trial may lose and still pass.
        pub loss_tolerance: Option<f64>,
        pub trial_duration_secs: Option<f64>,
        /// The rate in bits/s of Ethernet frames (median of the runs).
        pub frame_bits_per_sec: Option<f64>,
        pub average_frame_bytes: Option<f64>,
        /// The traffic generator, not the path, set the limit.
        pub generator_limited: Option<bool>,
        /// Every trial of every run of the search.
        pub trials: Option<Vec<TrialRecord>>,
        /// Overload: frames/s the sender managed.
        pub sent_fps: Option<f64>,
    }
}

figures! {
    /// UDP latency under load and frame loss.
    pub struct FrameLatency {
        pub min_ms: Option<f64>,
        pub mean_ms: Option<f64>,
        pub p90_ms: Option<f64>,
        pub p99_ms: Option<f64>,
        pub p999_ms: Option<f64>,
        pub max_ms: Option<f64>,
        pub offered_fps: Option<f64>,
        /// Frames offered, over all runs.
        pub offered: Option<u64>,
        /// Frames lost, over all runs.
        pub lost: Option<u64>,
        /// Which clock timed the frames.
        pub clock: Option<String>,
    }
}

figures! {
    /// Runs of several rounds (`--rounds`, `crate::rounds`).
    pub struct Rounds {
        /// Each round's figure, in round order, of the rounds that measured
        /// it; the row's median is theirs.
        pub round_medians: Option<Vec<f64>>,
    }
}

/// Drop counts by reason; in `results.json` an object from reason names
/// (`fjord show`'s) to counts, reasons never counted left out:
/// `{"invalid_mac1": 12, "cookie_required": 59870}`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Drops(pub DropCounters);

impl Serialize for Drops {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(None)?;
        for (reason, count) in self.0.nonzero() {
            map.serialize_entry(reason.name(), &count)?;
        }
        map.end()
    }
}

impl<'de> Deserialize<'de> for Drops {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let by_name = BTreeMap::<String, u64>::deserialize(deserializer)?;
        let mut counters = DropCounters::default();
        for (name, count) in by_name {
            // A reason of a later fjord this build does not know is left out.
            if let Some(reason) = DropReason::from_name(&name) {
                counters.count_many(reason, count);
            }
        }
        Ok(Self(counters))
    }
}

/// One trial of an RFC 2544 throughput search.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TrialRecord {
    /// Which repetition of the search.
    pub run: usize,
    pub offered_fps: f64,
    pub sent_fps: f64,
    pub offered: u64,
    pub received: u64,
    pub lost: u64,
    pub sender_max_lag_ms: f64,
    pub passed: bool,
    pub discarded: bool,
}

/// A statistic of a latency row, as the tables and charts pick them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Statistic {
    P50,
    P99,
    P999,
}

impl Extra {
    /// Whether the row's data arrived intact, when the row says.
    pub fn verified(&self) -> Option<bool> {
        self.bulk.as_ref()?.verified
    }

    /// `statistic` in ms, as ping's round trips or UDP latency under load
    /// recorded it.
    pub fn latency_ms(&self, statistic: Statistic) -> Option<f64> {
        let ping = self.ping.as_ref();
        let frames = self.frame_latency.as_ref();
        match statistic {
            Statistic::P50 => ping.and_then(|ping| ping.p50),
            Statistic::P99 => ping
                .and_then(|ping| ping.p99)
                .or(frames.and_then(|frames| frames.p99_ms)),
            Statistic::P999 => ping
                .and_then(|ping| ping.p999)
                .or(frames.and_then(|frames| frames.p999_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extras_keep_the_json_shape_of_schema_1() {
        let text = r#"{"bytes":1048576,"verified":true,"xxh3_128":"ab","cpu_seconds":0.5,
            "rss_bytes":4096,"p99":0.2,"lost":3,"clock":"CLOCK_MONOTONIC",
            "trials":[{"run":0,"offered_fps":10.0,"sent_fps":9.5,"offered":10,
            "received":10,"lost":0,"sender_max_lag_ms":0.1,"passed":true,"discarded":false}]}"#;
        let written: serde_json::Value = serde_json::from_str(text).unwrap();
        let extra: Extra = serde_json::from_str(text).unwrap();
        assert_eq!(extra.bulk.as_ref().unwrap().bytes, Some(1 << 20));
        assert_eq!(extra.peers, None, "records the row has not are left out");
        assert_eq!(extra.latency_ms(Statistic::P99), Some(0.2));
        assert_eq!(serde_json::to_value(&extra).unwrap(), written);
        assert_eq!(serde_json::to_string(&Extra::default()).unwrap(), "{}");
    }

    /// Every key of schema 1, in the order its one struct wrote them,
    /// comes back in that order from the records.
    #[test]
    fn every_key_keeps_its_place() {
        let keys = [
            ("bytes", "1"),
            ("verified", "true"),
            ("xxh3_128", "\"ab\""),
            ("theoretical_goodput_bits_per_sec", "1.5"),
            ("efficiency", "1.5"),
            ("time_limit_secs", "1.5"),
            ("one_way_delay_ms", "1.5"),
            ("retransmits", "1"),
            ("cpu_seconds", "1.5"),
            ("cpu_seconds_per_gbit", "1.5"),
            ("rss_bytes", "1"),
            ("cpu_left_percent", "1.5"),
            ("cpu_right_percent", "1.5"),
            ("min", "1.5"),
            ("p50", "1.5"),
            ("p99", "1.5"),
            ("p999", "1.5"),
            ("max", "1.5"),
            ("sent", "1"),
            ("answered", "1"),
            ("peak_bytes", "1.5"),
            ("bits_per_sec", "1.5"),
            ("first_peak_bytes", "1.5"),
            ("last_peak_bytes", "1.5"),
            ("transfers", "1"),
            ("digest_mismatches", "1"),
            ("failed_transfers", "1"),
            ("restarts", "1"),
            ("sent_bytes", "1"),
            ("received_bytes", "1"),
            ("dropped_datagrams", "1"),
            ("intervals", "1"),
            ("unexplained_intervals", "1"),
            ("pairs_percent", "1.5"),
            ("alone_rss_bytes", "1"),
            ("one_peer_ratio", "1.5"),
            ("emulator_ceiling_fps", "1.5"),
            ("peers_carrying", "1"),
            ("emulator_cpu_seconds_per_gbit", "1.5"),
            ("per_peer_bytes", "1.5"),
            ("flood_sent_per_sec", "1.5"),
            ("no_flood_ratio", "1.5"),
            ("cookie_replies", "1"),
            ("initiations_computed", "1"),
            ("socket_drops", "1"),
            ("drops", r#"{"invalid_mac1":1}"#),
            ("window_secs", "1.5"),
            ("theoretical_max_fps", "1.5"),
            ("link_bits_per_sec", "1.5"),
            ("loss_tolerance", "1.5"),
            ("trial_duration_secs", "1.5"),
            ("frame_bits_per_sec", "1.5"),
            ("average_frame_bytes", "1.5"),
            ("generator_limited", "true"),
            ("trials", "[]"),
            ("sent_fps", "1.5"),
            ("min_ms", "1.5"),
            ("mean_ms", "1.5"),
            ("p90_ms", "1.5"),
            ("p99_ms", "1.5"),
            ("p999_ms", "1.5"),
            ("max_ms", "1.5"),
            ("offered_fps", "1.5"),
            ("offered", "1"),
            ("lost", "1"),
            ("clock", "\"c\""),
            ("round_medians", "[1.5]"),
        ];
        let text = format!(
            "{{{}}}",
            keys.map(|(key, value)| format!("\"{key}\":{value}"))
                .join(",")
        );
        let extra: Extra = serde_json::from_str(&text).unwrap();
        assert_eq!(serde_json::to_string(&extra).unwrap(), text);
    }

    #[test]
    fn drops_are_an_object_of_counted_reasons() {
        let mut counters = DropCounters::default();
        counters.count_many(DropReason::CookieRequired, 59_870);
        counters.count(DropReason::InvalidMac1);
        let extra = Extra {
            flood: Some(Flood {
                drops: Some(Drops(counters)),
                ..Flood::default()
            }),
            ..Extra::default()
        };
        let text = serde_json::to_string(&extra).unwrap();
        assert_eq!(
            text,
            r#"{"drops":{"invalid_mac1":1,"cookie_required":59870}}"#
        );
        let back: Extra = serde_json::from_str(&text).unwrap();
        assert_eq!(back, extra);
        let later: Extra =
            serde_json::from_str(r#"{"drops":{"invalid_mac1":2,"reason_of_the_future":5}}"#)
                .unwrap();
        let drops = later.flood.unwrap().drops.unwrap().0;
        assert_eq!(drops.get(DropReason::InvalidMac1), 2);
        assert_eq!(drops.total(), 2);
    }
}
