//! Notice of the host's address changes: a route netlink socket in the
//! IPv4 and IPv6 interface-address groups, readable when an address is
//! added or removed. Its messages are read and discarded, never parsed:
//! the caller looks at the host's addresses afresh (`getifaddrs`), so
//! there is no parser here to trust.

use std::io;
use std::mem;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use crate::check;

pub struct AddressWatch(OwnedFd);

impl AddressWatch {
    /// A non-blocking socket that becomes readable on every address change
    /// in this network namespace.
    pub fn open() -> io::Result<Self> {
        // SAFETY: plain socket(2) call; the result is checked before use.
        let fd = check(unsafe {
            libc::socket(
                libc::AF_NETLINK,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                libc::NETLINK_ROUTE,
            )
        })?;
        // SAFETY: `fd` was just opened above and is owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_nl is plain old data; all-zero is a valid value.
        let mut address: libc::sockaddr_nl = unsafe { mem::zeroed() };
        address.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        address.nl_groups = (libc::RTMGRP_IPV4_IFADDR | libc::RTMGRP_IPV6_IFADDR) as u32;
        // SAFETY: `address` is a live sockaddr_nl and the length passed is
        // its size.
        check(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&raw const address).cast::<libc::sockaddr>(),
                mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        Ok(Self(fd))
    }

    /// Reads every notice waiting; whether there was any. A queue that
    /// overflowed (`ENOBUFS`: notices were lost) counts as a change.
    pub fn drain(&self) -> io::Result<bool> {
        let mut buffer = [0u8; 8192];
        let mut changed = false;
        loop {
            // SAFETY: `buffer` is live and writable for its whole length.
            let read = unsafe {
                libc::recv(
                    self.0.as_raw_fd(),
                    buffer.as_mut_ptr().cast(),
                    buffer.len(),
                    0,
                )
            };
            if read >= 0 {
                changed = true;
                continue;
            }
            let error = io::Error::last_os_error();
            match error.raw_os_error() {
                Some(libc::EAGAIN) => return Ok(changed),
                Some(libc::EINTR) => {}
                Some(libc::ENOBUFS) => changed = true,
                _ => return Err(error),
            }
        }
    }
}

impl AsRawFd for AddressWatch {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

impl AsFd for AddressWatch {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}
