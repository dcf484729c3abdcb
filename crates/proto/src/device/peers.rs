//! Configuration and peers: keys, MTU, adding and removing peers, their
//! status, endpoints and keepalives, and the handshakes a driver starts
//! (at start, toward NAT-traversal endpoints, provisional mesh members).

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use crate::cookie::CookieChecker;
use crate::handshake::{RemoteKeys, StaticIdentity};
use crate::keys::{PresharedKey, PrivateKey, PublicKey};
use crate::outcome::PeerId;
use crate::peer::Peer;

use super::{Device, DeviceError, PeerConfig, PeerStatus};

impl Device {
    pub fn public_key(&self) -> Option<&PublicKey> {
        self.ctx.identity.as_ref().map(StaticIdentity::public_key)
    }

    pub fn private_key(&self) -> Option<&PrivateKey> {
        self.ctx.identity.as_ref().map(StaticIdentity::private_key)
    }

    /// Replaces (or removes) our private key. Every session and handshake
    /// in flight ends, since they were bound to the old key; a peer whose
    /// public key is the new own key is removed, as wireguard-go does.
    pub fn set_private_key(&mut self, private_key: Option<PrivateKey>) {
        let identity = private_key.map(StaticIdentity::new);
        if let Some(own) = identity.as_ref().map(|i| *i.public_key())
            && let Some(id) = self.peer_id(&own)
        {
            self.remove_peer(id);
        }
        self.cookie_checker = identity
            .as_ref()
            .map(|i| CookieChecker::new(i.public_key()));
        self.ctx.identity = identity;
        for peer in self.peers.iter_mut().flatten() {
            peer.remote.rekey(self.ctx.identity.as_ref());
            peer.erase_keys(&mut self.ctx);
        }
    }

    /// Changes a peer's preshared key; takes effect at the next handshake.
    pub fn set_peer_preshared_key(&mut self, id: PeerId, preshared_key: PresharedKey) {
        self.with_peer(id, |peer, _| peer.remote.set_preshared_key(preshared_key));
    }

    pub fn mtu(&self) -> usize {
        self.ctx.mtu
    }

    pub fn set_mtu(&mut self, mtu: usize) {
        self.ctx.mtu = mtu;
    }

    pub fn add_peer(&mut self, config: PeerConfig) -> Result<PeerId, DeviceError> {
        if self.peer_ids.contains_key(&config.public_key) {
            return Err(DeviceError::DuplicatePeer(config.public_key));
        }
        if Some(&config.public_key) == self.public_key() {
            return Err(DeviceError::OwnKey);
        }
        let remote = RemoteKeys::new(
            self.ctx.identity.as_ref(),
            config.public_key,
            config.preshared_key,
        );
        let id = PeerId(u32::try_from(self.peers.len()).unwrap_or(u32::MAX));
        self.peers.push(Some(Peer::new(
            remote,
            config.endpoint,
            config.persistent_keepalive,
        )));
        self.peer_ids.insert(config.public_key, id);
        Ok(id)
    }

    /// Removes a peer, erasing its keys and releasing its indices.
    pub fn remove_peer(&mut self, id: PeerId) {
        if let Some(mut peer) = self.peers.get_mut(id.index()).and_then(Option::take) {
            peer.erase_keys(&mut self.ctx);
            self.peer_ids.remove(peer.remote.public_key());
            self.deadlines.remove(id.index());
            self.provisional.remove(&id);
        }
    }

    pub fn peer_id(&self, public_key: &PublicKey) -> Option<PeerId> {
        self.peer_ids.get(public_key).copied()
    }

    pub fn peer_ids(&self) -> impl Iterator<Item = PeerId> + '_ {
        self.peers
            .iter()
            .enumerate()
            .filter(|(_, peer)| peer.is_some())
            .map(|(index, _)| PeerId(index as u32))
    }

    pub fn peer_status(&self, id: PeerId) -> Option<PeerStatus> {
        let peer = self.peer(id)?;
        Some(PeerStatus {
            public_key: *peer.remote.public_key(),
            has_preshared_key: !peer.remote.preshared_key().is_zero(),
            endpoint: peer.endpoint.map(|endpoint| endpoint.remote),
            local_address: peer.endpoint.and_then(|endpoint| endpoint.local),
            persistent_keepalive: peer.timers.persistent_keepalive_interval(),
            stats: peer.stats.clone(),
            sending_cipher: peer.sending_cipher(),
            speaks_fjord: peer.speaks_fjord(),
            sending_codec: peer.sending_codec(),
            staged_packets: peer.staged_len(),
        })
    }

    /// The peer's preshared key (all zeros when none is configured).
    pub fn peer_preshared_key(&self, id: PeerId) -> Option<&PresharedKey> {
        self.peer(id).map(|peer| peer.remote.preshared_key())
    }

    pub fn set_peer_endpoint(&mut self, id: PeerId, endpoint: SocketAddr) {
        self.with_peer(id, |peer, _| peer.endpoint = Some(endpoint.into()));
    }

    /// Forgets every kept local address (the one each peer reached us at)
    /// that `is_gone` says the host no longer has: datagrams to those
    /// peers leave from the route's choice of source until the peer's next
    /// datagram says which address it reaches us at now. Returns how many
    /// peers had one. Kept, a removed address makes the kernel refuse the
    /// send (IPv4) or, on a socket bound to it, send from an address no
    /// reply can reach (IPv6).
    pub fn forget_local_addresses(&mut self, is_gone: impl Fn(IpAddr) -> bool) -> usize {
        let mut forgotten = 0;
        for peer in self.peers.iter_mut().flatten() {
            if let Some(endpoint) = &mut peer.endpoint
                && endpoint.local.is_some_and(&is_gone)
            {
                endpoint.local = None;
                forgotten += 1;
            }
        }
        forgotten
    }

    pub fn set_peer_persistent_keepalive(
        &mut self,
        id: PeerId,
        now: Instant,
        interval: Option<Duration>,
    ) {
        self.with_peer(id, |peer, _| {
            peer.timers.set_persistent_keepalive_interval(now, interval);
        });
    }

    /// Sends a keepalive now (starting a handshake first if there is no
    /// session), as wireguard-go does when a persistent keepalive is set.
    pub fn send_keepalive(&mut self, id: PeerId, now: Instant) {
        self.with_peer(id, |peer, ctx| peer.send_keepalive(id, now, ctx));
    }

    /// Sends a keepalive to every peer with a current session, so that
    /// each learns our new address at once (after a listen-port change).
    pub fn keepalive_all_sessions(&mut self, now: Instant) {
        let ids: Vec<PeerId> = self.peer_ids().collect();
        for id in ids {
            self.with_peer(id, |peer, ctx| {
                if peer.can_send(now) {
                    peer.send_keepalive(id, now, ctx);
                }
            });
        }
    }

    /// Seals a fjord extension payload (its first byte must be
    /// [`crate::extension::EXTENSION_MARKER`]) to the peer inside its session,
    /// queued for `poll_transmit`; with no session it is staged and a
    /// handshake starts, as for any packet. Not for the data path: it
    /// allocates.
    /// Forgets the peer's sessions and any handshake in flight (the peer
    /// said it is going away: it holds none of them any more), so the
    /// next packet for it starts a handshake at once instead of leaving
    /// on a session nobody can open, unanswered until the keepalive
    /// timeout 15 s later.
    pub fn end_sessions(&mut self, id: PeerId) {
        self.with_peer(id, |peer, ctx| {
            peer.erase_keys(ctx);
            // The pacing of initiations was toward the peer as it was;
            // the first one to it as it comes back may leave at once.
            peer.last_initiation_sent = None;
        });
    }

    /// Closes the peer's sessions on purpose (fjord closes a session
    /// idle for its timeout): keys erased as by [`Device::end_sessions`],
    /// and its timers cleared, so no keepalive or handshake follows; the
    /// next packet for the peer starts a handshake.
    pub fn close_sessions(&mut self, id: PeerId) {
        self.with_peer(id, |peer, ctx| {
            peer.erase_keys(ctx);
            peer.timers.clear();
            peer.last_initiation_sent = None;
        });
    }

    pub fn send_extension(&mut self, id: PeerId, now: Instant, payload: &[u8]) {
        self.with_peer(id, |peer, ctx| peer.send_extension(id, now, payload, ctx));
    }

    /// Arms the timers a received data packet arms (a keepalive goes back
    /// if nothing else does within 10 s) for an extension payload that
    /// the caller treats as data: a switch-mode frame. Extension payloads
    /// are otherwise taken for control, which asks for no answer.
    pub fn note_data_received(&mut self, id: PeerId, now: Instant) {
        self.with_peer(id, |peer, ctx| peer.timers.data_received(now, &ctx.timing));
    }

    /// Sends one handshake initiation now, a copy to each of
    /// `endpoints`, even if one went out less than REKEY_TIMEOUT ago: NAT
    /// traversal needs the initiation to leave right after both sides
    /// learned where to aim, not seconds later. The caller bounds how
    /// often it asks. A peer without a session is pointed at the first
    /// endpoint; a peer with one stays where it is, and only the answer
    /// (from wherever it comes) moves it, so probing a direct path never
    /// breaks a session that works through a relay.
    pub fn initiate_toward(&mut self, id: PeerId, now: Instant, endpoints: &[SocketAddr]) {
        let Some(&first) = endpoints.first() else {
            return;
        };
        self.with_peer(id, |peer, ctx| {
            if !peer.has_session() || peer.endpoint.is_none() {
                peer.endpoint = Some(first.into());
            }
            peer.initiate_afresh_to(id, now, ctx, endpoints);
        });
    }

    /// Admits up to `limit` peers that nobody configured when their
    /// initiation proves their key (a fjord mesh, where a member does not
    /// know a newcomer yet); `None` (the default) refuses them as
    /// WireGuard does. Each is announced by
    /// [`Event::UnknownPeerAdmitted`](crate::Event::UnknownPeerAdmitted)
    /// and stays provisional until [`Device::confirm_peer`] or
    /// [`Device::remove_peer`].
    pub fn set_unknown_peer_limit(&mut self, limit: Option<usize>) {
        self.unknown_peer_limit = limit;
    }

    /// Makes a provisional peer an ordinary one.
    pub fn confirm_peer(&mut self, id: PeerId) {
        self.provisional.remove(&id);
    }

    pub fn is_provisional(&self, id: PeerId) -> bool {
        self.provisional.contains(&id)
    }

    pub fn peer_public_key(&self, id: PeerId) -> Option<&PublicKey> {
        self.peer(id).map(|peer| peer.remote.public_key())
    }

    /// Whether the peer has an established (or confirming) session.
    pub fn peer_has_session(&self, id: PeerId) -> bool {
        self.peer(id).is_some_and(Peer::has_session)
    }

    /// Starts a handshake now (rate-limited to one per REKEY_TIMEOUT), as a
    /// configured persistent keepalive or an eager interface does at start.
    pub fn initiate_handshake(&mut self, id: PeerId, now: Instant) {
        self.with_peer(id, |peer, ctx| peer.initiate(id, now, ctx, false));
    }
}
