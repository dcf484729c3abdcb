//! Protocol scenarios for [`crate::Device`], run in a deterministic
//! simulator ([`sim`]): two devices, simulated time, seeded randomness and
//! a network whose loss, duplication, delay and tampering a test controls.
//!
//! Each file tells stories about one concern, asserting what a user of
//! fjord would check: packets delivered, events logged, counters moved.
//!
//! - [`clock`]: wall-clock steps and initiation timestamps.
//! - [`handshake`]: first contact, preshared keys, cookies, handshake abuse.
//! - [`data`]: transport data on a hostile network, malformed datagrams.
//! - [`flood`]: spoofed initiations by the ten thousand, and who pays.
//! - [`timers`]: keepalives, rekeying, expiry, retransmission, erasure.
//! - [`roaming`]: endpoint changes, restarts, statistics.
//! - [`split`]: the data path in halves, encryption in any order.
//! - [`negotiation`]: fjord to fjord on AES-256-GCM, plain peers untouched.
//! - [`compression`]: fjord to fjord compressed where both agreed, never
//!   otherwise; bad compressed packets dropped and counted.

mod clock;
mod compression;
mod crossing;
mod data;
mod flood;
mod handshake;
mod negotiation;
mod roaming;
mod sim;
mod split;
mod timers;
