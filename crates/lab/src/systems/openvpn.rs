//! OpenVPN (Debian's `openvpn`, 2.6) in point-to-point TLS mode over UDP,
//! with an AES-256-GCM data channel.
//!
//! Static-key mode cannot do AEAD ciphers, so each run makes a tiny PKI in
//! its directory: one self-signed P-256 certificate per side (`openssl
//! req -x509`), each side pinning the other's by SHA-256 fingerprint
//! (`peer-fingerprint`, no CA). The right host is the TLS server
//! (`dh none`: ECDHE only), the left the client; both know each other's
//! underlay address. Each side gets a config file, so a run can be repeated
//! by hand (`openvpn --config right.conf`):
//!
//! - `dev-type tun`, a unique device name, `ifconfig 198.19.0.1 198.19.0.2`
//!   (point-to-point addresses; OpenVPN sets them and MTU 1500 itself);
//! - `data-ciphers AES-256-GCM`, `allow-compression no`, `disable-dco`
//!   (the data channel stays in userspace, as everywhere in the lab);
//! - `verb 3`, which logs the negotiated data channel cipher; the tunnel
//!   counts as up only once both logs say `AES-256-GCM`.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::support::{self, LoggedProcess, START_TIMEOUT, WorkDir, start_failed};
use super::wireguard;
use super::{RunningSystem, StartResult, System, SystemError};
use crate::netns::{self, Namespace};
use crate::topology::{LEFT_OVERLAY, LEFT_UNDERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};

const NAME: &str = "openvpn";
/// The data channel cipher the lab configures and insists on.
pub const DATA_CIPHER: &str = "AES-256-GCM";
/// UDP port on both hosts.
const PORT: u16 = 1194;
/// What OpenVPN logs (at `verb 3`) once the data channel is keyed.
const DATA_CHANNEL_LOG: &str = "Data Channel: cipher '";

/// Environment variable naming the openvpn binary explicitly.
pub const BINARY_ENV: &str = "OPENVPN_BIN";

#[derive(Debug, Clone)]
pub struct OpenVpn {
    binary: Option<PathBuf>,
    openssl: Option<PathBuf>,
}

impl OpenVpn {
    /// `$OPENVPN_BIN`, else `openvpn` on PATH or in `/usr/sbin`; `openssl`
    /// on PATH for the certificates.
    pub fn locate() -> Self {
        let binary = match std::env::var_os(BINARY_ENV) {
            Some(path) => Some(PathBuf::from(path)),
            None => support::find_program("openvpn", &[PathBuf::from("/usr/sbin/openvpn")]),
        };
        Self {
            binary,
            openssl: support::find_program("openssl", &[PathBuf::from("/usr/bin/openssl")]),
        }
    }

    fn programs(&self) -> Result<(PathBuf, &Path), String> {
        let binary = support::require_binary(
            self.binary.as_deref(),
            "openvpn",
            "install with `fjord lab install-peers` or `apt-get install openvpn`",
        )?;
        let openssl = self.openssl.as_deref().ok_or(
            "openssl not found (needed for OpenVPN's certificates); install with `apt-get install openssl`",
        )?;
        Ok((binary, openssl))
    }
}

/// One side's part of the configuration.
struct Side<'a> {
    role: &'static str,
    namespace: &'a Namespace,
    underlay: Ipv4Addr,
    peer_underlay: Ipv4Addr,
    overlay: Ipv4Addr,
    peer_overlay: Ipv4Addr,
    tls_role: &'static str,
}

impl System for OpenVpn {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "OpenVPN 2.6: TLS point-to-point over UDP, AES-256-GCM data channel, tun MTU 1500"
    }

    fn check(&self) -> Result<String, String> {
        let (binary, _) = self.programs()?;
        let first = support::first_output_line(&binary, &["--version"])?;
        // "OpenVPN 2.6.14 x86_64-pc-linux-gnu [SSL (OpenSSL)] [LZO] …"
        let version = first.split(" [").next().unwrap_or(&first);
        Ok(format!("{version}, data channel {DATA_CIPHER}"))
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let (binary, openssl) = self.programs().map_err(SystemError::NotInstalled)?;
        let failed = |detail: String| start_failed(NAME, detail);
        let dir = WorkDir::create_in(workdir, NAME).map_err(|e| failed(e.to_string()))?;

        let right = Side {
            role: "right",
            namespace: &hosts.right,
            underlay: RIGHT_UNDERLAY,
            peer_underlay: LEFT_UNDERLAY,
            overlay: RIGHT_OVERLAY,
            peer_overlay: LEFT_OVERLAY,
            tls_role: "tls-server\ndh none",
        };
        let left = Side {
            role: "left",
            namespace: &hosts.left,
            underlay: LEFT_UNDERLAY,
            peer_underlay: RIGHT_UNDERLAY,
            overlay: LEFT_OVERLAY,
            peer_overlay: RIGHT_OVERLAY,
            tls_role: "tls-client",
        };
        let right_fingerprint = certificate(openssl, &dir, right.role).map_err(failed)?;
        let left_fingerprint = certificate(openssl, &dir, left.role).map_err(failed)?;

        // The server first, so the client's first packet finds it listening.
        let right_ifname = wireguard::unique_ifname();
        let left_ifname = wireguard::unique_ifname();
        let right_process =
            launch(&binary, &dir, &right, &right_ifname, &left_fingerprint).map_err(failed)?;
        let left_process =
            launch(&binary, &dir, &left, &left_ifname, &right_fingerprint).map_err(failed)?;
        let mut running = RunningOpenVpn {
            left: left_process,
            right: right_process,
            mtu: 1500,
            _dir: dir,
        };

        support::wait_for_first_ping(&hosts.left, RIGHT_OVERLAY, &[&running.left, &running.right])
            .map_err(failed)?;
        // Both sides log the cipher once keyed; the ping proves one did.
        let mut ciphers = Vec::new();
        for process in [&mut running.left, &mut running.right] {
            process
                .wait_until(START_TIMEOUT, "the data channel cipher in the log", |p| {
                    negotiated_cipher(&p.log()).is_some()
                })
                .map_err(failed)?;
            ciphers.push(negotiated_cipher(&process.log()).unwrap_or_default());
        }
        if ciphers.iter().any(|cipher| cipher != DATA_CIPHER) {
            return Err(failed(format!(
                "negotiated data channel ciphers {ciphers:?}, expected {DATA_CIPHER}"
            )));
        }
        running.mtu = support::link_mtu(&hosts.left, &left_ifname).unwrap_or(running.mtu);
        tracing::info!(cipher = DATA_CIPHER, mtu = running.mtu, "openvpn tunnel up");
        Ok(Box::new(running))
    }
}

/// Writes `DIR/ROLE.key` and a self-signed `DIR/ROLE.crt`; returns the
/// certificate's SHA-256 fingerprint (`AB:CD:…`).
fn certificate(openssl: &Path, dir: &WorkDir, role: &str) -> Result<String, String> {
    let key = dir.file(&format!("{role}.key"));
    let cert = dir.file(&format!("{role}.crt"));
    netns::run(
        Command::new(openssl)
            .args([
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
            ])
            .args([
                "-nodes",
                "-days",
                "2",
                "-subj",
                &format!("/CN=fjord-lab-{role}"),
            ])
            .arg("-keyout")
            .arg(&key)
            .arg("-out")
            .arg(&cert),
    )
    .map_err(|e| format!("make the {role} certificate: {e}"))?;
    let output = netns::run(
        Command::new(openssl)
            .args(["x509", "-noout", "-fingerprint", "-sha256", "-in"])
            .arg(&cert),
    )
    .map_err(|e| format!("fingerprint the {role} certificate: {e}"))?;
    // "sha256 Fingerprint=E8:2B:…" (the label's case varies by version).
    let text = String::from_utf8_lossy(&output.stdout);
    text.trim()
        .split_once('=')
        .map(|(_, fingerprint)| fingerprint.to_string())
        .filter(|fingerprint| fingerprint.len() == 95)
        .ok_or_else(|| format!("unexpected fingerprint output from openssl: {text}"))
}

/// Writes `DIR/ROLE.conf` and starts OpenVPN with it in the side's namespace.
fn launch(
    binary: &Path,
    dir: &WorkDir,
    side: &Side,
    ifname: &str,
    peer_fingerprint: &str,
) -> Result<LoggedProcess, String> {
    let role = side.role;
    let config = format!(
        "dev-type tun\n\
         dev {ifname}\n\
         ifconfig {overlay} {peer_overlay}\n\
         proto udp\n\
         local {underlay}\n\
         lport {PORT}\n\
         remote {peer_underlay} {PORT}\n\
         {tls_role}\n\
         cert {cert}\n\
         key {key}\n\
         peer-fingerprint {peer_fingerprint}\n\
         data-ciphers {DATA_CIPHER}\n\
         allow-compression no\n\
         disable-dco\n\
         verb 3\n",
        overlay = side.overlay,
        peer_overlay = side.peer_overlay,
        underlay = side.underlay,
        peer_underlay = side.peer_underlay,
        tls_role = side.tls_role,
        cert = dir.file(&format!("{role}.crt")).display(),
        key = dir.file(&format!("{role}.key")).display(),
    );
    let config_path = dir
        .write(&format!("{role}.conf"), &config)
        .map_err(|e| e.to_string())?;
    let mut command = side.namespace.command(binary);
    command.arg("--config").arg(&config_path);
    let mut process = LoggedProcess::spawn(
        format!("openvpn ({role})"),
        &mut command,
        dir.file(&format!("{role}.log")),
    )?;
    process.wait_until(
        START_TIMEOUT,
        &format!("{ifname} in {}", side.namespace.name()),
        |_| support::link_exists(side.namespace, ifname),
    )?;
    Ok(process)
}

/// The cipher in OpenVPN's "Data Channel: cipher 'AES-256-GCM', …" line.
fn negotiated_cipher(log: &str) -> Option<String> {
    let start = log.find(DATA_CHANNEL_LOG)? + DATA_CHANNEL_LOG.len();
    let rest = &log[start..];
    Some(rest[..rest.find('\'')?].to_string())
}

struct RunningOpenVpn {
    left: LoggedProcess,
    right: LoggedProcess,
    mtu: u16,
    // Last: the processes stop before their files go.
    _dir: WorkDir,
}

impl RunningSystem for RunningOpenVpn {
    fn pids(&self) -> Vec<u32> {
        self.left
            .pid()
            .into_iter()
            .chain(self.right.pid())
            .collect()
    }

    fn mtu(&self) -> u16 {
        self.mtu
    }
}

impl Drop for RunningOpenVpn {
    fn drop(&mut self) {
        // Each process removes its own tun device as it exits.
        self.left.stop();
        self.right.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_data_channel_cipher() {
        let log = "2026-11-22 02:18:44 Initialization Sequence Completed\n\
                   2026-11-22 02:18:44 Data Channel: cipher 'AES-256-GCM', peer-id: 0\n";
        assert_eq!(negotiated_cipher(log).as_deref(), Some("AES-256-GCM"));
        assert_eq!(negotiated_cipher("Initialization Sequence Completed"), None);
    }
}
