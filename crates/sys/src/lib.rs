//! Thin safe wrappers over the Linux system calls the rest of fjord needs,
//! each written once. The only crate with `unsafe` blocks, each saying why
//! it is sound, but for the binary's one call to [`process::daemonize`],
//! whose precondition (no threads yet) only the binary can vouch for.
//!
//! - [`socket`]: socket options (buffer sizes past the sysctl caps,
//!   receive timestamps, drop counters).
//! - [`mmsg`]: one `recvmmsg`/`sendmmsg` per batch, including the tunnel's
//!   UDP GSO messages.
//! - [`address_watch`]: notice that the host's addresses changed.
//! - [`poll`]: sleeping until descriptors are readable or writable.
//! - [`thread`]: the calling thread's clocks, scheduling class and timer slack.
//! - [`process`]: root check, signals, network namespaces, daemonizing.
//! - [`privilege`]: user lookup, and switching to an unprivileged account
//!   that keeps only the capabilities the tunnel still needs.
//! - [`packet`]: `AF_PACKET` raw sockets, the lab's link emulator's
//!   instrument; the tunnel never uses them.

pub mod address_watch;
pub mod mmsg;
pub mod packet;
pub mod poll;
pub mod privilege;
pub mod process;
pub mod socket;
pub mod thread;

use std::io;

/// A libc return code as a result: negative means errno says why.
fn check(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}
