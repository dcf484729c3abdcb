//! Wall-clock steps and the initiation timestamps they produce.
//!
//! A responder accepts an initiation only if its TAI64N timestamp is newer
//! than the last it accepted from that peer. A running device derives its
//! stamps from the monotonic clock it was pinned to at start (see
//! [`crate::WallClock`]), so a clock step while it runs changes nothing;
//! a restart reads the stepped clock. After a step back, the restarted
//! side's own initiations are refused until its clock passes the stamp
//! the other side remembers (an hour, a year: whatever the step was). The
//! other side's initiations are not, so the outage lasts until the other
//! side initiates — with WireGuard's timers, only once it has sent data
//! unanswered for KEEPALIVE_TIMEOUT + REKEY_TIMEOUT, and never if it has
//! nothing to send. fjord's responder also answers a refused but
//! authentic initiation, from a peer silent for REKEY_TIMEOUT, with an
//! initiation of its own, so the outage is one round trip whichever side
//! has traffic.

use super::sim::*;
use crate::timers::{KEEPALIVE_TIMEOUT, MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::{DropReason, Sent};

const HOUR_SECS: i64 = 3600;

/// Restarts Alice on a clock stepped by `step_secs`, with a driver that
/// handshakes at start (as `fjord up` does for a peer with an endpoint).
fn restart_alice_eagerly(pair: &mut Pair, step_secs: i64) {
    pair.restart_with_clock_step(Alice, step_secs);
    let (now, peer) = (pair.now, pair.alice.peer);
    pair.alice.device.initiate_handshake(peer, now);
    pair.run();
}

/// A pair whose session Alice initiated (Bob remembers her timestamp),
/// idle for a while.
fn connected_then_idle() -> Pair {
    let mut pair = Pair::connected();
    pair.latency = millis(5);
    pair.advance(secs(30));
    pair
}

#[test]
fn clock_stepped_forward_before_a_restart_changes_nothing() {
    let mut pair = connected_then_idle();
    restart_alice_eagerly(&mut pair, HOUR_SECS);
    pair.advance(millis(20));
    assert!(pair.alice.has_session());
    assert_eq!(pair.bob.drops(DropReason::ReplayedInitiation), 0);
    assert!(matches!(
        pair.send(Alice, b"from the future"),
        Sent::Sealed { .. }
    ));
}

/// Only the restarted side has something to send (Bob's side is idle):
/// WireGuard's Bob would refuse Alice for the hour her clock lost.
#[test]
fn clock_stepped_back_is_refused_once_then_the_other_side_initiates() {
    let mut pair = connected_then_idle();
    restart_alice_eagerly(&mut pair, -HOUR_SECS);
    let back = pair
        .advance_until(millis(10), secs(2), |pair| {
            pair.alice.has_session() && pair.bob.has_session()
        })
        .expect("a session within 2 s");
    assert!(back <= millis(20), "{back:?}");
    assert_eq!(pair.bob.drops(DropReason::ReplayedInitiation), 1);
    assert_eq!(pair.sent_by(Bob, Kind::Initiation).len(), 1);

    pair.send(Alice, b"after the step");
    pair.advance(millis(50));
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"after the step"[..])
    );
}

/// The same with traffic only from the side that kept its session: the
/// restarted side cannot read it, and is back as soon as its refused
/// initiation reaches the other side, not after the other side's
/// KEEPALIVE_TIMEOUT + REKEY_TIMEOUT of unanswered data.
#[test]
fn clock_stepped_back_while_the_other_side_keeps_sending() {
    let mut pair = connected_then_idle();
    restart_alice_eagerly(&mut pair, -HOUR_SECS);
    let delivered_before = pair.alice.delivered.len();
    let back = pair
        .advance_until(millis(10), KEEPALIVE_TIMEOUT + REKEY_TIMEOUT, |pair| {
            pair.send(Bob, b"anyone there?");
            pair.alice.delivered.len() > delivered_before
        })
        .expect("Bob's data reaches Alice again");
    assert!(back <= millis(30), "{back:?}");
}

/// A peer that hears from the other side keeps refusing its stale
/// initiations without answering them: a replay of a captured initiation
/// during a live session costs no handshake.
#[test]
fn stale_initiations_during_a_live_session_start_nothing() {
    let mut pair = Pair::connected();
    let captured = pair.last_sent(Alice, Kind::Initiation);
    for _ in 0..10 {
        pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
        pair.send(Alice, b"alive");
        pair.inject(Bob, captured.from, &captured.bytes);
    }
    assert_eq!(pair.bob.drops(DropReason::ReplayedInitiation), 10);
    assert!(pair.sent_by(Bob, Kind::Initiation).is_empty());
}

/// A replay while the peer is silent costs at most one handshake per
/// REKEY_TIMEOUT, sent to where the peer really is, not to the replayer.
#[test]
fn stale_initiations_from_a_silent_peer_start_at_most_one_handshake_per_rekey_timeout() {
    let mut pair = connected_then_idle();
    let captured = pair.last_sent(Alice, Kind::Initiation);
    let replayer = "203.0.113.9:4444".parse().expect("an address");
    for _ in 0..100 {
        pair.inject(Bob, replayer, &captured.bytes);
        pair.advance(millis(100));
    }
    let answers = pair.sent_by(Bob, Kind::Initiation);
    // 10 s of replays: at most one answer per REKEY_TIMEOUT.
    assert!(
        !answers.is_empty() && answers.len() <= 3,
        "{}",
        answers.len()
    );
    assert!(
        answers
            .iter()
            .all(|(_, datagram)| datagram.to == alice_addr())
    );
    assert_eq!(pair.bob.endpoint(), Some(alice_addr()));
}
