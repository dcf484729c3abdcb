//! Switch mode: fjord nodes forwarding Ethernet frames between TAP
//! interfaces, with a learning MAC table. Sans-I/O like the rest of the
//! crate: frames and `now` in, forwarding decisions out.
//!
//! ```text
//! TAP read ─ from_local: learn source → local port; by destination:
//!              broadcast, multicast, unknown → Flood (every peer in switch mode)
//!              learned behind a peer         → Unicast(peer)
//!              learned on the local port     → dropped (it would go back out where it came from)
//!          ─ frame message sealed to each target
//! datagram ─ opened ─ frame message ─ from_peer: source check, learn
//!              source → that peer ─ TAP write
//! ```
//!
//! Split horizon: a frame that came from a peer goes to the local port
//! only, never on to another peer. Every node of a switch peers with every
//! other (a full mesh, as the members of one Ethernet segment), so a frame
//! reaches every node in one hop, and no frame can loop or arrive twice.
//! A node that only some members know cannot be reached through another.
//!
//! Wire: a frame travels as the plaintext of an ordinary WireGuard
//! transport data message inside an authenticated session, in fjord's
//! fjord message layout (`fjord_proto::extension`), kind
//! [`ExtensionKind::Frame`] (13):
//!
//! ```text
//! marker 0x1f | kind 13 | frame length u16 | Ethernet frame | (WireGuard's zero padding)
//! ```
//!
//! The marker's high nibble is no IP version, so nothing reads a frame as
//! an IP packet: a plain WireGuard peer drops it as a malformed inner
//! packet, a fjord node in router mode recognises it and reports a peer
//! in switch mode, and a fjord switch reports (and drops) an IP packet,
//! which only a plain WireGuard peer or a fjord node in router mode sends.
//! The length field tells the frame from the padding behind it.
//!
//! Source check (in place of router mode's allowed IPs): a peer may send
//! from any unicast MAC address except one the local port used within the
//! aging time, and a MAC address moves to the peer it was last seen
//! behind, as a host moves between the ports of a switch. So peers are
//! trusted as hosts on one Ethernet segment are: any peer can claim
//! another peer's MAC address (and, inside its frames, any IP address), and
//! so take that peer's unicast traffic from the others until it sends
//! again. What it cannot take are the addresses of this node's own port.
//! Frames with a broadcast, multicast or all-zero source, or shorter than
//! an Ethernet header, are refused.
//!
//! Aging: an entry not refreshed by a frame for [`SwitchConfig::aging`]
//! is forgotten (lookups ignore it at once; its memory goes at the next
//! sweep). Bound: the table holds at most [`SwitchConfig::capacity`]
//! addresses; when full it learns no new one until entries age out (their
//! frames are flooded meanwhile), so a peer spraying source addresses
//! cannot evict the hosts already learned.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::ops::Range;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;
use fjord_proto::extension::{EXTENSION_HEADER_LEN, ExtensionKind};

/// Bytes before the frame in a frame message: marker, kind, length.
pub const FRAME_HEADER_LEN: usize = EXTENSION_HEADER_LEN;
/// Destination, source and EtherType.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// One 802.1Q tag, which a frame may carry beyond its interface's MTU.
pub const VLAN_TAG_LEN: usize = 4;
/// The most a frame adds to the MTU of its interface: an Ethernet header
/// with one VLAN tag.
pub const MAX_LINK_HEADER_LEN: usize = ETHERNET_HEADER_LEN + VLAN_TAG_LEN;

/// A 48-bit Ethernet address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MacAddress(pub [u8; 6]);

impl MacAddress {
    pub const BROADCAST: MacAddress = MacAddress([0xff; 6]);

    /// A node's own TAP address, taken from its public key: locally
    /// administered and unicast, the same at every start, so the other
    /// hosts' ARP and neighbour caches stay right across a restart (a
    /// random address would leave them pointing at a gone one until
    /// they probe again). 46 bits of the key: two nodes of one segment
    /// share one with odds of about n²/2⁴⁷.
    pub fn for_node(public_key: &PublicKey) -> MacAddress {
        let key = public_key.as_bytes();
        MacAddress([
            (key[0] & 0xfc) | 0x02,
            key[1],
            key[2],
            key[3],
            key[4],
            key[5],
        ])
    }

    /// Broadcast and multicast addresses: the group bit of the first byte.
    pub fn is_group(self) -> bool {
        self.0[0] & 1 == 1
    }

    /// Whether a frame may come from this address: unicast, not all zero.
    pub fn is_valid_source(self) -> bool {
        !self.is_group() && self.0 != [0; 6]
    }
}

impl fmt::Display for MacAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d, e, g] = self.0;
        write!(f, "{a:02x}:{b:02x}:{c:02x}:{d:02x}:{e:02x}:{g:02x}")
    }
}

/// The addresses at the start of an Ethernet frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EthernetHeader {
    pub destination: MacAddress,
    pub source: MacAddress,
}

impl EthernetHeader {
    /// `None` if `frame` is shorter than an Ethernet header.
    pub fn parse(frame: &[u8]) -> Option<Self> {
        let header = frame.get(..ETHERNET_HEADER_LEN)?;
        let mut destination = [0; 6];
        let mut source = [0; 6];
        destination.copy_from_slice(&header[..6]);
        source.copy_from_slice(&header[6..12]);
        Some(Self {
            destination: MacAddress(destination),
            source: MacAddress(source),
        })
    }
}

/// Whether a decrypted payload is a frame message (see the module
/// documentation), well-formed or not.
pub fn is_frame_message(plaintext: &[u8]) -> bool {
    fjord_proto::extension::kind_of(plaintext) == Some(ExtensionKind::Frame)
}

/// Where the frame of a frame message lies in `plaintext`; `None` if the
/// payload is not a frame message or its length runs past the end.
pub fn frame_range(plaintext: &[u8]) -> Option<Range<usize>> {
    if !is_frame_message(plaintext) {
        return None;
    }
    let length = plaintext.get(2..FRAME_HEADER_LEN)?;
    let end = FRAME_HEADER_LEN + usize::from(u16::from_be_bytes([length[0], length[1]]));
    (end <= plaintext.len()).then_some(FRAME_HEADER_LEN..end)
}

/// Writes a frame message's header for a `frame_len`-byte frame into the
/// first [`FRAME_HEADER_LEN`] bytes of `buf`; `false` (nothing written)
/// if `buf` is shorter or the frame longer than 65,535 bytes.
pub fn write_frame_header(buf: &mut [u8], frame_len: usize) -> bool {
    let (Some(header), Ok(length)) = (buf.first_chunk_mut(), u16::try_from(frame_len)) else {
        return false;
    };
    fjord_proto::extension::write_header(header, ExtensionKind::Frame, length);
    true
}

/// Settings of a [`MacTable`]; defaults in [`SwitchConfig::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwitchConfig {
    /// How long an address is kept without a frame from it. Default 300 s,
    /// a Linux bridge's: shorter forgets quiet hosts sooner (their frames
    /// are flooded until they speak), longer keeps a moved host's old
    /// place longer when it does not announce the move.
    pub aging: Duration,
    /// Most addresses held at once. Default 8,192 (a few hundred KiB);
    /// past it, new addresses are flooded to until old ones age out.
    pub capacity: usize,
}

impl Default for SwitchConfig {
    fn default() -> Self {
        Self {
            aging: Duration::from_secs(300),
            capacity: 8192,
        }
    }
}

/// Where an address was last seen: this node's own port (the TAP
/// interface) or behind a peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Port<P> {
    Local,
    Peer(P),
}

/// What to do with a frame read from the local port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forward<P> {
    /// To the one peer its destination is behind.
    Unicast(P),
    /// To every peer in switch mode: broadcast, multicast, or a
    /// destination not learned (or aged out).
    Flood,
    Drop(FrameDrop),
}

/// Why a frame was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameDrop {
    /// Shorter than an Ethernet header.
    Truncated,
    /// A broadcast, multicast or all-zero source address.
    InvalidSource,
    /// From a peer, with a source address the local port owns.
    LocalSource,
    /// From the local port, to an address on the local port.
    LocalDestination,
}

/// What the table did, for `fjord show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SwitchCounters {
    /// Addresses learned (not counting refreshes).
    pub learned: u64,
    /// Addresses that moved to another port.
    pub moved: u64,
    /// New addresses not learned because the table was full.
    pub not_learned_full: u64,
}

#[derive(Debug, Clone, Copy)]
struct Entry<P> {
    port: Port<P>,
    last_seen: Instant,
}

/// The learning table of one switch-mode interface; `P` names a peer.
/// See the module documentation for the rules.
#[derive(Debug)]
pub struct MacTable<P> {
    config: SwitchConfig,
    entries: HashMap<MacAddress, Entry<P>>,
    /// Exactly one record per entry: its address and a time no later than
    /// its `last_seen`. Records join at the back; the sweep pops those
    /// due at the front, drops the expired entries and sends the others
    /// back with their newer time. So every entry is looked at about once
    /// per aging period, whatever the traffic, and no scan over the table
    /// runs per frame.
    records: VecDeque<(MacAddress, Instant)>,
    counters: SwitchCounters,
}

impl<P: Copy + Eq> MacTable<P> {
    pub fn new(config: SwitchConfig) -> Self {
        Self {
            config,
            entries: HashMap::new(),
            records: VecDeque::new(),
            counters: SwitchCounters::default(),
        }
    }

    pub fn config(&self) -> &SwitchConfig {
        &self.config
    }

    pub fn counters(&self) -> SwitchCounters {
        self.counters
    }

    /// Entries held, aged ones not yet swept included.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Where `address` was last seen, unless that was longer ago than the
    /// aging time.
    pub fn lookup(&self, now: Instant, address: MacAddress) -> Option<Port<P>> {
        self.entries
            .get(&address)
            .filter(|entry| self.is_alive(entry, now))
            .map(|entry| entry.port)
    }

    /// Every address that is alive at `now`, with its port, in no
    /// particular order.
    pub fn entries(&self, now: Instant) -> impl Iterator<Item = (MacAddress, Port<P>)> + '_ {
        self.entries
            .iter()
            .filter(move |(_, entry)| self.is_alive(entry, now))
            .map(|(address, entry)| (*address, entry.port))
    }

    /// Learns the source of a frame read from the local port and decides
    /// where the frame goes.
    pub fn from_local(&mut self, now: Instant, frame: &[u8]) -> Forward<P> {
        let Some(header) = EthernetHeader::parse(frame) else {
            return Forward::Drop(FrameDrop::Truncated);
        };
        if !header.source.is_valid_source() {
            return Forward::Drop(FrameDrop::InvalidSource);
        }
        // The local port may always take an address: it cannot fail.
        let _ = self.learn(now, header.source, Port::Local);
        if header.destination.is_group() {
            return Forward::Flood;
        }
        match self.lookup(now, header.destination) {
            Some(Port::Peer(peer)) => Forward::Unicast(peer),
            Some(Port::Local) => Forward::Drop(FrameDrop::LocalDestination),
            None => Forward::Flood,
        }
    }

    /// Checks and learns the source of a frame from `peer`; `Ok` means the
    /// frame goes to the local port.
    pub fn from_peer(&mut self, now: Instant, peer: P, frame: &[u8]) -> Result<(), FrameDrop> {
        let header = EthernetHeader::parse(frame).ok_or(FrameDrop::Truncated)?;
        if !header.source.is_valid_source() {
            return Err(FrameDrop::InvalidSource);
        }
        self.learn(now, header.source, Port::Peer(peer))
    }

    /// Forgets every address behind `peer` (the peer was removed).
    pub fn forget_peer(&mut self, peer: P) {
        self.entries
            .retain(|_, entry| entry.port != Port::Peer(peer));
        let entries = &self.entries;
        self.records
            .retain(|(address, _)| entries.contains_key(address));
    }

    /// Forgets every address.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.records.clear();
    }

    fn is_alive(&self, entry: &Entry<P>, now: Instant) -> bool {
        now.saturating_duration_since(entry.last_seen) < self.config.aging
    }

    fn learn(&mut self, now: Instant, address: MacAddress, port: Port<P>) -> Result<(), FrameDrop> {
        let aging = self.config.aging;
        if let Some(entry) = self.entries.get_mut(&address) {
            let alive = now.saturating_duration_since(entry.last_seen) < aging;
            if alive && entry.port == Port::Local && port != Port::Local {
                return Err(FrameDrop::LocalSource);
            }
            if entry.port != port {
                if alive {
                    self.counters.moved += 1;
                } else {
                    self.counters.learned += 1;
                }
                entry.port = port;
            } else if !alive {
                self.counters.learned += 1;
            }
            // Its record's time stays older than this: allowed (see `records`).
            entry.last_seen = entry.last_seen.max(now);
            return Ok(());
        }
        self.sweep(now);
        if self.entries.len() >= self.config.capacity {
            self.counters.not_learned_full += 1;
            return Ok(());
        }
        self.entries.insert(
            address,
            Entry {
                port,
                last_seen: now,
            },
        );
        self.records.push_back((address, now));
        self.counters.learned += 1;
        Ok(())
    }

    /// Drops the expired entries among the records due at the front.
    fn sweep(&mut self, now: Instant) {
        let aging = self.config.aging;
        while let Some(&(address, recorded)) = self.records.front() {
            if now.saturating_duration_since(recorded) < aging {
                break;
            }
            self.records.pop_front();
            let Some(entry) = self.entries.get(&address) else {
                continue;
            };
            if now.saturating_duration_since(entry.last_seen) < aging {
                // Refreshed since: back of the line with its newer time,
                // which is not due in this sweep again.
                self.records.push_back((address, entry.last_seen));
            } else {
                self.entries.remove(&address);
            }
        }
    }
}

#[cfg(test)]
mod tests;
