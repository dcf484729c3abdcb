//! Where datagrams leave: steered sockets, connected sends, batches.

use super::*;
use quinn_udp::RecvMeta;
use std::io::{IoSlice, IoSliceMut};
use std::net::SocketAddr;

/// A run to a steered endpoint whose socket is connected goes without
/// per-message addresses, from the address the socket is bound to; a
/// source the socket is not bound to keeps the per-message send.
#[test]
fn runs_to_a_connected_endpoint_use_its_socket_as_connected() {
    let mut interface = Egress::bind(0, 0).unwrap();
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let to_peer = peer.local_addr().unwrap();
    let local = std::net::IpAddr::from([127, 0, 0, 6]);
    let connected = UdpSocket::connected(interface.port(), to_peer, Some(local), 0).unwrap();
    interface.steering_mut().insert(to_peer, connected).unwrap();
    let data = [5u8; 120];
    let pieces = [IoSlice::new(&data)];
    let message = |source| GsoMessage {
        destination: to_peer,
        source,
        pieces: &pieces,
        segment_size: Some(60),
    };
    let route = interface.route(to_peer);
    assert!(route.sends_connected(&[message(Some(local)), message(None)]));
    assert!(!route.sends_connected(&[message(Some(std::net::IpAddr::from([127, 0, 0, 7])))]));
    assert!(!interface.interface().sends_connected(&[message(None)]));
    assert_eq!(interface.send_messages(&[message(Some(local))]).unwrap(), 1);
    let mut buffer = [0u8; 200];
    for _ in 0..2 {
        let (len, from) = peer.recv_from(&mut buffer).unwrap();
        assert_eq!((len, from), (60, SocketAddr::new(local, interface.port())));
    }
    // The steered socket is an IPv4 one, which takes no per-message
    // addresses of the dual-stack kind: a run from another of our
    // addresses leaves through the interface's socket instead.
    assert!(!route.is_dual_stack());
    let other = std::net::IpAddr::from([127, 0, 0, 8]);
    assert_eq!(interface.send_messages(&[message(Some(other))]).unwrap(), 1);
    for _ in 0..2 {
        let (len, from) = peer.recv_from(&mut buffer).unwrap();
        assert_eq!((len, from), (60, SocketAddr::new(other, interface.port())));
    }
}

/// Three messages in one call: a GSO run gathered from two pieces, a
/// lone short datagram, and a run whose last datagram is shorter.
#[test]
fn messages_arrive_as_their_datagrams_in_order() {
    let a = Egress::bind(0, 0).unwrap();
    let b = UdpSocket::bind(0, 0).unwrap();
    let to_b: SocketAddr = format!("127.0.0.1:{}", b.port()).parse().unwrap();
    let data: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
    let first = [IoSlice::new(&data[..300]), IoSlice::new(&data[300..600])];
    let second = [IoSlice::new(&data[600..650])];
    let third = [IoSlice::new(&data[650..1000])];
    let messages = [
        GsoMessage {
            destination: to_b,
            source: None,
            pieces: &first,
            segment_size: Some(200),
        },
        GsoMessage {
            destination: to_b,
            source: None,
            pieces: &second,
            segment_size: None,
        },
        GsoMessage {
            destination: to_b,
            source: None,
            pieces: &third,
            segment_size: Some(150),
        },
    ];
    assert_eq!(a.send_messages(&messages).unwrap(), 3);

    let expected: Vec<&[u8]> = [0..200, 200..400, 400..600, 600..650]
        .into_iter()
        .chain([650..800, 800..950, 950..1000])
        .map(|range| &data[range])
        .collect();
    let mut received: Vec<Vec<u8>> = Vec::new();
    let mut storage = vec![0u8; 65536];
    let mut meta = [RecvMeta::default(); 1];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    while received.len() < expected.len() && std::time::Instant::now() < deadline {
        let mut slices = [IoSliceMut::new(&mut storage)];
        match b.recv(&mut slices, &mut meta) {
            Ok(_) => {
                let m = meta[0];
                let stride = if m.stride == 0 { m.len } else { m.stride };
                received.extend(storage[..m.len].chunks(stride).map(<[u8]>::to_vec));
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(received, expected);
}

/// Datagrams to a steered endpoint leave from the steered socket's
/// port, others from the interface's; removing the steering restores
/// the interface's socket.
#[test]
fn steered_endpoints_are_sent_from_their_own_socket() {
    let mut udp = Egress::bind(0, 0).unwrap();
    let steered_port = {
        let steered = UdpSocket::bind(0, 0).unwrap();
        let port = steered.port();
        let far = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let near = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let far_address = far.local_addr().unwrap();
        let slot = udp.steering_mut().insert(far_address, steered).unwrap();
        let source_of = |socket: &std::net::UdpSocket, udp: &Egress| {
            let destination = socket.local_addr().unwrap();
            udp.send(destination, None, b"hello").unwrap();
            let mut buf = [0u8; 16];
            socket.recv_from(&mut buf).unwrap().1.port()
        };
        assert_eq!(source_of(&far, &udp), port);
        assert_eq!(source_of(&near, &udp), udp.port());
        udp.steering_mut().remove(slot);
        assert_eq!(source_of(&far, &udp), udp.port());
        assert!(udp.steering().is_empty());
        port
    };
    assert_ne!(steered_port, udp.port());
}
