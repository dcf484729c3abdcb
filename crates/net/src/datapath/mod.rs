//! The two packet pipelines, each a batch at a time with buffers allocated
//! once at start.
//!
//! Outbound (TUN → UDP):
//!
//! ```text
//! TUN reads (each one packet or a super-packet, several per turn) ─ split
//! by tun-rs into slots of one contiguous area, each packet at slot[16..] ─
//! (a first IPv4 fragment waits for the read of its last one, and the two
//! are re-cut into halves of one length: tun/fragment_balance.rs) ─
//! route, compress in place (fjord peers that agreed on it, where it
//! pays), counter, header (in order) ─ seal in place, halves of a large
//! read on other threads (crypto_stage.rs) ─ after
//! the turn's reads, each run of equal-length datagrams to one peer is one
//! GSO message gathered where it lies (slot stride = MTU + 32 = a full
//! datagram, so full-size slots are already GSO segments; shorter ones
//! take an iovec each), and one sendmmsg carries up to 64 messages
//! (gso_batch.rs; which socket or carrier each leaves by: egress.rs)
//! ```
//!
//! In switch mode the device is a TAP and each read one Ethernet frame, at
//! slot[20..] behind room for the frame header; the node routes it by MAC
//! address (flood copies leave through its `poll_transmit`), and a slot
//! holds a full datagram of a full frame (MTU + 32 + 4 + 18: frame header,
//! Ethernet header and a VLAN tag). Received frames are written to the TAP
//! as packets are to the TUN. Nothing else differs ([`InnerLayout`]).
//!
//! Inbound (UDP → TUN):
//!
//! ```text
//! recvmmsg (GRO: each message holds several datagrams) ─ datagrams we
//! relay for other members leave from there (relay_forward.rs) ─ replay
//! check (in order) ─ open in place, halves of a large batch on other threads ─
//! replay commit, allowed-IPs check (in order) ─ queue the plaintext where
//! it lies (one that came compressed: decompressed into the area behind
//! the receive buffers, and queued there) ─ after the batch,
//! same-flow packets merged into one writev each (userspace GRO, no copy)
//! ```
//!
//! Compression (`fjord_proto::compression`) is a step of the protocol's
//! phases, not a pipeline of its own: off, it costs one branch per packet
//! on each side.
//!
//! Both pipelines run the protocol's phases (`fjord_proto::Device`): first
//! phase in order, the AEAD call, last phase in order. Where the AEAD
//! calls run is decided per read or batch, before its first phase
//! (`CryptoStage::shares`): on this thread, each at once after its first
//! phase, borrowing its session's key (no reference counting per packet);
//! or, for a large batch with `--threads`, detached (each holding its own
//! reference to the key) and shared with the stage's threads, the last
//! phases following in arrival order. Either way the phases are the same.

use fjord_mesh::Node;
use fjord_proto::DATA_HEADROOM;

use crate::crypto_stage::CryptoStage;
use crate::egress::Egress;
use crate::stats::DataStats;
use crate::tun::TunDevice;
use crate::udp::RECV_BATCH;

mod inbound;
mod outbound;

pub use inbound::{Inbound, ReceiveOn};
pub use outbound::{Outbound, Pace};

/// Bytes a sealed datagram adds to a packet: header and tag (padding never
/// grows a packet past the MTU).
const SEAL_OVERHEAD: usize = DATA_HEADROOM + 16;
/// Room for one GRO-coalesced UDP message.
const GRO_BUFFER: usize = 65_536;
/// The receive buffers: one GRO message each.
const RECEIVE_BYTES: usize = GRO_BUFFER * RECV_BATCH;
/// The area behind them where packets that came compressed are
/// decompressed, one after the other until a flush empties it: room for
/// at least one packet of the largest MTU.
const DECOMPRESSED_BYTES: usize = GRO_BUFFER;

/// What a drain works with: the node, both I/O ends, the crypto stage and
/// the counters. One value instead of five arguments, built once per turn.
pub struct Pipes<'a> {
    pub node: &'a mut Node,
    pub tun: &'a mut TunDevice,
    pub udp: &'a Egress,
    pub stage: &'a CryptoStage,
    pub stats: &'a mut DataStats,
}

/// What one drain call found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drained {
    /// The source has no more data now.
    Empty,
    /// Stopped after a bounded number of batches to let the other direction run.
    MoreWaiting,
    /// The TUN device is gone (interface deleted).
    DeviceGone,
}
