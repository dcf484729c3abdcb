//! A revocation given to one member: how long until no member holds the
//! revoked one.

use std::time::Duration;

use crate::sim::Sim;

/// Gives a member (not the bootstrap) the revocation of another and
/// waits, at most `limit`, until no other member lists the revoked one;
/// the time that took. Which two is drawn from the size, so a seed
/// replays it.
pub fn spreads(sim: &mut Sim, limit: Duration) -> Option<Duration> {
    let count = sim.members.len();
    let revoker = 1 + (count - 1) / 3;
    let victim = 1 + 2 * (count - 1) / 3;
    debug_assert!(revoker != victim && victim < count);
    let started = sim.now();
    let revocation = sim.revocation_of(victim);
    sim.revoke(revoker, revocation);
    let mut holding: Vec<bool> = (0..count)
        .map(|at| at != victim && sim.knows(at, victim))
        .collect();
    let mut left = holding.iter().filter(|h| **h).count();
    if left == 0 {
        return Some(Duration::ZERO);
    }
    sim.run_watching(started + limit, |sim, touched| {
        if holding[touched] && !sim.knows(touched, victim) {
            holding[touched] = false;
            left -= 1;
        }
        left == 0
    })
    .map(|at| at - started)
}
