//! Tunnel mode: the emulated peers as one multi-identity WireGuard
//! endpoint for the left host's own stack, so real TCP runs through a
//! hundred sessions.
//!
//! A TUN device ([`TUNNEL_NAME`], MTU [`MTU`], with offloads) on the
//! left host holds every peer's overlay address (/32) and a route to the
//! responder's overlay address. The control thread owns it:
//!
//! ```text
//! left kernel ─ TUN read (super-packets split into MTU packets, each in
//! a slot behind DATA_HEADROOM) ─ peer by the packet's source address ─
//! seal with its keys ─ one sendmmsg per read, each datagram from its
//! peer's underlay address ─▶ responder
//! responder ─▶ control.rs: open ─ TUN write (same-flow packets merged)
//! ```
//!
//! A packet from an address that is no peer's (say, the kernel's own
//! IPv6 chatter on the new link) is dropped. A datagram the socket will
//! not take after a few short waits is dropped too, as a full link
//! would; TCP resends it.

use std::io::{self, IoSlice};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use fjord_net::tun::read::Slots;
use fjord_net::tun::{IDEAL_BATCH_SIZE, MAX_SUPER_PACKET, TunReadError, is_device_gone};
use fjord_net::{TunDevice, UdpSocket};
use fjord_proto::{DATA_HEADROOM, DATA_TAILROOM, Sent};
use fjord_sys::mmsg::{GsoMessage, MAX_BATCH, send_gso_messages};

use super::{EmulatorError, MTU, PEER_OVERLAY_BASE, PeerEmulator, Shared, index_of, peer_overlay};

/// The TUN device's name on the peers' host.
pub const TUNNEL_NAME: &str = "peers0";
/// A slot: one packet of the MTU behind its header room, with room for
/// padding and tag.
const STRIDE: usize = DATA_HEADROOM + MTU as usize + DATA_TAILROOM;
/// TUN reads per wake before the receive side gets its turn.
const MAX_READS_PER_TURN: usize = 8;
/// Waits for room in the socket before a datagram is given up.
const MAX_SEND_WAITS: u8 = 3;
const SEND_WAIT: Duration = Duration::from_millis(5);

impl PeerEmulator<'_> {
    /// Switches to tunnel mode: creates the TUN device on the peers' host
    /// with every peer's overlay address and a route to
    /// `responder_overlay`.
    pub fn open_tunnel(&mut self, responder_overlay: Ipv4Addr) -> Result<(), EmulatorError> {
        self.restart_control(Some(TUNNEL_NAME))?;
        let mut commands: String = (0..self.peers())
            .map(|index| format!("address add {}/32 dev {TUNNEL_NAME}\n", peer_overlay(index)))
            .collect();
        commands.push_str(&format!(
            "link set dev {TUNNEL_NAME} mtu {MTU} up\n\
             route add {responder_overlay}/32 dev {TUNNEL_NAME}\n"
        ));
        self.namespace.ip_batch(&commands)?;
        Ok(())
    }

    /// Leaves tunnel mode: the TUN device goes, with its addresses and
    /// route.
    pub fn close_tunnel(&mut self) -> Result<(), EmulatorError> {
        self.restart_control(None)
    }
}

/// The TUN side: a slot area for one read, and what each slot became.
pub(super) struct Outbound {
    scratch: Vec<u8>,
    area: Vec<u8>,
    sizes: [usize; IDEAL_BATCH_SIZE],
    /// Per slot: the sealed datagram's length, where it goes and from
    /// which address (length zero: nothing to send).
    sealed: [(usize, SocketAddr, Ipv4Addr); IDEAL_BATCH_SIZE],
}

impl Outbound {
    pub(super) fn new() -> Self {
        let nowhere = (
            0,
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0)),
            Ipv4Addr::UNSPECIFIED,
        );
        Self {
            scratch: vec![0; MAX_SUPER_PACKET],
            area: vec![0; STRIDE * IDEAL_BATCH_SIZE],
            sizes: [0; IDEAL_BATCH_SIZE],
            sealed: [nowhere; IDEAL_BATCH_SIZE],
        }
    }

    /// Reads, seals and sends until the device has nothing more (or for a
    /// few reads). Fails only when the device is gone.
    pub(super) fn drain(
        &mut self,
        shared: &Shared,
        tun: &TunDevice,
        scratch: &mut [u8],
    ) -> io::Result<()> {
        for _ in 0..MAX_READS_PER_TURN {
            let slots = Slots {
                area: &mut self.area,
                stride: STRIDE,
                offset: DATA_HEADROOM,
            };
            let count = match tun.read_packets(&mut self.scratch, slots, &mut self.sizes) {
                Ok(count) => count,
                Err(TunReadError::Io(error)) => match error.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ if is_device_gone(&error) => return Err(error),
                    _ => {
                        tracing::debug!(%error, "peer emulator's TUN read");
                        continue;
                    }
                },
                Err(error) => {
                    tracing::debug!(%error, "peer emulator's TUN read");
                    continue;
                }
            };
            self.seal(shared, count, scratch);
            self.send(&shared.socket, count);
        }
        Ok(())
    }

    /// Seals the `count` packets read, each with the keys of the peer
    /// whose address is its source.
    fn seal(&mut self, shared: &Shared, count: usize, scratch: &mut [u8]) {
        let now = Instant::now();
        for (index, slot) in self.area.chunks_exact_mut(STRIDE).take(count).enumerate() {
            self.sealed[index].0 = 0;
            let size = self.sizes[index];
            let source = match slot[DATA_HEADROOM..][..size] {
                [version, _, _, _, _, _, _, _, _, _, _, _, a, b, c, d, ..] if version >> 4 == 4 => {
                    Ipv4Addr::new(a, b, c, d)
                }
                _ => continue,
            };
            let Some(peer_index) = index_of(PEER_OVERLAY_BASE, source, shared.peers.len()) else {
                continue;
            };
            let mut peer = shared.peer(peer_index);
            let responder = peer.responder;
            match peer.device.encapsulate(now, responder, slot, size) {
                Sent::Sealed {
                    len, destination, ..
                } => {
                    peer.sealed += 1;
                    self.sealed[index] = (len, destination, peer.underlay);
                }
                Sent::Staged | Sent::Dropped(_) => peer.unsealed += 1,
            }
            peer.send_queued(&shared.socket, scratch);
        }
    }

    /// Sends the sealed slots, each from its peer's address, in as few
    /// `sendmmsg` calls as the kernel takes.
    fn send(&self, socket: &UdpSocket, count: usize) {
        let pieces: [[IoSlice<'_>; 1]; IDEAL_BATCH_SIZE] = std::array::from_fn(|index| {
            let len = if index < count {
                self.sealed[index].0
            } else {
                0
            };
            [IoSlice::new(&self.area[index * STRIDE..][..len])]
        });
        let mut messages = [GsoMessage::EMPTY; IDEAL_BATCH_SIZE];
        let mut used = 0;
        for (index, &(len, destination, source)) in self.sealed[..count].iter().enumerate() {
            if len > 0 {
                messages[used] = GsoMessage {
                    destination,
                    source: Some(IpAddr::V4(source)),
                    pieces: &pieces[index],
                    segment_size: None,
                };
                used += 1;
            }
        }
        send_all(socket, &messages[..used]);
    }
}

/// Sends `messages` in order, waiting briefly for room when the socket is
/// full; a message it still refuses, or that fails, is dropped.
pub(super) fn send_all(socket: &UdpSocket, mut messages: &[GsoMessage<'_>]) {
    let mut waits = 0;
    while !messages.is_empty() {
        let batch = &messages[..messages.len().min(MAX_BATCH)];
        match send_gso_messages(socket.as_fd(), batch) {
            Ok(sent) => {
                messages = &messages[sent.max(1).min(messages.len())..];
                waits = 0;
            }
            Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
            Err(error) if error.kind() == io::ErrorKind::WouldBlock && waits < MAX_SEND_WAITS => {
                fjord_sys::poll::wait_writable(socket.as_fd(), SEND_WAIT);
                waits += 1;
            }
            Err(error) => {
                tracing::debug!(%error, "emulated peer's datagram dropped");
                messages = &messages[1..];
                waits = 0;
            }
        }
    }
}
