//! Many UDP sends in one `sendmmsg`, each message a GSO run.
//!
//! A turn of TUN reads leaves runs of sealed datagrams for several peers or
//! of several lengths: a 1,500-byte packet through a 1,420-byte tunnel
//! leaves as two fragments of different lengths, a run of its own, so small
//! frames sent at a high rate would cost one system call per packet pair.
//! One call carries them all instead. Each message gathers its datagrams
//! from where they were sealed, an iovec apiece, so nothing is packed first.

use std::io;
use std::os::fd::AsFd;

pub use fjord_sys::mmsg::GsoMessage;

use crate::udp::UdpTransport;

/// Most messages one [`send_messages`] call hands the kernel.
pub const SEND_BATCH: usize = 64;

/// Sends the first up to [`SEND_BATCH`] messages with one `sendmmsg` and
/// returns how many the kernel took. An error is the first message's; a
/// short count means the next one would have failed (send it again to
/// learn why).
pub fn send_messages(udp: &UdpTransport, messages: &[GsoMessage<'_>]) -> io::Result<usize> {
    let messages = &messages[..messages.len().min(SEND_BATCH)];
    let Some(first) = messages.first() else {
        return Ok(0);
    };
    if udp.steered.is_empty() && udp.carriers.is_empty() {
        return fjord_sys::mmsg::send_gso_messages(udp.as_fd(), messages);
    }
    // A run to a carrier is framed into its stream (what it cannot take
    // is dropped, never an error).
    let carried = udp.carriers.send_messages(messages);
    if carried > 0 {
        return Ok(carried);
    }
    // One call per socket: the run of messages that leave through the
    // first one's; the caller comes back for the rest.
    let route = udp.route(first.destination);
    let same = messages
        .iter()
        .take_while(|message| {
            std::ptr::eq(udp.route(message.destination), route)
                && !udp.carriers.carries(message.destination)
        })
        .count();
    let run = &messages[..same];
    if route.sends_connected(run) {
        return fjord_sys::mmsg::send_gso_messages_connected(route.as_fd(), run);
    }
    // Messages with their own addresses are written for a dual-stack
    // socket: an IPv4 one (connected to an IPv4 endpoint) leaves them to
    // the interface's socket, on the same port.
    let socket = if route.is_dual_stack() { route } else { udp };
    fjord_sys::mmsg::send_gso_messages(socket.as_fd(), run)
}

/// What one [`send_or_wait`] call did.
pub enum Sent {
    /// The kernel took this many messages (at least one).
    Count(usize),
    /// Nothing yet: interrupted, or waited for room; call again.
    Again,
    /// The first message failed with this error (after three waits for
    /// room, a full buffer too): the caller decides its fate.
    Failed(io::Error),
}

/// [`send_messages`], waiting up to 50 ms for room when the send buffer is
/// full: back-pressure that TCP inside the tunnel should feel, rather than
/// drops. `waits` counts the waits since the last progress.
pub fn send_or_wait(udp: &UdpTransport, messages: &[GsoMessage<'_>], waits: &mut u8) -> Sent {
    match send_messages(udp, messages) {
        Ok(sent) => {
            *waits = 0;
            Sent::Count(sent)
        }
        Err(error) if error.kind() == io::ErrorKind::WouldBlock && *waits < 3 => {
            // The socket that was full: a peer's own socket when steered.
            // Waiting on the interface's socket instead returned at once,
            // and the run was dropped after three empty waits.
            let full = messages
                .first()
                .map_or(udp, |first| udp.route(first.destination));
            fjord_sys::poll::wait_writable(full.as_fd(), std::time::Duration::from_millis(50));
            *waits += 1;
            Sent::Again
        }
        Err(error) if error.kind() == io::ErrorKind::Interrupted => Sent::Again,
        Err(error) => {
            *waits = 0;
            Sent::Failed(error)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn_udp::RecvMeta;
    use std::io::{IoSlice, IoSliceMut};
    use std::net::SocketAddr;

    /// A run to a steered endpoint whose socket is connected goes without
    /// per-message addresses, from the address the socket is bound to; a
    /// source the socket is not bound to keeps the per-message send.
    #[test]
    fn runs_to_a_connected_endpoint_use_its_socket_as_connected() {
        let mut interface = UdpTransport::bind(0, 0).unwrap();
        let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        peer.set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        let to_peer = peer.local_addr().unwrap();
        let local = std::net::IpAddr::from([127, 0, 0, 6]);
        let connected = UdpTransport::connected(interface.port(), to_peer, Some(local), 0).unwrap();
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
        assert!(!interface.sends_connected(&[message(None)]));
        assert_eq!(
            send_messages(&interface, &[message(Some(local))]).unwrap(),
            1
        );
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
        assert_eq!(
            send_messages(&interface, &[message(Some(other))]).unwrap(),
            1
        );
        for _ in 0..2 {
            let (len, from) = peer.recv_from(&mut buffer).unwrap();
            assert_eq!((len, from), (60, SocketAddr::new(other, interface.port())));
        }
    }

    /// Three messages in one call: a GSO run gathered from two pieces, a
    /// lone short datagram, and a run whose last datagram is shorter.
    #[test]
    fn messages_arrive_as_their_datagrams_in_order() {
        let a = UdpTransport::bind(0, 0).unwrap();
        let b = UdpTransport::bind(0, 0).unwrap();
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
        assert_eq!(send_messages(&a, &messages).unwrap(), 3);

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
}
