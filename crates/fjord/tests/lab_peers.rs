//! The `peers` suite's machinery, short, on fjord: a responder configured
//! with ten peers, which the lab's peer emulator plays from one process
//! (each its own key, address and session). Frames of a paced trial,
//! spread over the ten sessions, all arrive, and the responder's own
//! counters (`wg show`) say every peer's session carried some; then ten
//! TCP flows, one to each peer's overlay address through its session,
//! arrive intact. The emulator's ceiling (sealing into a sink that drops
//! everything) is measured too, as the suite does.
//!
//! Needs root; without it the test skips with one line (fails under CI).
//! No figure here is a performance threshold: the suite measures those.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use fjord_lab::emulated_peers::{
    EMULATOR_PORT, PeerEmulator, peer_overlay, peer_underlay, responder_side, route_to_peers,
};
use fjord_lab::systems::wireguard::{Fjord, Implementation, LISTEN_PORT, generate_private_key};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{HOST_LINK, LEFT_UNDERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic::BulkTransfer;
use fjord_lab::traffic::frame::FrameSizes;
use fjord_lab::traffic::udp::{Offer, Trial, UdpPath};

const PEERS: usize = 10;
const FRAMES_PER_SEC: f64 = 2_000.0;
const TRANSFER_BYTES: u64 = 8 << 20;

#[test]
fn ten_emulated_peers_each_carry_frames_and_tcp_through_their_own_session() {
    if !systems::running_as_root("the peer emulator needs root (network namespaces)") {
        return;
    }
    let fjord = Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")));
    let hosts = TwoHosts::direct().expect("two hosts");
    route_to_peers(&hosts.right, LEFT_UNDERLAY).expect("route to the peers");
    let workdir = WorkDir::create("lab-peers").expect("work directory");
    let responder_key = generate_private_key().expect("responder key");
    let mut emulator = PeerEmulator::start(
        &hosts.left,
        HOST_LINK,
        PEERS,
        &responder_key.public_key(),
        SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), LISTEN_PORT),
    )
    .expect("emulated peers");
    let side = responder_side(
        responder_key,
        LISTEN_PORT,
        RIGHT_OVERLAY,
        &emulator.public_keys(),
    );
    let responder = fjord
        .start(&hosts.right, &side, workdir.path())
        .expect("responder up");
    emulator
        .establish(Duration::from_secs(30))
        .expect("every peer completes a handshake");

    // A paced trial, spread over the sessions: nothing is lost.
    let carrier = emulator.carrier();
    let destination = SocketAddr::new(IpAddr::V4(RIGHT_OVERLAY), 6001);
    let path = UdpPath::new(&hosts.left, &hosts.right, destination).carried_by(&carrier);
    let report = Trial::rate(
        FrameSizes::fixed(64),
        FRAMES_PER_SEC,
        Duration::from_secs(1),
    )
    .run(&path)
    .expect("trial through the emulated peers");
    assert!(report.sender.offered() >= 1_900, "{:?}", report.sender);
    assert_eq!(report.lost(), 0, "{:?}", report.receiver);
    let stats = emulator.stats();
    assert_eq!(stats.peers_used, PEERS, "{stats:?}");
    assert_eq!(stats.unsealed, 0, "{stats:?}");

    // The responder saw each peer, at its own address, carry data.
    let peers = responder
        .peer_stats()
        .expect("fjord answers wg show")
        .expect("wg show dump");
    assert_eq!(peers.len(), PEERS);
    for (index, key) in emulator.public_keys().iter().enumerate() {
        let peer = peers
            .iter()
            .find(|peer| peer.public_key == *key)
            .unwrap_or_else(|| panic!("peer {index} missing from {peers:?}"));
        assert_eq!(
            peer.endpoint,
            Some(SocketAddr::new(
                IpAddr::V4(peer_underlay(index)),
                EMULATOR_PORT
            ))
        );
        assert!(peer.rx_bytes > 0, "peer {index} carried nothing: {peer:?}");
    }

    // The emulator's own ceiling: sealing into a sink that drops it all.
    let sink = SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), 9);
    let ceiling = emulator.carrier_into(sink);
    let alone = Trial::new(
        Offer::Flood {
            duration: Duration::from_millis(200),
        },
        FrameSizes::fixed(64),
    )
    .run_sender_only(&UdpPath::new(&hosts.left, &hosts.right, destination).carried_by(&ceiling))
    .expect("the emulator alone");
    assert!(alone.offered() > 0, "{alone:?}");

    // Ten TCP flows, one to each peer through its session, intact.
    emulator.open_tunnel(RIGHT_OVERLAY).expect("tunnel mode");
    let report = BulkTransfer::new(TRANSFER_BYTES)
        .streams(PEERS)
        .destinations(
            (0..PEERS)
                .map(|index| IpAddr::V4(peer_overlay(index)))
                .collect(),
        )
        .timeout(Duration::from_secs(120))
        .run(&hosts.right, &hosts.left, "0.0.0.0:5201".parse().unwrap())
        .expect("transfer to the peers");
    assert!(report.verified, "{report}");
    assert_eq!(report.bytes, TRANSFER_BYTES);
    emulator.close_tunnel().expect("back from tunnel mode");
    emulator.check().expect("the emulator's control thread");
}
