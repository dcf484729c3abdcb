//! Thin safe wrappers over the few raw system calls other crates need.

use std::io;

/// Whether this process runs with root's effective user ID.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sends `signal` to process `pid`. Callers pass PIDs of processes they
/// started themselves.
pub fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers and reports failure through errno.
    let rc = unsafe { libc::kill(pid, signal) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

pub use libc::{SIGINT, SIGKILL, SIGTERM};

/// Moves the calling thread into the network namespace at `path`
/// (`/run/netns/NAME`). Sockets the thread creates afterwards belong to
/// that namespace for their whole life; other threads are unaffected.
pub fn enter_network_namespace(path: &std::path::Path) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path)?;
    // SAFETY: setns takes a valid open fd (kept alive by `file` for the call)
    // and a namespace type constant; failure is reported through errno.
    let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Waits up to `timeout` for `fd` to accept writes.
pub fn wait_writable(fd: &impl std::os::fd::AsRawFd, timeout: std::time::Duration) {
    let mut pollfd = libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLOUT,
        revents: 0,
    };
    let millis = libc::c_int::try_from(timeout.as_millis()).unwrap_or(libc::c_int::MAX);
    // SAFETY: poll reads and writes exactly one pollfd that lives on our stack.
    unsafe {
        libc::poll(&mut pollfd, 1, millis);
    }
}

/// Which side of [`daemonize`] we are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Daemonized {
    /// The original process, which should exit now.
    Parent,
    /// The background process, detached from the terminal.
    Child,
}

/// Forks into the background like a classic daemon: the child starts a new
/// session and gets /dev/null as stdin, stdout and stderr. Call it only
/// while the process has a single thread (fork copies just the caller).
pub fn daemonize() -> io::Result<Daemonized> {
    // SAFETY: fork has no memory-safety preconditions in a single-threaded
    // process, which callers guarantee; both returns are handled below.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        return Err(io::Error::last_os_error());
    }
    if pid > 0 {
        return Ok(Daemonized::Parent);
    }
    // SAFETY: setsid takes no arguments; failure (already a group leader)
    // is harmless for a freshly forked child.
    unsafe {
        libc::setsid();
    }
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    use std::os::fd::AsRawFd;
    for target in [0, 1, 2] {
        // SAFETY: dup2 with a valid open fd onto the standard descriptors.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(Daemonized::Child)
}

/// What [`wait_readable`] found on one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Readiness {
    /// Data (or a pending socket error) to read.
    pub readable: bool,
    /// The descriptor is closed or broken (a deleted TUN device).
    pub gone: bool,
}

/// Sleeps in poll(2), level-triggered, until one of `fds` can be read;
/// an interrupted wait returns all not ready.
pub fn wait_readable<const N: usize>(
    fds: [&dyn std::os::fd::AsRawFd; N],
) -> io::Result<[Readiness; N]> {
    let mut pollfds = fds.map(|fd| libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let count = libc::nfds_t::try_from(N).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: poll reads and writes exactly N pollfds that live on our stack.
    if unsafe { libc::poll(pollfds.as_mut_ptr(), count, -1) } < 0 {
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
    Ok(pollfds.map(|pollfd| Readiness {
        readable: pollfd.revents & (libc::POLLIN | libc::POLLERR) != 0,
        gone: pollfd.revents & (libc::POLLHUP | libc::POLLNVAL) != 0,
    }))
}
