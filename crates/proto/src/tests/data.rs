//! Transport data on a hostile network: tampering, replays, reordering,
//! loss of the replay window, and datagrams that are not WireGuard at all.
//! Every refusal must be an outcome and a counter, never a panic.

use super::sim::*;
use crate::replay::REPLAY_WINDOW_SIZE;
use crate::wire::{
    COOKIE_REPLY_LEN, HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, TRANSPORT_MIN_LEN,
};
use crate::{DropReason, Received, Sent};

#[test]
fn tampered_data_fails_authentication_and_is_not_delivered() {
    let mut pair = Pair::connected();
    let mut flips = 0;
    // Flip one bit in the ciphertext or tag of everything Alice sends.
    pair.set_link(move |datagram| {
        if datagram.kind() == Kind::Data {
            let at = 16 + flips % (datagram.bytes.len() - 16);
            datagram.bytes[at] ^= 0x04;
            flips += 7;
        }
        Fate::Deliver
    });
    for round in 0..10u8 {
        pair.send(Alice, &[round; 40]);
    }
    assert_eq!(pair.bob.delivered_bodies(), [b"hello bob"]);
    assert_eq!(pair.bob.drops(DropReason::AuthenticationFailed), 10);

    // Refused packets leave the session intact: honest traffic flows.
    pair.clear_link();
    pair.send(Alice, b"untouched");
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"untouched"[..]));
}

#[test]
fn replayed_data_is_dropped() {
    let mut pair = Pair::connected();
    pair.send(Alice, b"once");
    let datagram = pair.last_sent(Alice, Kind::Data);
    for _ in 0..3 {
        let outcome = pair.inject(Bob, datagram.from, &datagram.bytes);
        assert_eq!(outcome, Received::Dropped(DropReason::ReplayedCounter));
    }
    assert_eq!(pair.bob.delivered_bodies(), [&b"hello bob"[..], b"once"]);
    assert_eq!(pair.bob.drops(DropReason::ReplayedCounter), 3);
}

#[test]
fn duplicated_datagrams_are_delivered_once() {
    let mut pair = Pair::connected();
    pair.set_link(|_| Fate::Duplicate);
    for round in 0..5u8 {
        pair.send(Alice, &[round]);
    }
    assert_eq!(pair.bob.delivered.len(), 6);
    assert_eq!(pair.bob.drops(DropReason::ReplayedCounter), 5);
}

#[test]
fn reordering_within_the_window_delivers_everything() {
    let mut pair = Pair::connected();
    // Every even-numbered packet takes a slower path.
    let mut nth = 0;
    pair.set_link(move |datagram| {
        nth += 1;
        if datagram.kind() == Kind::Data && nth % 2 == 0 {
            Fate::Delay(millis(50))
        } else {
            Fate::Deliver
        }
    });
    for round in 0..20u8 {
        pair.send(Alice, &[round]);
    }
    pair.advance(millis(100));
    let mut bodies: Vec<u8> = pair.bob.delivered_bodies()[1..]
        .iter()
        .map(|body| body[0])
        .collect();
    assert_ne!(bodies, (0..20).collect::<Vec<u8>>(), "the link did reorder");
    bodies.sort_unstable();
    assert_eq!(bodies, (0..20).collect::<Vec<u8>>());
    assert_eq!(pair.bob.device.drops().total(), 0);
}

#[test]
fn data_older_than_the_replay_window_is_dropped() {
    let mut pair = Pair::connected();
    pair.send(Alice, b"straggler");
    let straggler = pair.last_sent(Alice, Kind::Data);
    // The straggler was lost in transit; later traffic moves the window on.
    for _ in 0..REPLAY_WINDOW_SIZE + 1 {
        pair.send(Alice, b"");
    }
    let outcome = pair.inject(Bob, straggler.from, &straggler.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::CounterTooOld));
    assert_eq!(pair.bob.drops(DropReason::CounterTooOld), 1);
}

#[test]
fn a_datagram_just_inside_the_window_is_still_delivered() {
    let mut pair = Pair::connected();
    pair.drop_all(Alice, Kind::Data);
    pair.send(Alice, b"late but welcome");
    let late = pair.last_sent(Alice, Kind::Data);
    pair.clear_link();
    for _ in 0..REPLAY_WINDOW_SIZE - 1 {
        pair.send(Alice, b"");
    }
    let outcome = pair.inject(Bob, late.from, &late.bytes);
    assert!(matches!(outcome, Received::Data { .. }), "{outcome:?}");
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"late but welcome"[..])
    );
}

#[test]
fn truncated_datagrams_of_every_type_are_malformed() {
    let mut pair = Pair::connected();
    pair.send(Alice, b"a real one");
    let samples = [
        pair.last_sent(Alice, Kind::Initiation).bytes,
        pair.last_sent(Bob, Kind::Response).bytes,
        {
            let mut cookie_reply = vec![0u8; COOKIE_REPLY_LEN];
            cookie_reply[0] = 3;
            cookie_reply
        },
        pair.last_sent(Alice, Kind::Data).bytes,
    ];
    let mut expected = 0;
    for sample in &samples {
        let shortest_valid = match sample[0] {
            1 => HANDSHAKE_INITIATION_LEN,
            2 => HANDSHAKE_RESPONSE_LEN,
            3 => COOKIE_REPLY_LEN,
            _ => TRANSPORT_MIN_LEN,
        };
        for len in 0..shortest_valid {
            let outcome = pair.inject(Bob, alice_addr(), &sample[..len]);
            assert_eq!(
                outcome,
                Received::Dropped(DropReason::MalformedMessage),
                "type {} cut to {len}",
                sample[0]
            );
            expected += 1;
        }
    }
    // Handshake messages have one exact length: longer is malformed too.
    for sample in &samples[..3] {
        let mut longer = sample.clone();
        longer.push(0);
        let outcome = pair.inject(Bob, alice_addr(), &longer);
        assert_eq!(outcome, Received::Dropped(DropReason::MalformedMessage));
        expected += 1;
    }
    assert_eq!(pair.bob.drops(DropReason::MalformedMessage), expected);
    assert!(pair.bob.endpoint() == Some(alice_addr()));
}

#[test]
fn unknown_message_types_are_dropped() {
    let mut pair = Pair::connected();
    // 0x104 is fjord's AES-256-GCM data (crate::wire); 0x204 is nothing.
    let types: [u32; 6] = [0, 5, 0xff, 0x0204, 0x0100_0001, u32::MAX];
    for message_type in types {
        let mut datagram = vec![0u8; 148];
        datagram[..4].copy_from_slice(&message_type.to_le_bytes());
        let outcome = pair.inject(Bob, alice_addr(), &datagram);
        assert_eq!(
            outcome,
            Received::Dropped(DropReason::UnknownMessageType),
            "type {message_type:#x}"
        );
    }
    assert_eq!(
        pair.bob.drops(DropReason::UnknownMessageType),
        types.len() as u64
    );
}

#[test]
fn data_for_an_unknown_receiver_index_is_dropped() {
    let mut pair = Pair::connected();
    pair.send(Alice, b"x");
    let mut datagram = pair.last_sent(Alice, Kind::Data).bytes;
    datagram[4..8].copy_from_slice(&0xdead_beef_u32.to_le_bytes());
    let outcome = pair.inject(Bob, alice_addr(), &datagram);
    assert_eq!(outcome, Received::Dropped(DropReason::UnknownReceiverIndex));
}

#[test]
fn authenticated_garbage_inside_the_tunnel_is_not_delivered() {
    let mut pair = Pair::connected();
    // Alice's TUN hands over something that is not IP; it is sealed as is
    // and Bob refuses it after decryption.
    assert!(matches!(
        pair.send_packet(Alice, &[0x00; 30]),
        Sent::Sealed { .. }
    ));
    assert_eq!(
        pair.bob.outcomes.last(),
        Some(&Received::Dropped(DropReason::InvalidInnerPacket))
    );
    // An IPv4 header claiming more bytes than were sent is refused too.
    let mut liar = ipv4_packet(pair.alice.tunnel_ip, pair.bob.tunnel_ip, b"short");
    liar[2..4].copy_from_slice(&1000u16.to_be_bytes());
    pair.send_packet(Alice, &liar);
    assert_eq!(pair.bob.drops(DropReason::InvalidInnerPacket), 2);
    assert_eq!(pair.bob.delivered.len(), 1);
}

#[test]
fn stray_handshake_messages_are_unexpected() {
    let mut pair = Pair::connected();
    // A response arriving again after the handshake finished.
    let response = pair.last_sent(Bob, Kind::Response);
    let outcome = pair.inject(Alice, bob_addr(), &response.bytes);
    assert_eq!(
        outcome,
        Received::Dropped(DropReason::UnexpectedHandshakeMessage)
    );
}

#[test]
fn a_buffer_too_small_for_the_tag_is_refused() {
    let mut pair = Pair::connected();
    let packet = ipv4_packet(pair.alice.tunnel_ip, pair.bob.tunnel_ip, b"no room");
    let mut buf = vec![0u8; crate::DATA_HEADROOM + packet.len()];
    buf[crate::DATA_HEADROOM..].copy_from_slice(&packet);
    let (now, peer) = (pair.now, pair.alice.peer);
    let sent = pair
        .alice
        .device
        .encapsulate(now, peer, &mut buf, packet.len());
    assert_eq!(sent, Sent::Dropped(DropReason::BufferTooSmall));
    assert_eq!(pair.alice.drops(DropReason::BufferTooSmall), 1);
}

#[test]
fn an_impossible_payload_length_is_refused_not_a_panic() {
    for connected in [false, true] {
        let mut pair = if connected {
            Pair::connected()
        } else {
            Pair::new()
        };
        let (now, peer) = (pair.now, pair.alice.peer);
        let mut buf = vec![0u8; 64];
        for payload_len in [65, usize::MAX - 15, usize::MAX] {
            let sent = pair
                .alice
                .device
                .encapsulate(now, peer, &mut buf, payload_len);
            assert_eq!(
                sent,
                Sent::Dropped(DropReason::BufferTooSmall),
                "{payload_len}"
            );
        }
    }
}

#[test]
fn staging_keeps_the_newest_packets_while_the_handshake_waits() {
    let mut pair = Pair::new();
    pair.drop_all(Alice, Kind::Initiation);
    let total = crate::MAX_STAGED_PACKETS + 2;
    for n in 0..total {
        let body = (n as u16).to_be_bytes();
        assert_eq!(pair.send(Alice, &body), Sent::Staged);
    }
    assert_eq!(pair.alice.drops(DropReason::StagingQueueFull), 2);

    // The retransmitted initiation gets through; the staged packets follow
    // in order, the two oldest gone.
    pair.clear_link();
    pair.advance(crate::timers::REKEY_TIMEOUT + crate::timers::MAX_TIMER_JITTER);
    let received: Vec<u16> = pair
        .bob
        .delivered_bodies()
        .iter()
        .map(|body| u16::from_be_bytes([body[0], body[1]]))
        .collect();
    assert_eq!(received, (2..total as u16).collect::<Vec<_>>());
}

#[test]
fn a_network_that_duplicates_everything_still_converges() {
    let mut pair = Pair::new();
    pair.set_link(|_| Fate::Duplicate);
    pair.connect();
    for round in 0..5u8 {
        pair.send(Alice, &[round]);
        pair.send(Bob, &[round]);
    }
    assert_eq!(pair.bob.delivered.len(), 6);
    assert_eq!(pair.alice.delivered.len(), 6);
    assert_eq!(
        (
            pair.alice.handshakes_completed(),
            pair.bob.handshakes_completed()
        ),
        (1, 1)
    );
    assert_eq!(pair.bob.drops(DropReason::ReplayedInitiation), 1);
    assert_eq!(pair.alice.drops(DropReason::UnexpectedHandshakeMessage), 1);
}

#[test]
fn a_lossy_reordering_network_never_wedges_the_tunnel() {
    let mut pair = Pair::new();
    pair.latency = millis(20);
    // A deterministic bad link: 30% loss, 10% duplicated, 20% delayed.
    let mut dice = SeededRng::new(7);
    pair.set_link(move |_| {
        let roll = crate::Rng::next_u32(&mut dice) % 100;
        match roll {
            0..30 => Fate::Drop,
            30..40 => Fate::Duplicate,
            40..60 => Fate::Delay(millis(u64::from(roll) * 3)),
            _ => Fate::Deliver,
        }
    });
    // Ten simulated minutes of chatter both ways, twice a second.
    for tick in 0..1200u32 {
        let body = tick.to_be_bytes();
        pair.send(Alice, &body);
        pair.send(Bob, &body);
        pair.advance(millis(500));
    }
    assert!(
        pair.bob.delivered.len() > 600,
        "{}",
        pair.bob.delivered.len()
    );
    assert!(
        pair.alice.delivered.len() > 600,
        "{}",
        pair.alice.delivered.len()
    );
    assert!(
        pair.alice.handshakes_completed() >= 5,
        "rekeyed along the way"
    );

    // Once the link heals, traffic flows again within a handshake's time.
    pair.clear_link();
    let (bob_before, alice_before) = (pair.bob.delivered.len(), pair.alice.delivered.len());
    let took = pair.advance_until(millis(500), secs(30), |pair| {
        pair.send(Alice, b"healed?");
        pair.send(Bob, b"healed!");
        pair.bob.delivered.len() > bob_before && pair.alice.delivered.len() > alice_before
    });
    assert!(took.is_some_and(|took| took <= secs(1)), "{took:?}");
}
