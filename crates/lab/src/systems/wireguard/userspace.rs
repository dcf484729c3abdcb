//! The userspace WireGuard daemons that `wg` from wireguard-tools
//! configures: boringtun, Cloudflare's implementation in Rust (through its
//! `boringtun-cli` daemon), and wireguard-go, WireGuard's own in Go.
//!
//! Both run in the foreground (`-f`) as root, create their TUN device and
//! `/var/run/wireguard/IFNAME.sock`, and are then configured exactly as
//! wg-quick would configure them. One [`Userspace`] drives either; a
//! [`Daemon`] says what differs: the binary, where to find it, and how it
//! stays in the foreground.
//!
//! - boringtun logs to stdout with `-f` and needs `--disable-drop-privileges`
//!   (the lab has no user to drop to).
//! - wireguard-go: `go install golang.zx2c4.com/wireguard@latest` names the
//!   binary after the module (`~/go/bin/wireguard`); distributions call it
//!   `wireguard-go`. Both are found. `WG_PROCESS_FOREGROUND=1` silences its
//!   kernel-module banner.

use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::{Implementation, SideResult, WgSide, interface};
use crate::netns::Namespace;
use crate::systems::SystemError;
use crate::systems::support;

/// What tells one userspace daemon from another.
pub trait Daemon: Send + Sync + 'static {
    /// Short name used in logs and reports.
    const NAME: &'static str;
    /// The program looked up on PATH, and named when it is missing: the
    /// name, unless the binary is called otherwise.
    const PROGRAM: &'static str = Self::NAME;
    /// Environment variable naming the binary explicitly.
    const BINARY_ENV: &'static str;
    /// How to install it, for the message when it is missing.
    const INSTALL: &'static str;
    /// Where to look when the program is not on PATH.
    fn fallbacks() -> Vec<PathBuf>;
    /// Makes `command` run the daemon in the foreground for `ifname`.
    fn run_in_foreground(command: &mut Command, ifname: &str);
}

/// boringtun's `boringtun-cli`.
pub struct BoringtunCli;

impl Daemon for BoringtunCli {
    const NAME: &'static str = "boringtun";
    const PROGRAM: &'static str = "boringtun-cli";
    const BINARY_ENV: &'static str = "BORINGTUN_BIN";
    const INSTALL: &'static str = "install with `cargo install boringtun-cli`";

    /// `~/.cargo/bin`.
    fn fallbacks() -> Vec<PathBuf> {
        support::home_path(".cargo/bin/boringtun-cli")
            .into_iter()
            .collect()
    }

    fn run_in_foreground(command: &mut Command, ifname: &str) {
        command.args(["-f", "--disable-drop-privileges", ifname]);
    }
}

/// wireguard-go.
pub struct WireguardGoDaemon;

impl Daemon for WireguardGoDaemon {
    const NAME: &'static str = "wireguard-go";
    const BINARY_ENV: &'static str = "WIREGUARD_GO_BIN";
    const INSTALL: &'static str = "install with `go install golang.zx2c4.com/wireguard@latest`";

    /// The binary `go install` leaves in `~/go/bin` (or `$GOPATH/bin`),
    /// under either name.
    fn fallbacks() -> Vec<PathBuf> {
        let mut fallbacks = Vec::new();
        for bin_dir in [
            std::env::var_os("GOPATH").map(|gopath| PathBuf::from(gopath).join("bin")),
            support::home_path("go/bin"),
        ]
        .into_iter()
        .flatten()
        {
            fallbacks.push(bin_dir.join("wireguard-go"));
            fallbacks.push(bin_dir.join("wireguard"));
        }
        fallbacks
    }

    fn run_in_foreground(command: &mut Command, ifname: &str) {
        command
            .env("WG_PROCESS_FOREGROUND", "1")
            .args(["-f", ifname]);
    }
}

pub type Boringtun = Userspace<BoringtunCli>;
pub type WireguardGo = Userspace<WireguardGoDaemon>;

/// A userspace daemon `D`, configured with `wg`.
pub struct Userspace<D: Daemon> {
    binary: Option<PathBuf>,
    daemon: PhantomData<D>,
}

impl<D: Daemon> Clone for Userspace<D> {
    fn clone(&self) -> Self {
        Self {
            binary: self.binary.clone(),
            daemon: PhantomData,
        }
    }
}

impl<D: Daemon> std::fmt::Debug for Userspace<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct(D::NAME)
            .field("binary", &self.binary)
            .finish()
    }
}

impl<D: Daemon> Userspace<D> {
    /// `$BINARY_ENV`, else the program on PATH, else its fallbacks.
    pub fn locate() -> Self {
        match std::env::var_os(D::BINARY_ENV) {
            Some(path) => Self::at(PathBuf::from(path)),
            None => Self {
                binary: support::find_program(D::PROGRAM, &D::fallbacks()),
                daemon: PhantomData,
            },
        }
    }

    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
            daemon: PhantomData,
        }
    }
}

impl<D: Daemon> Implementation for Userspace<D> {
    fn name(&self) -> &'static str {
        D::NAME
    }

    fn installed(&self) -> Result<PathBuf, String> {
        let binary = support::require_binary(self.binary.as_deref(), D::PROGRAM, D::INSTALL)?;
        interface::wg_tool()?;
        Ok(binary)
    }

    fn start(&self, namespace: &Namespace, side: &WgSide, workdir: &Path) -> SideResult {
        let mut command = namespace.command(self.installed().map_err(SystemError::NotInstalled)?);
        D::run_in_foreground(&mut command, &side.ifname);
        interface::start_configured_by_wg(D::NAME, namespace, side, workdir, &mut command)
    }
}
