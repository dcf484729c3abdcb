//! Two fjord nodes that both enable compression send compressible packets
//! compressed and everything else raw; a node that did not enable it, or
//! a plain WireGuard peer, never gets a compressed packet; compressed
//! packets where none was agreed, malformed ones and ones past the MTU
//! are dropped and counted (`crate::compression`).

use super::sim::*;
use crate::compression::test_data::{log_lines, random_bytes};
use crate::compression::{COMPRESSED_HEADER_LEN, COMPRESSED_LZ4_MARKER, COMPRESSED_ZSTD_MARKER};
use crate::{Codec, CompressionPolicy, DropReason, PeerStats, PeerStatus};

fn policies(alice: CompressionPolicy, bob: CompressionPolicy) -> PairConfig {
    let mut config = PairConfig::default();
    config.alice.compression_policy = alice;
    config.bob.compression_policy = bob;
    config
}

fn both_lz4() -> PairConfig {
    policies(CompressionPolicy::Lz4, CompressionPolicy::Lz4)
}

fn noise(bytes: usize) -> Vec<u8> {
    random_bytes(bytes, 0x9e37_79b9_7f4a_7c15)
}

fn status(pair: &Pair, who: Who) -> PeerStatus {
    let node = pair.node(who);
    node.device
        .peer_status(node.peer)
        .expect("each node has the other as its peer")
}

fn stats(pair: &Pair, who: Who) -> PeerStats {
    status(pair, who).stats
}

fn sending_compressed(pair: &Pair, who: Who) -> bool {
    status(pair, who).sending_codec.is_some()
}

#[test]
fn two_nodes_with_compression_compress_text_and_send_noise_raw() {
    let mut pair = Pair::with(both_lz4());
    pair.connect();
    assert!(sending_compressed(&pair, Alice) && sending_compressed(&pair, Bob));

    let body = log_lines(1300);
    pair.send(Alice, &body);
    let sealed = pair.last_sent(Alice, Kind::Data);
    assert!(
        sealed.bytes.len() < body.len() * 2 / 3,
        "{} bytes on the wire for {}",
        sealed.bytes.len(),
        body.len()
    );
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&body[..]));
    assert_eq!(stats(&pair, Alice).compressed_packets, 1);
    assert_eq!(stats(&pair, Bob).decompressed_packets, 1);

    let before = stats(&pair, Bob);
    let random = noise(1300);
    pair.send(Bob, &random);
    let sealed = pair.last_sent(Bob, Kind::Data);
    assert!(sealed.bytes.len() > random.len(), "raw, with its overhead");
    assert_eq!(pair.alice.delivered_bodies().last(), Some(&&random[..]));
    let after = stats(&pair, Bob);
    assert_eq!(after.compressed_packets, before.compressed_packets);
    assert_eq!(after.uncompressed_packets, before.uncompressed_packets + 1);
    assert_eq!(stats(&pair, Alice).decompressed_packets, 0);
    assert_eq!(pair.alice.device.drops().total(), 0);
    assert_eq!(pair.bob.device.drops().total(), 0);
}

/// Two zstd nodes send zstd; with a node that chose LZ4, both directions
/// use LZ4, which the zstd node accepts too.
#[test]
fn zstd_where_both_chose_it_and_lz4_with_a_node_that_has_only_lz4() {
    use CompressionPolicy::{Lz4, Zstd};
    for (alice, bob, codec) in [
        (Zstd, Zstd, Codec::Zstd),
        (Zstd, Lz4, Codec::Lz4),
        (Lz4, Zstd, Codec::Lz4),
    ] {
        let mut pair = Pair::with(policies(alice, bob));
        pair.connect();
        for who in [Alice, Bob] {
            assert_eq!(status(&pair, who).sending_codec, Some(codec));
            let body = log_lines(1300);
            pair.send(who, &body);
            assert!(pair.last_sent(who, Kind::Data).bytes.len() < body.len() * 2 / 3);
            assert_eq!(
                pair.node(who.other()).delivered_bodies().last(),
                Some(&&body[..])
            );
            assert_eq!(stats(&pair, who.other()).decompressed_packets, 1);
        }
        assert_eq!(pair.alice.device.drops().total(), 0);
        assert_eq!(pair.bob.device.drops().total(), 0);
    }
}

#[test]
fn one_side_without_compression_keeps_both_directions_raw() {
    for config in [
        policies(CompressionPolicy::Lz4, CompressionPolicy::Off),
        policies(CompressionPolicy::Off, CompressionPolicy::Lz4),
    ] {
        let mut pair = Pair::with(config);
        pair.connect();
        let body = log_lines(1300);
        for who in [Alice, Bob] {
            pair.send(who, &body);
            assert!(!sending_compressed(&pair, who));
            assert!(pair.last_sent(who, Kind::Data).bytes.len() > body.len());
            let counted = stats(&pair, who);
            assert_eq!(
                (
                    counted.compressed_packets,
                    counted.uncompressed_packets,
                    counted.decompressed_packets
                ),
                (0, 0, 0)
            );
        }
        assert_eq!(pair.alice.delivered_bodies().last(), Some(&&body[..]));
    }
}

#[test]
fn a_plain_wireguard_peer_never_gets_a_compressed_packet() {
    for plain in [Alice, Bob] {
        let mut config = both_lz4();
        match plain {
            Alice => config.alice.plain_wireguard = true,
            Bob => config.bob.plain_wireguard = true,
        }
        let mut pair = Pair::with(config);
        pair.connect();
        let body = log_lines(1300);
        let fjord = plain.other();
        pair.send(fjord, &body);
        assert!(!sending_compressed(&pair, fjord));
        assert!(pair.last_sent(fjord, Kind::Data).bytes.len() > body.len());
        assert_eq!(pair.node(plain).delivered_bodies().last(), Some(&&body[..]));
    }
}

/// A "packet" whose plaintext is a compressed packet claiming
/// `original_len`, with `block` as its LZ4 block: what a peer that
/// compresses wrongly (or where it was not agreed) would send.
fn crafted(original_len: u16, block: &[u8]) -> Vec<u8> {
    crafted_with(COMPRESSED_LZ4_MARKER, original_len, block)
}

fn crafted_with(marker: u8, original_len: u16, block: &[u8]) -> Vec<u8> {
    let mut packet = vec![marker];
    packet.extend_from_slice(&original_len.to_be_bytes());
    packet.extend_from_slice(&u16::try_from(block.len()).unwrap().to_be_bytes());
    packet.extend_from_slice(block);
    assert_eq!(packet.len(), COMPRESSED_HEADER_LEN + block.len());
    packet
}

#[test]
fn compressed_packets_where_none_was_agreed_are_refused() {
    // Bob never offered compression; Alice's driver hands her a plaintext
    // that claims to be compressed, and her device seals it as it is.
    let mut pair = Pair::with(policies(CompressionPolicy::Off, CompressionPolicy::Off));
    pair.connect();
    let delivered = pair.bob.delivered.len();
    pair.send_packet(Alice, &crafted(40, &[0x40; 40]));
    assert_eq!(pair.bob.drops(DropReason::CompressionNotNegotiated), 1);
    assert_eq!(pair.bob.delivered.len(), delivered);

    // Bob offered LZ4 only: a zstd packet is refused the same way.
    let mut pair = Pair::with(policies(CompressionPolicy::Zstd, CompressionPolicy::Lz4));
    pair.connect();
    let delivered = pair.bob.delivered.len();
    pair.send_packet(
        Alice,
        &crafted_with(COMPRESSED_ZSTD_MARKER, 40, &[0x40; 40]),
    );
    assert_eq!(pair.bob.drops(DropReason::CompressionNotNegotiated), 1);
    assert_eq!(pair.bob.delivered.len(), delivered);
}

#[test]
fn malformed_and_oversized_compressed_packets_are_dropped_and_counted() {
    let mut pair = Pair::with(both_lz4());
    pair.connect();
    let delivered = pair.bob.delivered.len();
    // Garbage for a block.
    pair.send_packet(Alice, &crafted(200, &noise(60)));
    // A valid block of a packet longer than the MTU: one literal run
    // token (15 + 255·n + rest) followed by that many bytes.
    let original = MTU + 100;
    let mut block = vec![0xf0];
    let mut rest = original - 15;
    while rest >= 255 {
        block.push(255);
        rest -= 255;
    }
    block.push(u8::try_from(rest).unwrap());
    block.extend(std::iter::repeat_n(0x45, original));
    pair.send_packet(Alice, &crafted(u16::try_from(original).unwrap(), &block));
    // The same block, claiming a shorter original than it holds.
    pair.send_packet(Alice, &crafted(1000, &block));
    assert_eq!(pair.bob.drops(DropReason::DecompressionFailed), 3);
    // A zstd frame of garbage, where zstd was agreed.
    let mut zstd = Pair::with(policies(CompressionPolicy::Zstd, CompressionPolicy::Zstd));
    zstd.connect();
    zstd.send_packet(
        Alice,
        &crafted_with(COMPRESSED_ZSTD_MARKER, 200, &noise(60)),
    );
    assert_eq!(zstd.bob.drops(DropReason::DecompressionFailed), 1);
    assert_eq!(pair.bob.delivered.len(), delivered);
    // The session carries on.
    let body = log_lines(800);
    pair.send(Alice, &body);
    assert_eq!(pair.bob.delivered_bodies().last(), Some(&&body[..]));
}
