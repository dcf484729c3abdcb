//! Replays the committed seeds (`fuzz/seeds/<target>/`) through a target's
//! function, so stable `cargo test` exercises every target without nightly
//! or libFuzzer. The fuzz crate's own tests use it, and each main-workspace
//! crate's `tests/fuzz_corpus.rs` includes this file with `#[path]`, so it
//! depends on nothing but `std`.

use std::path::{Path, PathBuf};

/// `fuzz/seeds`, found above the crate being tested (the fuzz crate, or a
/// crate of the main workspace).
fn seeds_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .map(|dir| dir.join("fuzz/seeds"))
        .find(|seeds| seeds.is_dir())
        .unwrap_or_else(|| panic!("no fuzz/seeds above {}", manifest.display()))
}

/// Runs `target` over every seed in `fuzz/seeds/<name>/`, in name order;
/// there must be at least one.
pub fn replay(name: &str, target: fn(&[u8])) {
    let dir = seeds_root().join(name);
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("reading {}: {error}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .collect();
    seeds.sort();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    for seed in seeds {
        let bytes = std::fs::read(&seed)
            .unwrap_or_else(|error| panic!("reading {}: {error}", seed.display()));
        target(&bytes);
    }
}
