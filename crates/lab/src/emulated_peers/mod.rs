//! The peer emulator: one process holding many WireGuard peers of one
//! responder (the system under test), each its own identity (key pair),
//! underlay address and overlay address, each with its own session. A
//! responder configured with a thousand peers faces a thousand real
//! sessions this way on a 2-core machine where a thousand peer processes
//! would not fit.
//!
//! Address plan, on the lab's two hosts: peer `i` sends from
//! [`peer_underlay`]`(i)` (198.18.16.1, 198.18.16.2, … on the left host's
//! link, port [`EMULATOR_PORT`]) and owns [`peer_overlay`]`(i)`
//! (198.19.16.1, …); the responder listens on the right host's underlay
//! address and allows each peer its overlay /32. The right host reaches
//! the peers' underlay through the left host ([`route_to_peers`]): one
//! route and one neighbour entry, however many peers.
//!
//! Pieces:
//! - [`PeerEmulator`] (here): the peers, each a `fjord_proto::Device`
//!   whose only peer is the responder; one UDP socket for all of them
//!   (each datagram leaves from its peer's address); handshakes, paced.
//! - `control.rs`: the control thread, inside the left host: datagrams
//!   from the responder (handshake responses, cookie replies, keepalives;
//!   in tunnel mode also data, written to the TUN device), and timers.
//! - `carrier.rs`: a [`Carrier`] for UDP trials: each frame becomes an
//!   IPv4/UDP packet from the next peer's overlay address (round robin,
//!   [`INNER_FLOWS`] flows whatever the number of peers), sealed in that
//!   peer's session and sent from its underlay address.
//! - `tunnel.rs`: tunnel mode, for TCP: a TUN device on the left host
//!   holding every peer's overlay address; a packet read from it leaves
//!   through the session of the peer whose address is its source.
//!
//! ```text
//! UDP trial:  sender ─ payload ─ carrier: IPv4/UDP from peer k's overlay,
//!             sealed with peer k's keys, sent from peer k's underlay ─▶
//!             responder ─ its TUN ─▶ receiver (right host)
//! tunnel:     left kernel ─ TUN ─ control thread: seal for the peer of
//!             the source ─▶ responder ─▶ … and back: open ─ TUN
//! ```
//!
//! Each peer's state sits behind its own lock, taken by one thread at a
//! time for one packet or one timer: the trial's sender, the control
//! thread and the handshaking caller never hold two. A frame due for a
//! peer without a session is dropped (counted in [`EmulatorStats`]) and a
//! handshake starts. Handshakes go out paced ([`HANDSHAKES_PER_SECOND`])
//! so a responder is not pushed into asking for cookies (an initiator
//! that gets a cookie reply sends its initiation again at once, so that
//! costs a round trip, not a failure). Before each trial the carrier
//! renews sessions older than [`RENEW_AFTER`], so no rekey (after 120 s)
//! falls inside a trial: the trial measures the data path alone.
//!
//! The emulator shares the machine with the responder: how fast it can
//! offer frames into a sink that drops everything is its ceiling, which
//! the `peers` suite measures beside every figure.

mod carrier;
mod control;
mod tunnel;

pub use carrier::INNER_FLOWS;

use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_mesh::Cidr;
use fjord_net::UdpSocket;
use fjord_proto::{Device, DeviceConfig, PeerConfig, PeerId, PresharedKey, PrivateKey, PublicKey};
use fjord_proto::{Rng, WallClock};

use crate::netns::{Namespace, NetnsError};
use crate::systems::SystemError;
use crate::systems::wireguard::{DEFAULT_MTU, WgPeer, WgSide, generate_private_key, unique_ifname};
use crate::traffic::udp::Carrier;
use carrier::SealingCarrier;
use control::ControlThread;

/// UDP port every emulated peer sends from and receives on.
pub const EMULATOR_PORT: u16 = 51821;
/// Most peers one emulator holds: the hosts of a /20 but the first and last.
pub const MAX_PEERS: usize = 4094;
/// Handshake initiations sent per second while establishing or renewing
/// sessions: below fjord's and wireguard-go's thresholds for demanding
/// cookies (512 a second), so only boringtun (100) asks for them.
pub const HANDSHAKES_PER_SECOND: u32 = 400;
/// Sessions older than this are renewed before a trial: a trial (10 s at
/// most, with its warm-up and drain) then ends before any session reaches
/// WireGuard's rekey age of 120 s.
pub const RENEW_AFTER: Duration = Duration::from_secs(90);
/// Inner MTU of every session and of the tunnel mode's TUN device.
pub const MTU: u16 = DEFAULT_MTU;

const PEER_UNDERLAY_BASE: Ipv4Addr = Ipv4Addr::new(198, 18, 16, 0);
const PEER_OVERLAY_BASE: Ipv4Addr = Ipv4Addr::new(198, 19, 16, 0);
/// The network holding every peer's underlay address.
pub const PEER_UNDERLAY_NETWORK: &str = "198.18.16.0/20";
/// Room for any control datagram a device queues (a staged data packet
/// of the MTU, sealed, at most).
const TRANSMIT_BUFFER_BYTES: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("{0} peers asked for; the emulator holds 1 to {MAX_PEERS}")]
    PeerCount(usize),
    #[error("{operation}: {source}")]
    Io {
        operation: String,
        #[source]
        source: io::Error,
    },
    #[error(transparent)]
    Namespace(#[from] NetnsError),
    #[error(transparent)]
    Keys(#[from] SystemError),
    #[error("{done} of {wanted} peers completed a handshake within {timeout:?}")]
    Handshakes {
        done: usize,
        wanted: usize,
        timeout: Duration,
    },
}

fn io_error(operation: &str) -> impl FnOnce(io::Error) -> EmulatorError + '_ {
    move |source| EmulatorError::Io {
        operation: operation.to_string(),
        source,
    }
}

/// Underlay address of peer `index` (from 198.18.16.1).
pub fn peer_underlay(index: usize) -> Ipv4Addr {
    offset(PEER_UNDERLAY_BASE, index)
}

/// Overlay address of peer `index` (from 198.19.16.1).
pub fn peer_overlay(index: usize) -> Ipv4Addr {
    offset(PEER_OVERLAY_BASE, index)
}

fn offset(base: Ipv4Addr, index: usize) -> Ipv4Addr {
    assert!(index < MAX_PEERS, "peer {index} is outside the plan");
    // By the assertion the index fits the 12 host bits of the /20.
    Ipv4Addr::from(u32::from(base) + 1 + index as u32)
}

/// The peer whose address (from `base`) `address` is, among `peers`.
fn index_of(base: Ipv4Addr, address: Ipv4Addr, peers: usize) -> Option<usize> {
    let index = u32::from(address).checked_sub(u32::from(base) + 1)? as usize;
    (index < peers).then_some(index)
}

/// Makes the peers' underlay reachable from `namespace` through `gateway`
/// (the address of the host the emulator runs on).
pub fn route_to_peers(namespace: &Namespace, gateway: Ipv4Addr) -> Result<(), NetnsError> {
    let via = gateway.to_string();
    namespace
        .ip(&["route", "replace", PEER_UNDERLAY_NETWORK, "via", &via])
        .map(drop)
}

/// Prefix length of the responder's overlay address: a /16 holds every
/// peer's overlay address, so the responder needs no route per peer.
pub const RESPONDER_PREFIX_LEN: u8 = 16;

/// The responder's side for the peers whose keys are `peer_keys` (in peer
/// order, from [`PeerEmulator::public_keys`]): listening on `listen_port`
/// with `overlay`/16, peer `i` allowed [`peer_overlay`]`(i)`/32 and given
/// no endpoint (the peers initiate).
pub fn responder_side(
    private_key: PrivateKey,
    listen_port: u16,
    overlay: Ipv4Addr,
    peer_keys: &[PublicKey],
) -> WgSide {
    // A /16 is valid for any IPv4 address.
    let subnet = Cidr::new(IpAddr::V4(overlay), RESPONDER_PREFIX_LEN).expect("/16 fits IPv4");
    let mut side = WgSide::new(unique_ifname(), private_key, listen_port, vec![subnet]);
    side.mtu = MTU;
    side.peers = peer_keys
        .iter()
        .enumerate()
        .map(|(index, key)| WgPeer {
            public_key: *key,
            preshared_key: None,
            endpoint: None,
            allowed_ips: vec![Cidr::host(IpAddr::V4(peer_overlay(index)))],
            persistent_keepalive_secs: None,
            fallback_port: None,
        })
        .collect();
    side
}

/// The operating system's random numbers, for the peers' devices.
struct OsRandom;

impl Rng for OsRandom {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // Invariant: getrandom fails only on platforms without a kernel
        // entropy source, where no key could have been made either.
        getrandom::fill(dest).expect("the kernel's random number generator is available");
    }
}

/// One emulated peer.
struct EmulatedPeer {
    /// Its identity and session state; the responder is its only peer.
    device: Device,
    responder: PeerId,
    underlay: Ipv4Addr,
    overlay: Ipv4Addr,
    /// Packets sealed for the responder.
    sealed: u64,
    /// Packets dropped for want of a session.
    unsealed: u64,
}

impl EmulatedPeer {
    /// Sends what the device queued (handshakes, keepalives, packets
    /// staged for a handshake) from this peer's address, and discards its
    /// log events. A full socket loses the datagram, as a network would;
    /// the protocol's retries cover it.
    fn send_queued(&mut self, socket: &UdpSocket, scratch: &mut [u8]) {
        while let Some(transmit) = self.device.poll_transmit(scratch) {
            let source = Some(IpAddr::V4(self.underlay));
            if let Err(error) = socket.send(transmit.destination, source, &scratch[..transmit.len])
            {
                tracing::debug!(%error, peer = %self.underlay, "emulated peer could not send");
            }
        }
        while self.device.poll_event().is_some() {}
    }

    /// Wall time of the latest completed handshake.
    fn last_handshake(&self) -> Option<Duration> {
        self.device
            .peer_status(self.responder)
            .and_then(|status| status.stats.last_handshake)
    }
}

/// What the carrier, the control thread and the caller share.
struct Shared {
    /// Each lock guards one peer's protocol state and counters.
    peers: Vec<Mutex<EmulatedPeer>>,
    socket: UdpSocket,
    wall_clock: WallClock,
    /// CPU time of the running control thread, in ns, as it last noted
    /// (every timer tick).
    control_cpu_nanos: AtomicU64,
}

impl Shared {
    /// Peer `index`, locked; a peer whose lock was poisoned (a thread
    /// panicked while holding it) is still usable: its counters and
    /// session are whatever the panic left, which the protocol copes with.
    fn peer(&self, index: usize) -> MutexGuard<'_, EmulatedPeer> {
        self.peers[index]
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Handshakes for the peers `indices`, paced, then waits until each
    /// completed one newer than the first sent, or `timeout` passes.
    fn handshake(&self, indices: &[usize], timeout: Duration) -> Result<(), EmulatorError> {
        let started = Instant::now();
        let since = self.wall_clock.since_epoch(started);
        let interval = Duration::from_secs(1) / HANDSHAKES_PER_SECOND;
        let mut scratch = vec![0u8; TRANSMIT_BUFFER_BYTES];
        for (sent, &index) in indices.iter().enumerate() {
            let due = started + interval * sent as u32;
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            let mut peer = self.peer(index);
            let responder = peer.responder;
            peer.device.initiate_handshake(responder, Instant::now());
            peer.send_queued(&self.socket, &mut scratch);
        }
        let deadline = started + timeout;
        loop {
            let done = indices
                .iter()
                .filter(|&&index| self.peer(index).last_handshake() >= Some(since))
                .count();
            if done == indices.len() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(EmulatorError::Handshakes {
                    done,
                    wanted: indices.len(),
                    timeout,
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Renews the sessions older than `age` (or missing); how many.
    fn renew(&self, age: Duration, timeout: Duration) -> Result<usize, EmulatorError> {
        let now = self.wall_clock.since_epoch(Instant::now());
        let due: Vec<usize> = (0..self.peers.len())
            .filter(|&index| {
                self.peer(index)
                    .last_handshake()
                    .is_none_or(|at| now.saturating_sub(at) > age)
            })
            .collect();
        if !due.is_empty() {
            self.handshake(&due, timeout)?;
        }
        Ok(due.len())
    }
}

/// How the peers' traffic went, summed over every peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EmulatorStats {
    /// Packets sealed for the responder.
    pub sealed: u64,
    /// Packets dropped for want of a session.
    pub unsealed: u64,
    /// Peers that sealed at least one packet.
    pub peers_used: usize,
}

/// The emulated peers of one responder, on one host. Dropping it stops
/// the control thread (and a tunnel) and removes the peers' addresses.
pub struct PeerEmulator<'a> {
    namespace: &'a Namespace,
    link: String,
    shared: Arc<Shared>,
    responder: SocketAddr,
    /// `None` only while it restarts.
    control: Option<ControlThread>,
}

impl<'a> PeerEmulator<'a> {
    /// `count` peers of the responder `responder_key` at `responder`, on
    /// `namespace`'s `link`, each with a fresh key. Nothing is sent until
    /// [`PeerEmulator::establish`].
    pub fn start(
        namespace: &'a Namespace,
        link: &str,
        count: usize,
        responder_key: &PublicKey,
        responder: SocketAddr,
    ) -> Result<Self, EmulatorError> {
        if count == 0 || count > MAX_PEERS {
            return Err(EmulatorError::PeerCount(count));
        }
        let addresses: String = (0..count)
            .map(|index| format!("address replace {}/32 dev {link}\n", peer_underlay(index)))
            .collect();
        namespace.ip_batch(&addresses)?;
        let now = Instant::now();
        let wall_clock = WallClock {
            base: now,
            base_since_epoch: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
        };
        let mut peers = Vec::with_capacity(count);
        for index in 0..count {
            let mut device = Device::new(
                DeviceConfig {
                    private_key: Some(generate_private_key()?),
                    mtu: usize::from(MTU),
                },
                Box::new(OsRandom),
                wall_clock,
            );
            let responder_id = device
                .add_peer(PeerConfig {
                    public_key: *responder_key,
                    preshared_key: PresharedKey::zero(),
                    endpoint: Some(responder),
                    persistent_keepalive: None,
                })
                .map_err(|error| EmulatorError::Io {
                    operation: "add the responder to an emulated peer".into(),
                    source: io::Error::other(error.to_string()),
                })?;
            peers.push(Mutex::new(EmulatedPeer {
                device,
                responder: responder_id,
                underlay: peer_underlay(index),
                overlay: peer_overlay(index),
                sealed: 0,
                unsealed: 0,
            }));
        }
        let socket = namespace
            .spawn_thread(|| UdpSocket::bind(EMULATOR_PORT, 0).map_err(io::Error::other))
            .map_err(io_error("start a thread in the peers' namespace"))?
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("thread panicked")))
            .map_err(io_error("bind the emulated peers' socket"))?;
        let shared = Arc::new(Shared {
            peers,
            socket,
            wall_clock,
            control_cpu_nanos: AtomicU64::new(0),
        });
        let control = ControlThread::spawn(namespace, shared.clone(), None)?;
        Ok(Self {
            namespace,
            link: link.to_string(),
            shared,
            responder,
            control: Some(control),
        })
    }

    pub fn peers(&self) -> usize {
        self.shared.peers.len()
    }

    /// Every peer's public key, in peer order, for the responder's config.
    pub fn public_keys(&self) -> Vec<PublicKey> {
        (0..self.peers())
            .filter_map(|index| self.shared.peer(index).device.public_key().copied())
            .collect()
    }

    /// Handshakes every peer with the responder (paced); the time it took.
    pub fn establish(&self, timeout: Duration) -> Result<Duration, EmulatorError> {
        let started = Instant::now();
        let all: Vec<usize> = (0..self.peers()).collect();
        self.shared.handshake(&all, timeout)?;
        Ok(started.elapsed())
    }

    /// Renews the sessions older than `age`; how many were.
    pub fn renew(&self, age: Duration, timeout: Duration) -> Result<usize, EmulatorError> {
        self.shared.renew(age, timeout)
    }

    /// A carrier for UDP trials through the responder: frames spread
    /// round robin over every peer's session, sessions older than
    /// [`RENEW_AFTER`] renewed before each trial.
    pub fn carrier(&self) -> Arc<dyn Carrier> {
        Arc::new(SealingCarrier::new(
            self.shared.clone(),
            self.responder,
            true,
        ))
    }

    /// The same sealing, with every datagram sent to `sink` instead of
    /// the responder: the emulator's own ceiling when `sink` drops them.
    pub fn carrier_into(&self, sink: SocketAddr) -> Arc<dyn Carrier> {
        Arc::new(SealingCarrier::new(self.shared.clone(), sink, false))
    }

    /// CPU time the control thread has used since it (re)started (with
    /// the last mode change), as of its last timer tick (50 ms): in tunnel
    /// mode, what carrying the traffic cost the emulator.
    pub fn control_cpu_time(&self) -> Duration {
        Duration::from_nanos(self.shared.control_cpu_nanos.load(Ordering::Relaxed))
    }

    /// Sums every peer's counters.
    pub fn stats(&self) -> EmulatorStats {
        (0..self.peers()).fold(EmulatorStats::default(), |mut stats, index| {
            let peer = self.shared.peer(index);
            stats.sealed += peer.sealed;
            stats.unsealed += peer.unsealed;
            stats.peers_used += usize::from(peer.sealed > 0);
            stats
        })
    }

    /// Restarts the control thread with `tunnel` (or without one); an
    /// error of the old thread is reported once the new one runs.
    fn restart_control(&mut self, tunnel: Option<&str>) -> Result<(), EmulatorError> {
        let stopped = self.control.take().map_or(Ok(()), ControlThread::stop);
        self.control = Some(ControlThread::spawn(
            self.namespace,
            self.shared.clone(),
            tunnel,
        )?);
        stopped
    }

    /// The control thread's error, if it stopped on one.
    pub fn check(&mut self) -> Result<(), EmulatorError> {
        match &mut self.control {
            Some(control) => control.check(),
            None => Ok(()),
        }
    }
}

impl Drop for PeerEmulator<'_> {
    fn drop(&mut self) {
        if let Some(control) = self.control.take()
            && let Err(error) = control.stop()
        {
            tracing::warn!(%error, "peer emulator's control thread");
        }
        let addresses: String = (0..self.peers())
            .map(|index| {
                format!(
                    "address del {}/32 dev {}\n",
                    peer_underlay(index),
                    self.link
                )
            })
            .collect();
        if let Err(error) = self.namespace.ip_batch(&addresses) {
            tracing::warn!(%error, "could not remove the emulated peers' addresses");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_follow_the_plan_and_map_back() {
        assert_eq!(peer_underlay(0), Ipv4Addr::new(198, 18, 16, 1));
        assert_eq!(peer_overlay(999), Ipv4Addr::new(198, 19, 19, 232));
        assert_eq!(peer_overlay(MAX_PEERS - 1), Ipv4Addr::new(198, 19, 31, 254));
        for index in [0, 1, 254, 255, 999] {
            assert_eq!(
                index_of(PEER_OVERLAY_BASE, peer_overlay(index), 1000),
                Some(index)
            );
            assert_eq!(
                index_of(PEER_UNDERLAY_BASE, peer_underlay(index), 1000),
                Some(index)
            );
        }
        assert_eq!(index_of(PEER_OVERLAY_BASE, peer_overlay(10), 10), None);
        assert_eq!(
            index_of(PEER_OVERLAY_BASE, Ipv4Addr::new(198, 19, 0, 2), 10),
            None
        );
    }
}
