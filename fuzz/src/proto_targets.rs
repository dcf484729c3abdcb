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
    CompressionPolicy, DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, Incoming, Opened,
    PeerConfig, PeerId, PresharedKey, PrivateKey, Received, Rng, Sent, WallClock,
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

/// Runs the operations `input` holds, at most [`MAX_OPERATIONS`]: each
/// is a byte, and `step` gets it modulo 8 with the rest of the input.
pub(crate) fn run_operations<'a>(input: &mut Input<'a>, mut step: impl FnMut(u8, &mut Input<'a>)) {
    for _ in 0..MAX_OPERATIONS {
        let Some(op) = input.byte() else { break };
        step(op % 8, input);
    }
}

/// A world whose target the fuzzer feeds datagrams, from the honest peer's
/// address or a stranger's: what `device_datagram` and `node_session`
/// share.
pub(crate) trait FedTarget {
    /// The honest peer's address.
    const PEER_ADDR: &'static str;
    /// Addresses nobody configured.
    const STRANGER_ADDRS: [&'static str; 2];

    type Target: Receive;

    /// The target, how it is fed, and the time now.
    fn parts(&mut self) -> (&mut Self::Target, &mut Intake, Instant);

    /// Checks what the target made of `datagram`.
    fn check(&self, received: Received, datagram: &[u8]);

    /// Collects what everyone wants to send; `small_buffer` is a careless
    /// driver's.
    fn drain(&mut self, small_buffer: bool);

    /// The source `choice` picks: the honest peer half the time.
    fn source(&self, choice: u8) -> SocketAddr {
        match choice % 4 {
            0 | 1 => address(Self::PEER_ADDR),
            other => address(Self::STRANGER_ADDRS[usize::from(other - 2)]),
        }
    }

    /// Hands the target one datagram (see [`Intake::feed`]) and checks
    /// what came out.
    fn feed_target(&mut self, from: SocketAddr, mut datagram: Vec<u8>) {
        let (target, intake, now) = self.parts();
        let received = intake.feed(target, (now, from), &mut datagram);
        self.check(received, &datagram);
    }

    /// Feeds the target an arbitrary datagram (a u16 length, then the
    /// bytes) from a source the input picks.
    fn feed_arbitrary(&mut self, input: &mut Input<'_>) {
        let from = self.source(input.u8());
        let len = usize::from(input.u16() % 2048);
        let datagram = input.bytes(len).to_vec();
        self.feed_target(from, datagram);
        self.drain(false);
    }

    /// Feeds the target a remembered datagram, truncated or extended.
    fn replay(&mut self, input: &mut Input<'_>) {
        let Some(datagram) = self.parts().1.history.pick(input) else {
            return;
        };
        let from = self.source(input.u8());
        self.feed_target(from, datagram);
        self.drain(false);
    }
}

/// The receive calls a [`Device`] and a mesh node share, so that
/// [`receive`] drives either.
pub(crate) trait Receive {
    fn handle(
        &mut self,
        now: Instant,
        from: SocketAddr,
        datagram: &mut [u8],
        decompressed: &mut [u8],
    ) -> Received;

    fn prepare(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) -> Incoming<'_>;

    fn finish(
        &mut self,
        now: Instant,
        from: SocketAddr,
        opened: Opened,
        datagram: &[u8],
        decompressed: &mut [u8],
    ) -> Received;
}

/// Implements [`Receive`] for a type with the datagram calls of a
/// [`Device`] (`handle_datagram`, `prepare_datagram`, `finish_datagram`).
macro_rules! receive_by_datagram_calls {
    ($receiver:ty) => {
        impl $crate::proto_targets::Receive for $receiver {
            fn handle(
                &mut self,
                now: ::std::time::Instant,
                from: ::std::net::SocketAddr,
                datagram: &mut [u8],
                decompressed: &mut [u8],
            ) -> ::fjord_proto::Received {
                self.handle_datagram(now, from, datagram, decompressed)
            }

            fn prepare(
                &mut self,
                now: ::std::time::Instant,
                from: ::std::net::SocketAddr,
                datagram: &mut [u8],
            ) -> ::fjord_proto::Incoming<'_> {
                self.prepare_datagram(now, from, datagram)
            }

            fn finish(
                &mut self,
                now: ::std::time::Instant,
                from: ::std::net::SocketAddr,
                opened: ::fjord_proto::Opened,
                datagram: &[u8],
                decompressed: &mut [u8],
            ) -> ::fjord_proto::Received {
                self.finish_datagram(now, from, opened, datagram, decompressed)
            }
        }
    };
}
// Used by `node_targets`, which the proto replay does not include.
#[allow(unused_imports)]
pub(crate) use receive_by_datagram_calls;

receive_by_datagram_calls!(Device);

/// How a target is fed: the datagrams it had last, for replaying, which
/// receive path the next one takes, and where it decompresses.
pub(crate) struct Intake {
    pub(crate) history: History,
    /// Whether the next datagram takes the two-half receive path.
    split_next: bool,
    /// What the last compressed packet decompressed to.
    pub(crate) decompressed: [u8; MTU],
}

impl Default for Intake {
    fn default() -> Self {
        Self {
            history: History::default(),
            split_next: false,
            decompressed: [0; MTU],
        }
    }
}

impl Intake {
    /// Hands `receiver` one datagram, remembering it: by the one-call
    /// path, or (every other datagram) by the two halves with the AEAD
    /// detached, as a driver with crypto threads does; both must end alike.
    pub(crate) fn feed(
        &mut self,
        receiver: &mut impl Receive,
        (now, from): (Instant, SocketAddr),
        datagram: &mut [u8],
    ) -> Received {
        let decompressed = &mut self.decompressed;
        self.history.remember(datagram);
        self.split_next = !self.split_next;
        if !self.split_next {
            return receiver.handle(now, from, datagram, decompressed);
        }
        match receiver.prepare(now, from, datagram) {
            Incoming::Data(pending) => {
                let mut pending = pending.detach();
                pending.open(datagram);
                receiver.finish(now, from, pending.opened(), datagram, decompressed)
            }
            Incoming::Done(received) => received,
        }
    }
}

/// `packet` in a buffer with the headroom and tailroom sealing needs.
pub(crate) fn with_room(packet: &[u8]) -> Vec<u8> {
    let mut buf = vec![0u8; DATA_HEADROOM + packet.len() + DATA_TAILROOM];
    buf[DATA_HEADROOM..DATA_HEADROOM + packet.len()].copy_from_slice(packet);
    buf
}

/// Puts `item` in flight; a full network loses the oldest.
fn send_bounded<T>(queue: &mut Vec<T>, item: T) {
    if queue.len() == MAX_IN_FLIGHT {
        queue.remove(0);
    }
    queue.push(item);
}

/// Datagrams in flight between the target and the honest peer, until the
/// input delivers them.
#[derive(Default)]
pub(crate) struct InFlight {
    pub(crate) to_target: Vec<(SocketAddr, Vec<u8>)>,
    pub(crate) to_peer: Vec<Vec<u8>>,
}

impl InFlight {
    pub(crate) fn send_to_peer(&mut self, datagram: Vec<u8>) {
        send_bounded(&mut self.to_peer, datagram);
    }

    pub(crate) fn send_to_target(&mut self, from: SocketAddr, datagram: Vec<u8>) {
        send_bounded(&mut self.to_target, (from, datagram));
    }
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
/// mutate. Datagrams between them wait in flight.
struct World {
    now: Instant,
    target: Device,
    target_peer: PeerId,
    peer: Device,
    peer_target: PeerId,
    in_flight: InFlight,
    intake: Intake,
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
            in_flight: InFlight::default(),
            intake: Intake::default(),
        }
    }
}

impl FedTarget for World {
    const PEER_ADDR: &'static str = PEER_ADDR;
    const STRANGER_ADDRS: [&'static str; 2] = STRANGER_ADDRS;

    type Target = Device;

    fn parts(&mut self) -> (&mut Device, &mut Intake, Instant) {
        (&mut self.target, &mut self.intake, self.now)
    }

    fn check(&self, received: Received, datagram: &[u8]) {
        let len = datagram.len();
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
                let header = IpHeader::parse(&self.intake.decompressed[packet.clone()]);
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

    fn drain(&mut self, small_buffer: bool) {
        let mut buf = vec![0u8; if small_buffer { 100 } else { 2048 }];
        while let Some(transmit) = self.target.poll_transmit(&mut buf) {
            assert!(transmit.len <= buf.len());
            self.in_flight.send_to_peer(buf[..transmit.len].to_vec());
        }
        while let Some(transmit) = self.peer.poll_transmit(&mut buf) {
            assert!(transmit.len <= buf.len());
            self.in_flight
                .send_to_target(address(PEER_ADDR), buf[..transmit.len].to_vec());
        }
        while self.target.poll_event().is_some() {}
        while self.peer.poll_event().is_some() {}
    }
}

impl World {
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
        let mut buf = with_room(&packet);
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
                self.in_flight.send_to_peer(buf);
            } else {
                self.in_flight.send_to_target(from, buf);
            }
        }
    }

    /// Delivers what is in flight both ways; datagrams to the target may be
    /// mutated at one byte first.
    fn exchange(&mut self, input: &mut Input<'_>) {
        let (position, flip) = (usize::from(input.u8()), input.u8());
        for mut datagram in std::mem::take(&mut self.in_flight.to_peer) {
            let _ = self.peer.handle_datagram(
                self.now,
                address(TARGET_ADDR),
                &mut datagram,
                &mut [0; MTU],
            );
        }
        for (from, mut datagram) in std::mem::take(&mut self.in_flight.to_target) {
            if let Some(byte) = datagram.get_mut(position) {
                *byte ^= flip;
            }
            self.feed_target(from, datagram);
        }
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
    run_operations(&mut input, |op, input| match op {
        0 => world.feed_arbitrary(input),
        1 => world.advance(Duration::from_millis(u64::from(input.u16()))),
        2 => world.advance(Duration::from_secs(10 * u64::from(input.u8()))),
        3 => {
            world.encapsulate(true, input);
            world.drain(false);
        }
        4 => {
            world.encapsulate(false, input);
            world.drain(false);
        }
        5 => world.exchange(input),
        6 => world.replay(input),
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
    });
    // Whatever happened, the devices still answer queries sensibly.
    let _ = world.target.poll_timeout();
    let status = world.target.peer_status(world.target_peer);
    assert!(status.is_some(), "the configured peer is still there");
}
