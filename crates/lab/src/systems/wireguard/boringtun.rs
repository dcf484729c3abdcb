//! boringtun, Cloudflare's userspace WireGuard in Rust, through its
//! `boringtun-cli` daemon, configured with `wg` from wireguard-tools.
//!
//! It runs in the foreground (`-f`, logging to stdout) as root
//! (`--disable-drop-privileges`: the lab has no user to drop to), creates
//! its TUN device and `/var/run/wireguard/IFNAME.sock`, and is then
//! configured exactly as wg-quick would configure it.

use std::path::{Path, PathBuf};

use super::{Implementation, Interface, WgSide, interface};
use crate::netns::Namespace;
use crate::systems::SystemError;
use crate::systems::support;

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
        let fallbacks: Vec<PathBuf> = support::home_path(".cargo/bin/boringtun-cli")
            .into_iter()
            .collect();
        Self {
            binary: support::find_program("boringtun-cli", &fallbacks),
        }
    }

    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
        }
    }
}

impl Implementation for Boringtun {
    fn name(&self) -> &'static str {
        NAME
    }

    fn installed(&self) -> Result<PathBuf, String> {
        let binary = support::require_binary(
            self.binary.as_deref(),
            "boringtun-cli",
            "install with `cargo install boringtun-cli`",
        )?;
        interface::wg_tool()?;
        Ok(binary)
    }

    fn start(
        &self,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
    ) -> Result<Interface, SystemError> {
        let binary = self.installed().map_err(SystemError::NotInstalled)?;
        let mut command = namespace.command(&binary);
        command.args(["-f", "--disable-drop-privileges", &side.ifname]);
        interface::start_configured_by_wg(NAME, namespace, side, workdir, &mut command)
    }
}
