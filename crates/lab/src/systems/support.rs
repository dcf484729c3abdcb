//! What the non-WireGuard systems (VpnCloud, OpenVPN, `ssh -w`) share: a
//! per-run directory for keys, configs and logs; a tunnel process whose
//! output goes to a log file that errors quote; and small queries about
//! links and process trees.
//!
//! The WireGuard drivers' daemon guard lives in `peers` and is specific to
//! one interface per process; these systems run one or two processes per
//! host and need several log files per run, so they use this instead, built
//! on the same pieces ([`Process`], [`log_tail`]).

use std::fs::{self, File};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::SystemError;
use crate::netns::{self, Namespace, Process};
use crate::peers::log_tail;

/// How long a tunnel process may take to get ready (interface, listening
/// socket).
pub(super) const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a fresh tunnel may take to carry its first ping.
pub(super) const FIRST_PING_TIMEOUT: Duration = Duration::from_secs(15);
/// How long a stopping process gets between SIGTERM and SIGKILL.
pub(super) const STOP_GRACE: Duration = Duration::from_secs(3);
/// Lines of a log quoted in errors.
const LOG_TAIL_LINES: usize = 15;

/// `SystemError::StartFailed` for `system`.
pub(super) fn start_failed(system: &str, detail: impl Into<String>) -> SystemError {
    SystemError::StartFailed {
        system: system.to_string(),
        detail: detail.into(),
    }
}

/// A directory of one running tunnel inside the caller's work directory,
/// mode 0700 (private keys go in it), removed with its files on drop.
#[derive(Debug)]
pub(super) struct RunDir {
    path: PathBuf,
}

static NEXT_RUN_DIR: AtomicU32 = AtomicU32::new(0);

impl RunDir {
    /// `WORKDIR/<system>-<pid>-<n>`.
    pub(super) fn create(workdir: &Path, system: &str) -> Result<Self, String> {
        let n = NEXT_RUN_DIR.fetch_add(1, Ordering::Relaxed);
        let path = workdir.join(format!("{system}-{}-{n}", std::process::id()));
        fs::create_dir_all(&path).map_err(|e| format!("create {}: {e}", path.display()))?;
        // Guard first, so a failed chmod still removes the directory.
        let dir = Self { path };
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("chmod {}: {e}", dir.path.display()))?;
        Ok(dir)
    }

    /// `self/name`.
    pub(super) fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `text` to `self/name`, readable by the owner only.
    pub(super) fn write(&self, name: &str, text: &str) -> Result<PathBuf, String> {
        let path = self.file(name);
        crate::peers::write_secret_file(&path, text).map_err(|e| e.to_string())?;
        Ok(path)
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}

/// A tunnel process inside a namespace, stdout and stderr in a log file;
/// stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub(super) struct LoggedProcess {
    /// What errors call it: `openvpn (right)`.
    label: String,
    process: Process,
    log_path: PathBuf,
}

impl LoggedProcess {
    /// Spawns `command` (from [`Namespace::command`]) with its output in
    /// `log_path`.
    pub(super) fn spawn(
        label: impl Into<String>,
        command: &mut Command,
        log_path: PathBuf,
    ) -> Result<Self, String> {
        let label = label.into();
        let log = File::create(&log_path)
            .map_err(|e| format!("{label}: create {}: {e}", log_path.display()))?;
        let log_copy = log
            .try_clone()
            .map_err(|e| format!("{label}: duplicate {}: {e}", log_path.display()))?;
        command.stdin(Stdio::null()).stdout(log_copy).stderr(log);
        let process = Process::spawn(command).map_err(|e| format!("{label}: {e}"))?;
        Ok(Self {
            label,
            process,
            log_path,
        })
    }

    pub(super) fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// The whole log so far (empty if unreadable).
    pub(super) fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// `label: last lines of the log`, for error messages.
    pub(super) fn tail(&self) -> String {
        format!(
            "{} log ({}):{}",
            self.label,
            self.log_path.display(),
            log_tail(&self.log_path, LOG_TAIL_LINES)
        )
    }

    /// Polls `ready` until it holds; fails at once, quoting the log, if the
    /// process exits first, and after `timeout` otherwise.
    pub(super) fn wait_until(
        &mut self,
        timeout: Duration,
        what: &str,
        mut ready: impl FnMut(&Self) -> bool,
    ) -> Result<(), String> {
        let mut exited = None;
        let outcome = netns::wait_until(timeout, what, || {
            if let Some(status) = self.process.try_wait() {
                exited = Some(status);
                return true;
            }
            ready(self)
        });
        if let Some(status) = exited {
            return Err(format!(
                "{} exited ({status}) before {what}; {}",
                self.label,
                self.tail()
            ));
        }
        outcome.map_err(|e| format!("{e}; {}", self.tail()))
    }

    /// SIGTERM, up to [`STOP_GRACE`], then SIGKILL.
    pub(super) fn stop(&mut self) {
        self.process.stop(STOP_GRACE);
    }
}

/// The MTU of `ifname` in `namespace`, from `ip -o link show`.
pub(super) fn link_mtu(namespace: &Namespace, ifname: &str) -> Option<u16> {
    let out = namespace.ip(&["-o", "link", "show", "dev", ifname]).ok()?;
    let mut words = out.split_whitespace();
    words.find(|word| *word == "mtu")?;
    words.next()?.parse().ok()
}

/// Gives `ifname` in `namespace` the address `address/prefix_len`, MTU
/// `mtu`, and brings it up.
pub(super) fn configure_link(
    namespace: &Namespace,
    ifname: &str,
    address: Ipv4Addr,
    prefix_len: u8,
    mtu: u16,
) -> Result<(), String> {
    let cidr = format!("{address}/{prefix_len}");
    namespace
        .ip(&["addr", "add", &cidr, "dev", ifname])
        .and_then(|_| namespace.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string(), "up"]))
        .map(drop)
        .map_err(|e| format!("configure {ifname} in {}: {e}", namespace.name()))
}

/// Waits for a ping from `namespace` to `destination`; on failure the
/// error quotes the logs of `processes`.
pub(super) fn wait_for_first_ping(
    namespace: &Namespace,
    destination: Ipv4Addr,
    processes: &[&LoggedProcess],
) -> Result<Duration, String> {
    crate::traffic::wait_for_ping(namespace, IpAddr::V4(destination), FIRST_PING_TIMEOUT).map_err(
        |e| {
            let logs: Vec<String> = processes.iter().map(|p| p.tail()).collect();
            format!("no ping through the tunnel: {e}; {}", logs.join("; "))
        },
    )
}

/// PIDs of every live descendant of `pid` (children, their children, …),
/// found through the parent PID in `/proc/*/stat`.
pub(super) fn descendants(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let parents: Vec<(u32, u32)> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|child| Some((child, parent_pid(child)?)))
        .collect();
    let mut found = vec![pid];
    let mut next = 0;
    while next < found.len() {
        let parent = found[next];
        found.extend(
            parents
                .iter()
                .filter(|(_, p)| *p == parent)
                .map(|(child, _)| *child),
        );
        next += 1;
    }
    found.remove(0);
    found
}

/// The parent PID of `pid`, from `/proc/PID/stat`.
pub(super) fn parent_pid(pid: u32) -> Option<u32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may contain spaces) start at ')'.
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// First line of `program ARGS…`'s stdout, else of its stderr, whatever
/// its exit status (`openvpn --version` exits 1).
pub(super) fn first_output_line(program: &Path, args: &[&str]) -> Result<String, String> {
    let output = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("run {}: {e}", program.display()))?;
    [&output.stdout, &output.stderr]
        .into_iter()
        .filter_map(|bytes| {
            let text = String::from_utf8_lossy(bytes);
            text.lines()
                .map(str::trim)
                .find(|line| !line.is_empty())
                .map(str::to_string)
        })
        .next()
        .ok_or_else(|| format!("{} {} printed nothing", program.display(), args.join(" ")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_own_children() {
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        let me = std::process::id();
        assert_eq!(parent_pid(child.id()), Some(me));
        assert!(descendants(me).contains(&child.id()));
        let _ = child.kill();
        let _ = child.wait();
    }

    #[test]
    fn run_dir_is_private_and_removed() {
        let path;
        {
            let dir = RunDir::create(&std::env::temp_dir(), "support-test").unwrap();
            dir.write("secret", "x").unwrap();
            path = dir.file("secret").parent().unwrap().to_path_buf();
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        assert!(!path.exists());
    }
}
