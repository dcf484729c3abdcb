//! What a flood costs the machine itself: `bare`'s row in the attack
//! suite. The same spoofed initiations at the same rates land on a UDP
//! socket bound to the WireGuard port on the right host that nobody
//! reads, so every one costs the kernel its receive path up to a full
//! socket queue, as a tunnel that reads none of them would; meanwhile a
//! digest-checked TCP transfer crosses the bare link. The generator and
//! the kernel's receive work share the machine's cores with the
//! transfer, so the ratio measured here (with the flood over without it)
//! is the most any tunnel on this machine can keep under that flood.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::Instant;

use fjord_proto::PrivateKey;

use super::tunnel::{FIRST_SINK_PORT, FloodedTransfer, HandshakeWork, start_flood, transfer};
use crate::attack::{AttackedHosts, FloodRate, udp_socket_drops};
use crate::systems::wireguard::LISTEN_PORT;
use crate::topology::RIGHT_UNDERLAY;
use crate::traffic::BulkReport;

/// The bare link between the attacked hosts, with the unread socket.
pub struct Floor<'a> {
    hosts: &'a AttackedHosts,
    /// Bound and never read: the flood fills its queue.
    _unread: UdpSocket,
    next_sink_port: u16,
}

impl<'a> Floor<'a> {
    pub fn start(hosts: &'a AttackedHosts) -> Result<Self, String> {
        let unread = hosts
            .hosts
            .right
            .spawn_thread(|| UdpSocket::bind((Ipv4Addr::UNSPECIFIED, LISTEN_PORT)))
            .map_err(|error| format!("entering the right host: {error}"))?
            .join()
            .map_err(|_| "the thread binding the unread socket panicked".to_string())?
            .map_err(|error| format!("binding the unread socket: {error}"))?;
        Ok(Self {
            hosts,
            _unread: unread,
            next_sink_port: FIRST_SINK_PORT,
        })
    }

    /// A digest-checked TCP transfer of `bytes` left → right on the bare
    /// link.
    pub fn transfer(&mut self, bytes: u64) -> Result<BulkReport, String> {
        transfer(self.hosts, RIGHT_UNDERLAY, &mut self.next_sink_port, bytes)
    }

    /// A transfer of `bytes` while a flood at `rate` fills the unread
    /// socket; the work is the kernel's drops at that socket.
    pub fn flooded_transfer(&mut self, rate: FloodRate, bytes: u64) -> FloodedTransfer {
        // Nobody checks mac1 here; any key makes well-formed initiations.
        let responder = PrivateKey::from_bytes([0x42; 32]).public_key();
        let flood = match start_flood(self.hosts, responder, rate) {
            Ok(flood) => flood,
            Err(why) => return FloodedTransfer::failed(why),
        };
        let drops = || {
            udp_socket_drops(&self.hosts.hosts.right, LISTEN_PORT)
                .map_err(|error| format!("reading socket drops: {error}"))
        };
        let before = drops().map(|drops| (Instant::now(), drops));
        let transfer = self.transfer(bytes);
        let work = before.and_then(|(at, before)| {
            Ok(HandshakeWork {
                window: at.elapsed(),
                socket_drops: drops()?.saturating_sub(before),
                ..HandshakeWork::default()
            })
        });
        FloodedTransfer::after(flood, transfer, work)
    }
}
