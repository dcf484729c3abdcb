//! The protocol core as the worker drives it, on an established session:
//! a [`Node`] (device plus cryptokey routing) fed an interleaved sequence
//! of datagrams, TUN packets and timer events chosen by the fuzzer, so it
//! explores state transitions (rekeys, expiry, retries, roaming, replays
//! across key changes, routing to a peer without a session), not only
//! parsing.
//!
//! The world: the target node, an honest peer node that already completed
//! a handshake with it before the first operation, and a second configured
//! peer nobody answers for. Datagrams between the target and the honest
//! peer wait in flight until the input delivers them (possibly mutated).
//! After every step the outcomes are checked: a delivered packet is a
//! well-formed IP packet from the honest peer's allowed addresses, every
//! output fits its buffer, and the peers stay configured.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use fjord_mesh::{Cidr, Node, NodeEvent};
use fjord_proto::icmp::MAX_REPLY_LEN;
use fjord_proto::ip::IpHeader;
use fjord_proto::{PeerConfig, PeerId, PresharedKey, Received, Sent};

use crate::proto_targets::{
    FedTarget, InFlight, Input, Intake, MTU, address, device, receive_by_datagram_calls,
    run_operations, with_room,
};

const TARGET_ADDR: &str = "198.18.0.1:51820";
const PEER_ADDR: &str = "198.18.0.2:51820";
const SILENT_PEER_ADDR: &str = "198.18.0.3:51820";
const STRANGER_ADDRS: [&str; 2] = ["198.18.9.9:4000", "[fd00::9]:51820"];
const TARGET_OVERLAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 1);
const PEER_OVERLAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 2);
const SILENT_OVERLAY: Ipv4Addr = Ipv4Addr::new(198, 19, 0, 3);
const PEER_OVERLAY_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 2);

fn host(address: IpAddr) -> Cidr {
    Cidr::host(address)
}

/// An IPv4 or IPv6 packet of `body_len` bytes after the header, from
/// `source` to `destination` (both of one family), with a true length field.
fn ip_packet(source: IpAddr, destination: IpAddr, body_len: usize, fill: u8) -> Vec<u8> {
    match (source, destination) {
        (IpAddr::V4(source), IpAddr::V4(destination)) => {
            let mut packet = vec![fill; 20 + body_len];
            packet[0] = 0x45;
            let total = u16::try_from(packet.len()).unwrap_or(u16::MAX);
            packet[2..4].copy_from_slice(&total.to_be_bytes());
            packet[8] = 64;
            packet[9] = 17;
            packet[12..16].copy_from_slice(&source.octets());
            packet[16..20].copy_from_slice(&destination.octets());
            packet
        }
        (source, destination) => {
            let to_v6 = |address: IpAddr| match address {
                IpAddr::V6(v6) => v6,
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
            };
            let mut packet = vec![fill; 40 + body_len];
            packet[0] = 0x60;
            let payload = u16::try_from(body_len).unwrap_or(u16::MAX);
            packet[4..6].copy_from_slice(&payload.to_be_bytes());
            packet[6] = 17;
            packet[7] = 64;
            packet[8..24].copy_from_slice(&to_v6(source).octets());
            packet[24..40].copy_from_slice(&to_v6(destination).octets());
            packet
        }
    }
}

receive_by_datagram_calls!(Node);

struct World {
    now: Instant,
    target: Node,
    /// The honest peer, as the target knows it.
    target_peer: PeerId,
    /// A configured peer that never answers.
    target_silent: PeerId,
    peer: Node,
    /// The target, as the honest peer knows it.
    peer_target: PeerId,
    in_flight: InFlight,
    intake: Intake,
}

impl World {
    /// Two nodes with a completed handshake and a confirmed session.
    fn new(psk: bool) -> Self {
        let now = Instant::now();
        let mut target = Node::new(device(1, 1, now));
        let mut peer = Node::new(device(2, 2, now));
        let mut silent = device(3, 3, now);
        let preshared_key = || {
            if psk {
                PresharedKey::from_bytes([7; 32])
            } else {
                PresharedKey::zero()
            }
        };
        let config = |node: &fjord_proto::Device, endpoint: &str, keepalive: Option<u64>| {
            PeerConfig {
                // Invariant: every device here is built with a private key.
                public_key: *node.public_key().expect("configured with a key"),
                preshared_key: preshared_key(),
                endpoint: Some(address(endpoint)),
                persistent_keepalive: keepalive.map(Duration::from_secs),
            }
        };
        let peer_config = config(peer.device(), PEER_ADDR, None);
        let silent_config = config(&silent, SILENT_PEER_ADDR, None);
        let target_config = config(target.device(), TARGET_ADDR, Some(25));
        // Invariant: three distinct keys, each peer added once.
        let target_peer = target
            .add_peer(
                peer_config,
                &[host(PEER_OVERLAY.into()), host(PEER_OVERLAY_V6.into())],
            )
            .expect("first peer");
        let target_silent = target
            .add_peer(silent_config, &[host(SILENT_OVERLAY.into())])
            .expect("second peer");
        let peer_target = peer
            .add_peer(target_config, &[host(TARGET_OVERLAY.into())])
            .expect("first peer");
        let _ = silent.poll_event();
        let mut world = Self {
            now,
            target,
            target_peer,
            target_silent,
            peer,
            peer_target,
            in_flight: InFlight::default(),
            intake: Intake::default(),
        };
        world
            .target
            .device_mut()
            .initiate_handshake(target_peer, now);
        world.drain(false);
        for _ in 0..3 {
            world.deliver(None);
        }
        // The responder confirms the session with the first data it gets.
        world.peer_sends(PEER_OVERLAY.into(), TARGET_OVERLAY.into(), 32);
        let (from, mut datagram) = world
            .in_flight
            .to_target
            .pop()
            .expect("the peer sealed a packet");
        let received = world
            .target
            .handle_datagram(now, from, &mut datagram, &mut []);
        assert!(
            matches!(received, Received::Data { .. }),
            "the session is established before the fuzzer starts: {received:?}"
        );
        world.drain(false);
        world
    }

    /// A delivered packet came from the honest peer, is one whole IP
    /// packet and its source is among the peer's allowed IPs.
    fn check_delivered(&self, peer: PeerId, packet: &[u8], source: IpAddr) {
        assert_eq!(peer, self.target_peer, "only the honest peer has a session");
        let header = IpHeader::parse(packet);
        assert!(header.is_ok_and(|h| h.total_len == packet.len() && h.source == source));
        assert_eq!(
            self.target.route(&source),
            Some(peer),
            "delivered from an address the peer is not allowed"
        );
    }

    /// Delivers what is in flight both ways; each datagram to the target
    /// may be changed at one byte (`mutation`: position and XOR mask).
    fn deliver(&mut self, mutation: Option<(usize, u8)>) {
        for mut datagram in std::mem::take(&mut self.in_flight.to_peer) {
            let _ =
                self.peer
                    .handle_datagram(self.now, address(TARGET_ADDR), &mut datagram, &mut []);
        }
        for (from, mut datagram) in std::mem::take(&mut self.in_flight.to_target) {
            if let Some((position, flip)) = mutation
                && let Some(byte) = datagram.get_mut(position)
            {
                *byte ^= flip;
            }
            self.feed_target(from, datagram);
        }
        self.drain(false);
    }

    /// The honest peer seals a packet for the target (queued in flight).
    fn peer_sends(&mut self, source: IpAddr, destination: IpAddr, body_len: usize) {
        let packet = ip_packet(source, destination, body_len, 0x5a);
        let mut buf = with_room(&packet);
        if let Sent::Sealed { len, .. } =
            self.peer
                .handle_tun_packet(self.now, &mut buf, packet.len())
        {
            assert!(len <= buf.len());
            buf.truncate(len);
            self.in_flight.send_to_target(address(PEER_ADDR), buf);
        }
        self.drain(false);
    }

    /// The target's TUN device hands it a packet: to the honest peer, the
    /// silent one, or nobody; sometimes with a length field that lies, or
    /// a claimed length the buffer does not hold.
    fn target_sends(&mut self, input: &mut Input<'_>) {
        let choice = input.u8();
        let destination: IpAddr = match choice % 5 {
            0 | 1 => PEER_OVERLAY.into(),
            2 => PEER_OVERLAY_V6.into(),
            3 => SILENT_OVERLAY.into(),
            _ => Ipv4Addr::new(198, 19, 7, input.u8()).into(),
        };
        let source: IpAddr = if destination.is_ipv4() {
            TARGET_OVERLAY.into()
        } else {
            Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1).into()
        };
        let body_len = usize::from(input.u16() % 1600);
        let mut packet = ip_packet(source, destination, body_len, input.u8());
        if choice & 0x80 != 0 {
            // A header the fuzzer rewrites at one byte.
            let position = usize::from(input.u8()) % packet.len().min(40);
            packet[position] = input.u8();
        }
        let mut buf = with_room(&packet);
        let claimed_len = if choice & 0x40 != 0 {
            usize::from(input.u16())
        } else {
            packet.len()
        };
        match self
            .target
            .handle_tun_packet(self.now, &mut buf, claimed_len)
        {
            Sent::Sealed {
                len, destination, ..
            } => {
                assert!(len <= buf.len());
                if destination == address(PEER_ADDR) {
                    buf.truncate(len);
                    self.in_flight.send_to_peer(buf);
                }
            }
            Sent::Staged | Sent::Dropped(_) => {}
        }
        self.drain(false);
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.target.handle_timeout(self.now);
        self.peer.handle_timeout(self.now);
        self.drain(false);
    }

    /// Moves time to the target's next deadline, so timers fire exactly
    /// when due.
    fn advance_to_deadline(&mut self) {
        if let Some(deadline) = self.target.poll_timeout() {
            let by = deadline.saturating_duration_since(self.now);
            self.advance(by);
        }
    }
}

impl FedTarget for World {
    const PEER_ADDR: &'static str = PEER_ADDR;
    const STRANGER_ADDRS: [&'static str; 2] = STRANGER_ADDRS;

    type Target = Node;

    fn parts(&mut self) -> (&mut Node, &mut Intake, Instant) {
        (&mut self.target, &mut self.intake, self.now)
    }

    /// Collects what both nodes want to send, and what the target writes
    /// to its TUN device (ICMP "too big" replies).
    fn drain(&mut self, small_buffer: bool) {
        let mut buf = vec![0u8; if small_buffer { 100 } else { 2048 }];
        while let Some(transmit) = self.target.poll_transmit(self.now, &mut buf) {
            assert!(transmit.len <= buf.len());
            if transmit.destination == address(PEER_ADDR) {
                self.in_flight.send_to_peer(buf[..transmit.len].to_vec());
            }
        }
        while let Some(transmit) = self.peer.poll_transmit(self.now, &mut buf) {
            assert!(transmit.len <= buf.len());
            self.in_flight
                .send_to_target(address(PEER_ADDR), buf[..transmit.len].to_vec());
        }
        while let Some(event) = self.target.poll_event(self.now) {
            if let NodeEvent::TunPacket(reply) = event {
                let len = reply.len();
                assert!(len <= MAX_REPLY_LEN);
                let header = IpHeader::parse(&reply[..len]).expect("an ICMP reply parses");
                assert_eq!(header.total_len, len);
            }
        }
        while self.peer.poll_event(self.now).is_some() {}
    }

    /// A delivered packet is one whole IP packet from the honest peer.
    fn check(&self, received: Received, datagram: &[u8]) {
        let len = datagram.len();
        match received {
            Received::Data {
                peer,
                packet,
                source,
                ..
            } => {
                assert!(packet.start <= packet.end && packet.end <= len);
                self.check_delivered(peer, &datagram[packet], source);
            }
            Received::Decompressed {
                peer,
                packet,
                source,
                ..
            } => {
                assert!(packet.start <= packet.end && packet.end <= MTU);
                self.check_delivered(peer, &self.intake.decompressed[packet], source);
            }
            Received::Keepalive { peer } | Received::Extension { peer, .. } => {
                assert_eq!(peer, self.target_peer);
            }
            Received::Frame { .. } => panic!("a node in router mode delivered a frame"),
            Received::Control | Received::Dropped(_) => {}
        }
    }
}

/// A [`Node`] with an established session, fed operations:
///
/// | op % 8 | action |
/// |---|---|
/// | 0 | arbitrary datagram (u16 length, then bytes) to the target, from a chosen source |
/// | 1 | a TUN packet at the target (to the peer, the silent peer, or no route; maybe a rewritten header or a lying length) |
/// | 2 | advance time by a u16 of milliseconds, then timers |
/// | 3 | advance to the target's next deadline, or by a u8 of 10-second steps (rekey, expiry, erasure) |
/// | 4 | the honest peer sends a packet (from its own address or one it may not use) |
/// | 5 | deliver everything in flight, maybe changing one byte of each datagram to the target |
/// | 6 | replay a remembered datagram to the target, maybe truncated or extended |
/// | 7 | misc: initiate, toggle under-load, move an endpoint, limit the path, drain into a small buffer |
///
/// The first byte picks whether the peers share a preshared key. Must
/// never panic.
pub fn node_session(data: &[u8]) {
    let mut input = Input(data);
    let mut world = World::new(input.u8() & 1 == 1);
    run_operations(&mut input, |op, input| match op {
        0 => world.feed_arbitrary(input),
        1 => world.target_sends(input),
        2 => world.advance(Duration::from_millis(u64::from(input.u16()))),
        3 => match input.u8() {
            0 => world.advance_to_deadline(),
            steps => world.advance(Duration::from_secs(10 * u64::from(steps))),
        },
        4 => {
            let choice = input.u8();
            let source: IpAddr = if choice & 1 == 0 {
                PEER_OVERLAY.into()
            } else {
                // Not the peer's to use: the target must drop it.
                SILENT_OVERLAY.into()
            };
            let body_len = usize::from(input.u16() % 1500);
            world.peer_sends(source, TARGET_OVERLAY.into(), body_len);
        }
        5 => {
            let mutation = (usize::from(input.u8()), input.u8());
            world.deliver((mutation.1 != 0).then_some(mutation));
        }
        6 => world.replay(input),
        _ => match input.u8() % 6 {
            0 => {
                let id = world.target_peer;
                world.target.device_mut().initiate_handshake(id, world.now);
                world.drain(false);
            }
            1 => {
                let id = world.target_silent;
                world.target.device_mut().initiate_handshake(id, world.now);
                world.drain(false);
            }
            2 => {
                let forced = input.u8() & 1 == 1;
                world.target.device_mut().force_under_load(forced);
            }
            3 => {
                let endpoint = world.source(input.u8());
                let id = world.target_peer;
                world.target.device_mut().set_peer_endpoint(id, endpoint);
            }
            4 => {
                let limit = usize::from(input.u16());
                let id = world.target_peer;
                world
                    .target
                    .set_path_limit(id, (limit != 0).then_some(limit));
            }
            _ => world.drain(true),
        },
    });
    // Whatever happened, both peers are still configured and answer queries.
    let _ = world.target.poll_timeout();
    assert!(
        world
            .target
            .device()
            .peer_status(world.target_peer)
            .is_some()
    );
    assert!(
        world
            .target
            .device()
            .peer_status(world.target_silent)
            .is_some()
    );
    assert!(world.peer.device().peer_status(world.peer_target).is_some());
}
