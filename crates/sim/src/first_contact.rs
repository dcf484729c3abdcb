//! Two members of a mesh at rest that never spoke exchange a packet: how
//! long the first one takes. With sessions on demand this is the cost of
//! meeting a member (traversal, handshake, the held packet sent); in an
//! eager mesh the session is already up and it is one trip.

use std::time::Duration;

use crate::sim::Sim;

/// The first pair (sender from a third of the list on, receiver from two
/// thirds on; never member 0, which keeps everyone) with no session
/// either way; in an eager mesh, where every pair has one, the pair at
/// those two places.
fn pair(sim: &Sim) -> (usize, usize) {
    let count = sim.members.len();
    let (from, to) = (1 + (count - 1) / 3, 1 + 2 * (count - 1) / 3);
    (from..count)
        .flat_map(|a| (to..count).map(move |b| (a, b)))
        .find(|(a, b)| a != b && !sim.in_session(*a, *b) && !sim.in_session(*b, *a))
        .unwrap_or((from, to))
}

/// A packet from one member to another it never spoke to, again every
/// 100 ms (as an application retries) until one arrives; from the first
/// send to the arrival, if it came within `limit`.
pub fn between_members(sim: &mut Sim, limit: Duration) -> Option<Duration> {
    const RESEND: Duration = Duration::from_millis(100);
    let (from, to) = pair(sim);
    let source = sim.members[from].identity.overlay;
    let before = sim.members[to].received.len();
    let started = sim.now();
    let end = started + limit;
    let arrived = |sim: &Sim, touched: usize| {
        touched == to
            && sim.members[to].received[before..]
                .iter()
                .any(|(sender, _)| *sender == source)
    };
    while sim.now() < end {
        sim.send_packet(from, to);
        let now = sim.now();
        let arrival = if arrived(sim, to) {
            Some(now)
        } else {
            sim.run_watching((now + RESEND).min(end), arrived)
        };
        if let Some(at) = arrival {
            return Some(at - started);
        }
    }
    None
}
