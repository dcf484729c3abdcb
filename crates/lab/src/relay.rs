//! The floor of userspace tunnelling, run by the lab's `relay` system: an
//! unencrypted relay between a TUN device and a UDP socket that moves one
//! packet per system call and sleeps in poll(2) when there is nothing to do.
//!
//! Every userspace tunnel pays what this pays, before any cryptography,
//! batching or offload: at the sending end a wakeup, a TUN read and a UDP
//! send; at the receiving end a wakeup, a UDP receive and a TUN write.
//! Measured in the same run as fjord and its peers, it shows how much of a
//! tunnel's added latency and CPU is that floor and how much is its own.
//!
//! It authenticates nothing: whoever reaches its UDP port writes into its
//! TUN device. It is a lab instrument, bound to a lab namespace's underlay
//! address, and never for real traffic.

use std::convert::Infallible;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;

use fjord_sys::poll::wait_readable;
use tun_rs::DeviceBuilder;

/// The largest IP packet a TUN device hands over.
const MAX_PACKET: usize = 65_535;

/// Where the relay's two ends are.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    /// The TUN device to create.
    pub tun: String,
    /// The UDP address to receive on.
    pub listen: SocketAddr,
    /// The other relay's UDP address.
    pub peer: SocketAddr,
}

/// Creates the TUN device and the socket, then relays until an error that
/// is not about one packet (the device deleted, for one), which it returns.
/// Signals end it the default way: the device goes with the process.
pub fn run(config: &RelayConfig) -> io::Error {
    match relay(config) {
        Err(error) => error,
        Ok(never) => match never {},
    }
}

fn relay(config: &RelayConfig) -> io::Result<Infallible> {
    // Blocking, no packet-info header, no offload: one IP packet per call.
    let tun = DeviceBuilder::new().name(&config.tun).build_sync()?;
    let socket = UdpSocket::bind(config.listen)?;
    socket.connect(config.peer)?;
    tracing::info!(tun = %config.tun, listen = %config.listen, peer = %config.peer, "relay up");
    let mut packet = vec![0u8; MAX_PACKET];
    loop {
        let [tun_ready, socket_ready] = wait_readable([tun.as_fd(), socket.as_fd()], None)?;
        if tun_ready.gone {
            return Err(io::Error::other(format!("{} went away", config.tun)));
        }
        // A send or TUN write the kernel refuses (the peer not up yet, a
        // datagram that is no IP packet) loses that one packet, as a lossy
        // link would.
        if tun_ready.readable {
            let length = tun.recv(&mut packet)?;
            let _ = socket.send(&packet[..length]);
        }
        if socket_ready.readable {
            // An error here is ICMP news of an earlier send: the peer not up yet.
            if let Ok(length) = socket.recv(&mut packet) {
                let _ = tun.send(&packet[..length]);
            }
        }
    }
}
