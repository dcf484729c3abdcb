//! Replays the committed `tun_coalesce` fuzz seeds through the function
//! the cargo-fuzz target runs, so stable CI exercises it without nightly.

#[path = "../../../fuzz/src/net_targets.rs"]
mod net_targets;

use std::path::Path;

#[test]
fn tun_coalesce_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/tun_coalesce");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("seed directory") {
        let path = entry.expect("directory entry").path();
        net_targets::tun_coalesce(&std::fs::read(&path).expect("seed file"));
        count += 1;
    }
    assert!(count > 0, "no seeds in {}", dir.display());
}
