use super::*;
use crate::poll::wait_readable;
use crate::socket::{SocketBuffer, enable_receive_timestamps, force_buffer_size, socket_drops};
use crate::thread::{monotonic_nanos, set_thread_timer_slack, thread_cpu_time};
use std::net::UdpSocket;
use std::os::fd::AsFd;

#[test]
fn batches_cross_a_loopback_udp_socket_with_lengths_and_timestamps() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver.set_nonblocking(true).unwrap();
    enable_receive_timestamps(receiver.as_fd()).unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.connect(receiver.local_addr().unwrap()).unwrap();
    let before = SystemTime::now();
    let messages: Vec<Vec<u8>> = (0..5u8).map(|i| vec![i; 100 + usize::from(i)]).collect();
    let sent = send_batch(sender.as_fd(), messages.iter().map(Vec::as_slice)).unwrap();
    assert_eq!(sent, 5);

    let mut buffers = vec![[0u8; 102]; 8];
    let mut received = [Received::default(); 8];
    let mut got = 0;
    for _ in 0..100 {
        match recv_batch(
            receiver.as_fd(),
            buffers.iter_mut().map(|b| &mut b[..]),
            &mut received,
        ) {
            Ok(n) => {
                got = n;
                break;
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(error) => panic!("{error}"),
        }
    }
    assert_eq!(got, 5);
    for (i, meta) in received.iter().take(5).enumerate() {
        assert_eq!(meta.len, 100 + i, "full length even when truncated");
        assert_eq!(meta.truncated, meta.len > 102);
        let stamp = meta.timestamp.expect("timestamps were enabled");
        assert!(stamp >= before - Duration::from_secs(1));
        assert_eq!(buffers[i][0], i as u8);
    }
}

#[test]
fn batches_cross_loopback_in_order_without_timestamps() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
    sender.connect(receiver.local_addr().unwrap()).unwrap();
    let datagrams: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
    let sent = send_batch(sender.as_fd(), datagrams.iter().map(Vec::as_slice)).unwrap();
    assert_eq!(sent, 10);

    let mut buffers = vec![[0u8; 14]; 16];
    let mut received = [Received::default(); 16];
    let mut got = 0;
    while got < 10 {
        let buffers = buffers[got..].iter_mut().map(|b| &mut b[..]);
        got += recv_batch(receiver.as_fd(), buffers, &mut received[got..]).unwrap();
    }
    for i in 0..10 {
        assert_eq!(received[i].len, 10 + i, "full length, even when truncated");
        assert_eq!(received[i].truncated, received[i].len > 14);
        assert_eq!(received[i].timestamp, None);
        let kept = received[i].len.min(14);
        assert!(buffers[i][..kept].iter().all(|&b| usize::from(b) == i));
    }
}

#[test]
fn empty_batches_and_nonblocking_reads_are_harmless() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    assert_eq!(send_batch(socket.as_fd(), std::iter::empty()).unwrap(), 0);
    assert_eq!(send_gso_messages(socket.as_fd(), &[]).unwrap(), 0);
    let mut buffer = [0u8; 16];
    let mut received = [Received::default(); 1];
    let error = recv_batch(socket.as_fd(), [&mut buffer[..]], &mut received).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
}

/// A GSO run gathered from two pieces and a lone datagram, to an IPv4
/// destination from a dual-stack socket.
#[test]
fn gso_messages_arrive_as_their_datagrams() {
    let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sender = UdpSocket::bind("[::]:0").unwrap();
    let data: Vec<u8> = (0..700u32).map(|i| (i % 251) as u8).collect();
    let first = [IoSlice::new(&data[..300]), IoSlice::new(&data[300..600])];
    let second = [IoSlice::new(&data[600..650])];
    let destination = receiver.local_addr().unwrap();
    let messages = [
        GsoMessage {
            destination,
            source: None,
            pieces: &first,
            segment_size: Some(200),
        },
        GsoMessage {
            destination,
            source: None,
            pieces: &second,
            segment_size: None,
        },
    ];
    assert_eq!(send_gso_messages(sender.as_fd(), &messages).unwrap(), 2);
    let mut buffer = [0u8; 1000];
    for range in [0..200, 200..400, 400..600, 600..650] {
        let len = receiver.recv(&mut buffer).unwrap();
        assert_eq!(&buffer[..len], &data[range]);
    }
}

/// The source address each message asks for is the one the receiver
/// sees, with and without GSO (127.0.0.0/8 is all ours on loopback).
#[test]
fn gso_messages_leave_from_the_source_they_name() {
    let receiver = UdpSocket::bind("0.0.0.0:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sender = UdpSocket::bind("[::]:0").unwrap();
    let destination = SocketAddr::from(([127, 0, 0, 1], receiver.local_addr().unwrap().port()));
    let data = [7u8; 400];
    let run = [IoSlice::new(&data)];
    let lone = [IoSlice::new(&data[..50])];
    let messages = [
        GsoMessage {
            destination,
            source: Some(IpAddr::from([127, 0, 0, 2])),
            pieces: &run,
            segment_size: Some(200),
        },
        GsoMessage {
            destination,
            source: Some(IpAddr::from([127, 0, 0, 3])),
            pieces: &lone,
            segment_size: None,
        },
    ];
    assert_eq!(send_gso_messages(sender.as_fd(), &messages).unwrap(), 2);
    let mut buffer = [0u8; 1000];
    for expected in [[127, 0, 0, 2], [127, 0, 0, 2], [127, 0, 0, 3]] {
        let (_, from) = receiver.recv_from(&mut buffer).unwrap();
        assert_eq!(from.ip(), IpAddr::from(expected));
    }
}

/// On a connected socket the messages go to the connected address from
/// the bound one, whatever destination and source they name (the caller
/// names them only for the per-message send).
#[test]
fn connected_gso_messages_use_the_sockets_addresses() {
    let receiver = UdpSocket::bind("0.0.0.0:0").unwrap();
    receiver
        .set_read_timeout(Some(Duration::from_secs(2)))
        .unwrap();
    let sender = UdpSocket::bind("[::ffff:127.0.0.4]:0").unwrap();
    let port = receiver.local_addr().unwrap().port();
    sender.connect(("::ffff:127.0.0.1", port)).unwrap();
    let data = [9u8; 300];
    let run = [IoSlice::new(&data)];
    let messages = [GsoMessage {
        destination: SocketAddr::from(([127, 0, 0, 9], 9)),
        source: Some(IpAddr::from([127, 0, 0, 5])),
        pieces: &run,
        segment_size: Some(100),
    }];
    assert_eq!(
        send_gso_messages_connected(sender.as_fd(), &messages).unwrap(),
        1
    );
    let bound = SocketAddr::from(([127, 0, 0, 4], sender.local_addr().unwrap().port()));
    let mut buffer = [0u8; 1000];
    for _ in 0..3 {
        let (len, from) = receiver.recv_from(&mut buffer).unwrap();
        assert_eq!((len, from), (100, bound));
    }
}

#[test]
fn precise_sleep_clocks_and_socket_options() {
    set_thread_timer_slack(Duration::from_micros(10)).unwrap();
    let start = std::time::Instant::now();
    let before = monotonic_nanos();
    let [] = wait_readable([], Some(Duration::from_millis(2))).unwrap();
    let slept = start.elapsed();
    assert!(slept >= Duration::from_millis(2), "{slept:?}");
    assert!(monotonic_nanos() - before >= 2_000_000);
    assert!(thread_cpu_time() > Duration::ZERO);

    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    let size = force_buffer_size(socket.as_fd(), SocketBuffer::Receive, 1 << 20).unwrap();
    assert!(size > 0);
    assert_eq!(socket_drops(socket.as_fd()).unwrap(), 0);
    let [ready] = wait_readable([socket.as_fd()], Some(Duration::from_millis(1))).unwrap();
    assert!(!ready.is_ready());
}
