use super::*;
use std::io::IoSlice;
use std::time::Duration;

/// A listening table and a table connected to it over loopback, the
/// connection open on both sides: (listening side, its slot, connecting
/// side, its slot, the connecting side's key for the connection).
fn connected_pair() -> (Carriers, usize, Carriers, usize, SocketAddr) {
    let now = Instant::now();
    let mut server = Carriers::default();
    server.listen(0, 0).unwrap();
    let port = server.listen_port().unwrap();
    let remote = SocketAddr::from(([127, 0, 0, 1], port));
    let mut client = Carriers::default();
    let Opening::Stream(client_slot) = client.connect(now, remote, 0).unwrap() else {
        panic!("a TCP connection was opened");
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    let server_slot = loop {
        if let Some(accepted) = server.accept(now, 0) {
            break accepted.unwrap().0;
        }
        assert!(Instant::now() < deadline, "no connection accepted");
        std::thread::sleep(Duration::from_millis(1));
    };
    loop {
        match client.writable(client_slot) {
            Writable::Connected(to) => {
                assert_eq!(to, remote);
                break;
            }
            Writable::Failed(to, error) => panic!("connecting to {to} failed: {error:?}"),
            Writable::Nothing => {
                assert!(Instant::now() < deadline, "never connected");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    (server, server_slot, client, client_slot, remote)
}

/// Room for four GRO-shaped messages of 64 KiB, as the worker receives.
pub(super) struct ReceiveBuffers {
    storage: Vec<u8>,
    meta: [RecvMeta; 4],
}

impl ReceiveBuffers {
    pub(super) fn new() -> Self {
        Self {
            storage: vec![0u8; 65_536 * 4],
            meta: [RecvMeta::default(); 4],
        }
    }

    /// One call of `recv`; the datagrams it brought (messages split at
    /// their stride) join `datagrams`. A receive that would block sleeps
    /// a millisecond.
    pub(super) fn receive_once(
        &mut self,
        datagrams: &mut Vec<Vec<u8>>,
        recv: impl FnOnce(&mut [IoSliceMut<'_>], &mut [RecvMeta]) -> io::Result<usize>,
    ) {
        let mut chunks = self.storage.chunks_exact_mut(65_536);
        let mut slices: [IoSliceMut<'_>; 4] =
            std::array::from_fn(|_| IoSliceMut::new(chunks.next().unwrap()));
        match recv(&mut slices, &mut self.meta) {
            Ok(messages) => {
                for (index, meta) in self.meta[..messages].iter().enumerate() {
                    let message = &self.storage[index * 65_536..][..meta.len];
                    datagrams.extend(message.chunks(meta.stride).map(<[u8]>::to_vec));
                }
            }
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => panic!("{error}"),
        }
    }
}

/// Everything `carriers` receives on `slot` within two seconds, as
/// datagrams (GRO-shaped messages split at their stride).
fn receive_all(carriers: &Carriers, slot: usize, expected: usize) -> Vec<Vec<u8>> {
    let mut buffers = ReceiveBuffers::new();
    let mut datagrams = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while datagrams.len() < expected && Instant::now() < deadline {
        buffers.receive_once(&mut datagrams, |slices, meta| {
            carriers.recv(slot, slices, meta)
        });
    }
    datagrams
}

#[test]
fn datagrams_cross_in_order_and_arrive_gro_shaped() {
    let (server, server_slot, client, _, remote) = connected_pair();
    let data: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
    // A GSO run of three 1,000-byte datagrams and a short last one, a lone
    // datagram, and a single send.
    let run = [IoSlice::new(&data[..2000]), IoSlice::new(&data[2000..3500])];
    let lone = [IoSlice::new(&data[3500..3600])];
    let messages = [
        GsoMessage {
            destination: remote,
            source: None,
            pieces: &run,
            segment_size: Some(1000),
        },
        GsoMessage {
            destination: remote,
            source: None,
            pieces: &lone,
            segment_size: None,
        },
    ];
    assert_eq!(client.send_messages(&messages), 2);
    assert!(client.send(remote, &data[4000..5400]));
    assert!(!client.send("127.0.0.1:9".parse().unwrap(), b"not carried"));

    let expected: Vec<&[u8]> = [
        0..1000,
        1000..2000,
        2000..3000,
        3000..3500,
        3500..3600,
        4000..5400,
    ]
    .into_iter()
    .map(|range| &data[range])
    .collect();
    let received = receive_all(&server, server_slot, expected.len());
    assert_eq!(received, expected);
    let stats = client.stats();
    assert_eq!((stats.datagrams_sent, stats.datagrams_dropped), (6, 0));
    assert_eq!(server.stats().datagrams_received, 6);

    // And back, to the far end the listener saw.
    let (client_side, _) = server
        .slots()
        .next()
        .map(|(slot, far)| (far, slot))
        .unwrap();
    assert!(server.send(client_side, b"reply"));
}

#[test]
fn a_backed_up_carrier_drops_rather_than_queues_and_keeps_its_framing() {
    let (server, server_slot, client, client_slot, remote) = connected_pair();
    // Nobody reads on the far side: the kernel's queues fill, and then
    // datagrams are dropped at once instead of waiting.
    let datagram = vec![0x5a; 1400];
    let mut sent = 0u64;
    for round in 0..20_000u32 {
        let mut numbered = datagram.clone();
        numbered[..4].copy_from_slice(&round.to_be_bytes());
        assert!(client.send(remote, &numbered));
        sent += 1;
        if client.stats().datagrams_dropped > 100 {
            break;
        }
    }
    let stats = client.stats();
    assert!(stats.datagrams_dropped > 100, "nothing dropped: {stats:?}");
    assert_eq!(stats.datagrams_sent + stats.datagrams_dropped, sent);
    // What went out arrives whole and in order, with gaps where drops were.
    // The frame a short write cut goes out when the stream drains.
    let mut received = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while (received.len() as u64) < stats.datagrams_sent && Instant::now() < deadline {
        received.extend(receive_all(&server, server_slot, 1));
        client.writable(client_slot);
    }
    assert_eq!(received.len() as u64, stats.datagrams_sent);
    let mut previous = None;
    for datagram in &received {
        assert_eq!(datagram.len(), 1400);
        assert!(datagram[4..].iter().all(|&byte| byte == 0x5a));
        let number = u32::from_be_bytes(datagram[..4].try_into().unwrap());
        assert!(previous.is_none_or(|previous| number > previous));
        previous = Some(number);
    }
}

#[test]
fn a_stranger_is_refused_and_a_closed_peer_noticed() {
    let now = Instant::now();
    let mut server = Carriers::default();
    server.listen(0, 0).unwrap();
    let port = server.listen_port().unwrap();
    let mut stranger = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut stranger, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    let slot = loop {
        if let Some(accepted) = server.accept(now, 0) {
            break accepted.unwrap().0;
        }
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(1));
    };
    assert!(receive_all(&server, slot, 1).is_empty());
    assert!(server.is_closed(slot));
    assert_eq!(server.expired(now), [slot]);

    // A peer that goes away is noticed as closed.
    let (server, server_slot, client, client_slot, _) = connected_pair();
    let mut client = client;
    client.remove(client_slot);
    drop(client);
    assert!(receive_all(&server, server_slot, 1).is_empty());
    assert!(server.is_closed(server_slot));
}

#[test]
fn silent_accepted_connections_expire() {
    let (mut server, server_slot, _client, _, _) = connected_pair();
    let start = Instant::now();
    // The preamble arrived; reading it counts as hearing the peer.
    assert!(receive_all(&server, server_slot, 1).is_empty());
    assert!(server.expired(start).is_empty());
    assert!(
        server
            .expired(start + ACCEPTED_SILENCE_LIMIT - Duration::from_secs(1))
            .is_empty()
    );
    assert_eq!(
        server.expired(start + ACCEPTED_SILENCE_LIMIT + Duration::from_secs(1)),
        [server_slot]
    );
}

/// Accepts one connection on `server` (a stranger's, opened already).
fn accept_one(server: &mut Carriers) -> usize {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(accepted) = server.accept(Instant::now(), 0) {
            break accepted.unwrap().0;
        }
        assert!(Instant::now() < deadline, "no connection accepted");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn what_a_closing_connection_shows_about_the_far_end() {
    let mut server = Carriers::default();
    server.listen(0, 0).unwrap();
    let port = server.listen_port().unwrap();
    // Fake TCP toward a TCP carrier: a bare WireGuard initiation, or,
    // when our preamble reached it before it sent anything, its answer.
    let mut initiation = [0u8; 148];
    initiation[0] = 1;
    for first_bytes in [&initiation[..], &super::framing::FAKE_TCP_ANSWER] {
        let mut fake = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        std::io::Write::write_all(&mut fake, first_bytes).unwrap();
        let slot = accept_one(&mut server);
        assert!(receive_all(&server, slot, 1).is_empty());
        assert!(server.is_closed(slot));
        let (remote, problem) = server.remove(slot).unwrap();
        assert_eq!(
            problem,
            Some(CarrierProblem::OtherCarrier {
                remote,
                ours: CarrierKind::Tcp
            })
        );
    }
    // A stranger speaking something else is no news.
    let mut stranger = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    std::io::Write::write_all(&mut stranger, b"GET / HTTP/1.1\r\n\r\n").unwrap();
    let slot = accept_one(&mut server);
    assert!(receive_all(&server, slot, 1).is_empty());
    assert_eq!(server.remove(slot).unwrap().1, None);

    // Ours toward something that accepts and never introduces itself
    // (fake TCP answers any SYN): closed after INTRODUCTION_LIMIT.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let remote = silent.local_addr().unwrap();
    let start = Instant::now();
    let mut client = Carriers::default();
    let Opening::Stream(slot) = client.connect(start, remote, 0).unwrap() else {
        panic!("a TCP connection was opened");
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while client.writable(slot) != Writable::Connected(remote) {
        assert!(Instant::now() < deadline, "never connected");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(client.expired(start).is_empty());
    assert_eq!(client.expired(start + INTRODUCTION_LIMIT), [slot]);
    assert_eq!(
        client.remove(slot).unwrap().1,
        Some(CarrierProblem::NotIntroduced { remote })
    );

    // Ours toward a port where nothing listens: refused.
    drop(silent);
    let Opening::Stream(slot) = client.connect(start, remote, 0).unwrap() else {
        panic!("a TCP connection was opened");
    };
    let outcome = loop {
        match client.writable(slot) {
            Writable::Nothing => {
                assert!(Instant::now() < deadline, "no verdict");
                std::thread::sleep(Duration::from_millis(1));
            }
            outcome => break outcome,
        }
    };
    assert_eq!(
        outcome,
        Writable::Failed(remote, io::ErrorKind::ConnectionRefused)
    );
    assert_eq!(client.remove(slot).unwrap().1, None);
}
