//! [`Node`]: the WireGuard device plus cryptokey routing. Outgoing packets
//! go to the peer whose allowed IPs hold the destination (longest prefix);
//! incoming packets are delivered only if their source lies in the allowed
//! IPs of the peer that sent them. Still sans-I/O: same call order as
//! [`fjord_proto::Device`], which it wraps.

use std::net::SocketAddr;
use std::time::Instant;

use fjord_proto::ip::IpHeader;
use fjord_proto::{
    DATA_HEADROOM, Device, DeviceError, DropCounters, DropReason, Event, PeerConfig, PeerId, Received,
    Sent, Transmit,
};

use crate::allowed_ips::AllowedIps;
use crate::cidr::Cidr;

pub struct Node {
    device: Device,
    routes: AllowedIps<PeerId>,
    drops: DropCounters,
}

impl Node {
    pub fn new(device: Device) -> Self {
        Self {
            device,
            routes: AllowedIps::new(),
            drops: DropCounters::default(),
        }
    }

    pub fn device(&self) -> &Device {
        &self.device
    }

    pub fn device_mut(&mut self) -> &mut Device {
        &mut self.device
    }

    /// Adds a peer and routes `allowed_ips` to it (taking them from any
    /// other peer that had them, as WireGuard does).
    pub fn add_peer(&mut self, config: PeerConfig, allowed_ips: &[Cidr]) -> Result<PeerId, DeviceError> {
        let id = self.device.add_peer(config)?;
        for cidr in allowed_ips {
            self.routes.insert(cidr.network(), id);
        }
        Ok(id)
    }

    pub fn remove_peer(&mut self, id: PeerId) {
        self.routes.retain(|owner| owner != id);
        self.device.remove_peer(id);
    }

    /// Removes every peer and route at once (`replace_peers`).
    pub fn remove_all_peers(&mut self) {
        self.routes = AllowedIps::new();
        let ids: Vec<PeerId> = self.device.peer_ids().collect();
        for id in ids {
            self.device.remove_peer(id);
        }
    }

    /// Every route, grouped by peer, in one pass over the table.
    pub fn allowed_ips_by_peer(&self) -> std::collections::HashMap<PeerId, Vec<Cidr>> {
        let mut grouped: std::collections::HashMap<PeerId, Vec<Cidr>> = std::collections::HashMap::new();
        self.routes.for_each(|cidr, peer| grouped.entry(peer).or_default().push(cidr));
        grouped
    }

    pub fn add_allowed_ip(&mut self, id: PeerId, cidr: Cidr) {
        self.routes.insert(cidr.network(), id);
    }

    /// Removes every allowed IP of `id`.
    pub fn clear_allowed_ips(&mut self, id: PeerId) {
        self.routes.retain(|owner| owner != id);
    }

    pub fn allowed_ips(&self, id: PeerId) -> Vec<Cidr> {
        self.routes.prefixes_of(id)
    }

    pub fn route(&self, destination: &std::net::IpAddr) -> Option<PeerId> {
        self.routes.lookup(destination)
    }

    /// Drop counters of the device and of routing together.
    pub fn drops(&self) -> DropCounters {
        let mut total = self.device.drops().clone();
        total.add(&self.drops);
        total
    }

    /// Routes and seals the TUN packet at `buf[DATA_HEADROOM..][..len]`.
    pub fn handle_tun_packet(&mut self, now: Instant, buf: &mut [u8], len: usize) -> Sent {
        let destination = buf
            .get(DATA_HEADROOM..DATA_HEADROOM + len)
            .and_then(|packet| IpHeader::parse(packet).ok())
            .map(|header| header.destination);
        let Some(peer) = destination.and_then(|address| self.routes.lookup(&address)) else {
            self.drops.count(DropReason::NoRoute);
            return Sent::Dropped(DropReason::NoRoute);
        };
        self.device.encapsulate(now, peer, buf, len)
    }

    /// Opens a datagram in place and applies the allowed-IPs source check.
    pub fn handle_datagram(&mut self, now: Instant, from: SocketAddr, datagram: &mut [u8]) -> Received {
        let received = self.device.handle_datagram(now, from, datagram);
        if let Received::Data { peer, source, .. } = &received
            && self.routes.lookup(source) != Some(*peer)
        {
            self.drops.count(DropReason::SourceNotAllowed);
            return Received::Dropped(DropReason::SourceNotAllowed);
        }
        received
    }

    pub fn handle_timeout(&mut self, now: Instant) {
        self.device.handle_timeout(now);
    }

    pub fn poll_timeout(&self) -> Option<Instant> {
        self.device.poll_timeout()
    }

    pub fn poll_transmit(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        self.device.poll_transmit(buf)
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.device.poll_event()
    }
}
