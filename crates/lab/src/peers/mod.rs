//! Tunnel drivers: each starts one side of a WireGuard-protocol tunnel
//! inside a namespace from a common description ([`WgSide`]), so any two
//! implementations pair up (fjord↔fjord, fjord↔wireguard-go,
//! boringtun↔fjord, …).
//!
//! A driver ([`TunnelImpl`]) says whether its program is installed and, if
//! so, starts it: the userspace daemon runs in the foreground with its
//! stdout and stderr in a log file in the caller's work directory, the
//! interface is configured (keys and peers through `wg setconf`, addresses,
//! MTU and routes through `ip`, as wg-quick would, or by fjord itself from
//! a wg-quick style file), and the driver waits until the interface is up.
//! The returned [`RunningSide`] stops the daemon on drop.
//!
//! wireguard-go and boringtun keep their control sockets in
//! `/var/run/wireguard/IFNAME.sock`, which every namespace shares, so
//! interface names must be unique across concurrently running tests:
//! [`unique_ifname`] makes them so.

mod boringtun;
mod daemon;
mod fjord;
mod side;
mod wireguard_go;

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, SystemTime};

use fjord_proto::PublicKey;

pub use boringtun::Boringtun;
pub use daemon::link_exists;
pub use fjord::{Fjord, use_binary as use_fjord_binary, use_threads as use_fjord_threads};
pub use side::{
    DEFAULT_MTU, Initiator, LEFT_OVERLAY, LISTEN_PORT, OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, WgPeer,
    WgSide, generate_private_key, point_to_point, unique_ifname,
};
pub use wireguard_go::WireguardGo;

use crate::netns::{Namespace, NetnsError};

#[derive(Debug, thiserror::Error)]
pub enum PeerError {
    /// The implementation's program (or `wg`) is missing; the text says how
    /// to install it.
    #[error("{0}")]
    NotInstalled(String),
    #[error(transparent)]
    Netns(#[from] NetnsError),
    #[error("{operation}: {source}")]
    Io {
        operation: String,
        #[source]
        source: io::Error,
    },
    #[error("{implementation} exited ({status}): {log_tail}")]
    Exited {
        implementation: String,
        status: String,
        log_tail: String,
    },
    #[error("{implementation}: timed out after {timeout:?} waiting for {what}: {log_tail}")]
    Timeout {
        implementation: String,
        timeout: Duration,
        what: String,
        log_tail: String,
    },
    #[error("{implementation}: {source}: {log_tail}")]
    Configure {
        implementation: String,
        #[source]
        source: NetnsError,
        log_tail: String,
    },
    #[error("{implementation} is not running")]
    NotRunning { implementation: String },
}

fn io_error(operation: impl Into<String>) -> impl FnOnce(io::Error) -> PeerError {
    let operation = operation.into();
    move |source| PeerError::Io { operation, source }
}

/// A WireGuard implementation that can run one side of a tunnel.
pub trait TunnelImpl: Send + Sync {
    /// Short name used in logs and reports (`fjord`, `wireguard-go`, …).
    fn name(&self) -> &str;
    /// The program that would run, or one line saying why it cannot.
    fn installed(&self) -> Result<PathBuf, String>;
    /// Settings that change its figures, for the report (empty: none).
    fn settings(&self) -> String {
        String::new()
    }
    /// Starts `side` inside `namespace` and returns once its interface is up
    /// and configured. Logs and config files go to `workdir`.
    fn start(
        &self,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
    ) -> Result<Box<dyn RunningSide>, PeerError>;
}

/// A running side; dropping it stops the daemon (SIGTERM, then SIGKILL).
pub trait RunningSide: Send {
    fn implementation(&self) -> &str;
    fn ifname(&self) -> &str;
    /// PIDs of the processes serving this side.
    fn pids(&self) -> Vec<u32>;
    /// The file holding the daemon's stdout and stderr.
    fn log_path(&self) -> &Path;
    /// SIGTERM, wait up to `grace`, then SIGKILL; the exit status.
    fn stop(&mut self, grace: Duration) -> Result<ExitStatus, PeerError>;
    /// SIGKILL without warning (a crash), then reap.
    fn kill(&mut self) -> Result<ExitStatus, PeerError>;
    /// The exit status if the daemon has exited by itself.
    fn try_wait(&mut self) -> Option<ExitStatus>;
    /// Per-peer state from `wg show IFNAME dump`, where the implementation
    /// answers WireGuard's control protocol; `None` where it does not.
    fn peer_stats(&self) -> Option<Result<Vec<PeerStats>, PeerError>>;
}

/// One peer's line of `wg show IFNAME dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    pub public_key: PublicKey,
    pub endpoint: Option<SocketAddr>,
    pub latest_handshake: Option<SystemTime>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// Every implementation the lab knows, fjord located as [`Fjord::locate`] does.
pub fn all() -> Vec<Box<dyn TunnelImpl>> {
    vec![
        Box::new(Fjord::locate()),
        Box::new(WireguardGo::locate()),
        Box::new(Boringtun::locate()),
    ]
}

/// Whether a missing implementation must fail rather than skip: under CI
/// (`CI=true`) every peer is installed by `./dev setup`.
pub fn missing_is_failure() -> bool {
    std::env::var("CI").is_ok_and(|value| value == "true")
}

/// `program` on `PATH`, else the first of `fallbacks` that exists.
pub(crate) fn find_program(program: &str, fallbacks: &[PathBuf]) -> Option<PathBuf> {
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

/// `wg` from wireguard-tools, needed to configure wireguard-go and boringtun.
pub(crate) fn wg_tool() -> Result<PathBuf, String> {
    find_program("wg", &[])
        .ok_or_else(|| "wg not found; install with `apt-get install wireguard-tools`".to_string())
}

/// Writes `text` to `path` readable by its owner only (keys inside).
pub(crate) fn write_secret_file(path: &Path, text: &str) -> Result<(), PeerError> {
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

/// A directory for one test's configs and logs, removed on drop.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
}

static NEXT_WORKDIR: AtomicU32 = AtomicU32::new(0);

impl WorkDir {
    /// `$TMPDIR/fjord-lab-<pid>-<n>-<label>`, mode 0700.
    pub fn create(label: &str) -> Result<Self, PeerError> {
        let n = NEXT_WORKDIR.fetch_add(1, Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("fjord-lab-{}-{n}-{label}", std::process::id()));
        fs::create_dir_all(&path).map_err(io_error(format!("create {}", path.display())))?;
        fs::set_permissions(&path, fs::Permissions::from_mode(0o700))
            .map_err(io_error(format!("chmod {}", path.display())))?;
        Ok(Self { path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.path);
    }
}
