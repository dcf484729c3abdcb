//! fjord's sans-I/O WireGuard core.
//!
//! Nothing here touches a socket, a thread, a lock or a clock: the driver
//! passes in bytes, the current `Instant` and randomness, and gets back
//! outcomes and datagrams to send. That keeps every rule of the protocol
//! testable without root, deterministically. [`Device`] is the entry point
//! and documents the call order.
//!
//! Modules follow the protocol's concerns: [`wire`] (message views),
//! [`handshake`] (Noise IKpsk2), [`cookie`] (MAC1/MAC2 and cookie replies),
//! [`session`] and [`replay`] (transport data), [`negotiation`] (what two
//! fjord nodes agree on inside a session: the data cipher, compression),
//! [`compression`] (LZ4 per packet, fjord to fjord), [`extension`] (the
//! registry of fjord's own message kinds), [`timers`]
//! (rekey and keepalive rules), and the per-peer and per-device state
//! machines.

pub mod aead;
pub mod compression;
mod context;
pub mod cookie;
pub mod crypto;
mod device;
mod endpoint;
pub mod extension;
pub mod handshake;
pub mod icmp;
pub mod ip;
pub mod keys;
#[cfg(fuzzing)]
#[doc(hidden)]
pub mod memo;
pub mod negotiation;
mod outcome;
mod peer;
pub mod replay;
pub mod session;
pub mod tai64n;
pub mod timer_queue;
pub mod timers;
mod under_load;
pub mod wire;
mod x25519;

pub use aead::DataCipher;
pub use compression::{Codec, CompressionPolicy};
pub use context::{Rng, WallClock};
pub use device::{
    DATA_HEADROOM, DATA_TAILROOM, Device, DeviceConfig, DeviceError, PeerConfig, PeerStatus,
};
pub use endpoint::Endpoint;
pub use keys::{KeyParseError, PresharedKey, PrivateKey, PublicKey};
pub use negotiation::CipherPolicy;
pub use outcome::{
    DetachedData, DropCounters, DropReason, Event, HandshakeCounters, Incoming, Opened, Outgoing,
    PeerId, PendingData, Received, Sent, Transmit,
};
pub use peer::{MAX_STAGED_PACKETS, PeerStats};
pub use session::{DetachedOpen, DetachedSeal, PendingOpen, PendingSeal};
pub use timers::Timing;
pub use under_load::{
    COOKIE_REPLIES_PER_SECOND, PEER_COOKIE_REPLIES_PER_SECOND, UNDER_LOAD_HANDSHAKES_PER_SECOND,
};

#[cfg(test)]
mod tests;
