//! The figures of one run and the table they are printed in (Markdown,
//! one row per run, so runs of several sizes stack into one table).

use std::fmt::Write as _;
use std::time::Duration;

use crate::newcomer::{FirstPacket, Newcomer};
use crate::scenario::ScenarioConfig;
use crate::traffic::{ControlKinds, Traffic};

#[derive(Debug, Clone)]
pub struct Report {
    pub members: usize,
    pub seed: u64,
    pub loss: f64,
    pub rest: Duration,
    /// From the last member's start until every member knows every
    /// other, with a session unless they are on demand (at 100 ms
    /// resolution).
    pub full_mesh: Option<Duration>,
    /// The mesh was past `EagerSessions`: sessions on demand.
    pub on_demand: bool,
    pub newcomer: Newcomer,
    pub first_packet: FirstPacket,
    /// From the first send of a packet between two members at rest that
    /// never spoke to its arrival.
    pub first_contact: Option<Duration>,
    /// From one member's revocation until no member lists the victim.
    pub revocation: Option<Duration>,
    /// Everything every member sent during the rest window.
    pub rest_traffic: Traffic,
    /// The control messages of the rest window, by kind.
    pub rest_control: ControlKinds,
    /// Peers with a session, on average, at rest.
    pub sessions_per_member: f64,
    /// Members removed while alive, up to the revocation.
    pub false_evictions: u64,
    pub heap_bytes_per_member: Option<u64>,
    /// Live heap one session adds at one end, apart from knowing the
    /// member (measured on demand only).
    pub heap_bytes_per_session: Option<u64>,
    /// Events the simulator ran (deliveries and timeouts).
    pub events: u64,
}

impl Report {
    pub(crate) fn new(config: &ScenarioConfig) -> Self {
        Self {
            members: config.members,
            seed: config.sim.seed,
            loss: config.sim.link.loss,
            rest: config.rest,
            full_mesh: None,
            on_demand: false,
            newcomer: Newcomer::default(),
            first_packet: FirstPacket::default(),
            first_contact: None,
            revocation: None,
            rest_traffic: Traffic::default(),
            rest_control: ControlKinds::default(),
            sessions_per_member: 0.0,
            false_evictions: 0,
            heap_bytes_per_member: None,
            heap_bytes_per_session: None,
            events: 0,
        }
    }

    /// Bytes (UDP payload) one member sends per minute at rest.
    fn per_member_minute(&self, bytes: u64) -> f64 {
        bytes as f64 / self.members as f64 / (self.rest.as_secs_f64() / 60.0)
    }

    pub const TABLE_HEADER: &'static str = "\
| members | loss | sessions | all know all after last join | newcomer known by all | newcomer met by all | newcomer knows all | newcomer's first packet (from send) | first packet between members at rest | revocation reaches all | sessions/member | sent/member/min at rest | of it mesh control | handshakes | keepalives | datagrams/member/min | false evictions | heap/member | of it per known member | heap/session | events |
|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|";

    /// The run's row of the table under [`Report::TABLE_HEADER`].
    pub fn table_row(&self) -> String {
        let traffic = &self.rest_traffic;
        let mut row = String::new();
        let _ = write!(
            row,
            "| {} | {:.0} % | {} | {} | {} | {} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {:.0} | {} | {} | {} | {} | {} |",
            self.members,
            self.loss * 100.0,
            if self.on_demand { "on demand" } else { "all" },
            time(self.full_mesh),
            time(self.newcomer.known_by_all),
            self.eager_only(self.newcomer.met_by_all),
            self.eager_only(self.newcomer.knows_all),
            time(self.first_packet.since_first_send),
            time(self.first_contact),
            time(self.revocation),
            self.sessions_per_member,
            bytes(self.per_member_minute(traffic.total().bytes)),
            bytes(self.per_member_minute(traffic.control.bytes)),
            bytes(self.per_member_minute(traffic.handshake.bytes)),
            bytes(self.per_member_minute(traffic.keepalive.bytes)),
            self.per_member_minute(traffic.total().datagrams),
            self.false_evictions,
            self.heap_bytes_per_member
                .map_or("—".to_string(), |b| bytes(b as f64)),
            self.heap_per_known_member().map_or("—".to_string(), bytes),
            self.heap_bytes_per_session
                .map_or("—".to_string(), |b| bytes(b as f64)),
            self.events,
        );
        row
    }

    /// A member's heap, less its sessions' (when their cost was
    /// measured), spread over the other members it knows.
    fn heap_per_known_member(&self) -> Option<f64> {
        let heap = self.heap_bytes_per_member? as f64;
        let sessions = self.sessions_per_member * self.heap_bytes_per_session.unwrap_or(0) as f64;
        let others = self.members.saturating_sub(1).max(1) as f64;
        Some((heap - sessions).max(0.0) / others)
    }

    /// A figure only an eager mesh waits for ("—" on demand).
    fn eager_only(&self, duration: Option<Duration>) -> String {
        if self.on_demand {
            "—".to_string()
        } else {
            time(duration)
        }
    }

    /// What one member's control bytes at rest are spent on, per minute,
    /// largest first: `Ping 1.2 KiB (24)` for bytes and datagrams.
    pub fn control_breakdown(&self) -> String {
        let mut kinds = self.rest_control.kinds();
        kinds.sort_by_key(|(_, count)| std::cmp::Reverse(count.bytes));
        let parts: Vec<String> = kinds
            .iter()
            .map(|(kind, count)| {
                format!(
                    "{kind:?} {} ({:.0})",
                    bytes(self.per_member_minute(count.bytes)),
                    self.per_member_minute(count.datagrams)
                )
            })
            .collect();
        format!(
            "{} members, control at rest per member per minute: {}",
            self.members,
            parts.join(", ")
        )
    }
}

/// A duration as a person reads it; "not reached" for a step that did not
/// finish within its limit.
fn time(duration: Option<Duration>) -> String {
    match duration {
        None => "not reached".to_string(),
        Some(d) if d < Duration::from_secs(1) => format!("{} ms", d.as_millis()),
        Some(d) => format!("{:.2} s", d.as_secs_f64()),
    }
}

fn bytes(count: f64) -> String {
    const KIB: f64 = 1024.0;
    if count < 10.0 * KIB {
        format!("{count:.0} B")
    } else if count < 10.0 * KIB * KIB {
        format!("{:.1} KiB", count / KIB)
    } else {
        format!("{:.1} MiB", count / KIB / KIB)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_read_in_their_unit() {
        assert_eq!(time(Some(Duration::from_millis(250))), "250 ms");
        assert_eq!(time(Some(Duration::from_millis(2500))), "2.50 s");
        assert_eq!(time(None), "not reached");
        assert_eq!(bytes(512.0), "512 B");
        assert_eq!(bytes(20_480.0), "20.0 KiB");
        assert_eq!(bytes(32.0 * 1024.0 * 1024.0), "32.0 MiB");
    }

    #[test]
    fn a_row_has_a_cell_for_every_column() {
        let config = ScenarioConfig::new(3, crate::SimConfig::new(1, crate::LinkConfig::default()));
        let columns = Report::TABLE_HEADER
            .lines()
            .next()
            .unwrap()
            .matches('|')
            .count();
        assert_eq!(
            Report::new(&config).table_row().matches('|').count(),
            columns
        );
    }
}
