use super::*;
use crate::test_support::peer_ids;

fn udp() -> SocketAddr {
    "198.18.0.2:51820".parse().unwrap()
}

fn carrier() -> SocketAddr {
    "198.18.0.2:443".parse().unwrap()
}

fn actions(fallback: &mut Fallback) -> Vec<FallbackAction> {
    std::iter::from_fn(|| fallback.poll_action()).collect()
}

/// Initiations toward UDP every 5 s, unanswered until the last one leaves
/// `UNANSWERED_BEFORE_FALLBACK` after the first (at `end`).
fn fail_udp(fallback: &mut Fallback, end: Instant, peer: PeerId) {
    let first = end - UNANSWERED_BEFORE_FALLBACK;
    for step in 0..=2 {
        fallback.handle_initiated(first + Duration::from_secs(5) * step, peer, Some(udp()));
    }
}

/// A fallback with one peer (port 443) whose carrier is open at `start`.
/// A peer whose UDP failed at `start`: its carrier is opening (the
/// Connect taken).
fn connecting(start: Instant) -> (Fallback, PeerId) {
    let peer = peer_ids(1)[0];
    let mut fallback = Fallback::new();
    fallback.configure(peer, Some(443));
    fail_udp(&mut fallback, start, peer);
    actions(&mut fallback);
    (fallback, peer)
}

fn carried(start: Instant) -> (Fallback, PeerId) {
    let (mut fallback, peer) = connecting(start);
    fallback.handle_carrier(start, CarrierEvent::Connected(carrier()));
    actions(&mut fallback);
    (fallback, peer)
}

#[test]
fn unanswered_retries_toward_udp_open_the_carrier_at_the_peer_address() {
    let start = Instant::now();
    let peer = peer_ids(1)[0];
    let mut fallback = Fallback::new();
    fallback.configure(peer, Some(443));
    // A completed handshake in between starts the clock again.
    let first = start - UNANSWERED_BEFORE_FALLBACK * 2;
    fallback.handle_initiated(first, peer, Some(udp()));
    fallback.handle_initiated(first + Duration::from_secs(5), peer, Some(udp()));
    fallback.handle_handshake(peer);
    let again = start - UNANSWERED_BEFORE_FALLBACK;
    fallback.handle_initiated(again, peer, Some(udp()));
    fallback.handle_initiated(start - Duration::from_millis(1), peer, Some(udp()));
    assert!(actions(&mut fallback).is_empty(), "too early");
    fallback.handle_initiated(start, peer, Some(udp()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Connect {
            peer,
            carrier: carrier()
        }]
    );
    assert!(matches!(
        fallback.state(peer),
        Some(PathState::Connecting { .. })
    ));
    // Further retries while it opens change nothing.
    fail_udp(&mut fallback, start, peer);
    assert!(actions(&mut fallback).is_empty());

    fallback.handle_carrier(start, CarrierEvent::Connected(carrier()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::UseCarrier {
            peer,
            carrier: carrier()
        }]
    );
    assert_eq!(fallback.counters().fallbacks, 1);
}

#[test]
fn peers_without_a_fallback_port_never_leave_udp() {
    let start = Instant::now();
    let [accepting, plain] = peer_ids(2)[..] else {
        unreachable!()
    };
    let mut fallback = Fallback::new();
    fallback.configure(accepting, Some(443));
    fail_udp(&mut fallback, start, plain);
    assert!(actions(&mut fallback).is_empty());
    assert_eq!(fallback.state(plain), None);
    // Configured, then taken back.
    fallback.configure(accepting, None);
    fail_udp(&mut fallback, start, accepting);
    assert!(actions(&mut fallback).is_empty());
    assert!(fallback.is_empty());
}

/// Runs the timers up to `until` as a driver would (each at its
/// deadline), returning the actions with their times.
fn run_until(fallback: &mut Fallback, until: Instant) -> Vec<(Instant, FallbackAction)> {
    let mut seen = Vec::new();
    while let Some(deadline) = fallback.poll_timeout().filter(|at| *at <= until) {
        fallback.handle_timeout(deadline);
        seen.extend(
            actions(fallback)
                .into_iter()
                .map(|action| (deadline, action)),
        );
    }
    seen
}

#[test]
fn a_carried_peer_is_probed_over_udp_every_interval() {
    let start = Instant::now();
    let (mut fallback, peer) = carried(start);
    let probe = FallbackAction::ProbeUdp {
        peer,
        udp: udp(),
        carrier: carrier(),
    };
    assert_eq!(
        run_until(&mut fallback, start + PROBE_INTERVAL * 3),
        [1, 2, 3].map(|n| (start + PROBE_INTERVAL * n, probe))
    );
    assert!(fallback.poll_timeout() <= Some(start + PROBE_INTERVAL * 4));
}

#[test]
fn an_answer_over_udp_closes_the_carrier() {
    let start = Instant::now();
    let (mut fallback, peer) = carried(start);
    // Moves between carriers are not UDP: our own carrier, and one the
    // peer opened to us.
    let accepted: SocketAddr = "198.18.0.2:40000".parse().unwrap();
    fallback.handle_carrier(start, CarrierEvent::Accepted(accepted));
    fallback.handle_endpoint(start, peer, accepted);
    fallback.handle_endpoint(start, peer, carrier());
    assert!(actions(&mut fallback).is_empty());
    assert!(matches!(
        fallback.state(peer),
        Some(PathState::Carried { .. })
    ));

    fallback.handle_endpoint(start, peer, udp());
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Disconnect { carrier: carrier() }]
    );
    assert_eq!(fallback.state(peer), Some(PathState::Udp));
    assert_eq!(fallback.counters().returns, 1);
    // No more probes.
    assert!(run_until(&mut fallback, start + PROBE_INTERVAL * 3).is_empty());
    // The carrier closing afterwards is no news.
    fallback.handle_carrier(start, CarrierEvent::Closed(carrier()));
    assert!(actions(&mut fallback).is_empty());
}

#[test]
fn retries_toward_a_carrier_are_not_a_failed_udp_path() {
    let start = Instant::now();
    let peer = peer_ids(1)[0];
    let mut fallback = Fallback::new();
    fallback.configure(peer, Some(443));
    let accepted: SocketAddr = "198.18.0.2:40000".parse().unwrap();
    fallback.handle_carrier(start, CarrierEvent::Accepted(accepted));
    for step in 0..5 {
        let at = start + Duration::from_secs(5) * step;
        fallback.handle_initiated(at, peer, Some(accepted));
        fallback.handle_initiated(at, peer, None);
    }
    assert!(actions(&mut fallback).is_empty());
    // Once that connection closed, its address is an ordinary one again.
    fallback.handle_carrier(start, CarrierEvent::Closed(accepted));
    let later = start + UNANSWERED_BEFORE_FALLBACK * 3;
    fallback.handle_initiated(later, peer, Some(accepted));
    fallback.handle_initiated(later + UNANSWERED_BEFORE_FALLBACK, peer, Some(accepted));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Connect {
            peer,
            carrier: "198.18.0.2:443".parse().unwrap()
        }]
    );
}

#[test]
fn a_carrier_that_fails_or_hangs_gives_udp_back() {
    let start = Instant::now();
    let (mut fallback, peer) = connecting(start);
    fallback.handle_carrier(start, CarrierEvent::Failed(carrier()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::UseUdp { peer, udp: udp() }]
    );
    assert_eq!(fallback.state(peer), Some(PathState::Udp));

    // A connection that never opens is given up after CONNECT_TIMEOUT.
    fail_udp(&mut fallback, start, peer);
    actions(&mut fallback);
    let given_up = start + CONNECT_TIMEOUT;
    assert_eq!(
        run_until(&mut fallback, given_up + PROBE_INTERVAL),
        [
            (given_up, FallbackAction::GiveUp { carrier: carrier() }),
            (given_up, FallbackAction::UseUdp { peer, udp: udp() })
        ]
    );
    assert_eq!(fallback.counters().failed_connects, 2);
    // A late success is refused.
    fallback.handle_carrier(start, CarrierEvent::Connected(carrier()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Disconnect { carrier: carrier() }]
    );
}

#[test]
fn a_carrier_that_served_is_reopened_one_that_closed_at_once_is_not() {
    let start = Instant::now();
    let (mut fallback, peer) = carried(start);
    let later = start + PROBE_INTERVAL;
    fallback.handle_carrier(later, CarrierEvent::Closed(carrier()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Connect {
            peer,
            carrier: carrier()
        }]
    );
    fallback.handle_carrier(later, CarrierEvent::Connected(carrier()));
    actions(&mut fallback);
    fallback.handle_carrier(later, CarrierEvent::Closed(carrier()));
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::UseUdp { peer, udp: udp() }]
    );
    assert_eq!(fallback.state(peer), Some(PathState::Udp));
}

#[test]
fn udp_answering_while_the_carrier_opens_cancels_it() {
    let start = Instant::now();
    let (mut fallback, peer) = connecting(start);
    fallback.handle_endpoint(start, peer, udp());
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Disconnect { carrier: carrier() }]
    );
    assert_eq!(fallback.state(peer), Some(PathState::Udp));
}

#[test]
fn forgetting_a_carried_peer_closes_its_carrier() {
    let start = Instant::now();
    let (mut fallback, peer) = carried(start);
    fallback.forget(peer);
    assert_eq!(
        actions(&mut fallback),
        [FallbackAction::Disconnect { carrier: carrier() }]
    );
    assert!(run_until(&mut fallback, start + PROBE_INTERVAL * 3).is_empty());
}
