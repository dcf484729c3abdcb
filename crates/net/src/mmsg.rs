//! Batched UDP I/O and timing for the lab's traffic generators.
//!
//! [`send_batch`] and [`recv_batch`] move up to [`MAX_BATCH`] datagrams with
//! one `sendmmsg`/`recvmmsg` on a UDP socket (connected, for sending), in
//! caller-owned buffers. [`force_buffer_size`] raises a socket's send or
//! receive buffer past `net.core.{w,r}mem_max` when the caller is root
//! (`SO_SNDBUFFORCE`/`SO_RCVBUFFORCE`), so a receiver keeps up with bursts
//! and a paced sender is never throttled by its own socket.
//! [`monotonic_nanos`] reads `CLOCK_MONOTONIC`, which every network
//! namespace on a host shares, so a send time stamped in one namespace can
//! be subtracted from a receive time read in another. [`set_thread_timer_slack`]
//! bounds how late the kernel may wake a sleeping thread, so a pacing
//! sender can sleep to a deadline instead of spinning, and
//! [`set_thread_realtime`] lets it be woken first on a busy machine.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

/// Most datagrams one [`send_batch`] or [`recv_batch`] call moves.
pub const MAX_BATCH: usize = 256;

fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Nanoseconds on `CLOCK_MONOTONIC` (since boot, not counting suspend).
/// The same clock in every network namespace of the host.
pub fn monotonic_nanos() -> u64 {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live timespec for the kernel to fill;
    // CLOCK_MONOTONIC always exists, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut time) };
    let seconds = u64::try_from(time.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(time.tv_nsec).unwrap_or(0);
    seconds * 1_000_000_000 + nanos
}

/// CPU time (user and system) the calling thread has used so far.
pub fn thread_cpu_time() -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live timespec for the kernel to fill; the calling
    // thread's CPU clock always exists, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &raw mut time) };
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// Lets the kernel wake the calling thread at most `slack` after a sleep's
/// deadline (default 50 µs). Affects only the calling thread.
pub fn set_thread_timer_slack(slack: Duration) -> io::Result<()> {
    let nanos = libc::c_ulong::try_from(slack.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes only the
    // calling thread's timer slack.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos, 0, 0, 0) }).map(drop)
}

/// Moves the calling thread to the real-time FIFO class at `priority`
/// (1 lowest … 99): it runs before every ordinary thread whenever it is
/// runnable, regardless of nice values or scheduling groups. Only for
/// threads that sleep between short bursts of work; the kernel's RT
/// throttling (by default 95 % of each second) is the backstop. Needs
/// `CAP_SYS_NICE`. Other threads are unaffected.
pub fn set_thread_realtime(priority: i32) -> io::Result<()> {
    let parameter = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads one live sched_param; pid 0 means the
    // calling thread. Failure is reported through errno.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &raw const parameter) }).map(drop)
}

/// Returns the calling thread to the normal (`SCHED_OTHER`) class.
pub fn set_thread_normal() -> io::Result<()> {
    let parameter = libc::sched_param { sched_priority: 0 };
    // SAFETY: as in set_thread_realtime.
    check(unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &raw const parameter) }).map(drop)
}

/// Which socket buffer [`force_buffer_size`] sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketBuffer {
    Send,
    Receive,
}

/// Sets the socket's `buffer` to `bytes`, above the system maximum when
/// the process may (`CAP_NET_ADMIN`), else as far as the maximum allows.
/// Returns the size the kernel reports afterwards (which counts its own
/// bookkeeping, so about twice what was asked).
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
    if set_int(fd, forced, value).is_err() {
        set_int(fd, plain, value)?;
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

fn set_int(fd: BorrowedFd<'_>, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: setsockopt reads exactly size_of::<c_int>() bytes from `value`,
    // which lives for the call.
    check(unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw const value).cast(),
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(drop)
}

/// Datagrams the kernel dropped at this socket since it was created
/// because its receive buffer was full (`SO_MEMINFO`, `SK_MEMINFO_DROPS`).
pub fn socket_drops(fd: BorrowedFd<'_>) -> io::Result<u64> {
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
    Ok(info
        .get(libc::SK_MEMINFO_DROPS as usize)
        .filter(|_| filled > libc::SK_MEMINFO_DROPS as usize)
        .map_or(0, |&drops| u64::from(drops)))
}

/// Why a send failed while the socket stays usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendRefusal {
    /// The socket's send buffer is full (`EAGAIN`): wait or give up.
    BufferFull,
    /// The stack dropped this one datagram: a full queue below the socket
    /// (`ENOBUFS`), or an earlier datagram's ICMP error reported on this
    /// send (`ECONNREFUSED`, `EHOSTUNREACH`, `ENETUNREACH`).
    Dropped,
}

/// Classifies a send error; `None` for errors that mean the socket (or
/// the caller) is wrong.
pub fn send_refusal(error: &io::Error) -> Option<SendRefusal> {
    match error.raw_os_error() {
        Some(libc::EAGAIN) => Some(SendRefusal::BufferFull),
        Some(libc::ENOBUFS | libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH) => {
            Some(SendRefusal::Dropped)
        }
        _ => None,
    }
}

/// Sends up to [`MAX_BATCH`] datagrams with one `sendmmsg` on a connected
/// socket (or a bound packet socket); returns how many the kernel took. An error means the first one
/// failed; a short count means the next one would have (call again to learn
/// why).
pub fn send_batch<'a, I>(fd: BorrowedFd<'_>, datagrams: I) -> io::Result<usize>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    // SAFETY: iovec and mmsghdr are plain old data for which all-zero is
    // valid (null pointers, zero lengths).
    let mut iovecs: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
    let mut count = 0;
    for (datagram, (iovec, header)) in datagrams
        .into_iter()
        .zip(iovecs.iter_mut().zip(headers.iter_mut()))
    {
        iovec.iov_base = datagram.as_ptr().cast_mut().cast();
        iovec.iov_len = datagram.len();
        header.msg_hdr.msg_iov = iovec;
        header.msg_hdr.msg_iovlen = 1;
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: the first `count` headers point at iovecs on this stack frame
    // and at datagrams borrowed for 'a; sendmmsg only reads them (and writes
    // each header's msg_len).
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr(),
            count as libc::c_uint,
            0,
        )
    };
    Ok(usize::try_from(check(rc)?).unwrap_or(0))
}

/// Receives up to `min(buffers.len(), lengths.len(), MAX_BATCH)` datagrams
/// with one `recvmmsg`, datagram `i` into `buffers[i]` and its full length
/// into `lengths[i]` — larger than the buffer when it was truncated. Blocks
/// for the first datagram as the socket does (its read timeout applies),
/// then takes only what is already queued.
pub fn recv_batch<B: AsMut<[u8]>>(
    fd: BorrowedFd<'_>,
    buffers: &mut [B],
    lengths: &mut [usize],
) -> io::Result<usize> {
    // SAFETY: iovec and mmsghdr are plain old data for which all-zero is valid.
    let mut iovecs: [libc::iovec; MAX_BATCH] = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut headers: [libc::mmsghdr; MAX_BATCH] = unsafe { mem::zeroed() };
    let count = buffers.len().min(lengths.len()).min(MAX_BATCH);
    if count == 0 {
        return Ok(0);
    }
    for (buffer, (iovec, header)) in buffers
        .iter_mut()
        .zip(iovecs.iter_mut().zip(headers.iter_mut()))
        .take(count)
    {
        let buffer = buffer.as_mut();
        iovec.iov_base = buffer.as_mut_ptr().cast();
        iovec.iov_len = buffer.len();
        header.msg_hdr.msg_iov = iovec;
        header.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: the first `count` headers point at iovecs on this stack frame
    // and at buffers exclusively borrowed for the call; the kernel writes
    // only within each iovec's length. A null timeout leaves waiting to the
    // socket.
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
    for (header, length) in headers.iter().zip(lengths.iter_mut()).take(done) {
        *length = header.msg_len as usize;
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    #[test]
    fn batches_cross_loopback_in_order() {
        let receiver = UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(Duration::from_secs(2)))
            .unwrap();
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        sender.connect(receiver.local_addr().unwrap()).unwrap();
        let datagrams: Vec<Vec<u8>> = (0..10u8).map(|i| vec![i; 10 + usize::from(i)]).collect();
        let sent = send_batch(sender.as_fd(), datagrams.iter().map(Vec::as_slice)).unwrap();
        assert_eq!(sent, 10);

        let mut buffers = vec![[0u8; 14]; 16];
        let mut lengths = [0usize; 16];
        let mut got = 0;
        while got < 10 {
            let n = recv_batch(receiver.as_fd(), &mut buffers[got..], &mut lengths[got..]).unwrap();
            got += n;
        }
        for i in 0..10 {
            assert_eq!(lengths[i], 10 + i, "full length, even when truncated");
            let kept = lengths[i].min(14);
            assert!(buffers[i][..kept].iter().all(|&b| usize::from(b) == i));
        }
    }

    #[test]
    fn clock_moves_forward_and_buffers_grow() {
        let before = monotonic_nanos();
        std::thread::sleep(Duration::from_millis(2));
        assert!(monotonic_nanos() - before >= 2_000_000);
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        let size = force_buffer_size(socket.as_fd(), SocketBuffer::Receive, 1 << 20).unwrap();
        assert!(size > 0);
        set_thread_timer_slack(Duration::from_micros(1)).unwrap();
        assert_eq!(socket_drops(socket.as_fd()).unwrap(), 0);
    }
}
