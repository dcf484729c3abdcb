//! Handshake stories: first contact, preshared keys, unknown and abusive
//! initiators, and cookies under load.

use super::sim::*;
use crate::timers::{MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::wire::initiation;
use crate::{DeviceConfig, DropReason, Event, PeerConfig, PresharedKey, Received, Sent};

fn completed(initiator: bool) -> impl Fn(&Event) -> bool {
    move |event| matches!(event, Event::HandshakeCompleted { initiator: i, .. } if *i == initiator)
}

#[test]
fn first_packet_triggers_a_handshake_and_is_delivered_after_it() {
    let mut pair = Pair::new();
    assert!(!pair.alice.has_session());

    // Alice's first packet has no session to travel on: it waits while the
    // handshake runs (initiation, response, then the packet itself).
    assert_eq!(pair.send(Alice, b"ping"), Sent::Staged);

    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
    assert_eq!(pair.sent_by(Bob, Kind::Response).len(), 1);
    assert_eq!(pair.bob.delivered_bodies(), [b"ping"]);
    assert!(
        pair.alice.saw(completed(true)),
        "Alice completed as initiator"
    );
    assert!(pair.bob.saw(completed(false)), "Bob completed as responder");

    // Data now flows both ways without further handshakes.
    assert!(matches!(pair.send(Bob, b"pong"), Sent::Sealed { .. }));
    assert!(matches!(pair.send(Alice, b"ping 2"), Sent::Sealed { .. }));
    assert_eq!(pair.alice.delivered_bodies(), [b"pong"]);
    assert_eq!(pair.bob.delivered_bodies(), [&b"ping"[..], b"ping 2"]);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
    assert_eq!(
        (
            pair.alice.handshakes_completed(),
            pair.bob.handshakes_completed()
        ),
        (1, 1)
    );
    assert_eq!(
        pair.alice.device.drops().total() + pair.bob.device.drops().total(),
        0
    );
}

#[test]
fn delivered_packet_is_exactly_what_was_sent_without_padding() {
    let mut pair = Pair::connected();
    let body: Vec<u8> = (0..=200).collect();
    pair.send(Alice, &body);
    let delivered = pair.bob.delivered.last().expect("delivered");
    assert_eq!(
        delivered,
        &ipv4_packet(pair.alice.tunnel_ip, pair.bob.tunnel_ip, &body)
    );
    match pair.bob.outcomes.last() {
        Some(Received::Data {
            source,
            destination,
            ..
        }) => {
            assert_eq!(*source, pair.alice.tunnel_ip);
            assert_eq!(*destination, pair.bob.tunnel_ip);
        }
        other => panic!("expected data, got {other:?}"),
    }
}

#[test]
fn responder_waits_for_confirmation_before_using_a_new_session() {
    let mut pair = Pair::new();
    // Alice's first data packet (her confirmation) is lost.
    pair.drop_all(Alice, Kind::Data);
    pair.send(Alice, b"lost");
    assert!(pair.alice.saw(completed(true)));
    assert!(
        !pair.bob.saw(completed(false)),
        "Bob has no proof Alice holds the keys"
    );

    // Bob has a session in waiting but must not send on it yet.
    assert_eq!(pair.send(Bob, b"held back"), Sent::Staged);
    assert!(pair.sent_by(Bob, Kind::Data).is_empty());

    // Alice's next packet confirms; Bob's staged packet follows at once.
    pair.clear_link();
    pair.send(Alice, b"confirm");
    assert!(pair.bob.saw(completed(false)));
    assert_eq!(pair.bob.delivered_bodies(), [b"confirm"]);
    assert_eq!(pair.alice.delivered_bodies(), [b"held back"]);
}

#[test]
fn initiator_confirms_with_a_keepalive_when_nothing_is_staged() {
    let mut pair = Pair::new();
    pair.alice
        .device
        .initiate_handshake(pair.alice.peer, pair.now);
    pair.run();
    assert_eq!(pair.sent_by(Alice, Kind::Keepalive).len(), 1);
    assert_eq!(pair.bob.keepalives_received, 1);
    assert!(pair.bob.saw(completed(false)));
    assert!(matches!(pair.send(Bob, b"now I may"), Sent::Sealed { .. }));
    assert_eq!(pair.alice.delivered_bodies(), [b"now I may"]);
}

#[test]
fn matching_preshared_keys_complete_the_handshake() {
    let psk = PresharedKey::from_bytes([0x42; 32]);
    let mut pair = Pair::with(PairConfig {
        alice: NodeConfig {
            preshared_key: psk.clone(),
            ..NodeConfig::default()
        },
        bob: NodeConfig {
            preshared_key: psk,
            ..NodeConfig::default()
        },
    });
    pair.connect();
    assert_eq!(pair.bob.delivered_bodies(), [b"hello bob"]);
    assert_eq!(pair.alice.delivered_bodies(), [b"hello alice"]);
    assert!(
        pair.alice
            .device
            .peer_status(pair.alice.peer)
            .unwrap()
            .has_preshared_key
    );
}

#[test]
fn mismatched_preshared_keys_never_produce_a_session() {
    let mut pair = Pair::with(PairConfig {
        alice: NodeConfig {
            preshared_key: PresharedKey::from_bytes([1; 32]),
            ..NodeConfig::default()
        },
        bob: NodeConfig {
            preshared_key: PresharedKey::from_bytes([2; 32]),
            ..NodeConfig::default()
        },
    });
    pair.send(Alice, b"secret");
    pair.send(Bob, b"secret too");
    pair.advance(secs(120));

    // Bob answers every retry (the preshared key only enters with the
    // response), but Alice can open none of his responses, so no data ever
    // flows. (Bob's own packet waits: his responses hold back his own
    // initiations, as in wireguard-go.)
    let responses = pair.sent_by(Bob, Kind::Response).len() as u64;
    assert!(responses > 1);
    assert_eq!(pair.alice.drops(DropReason::HandshakeFailed), responses);
    assert!(!pair.alice.has_session());
    assert_eq!(
        pair.alice.handshakes_completed() + pair.bob.handshakes_completed(),
        0
    );
    assert!(pair.alice.delivered.is_empty() && pair.bob.delivered.is_empty());
    assert!(pair.sent_by(Alice, Kind::Data).is_empty());
    assert!(pair.sent_by(Bob, Kind::Data).is_empty());
}

#[test]
fn initiation_from_an_unknown_peer_is_dropped() {
    let mut pair = Pair::new();
    // Carol knows Bob's public key, but Bob has never heard of Carol.
    let mut carol = crate::Device::new(
        DeviceConfig {
            private_key: Some(private_key(3)),
            mtu: MTU,
        },
        Box::new(SeededRng::new(3)),
        crate::WallClock {
            base: pair.now,
            base_since_epoch: secs(START_UNIX_SECS),
        },
    );
    let bob_id = carol
        .add_peer(PeerConfig {
            public_key: *pair.bob.device.public_key().expect("bob has a key"),
            preshared_key: PresharedKey::zero(),
            endpoint: Some(bob_addr()),
            persistent_keepalive: None,
        })
        .unwrap();
    carol.initiate_handshake(bob_id, pair.now);
    let mut buf = [0u8; 256];
    let transmit = carol.poll_transmit(&mut buf).expect("initiation");

    let carol_addr = "203.0.113.3:51820".parse().unwrap();
    let outcome = pair.inject(Bob, carol_addr, &buf[..transmit.len]);
    assert_eq!(outcome, Received::Dropped(DropReason::UnknownPeer));
    assert_eq!(pair.bob.drops(DropReason::UnknownPeer), 1);
    assert!(
        pair.sent_by(Bob, Kind::Response).is_empty(),
        "no answer to strangers"
    );
}

/// A mesh that moves a peer to another path (a relay, a punched hole)
/// initiates toward it at once, and two such moves can come within the
/// responder's minimum gap between initiations (and within one
/// whitened timestamp step): a second, new initiation would be refused
/// there, and its answer to the first dropped here as unexpected, both
/// sides without a session until the retry 5 s later. The second move
/// sends the first initiation again instead.
#[test]
fn initiating_toward_a_peer_twice_at_once_still_makes_a_session() {
    let mut pair = Pair::new();
    let (now, bob) = (pair.now, pair.alice.peer);
    pair.alice.device.initiate_toward(bob, now, &[bob_addr()]);
    pair.alice.device.initiate_toward(bob, now, &[bob_addr()]);
    pair.advance(millis(1));

    let initiations = pair.sent_by(Alice, Kind::Initiation);
    assert_eq!(initiations.len(), 2);
    assert_eq!(
        initiations[0].1.bytes, initiations[1].1.bytes,
        "one initiation, twice"
    );
    assert_eq!(pair.bob.drops(DropReason::InitiationFlood), 0);
    assert_eq!(pair.alice.drops(DropReason::UnexpectedHandshakeMessage), 0);
    assert!(pair.alice.saw(completed(true)), "Alice has a session");
    pair.send(Alice, b"at once");
    assert_eq!(pair.bob.delivered_bodies(), [&b"at once"[..]]);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2, "no retry");
}

/// Past that gap a move starts a new handshake, and its timestamp is
/// later than the first's even within one whitening step.
#[test]
fn initiating_toward_a_peer_again_later_starts_a_new_handshake() {
    let mut pair = Pair::new();
    let bob = pair.alice.peer;
    let now = pair.now;
    pair.alice.device.initiate_toward(bob, now, &[bob_addr()]);
    pair.advance(millis(25));
    let now = pair.now;
    pair.alice.device.initiate_toward(bob, now, &[bob_addr()]);
    pair.advance(millis(1));

    let initiations = pair.sent_by(Alice, Kind::Initiation);
    assert_eq!(initiations.len(), 2);
    assert_ne!(initiations[0].1.bytes, initiations[1].1.bytes);
    assert_eq!(pair.bob.drops(DropReason::ReplayedInitiation), 0);
    assert_eq!(pair.bob.drops(DropReason::InitiationFlood), 0);
    assert_eq!(pair.sent_by(Bob, Kind::Response).len(), 2);
    pair.send(Alice, b"after both");
    assert_eq!(pair.bob.delivered_bodies(), [&b"after both"[..]]);
}

#[test]
fn replayed_initiation_is_dropped() {
    let mut pair = Pair::connected();
    let initiation = pair.last_sent(Alice, Kind::Initiation);
    pair.advance(secs(1));
    let outcome = pair.inject(Bob, initiation.from, &initiation.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::ReplayedInitiation));
    assert_eq!(
        pair.sent_by(Bob, Kind::Response).len(),
        1,
        "the replay got no response"
    );
    // The session is untouched.
    pair.send(Alice, b"still here");
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"still here"[..])
    );
}

#[test]
fn initiations_faster_than_the_allowed_rate_are_a_flood() {
    let mut pair = Pair::new();
    // Alice's initiation and her retransmission 5 s later never arrive...
    pair.drop_all(Alice, Kind::Initiation);
    pair.send(Alice, b"x");
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
    let held = pair.sent_by(Alice, Kind::Initiation);
    assert_eq!(held.len(), 2);

    // ...until both turn up at once: the second, though newer, is refused.
    let first = pair.inject(Bob, alice_addr(), &held[0].1.bytes);
    assert_eq!(first, Received::Control);
    let second = pair.inject(Bob, alice_addr(), &held[1].1.bytes);
    assert_eq!(second, Received::Dropped(DropReason::InitiationFlood));
    assert_eq!(pair.bob.drops(DropReason::InitiationFlood), 1);
}

#[test]
fn wrong_mac1_is_dropped_before_any_key_work() {
    let mut pair = Pair::new();
    pair.drop_all(Alice, Kind::Initiation);
    pair.send(Alice, b"x");
    let mut initiation = pair.last_sent(Alice, Kind::Initiation);
    initiation.bytes[initiation::MAC1] ^= 1;
    let outcome = pair.inject(Bob, alice_addr(), &initiation.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::InvalidMac1));
    // mac1 covers every byte before it: any change breaks it.
    let mut altered = pair.last_sent(Alice, Kind::Initiation);
    altered.bytes[initiation::EPHEMERAL] ^= 1;
    let outcome = pair.inject(Bob, alice_addr(), &altered.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::InvalidMac1));
    assert_eq!(pair.bob.drops(DropReason::InvalidMac1), 2);
    assert!(pair.sent_by(Bob, Kind::Response).is_empty());
}

#[test]
fn under_load_a_cookie_round_trip_precedes_the_handshake() {
    let mut pair = Pair::new();
    pair.latency = millis(10);
    pair.bob.device.force_under_load(true);

    // The first initiation carries no mac2: Bob answers with a cookie.
    assert_eq!(pair.send(Alice, b"let me in"), Sent::Staged);
    let first = pair.last_sent(Alice, Kind::Initiation);
    assert_eq!(&first.bytes[initiation::MAC2..], &[0u8; 16]);
    pair.advance(millis(20));
    assert_eq!(pair.bob.drops(DropReason::CookieRequired), 1);
    assert_eq!(pair.sent_by(Bob, Kind::CookieReply).len(), 1);
    assert!(!pair.alice.has_session());
    assert!(pair.sent_by(Bob, Kind::Response).is_empty());

    // Alice stores the cookie and sends the initiation again at once, now
    // with mac2, instead of waiting for her retransmission timer; the
    // handshake completes and her packet follows.
    pair.advance(millis(30));
    let initiations = pair.sent_by(Alice, Kind::Initiation);
    assert_eq!(initiations.len(), 2);
    assert_eq!(initiations[1].0 - initiations[0].0, 2 * pair.latency);
    assert_ne!(&initiations[1].1.bytes[initiation::MAC2..], &[0u8; 16]);
    assert_eq!(pair.sent_by(Bob, Kind::Response).len(), 1);
    assert_eq!(pair.bob.delivered_bodies(), [b"let me in"]);
    assert_eq!(pair.bob.drops(DropReason::CookieRequired), 1);
    let counters = pair.bob.device.handshake_counters();
    assert_eq!(
        (counters.cookie_replies, counters.initiations_computed),
        (1, 1)
    );

    // No retransmission follows the completed handshake.
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2);
}

#[test]
fn cookie_reply_for_nothing_in_flight_is_unexpected() {
    let mut pair = Pair::new();
    pair.bob.device.force_under_load(true);
    pair.send(Alice, b"x");
    let reply = pair.last_sent(Bob, Kind::CookieReply);
    pair.bob.device.force_under_load(false);
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
    assert!(pair.alice.has_session());
    // The initiation it answered is gone, and with it its index.
    let outcome = pair.inject(Alice, bob_addr(), &reply.bytes);
    assert_eq!(
        outcome,
        Received::Dropped(DropReason::UnexpectedHandshakeMessage)
    );
}

#[test]
fn retransmitted_initiation_after_a_lost_response_completes() {
    let mut pair = Pair::new();
    let mut lost = false;
    pair.set_link(move |datagram| {
        if datagram.kind() == Kind::Response && !lost {
            lost = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    pair.send(Alice, b"patience");
    assert!(pair.bob.delivered.is_empty());
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2);
    assert_eq!(pair.bob.delivered_bodies(), [b"patience"]);
    assert!(pair.bob.saw(completed(false)));
}

#[test]
fn a_past_burst_of_handshakes_does_not_keep_demanding_cookies() {
    let mut pair = Pair::connected();
    let initiation = pair.last_sent(Alice, Kind::Initiation);
    // A burst: the same (valid mac1) initiation replayed far above the
    // under-load threshold within one second.
    for _ in 0..=crate::UNDER_LOAD_HANDSHAKES_PER_SECOND + 10 {
        pair.inject(Bob, alice_addr(), &initiation.bytes);
    }
    assert!(
        pair.bob.drops(DropReason::CookieRequired) > 0,
        "the burst was noticed"
    );
    let cookies_during_burst = pair.bob.drops(DropReason::CookieRequired);

    // An hour later, load is long gone: Alice's next handshake (her keys
    // were erased meanwhile) must not need a cookie round trip.
    pair.advance(secs(3600));
    assert!(!pair.alice.has_session());
    assert_eq!(pair.send(Alice, b"quiet times"), Sent::Staged);
    assert_eq!(
        pair.bob.drops(DropReason::CookieRequired),
        cookies_during_burst
    );
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"quiet times"[..])
    );
}
