//! Fuzz target bodies for `fjord_proto`, as plain functions of the input.
//!
//! The cargo-fuzz binaries call these, and `crates/proto/tests/fuzz_corpus.rs`
//! includes this file to replay the committed seeds on stable, so this file
//! depends on nothing but `fjord_proto` and `std`. Each function panics only
//! when it finds a bug: a panic inside the library, or a broken invariant
//! checked here.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::compression::{self, COMPRESSED_LZ4_MARKER, Codec, Compressor};
use fjord_proto::ip::IpHeader;
use fjord_proto::negotiation::Offer;
use fjord_proto::wire::{
    COOKIE_REPLY_LEN, HANDSHAKE_INITIATION_LEN, HANDSHAKE_RESPONSE_LEN, Message,
};
use fjord_proto::{
    CompressionPolicy, DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, Incoming, PeerConfig,
    PeerId, PresharedKey, PrivateKey, Received, Rng, Sent, WallClock,
};

/// The tunnel MTU of the fuzzed devices and of decompression.
pub(crate) const MTU: usize = 1420;

thread_local! {
    /// Both codecs' decoders, kept between inputs as the tunnel keeps them
    /// between packets.
    static DECOMPRESSOR: std::cell::RefCell<Compressor> =
        std::cell::RefCell::new(Compressor::with_zstd().expect("zstd contexts"));
}

/// `Message::parse` on arbitrary bytes, reading every field of a success;
/// and the same bytes as the plaintext of a session offer
/// (`fjord_proto::negotiation`), whose success must survive re-encoding,
/// and as the plaintext of a compressed packet
/// (`fjord_proto::compression`, LZ4 or zstd), which decompresses to
/// exactly the length it claims and never past the limit.
pub fn wire_parse(data: &[u8]) {
    if let Ok(offer) = Offer::decode(data) {
        assert!(Offer::is_protocol_extension(data));
        assert_eq!(Offer::decode(&offer.encode()), Ok(offer));
    }
    let mut out = [0u8; MTU];
    // Also with a buffer shorter than the limit, as a careless driver's.
    for (room, limit) in [(MTU, MTU), (MTU / 2, MTU)] {
        if let Ok(len) = compression::decompress(data, &mut out[..room], limit) {
            assert_eq!(data[0], COMPRESSED_LZ4_MARKER);
            assert!(len <= room && len <= limit);
            assert_eq!(usize::from(u16::from_be_bytes([data[1], data[2]])), len);
        }
        let both =
            DECOMPRESSOR.with_borrow_mut(|codecs| codecs.decompress(data, &mut out[..room], limit));
        if let Ok(len) = both {
            assert!(Codec::of(data).is_some());
            assert!(len <= room && len <= limit);
            assert_eq!(usize::from(u16::from_be_bytes([data[1], data[2]])), len);
        }
    }
    match Message::parse(data) {
        Ok(Message::HandshakeInitiation(m)) => {
            assert_eq!(data.len(), HANDSHAKE_INITIATION_LEN);
            let _ = (m.sender_index(), m.ephemeral(), m.encrypted_static());
            let _ = (m.encrypted_timestamp(), m.mac1(), m.mac2());
        }
        Ok(Message::HandshakeResponse(m)) => {
            assert_eq!(data.len(), HANDSHAKE_RESPONSE_LEN);
            let _ = (m.sender_index(), m.receiver_index(), m.ephemeral());
            let _ = (m.encrypted_nothing(), m.mac1(), m.mac2());
        }
        Ok(Message::CookieReply(m)) => {
            assert_eq!(data.len(), COOKIE_REPLY_LEN);
            let _ = (m.receiver_index(), m.nonce(), m.encrypted_cookie());
        }
        Ok(Message::TransportData(m)) => {
            let _ = (m.receiver_index(), m.counter());
            assert_eq!(m.ciphertext_len() + 16, data.len());
            let aes = m.cipher() == fjord_proto::DataCipher::Aes256Gcm;
            assert_eq!(aes, data[1] == 1);
        }
        Err(_) => {}
    }
}

/// `IpHeader::parse` on arbitrary bytes; a success must describe bytes
/// that are really there.
pub fn ip_header(data: &[u8]) {
    if let Ok(header) = IpHeader::parse(data) {
        assert!(header.total_len <= data.len());
        assert!(header.total_len >= 20);
        assert_eq!(header.source.is_ipv4(), data[0] >> 4 == 4);
        assert_eq!(header.source.is_ipv4(), header.destination.is_ipv4());
    }
}

/// A "packet too big" decision for an arbitrary packet: the first two
/// bytes are the path's limit, the rest the packet. A reply must be an IP
/// packet of its own length, from the packet's destination to its
/// source, no longer than the RFCs allow.
pub fn icmp_too_big(data: &[u8]) {
    use fjord_proto::icmp::{MAX_REPLY_LEN, TooBig, too_big_reply};
    let Some((mtu, packet)) = data.split_first_chunk::<2>() else {
        return;
    };
    let mut out = [0u8; MAX_REPLY_LEN];
    let TooBig::Reply { len } =
        too_big_reply(packet, usize::from(u16::from_be_bytes(*mtu)), &mut out)
    else {
        return;
    };
    assert!(len <= MAX_REPLY_LEN);
    let reply = IpHeader::parse(&out[..len]).expect("a reply parses");
    assert_eq!(reply.total_len, len);
    if let Ok(original) = IpHeader::parse(packet) {
        assert_eq!(reply.source, original.destination);
        assert_eq!(reply.destination, original.source);
    }
    if reply.source.is_ipv4() {
        assert!(len <= 576);
    }
}

/// SplitMix64, seeded: the devices need randomness, the fuzzer needs
/// every run of one input to behave the same.
struct FuzzRng(u64);

impl Rng for FuzzRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for chunk in dest.chunks_mut(8) {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            let bytes = (z ^ (z >> 31)).to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

/// Reads operations and their arguments off the fuzz input; runs out as zeros.
pub(crate) struct Input<'a>(pub(crate) &'a [u8]);

impl<'a> Input<'a> {
    pub(crate) fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(first)
    }

    pub(crate) fn u8(&mut self) -> u8 {
        self.byte().unwrap_or(0)
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn bytes(&mut self, len: usize) -> &'a [u8] {
        let (head, rest) = self.0.split_at(len.min(self.0.len()));
        self.0 = rest;
        head
    }
}

const TARGET_ADDR: &str = "192.0.2.1:51820";
const PEER_ADDR: &str = "198.51.100.2:51820";
const STRANGER_ADDRS: [&str; 2] = ["203.0.113.9:4000", "[2001:db8::9]:51820"];
/// Datagrams remembered for replaying (mutated) to the target.
const HISTORY: usize = 16;
/// Operations per input, so each run stays fast.
const MAX_OPERATIONS: usize = 512;
/// Datagrams in flight each way; a fuller network loses the oldest.
const MAX_IN_FLIGHT: usize = 64;

/// Puts `item` in flight; a full network loses the oldest.
pub(crate) fn send_bounded<T>(queue: &mut Vec<T>, item: T) {
    if queue.len() == MAX_IN_FLIGHT {
        queue.remove(0);
    }
    queue.push(item);
}

/// The last datagrams a target was fed, for replaying.
#[derive(Default)]
pub(crate) struct History(Vec<Vec<u8>>);

impl History {
    pub(crate) fn remember(&mut self, datagram: &[u8]) {
        if self.0.len() == HISTORY {
            self.0.remove(0);
        }
        self.0.push(datagram.to_vec());
    }

    /// A remembered datagram the input picks: as it was, truncated, or
    /// with a byte more.
    pub(crate) fn pick(&self, input: &mut Input<'_>) -> Option<Vec<u8>> {
        if self.0.is_empty() {
            return None;
        }
        let mut datagram = self.0[usize::from(input.u8()) % self.0.len()].clone();
        match input.u8() % 3 {
            0 => {}
            1 => datagram.truncate(usize::from(input.u8())),
            _ => datagram.push(input.u8()),
        }
        Some(datagram)
    }
}

/// Two devices that know each other: the target, fed fuzz input, and an
/// honest peer that gives the fuzzer real handshakes and sessions to
/// mutate. Datagrams between them wait in `to_target` / `to_peer`.
struct World {
    now: Instant,
    target: Device,
    target_peer: PeerId,
    peer: Device,
    peer_target: PeerId,
    to_target: Vec<(SocketAddr, Vec<u8>)>,
    to_peer: Vec<Vec<u8>>,
    history: History,
    /// Whether the next datagram takes the two-half receive path.
    split_next: bool,
}

pub(crate) fn address(text: &str) -> SocketAddr {
    // Invariant: the constants above are valid socket addresses.
    text.parse().expect("constant address")
}

pub(crate) fn device(key: u8, rng_seed: u64, base: Instant) -> Device {
    Device::new(
        DeviceConfig {
            private_key: Some(PrivateKey::from_bytes([key; 32])),
            mtu: MTU,
        },
        Box::new(FuzzRng(rng_seed)),
        WallClock {
            base,
            base_since_epoch: Duration::from_secs(1_700_000_000),
        },
    )
}

impl World {
    /// `compress`: both devices offer compression, so data between them
    /// (the fuzzer's zero-filled packets compress well) travels
    /// compressed and the target decompresses what arrives.
    fn new(psk: bool, compress: bool) -> Self {
        let now = Instant::now();
        let mut target = device(1, 1, now);
        let mut peer = device(2, 2, now);
        if compress {
            // The target takes both codecs; the peer sends zstd in the
            // sessions with a preshared key and LZ4 in the others.
            let peer_policy = if psk {
                CompressionPolicy::Zstd
            } else {
                CompressionPolicy::Lz4
            };
            target
                .set_compression_policy(CompressionPolicy::Zstd)
                .expect("zstd contexts");
            peer.set_compression_policy(peer_policy)
                .expect("zstd contexts");
        }
        let preshared_key = if psk {
            PresharedKey::from_bytes([7; 32])
        } else {
            PresharedKey::zero()
        };
        // Invariant: each device gets one peer whose key differs from its own.
        let target_peer = target
            .add_peer(PeerConfig {
                public_key: *peer.public_key().expect("configured with a key"),
                preshared_key: preshared_key.clone(),
                endpoint: Some(address(PEER_ADDR)),
                persistent_keepalive: None,
            })
            .expect("first peer");
        let peer_target = peer
            .add_peer(PeerConfig {
                public_key: *target.public_key().expect("configured with a key"),
                preshared_key,
                endpoint: Some(address(TARGET_ADDR)),
                persistent_keepalive: Some(Duration::from_secs(25)),
            })
            .expect("first peer");
        Self {
            now,
            target,
            target_peer,
            peer,
            peer_target,
            to_target: Vec::new(),
            to_peer: Vec::new(),
            history: History::default(),
            split_next: false,
        }
    }

    fn source(&self, choice: u8) -> SocketAddr {
        match choice % 4 {
            0 | 1 => address(PEER_ADDR),
            other => address(STRANGER_ADDRS[usize::from(other - 2)]),
        }
    }

    fn feed_target(&mut self, from: SocketAddr, mut datagram: Vec<u8>) {
        self.history.remember(&datagram);
        let len = datagram.len();
        let mut decompressed = [0u8; MTU];
        // Every other datagram takes the detached path a multi-threaded
        // driver uses, which must end exactly like the one-call path.
        self.split_next = !self.split_next;
        let received = if self.split_next {
            match self.target.prepare_datagram(self.now, from, &mut datagram) {
                Incoming::Data(data) => {
                    let mut data = data.detach();
                    data.open(&mut datagram);
                    self.target.finish_datagram(
                        self.now,
                        from,
                        data.opened(),
                        &datagram,
                        &mut decompressed,
                    )
                }
                Incoming::Done(received) => received,
            }
        } else {
            self.target
                .handle_datagram(self.now, from, &mut datagram, &mut decompressed)
        };
        match received {
            Received::Data { peer, packet, .. } => {
                assert_eq!(peer, self.target_peer);
                assert!(packet.start <= packet.end && packet.end <= len);
                let header = IpHeader::parse(&datagram[packet.clone()]);
                assert!(header.is_ok_and(|h| h.total_len == packet.len()));
            }
            Received::Decompressed { peer, packet, .. } => {
                assert_eq!(peer, self.target_peer);
                assert!(packet.start <= packet.end && packet.end <= MTU);
                let header = IpHeader::parse(&decompressed[packet.clone()]);
                assert!(header.is_ok_and(|h| h.total_len == packet.len()));
            }
            Received::Keepalive { peer } => assert_eq!(peer, self.target_peer),
            Received::Extension {
                peer,
                recipient,
                payload,
            } => {
                assert_eq!(peer, self.target_peer);
                assert!(payload.start < payload.end && payload.end <= len);
                // The device handles its own kinds; it never hands them on.
                assert_ne!(recipient, fjord_proto::extension::Recipient::Protocol);
            }
            Received::Frame { .. } => panic!("a device alone never returns a frame"),
            Received::Control | Received::Dropped(_) => {}
        }
    }

    fn send_to_peer(&mut self, datagram: Vec<u8>) {
        send_bounded(&mut self.to_peer, datagram);
    }

    fn send_to_target(&mut self, from: SocketAddr, datagram: Vec<u8>) {
        send_bounded(&mut self.to_target, (from, datagram));
    }

    fn drain(&mut self, small_buffer: bool) {
        let mut buf = vec![0u8; if small_buffer { 100 } else { 2048 }];
        while let Some(transmit) = self.target.poll_transmit(&mut buf) {
            assert!(transmit.len <= buf.len());
            self.send_to_peer(buf[..transmit.len].to_vec());
        }
        while let Some(transmit) = self.peer.poll_transmit(&mut buf) {
            assert!(transmit.len <= buf.len());
            self.send_to_target(address(PEER_ADDR), buf[..transmit.len].to_vec());
        }
        while self.target.poll_event().is_some() {}
        while self.peer.poll_event().is_some() {}
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.target.handle_timeout(self.now);
        self.peer.handle_timeout(self.now);
        self.drain(false);
    }

    fn encapsulate(&mut self, from_target: bool, input: &mut Input<'_>) {
        let body_len = usize::from(input.u16() % 1600);
        let honest_len = !input.u8().is_multiple_of(4);
        let mut packet = vec![0u8; 20 + body_len];
        packet[0] = 0x45;
        let total = u16::try_from(packet.len()).unwrap_or(u16::MAX);
        packet[2..4].copy_from_slice(&total.to_be_bytes());
        let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
        buf[DATA_HEADROOM..DATA_HEADROOM + packet.len()].copy_from_slice(&packet);
        // Sometimes claim a length the buffer does not have, up to lengths
        // whose padding or headroom arithmetic would overflow.
        let payload_len = if honest_len {
            packet.len()
        } else if input.u8() & 1 == 0 {
            usize::from(input.u16())
        } else {
            usize::MAX - usize::from(input.u8())
        };
        let (device, peer, from) = if from_target {
            (&mut self.target, self.target_peer, address(TARGET_ADDR))
        } else {
            (&mut self.peer, self.peer_target, address(PEER_ADDR))
        };
        if let Sent::Sealed { len, .. } = device.encapsulate(self.now, peer, &mut buf, payload_len)
        {
            assert!(len <= buf.len());
            buf.truncate(len);
            if from_target {
                self.send_to_peer(buf);
            } else {
                self.send_to_target(from, buf);
            }
        }
    }

    /// Delivers what is in flight both ways; datagrams to the target may be
    /// mutated at one byte first.
    fn exchange(&mut self, input: &mut Input<'_>) {
        let (position, flip) = (usize::from(input.u8()), input.u8());
        for mut datagram in std::mem::take(&mut self.to_peer) {
            let _ = self.peer.handle_datagram(
                self.now,
                address(TARGET_ADDR),
                &mut datagram,
                &mut [0; MTU],
            );
        }
        for (from, mut datagram) in std::mem::take(&mut self.to_target) {
            if let Some(byte) = datagram.get_mut(position) {
                *byte ^= flip;
            }
            self.feed_target(from, datagram);
        }
        self.drain(false);
    }

    /// Feeds the target a remembered datagram, truncated or extended.
    fn replay(&mut self, input: &mut Input<'_>) {
        let Some(datagram) = self.history.pick(input) else {
            return;
        };
        let from = self.source(input.u8());
        self.feed_target(from, datagram);
        self.drain(false);
    }
}

/// A [`Device`] with one configured peer, fed a sequence of operations:
///
/// | op % 8 | action |
/// |---|---|
/// | 0 | arbitrary datagram (u16 length, then bytes) to the target, from a chosen source |
/// | 1 | advance time by a u16 of milliseconds |
/// | 2 | advance time by a u8 of 10-second steps (reaches rekey, expiry, erasure) |
/// | 3 | the target encapsulates a packet (sometimes with a lying length) |
/// | 4 | the honest peer encapsulates a packet for the target |
/// | 5 | deliver everything in flight, mutating one byte of each datagram to the target |
/// | 6 | replay a remembered datagram to the target, maybe truncated or extended |
/// | 7 | misc: initiate, toggle under-load, move the endpoint, drain into a small buffer |
///
/// The first byte picks whether the two share a preshared key (bit 0) and
/// whether both offer compression (bit 1). Datagrams to
/// the target alternate between the one-call receive path and the two-half
/// one, detached (`prepare_datagram`, `detach`, `open`, `finish_datagram`).
/// Must never panic.
pub fn device_datagram(data: &[u8]) {
    let mut input = Input(data);
    let setup = input.u8();
    let mut world = World::new(setup & 1 == 1, setup & 2 == 2);
    for _ in 0..MAX_OPERATIONS {
        let Some(op) = input.byte() else { break };
        match op % 8 {
            0 => {
                let from = world.source(input.u8());
                let len = usize::from(input.u16() % 2048);
                let datagram = input.bytes(len).to_vec();
                world.feed_target(from, datagram);
                world.drain(false);
            }
            1 => world.advance(Duration::from_millis(u64::from(input.u16()))),
            2 => world.advance(Duration::from_secs(10 * u64::from(input.u8()))),
            3 => {
                world.encapsulate(true, &mut input);
                world.drain(false);
            }
            4 => {
                world.encapsulate(false, &mut input);
                world.drain(false);
            }
            5 => world.exchange(&mut input),
            6 => world.replay(&mut input),
            _ => match input.u8() % 4 {
                0 => {
                    world
                        .target
                        .initiate_handshake(world.target_peer, world.now);
                    world.drain(false);
                }
                1 => {
                    let forced = input.u8() & 1 == 1;
                    world.target.force_under_load(forced);
                }
                2 => {
                    let endpoint = world.source(input.u8());
                    world.target.set_peer_endpoint(world.target_peer, endpoint);
                }
                _ => world.drain(true),
            },
        }
    }
    // Whatever happened, the devices still answer queries sensibly.
    let _ = world.target.poll_timeout();
    let status = world.target.peer_status(world.target_peer);
    assert!(status.is_some(), "the configured peer is still there");
}
