//! What one session costs in memory, apart from what knowing a member
//! costs: at rest, pairs of members that never spoke exchange a packet,
//! and the live heap before and after is divided by the sessions opened.
//! Only meaningful on demand (in an eager mesh every pair has one).

use std::time::Duration;

use crate::sim::Sim;

/// Pairs opened for the measure: enough that one session's share of the
/// noise (gossip, timers) is small, few enough to stay a moment's work.
const MAX_PAIRS: usize = 64;

/// Heap bytes per session end (each pair opens two: one per member), if
/// any session opened; `live` reads the process's live heap.
pub fn per_session(sim: &mut Sim, live: fn() -> u64) -> Option<u64> {
    let count = sim.members.len();
    let half = count / 2;
    let pairs: Vec<(usize, usize)> = (1..half)
        .map(|a| (a, a + half))
        .filter(|(a, b)| *b < count && !sim.in_session(*a, *b) && !sim.in_session(*b, *a))
        .take(MAX_PAIRS)
        .collect();
    let before_sessions = session_ends(sim);
    let before = live();
    for (a, b) in &pairs {
        sim.send_packet(*a, *b);
    }
    sim.run_for(Duration::from_secs(2));
    let opened = session_ends(sim).saturating_sub(before_sessions);
    let grown = live().saturating_sub(before);
    (opened > 0).then(|| grown / opened as u64)
}

/// Sessions summed over every member (each pair counts twice).
fn session_ends(sim: &Sim) -> usize {
    sim.members
        .iter()
        .map(|member| {
            let device = member.node.device();
            device
                .peer_ids()
                .filter(|id| device.peer_has_session(*id))
                .count()
        })
        .sum()
}
