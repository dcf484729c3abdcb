//! `AF_PACKET` raw sockets: the lab's link emulator is built on them; the
//! tunnel never uses them.
//!
//! A [`PacketSocket`] is bound to one interface and sees every frame that
//! arrives there (`ETH_P_ALL`), Ethernet header included. It is created with
//! protocol 0, so it receives nothing until `bind` narrows it to its
//! interface — no frames from other interfaces slip in between. Frames go out
//! with `PACKET_QDISC_BYPASS` (straight to the driver, no qdisc, no taps) and
//! the socket ignores outgoing frames (`PACKET_IGNORE_OUTGOING`), so an
//! emulator never reads back what it sent. Frames move in batches through
//! [`crate::mmsg::recv_batch`] and [`crate::mmsg::send_batch`], like
//! datagrams.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use crate::check;
use crate::socket::set_int_option;

/// Bytes of Ethernet framing around an IP packet the MTU does not count:
/// the header (14) and one VLAN tag (4).
pub const ETHERNET_OVERHEAD_BYTES: usize = 18;

/// A raw `AF_PACKET`/`SOCK_RAW` socket bound to one interface,
/// non-blocking. Closed on drop.
#[derive(Debug)]
pub struct PacketSocket {
    fd: OwnedFd,
    ifindex: u32,
    interface: String,
}

/// Kernel counters of one packet socket since the last read.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PacketStatistics {
    /// Frames the socket accepted (including those dropped below).
    pub frames: u64,
    /// Frames dropped because the receive buffer was full.
    pub drops: u64,
}

/// The index of `interface` in the calling thread's network namespace.
pub fn interface_index(interface: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(interface)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `name` is a NUL-terminated string that outlives the call.
    let index = unsafe { libc::if_nametoindex(name.as_ptr()) };
    if index == 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(index)
    }
}

impl PacketSocket {
    /// Opens a raw socket on `interface` (in the calling thread's network
    /// namespace) that receives every frame arriving there.
    pub fn bind(interface: &str) -> io::Result<Self> {
        let ifindex = interface_index(interface)?;
        // SAFETY: socket(2) takes plain integers; failure is reported through errno.
        let raw = check(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `raw` was just returned by socket(2) and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut address: libc::sockaddr_ll = unsafe { mem::zeroed() };
        address.sll_family = libc::AF_PACKET as libc::c_ushort;
        address.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        address.sll_ifindex = ifindex as libc::c_int;
        // SAFETY: `address` is a live sockaddr_ll and its exact size is passed.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const address).cast(),
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(Self {
            fd,
            ifindex,
            interface: interface.to_string(),
        })
    }

    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    pub fn interface(&self) -> &str {
        &self.interface
    }

    /// The interface's MTU (IP bytes; frames carry [`ETHERNET_OVERHEAD_BYTES`] more at most).
    pub fn mtu(&self) -> io::Result<u32> {
        crate::socket::interface_mtu(self.fd.as_fd(), &self.interface)
    }

    /// Hands sent frames straight to the driver, skipping qdiscs and taps.
    pub fn set_qdisc_bypass(&self, enabled: bool) -> io::Result<()> {
        set_int_option(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_QDISC_BYPASS,
            enabled.into(),
        )
    }

    /// Stops the socket from receiving frames the host transmits on its interface.
    pub fn set_ignore_outgoing(&self, enabled: bool) -> io::Result<()> {
        set_int_option(
            self.fd.as_fd(),
            libc::SOL_PACKET,
            libc::PACKET_IGNORE_OUTGOING,
            enabled.into(),
        )
    }

    /// Puts the interface in promiscuous mode for as long as the socket lives.
    pub fn set_promiscuous(&self) -> io::Result<()> {
        // SAFETY: packet_mreq is plain old data; all-zero is a valid value.
        let mut request: libc::packet_mreq = unsafe { mem::zeroed() };
        request.mr_ifindex = self.ifindex as libc::c_int;
        request.mr_type = libc::PACKET_MR_PROMISC as libc::c_ushort;
        // SAFETY: `request` is a live packet_mreq and its exact size is passed.
        check(unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_ADD_MEMBERSHIP,
                (&raw const request).cast(),
                mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        })
        .map(drop)
    }

    /// Reads and resets the kernel's frame and drop counters.
    pub fn take_statistics(&self) -> io::Result<PacketStatistics> {
        let mut stats = libc::tpacket_stats {
            tp_packets: 0,
            tp_drops: 0,
        };
        let mut len = mem::size_of::<libc::tpacket_stats>() as libc::socklen_t;
        // SAFETY: `stats` and `len` are live and `len` holds the buffer size.
        check(unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_PACKET,
                libc::PACKET_STATISTICS,
                (&raw mut stats).cast(),
                &raw mut len,
            )
        })?;
        Ok(PacketStatistics {
            frames: stats.tp_packets.into(),
            drops: stats.tp_drops.into(),
        })
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_interface_is_an_error() {
        assert!(interface_index("fjord-no-such0").is_err());
    }
}
