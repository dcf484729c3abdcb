//! Timer stories, run on simulated time: passive and persistent keepalives,
//! rekeying, session expiry, handshake retransmission and abandonment, key
//! erasure, and the new handshake after unanswered data.

use std::time::Duration;

use super::sim::*;
use crate::timers::{
    KEEPALIVE_TIMEOUT, MAX_TIMER_HANDSHAKES, MAX_TIMER_JITTER, REJECT_AFTER_TIME, REKEY_AFTER_TIME,
    REKEY_ATTEMPT_TIME, REKEY_TIMEOUT,
};
use crate::{DropReason, Event, Received, Sent, Timing};

/// Times (since the start) at which `sender` put `kind` on the wire.
fn times(pair: &Pair, sender: Who, kind: Kind) -> Vec<Duration> {
    pair.sent_by(sender, kind)
        .into_iter()
        .map(|(at, _)| at - pair.epoch)
        .collect()
}

fn receiver_index(datagram: &Datagram) -> u32 {
    u32::from_le_bytes(datagram.bytes[4..8].try_into().expect("four bytes"))
}

#[test]
fn keepalive_answers_data_after_ten_seconds_of_silence() {
    let mut pair = Pair::connected();
    pair.advance(secs(30));
    let start = pair.elapsed();
    let before = pair.sent_by(Bob, Kind::Keepalive).len();

    pair.send(Alice, b"anyone there?");
    pair.advance(KEEPALIVE_TIMEOUT - millis(1));
    assert_eq!(pair.sent_by(Bob, Kind::Keepalive).len(), before, "not yet");
    pair.advance(millis(1));
    let keepalives = times(&pair, Bob, Kind::Keepalive);
    assert_eq!(keepalives.len(), before + 1);
    assert_eq!(keepalives.last(), Some(&(start + KEEPALIVE_TIMEOUT)));

    // Nothing more without new data.
    pair.advance(secs(60));
    assert_eq!(pair.sent_by(Bob, Kind::Keepalive).len(), before + 1);
}

#[test]
fn no_keepalive_when_data_went_back() {
    let mut pair = Pair::connected();
    pair.advance(secs(30));
    let before = pair.sent_by(Bob, Kind::Keepalive).len();
    pair.send(Alice, b"question");
    pair.advance(secs(3));
    pair.send(Bob, b"answer");
    pair.advance(secs(30));
    assert_eq!(pair.sent_by(Bob, Kind::Keepalive).len(), before);
}

#[test]
fn persistent_keepalive_is_sent_every_interval() {
    let every = secs(25);
    let mut pair = Pair::with(PairConfig {
        alice: NodeConfig {
            persistent_keepalive: Some(every),
            ..NodeConfig::default()
        },
        ..PairConfig::default()
    });
    pair.connect();
    // (Staying below REKEY_AFTER_TIME: a keepalive past it starts a rekey,
    // whose confirming keepalive would join the list.)
    pair.advance(REKEY_AFTER_TIME - secs(1));

    let keepalives = times(&pair, Alice, Kind::Keepalive);
    // The first answers Bob's "hello alice"; the rest keep the path open.
    assert_eq!(
        keepalives,
        [secs(10), secs(35), secs(60), secs(85), secs(110)]
    );
    assert_eq!(pair.bob.keepalives_received, keepalives.len());
    // Bob, without a persistent keepalive, stays quiet.
    assert!(pair.sent_by(Bob, Kind::Keepalive).is_empty());
}

#[test]
fn persistent_keepalive_can_be_switched_on_at_runtime() {
    let mut pair = Pair::connected();
    pair.advance(secs(60));
    let (now, peer) = (pair.now, pair.bob.peer);
    pair.bob
        .device
        .set_peer_persistent_keepalive(peer, now, Some(secs(10)));
    pair.advance(secs(35));
    let keepalives = times(&pair, Bob, Kind::Keepalive);
    assert_eq!(keepalives, [secs(70), secs(80), secs(90)]);
}

#[test]
fn initiator_rekeys_after_two_minutes_of_sending() {
    let mut pair = Pair::connected();
    let first_index = receiver_index(&pair.last_sent(Alice, Kind::Data));
    // A conversation: one packet each way every ten seconds.
    for second in (10..=150).step_by(10) {
        pair.advance_to(secs(second));
        pair.send(Alice, b"tick");
        pair.send(Bob, b"tock");
    }

    let initiations = times(&pair, Alice, Kind::Initiation);
    assert_eq!(initiations.len(), 2, "{initiations:?}");
    assert_eq!(
        initiations[1], REKEY_AFTER_TIME,
        "at the first send past 120 s"
    );
    assert!(
        pair.sent_by(Bob, Kind::Initiation).is_empty(),
        "a responder never rekeys on time"
    );
    assert_eq!(pair.alice.handshakes_completed(), 2);
    assert_eq!(pair.bob.handshakes_completed(), 2);
    // Nothing was lost across the change of keys.
    assert_eq!(pair.bob.delivered.len(), 1 + 15);
    assert_eq!(pair.alice.delivered.len(), 1 + 15);
    assert_ne!(
        receiver_index(&pair.last_sent(Alice, Kind::Data)),
        first_index
    );
    let status = pair.alice.device.peer_status(pair.alice.peer).unwrap();
    assert_eq!(
        status.stats.last_handshake,
        Some(secs(START_UNIX_SECS) + REKEY_AFTER_TIME)
    );
}

/// Rekeys 250 times as often (every 480 ms), with a packet each way every
/// millisecond and a millisecond of latency: thirty rekeys, and not one
/// packet lost or refused on the way.
#[test]
fn thirty_fast_rekeys_lose_no_packet() {
    let timing = Timing::fast_rekeys(250);
    let mut pair = Pair::with(PairConfig::timing(timing));
    pair.connect();
    pair.latency = millis(1);
    let rounds = timing.rekey_after_time().as_millis() as u32 * 31;
    for n in 0..rounds {
        pair.send(Alice, &n.to_be_bytes());
        pair.send(Bob, &n.to_be_bytes());
        pair.advance(millis(1));
    }
    pair.advance(millis(10));

    let handshakes = pair.alice.handshakes_completed();
    assert!(handshakes > 30, "{handshakes} handshakes");
    for who in [Alice, Bob] {
        let node = pair.node(who);
        let numbers: Vec<u32> = node.delivered_bodies()[1..]
            .iter()
            .map(|body| u32::from_be_bytes((*body).try_into().expect("a number")))
            .collect();
        assert_eq!(numbers, (0..rounds).collect::<Vec<_>>(), "{who:?}");
        assert_eq!(
            node.device.drops().total(),
            0,
            "{who:?}: {:?}",
            node.device.drops()
        );
    }
}

#[test]
fn initiator_that_only_receives_rekeys_before_the_session_expires() {
    let mut pair = Pair::connected();
    // Alice goes quiet; Bob, the responder, speaks late in the session.
    let late = REJECT_AFTER_TIME - KEEPALIVE_TIMEOUT;
    pair.advance_to(late);
    assert!(matches!(pair.send(Bob, b"late"), Sent::Sealed { .. }));
    assert_eq!(
        times(&pair, Alice, Kind::Initiation),
        [Duration::ZERO, late]
    );
    assert_eq!(pair.alice.handshakes_completed(), 2);
    // Bob's next packet travels on the new session, past the old one's end.
    pair.advance_to(REJECT_AFTER_TIME + secs(1));
    assert!(matches!(pair.send(Bob, b"fresh"), Sent::Sealed { .. }));
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&b"fresh"[..]));
}

#[test]
fn sessions_are_refused_after_three_minutes() {
    let mut pair = Pair::connected();
    // One of Bob's packets wanders the network past the session's life.
    pair.set_link(|datagram| {
        if datagram.kind() == Kind::Data {
            Fate::Delay(REJECT_AFTER_TIME)
        } else {
            Fate::Deliver
        }
    });
    pair.send(Bob, b"slow boat");
    pair.clear_link();
    pair.advance(REJECT_AFTER_TIME);
    assert_eq!(
        pair.alice.outcomes.last(),
        Some(&Received::Dropped(DropReason::ExpiredSession))
    );
    assert_eq!(pair.alice.drops(DropReason::ExpiredSession), 1);

    // Alice does not send on the expired session: she stages and rekeys.
    assert_eq!(pair.send(Alice, b"after expiry"), Sent::Staged);
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"after expiry"[..])
    );
    assert_eq!(pair.alice.handshakes_completed(), 2);
}

#[test]
fn lost_responses_mean_retransmissions_every_five_seconds_then_giving_up() {
    let mut pair = Pair::new();
    pair.drop_all(Bob, Kind::Response);
    for n in 0..3u8 {
        assert_eq!(pair.send(Alice, &[n]), Sent::Staged);
    }
    pair.advance(secs(150));

    let initiations = times(&pair, Alice, Kind::Initiation);
    assert_eq!(
        initiations.len(),
        1 + MAX_TIMER_HANDSHAKES as usize,
        "{initiations:?}"
    );
    for gap in initiations.windows(2).map(|pair| pair[1] - pair[0]) {
        assert!(
            gap >= REKEY_TIMEOUT && gap <= REKEY_TIMEOUT + MAX_TIMER_JITTER,
            "{gap:?}"
        );
    }
    // Jitter really varies the gaps.
    let gaps: std::collections::HashSet<Duration> = initiations
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .collect();
    assert!(gaps.len() > 1);

    let abandoned: Vec<Duration> = pair
        .alice
        .events
        .iter()
        .filter(|(_, event)| matches!(event, Event::HandshakeAbandoned { .. }))
        .map(|(at, _)| *at - pair.epoch)
        .collect();
    assert_eq!(abandoned.len(), 1);
    assert!(abandoned[0] >= REKEY_ATTEMPT_TIME, "{abandoned:?}");
    // Each initiation was announced, with where it went.
    let announced: Vec<Duration> = pair
        .alice
        .events
        .iter()
        .filter_map(|(at, event)| match event {
            Event::HandshakeInitiated { endpoint, .. } => {
                assert!(endpoint.is_some());
                Some(*at - pair.epoch)
            }
            _ => None,
        })
        .collect();
    assert_eq!(announced, initiations);
    assert_eq!(pair.alice.drops(DropReason::HandshakeTimedOut), 3);
    assert!(pair.bob.delivered.is_empty());

    // A new packet starts a fresh round of attempts, and it works.
    pair.clear_link();
    assert_eq!(pair.send(Alice, b"again"), Sent::Staged);
    assert_eq!(pair.bob.delivered_bodies(), [b"again"]);
}

#[test]
fn keys_are_erased_after_nine_minutes_without_a_new_session() {
    let mut pair = Pair::connected();
    pair.send(Alice, b"last words");
    let old = pair.last_sent(Alice, Kind::Data);
    let erasure = REJECT_AFTER_TIME * 3;

    pair.advance_to(erasure - millis(1));
    assert!(pair.alice.has_session() && pair.bob.has_session());
    assert!(
        !pair
            .alice
            .saw(|event| matches!(event, Event::KeysErased { .. }))
    );
    pair.advance_to(erasure);
    for node in [&pair.alice, &pair.bob] {
        assert!(!node.has_session());
        let erased: Vec<_> = node
            .events
            .iter()
            .filter(|(_, event)| matches!(event, Event::KeysErased { .. }))
            .collect();
        assert_eq!(erased.len(), 1);
        assert_eq!(erased[0].0 - pair.epoch, erasure);
    }
    // The old session's index is gone with its keys.
    let outcome = pair.inject(Bob, old.from, &old.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::UnknownReceiverIndex));

    // And a new packet simply starts over.
    assert_eq!(pair.send(Alice, b"new start"), Sent::Staged);
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"new start"[..]));
}

#[test]
fn unanswered_data_triggers_a_new_handshake_after_fifteen_seconds() {
    let mut pair = Pair::connected();
    pair.advance(secs(30));
    // Bob falls silent: nothing he sends arrives any more.
    pair.set_link(|datagram| {
        if datagram.sender == Bob {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    let start = pair.elapsed();
    pair.send(Alice, b"hello?");
    pair.advance(secs(2));
    pair.send(Alice, b"hello??");
    pair.advance(secs(15));

    let initiations = times(&pair, Alice, Kind::Initiation);
    assert_eq!(initiations.len(), 2, "{initiations:?}");
    let waited = initiations[1] - start;
    let expected = KEEPALIVE_TIMEOUT + REKEY_TIMEOUT;
    assert!(
        waited >= expected && waited <= expected + MAX_TIMER_JITTER,
        "{waited:?}"
    );
}

#[test]
fn answered_data_needs_no_new_handshake() {
    let mut pair = Pair::connected();
    for _ in 0..10 {
        pair.send(Alice, b"ping");
        pair.advance(secs(4));
    }
    // Bob's keepalives (he has no data of his own) answer Alice's data.
    assert!(!pair.sent_by(Bob, Kind::Keepalive).is_empty());
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
}

#[test]
fn a_zero_persistent_keepalive_interval_means_off() {
    // wg(8): "0 (the default) turns it off". Anything else would fire a
    // keepalive at every instant and never let time move on.
    let mut pair = Pair::with(PairConfig {
        alice: NodeConfig {
            persistent_keepalive: Some(Duration::ZERO),
            ..NodeConfig::default()
        },
        ..PairConfig::default()
    });
    pair.connect();
    pair.advance(secs(60));
    assert_eq!(times(&pair, Alice, Kind::Keepalive), [KEEPALIVE_TIMEOUT]);
    let (now, peer) = (pair.now, pair.bob.peer);
    pair.bob
        .device
        .set_peer_persistent_keepalive(peer, now, Some(Duration::ZERO));
    pair.advance(secs(60));
    assert!(pair.sent_by(Bob, Kind::Keepalive).is_empty());
    let status = pair.alice.device.peer_status(pair.alice.peer).unwrap();
    assert_eq!(status.persistent_keepalive, None);
}
