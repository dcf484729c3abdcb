//! Giving up root once an interface is set up: switch to an unprivileged
//! account and keep only the capabilities the running tunnel still uses.
//!
//! The steps of [`drop_to`], in the order the kernel needs them:
//!
//! ```text
//! exactly one thread?          (credentials and capabilities are per thread)
//! bounding set ─▶ only `keep`  (needs CAP_SETPCAP, so while still root)
//! PR_SET_KEEPCAPS on           (a uid change would clear the permitted set)
//! setgroups([]), setresgid, setresuid
//! PR_SET_KEEPCAPS off
//! capset: effective = permitted = inheritable = `keep`
//! ambient += `keep`            (so `ip`, run at shutdown, has them too)
//! PR_SET_NO_NEW_PRIVS          (no set-user-ID program gives root back)
//! check: real, effective and saved uid and gid are the account's
//! ```
//!
//! A failure part way leaves the process with less privilege than before,
//! never more; the caller treats any error as fatal.

use std::ffi::{CStr, CString};
use std::io;

use crate::check;

/// A Linux capability, by its number (`capabilities(7)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capability(u32);

/// Network administration: socket marks (`SO_MARK`), socket buffers past
/// the sysctl caps (`SO_*BUFFORCE`), routes, rules and links.
pub const CAP_NET_ADMIN: Capability = Capability(12);

impl Capability {
    /// The capability's number, its bit in `/proc/PID/status`'s `Cap*` masks.
    pub fn number(self) -> u32 {
        self.0
    }

    /// The capability's bit in a 64-bit mask, as `/proc/PID/status` prints it.
    pub fn mask(self) -> u64 {
        1u64 << self.0
    }
}

/// An account from the user database (`/etc/passwd`, or whatever NSS serves).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Account {
    pub name: String,
    pub uid: u32,
    /// The account's primary group.
    pub gid: u32,
}

/// Which step of [`drop_to`] failed, and why.
#[derive(Debug)]
pub struct PrivilegeError {
    pub step: &'static str,
    pub source: io::Error,
}

impl std::fmt::Display for PrivilegeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "dropping privileges ({}): {}", self.step, self.source)
    }
}

impl std::error::Error for PrivilegeError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// Looks `name` up in the user database; `None` if there is no such user.
pub fn lookup_user(name: &str) -> io::Result<Option<Account>> {
    let Ok(c_name) = CString::new(name) else {
        return Ok(None);
    };
    let mut buffer = vec![0 as libc::c_char; 1024];
    loop {
        // SAFETY: an all-zero passwd is a valid value of the C struct
        // (integers and null pointers); getpwnam_r overwrites it.
        let mut entry: libc::passwd = unsafe { std::mem::zeroed() };
        let mut found: *mut libc::passwd = std::ptr::null_mut();
        // SAFETY: every pointer is valid for the call: the NUL-terminated
        // name, the entry, the buffer with its true length (the strings of
        // the entry point into it), and `found`, which getpwnam_r sets to
        // `&entry` or null.
        let rc = unsafe {
            libc::getpwnam_r(
                c_name.as_ptr(),
                &raw mut entry,
                buffer.as_mut_ptr(),
                buffer.len(),
                &raw mut found,
            )
        };
        if rc == libc::ERANGE && buffer.len() < 1 << 20 {
            buffer.resize(buffer.len() * 2, 0);
            continue;
        }
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        if found.is_null() {
            return Ok(None);
        }
        // SAFETY: on success pw_name points to a NUL-terminated string
        // inside `buffer`, which is alive here.
        let name = unsafe { CStr::from_ptr(entry.pw_name) }
            .to_string_lossy()
            .into_owned();
        return Ok(Some(Account {
            name,
            uid: entry.pw_uid,
            gid: entry.pw_gid,
        }));
    }
}

/// How many threads the process has (`Threads:` of `/proc/self/status`).
pub fn thread_count() -> io::Result<usize> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("Threads:"))
        .and_then(|count| count.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no thread count in /proc/self/status"))
}

/// The highest capability number this kernel knows.
fn last_capability() -> io::Result<u32> {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")?
        .trim()
        .parse()
        .map_err(|_| io::Error::other("unreadable /proc/sys/kernel/cap_last_cap"))
}

/// `prctl(option, argument, 0, 0, 0)`.
fn prctl(option: libc::c_int, argument: libc::c_ulong) -> io::Result<()> {
    let zero: libc::c_ulong = 0;
    // SAFETY: the options used here take integer arguments only and report
    // failure through errno.
    check(unsafe { libc::prctl(option, argument, zero, zero, zero) }).map(drop)
}

/// `capget(2)`/`capset(2)`'s header; version 3 takes two data words.
#[repr(C)]
struct CapabilityHeader {
    version: u32,
    pid: libc::c_int,
}

/// One 32-capability word of `capset(2)`'s data.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapabilityData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// `_LINUX_CAPABILITY_VERSION_3`: 64-bit capability sets.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

/// Sets the calling thread's effective, permitted and inheritable sets to
/// exactly `mask`.
fn set_capabilities(mask: u64) -> io::Result<()> {
    let header = CapabilityHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let word = |bits: u32| CapabilityData {
        effective: bits,
        permitted: bits,
        inheritable: bits,
    };
    // Truncation intended: the low and the high 32 bits, one word each.
    let data = [word(mask as u32), word((mask >> 32) as u32)];
    // SAFETY: capset reads the header and, for version 3, exactly two data
    // words, both alive for the call; pid 0 means the calling thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Switches the process to `account` (no supplementary groups), keeping
/// only the capabilities in `keep`, also for the programs it starts. Must
/// run as root before any other thread exists: capabilities belong to
/// threads, and a thread started earlier would keep root's.
pub fn drop_to(account: &Account, keep: &[Capability]) -> Result<(), PrivilegeError> {
    let fail = |step: &'static str| move |source: io::Error| PrivilegeError { step, source };
    let threads = thread_count().map_err(fail("counting threads"))?;
    if threads != 1 {
        return Err(PrivilegeError {
            step: "counting threads",
            source: io::Error::other(format!(
                "{threads} threads run; only a single-threaded process can drop them all"
            )),
        });
    }
    let mask = keep.iter().fold(0u64, |mask, cap| mask | cap.mask());
    for number in 0..=last_capability().map_err(fail("reading cap_last_cap"))? {
        if mask & (1u64 << number) == 0 {
            prctl(libc::PR_CAPBSET_DROP, libc::c_ulong::from(number))
                .map_err(fail("bounding set"))?;
        }
    }
    prctl(libc::PR_SET_KEEPCAPS, 1).map_err(fail("keep capabilities"))?;
    // SAFETY: setgroups with a count of 0 reads no list.
    check(unsafe { libc::setgroups(0, std::ptr::null()) }).map_err(fail("setgroups"))?;
    let (uid, gid) = (account.uid, account.gid);
    // SAFETY: setresgid and setresuid take plain integers.
    check(unsafe { libc::setresgid(gid, gid, gid) }).map_err(fail("setresgid"))?;
    // SAFETY: as above.
    check(unsafe { libc::setresuid(uid, uid, uid) }).map_err(fail("setresuid"))?;
    prctl(libc::PR_SET_KEEPCAPS, 0).map_err(fail("keep capabilities"))?;
    set_capabilities(mask).map_err(fail("capset"))?;
    for capability in keep {
        // SAFETY: PR_CAP_AMBIENT takes integer arguments only.
        check(unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                libc::c_ulong::from(capability.number()),
                0 as libc::c_ulong,
                0 as libc::c_ulong,
            )
        })
        .map_err(fail("ambient capabilities"))?;
    }
    prctl(libc::PR_SET_NO_NEW_PRIVS, 1).map_err(fail("no new privileges"))?;
    let (mut real, mut effective, mut saved) = (0, 0, 0);
    // SAFETY: getresuid writes three uid_t through valid pointers.
    check(unsafe { libc::getresuid(&raw mut real, &raw mut effective, &raw mut saved) })
        .map_err(fail("getresuid"))?;
    let (mut real_group, mut effective_group, mut saved_group) = (0, 0, 0);
    // SAFETY: as above, for gid_t.
    check(unsafe {
        libc::getresgid(
            &raw mut real_group,
            &raw mut effective_group,
            &raw mut saved_group,
        )
    })
    .map_err(fail("getresgid"))?;
    if [real, effective, saved] != [uid; 3]
        || [real_group, effective_group, saved_group] != [gid; 3]
    {
        return Err(PrivilegeError {
            step: "checking",
            source: io::Error::other("the user and group IDs did not all change"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_root_and_not_a_made_up_user() {
        let root = lookup_user("root").unwrap().expect("every system has root");
        assert_eq!((root.uid, root.gid), (0, 0));
        assert_eq!(lookup_user("no-such-user-fjord-test").unwrap(), None);
        assert_eq!(lookup_user("nul\0inside").unwrap(), None);
    }

    #[test]
    fn refuses_to_drop_with_other_threads_running() {
        // The test harness runs this on a thread of its own, beside main.
        let helper = std::thread::spawn(|| std::thread::sleep(std::time::Duration::from_secs(1)));
        let account = Account {
            name: "nobody".into(),
            uid: 65534,
            gid: 65534,
        };
        let error = drop_to(&account, &[CAP_NET_ADMIN]).unwrap_err();
        assert_eq!(error.step, "counting threads");
        helper.join().unwrap();
    }

    #[test]
    fn net_admin_is_bit_twelve() {
        assert_eq!(CAP_NET_ADMIN.mask(), 0x1000);
    }
}
