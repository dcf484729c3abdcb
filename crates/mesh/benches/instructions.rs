//! The per-packet paths of `datapath`, for an instruction count: each
//! case (open or seal, node or raw AEAD, cipher, payload size) runs a
//! fixed number of packets through the loop `datapath` times
//! (`support/pair.rs`), a function of its own, which
//! `valgrind --tool=callgrind --toggle-collect` counts alone.
//!
//! Why beside the timed benchmark: on a shared 2-vCPU machine
//! criterion's figures move 5–15 % from one run to the next (the same
//! binary, minutes apart), more than most changes to the per-packet path;
//! an instruction count is the same every run. It is not time (a stalled
//! load costs more than many instructions, and under valgrind ring's AES
//! takes its AES-NI path, not VAES), so a change that counts fewer
//! instructions still needs `datapath` to show it is faster.
//!
//! `crates/mesh/benches/count-instructions.sh` builds this, runs every
//! case under callgrind and prints instructions per packet: the node's,
//! the raw AEAD's, and the difference, the node's own work. Run alone
//! (`cargo bench --bench instructions`), it runs each case once on a few
//! packets, which checks that every case still works.
//!
//! Arguments: `CASE PACKETS`, CASE being `open|seal/node|raw/chacha|aes/64|1420`
//! (as in `datapath`), or none for every case.

use fjord_proto::aead::TransportKey;
use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, DataCipher};

#[path = "support/pair.rs"]
mod pair;
mod support;

use pair::{
    CIPHERS, PAYLOADS, connected_pair, open_node, open_raw, raw_sealed_batch, seal_node, seal_raw,
    sealed_batch,
};

/// Packets per case when run without arguments.
const SMOKE_PACKETS: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Direction {
    Open,
    Seal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    Node,
    Raw,
}

#[derive(Debug, Clone, Copy)]
struct Case {
    direction: Direction,
    path: Path,
    cipher: DataCipher,
    payload: usize,
}

impl Case {
    fn all() -> Vec<Case> {
        let mut cases = Vec::new();
        for direction in [Direction::Open, Direction::Seal] {
            for path in [Path::Node, Path::Raw] {
                for (cipher, _) in CIPHERS {
                    for payload in PAYLOADS {
                        cases.push(Case {
                            direction,
                            path,
                            cipher,
                            payload,
                        });
                    }
                }
            }
        }
        cases
    }

    fn parse(text: &str) -> Option<Case> {
        let mut parts = text.split('/');
        let direction = match parts.next()? {
            "open" => Direction::Open,
            "seal" => Direction::Seal,
            _ => return None,
        };
        let path = match parts.next()? {
            "node" => Path::Node,
            "raw" => Path::Raw,
            _ => return None,
        };
        let cipher_name = parts.next()?;
        let (cipher, _) = CIPHERS.into_iter().find(|(_, name)| *name == cipher_name)?;
        let payload = parts.next()?.parse().ok()?;
        if parts.next().is_some() || !PAYLOADS.contains(&payload) {
            return None;
        }
        Some(Case {
            direction,
            path,
            cipher,
            payload,
        })
    }

    /// Sets the case up (handshake, sealed datagrams: not counted) and
    /// runs `packets` of it through the counted function.
    fn run(self, packets: usize) {
        match (self.direction, self.path) {
            (Direction::Open, Path::Node) => {
                let (mut alice, mut bob) = connected_pair(self.cipher);
                let batch = sealed_batch(&mut alice, self.payload, packets);
                let mut work = vec![0u8; 2048];
                open_node(&mut bob, &batch, &mut work);
                // A count of a path that refused its packets would mislead.
                assert_eq!(bob.drops().total(), 0, "{self:?}: packets refused");
            }
            (Direction::Open, Path::Raw) => {
                let key = TransportKey::with_cipher(self.cipher, &[7u8; 32]);
                let batch = raw_sealed_batch(&key, self.payload, packets);
                let mut work = vec![0u8; 2048];
                open_raw(&key, &batch, &mut work);
            }
            (Direction::Seal, Path::Node) => {
                let (mut alice, _bob) = connected_pair(self.cipher);
                let mut buf = vec![0u8; DATA_HEADROOM + self.payload + DATA_TAILROOM];
                seal_node(&mut alice, &mut buf, self.payload, packets);
                assert_eq!(alice.drops().total(), 0, "{self:?}: packets refused");
            }
            (Direction::Seal, Path::Raw) => {
                let key = TransportKey::with_cipher(self.cipher, &[7u8; 32]);
                let mut work = vec![0x5au8; self.payload];
                seal_raw(&key, &mut work, &mut 0, packets);
            }
        }
    }
}

fn main() {
    // `cargo bench` passes `--bench` (and perhaps a filter); only our own
    // two arguments choose a case.
    let arguments: Vec<String> = std::env::args()
        .skip(1)
        .filter(|argument| !argument.starts_with("--"))
        .collect();
    match arguments.as_slice() {
        [case, packets] => {
            let (Some(case), Ok(packets)) = (Case::parse(case), packets.parse()) else {
                eprintln!(
                    "usage: instructions [open|seal/node|raw/chacha|aes/64|1420 PACKETS]; got {case} {packets}"
                );
                std::process::exit(2);
            };
            case.run(packets);
        }
        _ => {
            for case in Case::all() {
                case.run(SMOKE_PACKETS);
            }
            println!("instructions: every case ran {SMOKE_PACKETS} packets");
        }
    }
}
