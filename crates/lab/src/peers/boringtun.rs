//! boringtun, Cloudflare's userspace WireGuard in Rust, through its
//! `boringtun-cli` daemon, configured with `wg` from wireguard-tools.
//!
//! It runs in the foreground (`-f`, logging to stdout) as root
//! (`--disable-drop-privileges`: the lab has no user to drop to), creates
//! its TUN device and `/var/run/wireguard/IFNAME.sock`, and is then
//! configured exactly as wg-quick would configure it.

use std::path::{Path, PathBuf};

use super::daemon;
use super::{PeerError, RunningSide, TunnelImpl, WgSide};
use crate::netns::Namespace;

const NAME: &str = "boringtun";

/// Environment variable naming the boringtun-cli binary explicitly.
pub const BINARY_ENV: &str = "BORINGTUN_BIN";

#[derive(Debug, Clone)]
pub struct Boringtun {
    binary: Option<PathBuf>,
}

impl Boringtun {
    /// `$BORINGTUN_BIN`, else `boringtun-cli` on PATH, else `~/.cargo/bin`.
    pub fn locate() -> Self {
        if let Some(path) = std::env::var_os(BINARY_ENV) {
            return Self::at(PathBuf::from(path));
        }
        let fallbacks: Vec<PathBuf> = super::home_path(".cargo/bin/boringtun-cli")
            .into_iter()
            .collect();
        Self {
            binary: super::find_program("boringtun-cli", &fallbacks),
        }
    }

    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
        }
    }
}

impl TunnelImpl for Boringtun {
    fn name(&self) -> &str {
        NAME
    }

    fn installed(&self) -> Result<PathBuf, String> {
        let binary = daemon::require_binary(
            &self.binary,
            "boringtun-cli",
            "install with `cargo install boringtun-cli`",
        )?;
        super::wg_tool()?;
        Ok(binary)
    }

    fn start(
        &self,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
    ) -> Result<Box<dyn RunningSide>, PeerError> {
        let binary = self.installed().map_err(PeerError::NotInstalled)?;
        let mut command = namespace.command(&binary);
        command.args(["-f", "--disable-drop-privileges", &side.ifname]);
        daemon::start_configured_by_wg(NAME, namespace, side, workdir, &mut command)
    }
}
