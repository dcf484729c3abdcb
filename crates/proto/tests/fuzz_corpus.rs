//! Replays the committed fuzz seeds (`fuzz/seeds/<target>/`) through the
//! same functions the cargo-fuzz targets run, so that stable CI exercises
//! them without nightly or libFuzzer. The `cidr_parse` seeds belong to
//! `fjord-mesh` and are replayed by `cargo test` in `fuzz/`.

#[path = "../../../fuzz/src/proto_targets.rs"]
mod proto_targets;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn wire_parse_seeds() {
    replay("wire_parse", proto_targets::wire_parse);
}

#[test]
fn ip_header_seeds() {
    replay("ip_header", proto_targets::ip_header);
}

#[test]
fn icmp_too_big_seeds() {
    replay("icmp_too_big", proto_targets::icmp_too_big);
}

#[test]
fn device_datagram_seeds() {
    replay("device_datagram", proto_targets::device_datagram);
}
