//! Replays the committed `config_parse`, `uapi_request` and
//! `metrics_request` fuzz seeds through the functions the cargo-fuzz
//! targets run, so stable CI exercises them without nightly.

#[path = "../../../fuzz/src/fjord_targets.rs"]
mod fjord_targets;

#[path = "../../../fuzz/src/replay.rs"]
mod replay;

use replay::replay;

#[test]
fn config_parse_seeds() {
    replay("config_parse", fjord_targets::config_parse);
}

#[test]
fn uapi_request_seeds() {
    replay("uapi_request", fjord_targets::uapi_request);
}

#[test]
fn metrics_request_seeds() {
    replay("metrics_request", fjord_targets::metrics_request);
}
