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

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;

use fjord_proto::PublicKey;
use fjord_proto::cookie::{CookieChecker, MacLayout};
use fjord_proto::wire::Message;

/// Most relayed pairs one member serves.
pub const MAX_RELAYED_PAIRS: usize = 64;
/// Receiver indices remembered per pair, newest kept: a side holds at
/// most three sessions (previous, current, next) and one handshake in
/// flight, so two sides use at most eight at once; twice that leaves
/// room for crossing handshakes. Older ones belong to sessions both
/// sides have let go, and without a bound every rekey would add two.
const INDICES_PER_PAIR: usize = 16;

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
    /// The receiver indices learned from this pair's handshakes, oldest
    /// first.
    learned: VecDeque<u32>,
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
        let same_keys = |pair: &Pair| {
            let keys = [pair.sides[0].key, pair.sides[1].key];
            keys.contains(&a.key) && keys.contains(&b.key)
        };
        let pair = |learned| Pair {
            sides: [a, b],
            checkers: [CookieChecker::new(&a.key), CookieChecker::new(&b.key)],
            learned,
        };
        match self.pairs.iter().position(same_keys) {
            // The sessions of a pair installed again go on through us.
            Some(at) => {
                let learned = std::mem::take(&mut self.pairs[at].learned);
                self.pairs[at] = pair(learned);
            }
            None if self.pairs.len() >= MAX_RELAYED_PAIRS => return false,
            None => self.pairs.push(pair(VecDeque::new())),
        }
        self.reindex_endpoints();
        true
    }

    /// Drops every pair with `key` on one side.
    pub fn remove(&mut self, key: &PublicKey) {
        let (gone, kept) = std::mem::take(&mut self.pairs)
            .into_iter()
            .partition(|pair| pair.sides.iter().any(|side| side.key == *key));
        self.pairs = kept;
        for index in gone.iter().flat_map(|pair: &Pair| &pair.learned) {
            self.indices.remove(index);
        }
        self.reindex_endpoints();
    }

    /// Remembers that messages for `index` go to `to`, a side of pair
    /// number `pair`, forgetting the pair's oldest index past
    /// [`INDICES_PER_PAIR`].
    fn learn(&mut self, pair: usize, index: u32, to: SocketAddr) {
        self.indices.insert(index, to);
        let learned = &mut self.pairs[pair].learned;
        // Learned again (the same initiation sent twice): now the newest.
        learned.retain(|known| *known != index);
        learned.push_back(index);
        if learned.len() > INDICES_PER_PAIR
            && let Some(oldest) = learned.pop_front()
        {
            self.indices.remove(&oldest);
        }
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
                let (pair, to) =
                    self.handshake_destination(from, datagram, MacLayout::INITIATION)?;
                self.learn(pair, initiation.sender_index(), from);
                to
            }
            Message::HandshakeResponse(response) => {
                let (pair, to) = self.handshake_destination(from, datagram, MacLayout::RESPONSE)?;
                self.learn(pair, response.sender_index(), from);
                to
            }
            Message::CookieReply(reply) => *self.indices.get(&reply.receiver_index())?,
            Message::TransportData(data) => *self.indices.get(&data.receiver_index())?,
        };
        self.forwarded += 1;
        Some(destination)
    }

    /// The pair (by number) and its other side, of a pair whose side at
    /// `from` sent a handshake message keyed (mac1) to the other side's
    /// key.
    fn handshake_destination(
        &self,
        from: SocketAddr,
        message: &[u8],
        layout: MacLayout,
    ) -> Option<(usize, SocketAddr)> {
        self.pairs.iter().enumerate().find_map(|(number, pair)| {
            let from_side = pair.sides.iter().position(|side| side.endpoint == from)?;
            let to_side = 1 - from_side;
            pair.checkers[to_side]
                .check_mac1(message, layout)
                .then_some((number, pair.sides[to_side].endpoint))
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fjord_proto::PrivateKey;

    use super::*;
    use crate::test_support::{device, peer_config};

    const A: &str = "198.18.0.1:51820";
    const B: &str = "198.18.0.2:51820";

    fn side(seed: u8, endpoint: &str) -> RelaySide {
        RelaySide {
            key: PrivateKey::from_bytes([seed; 32]).public_key(),
            endpoint: endpoint.parse().expect("address"),
        }
    }

    /// A relay between A (key `[1; 32]`, the test device) and B (`[2; 32]`)
    /// carries `handshakes` initiations from A, each a new sender index.
    fn relay_handshakes(relay: &mut RelayTable, handshakes: u32) -> Vec<u32> {
        let mut a = device();
        let b = a.add_peer(peer_config(2)).expect("a peer");
        let mut now = std::time::Instant::now();
        let mut buf = [0u8; 256];
        let mut senders = Vec::new();
        for _ in 0..handshakes {
            // Past the gap within which an initiation is sent again as it was.
            now += Duration::from_millis(25);
            a.initiate_toward(b, now, &[B.parse().expect("address")]);
            let transmit = a.poll_transmit(&mut buf).expect("an initiation");
            let initiation = &buf[..transmit.len];
            let Ok(Message::HandshakeInitiation(view)) = Message::parse(initiation) else {
                panic!("not an initiation");
            };
            senders.push(view.sender_index());
            let to = relay.route(A.parse().expect("address"), initiation);
            assert_eq!(to, Some(B.parse().expect("address")));
        }
        senders
    }

    #[test]
    fn a_pair_that_rekeys_for_ever_keeps_its_newest_indices_only() {
        let mut relay = RelayTable::default();
        assert!(relay.install(side(1, A), side(2, B)));
        let senders = relay_handshakes(&mut relay, 200);
        // The test device's counting random source repeats its indices
        // after a while, but not within the last INDICES_PER_PAIR + 1.
        let recent = &senders[senders.len() - INDICES_PER_PAIR - 1..];
        let distinct: std::collections::HashSet<&u32> = recent.iter().collect();
        assert_eq!(distinct.len(), recent.len());
        assert_eq!(relay.indices.len(), INDICES_PER_PAIR);
        // The newest still route (a transport message for A's newest index
        // goes to A); the one before the newest sixteen no longer does.
        let newest = *senders.last().expect("some");
        assert_eq!(
            relay.indices.get(&newest),
            Some(&A.parse().expect("address"))
        );
        assert_eq!(relay.indices.get(&recent[0]), None);
        // Installing the same pair again keeps what it learned.
        assert!(relay.install(side(1, A), side(2, B)));
        assert_eq!(relay.indices.len(), INDICES_PER_PAIR);
        relay.remove(&side(2, B).key);
        assert_eq!(relay.indices.len(), 0);
    }
}
