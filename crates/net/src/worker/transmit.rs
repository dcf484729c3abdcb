//! The node's datagrams leave here, each as its `Transmit` says: most with
//! the socket as it is, NAT-traversal punches with a low TTL, path MTU
//! probes without fragmentation.
//!
//! ```text
//! Node::poll_transmit(now) ─▶ ttl / dont_fragment differ from the socket's?
//!                             └─▶ set them (restored after the last one)
//!                         ─▶ send (a probe's EMSGSIZE is an answer, not an error)
//! ```
//!
//! The socket's options are switched around the few datagrams that need
//! them and restored: nothing else sends on this thread meanwhile (the
//! crypto threads only seal and open), and punches and probes are a few
//! per member and round, so the system calls cost nothing, while data
//! keeps the socket's own TTL and fragmentable mode.

use std::time::Instant;

use fjord_proto::Transmit;

use super::Worker;
use crate::egress::Egress;

/// The socket options a transmit asked for, as the socket has them now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct SocketShape {
    /// `None`: the socket's default TTL (IPv6 hop limit).
    ttl: Option<u8>,
    dont_fragment: bool,
}

impl SocketShape {
    fn of(transmit: &Transmit) -> Self {
        Self {
            ttl: transmit.ttl,
            dont_fragment: transmit.dont_fragment,
        }
    }

    /// Switches the socket from `self` to `wanted`; on failure the
    /// datagrams go as they are.
    fn switch(&mut self, udp: &Egress, wanted: Self) {
        if wanted.ttl != self.ttl {
            if let Err(error) = udp.set_ttl(wanted.ttl) {
                match wanted.ttl {
                    Some(_) => {
                        tracing::debug!(%error, "cannot lower the TTL for NAT punches; sending them as they are")
                    }
                    None => {
                        tracing::warn!(%error, "cannot restore the socket TTL after NAT punches")
                    }
                }
            }
            self.ttl = wanted.ttl;
        }
        if wanted.dont_fragment != self.dont_fragment {
            if let Err(error) = udp.set_fragmentation(!wanted.dont_fragment) {
                if wanted.dont_fragment {
                    tracing::debug!(%error, "cannot set Don't Fragment for path MTU probes; sending them as they are");
                } else {
                    tracing::warn!(%error, "cannot restore fragmentation after path MTU probes");
                }
            }
            self.dont_fragment = wanted.dont_fragment;
        }
    }
}

impl Worker {
    /// Sends every datagram the node has queued.
    pub(super) fn send_transmits(&mut self, now: Instant) {
        let mut shape = SocketShape::default();
        while let Some(transmit) = self.node.poll_transmit(now, &mut self.control_buffer) {
            shape.switch(&self.udp, SocketShape::of(&transmit));
            let datagram = &self.control_buffer[..transmit.len];
            if transmit.dont_fragment {
                // A probe larger than our own link fails with EMSGSIZE:
                // that is an answer too (its round counts it lost), not
                // an error.
                if self
                    .udp
                    .send(transmit.destination, transmit.source, datagram)
                    .is_ok()
                {
                    self.stats.udp_sends += 1;
                }
            } else {
                self.udp.send_blocking(
                    transmit.destination,
                    transmit.source,
                    datagram,
                    &mut self.stats,
                );
            }
        }
        shape.switch(&self.udp, SocketShape::default());
    }
}
