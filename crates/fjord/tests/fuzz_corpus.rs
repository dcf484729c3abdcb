//! Replays the committed `config_parse`, `uapi_request` and
//! `metrics_request` fuzz seeds through the functions the cargo-fuzz
//! targets run, so stable CI exercises them without nightly.

#[path = "../../../fuzz/src/fjord_targets.rs"]
mod fjord_targets;

use std::path::Path;

/// Runs `target` over every seed in `fuzz/seeds/<name>/`.
fn replay(name: &str, target: fn(&[u8])) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/seeds")
        .join(name);
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("seed directory") {
        let path = entry.expect("directory entry").path();
        target(&std::fs::read(&path).expect("seed file"));
        count += 1;
    }
    assert!(count > 0, "no seeds in {}", dir.display());
}

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
