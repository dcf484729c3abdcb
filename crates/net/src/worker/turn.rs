//! One turn of the worker over its ready sources, and the share of time
//! the interface's socket gets under a handshake flood.
//!
//! ```text
//! TUN: up to BATCHES_PER_TURN reads ─ each peer's own socket: as many
//! receives ─ the interface's socket: as many, or one while the others
//! have work; under a flood only within FLOODED_SOCKET_SHARE of a core,
//! and unwatched once that is spent until it is earned back
//! ```
//!
//! The interface's socket is where a flood of spoofed handshake
//! initiations lands; peers with a session have sockets of their own
//! (steering.rs), so their data never waits behind it.

use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use mio::Interest;
use mio::unix::SourceFd;

use super::{BATCHES_PER_TURN, StopReason, UDP, Worker};
use crate::crypto_stage::CryptoStage;
use crate::datapath::{Drained, Pace, Pipes, ReceiveOn};

/// Batches from the interface's socket per turn while the TUN or a peer's
/// own socket has work too. Peers with a session have their own sockets,
/// so what crowds the interface's socket then is mostly a handshake flood
/// (or peers past `MAX_STEERED`): the tunnels' data goes first.
const SHARED_BATCHES_WHEN_BUSY: usize = 1;
/// Share of the worker's time the interface's socket may take while the
/// device is under a handshake flood: one eighth of a core, in CPU time.
/// An unpaced flood fills that socket faster than anything could read it
/// (every datagram costs a receive and a MAC, about 1 µs), so reading
/// all of it would take a core; the kernel drops what is left unread,
/// and peers with a session have sockets of their own.
pub(super) const FLOODED_SOCKET_SHARE: u32 = 8;
/// Time the flooded socket may save up while it is quiet.
pub(super) const FLOODED_SOCKET_CREDIT: Duration = Duration::from_millis(2);

/// Sources with data left: readiness is edge-triggered, so each stays
/// ready until a drain finds it empty.
#[derive(Default)]
pub(super) struct Ready {
    pub(super) tun: bool,
    pub(super) udp: bool,
    /// Steered sockets (by slot) and the fallback's carriers.
    pub(super) steered: Vec<ReceiveOn>,
}

impl Ready {
    /// Whether a turn has work; `udp_paused`: the interface's socket waits
    /// for its share of time.
    pub(super) fn any(&self, udp_paused: bool) -> bool {
        self.tun || (self.udp && !udp_paused) || !self.steered.is_empty()
    }
}

impl Worker {
    /// One turn over the ready sources: bounded batches from the TUN, from
    /// each peer's own socket and the fallback's carriers, then from the interface's socket (less
    /// while the others have work, and within its share of time under a
    /// flood). A source found empty is no longer ready; `Some` when the
    /// worker must stop.
    pub(super) fn turn(
        &mut self,
        now: Instant,
        ready: &mut Ready,
        stage: &CryptoStage,
        pace: Pace,
    ) -> Option<StopReason> {
        let flooded = self.node.device().under_load(now);
        let mut read_udp = ready.udp && self.udp_paused_until.is_none();
        if read_udp && flooded && !self.flooded_socket.allows(now) {
            let until = self.flooded_socket.allows_at(now);
            self.pause_udp(until);
            read_udp = false;
        }
        let mut pipes = Pipes {
            node: &mut self.node,
            tun: &mut self.tun,
            udp: &self.udp,
            stage,
            stats: &mut self.stats,
        };
        let mut device_gone = false;
        let mut still_ready = |drained: Drained| match drained {
            Drained::Empty => false,
            Drained::MoreWaiting => true,
            Drained::DeviceGone => {
                device_gone = true;
                false
            }
        };
        if ready.tun {
            ready.tun = still_ready(self.outbound.drain(now, &mut pipes, BATCHES_PER_TURN, pace));
        }
        // Carriers need the worker itself after their read (a connection
        // the peer closed is closed here too), once the pipes are done.
        let mut closed_carriers = Vec::new();
        let mut fake_tcp_read = false;
        ready.steered.retain(|&on| {
            let more = still_ready(self.inbound.drain(now, &mut pipes, on, BATCHES_PER_TURN));
            match on {
                ReceiveOn::Carrier(slot) if pipes.udp.carriers().is_closed(slot) => {
                    closed_carriers.push(slot);
                }
                ReceiveOn::FakeTcp => fake_tcp_read = true,
                _ => {}
            }
            more
        });
        if read_udp {
            let batches = if ready.tun || !ready.steered.is_empty() {
                SHARED_BATCHES_WHEN_BUSY
            } else {
                BATCHES_PER_TURN
            };
            // Charged in this thread's CPU time: on a busy machine the
            // wall time of a batch includes other tasks' turns.
            let cpu_before = flooded.then(fjord_sys::thread::thread_cpu_time);
            ready.udp =
                still_ready(
                    self.inbound
                        .drain(now, &mut pipes, ReceiveOn::Interface, batches),
                );
            if let Some(before) = cpu_before {
                let spent = fjord_sys::thread::thread_cpu_time().saturating_sub(before);
                self.flooded_socket.spent(spent);
            }
        }
        for slot in closed_carriers {
            self.close_carrier(slot, true);
        }
        if fake_tcp_read {
            self.report_flows();
        }
        device_gone.then_some(StopReason::InterfaceDeleted)
    }

    /// Stops watching the interface's socket until `until`: under a flood
    /// it would wake the worker for every datagram.
    fn pause_udp(&mut self, until: Instant) {
        let fd = self.udp.as_raw_fd();
        if let Err(error) = self.poll.registry().deregister(&mut SourceFd(&fd)) {
            tracing::debug!(%error, "could not stop watching the flooded socket");
            return;
        }
        self.udp_paused_until = Some(until);
    }

    /// Watches the interface's socket: again after a pause, or a new one
    /// after the port changed. What waits on it is found at once
    /// (registering reports a socket that is readable already).
    pub(super) fn watch_udp(&mut self) {
        self.udp_paused_until = None;
        let fd = self.udp.as_raw_fd();
        if let Err(error) =
            self.poll
                .registry()
                .register(&mut SourceFd(&fd), UDP, Interest::READABLE)
        {
            tracing::error!(%error, "could not watch the UDP socket");
        }
    }
}
