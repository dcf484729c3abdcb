//! Runtime control: other threads (the configuration socket, `fjord show`)
//! run closures on the worker, between batches, with exclusive access to
//! the node. The worker never blocks on them; a caller waits for the reply.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::Instant;

use fjord_mesh::Node;

use crate::egress::Egress;
use crate::udp::{UdpError, UdpSocket};

/// What a control closure may touch.
pub struct ControlContext<'a> {
    pub node: &'a mut Node,
    pub now: Instant,
    pub interface: &'a str,
    pub stats: &'a crate::stats::DataStats,
    pub(crate) udp: &'a mut Egress,
    pub(crate) fwmark: &'a mut u32,
    pub(crate) rebound: bool,
    /// Whether the TUN device reads super-packets and coalesces writes.
    pub(crate) tun_offload: bool,
}

/// The offloads the data path uses now: each is probed at start, and UDP
/// GSO is turned off for good where the kernel refuses it later, so
/// `udp_gso` can change once while the interface runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offloads {
    /// virtio-net headers on the TUN device (super-packets both ways).
    pub tun_vnet_hdr: bool,
    /// UDP segmentation offload on sends.
    pub udp_gso: bool,
    /// UDP receive coalescing.
    pub udp_gro: bool,
}

impl ControlContext<'_> {
    pub fn listen_port(&self) -> u16 {
        self.udp.port()
    }

    /// The offloads in use, read from the device and socket state the
    /// data path keeps anyway.
    pub fn offloads(&self) -> Offloads {
        Offloads {
            tun_vnet_hdr: self.tun_offload,
            udp_gso: self.udp.max_gso_segments() > 1,
            udp_gro: self.udp.gro_segments() > 1,
        }
    }

    /// Counters of the fallback carriers.
    pub fn carrier_stats(&self) -> crate::carrier::CarrierStats {
        self.udp.carriers().stats()
    }

    /// The carrier whose far end is `remote`, if one is: this node's
    /// carrier kind, and whether the far end opened it (accepted).
    pub fn carrier_to(&self, remote: SocketAddr) -> Option<(crate::carrier::CarrierKind, bool)> {
        let carriers = self.udp.carriers();
        let accepted = carriers.accepted(remote)?;
        Some((carriers.kind(), accepted))
    }

    /// The carrier this node uses (`FallbackCarrier`).
    pub fn carrier_kind(&self) -> crate::carrier::CarrierKind {
        self.udp.carriers().kind()
    }

    pub fn fwmark(&self) -> u32 {
        *self.fwmark
    }

    /// Moves the UDP socket to `port` (0 = any free port); on error the
    /// old socket stays in place. The same port is a no-op.
    pub fn rebind(&mut self, port: u16) -> Result<(), UdpError> {
        if port != 0 && port == self.udp.port() {
            return Ok(());
        }
        let socket = UdpSocket::bind(port, *self.fwmark)?;
        // The carriers are TCP: a new UDP port leaves them as they are.
        self.udp.rebind(socket);
        self.rebound = true;
        Ok(())
    }

    /// Marks outgoing encrypted packets with `fwmark` (0 = none).
    pub fn set_fwmark(&mut self, fwmark: u32) -> std::io::Result<()> {
        self.udp.set_mark(fwmark)?;
        *self.fwmark = fwmark;
        Ok(())
    }
}

pub(crate) type ControlCall = Box<dyn FnOnce(&mut ControlContext<'_>) + Send>;

/// The worker has exited; nothing can be changed any more.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the tunnel's worker has stopped")]
pub struct WorkerStopped;

/// A cloneable handle to run closures on the worker.
#[derive(Clone)]
pub struct ControlHandle {
    sender: Sender<ControlCall>,
    waker: Arc<mio::Waker>,
}

impl ControlHandle {
    pub(crate) fn new(waker: Arc<mio::Waker>) -> (Self, Receiver<ControlCall>) {
        let (sender, receiver) = mpsc::channel();
        (Self { sender, waker }, receiver)
    }

    /// Runs `work` on the worker and returns its result.
    pub fn call<R, F>(&self, work: F) -> Result<R, WorkerStopped>
    where
        R: Send + 'static,
        F: FnOnce(&mut ControlContext<'_>) -> R + Send + 'static,
    {
        let (reply_sender, reply) = mpsc::sync_channel(1);
        let call: ControlCall = Box::new(move |context| {
            let _ = reply_sender.send(work(context));
        });
        self.sender.send(call).map_err(|_| WorkerStopped)?;
        self.waker.wake().map_err(|_| WorkerStopped)?;
        reply.recv().map_err(|_| WorkerStopped)
    }
}
