//! Per-peer size limits on the send path, and the ICMP replies that tell
//! inner senders about them.
//!
//! ```text
//! TUN packet ─ route ─ len > limit of the peer? (one comparison; no
//!   limit = usize::MAX) ─ no: seal as always
//!                       └ yes: IPv4 with DF, IPv6 over 1280 bytes: drop,
//!                              queue a "fragmentation needed" / "packet
//!                              too big" for the sender (rate-limited),
//!                              the driver writes it into the TUN
//!                              (poll_event: NodeEvent::TunPacket)
//!                              IPv4 without DF, IPv6 up to 1280: seal
//!                              anyway (the network may fragment it)
//! ```
//!
//! The limits come from the path MTU prober (`pmtu.rs`, through the mesh
//! driver); a peer it never probed, such as a plain WireGuard peer, has
//! none.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fjord_proto::icmp::{MAX_REPLY_LEN, TooBig, too_big_reply};
use fjord_proto::{DATA_HEADROOM, DropReason, PeerId, Sent};

use super::Node;

/// Replies allowed in a burst, and how fast the allowance refills: a
/// burst of too-big packets from one TCP window gets a few replies (the
/// sender reacts to the first), a flood cannot make us write one per
/// packet into the TUN.
const REPLY_BURST: u32 = 10;
const REPLY_REFILL_INTERVAL: Duration = Duration::from_millis(10);
/// Replies waiting for the driver, at most.
const MAX_QUEUED_REPLIES: usize = 64;

/// "Packet too big" replies waiting for the TUN, and their rate limit.
#[derive(Default)]
pub(super) struct TooBigReplies {
    queue: VecDeque<Vec<u8>>,
    tokens: u32,
    refilled: Option<Instant>,
    /// Replies written (handed to the driver) and suppressed by the limit.
    pub(super) sent: u64,
    pub(super) suppressed: u64,
}

impl TooBigReplies {
    fn take_token(&mut self, now: Instant) -> bool {
        let refilled = *self.refilled.get_or_insert_with(|| {
            self.tokens = REPLY_BURST;
            now
        });
        let intervals =
            now.saturating_duration_since(refilled).as_nanos() / REPLY_REFILL_INTERVAL.as_nanos();
        if intervals > 0 {
            self.tokens = (self.tokens as u128 + intervals).min(REPLY_BURST as u128) as u32;
            self.refilled = Some(now);
        }
        if self.tokens == 0 || self.queue.len() >= MAX_QUEUED_REPLIES {
            self.suppressed += 1;
            return false;
        }
        self.tokens -= 1;
        true
    }
}

impl Node {
    /// The largest inner packet `peer`'s path carries (`usize::MAX`: no
    /// limit). The hot path's only cost: one bounds-checked load.
    #[inline]
    pub(super) fn path_limit(&self, peer: PeerId) -> usize {
        self.path_limits
            .get(peer.index())
            .copied()
            .unwrap_or(usize::MAX)
    }

    /// Sets (or with `None` lifts) the limit on inner packets to `peer`.
    pub fn set_path_limit(&mut self, peer: PeerId, inner_bytes: Option<usize>) {
        let index = peer.index();
        if self.path_limits.len() <= index {
            if inner_bytes.is_none() {
                return;
            }
            self.path_limits.resize(index + 1, usize::MAX);
        }
        self.path_limits[index] = inner_bytes.unwrap_or(usize::MAX);
    }

    /// The slow path for a packet over `peer`'s limit: `Some` if it is
    /// dropped (with a reply queued when the sender may get one), `None`
    /// if it is sent anyway.
    pub(super) fn too_big(
        &mut self,
        now: Instant,
        peer: PeerId,
        buf: &[u8],
        len: usize,
    ) -> Option<Sent> {
        let packet = buf.get(DATA_HEADROOM..DATA_HEADROOM + len)?;
        let mut reply = [0u8; MAX_REPLY_LEN];
        match too_big_reply(packet, self.path_limit(peer), &mut reply) {
            TooBig::SendAnyway => return None,
            TooBig::Reply { len } => {
                if self.too_big_replies.take_token(now) {
                    self.too_big_replies.queue.push_back(reply[..len].to_vec());
                    self.too_big_replies.sent += 1;
                }
            }
            TooBig::Silent => {}
        }
        self.drops.count(DropReason::PacketTooBig);
        Some(Sent::Dropped(DropReason::PacketTooBig))
    }

    /// The last part of `poll_event`: an ICMP reply for the TUN device,
    /// handed over as it was queued (no copy).
    pub(super) fn poll_tun_packet(&mut self) -> Option<Vec<u8>> {
        self.too_big_replies.queue.pop_front()
    }

    /// "Packet too big" replies written to the TUN, and those the rate
    /// limit suppressed.
    pub fn too_big_replies(&self) -> (u64, u64) {
        (self.too_big_replies.sent, self.too_big_replies.suppressed)
    }
}
