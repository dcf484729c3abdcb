//! Handshake floods: spoofed initiations that carry a valid mac1 (anyone
//! who knows Bob's public key can make them) from many addresses. Bob
//! answers them with cookie replies instead of Diffie–Hellman work, up to
//! his reply budget, his tunnel keeps carrying data, and Alice, restarted
//! in the middle of the flood, is back after one cookie round trip instead
//! of a five-second retransmission timeout, however fast the flood.

use std::net::{Ipv4Addr, SocketAddr};

use super::sim::*;
use crate::cookie::{Answering, CookieChecker, CookieState, MacLayout};
use crate::timers::{MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::wire::{COOKIE_REPLY_LEN, HANDSHAKE_INITIATION_LEN, initiation};
use crate::{
    COOKIE_REPLIES_PER_SECOND, DropReason, Received, Rng, UNDER_LOAD_HANDSHAKES_PER_SECOND,
};

/// Spoofed initiations to Bob per second: the rate issue 15 was tried at.
const FLOOD_PER_SECOND: u64 = 20_000;
/// What an unpaced generator sends in the lab (100,000–300,000 a second).
const UNPACED_PER_SECOND: u64 = 300_000;

/// An attacker: random initiations with a valid mac1 for Bob, each from
/// a different address of 198.18.128.0/17.
struct Flood {
    rng: SeededRng,
    macs: CookieState,
    sent: u64,
    per_second: u64,
}

impl Flood {
    /// A flood of [`FLOOD_PER_SECOND`] initiations a second at Bob.
    fn at(pair: &Pair) -> Self {
        Self::at_rate(pair, FLOOD_PER_SECOND)
    }

    fn at_rate(pair: &Pair, per_second: u64) -> Self {
        let bob_public = private_key(2).public_key();
        assert_eq!(pair.bob.device.public_key(), Some(&bob_public));
        Self {
            rng: SeededRng::new(0xf100d),
            macs: CookieState::new(&bob_public),
            sent: 0,
            per_second,
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
    /// the flood's rate all along, until `done` holds; returns the
    /// simulated time it took.
    fn advance_until(
        &mut self,
        pair: &mut Pair,
        step: std::time::Duration,
        limit: std::time::Duration,
        mut done: impl FnMut(&mut Pair) -> bool,
    ) -> Option<std::time::Duration> {
        let per_step = self.per_second * step.as_micros() as u64 / 1_000_000;
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

fn cookie_replies_withheld(pair: &Pair) -> u64 {
    pair.bob.device.handshake_counters().cookie_replies_withheld
}

/// The most cookie replies Bob may send to spoofed sources during a
/// flood of `duration`: his budget for that time, and its burst.
fn reply_budget(duration: std::time::Duration) -> u64 {
    let per_second = u64::from(COOKIE_REPLIES_PER_SECOND);
    per_second * duration.as_millis() as u64 / 1_000 + per_second / 10 + 1
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
    // one needed a cookie: a reply went to its spoofed source while the
    // reply budget lasted, the others got none.
    let computed = initiations_computed(&pair) - computed_before;
    assert!(
        computed <= u64::from(UNDER_LOAD_HANDSHAKES_PER_SECOND),
        "{computed} initiations computed"
    );
    assert_eq!(
        computed + cookie_replies(&pair) + cookie_replies_withheld(&pair),
        flood.sent
    );
    assert!(cookie_replies(&pair) <= reply_budget(secs(2) + millis(10)));
    assert!(cookie_replies(&pair) >= 2 * u64::from(COOKIE_REPLIES_PER_SECOND));
    assert_eq!(pair.bob.drops(DropReason::HandshakeFailed), computed);
    assert_eq!(
        pair.bob.drops(DropReason::CookieRequired),
        cookie_replies(&pair) + cookie_replies_withheld(&pair)
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

/// An unpaced flood spends Bob's reply budget as fast as it refills;
/// Alice, restarted, reaches Bob right behind a burst of it from the
/// address Bob knows her by, still gets her cookie reply, and is back as
/// fast as at a paced flood, while the spoofed sources get no more
/// replies than the budget.
#[test]
fn restarted_initiator_is_back_as_fast_during_an_unpaced_flood() {
    let mut pair = Pair::connected();
    pair.latency = millis(10);
    let mut flood = Flood::at_rate(&pair, UNPACED_PER_SECOND);
    flood.advance_until(&mut pair, millis(10), millis(500), |_| false);
    assert!(cookie_replies(&pair) <= reply_budget(millis(510)));
    assert!(
        cookie_replies_withheld(&pair) > 0,
        "the flood spent the budget"
    );

    pair.restart(Alice);
    pair.drop_all(Alice, Kind::Initiation);
    pair.send(Alice, b"back again");
    let initiation = pair.last_sent(Alice, Kind::Initiation);
    pair.clear_link();
    flood.send(&mut pair, 3_000);
    let replies_before = cookie_replies(&pair);
    flood.send(&mut pair, 1);
    assert_eq!(cookie_replies(&pair), replies_before, "the budget is spent");
    assert_eq!(
        pair.inject(Bob, alice_addr(), &initiation.bytes),
        Received::Dropped(DropReason::CookieRequired)
    );
    assert_eq!(cookie_replies(&pair), replies_before + 1);
    let reply = pair.last_sent(Bob, Kind::CookieReply);
    assert_eq!(reply.to, alice_addr());

    let delivered_before = pair.bob.delivered.len();
    let took = flood
        .advance_until(&mut pair, millis(10), secs(30), |pair| {
            pair.bob.delivered.len() > delivered_before
        })
        .expect("the tunnel came back");
    // The reply's way back, Alice's initiation with mac2, the response
    // and her staged packet: 40 ms.
    assert!(took <= millis(40), "{took:?}");
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"back again"[..])
    );
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
                Answering {
                    message: &initiation.bytes,
                    layout: MacLayout::INITIATION,
                    source: &alice_addr(),
                },
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
