//! The calling thread: its clocks, its scheduling class and how late the
//! kernel may wake it. Every call here affects only the calling thread.
//!
//! [`monotonic_nanos`] reads `CLOCK_MONOTONIC`, which every network
//! namespace on a host shares, so a send time stamped in one namespace can
//! be subtracted from a receive time read in another.
//! [`set_thread_timer_slack`] bounds how late a sleeping thread wakes, so a
//! pacing sender can sleep to a deadline instead of spinning, and
//! [`set_thread_realtime`] lets it be woken first on a busy machine.

use std::io;
use std::time::Duration;

use crate::check;

/// Nanoseconds on `CLOCK_MONOTONIC` (since boot, not counting suspend).
/// The same clock in every network namespace of the host.
pub fn monotonic_nanos() -> u64 {
    let time = clock(libc::CLOCK_MONOTONIC);
    time.as_secs() * 1_000_000_000 + u64::from(time.subsec_nanos())
}

/// CPU time (user and system) the calling thread has used so far.
pub fn thread_cpu_time() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// Reads `clock`, one that always exists (so the call cannot fail).
fn clock(clock: libc::clockid_t) -> Duration {
    let mut time = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `time` is a live timespec for the kernel to fill; callers
    // pass clocks that always exist, so the call cannot fail.
    unsafe { libc::clock_gettime(clock, &raw mut time) };
    Duration::new(
        u64::try_from(time.tv_sec).unwrap_or(0),
        u32::try_from(time.tv_nsec).unwrap_or(0),
    )
}

/// Lets the kernel wake the calling thread up to `slack` after a sleep's
/// deadline (it coalesces wakeups within that window; default 50 µs).
/// At least 1 ns.
pub fn set_thread_timer_slack(slack: Duration) -> io::Result<()> {
    let nanos = libc::c_ulong::try_from(slack.as_nanos().max(1)).unwrap_or(libc::c_ulong::MAX);
    // SAFETY: PR_SET_TIMERSLACK takes one integer and changes only the
    // calling thread's timer slack.
    check(unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, nanos, 0, 0, 0) }).map(drop)
}

/// Sets the calling thread's nice value (-20 to 19; below 0 needs
/// `CAP_SYS_NICE`). On Linux the nice value is per thread.
pub fn set_thread_nice(nice: i32) -> io::Result<()> {
    // SAFETY: setpriority takes plain integers; who = 0 is the calling thread.
    check(unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) }).map(drop)
}

/// Moves the calling thread to the real-time FIFO class at `priority`
/// (1 lowest … 99): it runs before every ordinary thread whenever it is
/// runnable, regardless of nice values or scheduling groups. Only for
/// threads that sleep between short bursts of work; the kernel's RT
/// throttling (`sched_rt_runtime_us`, by default 95 % of each second) is
/// the backstop. Needs `CAP_SYS_NICE`.
pub fn set_thread_realtime(priority: i32) -> io::Result<()> {
    set_scheduler(libc::SCHED_FIFO, priority)
}

/// Returns the calling thread to the normal (`SCHED_OTHER`) class.
pub fn set_thread_normal() -> io::Result<()> {
    set_scheduler(libc::SCHED_OTHER, 0)
}

fn set_scheduler(policy: libc::c_int, priority: i32) -> io::Result<()> {
    let parameter = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: sched_setscheduler reads one live sched_param; pid 0 means the
    // calling thread. Failure is reported through errno.
    check(unsafe { libc::sched_setscheduler(0, policy, &raw const parameter) }).map(drop)
}
