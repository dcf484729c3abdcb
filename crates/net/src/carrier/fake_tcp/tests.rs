//! Two fake-TCP carriers on loopback: the handshake, datagrams both ways,
//! closing. Raw sockets need root (CAP_NET_RAW); without it each test
//! skips with one line. Loopback has no firewall rule dropping the
//! kernel's resets, which also shows they are ignored.

use super::*;
use crate::carrier::tests::ReceiveBuffers;
use std::time::Duration;

fn root(test: &str) -> bool {
    if fjord_sys::process::is_root() {
        return true;
    }
    eprintln!("skipping {test}: raw sockets need root");
    false
}

/// A port nobody uses now (a TCP socket bound to it and dropped).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Receives on `fake` until `wanted` says stop (or 5 s pass); the
/// datagrams and events seen.
fn pump(
    fake: &mut FakeTcp,
    mut wanted: impl FnMut(&[Vec<u8>], &[FlowEvent]) -> bool,
) -> (Vec<Vec<u8>>, Vec<FlowEvent>) {
    let mut buffers = ReceiveBuffers::new();
    let (mut datagrams, mut events) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + Duration::from_secs(5);
    while !wanted(&datagrams, &events) && Instant::now() < deadline {
        buffers.receive_once(&mut datagrams, |slices, meta| {
            fake.recv(Instant::now(), slices, meta)
        });
        events.extend(std::iter::from_fn(|| fake.poll_event()));
    }
    (datagrams, events)
}

/// A `pump` condition that lets one receive pass run.
fn once() -> impl FnMut(&[Vec<u8>], &[FlowEvent]) -> bool {
    let mut ran = false;
    move |_, _| std::mem::replace(&mut ran, true)
}

#[test]
fn a_flow_opens_carries_datagrams_both_ways_and_closes() {
    if !root("a_flow_opens_carries_datagrams_both_ways_and_closes") {
        return;
    }
    let port = free_port();
    let mut server = FakeTcp::open(Some(port), 0).unwrap();
    let mut client = FakeTcp::open(None, 0).unwrap();
    let remote = SocketAddr::from(([127, 0, 0, 1], port));
    client.connect(Instant::now(), remote, 0).unwrap();
    // The server answers the SYN (statelessly); the client completes the
    // handshake.
    let mut connected = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    while connected.is_empty() && Instant::now() < deadline {
        pump(&mut server, once());
        connected = pump(&mut client, once()).1;
    }
    assert_eq!(connected, [FlowEvent::Connected(remote)]);
    assert!(client.carries(remote));

    let datagrams: Vec<Vec<u8>> = [1400, 1400, 1400, 600, 80]
        .iter()
        .enumerate()
        .map(|(index, &len)| vec![index as u8 + 1; len])
        .collect();
    let (sent, dropped) = client
        .send(remote, datagrams.iter().map(Vec::as_slice))
        .unwrap();
    assert_eq!((sent, dropped), (5, 0));
    let (received, events) = pump(&mut server, |received, _| received.len() >= 5);
    assert_eq!(received, datagrams);
    let client_side = SocketAddr::from(([127, 0, 0, 1], client.ports()[0]));
    assert_eq!(events, [FlowEvent::Accepted(client_side)]);

    // Back, to the far end the server saw.
    assert_eq!(
        server.send(client_side, [&b"reply"[..]].into_iter()),
        Some((1, 0))
    );
    let (received, _) = pump(&mut client, |received, _| !received.is_empty());
    assert_eq!(received, [b"reply".to_vec()]);

    assert!(client.close(remote));
    assert!(!client.carries(remote));
    let (_, events) = pump(&mut server, |_, events| !events.is_empty());
    assert_eq!(events, [FlowEvent::Closed(client_side)]);
    assert!(server.is_empty());
}

#[test]
fn data_without_a_handshake_opens_nothing() {
    if !root("data_without_a_handshake_opens_nothing") {
        return;
    }
    let port = free_port();
    let mut server = FakeTcp::open(Some(port), 0).unwrap();
    let mut intruder = FakeTcp::open(None, 0).unwrap();
    // An ACK with data that acknowledges no SYN-ACK of ours.
    let forged = SegmentHeader {
        source_port: intruder.ports()[0],
        destination_port: port,
        sequence: 1,
        acknowledgement: 12_345,
        flags: segment::PSH | ACK,
    };
    let to = SocketAddrV4::new(Ipv4Addr::LOCALHOST, port);
    assert!(intruder.send_segment(to, Ipv4Addr::LOCALHOST, &forged, &[], b"junk"));
    let (received, events) = pump(&mut server, |_, _| false);
    assert!(received.is_empty() && events.is_empty());
    assert!(server.counters().refused_segments >= 1);
    assert!(server.is_empty());
    let _ = &mut intruder;
}
