//! How [`Node`] drives the path MTU prober (`crate::pmtu`) for mesh
//! members.
//!
//! ```text
//! MeshAction::Admit (a verified member) ─▶ PathMtuTable::track
//! MeshAction::Remove, remove_peer       ─▶ PathMtuTable::forget, limit lifted
//! Event::EndpointChanged                 ─▶ PathMtuTable::path_changed
//! Event::HandshakeCompleted              ─▶ PathMtuTable::handle_session
//! PathMtuTable::poll_probe ─▶ a padded MtuProbe sealed into the session
//!                           ─▶ poll_transmit (Transmit::dont_fragment)
//! MtuProbe from a member   ─▶ MtuAck (an ordinary control message)
//! MtuAck                   ─▶ PathMtuTable::handle_ack
//! PathMtuTable::poll_change ─▶ Node::set_path_limit (too_big.rs)
//! ```

use std::net::SocketAddr;
use std::time::Instant;

use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, PeerId, PublicKey, Sent, Transmit};

use super::Node;
use super::membership::MeshDriver;
use crate::control::Control;
use crate::pmtu::{Family, PathMtuCounters, Probe};

impl Node {
    /// The largest datagram known to get through to member `key`, in
    /// bytes (IP header included); `None` before the first search
    /// settles, and for peers that are not members.
    pub fn path_mtu(&self, key: &PublicKey) -> Option<usize> {
        let driver = self.mesh.as_ref()?;
        driver.pmtu.path_mtu(self.device.peer_id(key)?)
    }

    /// What the prober did, outside a mesh all zero.
    pub fn path_mtu_counters(&self) -> PathMtuCounters {
        self.mesh
            .as_ref()
            .map(|driver| driver.pmtu.counters().clone())
            .unwrap_or_default()
    }

    /// A path MTU probe waiting to leave, written into `buf` (a probe
    /// that does not fit is skipped), to be sent without fragmentation: a
    /// probe that does not fit the path must be lost, not fragmented.
    pub(super) fn poll_probe(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let driver = self.mesh.as_mut()?;
        loop {
            let (destination, source, datagram) = driver.probes.pop_front()?;
            if let Some(out) = buf.get_mut(..datagram.len()) {
                out.copy_from_slice(&datagram);
                return Some(Transmit {
                    destination,
                    source,
                    len: datagram.len(),
                    ttl: None,
                    dont_fragment: true,
                });
            }
        }
    }

    /// Lifts `id`'s limit and stops probing its path (its peer entry goes).
    pub(super) fn forget_path(&mut self, id: PeerId) {
        self.set_path_limit(id, None);
        if let Some(driver) = self.mesh.as_mut() {
            driver.pmtu.forget(id);
        }
    }

    /// A probe or an ack from `peer`: only members get answers.
    pub(super) fn handle_path_mtu(
        &mut self,
        now: Instant,
        peer: PeerId,
        key: PublicKey,
        payload: &[u8],
    ) {
        let Some(driver) = self.mesh.as_mut() else {
            return;
        };
        match Control::decode(payload) {
            Ok(Control::MtuProbe { id }) if driver.mesh.is_member(&key) => {
                let ack = Control::MtuAck {
                    id,
                    plaintext_bytes: payload.len().min(usize::from(u16::MAX)) as u16,
                };
                self.device.send_extension(peer, now, &ack.encode());
            }
            Ok(Control::MtuAck { id, .. }) => {
                driver.pmtu.handle_ack(now, peer, id);
            }
            _ => {}
        }
    }

    /// Tracks an admitted member's path (a member in session, already
    /// tracked, is left as it is); a bootstrap peer is admitted before
    /// its certificate is checked and is tracked once it is.
    pub(super) fn track_path(
        &mut self,
        now: Instant,
        driver: &mut MeshDriver,
        key: &PublicKey,
        id: PeerId,
    ) {
        if !driver.mesh.is_member(key) {
            return;
        }
        // On demand, a member is probed only while in session: its path
        // is what the session uses, and an unmet member has none.
        if driver.mesh.on_demand() && !self.device.peer_has_session(id) {
            return;
        }
        let family = self
            .device
            .peer_status(id)
            .and_then(|status| status.endpoint)
            .map_or(Family::V4, |endpoint| Family::of(&endpoint));
        driver.pmtu.track(now, id, family);
    }

    /// A tracked member now sends from `endpoint`: search its path again.
    pub(super) fn path_moved(
        now: Instant,
        driver: &mut MeshDriver,
        id: PeerId,
        endpoint: SocketAddr,
    ) {
        if driver.pmtu.is_tracked(id) {
            driver.pmtu.path_changed(now, id, Family::of(&endpoint));
        }
    }

    /// Seals the prober's probes and applies its limit changes.
    pub(super) fn pump_path_mtu(&mut self, now: Instant, driver: &mut MeshDriver) {
        driver.pmtu.set_tunnel_mtu(now, self.device.mtu());
        while let Some(probe) = driver.pmtu.poll_probe() {
            self.seal_probe(now, driver, probe);
        }
        while let Some((id, limit)) = driver.pmtu.poll_change() {
            self.set_path_limit(id, limit);
        }
    }

    /// A probe leaves only inside a session: without one it is simply
    /// lost (and its round times out), so probing never starts handshakes
    /// nor queues stale probes behind one.
    fn seal_probe(&mut self, now: Instant, driver: &mut MeshDriver, probe: Probe) {
        if !self.device.peer_has_session(probe.peer) {
            return;
        }
        let message = Control::MtuProbe { id: probe.id }.encode();
        if message.len() > probe.plaintext_bytes {
            return;
        }
        let mut buf = vec![0u8; DATA_HEADROOM + probe.plaintext_bytes + DATA_TAILROOM];
        buf[DATA_HEADROOM..DATA_HEADROOM + message.len()].copy_from_slice(&message);
        if let Sent::Sealed {
            len,
            destination,
            source,
        } = self
            .device
            .encapsulate(now, probe.peer, &mut buf, probe.plaintext_bytes)
        {
            buf.truncate(len);
            driver.probes.push_back((destination, source, buf));
        }
    }
}
