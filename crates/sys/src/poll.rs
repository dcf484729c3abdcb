//! Sleeping in `ppoll(2)` until descriptors are ready: level-triggered,
//! with nanosecond deadlines (subject to the thread's timer slack, see
//! [`crate::thread::set_thread_timer_slack`]).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

use crate::check;

/// What [`wait_readable`] found on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// Data (or a pending socket error) to read.
    pub readable: bool,
    /// The descriptor is closed or broken (a deleted TUN device).
    pub gone: bool,
}

impl Readiness {
    /// Whether the descriptor needs attention: readable or gone.
    pub fn is_ready(self) -> bool {
        self.readable || self.gone
    }
}

/// Sleeps until one of `fds` can be read, or `timeout` passes (`None`:
/// no timeout). With no fds, a precise sleep. A timeout or a signal
/// returns all not ready.
pub fn wait_readable<const N: usize>(
    fds: [BorrowedFd<'_>; N],
    timeout: Option<Duration>,
) -> io::Result<[Readiness; N]> {
    let mut pollfds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    match ppoll(&mut pollfds, timeout) {
        Err(error) if error.kind() != io::ErrorKind::Interrupted => return Err(error),
        _ => {}
    }
    Ok(pollfds.map(|pollfd| Readiness {
        readable: pollfd.revents & (libc::POLLIN | libc::POLLERR) != 0,
        gone: pollfd.revents & (libc::POLLHUP | libc::POLLNVAL) != 0,
    }))
}

/// Waits up to `timeout` for `fd` to accept writes. Whether it does is
/// left to the next write to find out.
pub fn wait_writable(fd: BorrowedFd<'_>, timeout: Duration) {
    let mut pollfds = [libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    }];
    let _ = ppoll(&mut pollfds, Some(timeout));
}

/// One `ppoll` over `pollfds`; a null signal mask leaves the thread's alone.
fn ppoll(pollfds: &mut [libc::pollfd], timeout: Option<Duration>) -> io::Result<libc::c_int> {
    let count = libc::nfds_t::try_from(pollfds.len()).map_err(|_| io::ErrorKind::InvalidInput)?;
    let timeout = timeout.map(|timeout| libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: timeout.subsec_nanos().into(),
    });
    let timeout_ptr = timeout
        .as_ref()
        .map_or(std::ptr::null(), std::ptr::from_ref);
    // SAFETY: `pollfds` is a live, exclusively borrowed slice of `count`
    // pollfds; `timeout_ptr` is null or points at a timespec on this frame.
    check(unsafe { libc::ppoll(pollfds.as_mut_ptr(), count, timeout_ptr, std::ptr::null()) })
}
