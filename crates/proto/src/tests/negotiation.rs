//! Two fjord nodes agree on AES-256-GCM inside their session; a plain
//! WireGuard peer never sees the negotiation; lost offers are sent again;
//! tampering with the cipher fails closed (`crate::negotiation`).

use super::sim::*;
use crate::negotiation::MAX_OFFER_SENDS;
use crate::timers::REKEY_AFTER_TIME;
use crate::wire::{MESSAGE_TYPE_TRANSPORT_DATA, MESSAGE_TYPE_TRANSPORT_DATA_AES};
use crate::{CipherPolicy, DataCipher, DropReason, Received};

/// An offer on the wire: header, one 16-byte padded block, tag. No test
/// packet here seals that small (an IPv4 header alone pads to 32).
const OFFER_DATAGRAM_LEN: usize = 16 + 16 + 16;

fn policies(alice: CipherPolicy, bob: CipherPolicy) -> PairConfig {
    let mut config = PairConfig::default();
    config.alice.cipher_policy = alice;
    config.bob.cipher_policy = bob;
    config
}

fn both_aes() -> PairConfig {
    policies(CipherPolicy::OfferAes256Gcm, CipherPolicy::OfferAes256Gcm)
}

fn offers_sent(pair: &Pair, who: Who) -> usize {
    pair.sent_by(who, Kind::Data)
        .iter()
        .filter(|(_, datagram)| datagram.bytes.len() == OFFER_DATAGRAM_LEN)
        .count()
}

fn message_type(datagram: &Datagram) -> u32 {
    u32::from_le_bytes([
        datagram.bytes[0],
        datagram.bytes[1],
        datagram.bytes[2],
        datagram.bytes[3],
    ])
}

fn sending_cipher(pair: &Pair, who: Who) -> Option<DataCipher> {
    let node = pair.node(who);
    node.device.peer_status(node.peer)?.sending_cipher
}

fn speaks_fjord(pair: &Pair, who: Who) -> bool {
    let node = pair.node(who);
    node.device
        .peer_status(node.peer)
        .is_some_and(|status| status.speaks_fjord)
}

#[test]
fn two_fjord_nodes_with_hardware_aes_move_their_data_to_aes() {
    let mut pair = Pair::with(both_aes());
    pair.connect();
    // Bob (the responder) offered when alice's first data confirmed the
    // session, alice answered, bob acknowledged: three offers.
    assert_eq!((offers_sent(&pair, Bob), offers_sent(&pair, Alice)), (2, 1));
    assert_eq!(sending_cipher(&pair, Alice), Some(DataCipher::Aes256Gcm));
    assert_eq!(sending_cipher(&pair, Bob), Some(DataCipher::Aes256Gcm));
    assert!(speaks_fjord(&pair, Alice) && speaks_fjord(&pair, Bob));

    pair.send(Alice, b"over aes");
    pair.send(Bob, b"and back");
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"over aes"[..]));
    assert_eq!(
        pair.alice.delivered_bodies().last(),
        Some(&&b"and back"[..])
    );
    for who in [Alice, Bob] {
        let last = pair.last_sent(who, Kind::Data);
        assert_eq!(message_type(&last), MESSAGE_TYPE_TRANSPORT_DATA_AES);
    }
    assert_eq!(pair.alice.device.drops().total(), 0);
    assert_eq!(pair.bob.device.drops().total(), 0);
}

#[test]
fn a_side_without_aes_keeps_the_session_on_chacha() {
    for config in [
        policies(
            CipherPolicy::OfferAes256Gcm,
            CipherPolicy::ChaCha20Poly1305Only,
        ),
        policies(
            CipherPolicy::ChaCha20Poly1305Only,
            CipherPolicy::OfferAes256Gcm,
        ),
    ] {
        let mut pair = Pair::with(config);
        pair.connect();
        pair.send(Alice, b"still chacha");
        pair.send(Bob, b"here too");
        assert_eq!(
            pair.alice.delivered_bodies().last(),
            Some(&&b"here too"[..])
        );
        for who in [Alice, Bob] {
            assert!(speaks_fjord(&pair, who), "the offers still went");
            assert_eq!(
                sending_cipher(&pair, who),
                Some(DataCipher::ChaCha20Poly1305)
            );
            let last = pair.last_sent(who, Kind::Data);
            assert_eq!(message_type(&last), MESSAGE_TYPE_TRANSPORT_DATA);
        }
    }
}

#[test]
fn a_plain_wireguard_peer_never_sees_an_offer_either_way() {
    for plain in [Alice, Bob] {
        let mut config = both_aes();
        match plain {
            Alice => config.alice.plain_wireguard = true,
            Bob => config.bob.plain_wireguard = true,
        }
        let mut pair = Pair::with(config);
        pair.connect();
        pair.advance(secs(30));
        pair.send(Alice, b"plain data");
        pair.send(Bob, b"plain reply");
        assert_eq!(
            pair.alice.delivered_bodies().last(),
            Some(&&b"plain reply"[..])
        );
        // A plain peer drops an offer as a malformed inner packet: none came.
        assert_eq!(pair.node(plain).drops(DropReason::InvalidInnerPacket), 0);
        assert_eq!(offers_sent(&pair, Alice) + offers_sent(&pair, Bob), 0);
        for who in [Alice, Bob] {
            assert!(!speaks_fjord(&pair, who));
            assert_eq!(
                sending_cipher(&pair, who),
                Some(DataCipher::ChaCha20Poly1305)
            );
        }
    }
}

#[test]
fn lost_offers_go_again_until_the_session_agrees() {
    let mut pair = Pair::with(both_aes());
    // The network eats bob's first offer and alice's first answer.
    let mut eaten = [false; 2];
    pair.set_link(move |datagram| {
        let slot = match datagram.sender {
            Bob => 0,
            Alice => 1,
        };
        if datagram.bytes.len() == OFFER_DATAGRAM_LEN && !eaten[slot] {
            eaten[slot] = true;
            return Fate::Drop;
        }
        Fate::Deliver
    });
    pair.connect();
    assert_eq!(
        sending_cipher(&pair, Alice),
        Some(DataCipher::ChaCha20Poly1305)
    );
    // Offers go again as traffic arrives, at most once a second.
    for _ in 0..4 {
        pair.advance(millis(600));
        pair.send(Alice, b"ping");
        pair.send(Bob, b"pong");
    }
    assert_eq!(sending_cipher(&pair, Alice), Some(DataCipher::Aes256Gcm));
    assert_eq!(sending_cipher(&pair, Bob), Some(DataCipher::Aes256Gcm));
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"ping"[..]));
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&b"pong"[..]));
}

#[test]
fn an_unanswered_offer_stops_after_its_limit() {
    let mut pair = Pair::with(both_aes());
    pair.drop_all(Alice, Kind::Data);
    pair.send(Alice, b"first");
    pair.clear_link();
    // Alice's data is lost, but her keepalive confirms bob's session;
    // from then on bob offers into a network that eats alice's answers.
    pair.set_link(|datagram| {
        if datagram.sender == Alice && datagram.bytes.len() == OFFER_DATAGRAM_LEN {
            Fate::Drop
        } else {
            Fate::Deliver
        }
    });
    for _ in 0..40 {
        pair.advance(millis(500));
        pair.send(Alice, b"traffic");
    }
    assert_eq!(offers_sent(&pair, Bob), usize::from(MAX_OFFER_SENDS));
    assert_eq!(
        sending_cipher(&pair, Bob),
        Some(DataCipher::ChaCha20Poly1305)
    );
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"traffic"[..]));
}

#[test]
fn every_rekey_negotiates_again() {
    let mut pair = Pair::with(both_aes());
    pair.connect();
    let handshakes = pair.alice.handshakes_completed();
    pair.advance(REKEY_AFTER_TIME + secs(1));
    pair.send(Alice, b"after rekey");
    pair.send(Bob, b"after rekey too");
    pair.send(Alice, b"once more");
    assert!(pair.alice.handshakes_completed() > handshakes);
    assert_eq!(sending_cipher(&pair, Alice), Some(DataCipher::Aes256Gcm));
    assert_eq!(sending_cipher(&pair, Bob), Some(DataCipher::Aes256Gcm));
    assert!(
        offers_sent(&pair, Bob) >= 4,
        "a second session, a second round"
    );
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"once more"[..]));
}

#[test]
fn a_replayed_offer_is_refused_by_the_replay_window() {
    let mut pair = Pair::with(both_aes());
    pair.connect();
    let (_, answer) = pair
        .sent_by(Alice, Kind::Data)
        .into_iter()
        .find(|(_, datagram)| datagram.bytes.len() == OFFER_DATAGRAM_LEN)
        .expect("alice answered bob's offer");
    let outcome = pair.inject(Bob, alice_addr(), &answer.bytes);
    assert_eq!(outcome, Received::Dropped(DropReason::ReplayedCounter));
    assert_eq!(sending_cipher(&pair, Bob), Some(DataCipher::Aes256Gcm));
}

#[test]
fn a_flipped_cipher_type_fails_closed() {
    let mut pair = Pair::with(both_aes());
    pair.connect();
    pair.send(Alice, b"sealed with aes");
    let aes = pair.last_sent(Alice, Kind::Data);
    assert_eq!(message_type(&aes), MESSAGE_TYPE_TRANSPORT_DATA_AES);
    // The same bytes claimed as ChaCha20-Poly1305: above alice's switch,
    // so refused before any decryption.
    let mut as_chacha = aes.bytes.clone();
    as_chacha[1] = 0;
    as_chacha[8..16].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let outcome = pair.inject(Bob, alice_addr(), &as_chacha);
    assert_eq!(outcome, Received::Dropped(DropReason::CipherDowngraded));

    // Before any negotiation, AES is refused outright.
    let mut fresh = Pair::with(policies(
        CipherPolicy::OfferAes256Gcm,
        CipherPolicy::ChaCha20Poly1305Only,
    ));
    fresh.connect();
    fresh.send(Alice, b"chacha");
    let mut as_aes = fresh.last_sent(Alice, Kind::Data).bytes;
    as_aes[1] = 1;
    as_aes[8..16].copy_from_slice(&(u64::MAX / 2).to_le_bytes());
    let outcome = fresh.inject(Bob, alice_addr(), &as_aes);
    assert_eq!(outcome, Received::Dropped(DropReason::CipherNotNegotiated));
}
