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
use std::io::{self, Read, Write};
use std::net::{SocketAddr, UdpSocket};

use fjord_net::sys;

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

/// Packets moved and dropped since the start.
#[derive(Debug, Default)]
struct Counters {
    to_peer: u64,
    from_peer: u64,
    /// Sends or TUN writes the kernel refused (peer not up yet, a datagram
    /// that is no IP packet); each loses one packet, as a lossy link would.
    dropped: u64,
}

/// Creates the TUN device and the socket, then relays until an error that
/// is not about one packet (the device deleted, for one), which it returns.
/// Signals end it the default way: the device goes with the process.
pub fn run(config: &RelayConfig) -> io::Error {
    let mut counters = Counters::default();
    let error = match relay(config, &mut counters) {
        Err(error) => error,
        Ok(never) => match never {},
    };
    tracing::info!(?counters, %error, "relay stopped");
    error
}

fn relay(config: &RelayConfig, counters: &mut Counters) -> io::Result<Infallible> {
    let mut tun = sys::open_plain_tun(&config.tun)?;
    let socket = UdpSocket::bind(config.listen)?;
    socket.connect(config.peer)?;
    tracing::info!(tun = %config.tun, listen = %config.listen, peer = %config.peer, "relay up");
    let mut packet = vec![0u8; MAX_PACKET];
    loop {
        let [tun_ready, socket_ready] = sys::wait_readable([&tun, &socket])?;
        if tun_ready.gone {
            return Err(io::Error::other(format!("{} went away", config.tun)));
        }
        if tun_ready.readable {
            let length = tun.read(&mut packet)?;
            match socket.send(&packet[..length]) {
                Ok(_) => counters.to_peer += 1,
                Err(_) => counters.dropped += 1,
            }
        }
        if socket_ready.readable {
            match socket.recv(&mut packet) {
                Ok(length) => match tun.write(&packet[..length]) {
                    Ok(_) => counters.from_peer += 1,
                    Err(_) => counters.dropped += 1,
                },
                // An ICMP error for an earlier send (the peer not up yet).
                Err(_) => counters.dropped += 1,
            }
        }
    }
}
