//! Relaying: a member that reaches two members who cannot reach each
//! other forwards their WireGuard datagrams, end to end encrypted. The
//! relay never holds their keys; it reads only what WireGuard leaves in
//! clear (message type, indices, mac1), so it can neither read nor forge
//! what it carries.
//!
//! ```text
//! A ──(A's session with B, sealed for B)──▶ R ──(same bytes)──▶ B
//! ```
//!
//! A and B each point their peer entry for the other at R's endpoint;
//! nothing else in their data path changes. R tells its own traffic from
//! relayed traffic by what WireGuard exposes:
//! - an initiation or response whose mac1 is keyed to the other side's
//!   public key (a message for R's own key has R's mac1);
//! - a cookie reply or transport message whose receiver index R learned
//!   from the handshake it relayed (the initiation carries A's index, the
//!   response B's).
//!
//! An index learned this way could in theory equal one of R's own; the
//! relay table is asked first, so such a collision (odds 2^-32 per pair)
//! would cost R that session's packets until its next rekey.

use std::collections::HashMap;
use std::net::SocketAddr;

use fjord_proto::PublicKey;
use fjord_proto::cookie::{CookieChecker, MacLayout};
use fjord_proto::wire::Message;

/// Most relayed pairs one member serves.
pub const MAX_RELAYED_PAIRS: usize = 64;

/// One side of a relayed pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelaySide {
    pub key: PublicKey,
    pub endpoint: SocketAddr,
}

struct Pair {
    sides: [RelaySide; 2],
    /// mac1 checkers keyed to each side's public key: a handshake message
    /// for side `i` carries the mac1 of `checkers[i]`.
    checkers: [CookieChecker; 2],
}

/// The pairs this member relays, and the receiver indices it learned.
#[derive(Default)]
pub struct RelayTable {
    pairs: Vec<Pair>,
    /// Receiver index → where a message for it goes.
    indices: HashMap<u32, SocketAddr>,
    /// Endpoints of relayed sides, so other traffic skips the table.
    endpoints: HashMap<SocketAddr, usize>,
    pub forwarded: u64,
}

impl RelayTable {
    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Relays between `a` and `b` (replacing an earlier pair of the same
    /// two keys). Refused past [`MAX_RELAYED_PAIRS`].
    pub fn install(&mut self, a: RelaySide, b: RelaySide) -> bool {
        self.pairs.retain(|pair| {
            let keys = [pair.sides[0].key, pair.sides[1].key];
            !(keys.contains(&a.key) && keys.contains(&b.key))
        });
        if self.pairs.len() >= MAX_RELAYED_PAIRS {
            return false;
        }
        self.pairs.push(Pair {
            sides: [a, b],
            checkers: [CookieChecker::new(&a.key), CookieChecker::new(&b.key)],
        });
        self.reindex_endpoints();
        true
    }

    /// Drops every pair with `key` on one side.
    pub fn remove(&mut self, key: &PublicKey) {
        self.pairs
            .retain(|pair| pair.sides.iter().all(|side| side.key != *key));
        self.reindex_endpoints();
    }

    fn reindex_endpoints(&mut self) {
        self.endpoints.clear();
        for pair in &self.pairs {
            for side in &pair.sides {
                *self.endpoints.entry(side.endpoint).or_default() += 1;
            }
        }
    }

    /// Where to forward `datagram` received from `from`, if it is relayed
    /// traffic; `None` leaves it to this member's own device.
    pub fn route(&mut self, from: SocketAddr, datagram: &[u8]) -> Option<SocketAddr> {
        if !self.endpoints.contains_key(&from) {
            return None;
        }
        let destination = match Message::parse(datagram).ok()? {
            Message::HandshakeInitiation(initiation) => {
                let to = self.handshake_destination(from, datagram, MacLayout::INITIATION)?;
                self.indices.insert(initiation.sender_index(), from);
                to
            }
            Message::HandshakeResponse(response) => {
                let to = self.handshake_destination(from, datagram, MacLayout::RESPONSE)?;
                self.indices.insert(response.sender_index(), from);
                to
            }
            Message::CookieReply(reply) => *self.indices.get(&reply.receiver_index())?,
            Message::TransportData(data) => *self.indices.get(&data.receiver_index())?,
        };
        self.forwarded += 1;
        Some(destination)
    }

    /// The other side of a pair whose side at `from` sent a handshake
    /// message keyed (mac1) to the other side's key.
    fn handshake_destination(
        &self,
        from: SocketAddr,
        message: &[u8],
        layout: MacLayout,
    ) -> Option<SocketAddr> {
        self.pairs.iter().find_map(|pair| {
            let from_side = pair.sides.iter().position(|side| side.endpoint == from)?;
            let to_side = 1 - from_side;
            pair.checkers[to_side]
                .check_mac1(message, layout)
                .then_some(pair.sides[to_side].endpoint)
        })
    }
}
