//! fjord itself, through `fjord up CONFIG`.
//!
//! The contract: `fjord up` runs in the foreground, reads a wg-quick style
//! file (mode 0600) whose stem names the interface (`/x/fj3.conf` → `fj3`),
//! assigns the addresses and routes itself, logs to stderr, and on SIGINT or
//! SIGTERM removes its interface and exits 0. The driver writes the file,
//! starts the daemon and waits until the interface is up with its addresses.

use std::path::{Path, PathBuf};

use super::{Implementation, Interface, WgSide, interface};
use crate::netns::Namespace;
use crate::systems::support;
use crate::systems::{FjordMesh, RunningMesh, SystemError};
use crate::topology::MeshHost;

const NAME: &str = "fjord";

/// Environment variable naming the fjord binary explicitly.
pub const BINARY_ENV: &str = "FJORD_BIN";
/// Read by fjord itself when `--threads` is not given.
const THREADS_ENV: &str = "FJORD_THREADS";

/// The binary a running `fjord lab` registered as itself; used when
/// `$FJORD_BIN` is unset, so the lab measures the fjord that runs it.
static RUNNING_BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// `--threads` given to the running `fjord lab`, for every fjord it starts.
static RUNNING_THREADS: std::sync::OnceLock<u16> = std::sync::OnceLock::new();

/// Makes [`Fjord::locate`] prefer `binary` (after `$FJORD_BIN`).
pub fn use_binary(binary: PathBuf) {
    let _ = RUNNING_BINARY.set(binary);
}

/// Makes [`Fjord::locate`] run each side with `--threads threads`.
pub fn use_threads(threads: u16) {
    let _ = RUNNING_THREADS.set(threads);
}

#[derive(Debug, Clone)]
pub struct Fjord {
    binary: Option<PathBuf>,
    /// `--threads`; `None` leaves fjord's default (or `$FJORD_THREADS`).
    threads: Option<u16>,
    /// `--test-rekey-divisor`: faster rekeys, for tests.
    rekey_divisor: Option<u32>,
}

impl Fjord {
    /// `$FJORD_BIN`, else `target/release/fjord`, else `target/debug/fjord`
    /// (under `$CARGO_TARGET_DIR` or the workspace's `target/`).
    pub fn locate() -> Self {
        let binary = std::env::var_os(BINARY_ENV)
            .map(PathBuf::from)
            .or_else(|| RUNNING_BINARY.get().cloned())
            .or_else(|| {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
                ["release", "debug"]
                    .iter()
                    .map(|profile| target.join(profile).join("fjord"))
                    .find(|path| support::is_executable(path))
            });
        Self {
            binary,
            threads: RUNNING_THREADS.get().copied(),
            rekey_divisor: None,
        }
    }

    /// The binary at `binary` (tests pass `env!("CARGO_BIN_EXE_fjord")`).
    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
            threads: None,
            rekey_divisor: None,
        }
    }

    /// `--threads` for each process, if set.
    pub(crate) fn threads(&self) -> Option<u16> {
        self.threads
    }

    /// Runs each side with `--threads threads`.
    pub fn with_threads(mut self, threads: u16) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Runs each side with its rekey cycle `divisor` times faster
    /// (`--test-rekey-divisor`), so tests see many rekeys in seconds.
    /// Both ends of a tunnel must agree.
    pub fn with_rekey_divisor(mut self, divisor: u32) -> Self {
        self.rekey_divisor = Some(divisor);
        self
    }
}

impl Implementation for Fjord {
    fn name(&self) -> &'static str {
        NAME
    }

    fn settings(&self) -> String {
        let threads = match (self.threads, std::env::var(THREADS_ENV)) {
            (Some(threads), _) => threads.to_string(),
            (None, Ok(threads)) => format!("{threads} (${THREADS_ENV})"),
            (None, Err(_)) => format!("{} (default)", fjord_net::default_threads()),
        };
        format!("threads {threads}")
    }

    fn installed(&self) -> Result<PathBuf, String> {
        support::require_binary(
            self.binary.as_deref(),
            "fjord binary",
            &format!("build it with `cargo build --release -p fjord` or set {BINARY_ENV}"),
        )
    }

    fn start(
        &self,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
    ) -> Result<Interface, SystemError> {
        let binary = self.installed().map_err(SystemError::NotInstalled)?;
        let config_path = workdir.join(format!("{}.conf", side.ifname));
        support::write_secret_file(&config_path, &side.wg_quick_text())?;
        let mut command = namespace.command(&binary);
        command.arg("up").arg(&config_path);
        if let Some(threads) = self.threads {
            command.arg("--threads").arg(threads.to_string());
        }
        if let Some(divisor) = self.rekey_divisor {
            command.arg("--test-rekey-divisor").arg(divisor.to_string());
        }
        let mut interface = Interface::spawn(NAME, namespace, side, workdir, &mut command, false)?;
        interface.wait_until(&format!("{} up with its addresses", side.ifname), || {
            support::link_is_up(namespace, &side.ifname)
                && interface::addresses_assigned(namespace, side)
        })?;
        Ok(interface)
    }

    fn start_mesh(
        &self,
        hosts: &[MeshHost<'_>],
        workdir: &Path,
    ) -> Result<Box<dyn RunningMesh>, SystemError> {
        let mesh = FjordMesh::new(self.clone()).configure(hosts, workdir)?;
        Ok(Box::new(mesh))
    }
}
