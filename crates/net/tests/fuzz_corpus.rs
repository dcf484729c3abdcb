//! Replays the committed `tun_read`, `tun_coalesce`, `fragment_balance`,
//! `carrier_frames` and `fake_tcp_segment` fuzz seeds
//! through the functions the cargo-fuzz targets run, so stable CI
//! exercises them without nightly.

#[path = "../../../fuzz/src/net_targets.rs"]
mod net_targets;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn tun_read_seeds() {
    replay("tun_read", net_targets::tun_read);
}

#[test]
fn tun_coalesce_seeds() {
    replay("tun_coalesce", net_targets::tun_coalesce);
}

#[test]
fn fragment_balance_seeds() {
    replay("fragment_balance", net_targets::fragment_balance);
}

#[test]
fn carrier_frames_seeds() {
    replay("carrier_frames", net_targets::carrier_frames);
}

#[test]
fn fake_tcp_segment_seeds() {
    replay("fake_tcp_segment", net_targets::fake_tcp_segment);
}
