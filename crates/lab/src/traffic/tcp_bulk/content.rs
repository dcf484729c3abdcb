//! What a transfer carries, generated from a seed on both ends: random
//! bytes or log lines.
//!
//! Random bytes (the [`Keystream`]) stand for data that is already
//! compressed or encrypted, which no layer can shorten: most traffic.
//! Log lines stand for text a compressing tunnel is for: an access log of
//! a web service, one request per line, with the fields real logs have
//! and their variety — a millisecond timestamp that moves on, a level
//! (mostly `INFO`), a module, method, path with a numeric id, status,
//! response size, duration, a random 64-bit request id in hex and a user
//! id. About 170 bytes a line, like
//!
//! ```text
//! 2026-11-26T08:14:03.512Z INFO  http::access: method=GET path=/api/v1/orders/48213 status=200 bytes=5123 duration_ms=18 request_id=3f9a1c0e7b2d4a65 user=u-0412
//! ```
//!
//! Either kind fills any split of calls alike, so the source can hash its
//! content again afterwards ([`content_digest`]).

use std::io::Write;

use xxhash_rust::xxh3::Xxh3;

use super::CHUNK_BYTES;
use super::keystream::{Keystream, chunk_len, stream_seed};

/// What a transfer carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Content {
    /// Pseudo-random bytes: incompressible, like already-compressed data.
    #[default]
    Random,
    /// Generated access-log lines: text that compresses.
    LogLines,
}

impl Content {
    /// The name results and reports use.
    pub fn name(self) -> &'static str {
        match self {
            Content::Random => "random",
            Content::LogLines => "log_lines",
        }
    }
}

/// The bytes of one stream.
pub(super) enum Generator {
    Random(Keystream),
    LogLines(LogLines),
}

impl Generator {
    pub(super) fn new(content: Content, seed: u64) -> Self {
        match content {
            Content::Random => Generator::Random(Keystream::new(seed)),
            Content::LogLines => Generator::LogLines(LogLines::new(seed)),
        }
    }

    /// Fills `buffer` with the next bytes; calls that split the content
    /// differently give the same bytes (for the keystream, as long as
    /// every call but the last covers a multiple of 32 bytes).
    pub(super) fn fill(&mut self, buffer: &mut [u8]) {
        match self {
            Generator::Random(keystream) => keystream.fill(buffer),
            Generator::LogLines(lines) => lines.fill(buffer),
        }
    }
}

/// XXH3-128 of the first `length` bytes of `seed`'s `content`, generated
/// in the same chunks as they were sent. Run after the transfer, so the
/// source's hashing never slows the sender (the sink hashes as it reads).
pub(super) fn content_digest(content: Content, seed: u64, length: u64) -> u128 {
    let mut generator = Generator::new(content, seed);
    let mut hasher = Xxh3::new();
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let mut done = 0u64;
    while done < length {
        let take = chunk_len(length - done);
        generator.fill(&mut chunk[..take]);
        hasher.update(&chunk[..take]);
        done += take as u64;
    }
    hasher.digest128()
}

const LEVELS: [&str; 8] = [
    "INFO ", "INFO ", "INFO ", "INFO ", "INFO ", "DEBUG", "WARN ", "ERROR",
];
const MODULES: [&str; 6] = [
    "http::access",
    "api::orders",
    "api::users",
    "auth::session",
    "cache::redis",
    "db::pool",
];
const METHODS: [&str; 4] = ["GET", "GET", "POST", "PUT"];
const PATHS: [&str; 6] = [
    "/api/v1/orders/",
    "/api/v1/users/",
    "/api/v1/cart/",
    "/api/v1/products/",
    "/static/img/",
    "/healthz?probe=",
];
const STATUSES: [u16; 8] = [200, 200, 200, 200, 201, 304, 404, 500];

/// Access-log lines from a seeded xorshift64*.
pub(super) struct LogLines {
    state: u64,
    /// Milliseconds since 2026-11-26T00:00:00Z.
    clock_ms: u64,
    line: Vec<u8>,
    /// How much of `line` was handed out.
    taken: usize,
}

impl LogLines {
    fn new(seed: u64) -> Self {
        let state = match stream_seed(seed, usize::MAX) {
            0 => 0x853C_49E6_748F_EA9B,
            state => state,
        };
        Self {
            state,
            clock_ms: 8 * 3_600_000,
            line: Vec::with_capacity(256),
            taken: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.state ^= self.state >> 12;
        self.state ^= self.state << 25;
        self.state ^= self.state >> 27;
        self.state.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn pick<T: Copy>(&mut self, choices: &[T]) -> T {
        choices[(self.next() % choices.len() as u64) as usize]
    }

    fn next_line(&mut self) {
        self.clock_ms += self.next() % 40;
        let ms = self.clock_ms;
        let (level, module, method, path) = (
            self.pick(&LEVELS),
            self.pick(&MODULES),
            self.pick(&METHODS),
            self.pick(&PATHS),
        );
        let (id, status) = (self.next() % 100_000, self.pick(&STATUSES));
        let (bytes, duration) = (self.next() % 20_000, self.next() % 250);
        let (request_id, user) = (self.next(), self.next() % 5_000);
        self.line.clear();
        // Writing to a Vec cannot fail.
        let _ = writeln!(
            self.line,
            "2026-11-26T{:02}:{:02}:{:02}.{:03}Z {level} {module}: method={method} path={path}{id} status={status} bytes={bytes} duration_ms={duration} request_id={request_id:016x} user=u-{user:04}",
            ms / 3_600_000 % 24,
            ms / 60_000 % 60,
            ms / 1000 % 60,
            ms % 1000,
        );
        self.taken = 0;
    }

    fn fill(&mut self, buffer: &mut [u8]) {
        let mut filled = 0;
        while filled < buffer.len() {
            if self.taken == self.line.len() {
                self.next_line();
            }
            let take = (self.line.len() - self.taken).min(buffer.len() - filled);
            buffer[filled..filled + take]
                .copy_from_slice(&self.line[self.taken..self.taken + take]);
            self.taken += take;
            filled += take;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_deterministic_chunking_independent_text() {
        let mut whole = vec![0u8; 10_000];
        Generator::new(Content::LogLines, 7).fill(&mut whole);
        let mut pieces = vec![0u8; 10_000];
        let mut generator = Generator::new(Content::LogLines, 7);
        for piece in pieces.chunks_mut(333) {
            generator.fill(piece);
        }
        assert_eq!(whole, pieces);
        let text = std::str::from_utf8(&whole).expect("text");
        let first = text.lines().next().unwrap();
        assert!(first.starts_with("2026-11-26T08:00:00."), "{first}");
        assert!(first.contains(" request_id="), "{first}");
        let mut other = vec![0u8; 10_000];
        Generator::new(Content::LogLines, 8).fill(&mut other);
        assert_ne!(whole, other);
    }

    #[test]
    fn content_digest_hashes_the_sent_chunks() {
        for content in [Content::Random, Content::LogLines] {
            let length = 2 * CHUNK_BYTES + 5;
            let mut generator = Generator::new(content, 9);
            let mut sent = Vec::new();
            for take in [CHUNK_BYTES, CHUNK_BYTES, 5] {
                let mut chunk = vec![0u8; take];
                generator.fill(&mut chunk);
                sent.extend_from_slice(&chunk);
            }
            let expected = xxhash_rust::xxh3::xxh3_128(&sent);
            assert_eq!(content_digest(content, 9, length as u64), expected);
        }
    }
}
