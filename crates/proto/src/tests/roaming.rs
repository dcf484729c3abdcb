//! Endpoints that move, peers that restart, and the statistics a user
//! reads in `fjord show`.

use std::net::SocketAddr;

use super::sim::*;
use crate::timers::{KEEPALIVE_TIMEOUT, MAX_TIMER_JITTER, REKEY_TIMEOUT};
use crate::wire::{HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN};
use crate::{DropReason, Event, Received};

fn new_bob_addr() -> SocketAddr {
    "203.0.113.77:40000".parse().expect("valid address")
}

#[test]
fn authenticated_packet_from_a_new_address_moves_the_endpoint() {
    let mut pair = Pair::connected();
    assert_eq!(pair.alice.endpoint(), Some(bob_addr()));

    // Bob's NAT rebinds; his next packet comes from elsewhere.
    pair.move_node(Bob, new_bob_addr());
    pair.send(Bob, b"I moved");
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&b"I moved"[..]));
    assert_eq!(pair.alice.endpoint(), Some(new_bob_addr()));
    assert!(pair.alice.saw(|event| matches!(
        event,
        Event::EndpointChanged { endpoint, .. } if *endpoint == new_bob_addr()
    )));

    // Alice's replies follow Bob to his new address.
    pair.send(Alice, b"found you");
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&b"found you"[..]));
    assert_eq!(pair.undeliverable, 0);
}

#[test]
fn unauthenticated_packets_never_move_the_endpoint() {
    let mut pair = Pair::connected();
    pair.send(Bob, b"genuine");
    let genuine = pair.last_sent(Bob, Kind::Data);
    pair.drop_all(Bob, Kind::Data);
    pair.send(Bob, b"never arrived");
    let unseen = pair.last_sent(Bob, Kind::Data);
    pair.clear_link();
    let initiation = pair.last_sent(Alice, Kind::Initiation);
    let attacker: SocketAddr = "203.0.113.66:666".parse().unwrap();

    // A tampered packet, a replayed one, a replayed initiation and junk.
    let mut tampered = unseen.bytes.clone();
    tampered[20] ^= 1;
    assert_eq!(
        pair.inject(Alice, attacker, &tampered),
        Received::Dropped(DropReason::AuthenticationFailed)
    );
    assert_eq!(
        pair.inject(Alice, attacker, &genuine.bytes),
        Received::Dropped(DropReason::ReplayedCounter)
    );
    assert_eq!(
        pair.inject(Bob, attacker, &initiation.bytes),
        Received::Dropped(DropReason::ReplayedInitiation)
    );
    pair.inject(Alice, attacker, &[4, 0, 0, 0, 1, 2, 3]);

    assert_eq!(pair.alice.endpoint(), Some(bob_addr()));
    assert_eq!(pair.bob.endpoint(), Some(alice_addr()));
    assert!(
        !pair
            .alice
            .saw(|event| matches!(event, Event::EndpointChanged { .. }))
    );
    assert!(
        !pair
            .bob
            .saw(|event| matches!(event, Event::EndpointChanged { .. }))
    );
    pair.send(Alice, b"still to the right place");
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"still to the right place"[..])
    );
}

#[test]
fn responder_learns_the_endpoint_from_the_initiation() {
    let mut pair = Pair::with(PairConfig {
        bob: NodeConfig {
            knows_endpoint: false,
            ..NodeConfig::default()
        },
        ..PairConfig::default()
    });
    assert_eq!(pair.bob.endpoint(), None);
    // Without an endpoint Bob cannot start anything himself.
    pair.send(Bob, b"nowhere to go");
    assert_eq!(pair.bob.drops(DropReason::NoEndpoint), 1);
    assert!(pair.wire.is_empty());

    pair.send(Alice, b"here I am");
    assert_eq!(pair.bob.endpoint(), Some(alice_addr()));
    pair.send(Bob, b"got you");
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&b"got you"[..]));
}

#[test]
fn restarted_peer_is_reached_again_when_the_other_keeps_sending() {
    let mut pair = Pair::connected();
    pair.advance(secs(5));
    pair.restart(Bob);
    assert!(!pair.bob.has_session());
    let delivered_before = pair.bob.delivered.len();

    // Alice sends once a second; the new Bob cannot read her old session
    // until her unanswered data makes her start a new handshake.
    let took = pair
        .advance_until(secs(1), secs(30), |pair| {
            pair.send(Alice, b"are you back?");
            pair.bob.delivered.len() > delivered_before
        })
        .expect("the session came back");
    assert!(
        took <= KEEPALIVE_TIMEOUT + REKEY_TIMEOUT + MAX_TIMER_JITTER + secs(1),
        "{took:?}"
    );
    assert!(pair.bob.drops(DropReason::UnknownReceiverIndex) > 0);
    assert!(pair.alice.has_session() && pair.bob.has_session());
    pair.send(Bob, b"I am back");
    assert_eq!(
        pair.alice.delivered_bodies().last(),
        Some(&&b"I am back"[..])
    );
}

#[test]
fn restarted_peer_that_starts_eagerly_is_back_at_once() {
    // Bob initiated the first session, so Alice remembers his timestamps.
    let mut pair = Pair::new();
    pair.send(Bob, b"hello alice");
    pair.send(Alice, b"hello bob");
    pair.advance(secs(5));

    pair.restart(Bob);
    // A driver with a persistent keepalive (or an eager interface) starts
    // a handshake as the process comes up.
    let (now, peer) = (pair.now, pair.bob.peer);
    pair.bob.device.initiate_handshake(peer, now);
    pair.run();
    assert!(pair.bob.has_session());
    pair.send(Alice, b"welcome back");
    assert_eq!(
        pair.bob.delivered_bodies().last(),
        Some(&&b"welcome back"[..])
    );
    pair.send(Bob, b"thanks");
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&b"thanks"[..]));
}

#[test]
fn byte_counters_and_last_handshake_move_with_traffic() {
    let mut pair = Pair::new();
    let status = |node: &Node| node.device.peer_status(node.peer).expect("configured");
    assert_eq!(status(&pair.alice).stats, crate::PeerStats::default());

    pair.advance(secs(3));
    pair.connect();
    let (alice, bob) = (status(&pair.alice).stats, status(&pair.bob).stats);
    // Each side counts what it put on and took off the wire for the peer.
    assert_eq!(alice.tx_bytes, bob.rx_bytes);
    assert_eq!(alice.rx_bytes, bob.tx_bytes);
    // Initiation plus one data packet (20 + 9 bytes padded to 32, with
    // header and tag); response plus one data packet (20 + 11 → 32).
    // Both are fjord, so they also exchanged session offers (6 bytes
    // padded to 16, with header and tag): bob's first and its answer to
    // alice's, alice's one (crate::negotiation).
    let offer = (16 + 16 + 16) as u64;
    assert_eq!(
        alice.tx_bytes,
        (HANDSHAKE_INITIATION_LEN + 16 + 32 + 16) as u64 + offer
    );
    assert_eq!(
        bob.tx_bytes,
        (HANDSHAKE_RESPONSE_LEN + 16 + 32 + 16) as u64 + 2 * offer
    );
    let handshake_time = secs(START_UNIX_SECS + 3);
    assert_eq!(alice.last_handshake, Some(handshake_time));
    assert_eq!(bob.last_handshake, Some(handshake_time));

    pair.advance(secs(1));
    pair.send(Alice, &[0u8; 100]);
    let after = status(&pair.alice).stats;
    assert_eq!(after.tx_bytes - alice.tx_bytes, 16 + 128 + 16);
    assert_eq!(
        after.last_handshake,
        Some(handshake_time),
        "no handshake, no change"
    );
    assert_eq!(status(&pair.bob).stats.rx_bytes, after.tx_bytes);
}

/// A host with several addresses answers from the one the peer sent to:
/// the handshake response, and every later packet, until the peer's
/// datagrams arrive at another of our addresses.
#[test]
fn replies_leave_from_the_local_address_the_peer_sent_to() {
    use crate::{Endpoint, Sent};
    let first: std::net::IpAddr = "198.18.0.2".parse().unwrap();
    let second: std::net::IpAddr = "198.18.0.3".parse().unwrap();
    let mut pair = Pair::new();
    pair.drop_all(Alice, Kind::Initiation);
    pair.send(Alice, b"hello");
    let initiation = pair.last_sent(Alice, Kind::Initiation);
    pair.clear_link();

    let now = pair.now;
    let mut bytes = initiation.bytes.clone();
    let received = pair.bob.device.handle_datagram(
        now,
        Endpoint::new(alice_addr(), Some(second)),
        &mut bytes,
        &mut [],
    );
    assert_eq!(received, Received::Control);
    let mut buf = vec![0; 2048];
    let response = pair.bob.device.poll_transmit(&mut buf).expect("a response");
    assert_eq!(
        (response.destination, response.source),
        (alice_addr(), Some(second))
    );

    let (mut packet, len) = tun_buffer(&ipv4_packet(
        pair.bob.tunnel_ip,
        pair.alice.tunnel_ip,
        b"reply",
    ));
    let peer = pair.bob.peer;
    // No session confirmed yet: the packet waits, and is sent later from
    // the same address; once Alice's confirmation arrives at the first
    // address, replies follow it there.
    assert_eq!(
        pair.bob.device.encapsulate(now, peer, &mut packet, len),
        Sent::Staged
    );
    let mut response_bytes = buf[..response.len].to_vec();
    pair.alice
        .device
        .handle_datagram(now, bob_addr(), &mut response_bytes, &mut []);
    let mut confirmation = vec![0; 2048];
    let sent = pair
        .alice
        .device
        .poll_transmit(&mut confirmation)
        .expect("Alice's staged packet");
    let mut confirmation = confirmation[..sent.len].to_vec();
    pair.bob.device.handle_datagram(
        now,
        Endpoint::new(alice_addr(), Some(first)),
        &mut confirmation,
        &mut [],
    );
    let staged = pair
        .bob
        .device
        .poll_transmit(&mut buf)
        .expect("staged reply");
    assert_eq!(staged.source, Some(first));
    let (mut packet, len) = tun_buffer(&ipv4_packet(
        pair.bob.tunnel_ip,
        pair.alice.tunnel_ip,
        b"again",
    ));
    assert!(matches!(
        pair.bob.device.encapsulate(now, peer, &mut packet, len),
        Sent::Sealed { source: Some(source), .. } if source == first
    ));
    // Only our address changed, the peer's did not: no move to log, but
    // the driver hears of it (a socket bound to the old address must go).
    let events: Vec<Event> = std::iter::from_fn(|| pair.bob.device.poll_event()).collect();
    let moves = events
        .iter()
        .filter(|event| matches!(event, Event::EndpointChanged { .. }))
        .count();
    assert_eq!(moves, 0);
    assert!(
        events
            .iter()
            .any(|event| matches!(event, Event::LocalAddressChanged { peer: p } if *p == peer))
    );

    // The host loses that address: replies leave from the route's choice
    // until the peer's next datagram names one.
    assert_eq!(pair.bob.device.forget_local_addresses(|ip| ip == second), 0);
    assert_eq!(pair.bob.device.forget_local_addresses(|ip| ip == first), 1);
    let (mut packet, len) = tun_buffer(&ipv4_packet(
        pair.bob.tunnel_ip,
        pair.alice.tunnel_ip,
        b"from anywhere",
    ));
    assert!(matches!(
        pair.bob.device.encapsulate(now, peer, &mut packet, len),
        Sent::Sealed { source: None, .. }
    ));
}
