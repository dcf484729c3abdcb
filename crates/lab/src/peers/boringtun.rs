//! boringtun, Cloudflare's userspace WireGuard in Rust, through its
//! `boringtun-cli` daemon, configured with `wg` from wireguard-tools.
//!
//! It runs in the foreground (`-f`, logging to stdout) as root
//! (`--disable-drop-privileges`: the lab has no user to drop to), creates
//! its TUN device and `/var/run/wireguard/IFNAME.sock`, and is then
//! configured exactly as wg-quick would configure it.

use std::path::{Path, PathBuf};

use super::daemon::{self, Daemon};
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
        let binary = match &self.binary {
            Some(path) if super::is_executable(path) => path.clone(),
            Some(path) => return Err(format!("boringtun-cli not found at {}", path.display())),
            None => {
                return Err(
                    "boringtun-cli not found; install with `cargo install boringtun-cli`"
                        .to_string(),
                );
            }
        };
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
        let mut daemon = Daemon::spawn(NAME, namespace, &side.ifname, workdir, &mut command, true)?;
        let socket = daemon.uapi_socket();
        daemon.wait_until(&format!("{} and its control socket", side.ifname), || {
            socket.exists() && daemon::link_exists(namespace, &side.ifname)
        })?;
        daemon::configure_with_wg(&daemon, namespace, side, workdir)?;
        Ok(Box::new(daemon))
    }
}
