//! Compression between two fjord nodes through a real tunnel between two
//! namespaces (underlay 198.18.0.1/.2, overlay 198.19.0.1/24 and .2/24):
//! both with `--compression lz4` agree on it, carry log lines compressed
//! and random bytes raw, every byte checked by digest; two with
//! `--compression zstd` agree on zstd, and with one on `lz4` on LZ4; one
//! side without it keeps both directions uncompressed. What is checked is what a user
//! reads in `fjord show`: whether compression is on per peer, and its
//! counters.
//!
//! Needs root; without it each test skips with one line (fails under CI).

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::topology::TwoHosts;
use fjord_lab::traffic::{BulkReport, BulkTransfer, Content};
use fjord_proto::Codec;
use support::{ShownCompression, Tunnel, fjord, ready, right_overlay, show_json, show_text};

const TRANSFER_BYTES: u64 = 16 << 20;
const SINK_PORT: u16 = 5301;
/// Inner packets a full-size transfer of `TRANSFER_BYTES` takes at least
/// (1,368 bytes of TCP payload per 1,420-byte packet).
const FULL_PACKETS: u64 = TRANSFER_BYTES / 1368;

/// Moves `TRANSFER_BYTES` of `content` from left to right through the
/// tunnel and checks both digests.
fn transfer(tunnel: &Tunnel, content: Content, port: u16) -> BulkReport {
    let report = BulkTransfer::new(TRANSFER_BYTES)
        .content(content)
        .timeout(Duration::from_secs(120))
        .run(
            &tunnel.hosts.left,
            &tunnel.hosts.right,
            SocketAddr::new(right_overlay(), port),
        )
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    assert!(
        report.verified,
        "{}",
        tunnel.context(&format!("{report:?}"))
    );
    assert_eq!(report.sender_digest, report.receiver_digest);
    report
}

/// What each side's `fjord show --json` says of compression toward its
/// one peer (left, right), after checking that no compressed packet was
/// refused.
fn compression(tunnel: &Tunnel) -> (ShownCompression, ShownCompression) {
    let side = |ifname: &str| {
        let shown = show_json(ifname);
        for reason in ["compression_not_negotiated", "decompression_failed"] {
            assert_eq!(shown.drops(reason), 0, "{}", tunnel.context(reason));
        }
        match shown.compression.as_slice() {
            [Some(compression)] => *compression,
            other => panic!("{}", tunnel.context(&format!("{ifname}: {other:?}"))),
        }
    };
    (
        side(&tunnel.left_side.ifname),
        side(&tunnel.right_side.ifname),
    )
}

/// Sends log lines left to right and checks that nearly every full
/// packet went compressed, and arrived so; the sender's counters after.
fn send_text_compressed(test: &str, tunnel: &Tunnel) -> ShownCompression {
    let text = transfer(tunnel, Content::LogLines, SINK_PORT);
    let (sent, received) = compression(tunnel);
    eprintln!("{test}: text: {text}; sender {sent:?}, receiver {received:?}");
    assert!(
        sent.compressed_packets > FULL_PACKETS * 9 / 10,
        "{}",
        tunnel.context(&format!("text sent: {sent:?}"))
    );
    assert!(received.decompressed_packets >= sent.compressed_packets * 9 / 10);
    sent
}

fn up(test: &str, left: Fjord, right: Fjord) -> Tunnel {
    let hosts = TwoHosts::direct().expect("build two hosts");
    Tunnel::up_pair(test, left, right, hosts)
}

#[test]
fn fjord_nodes_compress_text_and_send_random_data_raw() {
    let test = "fjord_nodes_compress_text_and_send_random_data_raw";
    if !ready(test) {
        return;
    }
    let tunnel = up(test, fjord().compressed(), fjord().compressed());
    let (left, right) = compression(&tunnel);
    assert!(left.on && right.on, "{}", tunnel.context("negotiated"));
    assert!(show_text(&tunnel.left_side.ifname).contains("  compression: lz4, "));

    let left_text = send_text_compressed(test, &tunnel);

    let random = transfer(&tunnel, Content::Random, SINK_PORT + 1);
    let (left_random, right_random) = compression(&tunnel);
    eprintln!("{test}: random: {random}; sender {left_random:?}, receiver {right_random:?}");
    // Random bytes went raw: the raw count grew by about a packet per
    // full segment, the compressed count barely moved (headers of the
    // connection's first and last packets may compress).
    let raw = left_random.raw_packets - left_text.raw_packets;
    let compressed = left_random.compressed_packets - left_text.compressed_packets;
    assert!(
        raw > FULL_PACKETS * 9 / 10 && compressed < FULL_PACKETS / 100,
        "{}",
        tunnel.context(&format!("random: {raw} raw, {compressed} compressed"))
    );
}

#[test]
fn zstd_nodes_use_zstd_and_lz4_with_a_node_that_has_only_lz4() {
    let test = "zstd_nodes_use_zstd_and_lz4_with_a_node_that_has_only_lz4";
    if !ready(test) {
        return;
    }
    for right in [Codec::Zstd, Codec::Lz4] {
        let left = fjord().compressed_with(Codec::Zstd);
        let tunnel = up(test, left, fjord().compressed_with(right));
        for ifname in [&tunnel.left_side.ifname, &tunnel.right_side.ifname] {
            let shown = show_text(ifname);
            assert!(
                shown.contains(&format!("  compression: {}, ", right.name())),
                "{}",
                tunnel.context(&shown)
            );
        }
        send_text_compressed(test, &tunnel);
    }
}

#[test]
fn one_side_without_compression_keeps_the_tunnel_uncompressed() {
    let test = "one_side_without_compression_keeps_the_tunnel_uncompressed";
    if !ready(test) {
        return;
    }
    for (left, right) in [
        (fjord().compressed(), fjord()),
        (fjord(), fjord().compressed()),
    ] {
        let tunnel = up(test, left, right);
        let report = transfer(&tunnel, Content::LogLines, SINK_PORT);
        let (left, right) = compression(&tunnel);
        eprintln!("{test}: {report}; {left:?}, {right:?}");
        for side in [left, right] {
            assert_eq!(
                side,
                ShownCompression {
                    on: false,
                    compressed_packets: 0,
                    raw_packets: 0,
                    decompressed_packets: 0,
                },
                "{}",
                tunnel.context("compression where one side is off")
            );
        }
        assert!(show_text(&tunnel.left_side.ifname).contains("  compression: off, "));
    }
}
