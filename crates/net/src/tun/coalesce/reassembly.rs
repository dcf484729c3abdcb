//! IPv4 fragments joined within one receive batch, so that a datagram
//! larger than the tunnel's MTU reaches the kernel as one packet (and a
//! run of them as one UDP super-packet) instead of as fragments that the
//! kernel takes one write each and then queues, matches and joins itself.
//!
//! Only the plain case is taken: the fragments of one datagram in order,
//! each starting where the one before ended, no IP options, the whole
//! datagram inside the batch. Anything else (a gap, an overlap, a
//! duplicate, fragments out of order, a datagram not finished when the
//! batch is written) leaves every fragment of that datagram as it came,
//! for the kernel to reassemble as it always has. Nothing is kept from one
//! batch to the next: no timeout to run, and no memory for a peer to fill.

use super::PROTO_UDP;
use crate::tun::ipv4_fragment::{DatagramKey, HEADER_LEN};

/// Datagrams being joined at once; the oldest is given up for a newer one.
pub(super) const PENDING_DATAGRAMS: usize = 8;

/// A datagram whose first fragments have come in this batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub key: DatagramKey,
    /// Its placeholder among the coalescer's groups, which holds the
    /// fragments so far.
    pub group: usize,
    /// Data bytes so far: where the next fragment must begin.
    pub next_offset: usize,
}

/// Payload bytes of the UDP datagram whose first fragment is `first` and
/// whose IPv4 total length, joined, is `total_len`; `None` if it is no
/// UDP datagram that could merge (another protocol, a UDP length that
/// disagrees, no payload).
pub(super) fn udp_payload_len(first: &[u8], total_len: usize) -> Option<usize> {
    if first.get(9) != Some(&PROTO_UDP) {
        return None;
    }
    let udp = first.get(HEADER_LEN..HEADER_LEN + 8)?;
    let length = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    (length == total_len - HEADER_LEN && length > 8).then(|| length - 8)
}
