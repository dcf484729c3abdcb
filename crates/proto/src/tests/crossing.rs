//! Both sides initiating at once: the crossing handshakes settle on one
//! session to send on, and nothing in flight is lost, then or at the
//! rekeys after.

use std::time::Duration;

use super::sim::*;
use crate::context::Rng;
use crate::timers::{MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::{Sent, Timing};

#[test]
fn both_sides_initiating_at_once_converge() {
    let mut pair = Pair::new();
    pair.latency = millis(10);
    // Both start a handshake before either initiation arrives.
    assert_eq!(pair.send(Alice, b"from alice"), Sent::Staged);
    assert_eq!(pair.send(Bob, b"from bob"), Sent::Staged);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
    assert_eq!(pair.sent_by(Bob, Kind::Initiation).len(), 1);
    pair.advance(secs(1));

    assert_eq!(pair.bob.delivered_bodies(), [b"from alice"]);
    assert_eq!(pair.alice.delivered_bodies(), [b"from bob"]);
    // Both keep working in both directions, without more handshakes.
    for round in 0..5u8 {
        pair.send(Alice, &[round]);
        pair.send(Bob, &[round]);
        pair.advance(secs(1));
    }
    assert_eq!(pair.bob.delivered.len(), 6);
    assert_eq!(pair.alice.delivered.len(), 6);
    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 1);
    assert_eq!(pair.sent_by(Bob, Kind::Initiation).len(), 1);
    assert_eq!(
        pair.alice.device.drops().total() + pair.bob.device.drops().total(),
        0
    );
}

/// Sends one numbered packet each way every millisecond for `count`
/// milliseconds.
fn converse(pair: &mut Pair, first: u32, count: u32) {
    for n in first..first + count {
        pair.send(Alice, &n.to_be_bytes());
        pair.send(Bob, &n.to_be_bytes());
        pair.advance(millis(1));
    }
}

/// The numbers `who` received from `converse`, in order.
fn numbers_received(pair: &Pair, who: Who) -> Vec<u32> {
    pair.node(who)
        .delivered_bodies()
        .iter()
        .filter_map(|body| Some(u32::from_be_bytes((*body).try_into().ok()?)))
        .collect()
}

/// Both sides received every number from 0 to `count` - 1 in order, and
/// neither dropped anything.
fn assert_every_number_arrived(pair: &Pair, count: u32, case: &str) {
    let every: Vec<u32> = (0..count).collect();
    assert_eq!(numbers_received(pair, Bob), every, "{case}");
    assert_eq!(numbers_received(pair, Alice), every, "{case}");
    assert_eq!(
        pair.alice.device.drops().total() + pair.bob.device.drops().total(),
        0,
        "{case}; alice: {:?}, bob: {:?}",
        pair.alice.device.drops(),
        pair.bob.device.drops()
    );
}

/// Both sides start a handshake in the same instant.
fn initiate_both(pair: &mut Pair) {
    let (now, alice_peer, bob_peer) = (pair.now, pair.alice.peer, pair.bob.peer);
    pair.alice.device.initiate_handshake(alice_peer, now);
    pair.bob.device.initiate_handshake(bob_peer, now);
}

/// On a link of 10 ms, numbers 0 to 49 go each way, then both sides
/// initiate at once while numbers 50 to 249 go.
fn cross_mid_conversation(pair: &mut Pair) {
    pair.latency = millis(10);
    // Past the minimum gap between two initiations of one side.
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
    converse(pair, 0, 50);
    initiate_both(pair);
    converse(pair, 50, 200);
}

/// Both sides start a handshake at the same moment while their session
/// carries traffic both ways (one side's rekey meets the other's retry):
/// the crossing handshakes settle, and nothing sent meanwhile on the old
/// session, still in flight when the new ones complete, is lost.
#[test]
fn both_sides_initiating_at_once_mid_conversation_lose_nothing() {
    let mut pair = Pair::connected();
    cross_mid_conversation(&mut pair);
    pair.advance(secs(1));

    assert_eq!(pair.sent_by(Alice, Kind::Initiation).len(), 2);
    assert_eq!(pair.sent_by(Bob, Kind::Initiation).len(), 1);
    assert_every_number_arrived(&pair, 250, "mid conversation");
    // The new sessions carry on.
    converse(&mut pair, 250, 10);
    pair.advance(secs(1));
    assert_eq!(numbers_received(&pair, Bob).len(), 260);
    assert_eq!(numbers_received(&pair, Alice).len(), 260);
}

/// After crossing handshakes both sides must send on the same session:
/// if each kept its own, each side's `previous` would be the session its
/// peer sends on, and the next one-sided rekey would release it at the
/// responder while the initiator still sends on it until the response
/// arrives (one round trip of packets lost). Which side rekeys first
/// decides whose `previous` goes, so both orders are checked.
#[test]
fn a_rekey_after_crossing_handshakes_loses_nothing() {
    for first_rekey in [Alice, Bob] {
        rekey_after_crossing_loses_nothing(PairConfig::default(), first_rekey);
    }
}

/// The same against a plain WireGuard peer, which always keeps sending on
/// the session it began.
#[test]
fn a_rekey_after_crossing_a_plain_peer_loses_nothing() {
    let config = PairConfig {
        bob: NodeConfig {
            plain_wireguard: true,
            ..NodeConfig::default()
        },
        ..PairConfig::default()
    };
    for first_rekey in [Alice, Bob] {
        rekey_after_crossing_loses_nothing(config.clone(), first_rekey);
    }
}

fn rekey_after_crossing_loses_nothing(config: PairConfig, first_rekey: Who) {
    let mut pair = Pair::with(config);
    pair.connect();
    cross_mid_conversation(&mut pair);
    pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);

    let mut sent = 250;
    for who in [first_rekey, first_rekey.other()] {
        let (now, peer) = (pair.now, pair.node(who).peer);
        pair.node_mut(who).device.initiate_handshake(peer, now);
        converse(&mut pair, sent, 100);
        pair.advance(REKEY_TIMEOUT + MAX_TIMER_JITTER);
        sent += 100;
    }

    assert_every_number_arrived(&pair, sent, &format!("{first_rekey:?} first"));
}

/// Both sides initiate at once, on a link that `link` may reorder, and
/// then converse through three rekey ages. Rekeys must keep coming on
/// time (only the initiator of the session both send on rekeys by age, so
/// were each to send on the session the other began, neither would), and
/// nothing sent after the crossing may be lost.
fn crossing_then_rekeys(
    config: PairConfig,
    case: &str,
    link: impl FnMut(&mut Datagram) -> Fate + 'static,
) {
    let mut pair = Pair::with(config);
    pair.connect();
    pair.latency = millis(2);
    pair.advance(millis(100));
    pair.set_link(link);
    initiate_both(&mut pair);
    pair.advance(millis(15));
    pair.clear_link();
    let before = [Alice, Bob].map(|who| pair.node(who).handshakes_completed());
    converse(&mut pair, 0, 1500);
    pair.advance(millis(100));

    let after = [Alice, Bob].map(|who| pair.node(who).handshakes_completed());
    let rekeys = [after[0] - before[0], after[1] - before[1]];
    assert!(rekeys.iter().all(|&n| n >= 2), "{case}: rekeys {rekeys:?}");
    assert_every_number_arrived(&pair, 1500, case);
}

/// Delays the first datagram of `kind` that `sender` sends by `extra`.
fn delay_first(sender: Who, kind: Kind, extra: Duration) -> impl FnMut(&mut Datagram) -> Fate {
    let mut delayed = false;
    move |datagram| {
        if datagram.sender == sender && datagram.kind() == kind && !delayed {
            delayed = true;
            return Fate::Delay(extra);
        }
        Fate::Deliver
    }
}

/// `late`'s initiation arrives in the same instant as the response to
/// the other side's, just before it: a daemon reads both in one batch,
/// with one clock reading for the two (seen in the rekeys test).
#[test]
fn a_crossing_read_in_one_batch_settles() {
    for late in [Alice, Bob] {
        let case = format!("{late:?}'s initiation read with the response");
        crossing_then_rekeys(
            fast_rekeys(),
            &case,
            delay_first(late, Kind::Initiation, millis(2)),
        );
    }
}

/// Two reorderings make one side see the handshakes cross and the other
/// see one after the other: `late`'s initiation arrives after the
/// response to the other's, and the other's first keepalive on its new
/// session after the response to `late`'s.
#[test]
fn a_crossing_seen_by_one_side_only_settles() {
    for late in [Alice, Bob] {
        let case = format!("{late:?}'s initiation after the response");
        let mut initiation = delay_first(late, Kind::Initiation, millis(4));
        let mut keepalive = delay_first(late.other(), Kind::Keepalive, millis(4));
        crossing_then_rekeys(fast_rekeys(), &case, move |datagram| {
            match (initiation(datagram), keepalive(datagram)) {
                (Fate::Deliver, fate) | (fate, _) => fate,
            }
        });
    }
}

/// Crossings under every order the link can give them: each side's first
/// initiation, response and keepalive after the crossing starts is held
/// back 0 to 6 ms (three times the latency), chosen by a seeded generator.
#[test]
fn crossings_in_any_order_settle() {
    crossings_in_random_orders(fast_rekeys(), 31);
}

/// The same with a plain WireGuard peer.
#[test]
fn crossings_with_a_plain_peer_in_any_order_settle() {
    let mut config = fast_rekeys();
    config.bob.plain_wireguard = true;
    crossings_in_random_orders(config, 32);
}

fn crossings_in_random_orders(config: PairConfig, seed: u64) {
    let mut rng = SeededRng::new(seed);
    for scenario in 0..64 {
        let mut delays = [0u8; 6];
        rng.fill_bytes(&mut delays);
        let held = delays.map(|byte| Duration::from_micros(u64::from(byte % 25) * 250));
        let mut seen = [false; 6];
        let case = format!("scenario {scenario}, held back {held:?}");
        crossing_then_rekeys(config.clone(), &case, move |datagram| {
            let kind = match datagram.kind() {
                Kind::Initiation => 0,
                Kind::Response => 1,
                Kind::Keepalive => 2,
                _ => return Fate::Deliver,
            };
            let slot = kind * 2 + usize::from(datagram.sender == Bob);
            if std::mem::replace(&mut seen[slot], true) || held[slot].is_zero() {
                return Fate::Deliver;
            }
            Fate::Delay(held[slot])
        });
    }
}

/// Rekeys every 480 ms, retries after 20 ms.
fn fast_rekeys() -> PairConfig {
    PairConfig::timing(Timing::fast_rekeys(250))
}
