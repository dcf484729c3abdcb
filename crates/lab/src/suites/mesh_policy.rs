//! The mesh suite's policy row (`policy_spread`, s): in the converged
//! mesh of each size, the last node (not the bootstrap member) is given a
//! signed network policy of [`RULES`] rules, about 3 KiB (three chunks on
//! the wire), as an operator gives one (`fjord network policy`, the file
//! its config names, `fjord reload`); the clock starts before the
//! signing. Every [`POLL_INTERVAL`] each node that does not hold it yet
//! is asked for its policy version (`get=fjord`), one node after the
//! other; the figure is the time until every node holds it, late by at
//! most one interval and one round of queries. After [`SPREAD_TIMEOUT`]
//! the row is `timed_out` and says how many nodes held it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use crate::measure::Row;
use crate::progress::Progress;
use crate::results::{Extra, Measurement, MeasurementStatus};
use crate::systems::RunningMesh;

/// How long every node may take to hold the policy.
pub const SPREAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Pause between two rounds of version queries.
const POLL_INTERVAL: Duration = Duration::from_millis(50);
/// The policy's version: a mesh measured here starts without one.
const VERSION: u64 = 1;
/// `allow` rules in the policy besides the ICMP one.
pub const RULES: usize = 50;

/// A policy of the kind an organisation writes: teams to their services.
fn policy_text() -> String {
    let mut text =
        format!("# the lab's policy\nversion {VERSION}\nallow from any to any proto icmp\n");
    for rule in 0..RULES {
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "allow from group team-{rule} to group service-{rule} port {}/tcp",
            8000 + rule
        );
    }
    text
}

/// Gives the last node the policy and waits until every node holds it.
pub fn policy_spread(mesh: &mut dyn RunningMesh, system: &str, progress: &Progress) -> Measurement {
    let count = mesh.nodes();
    let row = Row::new("mesh", "policy_spread", system, "s").param("nodes", count);
    let started = Instant::now();
    if let Err(why) = mesh.give_policy_and_reload(count - 1, &policy_text()) {
        return row.failed(why);
    }
    let mut holding = vec![false; count];
    let spread = loop {
        for (node, held) in holding.iter_mut().enumerate() {
            if !*held {
                *held = mesh.policy_version(node) == Ok(Some(VERSION));
            }
        }
        let elapsed = started.elapsed();
        if holding.iter().all(|&held| held) {
            break Some(elapsed);
        }
        if elapsed >= SPREAD_TIMEOUT {
            break None;
        }
        std::thread::sleep(POLL_INTERVAL);
    };
    match spread {
        Some(elapsed) => {
            progress.line(&format!(
                "{system}: mesh: {count} nodes: policy held by all {:.2} s after it was given to one",
                elapsed.as_secs_f64()
            ));
            row.measured(
                vec![elapsed.as_secs_f64()],
                MeasurementStatus::Ok,
                Extra::default(),
            )
        }
        None => {
            let held = holding.iter().filter(|&&held| held).count();
            let reached = format!(
                "{held} of {count} nodes held the policy after {} s",
                SPREAD_TIMEOUT.as_secs()
            );
            progress.line(&format!("{system}: mesh: {count} nodes: {reached}"));
            let mut measurement = row.measured(
                vec![SPREAD_TIMEOUT.as_secs_f64()],
                MeasurementStatus::TimedOut,
                Extra::default(),
            );
            measurement.note = Some(reached);
            measurement
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_parses_at_its_version_and_takes_a_few_chunks() {
        let text = policy_text();
        let policy = fjord_mesh::policy::Policy::parse(text.as_bytes()).expect("parses");
        assert_eq!(policy.version(), VERSION);
        assert_eq!(policy.rules().len(), RULES + 1);
        let chunks = fjord_mesh::control::chunk_count(text.len());
        assert!((2..=4).contains(&chunks), "{chunks} chunks");
    }
}
