//! Handshake floods: spoofed initiations that carry a valid mac1 (anyone
//! who knows Bob's public key can make them) from many addresses. Bob
//! answers them with cookie replies instead of Diffie–Hellman work, his
//! tunnel keeps carrying data, and Alice, restarted in the middle of the
//! flood, is back after one cookie round trip instead of a five-second
//! retransmission timeout.

use std::net::{Ipv4Addr, SocketAddr};

use super::sim::*;
use crate::cookie::{CookieChecker, CookieState, MacLayout};
use crate::timers::{MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::wire::{COOKIE_REPLY_LEN, HANDSHAKE_INITIATION_LEN, initiation};
use crate::{DropReason, Received, Rng, UNDER_LOAD_HANDSHAKES_PER_SECOND};

/// Spoofed initiations to Bob per second: the rate issue 15 was tried at.
const FLOOD_PER_SECOND: u64 = 20_000;

/// An attacker: random initiations with a valid mac1 for Bob, each from
/// a different address of 198.18.128.0/17.
struct Flood {
    rng: SeededRng,
    macs: CookieState,
    sent: u64,
}

impl Flood {
    fn at(pair: &Pair) -> Self {
        let bob_public = private_key(2).public_key();
        assert_eq!(pair.bob.device.public_key(), Some(&bob_public));
        Self {
            rng: SeededRng::new(0xf100d),
            macs: CookieState::new(&bob_public),
            sent: 0,
        }
    }

    /// Sends `count` spoofed initiations to Bob now.
    fn send(&mut self, pair: &mut Pair, count: u64) {
        for _ in 0..count {
            let mut message = [0u8; HANDSHAKE_INITIATION_LEN];
            self.rng.fill_bytes(&mut message[4..initiation::MAC1]);
            message[0] = 1;
            self.macs
                .write_macs(pair.now, &mut message, MacLayout::INITIATION);
            let host = 0x8000 | (self.rng.next_u32() & 0x7fff);
            let source = Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 0)) | host);
            let port = 1024 + (self.rng.next_u32() % 60_000) as u16;
            pair.inject(Bob, SocketAddr::from((source, port)), &message);
            self.sent += 1;
        }
    }

    /// Moves time on by `duration` in steps of `step`, flooding Bob at
    /// [`FLOOD_PER_SECOND`] all along, until `done` holds; returns the
    /// simulated time it took.
    fn advance_until(
        &mut self,
        pair: &mut Pair,
        step: std::time::Duration,
        limit: std::time::Duration,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> Option<std::time::Duration> {
        let per_step = FLOOD_PER_SECOND * step.as_micros() as u64 / 1_000_000;
        pair.advance_until(step, limit, |pair| {
            self.send(pair, per_step);
            done(pair)
        })
    }
}

fn cookie_replies(pair: &Pair) -> u64 {
    pair.bob.device.handshake_counters().cookie_replies
}

fn initiations_computed(pair: &Pair) -> u64 {
    pair.bob.device.handshake_counters().initiations_computed
}

#[test]
fn a_flood_costs_bob_cookie_replies_not_diffie_hellman() {
    let mut pair = Pair::connected();
    pair.latency = millis(1);
    let computed_before = initiations_computed(&pair);
    let mut flood = Flood::at(&pair);

    // Two seconds of flood while Alice keeps talking through the tunnel.
    let delivered_before = pair.bob.delivered.len();
    flood.advance_until(&mut pair, millis(10), secs(2), |pair| {
        pair.send(Alice, b"still here");
        false
    });
    assert_eq!(flood.sent, 2 * FLOOD_PER_SECOND + FLOOD_PER_SECOND / 100);

    // Only the initiations before Bob noticed the load cost him
    // Diffie–Hellman work (and failed: they prove no key); every later
    // one got a cookie reply, sent to its spoofed source.
    let computed = initiations_computed(&pair) - computed_before;
    assert!(
        computed <= u64::from(UNDER_LOAD_HANDSHAKES_PER_SECOND),
        "{computed} initiations computed"
    );
    assert_eq!(computed + cookie_replies(&pair), flood.sent);
    assert_eq!(pair.bob.drops(DropReason::HandshakeFailed), computed);
    assert_eq!(
        pair.bob.drops(DropReason::CookieRequired),
        cookie_replies(&pair)
    );
    assert!(pair.undeliverable as u64 >= cookie_replies(&pair));
    // The tunnel carried every packet meanwhile, without a new handshake.
    assert_eq!(pair.bob.delivered.len() - delivered_before, 201);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
}

#[test]
fn restarted_initiator_is_back_one_cookie_round_trip_into_a_flood() {
    let mut pair = Pair::connected();
    pair.latency = millis(10);
    let mut flood = Flood::at(&pair);
    // Bob is under load before Alice comes back.
    flood.advance_until(&mut pair, millis(10), secs(1), |_| false);
    assert!(cookie_replies(&pair) > 0);

    pair.restart(Alice);
    let initiations_before = pair.sent_by(Alice, Kind::Initiation).len();
    let delivered_before = pair.bob.delivered.len();
    let mut sent = false;
    let took = flood
        .advance_until(&mut pair, millis(10), secs(30), |pair| {
            if !sent {
                pair.send(Alice, b"back again");
                sent = true;
            }
            pair.bob.delivered.len() > delivered_before
        })
        .expect("the tunnel came back");

    // Her first initiation earns a cookie reply (20 ms); she sends it again
    // with mac2 at once, and the response and her staged packet follow
    // (another 20 ms, 10 more to arrive).
    assert!(took <= millis(60), "{took:?}");
    let initiations: Vec<_> = pair.sent_by(Alice, Kind::Initiation)[initiations_before..].to_vec();
    assert_eq!(initiations.len(), 2);
    assert_eq!(&initiations[0].1.bytes[initiation::MAC2..], &[0u8; 16]);
    assert_ne!(&initiations[1].1.bytes[initiation::MAC2..], &[0u8; 16]);
    assert_eq!(initiations[1].0 - initiations[0].0, 2 * pair.latency);
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"back again"[..])
    );
    assert!(pair.alice.has_session());
}

#[test]
fn cookie_replies_add_at_most_one_initiation_per_attempt() {
    // Anyone who knows Bob's public key and sees Alice's initiations can
    // answer them with cookie replies; here every one is answered so, and
    // none reaches Bob.
    let mut pair = Pair::new();
    pair.drop_all(Alice, Kind::Initiation);
    let mut forger = CookieChecker::new(&private_key(2).public_key());
    let mut answered = 0;
    let mut answer_new_initiations = |pair: &mut Pair| {
        let initiations = pair.sent_by(Alice, Kind::Initiation);
        for (_, initiation) in &initiations[answered..] {
            let mut reply = [0u8; COOKIE_REPLY_LEN];
            forger.create_reply(
                pair.now,
                || [7; 32],
                [9; 24],
                &initiation.bytes,
                MacLayout::INITIATION,
                &alice_addr(),
                &mut reply,
            );
            assert_eq!(pair.inject(Alice, bob_addr(), &reply), Received::Control);
        }
        answered = initiations.len();
    };

    pair.send(Alice, b"anyone?");
    answer_new_initiations(&mut pair);
    answer_new_initiations(&mut pair);
    // One initiation, and one more for the first reply; the reply to that
    // one waits for the retransmission timer like any plain WireGuard.
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2);
    pair.advance(REKEY_TIMEOUT - millis(1));
    answer_new_initiations(&mut pair);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2);

    pair.advance(MAX_TIMER_JITTER + millis(1));
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 3);
    answer_new_initiations(&mut pair);
    answer_new_initiations(&mut pair);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 4);
}
