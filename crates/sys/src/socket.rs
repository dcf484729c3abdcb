//! Socket options: integer options, buffer sizes past the sysctl caps,
//! receive timestamps, the kernel's drop counter and receive queue.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::check;

/// Sets the integer socket option `level`/`name` to `value`.
pub fn set_int_option(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: setsockopt reads exactly size_of::<c_int>() bytes from
    // `value`, which lives for the call; fd is a valid open descriptor
    // borrowed for the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Which socket buffer [`force_buffer_size`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketBuffer {
    Send,
    Receive,
}

/// Sets the socket's `buffer` to `bytes`, above the system maximum
/// (`net.core.{w,r}mem_max`) when the process may (`CAP_NET_ADMIN`,
/// `SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`), else as far as the maximum allows.
/// The kernel doubles the value for its own bookkeeping. Returns the size
/// the kernel reports afterwards (so about twice `bytes`).
pub fn force_buffer_size(
    fd: BorrowedFd<'_>,
    buffer: SocketBuffer,
    bytes: usize,
) -> io::Result<usize> {
    let (forced, plain) = match buffer {
        SocketBuffer::Send => (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        SocketBuffer::Receive => (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
    };
    let value = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    if set_int_option(fd, libc::SOL_SOCKET, forced, value).is_err() {
        set_int_option(fd, libc::SOL_SOCKET, plain, value)?;
    }
    let mut current: libc::c_int = 0;
    let mut length = mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `length` bytes into `current`, a live
    // c_int, and updates `length`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            plain,
            (&raw mut current).cast(),
            &raw mut length,
        )
    })?;
    Ok(usize::try_from(current).unwrap_or(0))
}

/// Asks the kernel to stamp each received message with its arrival time
/// (`SO_TIMESTAMPNS`, wall clock); [`crate::mmsg::recv_batch`] returns the
/// stamps.
pub fn enable_receive_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// The MTU of the route a connected socket's datagrams take (`IPV6_MTU`
/// for a dual-stack socket, `IP_MTU` for an IPv4 one): the largest
/// datagram, headers included, the kernel sends without fragmenting, and
/// the largest it accepts as a UDP GSO segment.
pub fn path_mtu(fd: BorrowedFd<'_>) -> io::Result<usize> {
    let int_option = |level, name| {
        let mut value: libc::c_int = 0;
        let mut length = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `length` bytes into `value`, a
        // live c_int, and updates `length`.
        check(unsafe {
            libc::getsockopt(
                fd.as_raw_fd(),
                level,
                name,
                (&raw mut value).cast(),
                &raw mut length,
            )
        })
        .map(|_| usize::try_from(value).unwrap_or(0))
    };
    int_option(libc::IPPROTO_IPV6, libc::IPV6_MTU)
        .or_else(|_| int_option(libc::IPPROTO_IP, libc::IP_MTU))
}

/// The MTU of network interface `interface` (`SIOCGIFMTU`), asked through
/// any open socket `fd`: the lookup is by name in the socket's network
/// namespace. One system call, where tun-rs opens and closes a socket of
/// its own for every look.
pub fn interface_mtu(fd: BorrowedFd<'_>, interface: &str) -> io::Result<u32> {
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { mem::zeroed() };
    let name = interface.as_bytes();
    if name.is_empty() || name.len() >= request.ifr_name.len() || name.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    for (slot, byte) in request.ifr_name.iter_mut().zip(name) {
        *slot = *byte as libc::c_char;
    }
    // SAFETY: SIOCGIFMTU reads the NUL-terminated name (the request was
    // zeroed and the name is shorter than the field) and writes the
    // `ifru_mtu` member of the live `request`.
    check(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFMTU, &raw mut request) })?;
    // SAFETY: SIOCGIFMTU succeeded, so the kernel filled `ifru_mtu`.
    let mtu = unsafe { request.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
}

/// Datagrams the kernel dropped at this socket since it was created
/// because its receive buffer was full (`SK_MEMINFO_DROPS`).
pub fn socket_drops(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(u64::from(memory_info(fd, libc::SK_MEMINFO_DROPS)?))
}

/// Bytes of received datagrams waiting in the socket to be read
/// (`SK_MEMINFO_RMEM_ALLOC`, each datagram's buffer with its overhead):
/// zero exactly when a read would find nothing, without reading (and
/// without taking a pending error, as a peek would).
pub fn receive_queue_bytes(fd: BorrowedFd<'_>) -> io::Result<u32> {
    memory_info(fd, libc::SK_MEMINFO_RMEM_ALLOC)
}

/// One field of the socket's `SO_MEMINFO`; 0 from a kernel too old to
/// fill it.
fn memory_info(fd: BorrowedFd<'_>, field: libc::c_int) -> io::Result<u32> {
    // Up to the drop counter, the last field every kernel since 4.10 fills.
    let mut info = [0u32; libc::SK_MEMINFO_DROPS as usize + 1];
    let mut length = mem::size_of_val(&info) as libc::socklen_t;
    // SAFETY: getsockopt writes at most `length` bytes into `info`, a live
    // array of that size, and updates `length`.
    check(unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_MEMINFO,
            info.as_mut_ptr().cast(),
            &raw mut length,
        )
    })?;
    let filled = usize::try_from(length).unwrap_or(0) / mem::size_of::<u32>();
    let field = usize::try_from(field).unwrap_or(usize::MAX);
    Ok(info
        .get(field)
        .filter(|_| filled > field)
        .copied()
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    /// What `ip link` shows, through any socket; a name the kernel could
    /// never hold is refused before the call, an unknown one by it.
    #[test]
    fn interface_mtu_reads_the_loopback_mtu() {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let shown: u32 = std::fs::read_to_string("/sys/class/net/lo/mtu")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(interface_mtu(socket.as_fd(), "lo").unwrap(), shown);
        for bad in ["", "sixteen-bytes-xx", "l\0o"] {
            let error = interface_mtu(socket.as_fd(), bad).unwrap_err();
            assert_eq!(error.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
        let error = interface_mtu(socket.as_fd(), "fjord-absent0").unwrap_err();
        assert_eq!(error.raw_os_error(), Some(libc::ENODEV));
    }

    /// An empty datagram waits too: the queue is empty only once both
    /// are read.
    #[test]
    fn the_receive_queue_is_empty_only_when_nothing_waits() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(receive_queue_bytes(receiver.as_fd()).unwrap(), 0);
        let to = receiver.local_addr().unwrap();
        sender.send_to(b"", to).unwrap();
        sender.send_to(b"a datagram", to).unwrap();
        let mut buf = [0u8; 16];
        for expected in [0, 10] {
            assert!(receive_queue_bytes(receiver.as_fd()).unwrap() > 0);
            assert_eq!(receiver.recv(&mut buf).unwrap(), expected);
        }
        assert_eq!(receive_queue_bytes(receiver.as_fd()).unwrap(), 0);
        assert_eq!(socket_drops(receiver.as_fd()).unwrap(), 0);
    }
}
