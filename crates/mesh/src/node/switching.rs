//! [`Node`] in switch mode: frames read from the TAP interface go by
//! destination MAC address (the [`MacTable`] of `switch.rs`) instead of
//! by allowed IPs, as frame messages sealed in the peers' sessions.
//!
//! ```text
//! prepare_tun_packet: frame at buf[inner_offset..] ─ MacTable::from_local
//!     Unicast(peer) ─ frame header written in front ─ prepare_encapsulate(peer)
//!     Flood         ─ a copy to every other peer in switch mode
//!                     (Device::send_extension, drained by poll_transmit),
//!                     the frame itself to the first, as for Unicast
//! finish_datagram:  Extension holding a frame message ─ MacTable::from_peer
//!     ─ Received::Frame (the driver writes it to the TAP interface)
//! ```
//!
//! Flood copies are allocated and sealed one by one: they carry ARP,
//! neighbour discovery and other broadcast or multicast frames, and
//! unicast only until its destination has answered once; the bulk of the
//! traffic is unicast and takes the batched path.
//!
//! Mode mismatches: an IP packet from a peer of a switch, or a frame from
//! a peer of a router, means the two ends are configured differently (or
//! the peer is plain WireGuard, which can only ever send IP packets). It
//! is dropped and counted ([`DropReason::ModeMismatch`]), and the first
//! one from each peer is reported through [`Node::poll_event`]
//! (`NodeEvent::ModeMismatch`) so the driver can log it once. A peer that
//! sent IP packets is left out of floods (it would drop every frame) until
//! it sends a frame.

use std::collections::{HashSet, VecDeque};
use std::ops::Range;
use std::time::Instant;

use fjord_proto::{DATA_HEADROOM, DropReason, Outgoing, PeerId, Received, Sent};

use super::Node;
use crate::switch::{
    self, FRAME_HEADER_LEN, Forward, FrameDrop, MAX_LINK_HEADER_LEN, MacTable, SwitchConfig,
};

/// What a peer sends that this interface's mode does not carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerSends {
    /// Ethernet frames: the peer is a fjord interface in switch mode, and
    /// this one is in router mode.
    Frames,
    /// IP packets: the peer is plain WireGuard or a fjord interface in
    /// router mode, and this one is in switch mode.
    IpPackets,
}

/// The first mode mismatch seen from a peer; see the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModeMismatch {
    pub peer: PeerId,
    pub sends: PeerSends,
}

/// Where the driver puts what it reads from the TUN or TAP device, and
/// how large the sealed plaintext of a full-size read can be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InnerLayout {
    /// Offset of a read in the buffer given to [`Node::prepare_tun_packet`]:
    /// [`DATA_HEADROOM`], and in switch mode the frame header after it.
    pub offset: usize,
    /// Bytes by which the plaintext of a full-size read may exceed the
    /// interface MTU: none for IP packets; for frames, the frame header
    /// and an Ethernet header with one VLAN tag.
    pub overhead: usize,
}

pub(super) struct Switch {
    table: MacTable<PeerId>,
    /// Peers that sent IP packets: not in switch mode, so left out of
    /// floods until they send a frame.
    routers: HashSet<PeerId>,
    /// Flood targets of the frame being sent; emptied each time, capacity
    /// kept.
    targets: Vec<PeerId>,
}

/// Mode mismatches: reported once per peer.
#[derive(Debug, Default)]
pub(super) struct Mismatches {
    reported: HashSet<PeerId>,
    pending: VecDeque<ModeMismatch>,
}

impl Mismatches {
    fn report(&mut self, peer: PeerId, sends: PeerSends) {
        if self.reported.insert(peer) {
            self.pending.push_back(ModeMismatch { peer, sends });
        }
    }

    pub(super) fn forget(&mut self, peer: PeerId) {
        self.reported.remove(&peer);
    }

    /// The next mismatch to report, for `poll_event`.
    pub(super) fn pop(&mut self) -> Option<ModeMismatch> {
        self.pending.pop_front()
    }
}

impl Node {
    /// Turns the interface into a switch: frames instead of IP packets,
    /// routed by MAC address; allowed IPs are no longer consulted. Call
    /// before any traffic; every peer must be a fjord node in switch mode.
    pub fn enable_switch(&mut self, config: SwitchConfig) {
        self.switch = Some(Switch {
            table: MacTable::new(config),
            routers: HashSet::new(),
            targets: Vec::new(),
        });
    }

    pub fn is_switch(&self) -> bool {
        self.switch.is_some()
    }

    /// The MAC table, in switch mode.
    pub fn mac_table(&self) -> Option<&MacTable<PeerId>> {
        self.switch.as_ref().map(|switch| &switch.table)
    }

    pub fn inner_layout(&self) -> InnerLayout {
        match self.switch {
            Some(_) => InnerLayout {
                offset: DATA_HEADROOM + FRAME_HEADER_LEN,
                overhead: FRAME_HEADER_LEN + MAX_LINK_HEADER_LEN,
            },
            None => InnerLayout {
                offset: DATA_HEADROOM,
                overhead: 0,
            },
        }
    }

    /// Switch mode's first phase of sending the `len`-byte frame at
    /// `buf[inner_layout().offset..]`.
    pub(super) fn prepare_frame(
        &mut self,
        now: Instant,
        buf: &mut [u8],
        len: usize,
    ) -> Outgoing<'_> {
        let plaintext_len = FRAME_HEADER_LEN + len;
        let (Some(switch), Some(plaintext)) = (
            self.switch.as_mut(),
            buf.get_mut(DATA_HEADROOM..DATA_HEADROOM + plaintext_len),
        ) else {
            return self.dropped_sent(DropReason::BufferTooSmall);
        };
        let target = match switch.table.from_local(now, &plaintext[FRAME_HEADER_LEN..]) {
            Forward::Unicast(peer) => Some(peer),
            Forward::Flood => None,
            Forward::Drop(_) => return self.dropped_sent(DropReason::NoRoute),
        };
        if !switch::write_frame_header(plaintext, len) {
            return self.dropped_sent(DropReason::BufferTooSmall);
        }
        let peer = match target {
            Some(peer) => peer,
            None => match self.flood(now, &buf[DATA_HEADROOM..DATA_HEADROOM + plaintext_len]) {
                Some(first) => first,
                None => return self.dropped_sent(DropReason::NoRoute),
            },
        };
        self.device
            .prepare_encapsulate(now, peer, buf, plaintext_len)
    }

    /// Sends a copy of the frame message `plaintext` to every peer in
    /// switch mode but the first, which it returns (`None`: no peer).
    fn flood(&mut self, now: Instant, plaintext: &[u8]) -> Option<PeerId> {
        let switch = self.switch.as_mut()?;
        let mut targets = std::mem::take(&mut switch.targets);
        targets.clear();
        targets.extend(
            self.device
                .peer_ids()
                .filter(|peer| !switch.routers.contains(peer)),
        );
        for &peer in targets.iter().skip(1) {
            self.device.send_extension(peer, now, plaintext);
        }
        let first = targets.first().copied();
        switch.targets = targets;
        first
    }

    /// Switch mode's last step of receiving a frame message at
    /// `datagram[payload]` from `peer`.
    pub(super) fn receive_frame(
        &mut self,
        now: Instant,
        peer: PeerId,
        payload: Range<usize>,
        datagram: &[u8],
    ) -> Received {
        let Some(switch) = self.switch.as_mut() else {
            self.mismatches.report(peer, PeerSends::Frames);
            return self.dropped(DropReason::ModeMismatch);
        };
        let Some(frame) = datagram
            .get(payload.clone())
            .and_then(switch::frame_range)
            .map(|frame| payload.start + frame.start..payload.start + frame.end)
        else {
            return self.dropped(DropReason::InvalidInnerPacket);
        };
        if !switch.routers.is_empty() {
            switch.routers.remove(&peer);
        }
        match switch.table.from_peer(now, peer, &datagram[frame.clone()]) {
            Ok(()) => {
                self.device.note_data_received(peer, now);
                Received::Frame { peer, frame }
            }
            Err(FrameDrop::Truncated) => self.dropped(DropReason::InvalidInnerPacket),
            Err(_) => self.dropped(DropReason::SourceNotAllowed),
        }
    }

    /// Forgets what the switch knew of a removed peer.
    pub(super) fn forget_switch_peer(&mut self, peer: PeerId) {
        self.mismatches.forget(peer);
        if let Some(switch) = self.switch.as_mut() {
            switch.table.forget_peer(peer);
            switch.routers.remove(&peer);
        }
    }

    fn dropped(&mut self, reason: DropReason) -> Received {
        self.drops.count(reason);
        Received::Dropped(reason)
    }

    fn dropped_sent(&mut self, reason: DropReason) -> Outgoing<'_> {
        self.drops.count(reason);
        Outgoing::Done(Sent::Dropped(reason))
    }
}

/// What an authenticated IP packet from `peer` means on a switch: a peer
/// in another mode. A function of the fields it reads, so the receive path
/// can call it while a data message still borrows the device.
pub(super) fn ip_packet_on_switch(
    switch: &mut Switch,
    mismatches: &mut Mismatches,
    peer: PeerId,
) -> DropReason {
    switch.routers.insert(peer);
    mismatches.report(peer, PeerSends::IpPackets);
    DropReason::ModeMismatch
}
