//! `ssh -w`: OpenSSH's tunnel device forwarding, IP packets carried in an
//! SSH channel over one TCP connection — the TCP-in-TCP tunnel of the
//! PPP-over-SSH and TCP-over-TCP studies.
//!
//! Each run makes its own keys and sshd configuration in its directory:
//! an ed25519 host key, an ed25519 client key authorized for root, sshd
//! listening on 198.18.0.2 at a port free in the right namespace, with
//! `PermitTunnel point-to-point`, no PAM, no passwords, and nothing
//! forwarded but the tunnel. `sshd -D -e` runs in the foreground, logging
//! to its file; then the client, `ssh -N -w L:R -o Tunnel=point-to-point`,
//! connects from the left namespace with `-F /dev/null` (no user or system
//! config) and `-v`, which logs the negotiated cipher.
//!
//! Tun units are fixed per run (`tunL` on the left, `tunR` on the right,
//! numbers from a process-wide counter), so the devices are known by name
//! without guessing. ssh and sshd's session process open them; the lab
//! then adds the overlay addresses, MTU 1500 and brings them up. Both
//! devices vanish when their process exits.
//!
//! The cipher is OpenSSH's default preference — the first of the client's
//! `ciphers` list that the server also allows, `chacha20-poly1305@openssh.com`
//! on stock OpenSSH — as `check()` reports and `start()` logs.
//!
//! `ssh-compress` is the same tunnel with `-o Compression=yes` (and
//! `Compression yes` in sshd's configuration): zlib over the whole SSH
//! stream, as in the PPP-over-SSH study's compressed runs. `start()`
//! checks in `ssh -v`'s log that zlib was negotiated both ways.

use std::net::{IpAddr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use super::support::{self, LoggedProcess, START_TIMEOUT, WorkDir, start_failed};
use super::{RunningSystem, StartResult, System, SystemError};
use crate::netns::{self, Namespace};
use crate::topology::{LEFT_OVERLAY, OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};

const NAME: &str = "ssh";
const COMPRESS_NAME: &str = "ssh-compress";
/// MTU of both tun devices (ssh's own default).
const TUNNEL_MTU: u16 = 1500;
/// Where sshd insists on its privilege separation directory (compiled in).
const PRIVSEP_DIR: &str = "/run/sshd";
/// What `ssh -v` logs for each direction's negotiated algorithms.
const CIPHER_LOG: &str = "kex: client->server cipher: ";
/// What the same lines end with once compression is agreed.
const COMPRESSION_LOG: &str = "compression: zlib@openssh.com";

/// First tun unit number handed out; later runs count up from it.
const FIRST_TUN_UNIT: u32 = 100;
static NEXT_TUN_UNIT: AtomicU32 = AtomicU32::new(FIRST_TUN_UNIT);

#[derive(Debug, Clone)]
pub struct SshTunnel {
    ssh: Option<PathBuf>,
    sshd: Option<PathBuf>,
    keygen: Option<PathBuf>,
    /// zlib compression of the SSH stream (`ssh-compress`).
    compress: bool,
}

impl SshTunnel {
    /// `ssh` and `ssh-keygen` on PATH, `sshd` on PATH or in `/usr/sbin`.
    pub fn locate() -> Self {
        Self {
            ssh: support::find_program("ssh", &[]),
            sshd: support::find_program("sshd", &[PathBuf::from("/usr/sbin/sshd")]),
            keygen: support::find_program("ssh-keygen", &[]),
            compress: false,
        }
    }

    /// The same tunnel with zlib compression, as the system `ssh-compress`.
    pub fn compressed(mut self) -> Self {
        self.compress = true;
        self
    }

    fn programs(&self) -> Result<Programs<'_>, String> {
        let missing = |program: &str, package: &str| {
            format!(
                "{program} not found; install with `fjord lab install-peers` or `apt-get install {package}`"
            )
        };
        Ok(Programs {
            ssh: self
                .ssh
                .as_deref()
                .ok_or_else(|| missing("ssh", "openssh-client"))?,
            sshd: self
                .sshd
                .as_deref()
                .ok_or_else(|| missing("sshd", "openssh-server"))?,
            keygen: self
                .keygen
                .as_deref()
                .ok_or_else(|| missing("ssh-keygen", "openssh-client"))?,
        })
    }
}

struct Programs<'a> {
    ssh: &'a Path,
    sshd: &'a Path,
    keygen: &'a Path,
}

impl System for SshTunnel {
    fn name(&self) -> &str {
        if self.compress { COMPRESS_NAME } else { NAME }
    }

    fn description(&self) -> &str {
        if self.compress {
            "OpenSSH `ssh -w` with zlib compression of the SSH stream (`-o Compression=yes`)"
        } else {
            "OpenSSH `ssh -w`: point-to-point tun over one TCP connection (TCP in TCP), default cipher"
        }
    }

    fn check(&self) -> Result<String, String> {
        let programs = self.programs()?;
        // "OpenSSH_9.2p1 Debian-2+deb12u10, OpenSSL 3.0.19 27 Jan 2026" (on stderr).
        let version = support::first_output_line(programs.ssh, &["-V"])?;
        let version = version.split(',').next().unwrap_or(&version).to_string();
        match default_cipher(programs.ssh) {
            Some(cipher) => Ok(format!("{version}, cipher {cipher}")),
            None => Ok(version),
        }
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let programs = self.programs().map_err(SystemError::NotInstalled)?;
        let name = self.name();
        let failed = |detail: String| start_failed(name, detail);
        ensure_privsep_dir().map_err(failed)?;
        let dir = WorkDir::create_in(workdir, name).map_err(|e| failed(e.to_string()))?;
        for key in ["host_key", "client_key"] {
            keygen(programs.keygen, &dir, key).map_err(failed)?;
        }
        let client_public = std::fs::read_to_string(dir.file("client_key.pub"))
            .map_err(|e| failed(format!("read client_key.pub: {e}")))?;
        // Only the tunnel: no ports, agent, X11 or pty for this key.
        dir.write("authorized_keys", &format!("restrict {client_public}"))
            .map_err(|e| failed(e.to_string()))?;
        let port = free_port(&hosts.right).map_err(failed)?;
        let config = dir
            .write("sshd_config", &sshd_config(&dir, port, self.compress))
            .map_err(|e| failed(e.to_string()))?;

        let mut sshd_command = hosts.right.command(programs.sshd);
        sshd_command.args(["-D", "-e", "-f"]).arg(&config);
        let mut sshd =
            LoggedProcess::spawn("sshd (right)", &mut sshd_command, dir.file("sshd.log"))
                .map_err(failed)?;
        sshd.wait_until(START_TIMEOUT, "sshd to listen", |p| {
            p.log().contains("Server listening on")
        })
        .map_err(failed)?;

        let left_unit = NEXT_TUN_UNIT.fetch_add(1, Ordering::Relaxed);
        let right_unit = NEXT_TUN_UNIT.fetch_add(1, Ordering::Relaxed);
        let (left_tun, right_tun) = (format!("tun{left_unit}"), format!("tun{right_unit}"));
        let mut ssh_command = hosts.left.command(programs.ssh);
        ssh_command
            .args(["-F", "/dev/null", "-v", "-N"])
            .args(["-w", &format!("{left_unit}:{right_unit}")])
            .args(["-o", "Tunnel=point-to-point"])
            .args(["-o", "ExitOnForwardFailure=yes"])
            .args(["-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes"])
            .args(["-o", "StrictHostKeyChecking=no"])
            .args([
                "-o",
                "UserKnownHostsFile=/dev/null",
                "-o",
                "GlobalKnownHostsFile=/dev/null",
            ])
            .args(["-o", "ConnectTimeout=10"])
            .args([
                "-o",
                if self.compress {
                    "Compression=yes"
                } else {
                    "Compression=no"
                },
            ])
            .arg("-i")
            .arg(dir.file("client_key"))
            .args(["-p", &port.to_string(), &format!("root@{RIGHT_UNDERLAY}")]);
        let client = LoggedProcess::spawn("ssh (left)", &mut ssh_command, dir.file("ssh.log"))
            .map_err(failed)?;
        let mut running = RunningSsh {
            client,
            sshd_children: Vec::new(),
            sshd,
            _dir: dir,
        };
        running
            .client
            .wait_until(START_TIMEOUT, "the tunnel forward to be established", |p| {
                p.log().contains("tunnel forward established")
            })
            .map_err(|e| failed(format!("{e}; {}", running.sshd.tail())))?;
        for (namespace, ifname, overlay) in [
            (&hosts.left, &left_tun, LEFT_OVERLAY),
            (&hosts.right, &right_tun, RIGHT_OVERLAY),
        ] {
            running
                .client
                .wait_until(
                    START_TIMEOUT,
                    &format!("{ifname} in {}", namespace.name()),
                    |_| support::link_exists(namespace, ifname),
                )
                .map_err(|e| failed(format!("{e}; {}", running.sshd.tail())))?;
            support::configure_link(namespace, ifname, overlay, OVERLAY_PREFIX_LEN, TUNNEL_MTU)
                .map_err(failed)?;
        }
        support::wait_for_first_ping(
            &hosts.left,
            RIGHT_OVERLAY,
            &[&running.client, &running.sshd],
        )
        .map_err(failed)?;
        running.sshd_children = running
            .sshd
            .pid()
            .map(support::descendants)
            .unwrap_or_default();
        let log = running.client.log();
        let cipher = negotiated_cipher(&log).unwrap_or_else(|| "unknown".into());
        let compressed = log.matches(COMPRESSION_LOG).count() >= 2;
        if self.compress && !compressed {
            return Err(failed(
                "ssh -v logs no zlib compression in both directions".to_string(),
            ));
        }
        tracing::info!(%cipher, compressed, %left_tun, %right_tun, "ssh tunnel up");
        Ok(Box::new(running))
    }
}

/// The client's preferred cipher: the first of `ssh -G`'s `ciphers` line.
fn default_cipher(ssh: &Path) -> Option<String> {
    // `-G` prints the configuration it would use and exits; an address
    // literal needs no name lookup.
    let output = Command::new(ssh)
        .args(["-F", "/dev/null", "-G", &RIGHT_UNDERLAY.to_string()])
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find_map(|line| line.strip_prefix("ciphers "))?;
    line.split(',').next().map(str::to_string)
}

/// sshd's chroot for the pre-authentication child; its package's service
/// creates it at boot, which containers skip. Left in place: concurrent
/// runs share it, and it is the package's own directory.
fn ensure_privsep_dir() -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    if Path::new(PRIVSEP_DIR).is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(PRIVSEP_DIR)
        .and_then(|()| {
            std::fs::set_permissions(PRIVSEP_DIR, std::fs::Permissions::from_mode(0o755))
        })
        .map_err(|e| format!("create sshd's privilege separation directory {PRIVSEP_DIR}: {e}"))
}

/// `ssh-keygen -t ed25519` into `DIR/NAME` (and `NAME.pub`), no passphrase.
fn keygen(keygen: &Path, dir: &WorkDir, name: &str) -> Result<(), String> {
    netns::run(
        Command::new(keygen)
            .args([
                "-q",
                "-t",
                "ed25519",
                "-N",
                "",
                "-C",
                &format!("fjord-lab-{name}"),
                "-f",
            ])
            .arg(dir.file(name)),
    )
    .map(drop)
    .map_err(|e| format!("generate {name}: {e}"))
}

/// A TCP port free on the right host's underlay address, found by binding
/// port 0 inside its namespace. The namespace belongs to this run, so
/// nothing else takes the port before sshd binds it.
fn free_port(namespace: &Namespace) -> Result<u16, String> {
    let probe = namespace
        .spawn_thread(|| {
            let listener = TcpListener::bind(SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), 0))?;
            Ok(listener.local_addr()?.port())
        })
        .map_err(|e| format!("start the port probe: {e}"))?;
    probe
        .join()
        .map_err(|_| "the port probe panicked".to_string())?
        .map_err(|e| format!("find a free port in {}: {e}", namespace.name()))
}

fn sshd_config(dir: &WorkDir, port: u16, compress: bool) -> String {
    format!(
        "Port {port}\n\
         ListenAddress {RIGHT_UNDERLAY}\n\
         HostKey {host_key}\n\
         AuthorizedKeysFile {authorized_keys}\n\
         PidFile none\n\
         PermitRootLogin prohibit-password\n\
         PubkeyAuthentication yes\n\
         PasswordAuthentication no\n\
         KbdInteractiveAuthentication no\n\
         UsePAM no\n\
         StrictModes no\n\
         PermitTunnel point-to-point\n\
         AllowTcpForwarding no\n\
         AllowAgentForwarding no\n\
         X11Forwarding no\n\
         PermitTTY no\n\
         UseDNS no\n\
         PrintMotd no\n\
         LogLevel VERBOSE\n\
         Compression {compression}\n",
        host_key = dir.file("host_key").display(),
        authorized_keys = dir.file("authorized_keys").display(),
        compression = if compress { "yes" } else { "no" },
    )
}

/// The cipher in `ssh -v`'s "kex: client->server cipher: X MAC: …" line.
fn negotiated_cipher(log: &str) -> Option<String> {
    let start = log.find(CIPHER_LOG)? + CIPHER_LOG.len();
    log[start..].split_whitespace().next().map(str::to_string)
}

struct RunningSsh {
    client: LoggedProcess,
    /// sshd's processes serving the connection (monitor and session),
    /// found once the tunnel was up.
    sshd_children: Vec<u32>,
    sshd: LoggedProcess,
    // Last: the processes stop before their files go.
    _dir: WorkDir,
}

impl RunningSystem for RunningSsh {
    fn pids(&self) -> Vec<u32> {
        let mut pids: Vec<u32> = self.client.pid().into_iter().collect();
        pids.extend(&self.sshd_children);
        pids
    }

    fn mtu(&self) -> u16 {
        TUNNEL_MTU
    }
}

impl Drop for RunningSsh {
    fn drop(&mut self) {
        // The client's exit closes the connection; sshd's session ends with
        // it and closes the right tun device.
        self.client.stop();
        let listener = self.sshd.pid();
        let sessions_gone = netns::wait_until(support::STOP_GRACE, "sshd's session to end", || {
            listener.is_none_or(|pid| support::descendants(pid).is_empty())
        });
        if sessions_gone.is_err()
            && let Some(pid) = listener
        {
            // Still sshd's children, so still the PIDs we saw.
            for child in support::descendants(pid) {
                tracing::warn!(pid = child, "sshd session did not end; killing it");
                let _ = fjord_sys::process::send_signal(child, fjord_sys::process::SIGKILL);
            }
        }
        self.sshd.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_negotiated_cipher() {
        let log = "debug1: kex: algorithm: sntrup761x25519-sha512@openssh.com\n\
                   debug1: kex: server->client cipher: chacha20-poly1305@openssh.com MAC: <implicit> compression: none\n\
                   debug1: kex: client->server cipher: chacha20-poly1305@openssh.com MAC: <implicit> compression: none\n";
        assert_eq!(
            negotiated_cipher(log).as_deref(),
            Some("chacha20-poly1305@openssh.com")
        );
    }
}
