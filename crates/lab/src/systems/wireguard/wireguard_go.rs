//! wireguard-go, WireGuard's userspace implementation in Go, configured with
//! `wg` from wireguard-tools.
//!
//! `go install golang.zx2c4.com/wireguard@latest` names the binary after
//! the module (`~/go/bin/wireguard`); distributions call it `wireguard-go`.
//! Both are found. It runs in the foreground (`-f`, and
//! `WG_PROCESS_FOREGROUND=1` silences its kernel-module banner), creates its
//! TUN device and `/var/run/wireguard/IFNAME.sock`, and is then configured
//! exactly as wg-quick would configure it.

use std::path::{Path, PathBuf};

use super::{Implementation, Interface, WgSide, interface};
use crate::netns::Namespace;
use crate::systems::SystemError;
use crate::systems::support;

const NAME: &str = "wireguard-go";

/// Environment variable naming the wireguard-go binary explicitly.
pub const BINARY_ENV: &str = "WIREGUARD_GO_BIN";

#[derive(Debug, Clone)]
pub struct WireguardGo {
    binary: Option<PathBuf>,
}

impl WireguardGo {
    /// `$WIREGUARD_GO_BIN`, else `wireguard-go` on PATH, else the binary
    /// `go install` leaves in `~/go/bin` (or `$GOPATH/bin`).
    pub fn locate() -> Self {
        if let Some(path) = std::env::var_os(BINARY_ENV) {
            return Self::at(PathBuf::from(path));
        }
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
        Self {
            binary: support::find_program("wireguard-go", &fallbacks),
        }
    }

    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
        }
    }
}

impl Implementation for WireguardGo {
    fn name(&self) -> &'static str {
        NAME
    }

    fn installed(&self) -> Result<PathBuf, String> {
        let binary = support::require_binary(
            self.binary.as_deref(),
            "wireguard-go",
            "install with `go install golang.zx2c4.com/wireguard@latest`",
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
        command
            .env("WG_PROCESS_FOREGROUND", "1")
            .args(["-f", &side.ifname]);
        interface::start_configured_by_wg(NAME, namespace, side, workdir, &mut command)
    }
}
