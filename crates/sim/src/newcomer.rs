//! A member joining a mesh at rest: how long until the others know it,
//! and how long its first packet to a member it never spoke to takes.
//! Each watch looks only at the member an event touched, so the times
//! are exact (to the event) and cost nothing per event beyond a lookup.

use std::time::Duration;

use crate::sim::Sim;

/// How long a newcomer takes to be part of the mesh, from its start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Newcomer {
    /// Every other member lists it.
    pub known_by_all: Option<Duration>,
    /// Every other member has a session with it (not waited for when
    /// sessions are on demand).
    pub met_by_all: Option<Duration>,
    /// It has a session with every other member (likewise).
    pub knows_all: Option<Duration>,
}

/// Starts a newcomer through member 0 and waits (at most `limit`) until
/// it is known by all and, unless sessions are on demand, met by all and
/// knows all.
pub fn joins(sim: &mut Sim, limit: Duration) -> Newcomer {
    let started = sim.now();
    let on_demand = sim.on_demand(0);
    let newcomer = sim.start_member(Some(0));
    let others = newcomer;
    let mut unknown_at = vec![true; others];
    let mut unmet_at = vec![true; others];
    let (mut unknown, mut unmet) = (others, others);
    let mut figures = Newcomer::default();
    // Its own view resumes where it stopped: the square of the size once.
    let mut next_unchecked = 0;
    sim.run_watching(started + limit, |sim, touched| {
        let since = sim.now() - started;
        if touched < others {
            if unknown_at[touched] && sim.knows(touched, newcomer) {
                unknown_at[touched] = false;
                unknown -= 1;
                if unknown == 0 {
                    figures.known_by_all = Some(since);
                }
            }
            if unmet_at[touched] && sim.knows_with_session(touched, newcomer) {
                unmet_at[touched] = false;
                unmet -= 1;
                if unmet == 0 {
                    figures.met_by_all = Some(since);
                }
            }
        } else if figures.knows_all.is_none() {
            while next_unchecked < others && sim.knows_with_session(newcomer, next_unchecked) {
                next_unchecked += 1;
            }
            if next_unchecked == others {
                figures.knows_all = Some(since);
            }
        }
        figures.known_by_all.is_some()
            && (on_demand || figures.met_by_all.is_some() && figures.knows_all.is_some())
    });
    figures
}

/// Between a newcomer's first packet to a member it never spoke to and
/// that packet (or a resent one) arriving; from the newcomer's start,
/// and from the first send.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FirstPacket {
    pub since_start: Option<Duration>,
    pub since_first_send: Option<Duration>,
}

/// A newcomer joins through member 0 and, as soon as it has a route to
/// the member in the middle of the list, sends it a packet, again every
/// 100 ms (as an application retries) until one arrives.
pub fn first_packet(sim: &mut Sim, limit: Duration) -> FirstPacket {
    const ROUTE_CHECK: Duration = Duration::from_millis(10);
    const RESEND: Duration = Duration::from_millis(100);
    let started = sim.now();
    let end = started + limit;
    let target = sim.members.len() / 2;
    let newcomer = sim.start_member(Some(0));
    let target_overlay = sim.members[target].identity.overlay;
    let source = sim.members[newcomer].identity.overlay;
    while sim.members[newcomer].node.route(&target_overlay).is_none() {
        if sim.now() >= end {
            return FirstPacket::default();
        }
        sim.run_for(ROUTE_CHECK);
    }
    let first_send = sim.now();
    let arrived = |sim: &Sim, touched: usize| {
        touched == target
            && sim.members[target]
                .received
                .last()
                .is_some_and(|(from, _)| *from == source)
    };
    while sim.now() < end {
        // Staged behind a handshake, sealed, or dropped for want of an
        // endpoint: the resend covers every case, as for a lost one.
        sim.send_packet(newcomer, target);
        let now = sim.now();
        let arrival = if arrived(sim, target) {
            Some(now)
        } else {
            sim.run_watching((now + RESEND).min(end), arrived)
        };
        if let Some(at) = arrival {
            return FirstPacket {
                since_start: Some(at - started),
                since_first_send: Some(at - first_send),
            };
        }
    }
    FirstPacket::default()
}
