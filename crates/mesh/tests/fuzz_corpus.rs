//! Replays the committed `dns_request` fuzz seeds (`fuzz/seeds/dns_request/`)
//! through the function the cargo-fuzz target runs, so that stable CI
//! exercises the name server's request path in this workspace too.

#[path = "../../../fuzz/src/names_targets.rs"]
mod names_targets;

use std::path::Path;

#[test]
fn dns_request_seeds() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/dns_request");
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).expect("seed directory") {
        let path = entry.expect("directory entry").path();
        names_targets::dns_request(&std::fs::read(&path).expect("seed file"));
        count += 1;
    }
    assert!(count > 0, "no seeds in {}", dir.display());
}
