//! `policy`: what a member's connection tracking does when another member
//! floods it with flows, and what the member's own traffic keeps.
//!
//! Three members of one network on a LAN: node0 the scanner, node1 a
//! member with honest traffic, node2 the target. Each phase runs
//! [`SAMPLES`] digest-checked TCP transfers node1 → node2
//! (`policy_transfer`):
//!
//! 1. `no policy`: the reference.
//! 2. `no policy, flood`: while node0 opens [`UDP_FLOWS`] UDP flows to node2
//!    (one datagram each, [`UDP_FLOWS_PER_SEC`] a second), so the cost of
//!    the flood itself on this machine is known.
//! 3. Every member is given a signed policy of [`POLICY_RULES`] rules, in
//!    which node0 may reach node2 on every port (so every flow it opens is
//!    tracked) and node1 node2's transfer ports: `policy`.
//! 4. node0 connects to all 65,535 TCP ports of node2 (`policy_tracked_flows`,
//!    `after port scan`: the flows node2 tracks, against its cap).
//! 5. `policy, flood`: the transfers under the same UDP flood
//!    (`policy_tracked_flows`, `after UDP flows`).
//!
//! Issue 47's goals: node2 tracks no more than its caps whatever node0
//! opens (node0's share fills and evicts its own flows only); the
//! transfers under the flood keep ≥ 0.9× of the same flood without a
//! policy (`policy, flood` against `no policy, flood`: the flood's own
//! cost on the machine is in both).

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use super::Setup;
use crate::measure::{Row, transfers_row};
use crate::results::{Extra, Measurement};
use crate::systems::{MemberPath, RunningMesh, resident_bytes};
use crate::topology::Lan;
use crate::traffic::flows::{FlowsReport, tcp_connect_scan, udp_flows};
use crate::traffic::{BulkReport, BulkTransfer};

const SCANNER: usize = 0;
const HONEST: usize = 1;
const TARGET: usize = 2;
/// Rules of the policy, as in `fjord-policy`.
const POLICY_RULES: usize = crate::systems::members::POLICY_RULES;
/// UDP flows node0 opens in each flood.
pub const UDP_FLOWS: u64 = 1_000_000;
/// Paced so that the flood lasts long enough for every transfer to run
/// inside it, and measures tracking rather than the generator's core.
const UDP_FLOWS_PER_SEC: u64 = 40_000;
const SAMPLES: usize = 3;
const TRANSFER_BYTES: u64 = 256 << 20;
const TRANSFER_LIMIT: Duration = Duration::from_secs(60);
/// node1's transfers go to node2's ports from here on.
const FIRST_PORT: u16 = 5301;
const MEET_TIMEOUT: Duration = Duration::from_secs(30);
const POLICY_TIMEOUT: Duration = Duration::from_secs(10);

pub fn steps(_quick: bool) -> u64 {
    6
}

/// The lab's policy for the three members: rules for teams nobody is in,
/// then the four that matter.
fn policy_text() -> String {
    let mut text = String::from("# the policy suite's\nversion 1\n");
    for rule in 0..POLICY_RULES - 4 {
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "allow from group team-{rule} to group service-{rule} port {}/tcp",
            8000 + rule
        );
    }
    text.push_str("allow from member node0 to member node2 proto any\n");
    let _ = writeln!(
        text,
        "allow from member node1 to member node2 port {FIRST_PORT}-{}/tcp",
        FIRST_PORT + 4 * SAMPLES as u16
    );
    text.push_str("allow from any to any proto icmp\n");
    text.push_str("allow from member node2 to member node1 port 22/tcp\n");
    text
}

pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let name = setup.name();
    let mut rows = Vec::new();
    setup.step("policy: 3 members on a LAN, meeting");
    let lan = match Lan::new(3) {
        Ok(lan) => lan,
        Err(error) => {
            rows.push(transfer_row(name, "no policy").failed(format!("building the LAN: {error}")));
            setup.done();
            setup.skip(steps(quick) - 1);
            return rows;
        }
    };
    let mut mesh = match setup.start_mesh(&lan.mesh_hosts()) {
        Ok(mesh) => mesh,
        Err(error) => {
            setup.done();
            setup.give_up(&format!("policy: skipped: {error}"), steps(quick) - 1);
            return rows;
        }
    };
    if let Err(why) = meet(mesh.as_mut()) {
        rows.push(transfer_row(name, "no policy").failed(why));
        setup.done();
        setup.skip(steps(quick) - 1);
        return rows;
    }
    setup.done();
    let mut phases = Phases {
        lan: &lan,
        mesh: mesh.as_mut(),
        system: name,
        next_port: FIRST_PORT,
    };

    setup.step("policy: transfers node1 → node2, no policy");
    let plain = phases.transfers();
    rows.push(transfers_row(
        transfer_row(name, "no policy"),
        plain.iter(),
        Extra::default(),
    ));
    setup.done();

    setup.step(&format!(
        "policy: the same while node0 opens {UDP_FLOWS} UDP flows to node2, no policy"
    ));
    let (plain_flooded, _) = phases.transfers_under_flood();
    let plain_flooded_median = median_of(&plain_flooded);
    let mut extra = Extra::default();
    extra.flood.get_or_insert_default().no_flood_ratio =
        ratio(plain_flooded_median, median_of(&plain));
    rows.push(transfers_row(
        transfer_row(name, "no policy, flood"),
        plain_flooded.iter(),
        extra,
    ));
    setup.done();

    setup.step(&format!(
        "policy: every member given a {POLICY_RULES}-rule policy"
    ));
    if let Err(why) = phases.give_policy() {
        rows.push(transfer_row(name, "policy").failed(why));
        setup.done();
        setup.skip(3);
        return rows;
    }
    let with_policy = phases.transfers();
    let mut extra = Extra::default();
    extra.tracking.get_or_insert_default().no_policy_ratio =
        ratio(median_of(&with_policy), median_of(&plain));
    rows.push(transfers_row(
        transfer_row(name, "policy"),
        with_policy.iter(),
        extra,
    ));
    setup.done();

    let rss_before = phases.target_rss();
    setup.step("policy: node0 connects to all 65,535 TCP ports of node2");
    let scan = tcp_connect_scan(
        &lan.hosts[SCANNER],
        phases.mesh.overlay_address(TARGET),
        1..=u16::MAX,
    );
    rows.push(match scan {
        Ok(report) => phases.tracked_row("after port scan", &report, rss_before),
        Err(error) => tracked_row(name, "after port scan").failed(format!("the scan: {error}")),
    });
    setup.done();

    setup.step(&format!(
        "policy: transfers while node0 opens {UDP_FLOWS} UDP flows to node2, policy"
    ));
    let (flooded, flood) = phases.transfers_under_flood();
    let mut extra = Extra::default();
    extra.flood.get_or_insert_default().no_flood_ratio =
        ratio(median_of(&flooded), median_of(&with_policy));
    extra.tracking.get_or_insert_default().no_policy_ratio =
        ratio(median_of(&flooded), plain_flooded_median);
    rows.push(transfers_row(
        transfer_row(name, "policy, flood"),
        flooded.iter(),
        extra,
    ));
    rows.push(match flood {
        Ok(report) => phases.tracked_row("after UDP flows", &report, rss_before),
        Err(why) => tracked_row(name, "after UDP flows").failed(why),
    });
    setup.done();
    rows
}

fn transfer_row(system: &str, phase: &str) -> Row {
    Row::new("policy", "policy_transfer", system, "bit/s")
        .param("phase", phase)
        .param("direction", "node1_to_node2")
}

fn tracked_row(system: &str, phase: &str) -> Row {
    Row::new("policy", "policy_tracked_flows", system, "flows").param("phase", phase)
}

struct Phases<'a> {
    lan: &'a Lan,
    mesh: &'a mut dyn RunningMesh,
    system: &'a str,
    /// Every transfer its own port, within the policy's range.
    next_port: u16,
}

impl Phases<'_> {
    fn transfers(&mut self) -> Vec<Result<BulkReport, String>> {
        let transfer = BulkTransfer::new(TRANSFER_BYTES)
            .timeout(TRANSFER_LIMIT)
            .stall_timeout(TRANSFER_LIMIT);
        let sink_address = self.mesh.overlay_address(TARGET);
        (0..SAMPLES)
            .map(|_| {
                let port = self.next_port;
                self.next_port += 1;
                transfer
                    .run(
                        &self.lan.hosts[HONEST],
                        &self.lan.hosts[TARGET],
                        std::net::SocketAddr::new(sink_address, port),
                    )
                    .map_err(|error| error.to_string())
            })
            .collect()
    }

    /// The transfers while node0 floods node2 with UDP flows; the flood
    /// runs to its end either way.
    fn transfers_under_flood(
        &mut self,
    ) -> (Vec<Result<BulkReport, String>>, Result<FlowsReport, String>) {
        let flood = udp_flows(
            &self.lan.hosts[SCANNER],
            self.mesh.overlay_address(TARGET),
            UDP_FLOWS,
            UDP_FLOWS_PER_SEC,
        );
        let flood = match flood {
            Ok(flood) => flood,
            Err(error) => {
                let why = format!("starting the flood: {error}");
                return (vec![Err(why.clone())], Err(why));
            }
        };
        // Let the flood fill the tables before the first transfer.
        std::thread::sleep(Duration::from_secs(2));
        let transfers = self.transfers();
        if flood.is_finished() {
            let why = "the flood ended before the transfers did: raise UDP_FLOWS or pace it slower";
            return (vec![Err(why.to_string())], Err(why.to_string()));
        }
        let report = match flood.join() {
            Ok(Ok(report)) => Ok(report),
            Ok(Err(error)) => Err(format!("the flood: {error}")),
            Err(_) => Err("the flood's thread panicked".to_string()),
        };
        (transfers, report)
    }

    fn give_policy(&mut self) -> Result<(), String> {
        let text = policy_text();
        for node in 0..3 {
            self.mesh.give_policy_and_reload(node, &text)?;
        }
        let started = Instant::now();
        for node in 0..3 {
            while self.mesh.policy_version(node)? != Some(1) {
                if started.elapsed() > POLICY_TIMEOUT {
                    return Err(format!(
                        "node{node} does not hold the policy after a reload"
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    fn target_rss(&self) -> u64 {
        resident_bytes(&self.mesh.pid(TARGET).into_iter().collect::<Vec<_>>())
    }

    fn tracked_row(&mut self, phase: &str, report: &FlowsReport, rss_before: u64) -> Measurement {
        let row = tracked_row(self.system, phase);
        let flows = match self.mesh.policy_flows(TARGET) {
            Ok(flows) => flows,
            Err(why) => return row.failed(why),
        };
        let mut extra = Extra::default();
        let tracking = extra.tracking.get_or_insert_default();
        tracking.flows_opened = Some(report.opened);
        tracking.ports_answered = (report.answered > 0).then_some(report.answered);
        tracking.evicted_flows = Some(flows.evicted);
        tracking.flows_cap_per_peer = Some(2 * fjord_mesh::firewall::FLOWS_PER_PEER_SIDE as u64);
        tracking.rss_growth_bytes = Some(self.target_rss() as i64 - rss_before as i64);
        row.concluded(vec![flows.tracked as f64], extra, None)
    }
}

/// Waits until every member lists every other on a direct path.
fn meet(mesh: &mut dyn RunningMesh) -> Result<(), String> {
    for node in 0..3 {
        mesh.start_node(node)?;
    }
    let started = Instant::now();
    loop {
        let mut met = true;
        for node in 0..3 {
            for other in (0..3).filter(|other| *other != node) {
                met &= mesh
                    .member(node, other)
                    .is_some_and(|member| member.path == MemberPath::Direct);
            }
        }
        if met {
            return Ok(());
        }
        if started.elapsed() > MEET_TIMEOUT {
            return Err(format!(
                "the three members did not meet within {MEET_TIMEOUT:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn median_of(transfers: &[Result<BulkReport, String>]) -> Option<f64> {
    let samples: Vec<f64> = transfers
        .iter()
        .filter_map(|transfer| transfer.as_ref().ok())
        .filter(|report| report.verified)
        .map(|report| report.throughput_bits_per_sec)
        .collect();
    (!samples.is_empty()).then(|| crate::results::median(&samples))
}

fn ratio(figure: Option<f64>, reference: Option<f64>) -> Option<f64> {
    match (figure, reference) {
        (Some(figure), Some(reference)) if reference > 0.0 => Some(figure / reference),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suites_policy_parses_with_its_rules() {
        let policy = fjord_mesh::policy::Policy::parse(policy_text().as_bytes()).expect("parses");
        assert_eq!(policy.rules().len(), POLICY_RULES);
    }
}
