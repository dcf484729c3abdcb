//! The process: who runs it, the units of its `/proc` figures, signals to the processes it started, the
//! network namespace of the calling thread, sessions of its children, and going to the background.

use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;

pub use libc::{SIGINT, SIGKILL, SIGTERM};

use crate::check;

/// Whether this process runs with root's effective user ID.
pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Clock ticks per second, the unit of the CPU times in `/proc/PID/stat`
/// (100 on every Linux architecture fjord builds for, used if the call
/// fails).
pub fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf takes a constant name and has no other preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The size of a memory page in bytes, the unit of `/proc/PID/statm`
/// (4096 if the call fails).
pub fn page_size_bytes() -> u64 {
    // SAFETY: sysconf takes a constant name and has no other preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|&s| s > 0).unwrap_or(4096)
}

/// Sends `signal` to process `pid`. Callers pass PIDs of processes they
/// started themselves.
pub fn send_signal(pid: u32, signal: i32) -> io::Result<()> {
    let pid =
        libc::pid_t::try_from(pid).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: kill(2) takes plain integers and reports failure through errno.
    check(unsafe { libc::kill(pid, signal) }).map(drop)
}

/// Moves the calling thread into the network namespace at `path`
/// (`/run/netns/NAME`). Sockets the thread creates afterwards belong to
/// that namespace for their whole life; other threads are unaffected.
pub fn enter_network_namespace(path: &Path) -> io::Result<()> {
    let file = std::fs::File::open(path)?;
    // SAFETY: setns takes a valid open fd (kept alive by `file` for the call)
    // and a namespace type constant; failure is reported through errno.
    check(unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// Makes the process `command` spawns start a session of its own
/// (`setsid`), as a daemon started by an init system or from another
/// login would: with autogroup scheduling, the kernel schedules each
/// session as one group, so processes in one session hand the CPU to each
/// other in ways processes on different hosts never could.
pub fn spawn_in_own_session(command: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the hook runs in the child between fork and exec, where only
    // async-signal-safe calls are allowed: setsid is one, and reading errno
    // allocates nothing. A forked child is never a process group leader,
    // the one case in which setsid fails.
    unsafe { command.pre_exec(|| check(libc::setsid()).map(drop)) }
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
/// session and gets /dev/null as stdin, stdout and stderr.
///
/// # Safety
///
/// The process must have a single thread when this is called. fork copies
/// only the calling thread: a lock another thread held (the allocator's,
/// stdout's) stays locked forever in the child, and whatever that thread
/// was changing stays half-changed.
pub unsafe fn daemonize() -> io::Result<Daemonized> {
    // SAFETY: the caller guarantees a single-threaded process, in which
    // fork has no memory-safety preconditions; both returns are handled
    // below.
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
    for target in [0, 1, 2] {
        // SAFETY: dup2 with a valid open fd onto the standard descriptors.
        check(unsafe { libc::dup2(null.as_raw_fd(), target) })?;
    }
    Ok(Daemonized::Child)
}
