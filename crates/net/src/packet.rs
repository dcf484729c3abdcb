//! AF_PACKET raw sockets and the batched, timed I/O the lab's link emulator
//! is built on.
//!
//! A [`PacketSocket`] is bound to one interface and sees every frame that
//! arrives there (`ETH_P_ALL`), Ethernet header included. It is created with
//! protocol 0, so it receives nothing until `bind` narrows it to its
//! interface — no frames from other interfaces slip in between. Frames go out
//! with `PACKET_QDISC_BYPASS` (straight to the driver, no qdisc, no taps) and
//! the socket ignores outgoing frames (`PACKET_IGNORE_OUTGOING`), so an
//! emulator never reads back what it sent.
//!
//! [`recv_batch`] and [`send_batch`] are one `recvmmsg`/`sendmmsg` per batch
//! of up to [`MAX_BATCH`] caller-owned buffers; they work on any datagram
//! socket (the lab's UDP generators use them too). [`wait_readable`] sleeps
//! with nanosecond deadlines (`ppoll`), and [`set_timer_slack`] bounds how
//! late the kernel may wake the thread.

use std::io;
use std::mem::{self, MaybeUninit};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Most messages one [`recv_batch`] or [`send_batch`] call moves.
pub const MAX_BATCH: usize = 64;

/// Bytes of Ethernet framing around an IP packet the MTU does not count:
/// the header (14) and one VLAN tag (4).
pub const ETHERNET_OVERHEAD_BYTES: usize = 18;

/// Control-message space per received message: room for one
/// `SCM_TIMESTAMPNS` (a `timespec`) with its header, 8-byte aligned.
const CONTROL_WORDS: usize = 8;

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

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

fn set_int_option(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    value: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a live c_int and its exact size is passed;
    // fd is a valid open descriptor borrowed for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw const value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    check(rc).map(drop)
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
        // SAFETY: ifreq is plain old data; all-zero is a valid value.
        let mut request: libc::ifreq = unsafe { mem::zeroed() };
        let name = self.interface.as_bytes();
        if name.len() >= request.ifr_name.len() {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        for (slot, byte) in request.ifr_name.iter_mut().zip(name) {
            *slot = *byte as libc::c_char;
        }
        // SAFETY: SIOCGIFMTU reads the NUL-terminated name and writes the
        // `ifru_mtu` member of the live `request`.
        check(unsafe { libc::ioctl(self.fd.as_raw_fd(), libc::SIOCGIFMTU, &raw mut request) })?;
        // SAFETY: SIOCGIFMTU succeeded, so the kernel filled `ifru_mtu`.
        let mtu = unsafe { request.ifr_ifru.ifru_mtu };
        u32::try_from(mtu).map_err(|_| io::Error::from(io::ErrorKind::InvalidData))
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

/// Sets the socket's receive and send buffer sizes, past the sysctl caps
/// (`SO_*BUFFORCE`) when the process may, otherwise up to the caps.
pub fn set_buffer_sizes(
    fd: BorrowedFd<'_>,
    receive_bytes: usize,
    send_bytes: usize,
) -> io::Result<()> {
    for (forced, plain, bytes) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, receive_bytes),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, send_bytes),
    ] {
        // The kernel doubles the value it is given; ask for half.
        let value = libc::c_int::try_from(bytes / 2).unwrap_or(libc::c_int::MAX);
        if set_int_option(fd, libc::SOL_SOCKET, forced, value).is_err() {
            set_int_option(fd, libc::SOL_SOCKET, plain, value)?;
        }
    }
    Ok(())
}

/// Asks the kernel to stamp each received message with its arrival time
/// (`SO_TIMESTAMPNS`, wall clock); [`recv_batch`] returns the stamps.
pub fn enable_receive_timestamps(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int_option(fd, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// What [`recv_batch`] learned about one received message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// The message's full length, even when its buffer was shorter.
    pub len: usize,
    /// The buffer was shorter than the message; only its prefix arrived.
    pub truncated: bool,
    /// Kernel arrival time, when timestamps are enabled.
    pub timestamp: Option<SystemTime>,
}

/// Receives up to `min(buffers, received.len(), MAX_BATCH)` messages with
/// one `recvmmsg`, message `i` into the `i`-th buffer, its length and
/// timestamp into `received[i]`. Waits for the first message only if the
/// socket blocks. `WouldBlock` when nothing is waiting.
pub fn recv_batch<'a, I>(
    fd: BorrowedFd<'_>,
    buffers: I,
    received: &mut [Received],
) -> io::Result<usize>
where
    I: IntoIterator<Item = &'a mut [u8]>,
{
    // SAFETY: iovec, mmsghdr and the control words are plain old data for
    // which all-zero is valid (null pointers, zero lengths).
    let mut iovecs: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut control = [[0u64; CONTROL_WORDS]; MAX_BATCH];
    let limit = received.len().min(MAX_BATCH);
    let mut count = 0;
    for (buffer, ((iovec, header), control)) in buffers
        .into_iter()
        .zip(
            iovecs
                .iter_mut()
                .zip(headers.iter_mut())
                .zip(control.iter_mut()),
        )
        .take(limit)
    {
        iovec.iov_base = buffer.as_mut_ptr().cast();
        iovec.iov_len = buffer.len();
        header.msg_hdr.msg_iov = iovec;
        header.msg_hdr.msg_iovlen = 1;
        header.msg_hdr.msg_control = control.as_mut_ptr().cast();
        header.msg_hdr.msg_controllen = mem::size_of_val(control);
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: the first `count` headers point at iovecs and control words on
    // this stack frame and at buffers borrowed for 'a, all alive and
    // unaliased during the call; the kernel writes only within their lengths.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_TRUNC | libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    let done = usize::try_from(check(rc)?).unwrap_or(0);
    for (header, slot) in headers.iter().zip(received.iter_mut()).take(done) {
        let capacity = iovec_len(header);
        let len = header.msg_len as usize;
        *slot = Received {
            len,
            truncated: len > capacity,
            timestamp: timestamp_of(&header.msg_hdr),
        };
    }
    Ok(done)
}

fn iovec_len(header: &libc::mmsghdr) -> usize {
    // SAFETY: recv_batch points every used header at one live iovec.
    unsafe { (*header.msg_hdr.msg_iov).iov_len }
}

/// The `SCM_TIMESTAMPNS` control message of a received message, if any.
fn timestamp_of(message: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: `message` was filled by recvmmsg; its control pointer and the
    // length the kernel wrote back delimit valid control messages, which the
    // CMSG macros walk without leaving that range.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(message);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_TIMESTAMPNS {
                let mut time = MaybeUninit::<libc::timespec>::uninit();
                std::ptr::copy_nonoverlapping(
                    libc::CMSG_DATA(cmsg),
                    time.as_mut_ptr().cast::<u8>(),
                    mem::size_of::<libc::timespec>(),
                );
                let time = time.assume_init();
                let secs = u64::try_from(time.tv_sec).ok()?;
                let nanos = u32::try_from(time.tv_nsec).ok()?;
                return Some(UNIX_EPOCH + Duration::new(secs, nanos));
            }
            cmsg = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    None
}

/// One `sendmmsg` of several frames: the same call as for UDP sockets.
pub use crate::mmsg::send_batch;

/// Sleeps until one of `fds` is readable or `timeout` passes (nanosecond
/// deadline, subject to the thread's timer slack). With no fds, a precise
/// sleep. Returns how many fds are readable; 0 on timeout or signal.
pub fn wait_readable(fds: &[BorrowedFd<'_>], timeout: Duration) -> io::Result<usize> {
    const MAX_FDS: usize = 8;
    if fds.len() > MAX_FDS {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    let mut polls = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; MAX_FDS];
    for (poll, fd) in polls.iter_mut().zip(fds) {
        poll.fd = fd.as_raw_fd();
        poll.events = libc::POLLIN;
    }
    let timeout = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    };
    // SAFETY: `polls` holds `fds.len()` initialised entries and `timeout` is
    // a live timespec; a null sigmask leaves the signal mask alone.
    let rc = unsafe {
        libc::ppoll(
            polls.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &raw const timeout,
            std::ptr::null(),
        )
    };
    match check(rc) {
        Ok(ready) => Ok(usize::try_from(ready).unwrap_or(0)),
        Err(error) if error.kind() == io::ErrorKind::Interrupted => Ok(0),
        Err(error) => Err(error),
    }
}

/// Lets the kernel wake the calling thread up to `slack` after a timeout
/// expires (it coalesces wakeups within that window). At least 1 ns.
pub fn set_timer_slack(slack: Duration) -> io::Result<()> {
    let nanos = libc::c_ulong::try_from(slack.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer and affects only the calling thread.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos, 0, 0, 0) }).map(drop)
}

/// Sets the calling thread's nice value (-20 to 19; below 0 needs
/// CAP_SYS_NICE). On Linux the nice value is per thread.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers; who = 0 is the calling thread.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) }).map(drop)
}

/// Runs the calling thread under SCHED_FIFO at `priority` (1–99; needs
/// CAP_SYS_NICE). The kernel's real-time throttling
/// (`sched_rt_runtime_us`) still leaves other tasks some CPU.
pub fn set_thread_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: `param` is a live sched_param; pid 0 is the calling thread.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const param) }).map(drop)
}

/// CPU time the calling thread has used (user and system).
pub fn thread_cpu_time() -> io::Result<Duration> {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live timespec for the kernel to fill.
    check(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut time) })?;
    Ok(Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests;
