//! The measuring run: what a user of a mesh of N members would check, in
//! one story.
//!
//! ```text
//! 1. member 0 starts; members 1..N join through it, one every join_spacing
//! 2. until every member knows every other (with a session,
//!    unless sessions are on demand)                       → all know all
//! 3. settle, then rest (no user traffic)                  → bytes, memory
//!    (on demand: pairs that never spoke open sessions     → memory per session)
//! 4. a newcomer joins through member 0                    → known by all
//! 5. another newcomer sends to a member it never spoke to → first packet
//! 6. two members that never spoke exchange a packet       → first contact
//! 7. one member is given another's revocation             → revoked everywhere
//! ```
//!
//! Past `EagerSessions` members, sessions are on demand: the settle
//! outlasts the idle timeout, so the sessions opened while the mesh was
//! small have closed before the rest is measured.
//!
//! Members removed while alive (false evictions) are counted from the
//! start up to the revocation, the only removal the story causes.

use std::time::Duration;

use crate::report::Report;
use crate::sim::{Sim, SimConfig};

/// How the story runs. Defaults in [`ScenarioConfig::new`].
#[derive(Debug, Clone)]
pub struct ScenarioConfig {
    pub members: usize,
    pub sim: SimConfig,
    /// Between two members' starts (default 20 ms: a thousand members
    /// start within 20 s, one at a time at the bootstrap member).
    pub join_spacing: Duration,
    /// After step 2, before the rest window (default 30 s: the joins'
    /// traversal retries and first gossip rounds are over; on demand, an
    /// idle timeout and a quarter more, so idle sessions have closed).
    pub settle: Duration,
    /// The window in which traffic at rest is counted (default 120 s:
    /// every session rekeys once in it, after WireGuard's
    /// REKEY_AFTER_TIME).
    pub rest: Duration,
    /// Longest wait for any one step, in simulated time (default 600 s);
    /// a step that takes longer is reported as not reached.
    pub step_limit: Duration,
    /// Live heap bytes of the process, if the caller can count them: read
    /// before the first member starts and at the start of the rest.
    pub live_bytes: Option<fn() -> u64>,
}

impl ScenarioConfig {
    pub fn new(members: usize, sim: SimConfig) -> Self {
        let mut settle = Duration::from_secs(30);
        if members > sim.sessions.eager {
            settle += sim.sessions.idle_timeout * 5 / 4;
        }
        Self {
            members,
            sim,
            join_spacing: Duration::from_millis(20),
            settle,
            rest: Duration::from_secs(120),
            step_limit: Duration::from_secs(600),
            live_bytes: None,
        }
    }
}

/// Runs the story; the figures a user would check, and the simulator it
/// leaves (for a test's own checks).
pub fn run(config: &ScenarioConfig) -> (Report, Sim) {
    assert!(
        config.members >= 3,
        "a revocation needs a revoker and a victim besides the bootstrap"
    );
    let heap_before = config.live_bytes.map(|live| live());
    let mut sim = Sim::new(config.sim.clone());
    let mut report = Report::new(config);

    sim.start_member(None);
    for _ in 1..config.members {
        sim.run_for(config.join_spacing);
        sim.start_member(Some(0));
    }
    let last_start = sim.now();
    report.full_mesh =
        wait_for_all_to_know_all(&mut sim, config.step_limit).map(|at| at - last_start);
    report.on_demand = sim.on_demand(0);

    sim.run_for(config.settle);
    if let (Some(live), Some(before)) = (config.live_bytes, heap_before) {
        let per_member = live().saturating_sub(before) / config.members as u64;
        report.heap_bytes_per_member = Some(per_member);
    }
    report.sessions_per_member = sessions_per_member(&sim);
    let traffic_before = total_traffic(&sim);
    let control_before = sim.control_kinds.clone();
    sim.run_for(config.rest);
    report.rest_traffic = total_traffic(&sim) - traffic_before;
    report.rest_control = &sim.control_kinds - &control_before;
    if let (Some(live), true) = (config.live_bytes, report.on_demand) {
        report.heap_bytes_per_session = crate::session_memory::per_session(&mut sim, live);
    }

    report.newcomer = crate::newcomer::joins(&mut sim, config.step_limit);
    report.first_packet = crate::newcomer::first_packet(&mut sim, config.step_limit);
    report.first_contact = crate::first_contact::between_members(&mut sim, config.step_limit);

    report.false_evictions = removals(&sim);
    report.revocation = crate::revocation::spreads(&mut sim, config.step_limit);
    report.events = sim.events;
    (report, sim)
}

/// Simulated time until every member lists every other as a member (with
/// a session, unless its sessions are on demand); the instant it
/// happened. Checked every 100 ms (the figure's resolution); each
/// member's check resumes where it stopped, so the checks cost the square
/// of the size once, not at every round.
fn wait_for_all_to_know_all(sim: &mut Sim, limit: Duration) -> Option<std::time::Instant> {
    const CHECK_EVERY: Duration = Duration::from_millis(100);
    let count = sim.members.len();
    let mut next_unchecked = vec![0usize; count];
    let end = sim.now() + limit;
    loop {
        let mut complete = true;
        for (at, cursor) in next_unchecked.iter_mut().enumerate() {
            let on_demand = sim.on_demand(at);
            while *cursor < count
                && (*cursor == at
                    || sim.knows(at, *cursor) && (on_demand || sim.in_session(at, *cursor)))
            {
                *cursor += 1;
            }
            complete &= *cursor == count;
        }
        if complete {
            return Some(sim.now());
        }
        if sim.now() >= end {
            return None;
        }
        sim.run_for(CHECK_EVERY);
    }
}

fn sessions_per_member(sim: &Sim) -> f64 {
    let sessions: usize = sim
        .members
        .iter()
        .map(|member| {
            let device = member.node.device();
            device
                .peer_ids()
                .filter(|id| device.peer_has_session(*id))
                .count()
        })
        .sum();
    sessions as f64 / sim.members.len() as f64
}

fn total_traffic(sim: &Sim) -> crate::traffic::Traffic {
    let mut total = crate::traffic::Traffic::default();
    for member in &sim.members {
        total += member.traffic;
    }
    total
}

/// Members every member removed so far, for any reason.
fn removals(sim: &Sim) -> u64 {
    sim.members
        .iter()
        .filter_map(|member| member.node.mesh())
        .map(|mesh| mesh.counters().members_removed)
        .sum()
}
