//! IPsec: strongSwan's IKE daemon `charon` (Debian's `strongswan-charon`,
//! driven with `swanctl`), IKEv2 with a pre-shared key, ESP with
//! AES-256-GCM between the overlay addresses.
//!
//! The kernels the lab runs on have no ESP (no XFRM), so the ESP data path
//! is charon's own: the `kernel-libipsec` plugin (`libcharon-extra-plugins`)
//! creates a TUN device (`ipsec0`), encrypts what the kernel routes into
//! it and sends it UDP-encapsulated (`encap = yes`: libipsec can only send
//! ESP through its UDP socket, port 4500). That makes it a userspace tunnel
//! like every other system here, one process per host.
//!
//! Each side gets its own directory with a `strongswan.conf` (named by
//! `STRONGSWAN_CONF`, so nothing under /etc is read: an explicit plugin
//! list, logging to stderr, the vici control socket in the directory) and
//! a `swanctl.conf` (the connection and the key). charon's pid file is
//! compiled in as `/var/run/charon.pid`, and a second charon refuses to
//! start while it exists; so each charon runs in a private mount namespace
//! (`unshare --mount`) where the side's `run/` directory is bind-mounted
//! over `/run`. The mount goes when the process does.
//!
//! Once both charons run, the lab gives each TUN device its overlay
//! address (charon installs routes only for traffic selectors with a local
//! address), loads both configurations, and `swanctl --initiate` from the
//! left brings up the IKE and the ESP security associations. The tunnel
//! counts as up once a ping crosses and both sides list the ESP SA with
//! AES-256-GCM. The MTU is libipsec's fixed 1,400 bytes: it reads the TUN
//! device with a buffer of that size, so a larger MTU set from outside
//! would truncate packets.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod config;

use self::config::{
    Addresses, CONNECTION, ESP_LISTED, LEFT_ADDRESSES, RIGHT_ADDRESSES, SidePaths, random_key,
    strongswan_conf, swanctl_conf,
};
use super::support::{self, LoggedProcess, START_TIMEOUT, WorkDir, start_failed};
use super::{RunningSystem, StartResult, System, SystemError};
use crate::netns::Namespace;
use crate::topology::{OVERLAY_PREFIX_LEN, RIGHT_OVERLAY, TwoHosts};

const NAME: &str = "ipsec";
/// What charon's kernel-libipsec logs once it has its TUN device.
const TUN_CREATED_LOG: &str = "created TUN device: ";
/// Runs in the side's namespace: make `$0` the private `/run`, then become
/// charon (`$1`), keeping the PID the lab watches.
const PRIVATE_RUN_SCRIPT: &str = "mount --bind \"$0\" /run && exec \"$1\"";
/// How long `swanctl --initiate` waits for both SAs, in seconds.
const INITIATE_TIMEOUT_SECS: u32 = 15;

/// Environment variable naming the charon binary explicitly.
pub const CHARON_ENV: &str = "CHARON_BIN";
/// Where distributions put charon (Debian first).
const CHARON_PATHS: &[&str] = &[
    "/usr/lib/ipsec/charon",
    "/usr/libexec/ipsec/charon",
    "/usr/lib/strongswan/charon",
];
const INSTALL_HINT: &str = "install with `fjord lab install-peers` or `apt-get install strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins`";

#[derive(Debug, Clone)]
pub struct Ipsec {
    charon: Option<PathBuf>,
    swanctl: Option<PathBuf>,
}

impl Ipsec {
    /// `$CHARON_BIN`, else the first charon of [`CHARON_PATHS`]; `swanctl`
    /// on PATH or in `/usr/sbin`.
    pub fn locate() -> Self {
        let charon = match std::env::var_os(CHARON_ENV) {
            Some(path) => Some(PathBuf::from(path)),
            None => CHARON_PATHS
                .iter()
                .map(PathBuf::from)
                .find(|path| support::is_executable(path)),
        };
        Self {
            charon,
            swanctl: support::find_program("swanctl", &[PathBuf::from("/usr/sbin/swanctl")]),
        }
    }

    fn programs(&self) -> Result<(PathBuf, &Path), String> {
        let charon = support::require_binary(self.charon.as_deref(), "charon", INSTALL_HINT)?;
        let swanctl = self
            .swanctl
            .as_deref()
            .ok_or_else(|| format!("swanctl not found; {INSTALL_HINT}"))?;
        // Packaged plugins sit beside charon (Debian: /usr/lib/ipsec/plugins);
        // elsewhere charon's own error names what is missing.
        let plugin_dir = charon.parent().map(|dir| dir.join("plugins"));
        if let Some(plugin_dir) = plugin_dir.filter(|dir| dir.is_dir()) {
            for (plugin, package) in [
                ("kernel-libipsec", "libcharon-extra-plugins"),
                ("openssl", "libstrongswan-standard-plugins"),
                ("vici", "strongswan-swanctl"),
            ] {
                let file = plugin_dir.join(format!("libstrongswan-{plugin}.so"));
                if !file.exists() {
                    return Err(format!(
                        "strongSwan's {plugin} plugin not found at {}; install with `fjord lab install-peers` or `apt-get install {package}`",
                        file.display()
                    ));
                }
            }
        }
        Ok((charon, swanctl))
    }
}

/// One host's part.
struct Side<'a> {
    role: &'static str,
    namespace: &'a Namespace,
    addresses: Addresses,
}

impl System for Ipsec {
    fn name(&self) -> &str {
        NAME
    }

    fn description(&self) -> &str {
        "strongSwan IPsec: IKEv2 (PSK), ESP AES-256-GCM in UDP, charon's userspace ESP (kernel-libipsec)"
    }

    fn check(&self) -> Result<String, String> {
        let (charon, _) = self.programs()?;
        // "Linux strongSwan 5.9.8"
        let version = support::first_output_line(&charon, &["--version"])?;
        let version = version.strip_prefix("Linux ").unwrap_or(&version);
        Ok(format!(
            "{version}, IKEv2, ESP AES-256-GCM in userspace (kernel-libipsec)"
        ))
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let (charon, swanctl) = self.programs().map_err(SystemError::NotInstalled)?;
        let failed = |detail: String| start_failed(NAME, detail);
        let dir = WorkDir::create_in(workdir, NAME).map_err(|e| failed(e.to_string()))?;
        let key = random_key().map_err(failed)?;
        let right = Side {
            role: "right",
            namespace: &hosts.right,
            addresses: RIGHT_ADDRESSES,
        };
        let left = Side {
            role: "left",
            namespace: &hosts.left,
            addresses: LEFT_ADDRESSES,
        };
        let mut running = RunningIpsec {
            charons: Vec::new(),
            mtu: 0,
            dir,
        };
        let mut tun_devices = Vec::new();
        for side in [&right, &left] {
            let paths = SidePaths::new(&running.dir, side.role);
            write_side_files(&paths, side, &key).map_err(failed)?;
            let (process, tun) = launch(&charon, side, &paths).map_err(failed)?;
            running.charons.push(process);
            tun_devices.push(tun);
        }
        // The responder first, so the initiator finds its connection loaded.
        for side in [&right, &left] {
            let paths = SidePaths::new(&running.dir, side.role);
            swanctl_command(swanctl, &paths, "--load-all")
                .args(["--noprompt", "--file"])
                .arg(&paths.swanctl_conf)
                .output()
                .map_err(|e| format!("run swanctl: {e}"))
                .and_then(|output| succeeded("swanctl --load-all", output))
                .map_err(|e| failed(format!("{} ({}): {e}", side.role, running.tails())))?;
        }
        let left_paths = SidePaths::new(&running.dir, left.role);
        swanctl_command(swanctl, &left_paths, "--initiate")
            .args(["--child", CONNECTION])
            .args(["--timeout", &INITIATE_TIMEOUT_SECS.to_string()])
            .output()
            .map_err(|e| format!("run swanctl: {e}"))
            .and_then(|output| succeeded("swanctl --initiate", output))
            .map_err(|e| failed(format!("{e}; {}", running.tails())))?;

        let processes: Vec<&LoggedProcess> = running.charons.iter().collect();
        support::wait_for_first_ping(&hosts.left, RIGHT_OVERLAY, &processes).map_err(failed)?;
        for side in [&right, &left] {
            let paths = SidePaths::new(&running.dir, side.role);
            let listing = swanctl_command(swanctl, &paths, "--list-sas")
                .output()
                .map_err(|e| format!("run swanctl: {e}"))
                .and_then(|output| succeeded("swanctl --list-sas", output))
                .map_err(failed)?;
            if !listing.contains(ESP_LISTED) {
                return Err(failed(format!(
                    "the {} side lists no {ESP_LISTED} SA:\n{listing}",
                    side.role
                )));
            }
        }
        // Launched right, then left.
        let (namespace, tun) = (&hosts.left, &tun_devices[1]);
        running.mtu = support::link_mtu(namespace, tun)
            .ok_or_else(|| failed(format!("no MTU for {tun} in {}", namespace.name())))?;
        tracing::info!(
            esp = ESP_LISTED,
            mtu = running.mtu,
            "ipsec tunnel up (charon, kernel-libipsec)"
        );
        Ok(Box::new(running))
    }
}

fn write_side_files(paths: &SidePaths, side: &Side, key: &str) -> Result<(), String> {
    std::fs::create_dir_all(&paths.run_dir)
        .map_err(|e| format!("create {}: {e}", paths.run_dir.display()))?;
    support::write_secret_file(&paths.strongswan_conf, &strongswan_conf(paths))
        .and_then(|()| {
            support::write_secret_file(&paths.swanctl_conf, &swanctl_conf(&side.addresses, key))
        })
        .map_err(|e| e.to_string())
}

/// Starts charon in `side`'s namespace with its private `/run`, waits for
/// its TUN device and control socket, and gives the device the side's
/// overlay address. Returns the process and the device's name.
fn launch(
    charon: &Path,
    side: &Side,
    paths: &SidePaths,
) -> Result<(LoggedProcess, String), String> {
    let role = side.role;
    let namespace = side.namespace;
    let mut command = namespace.command("unshare");
    command
        .env("STRONGSWAN_CONF", &paths.strongswan_conf)
        .args(["--mount", "--propagation", "private", "sh", "-c"])
        .arg(PRIVATE_RUN_SCRIPT)
        .arg(&paths.run_dir)
        .arg(charon);
    let log = paths
        .run_dir
        .parent()
        .unwrap_or(&paths.run_dir)
        .join("charon.log");
    let mut process = LoggedProcess::spawn(format!("charon ({role})"), &mut command, log)?;
    process.wait_until(START_TIMEOUT, "charon's TUN device and vici socket", |p| {
        tun_device(&p.log()).is_some() && paths.vici_socket.exists()
    })?;
    let tun = tun_device(&process.log()).unwrap_or_default();
    let cidr = format!("{}/{OVERLAY_PREFIX_LEN}", side.addresses.overlay);
    namespace
        .ip(&["addr", "add", &cidr, "dev", &tun])
        .and_then(|_| namespace.ip(&["link", "set", "dev", &tun, "up"]))
        .map_err(|e| {
            format!(
                "configure {tun} in {}: {e}; {}",
                namespace.name(),
                process.tail()
            )
        })?;
    Ok((process, tun))
}

/// The device named in charon's "created TUN device: ipsec0" line.
fn tun_device(log: &str) -> Option<String> {
    log.lines()
        .find_map(|line| line.split_once(TUN_CREATED_LOG))
        .map(|(_, name)| name.trim().to_string())
        .filter(|name| !name.is_empty())
}

/// `swanctl SUBCOMMAND --uri <side's socket>`, reading the side's
/// strongswan.conf rather than the host's; the caller adds the
/// subcommand's options.
fn swanctl_command(swanctl: &Path, paths: &SidePaths, subcommand: &str) -> Command {
    let mut command = Command::new(swanctl);
    command
        .env("STRONGSWAN_CONF", &paths.strongswan_conf)
        .stdin(Stdio::null())
        .args([subcommand, "--uri", &paths.vici_uri()]);
    command
}

/// stdout of a finished swanctl; on failure both its streams (initiate
/// logs the negotiation on stdout, its verdict on stderr).
fn succeeded(what: &str, output: std::process::Output) -> Result<String, String> {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if output.status.success() {
        return Ok(stdout);
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    Err(format!(
        "{what} failed ({}): {}\n{}",
        output.status,
        stderr.trim(),
        stdout.trim()
    ))
}

struct RunningIpsec {
    charons: Vec<LoggedProcess>,
    mtu: u16,
    // Last: the processes stop before their files go.
    dir: WorkDir,
}

impl RunningIpsec {
    fn tails(&self) -> String {
        let tails: Vec<String> = self.charons.iter().map(LoggedProcess::tail).collect();
        tails.join("; ")
    }
}

impl RunningSystem for RunningIpsec {
    fn pids(&self) -> Vec<u32> {
        support::pids(&self.charons)
    }

    fn mtu(&self) -> u16 {
        self.mtu
    }
}

impl Drop for RunningIpsec {
    fn drop(&mut self) {
        // On SIGTERM charon deletes its SAs, routes, routing rule and TUN
        // device; its private /run mount ends with it. SIGKILL after the
        // grace leaves only what the namespace's removal takes along.
        for process in &mut self.charons {
            process.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_tun_device_in_charons_log() {
        let log = "00[DMN] Starting IKE charon daemon (strongSwan 5.9.8, Linux 6.1.0, x86_64)\n\
                   00[LIB] created TUN device: ipsec0\n\
                   00[LIB] loaded plugins: charon random nonce openssl\n";
        assert_eq!(tun_device(log).as_deref(), Some("ipsec0"));
        assert_eq!(tun_device("00[LIB] created TUN device: \n"), None);
        assert_eq!(tun_device(""), None);
    }
}
