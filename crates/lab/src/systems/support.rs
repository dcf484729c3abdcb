//! What every system is built from: a private work directory for keys,
//! configs and logs ([`WorkDir`]); a tunnel process whose output goes to a
//! log file that errors quote ([`LoggedProcess`]); finding programs; and
//! small queries about links and process trees.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::{IpAddr, Ipv4Addr};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use super::SystemError;
use crate::netns::{self, Namespace, Process};

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

/// Whether a missing program must fail rather than skip: under CI
/// (`CI=true`) every system is installed by `./dev setup`.
pub fn missing_is_failure() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// For a test that needs root: `true` as root; otherwise one "skipping"
/// line and `false`, or, under CI, a failure naming `why`.
pub fn running_as_root(why: &str) -> bool {
    if crate::netns::is_root() {
        return true;
    }
    assert!(!missing_is_failure(), "{why} (CI=true)");
    eprintln!("skipping: {why}");
    false
}

/// A private directory (mode 0700: private keys go in it), removed with
/// its files on drop: one per test, and one per running system inside it.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
}

static NEXT_WORK_DIR: AtomicU32 = AtomicU32::new(0);

impl WorkDir {
    /// `$TMPDIR/fjord-lab-<label>-<pid>-<n>`.
    pub fn create(label: &str) -> Result<Self, SystemError> {
        Self::create_in(&std::env::temp_dir(), &format!("fjord-lab-{label}"))
    }

    /// `PARENT/<label>-<pid>-<n>`.
    pub fn create_in(parent: &Path, label: &str) -> Result<Self, SystemError> {
        let n = NEXT_WORK_DIR.fetch_add(1, Ordering::Relaxed);
        let path = parent.join(format!("{label}-{}-{n}", std::process::id()));
        fs::create_dir_all(&path).map_err(io_error(format!("create {}", path.display())))?;
        // Guard first, so a failed chmod still removes the directory.
        let dir = Self { path };
        fs::set_permissions(&dir.path, fs::Permissions::from_mode(0o700))
            .map_err(io_error(format!("chmod {}", dir.path.display())))?;
        Ok(dir)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `self/name`.
    pub fn file(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Writes `text` to `self/name`, readable by the owner only.
    pub fn write(&self, name: &str, text: &str) -> Result<PathBuf, SystemError> {
        let path = self.file(name);
        write_secret_file(&path, text)?;
        Ok(path)
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        // A failing test names this directory for its logs: keep them
        // (keys inside stay owner-only, in a 0700 directory).
        if std::thread::panicking() {
            eprintln!("kept {} for its logs", self.path.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.path);
    }
}

fn io_error(operation: impl Into<String>) -> impl FnOnce(io::Error) -> SystemError {
    let operation = operation.into();
    move |source| SystemError::Io { operation, source }
}

/// Writes `text` to `path` readable by its owner only (keys inside).
pub(super) fn write_secret_file(path: &Path, text: &str) -> Result<(), SystemError> {
    let operation = format!("write {}", path.display());
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io_error(operation.clone()))?;
    // An existing file keeps its mode through open(2); force 0600.
    file.set_permissions(fs::Permissions::from_mode(0o600))
        .map_err(io_error(operation.clone()))?;
    io::Write::write_all(&mut file, text.as_bytes()).map_err(io_error(operation))
}

/// The last `lines` lines of a log file, indented under the error line.
pub fn log_tail(path: &Path, lines: usize) -> String {
    const MAX_BYTES: u64 = 16 * 1024;
    let Ok(mut file) = File::open(path) else {
        return format!("(no log at {})", path.display());
    };
    let length = file.metadata().map(|meta| meta.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(length.saturating_sub(MAX_BYTES)));
    let mut bytes = Vec::new();
    let _ = file.read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let tail: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty())
        .collect();
    if tail.is_empty() {
        return "(log empty)".to_string();
    }
    let start = tail.len().saturating_sub(lines);
    let mut out = String::new();
    for line in &tail[start..] {
        out.push_str("\n    ");
        out.push_str(line);
    }
    out
}

/// `program` on `PATH`, else the first of `fallbacks` that exists.
pub fn find_program(program: &str, fallbacks: &[PathBuf]) -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(program));
    on_path
        .chain(fallbacks.iter().cloned())
        .find(|path| is_executable(path))
}

pub(crate) fn is_executable(path: &Path) -> bool {
    fs::metadata(path).is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
}

/// `$HOME/<relative>`, if HOME is set.
pub(crate) fn home_path(relative: &str) -> Option<PathBuf> {
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(relative))
}

/// `binary` when it is an executable file; otherwise one line saying it
/// is missing (`program`) and how to get it (`install`).
pub(super) fn require_binary(
    binary: Option<&Path>,
    program: &str,
    install: &str,
) -> Result<PathBuf, String> {
    match binary {
        Some(path) if is_executable(path) => Ok(path.to_path_buf()),
        Some(path) => Err(format!("{program} not found at {}", path.display())),
        None => Err(format!("{program} not found; {install}")),
    }
}

/// The ids of those of `processes` still running, for CPU accounting.
pub(super) fn pids(processes: &[LoggedProcess]) -> Vec<u32> {
    processes.iter().filter_map(LoggedProcess::pid).collect()
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
    /// `log_path`, in a session of its own: a Ctrl-C at the terminal
    /// reaches the lab alone, which stops the process on drop.
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
        // Each side in a session of its own, as on two hosts (or over SSH):
        // two sides in the lab's session were one autogroup, so one side
        // woke the other without competing with the machine's other work,
        // which halved fjord's ping RTT between namespaces under load.
        fjord_sys::process::spawn_in_own_session(command);
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

    /// The file holding the process's stdout and stderr.
    pub(super) fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// The whole log so far (empty if unreadable).
    pub(super) fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// `label log (path): last lines of the log`, for error messages.
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

    /// The exit status if the process has exited by itself.
    pub(super) fn try_wait(&mut self) -> Option<ExitStatus> {
        self.process.try_wait()
    }

    /// Sends SIGTERM and returns at once; [`LoggedProcess::stop`] reaps it.
    pub(super) fn terminate(&self) {
        self.process.signal(fjord_sys::process::SIGTERM);
    }

    /// SIGTERM, up to [`STOP_GRACE`], then SIGKILL; the exit status, or
    /// `None` if it was already stopped.
    pub(super) fn stop(&mut self) -> Option<ExitStatus> {
        self.process.stop(STOP_GRACE)
    }

    /// SIGKILL without warning (a crash), then reap; `None` if it was
    /// already stopped.
    pub(super) fn kill(&mut self) -> Option<ExitStatus> {
        let child = self.process.child_mut()?;
        let _ = child.kill();
        child.wait().ok()
    }
}

/// Whether `ifname` exists in `namespace`.
pub fn link_exists(namespace: &Namespace, ifname: &str) -> bool {
    namespace.ip(&["-o", "link", "show", "dev", ifname]).is_ok()
}

/// Whether `ifname` exists in `namespace` with the UP flag set.
pub(super) fn link_is_up(namespace: &Namespace, ifname: &str) -> bool {
    let Ok(out) = namespace.ip(&["-o", "link", "show", "dev", ifname]) else {
        return false;
    };
    out.split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .is_some_and(|(flags, _)| flags.split(',').any(|flag| flag == "UP"))
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
    fn work_dir_is_private_and_removed() {
        let path;
        {
            let dir = WorkDir::create("support-test").unwrap();
            dir.write("secret", "x").unwrap();
            path = dir.file("secret").parent().unwrap().to_path_buf();
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o700);
        }
        assert!(!path.exists());
    }
}
