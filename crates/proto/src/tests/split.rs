//! The data path in two halves, as a multi-threaded driver runs it: the
//! protocol work of a whole batch in order, each middle step detached,
//! then every encryption or decryption in any order (other threads), then
//! the rest in order. The result must be exactly what one packet at a time
//! gives.

use super::sim::*;
use crate::timers::REKEY_TIMEOUT;
use crate::{DropReason, Incoming, Outgoing, Received, Sent};

/// Alice prepares `count` packets, the seals run last-first, and every
/// datagram still opens at Bob, in order.
#[test]
fn seals_run_in_any_order_after_their_preparation() {
    let mut pair = Pair::connected();
    let (alice_ip, bob_ip) = (pair.alice.tunnel_ip, pair.bob.tunnel_ip);
    let now = pair.now;
    let mut prepared = Vec::new();
    for round in 0..8u8 {
        let (mut buf, len) = tun_buffer(&ipv4_packet(alice_ip, bob_ip, &[round; 100]));
        let peer = pair.alice.peer;
        match pair
            .alice
            .device
            .prepare_encapsulate(now, peer, &mut buf, len)
        {
            Outgoing::Ready { len, seal, .. } => prepared.push((buf, len, seal.detach())),
            Outgoing::Done(sent) => panic!("not prepared: {sent:?}"),
        }
    }
    for (buf, _, seal) in prepared.iter_mut().rev() {
        seal.seal(buf).expect("prepared in the same buffer");
    }
    let from = pair.alice.addr;
    for (round, (mut buf, len, _)) in prepared.into_iter().enumerate() {
        buf.truncate(len);
        let outcome = pair.inject(Bob, from, &buf);
        assert!(
            matches!(outcome, Received::Data { .. }),
            "{round}: {outcome:?}"
        );
    }
    let bodies: Vec<u8> = pair.bob.delivered_bodies()[1..]
        .iter()
        .map(|body| body[0])
        .collect();
    assert_eq!(bodies, (0..8).collect::<Vec<u8>>());
}

/// A detached seal holds its own reference to its session's key: a
/// handshake that replaces the session before the seal runs (another
/// thread may be slow) changes nothing about the datagram, which Bob
/// still opens with the session it was sealed for.
#[test]
fn a_detached_seal_keeps_its_key_when_the_session_is_replaced_before_it_runs() {
    let mut pair = Pair::connected();
    pair.advance(REKEY_TIMEOUT + secs(1));
    let (alice_ip, bob_ip) = (pair.alice.tunnel_ip, pair.bob.tunnel_ip);
    let (mut buf, len) = tun_buffer(&ipv4_packet(alice_ip, bob_ip, b"sealed late"));
    let (now, peer) = (pair.now, pair.alice.peer);
    let (len, seal) = match pair
        .alice
        .device
        .prepare_encapsulate(now, peer, &mut buf, len)
    {
        Outgoing::Ready { len, seal, .. } => (len, seal.detach()),
        Outgoing::Done(sent) => panic!("not prepared: {sent:?}"),
    };

    pair.alice.device.initiate_handshake(peer, now);
    pair.run();
    assert_eq!(pair.alice.handshakes_completed(), 2, "no new session");

    seal.seal(&mut buf).expect("prepared in the same buffer");
    buf.truncate(len);
    let from = pair.alice.addr;
    let outcome = pair.inject(Bob, from, &buf);
    assert!(matches!(outcome, Received::Data { .. }), "{outcome:?}");
    assert_eq!(
        pair.bob.delivered_bodies().last().copied(),
        Some(&b"sealed late"[..])
    );
    pair.assert_every_drop_counted();
}

/// Bob takes a batch through the first half, opens it last-first, and
/// finishes it in arrival order: a counter that came twice in the batch is
/// delivered once, a tampered datagram is refused, the rest arrive.
#[test]
fn a_batch_opened_out_of_order_is_finished_like_one_packet_at_a_time() {
    let mut pair = Pair::connected();
    pair.drop_all(Alice, Kind::Data);
    for round in 0..6u8 {
        assert!(matches!(
            pair.send(Alice, &[round; 64]),
            Sent::Sealed { .. }
        ));
    }
    let sent = pair.sent_by(Alice, Kind::Data);
    let mut batch: Vec<Vec<u8>> = sent[sent.len() - 6..]
        .iter()
        .map(|(_, datagram)| datagram.bytes.clone())
        .collect();
    batch.insert(3, batch[1].clone()); // a duplicate inside the batch
    let last = batch.len() - 1;
    batch[last][20] ^= 1; // tampered ciphertext

    let (now, from) = (pair.now, pair.alice.addr);
    let mut pending = Vec::new();
    for datagram in &mut batch {
        match pair.bob.device.prepare_datagram(now, from, datagram) {
            Incoming::Data(data) => pending.push(data.detach()),
            Incoming::Done(received) => panic!("handled whole: {received:?}"),
        }
    }
    for (data, datagram) in pending.iter_mut().zip(&mut batch).rev() {
        data.open(datagram);
    }
    let mut outcomes = Vec::new();
    for (data, datagram) in pending.iter().zip(&batch) {
        outcomes.push(
            pair.bob
                .device
                .finish_datagram(now, from, data.opened(), datagram, &mut []),
        );
    }
    for outcome in &outcomes {
        if let Received::Dropped(reason) = outcome {
            pair.bob.observed_drops.count(*reason);
        }
    }
    let delivered: Vec<u8> = outcomes
        .iter()
        .enumerate()
        .filter_map(|(index, outcome)| match outcome {
            Received::Data { packet, .. } => Some(batch[index][packet.start + 20]),
            _ => None,
        })
        .collect();
    assert_eq!(delivered, [0, 1, 2, 3, 4]);
    assert_eq!(outcomes[3], Received::Dropped(DropReason::ReplayedCounter));
    assert_eq!(
        outcomes[last],
        Received::Dropped(DropReason::AuthenticationFailed)
    );
    assert_eq!(pair.bob.device.drops().get(DropReason::ReplayedCounter), 1);
    assert_eq!(
        pair.bob
            .device
            .drops()
            .get(DropReason::AuthenticationFailed),
        1
    );
}
