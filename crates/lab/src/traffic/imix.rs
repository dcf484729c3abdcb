//! IMIX: frame-size mixes, sent as a fixed, evenly interleaved pattern so
//! every run offers the same sequence of sizes.
//!
//! The mixes are data ([`BUILTIN_MIXES`]); each entry is a frame size
//! (RFC 2544 convention, FCS included) and a weight. The pattern repeats
//! every `sum(weights)` frames and spreads each size evenly over it by
//! smooth weighted round robin (every step, each size gains its weight in
//! credit; the size with most credit is sent and pays the total), so 7:4:1
//! becomes `64 570 64 64 570 64 1518 64 570 64 570 64` rather than seven
//! 64s in a row.
//!
//! The built-in mixes:
//! - `simple` — the classic Simple IMIX, 7:4:1 of 64/570/1518 bytes
//!   (average 353.8 bytes).
//! - `simple_594` — the same with 594-byte middle frames, the variant many
//!   test sets ship as "IMIX" (average 361.8 bytes).
//! - `ipsec` — a VPN-oriented mix: 90 (58.67 %), 92 (2 %), 594 (23.66 %)
//!   and 1418 bytes (15.67 %), small control and voice frames plus large
//!   frames that leave room for ESP/WireGuard overhead within a 1500-byte
//!   MTU (average 417.4 bytes).
//! - `tunnel_safe` — Simple IMIX with the large frame cut to 1438 bytes, so
//!   its 1420-byte IP packet fits WireGuard's default tunnel MTU without
//!   fragmentation (average 347.2 bytes).
//!
//! The LANCOM IPsec router study measured three mixes whose exact
//! definitions are not at hand; `simple_594`, `ipsec` and `tunnel_safe`
//! stand in for them and are named for what they are, not for that study.
//! Throughput of a mix is reported in frames/s and in frame bits/s.

use super::frame::FrameSizes;
use super::rfc2544::ThroughputSearch;

/// A named frame-size mix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imix {
    pub name: String,
    pub description: String,
    /// `(frame bytes, weight)`, in the order ties are broken.
    pub sizes: Vec<(usize, u32)>,
}

type MixTable = &'static [(&'static str, &'static str, &'static [(usize, u32)])];

/// The built-in mixes: name, description, `(frame bytes, weight)`.
pub const BUILTIN_MIXES: MixTable = &[
    (
        "simple",
        "Simple IMIX 7:4:1 of 64/570/1518",
        &[(64, 7), (570, 4), (1518, 1)],
    ),
    (
        "simple_594",
        "Simple IMIX 7:4:1 of 64/594/1518",
        &[(64, 7), (594, 4), (1518, 1)],
    ),
    (
        "ipsec",
        "VPN mix 90/92/594/1418 at 58.67/2/23.66/15.67 %",
        &[(90, 5867), (92, 200), (594, 2366), (1418, 1567)],
    ),
    (
        "tunnel_safe",
        "Simple IMIX 7:4:1 of 64/570/1438 (fits a 1420 MTU)",
        &[(64, 7), (570, 4), (1438, 1)],
    ),
];

impl Imix {
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        sizes: Vec<(usize, u32)>,
    ) -> Self {
        Self {
            name: name.into(),
            description: description.into(),
            sizes,
        }
    }

    /// Every built-in mix, in table order.
    pub fn builtin() -> Vec<Self> {
        BUILTIN_MIXES
            .iter()
            .map(|(name, description, sizes)| Self::new(*name, *description, sizes.to_vec()))
            .collect()
    }

    /// The built-in mix called `name`.
    pub fn named(name: &str) -> Option<Self> {
        Self::builtin().into_iter().find(|mix| mix.name == name)
    }

    /// Average frame bytes, by weight.
    pub fn average_bytes(&self) -> f64 {
        let total: u64 = self
            .sizes
            .iter()
            .map(|&(_, weight)| u64::from(weight))
            .sum();
        if total == 0 {
            return 0.0;
        }
        let bytes: u64 = self
            .sizes
            .iter()
            .map(|&(size, weight)| size as u64 * u64::from(weight))
            .sum();
        bytes as f64 / total as f64
    }

    /// The repeating pattern (smooth weighted round robin), named after the mix.
    pub fn frame_sizes(&self) -> FrameSizes {
        let sizes: Vec<(usize, i64)> = self
            .sizes
            .iter()
            .filter(|&&(_, weight)| weight > 0)
            .map(|&(size, weight)| (size, i64::from(weight)))
            .collect();
        let total: i64 = sizes.iter().map(|&(_, weight)| weight).sum();
        let mut credit = vec![0i64; sizes.len()];
        let mut pattern = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
        for _ in 0..total {
            let mut best = 0;
            for (index, &(_, weight)) in sizes.iter().enumerate() {
                credit[index] += weight;
                if credit[index] > credit[best] {
                    best = index;
                }
            }
            credit[best] -= total;
            pattern.push(sizes[best].0);
        }
        FrameSizes::pattern(self.name.clone(), pattern)
    }

    /// An RFC 2544 throughput search over this mix (quick or full trials).
    pub fn throughput_search(&self, full: bool) -> ThroughputSearch {
        if full {
            ThroughputSearch::full(self.frame_sizes())
        } else {
            ThroughputSearch::quick(self.frame_sizes())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simple_mix_interleaves_evenly_and_deterministically() {
        let sizes = Imix::named("simple").unwrap().frame_sizes();
        assert_eq!(
            sizes.as_slice(),
            &[64, 570, 64, 64, 570, 64, 1518, 64, 570, 64, 570, 64]
        );
        assert_eq!(sizes, Imix::named("simple").unwrap().frame_sizes());
        assert_eq!(sizes.name(), "simple");
        assert!((sizes.average_bytes() - 353.83).abs() < 0.01);
    }

    #[test]
    fn every_builtin_mix_keeps_its_proportions() {
        for mix in Imix::builtin() {
            let sizes = mix.frame_sizes();
            let total: u32 = mix.sizes.iter().map(|&(_, weight)| weight).sum();
            assert_eq!(sizes.as_slice().len(), total as usize, "{}", mix.name);
            for &(size, weight) in &mix.sizes {
                let count = sizes.as_slice().iter().filter(|&&s| s == size).count();
                assert_eq!(count, weight as usize, "{} {size}", mix.name);
            }
            assert!((sizes.average_bytes() - mix.average_bytes()).abs() < 1e-9);
            // No size runs longer than its fair share allows.
            let longest_run = sizes
                .as_slice()
                .chunk_by(|a, b| a == b)
                .map(<[usize]>::len)
                .max()
                .unwrap();
            assert!(longest_run <= 3, "{}: run of {longest_run}", mix.name);
        }
        assert!((Imix::named("ipsec").unwrap().average_bytes() - 417.384).abs() < 1e-9);
        assert!((Imix::named("tunnel_safe").unwrap().average_bytes() - 347.17).abs() < 0.01);
        assert!((Imix::named("simple_594").unwrap().average_bytes() - 361.83).abs() < 0.01);
    }
}
