use super::*;
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
fn empty_batches_and_nonblocking_reads_are_harmless() {
    let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
    socket.set_nonblocking(true).unwrap();
    assert_eq!(send_batch(socket.as_fd(), std::iter::empty()).unwrap(), 0);
    let mut buffer = [0u8; 16];
    let mut received = [Received::default(); 1];
    let error = recv_batch(socket.as_fd(), [&mut buffer[..]], &mut received).unwrap_err();
    assert_eq!(error.kind(), io::ErrorKind::WouldBlock);
}

#[test]
fn precise_sleep_and_thread_clock() {
    set_timer_slack(Duration::from_micros(10)).unwrap();
    let start = std::time::Instant::now();
    assert_eq!(wait_readable(&[], Duration::from_millis(2)).unwrap(), 0);
    let slept = start.elapsed();
    assert!(slept >= Duration::from_millis(2), "{slept:?}");
    let cpu = thread_cpu_time().unwrap();
    assert!(cpu > Duration::ZERO);
}

#[test]
fn unknown_interface_is_an_error() {
    assert!(interface_index("fjord-no-such0").is_err());
}
