//! The daemon behind every driver: a process in a namespace with its
//! output in a log file, waited on until its interface is ready, configured
//! with `wg` and `ip` where it speaks WireGuard's control protocol, and
//! stopped on drop.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, SystemTime};

use super::{PeerError, PeerStats, RunningSide, WgSide, io_error, log_tail, write_secret_file};
use crate::netns::{self, Namespace, NetnsError, Process};

/// How long a daemon may take to create and bring up its interface.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of a daemon's log quoted in errors.
const LOG_TAIL_LINES: usize = 20;

/// A daemon serving one interface: the process guard, its log and how to
/// reach it. Shared by all drivers.
pub(crate) struct Daemon {
    implementation: &'static str,
    ifname: String,
    namespace: String,
    process: Process,
    log_path: PathBuf,
    /// Whether `wg` can surely talk to it (wireguard-go, boringtun).
    uapi: bool,
}

impl Daemon {
    /// Spawns `program ARGS…` inside `namespace`, stdout and stderr into
    /// `workdir/IFNAME.log`.
    pub(crate) fn spawn(
        implementation: &'static str,
        namespace: &Namespace,
        ifname: &str,
        workdir: &Path,
        command: &mut Command,
        uapi: bool,
    ) -> Result<Self, PeerError> {
        let log_path = workdir.join(format!("{ifname}.log"));
        let log =
            File::create(&log_path).map_err(io_error(format!("create {}", log_path.display())))?;
        let log_copy = log
            .try_clone()
            .map_err(io_error(format!("duplicate {}", log_path.display())))?;
        command.stdin(Stdio::null()).stdout(log_copy).stderr(log);
        let process = namespace.spawn(command)?;
        Ok(Self {
            implementation,
            ifname: ifname.to_string(),
            namespace: namespace.name().to_string(),
            process,
            log_path,
            uapi,
        })
    }

    pub(crate) fn log_tail(&self) -> String {
        log_tail(&self.log_path, LOG_TAIL_LINES)
    }

    /// Polls `ready` until it holds, failing early if the daemon exits.
    pub(crate) fn wait_until(
        &mut self,
        what: &str,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), PeerError> {
        let mut exited = None;
        let outcome = netns::wait_until(START_TIMEOUT, what, || {
            if let Some(status) = self.process.try_wait() {
                exited = Some(status);
                return true;
            }
            ready()
        });
        if let Some(status) = exited {
            return Err(PeerError::Exited {
                implementation: self.implementation.to_string(),
                status: status.to_string(),
                log_tail: self.log_tail(),
            });
        }
        outcome.map_err(|_| PeerError::Timeout {
            implementation: self.implementation.to_string(),
            timeout: START_TIMEOUT,
            what: what.to_string(),
            log_tail: self.log_tail(),
        })
    }

    /// Wraps a failed configuration step with the daemon's log.
    pub(crate) fn configure_error(&self, source: NetnsError) -> PeerError {
        PeerError::Configure {
            implementation: self.implementation.to_string(),
            source,
            log_tail: self.log_tail(),
        }
    }

    /// A killed daemon leaves its control socket behind. The name is ours
    /// (see [`unique_ifname`]), but a restarted daemon may serve it again,
    /// so only a socket nobody answers on is removed.
    fn remove_stale_socket(&self) {
        let socket = self.uapi_socket();
        if let Err(error) = std::os::unix::net::UnixStream::connect(&socket)
            && error.kind() == io::ErrorKind::ConnectionRefused
        {
            let _ = fs::remove_file(socket);
        }
    }

    pub(crate) fn uapi_socket(&self) -> PathBuf {
        Path::new("/var/run/wireguard").join(format!("{}.sock", self.ifname))
    }
}

impl RunningSide for Daemon {
    fn implementation(&self) -> &str {
        self.implementation
    }

    fn ifname(&self) -> &str {
        &self.ifname
    }

    fn pids(&self) -> Vec<u32> {
        self.process.id().into_iter().collect()
    }

    fn log_path(&self) -> &Path {
        &self.log_path
    }

    fn stop(&mut self, grace: Duration) -> Result<ExitStatus, PeerError> {
        self.process
            .stop(grace)
            .ok_or_else(|| PeerError::NotRunning {
                implementation: self.implementation.to_string(),
            })
    }

    fn kill(&mut self) -> Result<ExitStatus, PeerError> {
        let child = self
            .process
            .child_mut()
            .ok_or_else(|| PeerError::NotRunning {
                implementation: self.implementation.to_string(),
            })?;
        let _ = child.kill();
        let status = child
            .wait()
            .map_err(io_error(format!("reap {}", self.implementation)))?;
        self.remove_stale_socket();
        Ok(status)
    }

    fn try_wait(&mut self) -> Option<ExitStatus> {
        self.process.try_wait()
    }

    fn peer_stats(&self) -> Option<Result<Vec<PeerStats>, PeerError>> {
        // fjord may serve the same socket; ask whoever has it.
        if !self.uapi && !self.uapi_socket().exists() {
            return None;
        }
        let dump = netns::run(Command::new("ip").args([
            "netns",
            "exec",
            &self.namespace,
            "wg",
            "show",
            &self.ifname,
            "dump",
        ]));
        Some(
            dump.map_err(PeerError::from)
                .map(|output| parse_dump(&String::from_utf8_lossy(&output.stdout))),
        )
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.process.stop(Duration::from_secs(3));
        self.remove_stale_socket();
    }
}

/// Parses the peer lines of `wg show IFNAME dump` (the first line is the
/// interface's own).
fn parse_dump(text: &str) -> Vec<PeerStats> {
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split('\t').collect();
            if fields.len() < 7 {
                return None;
            }
            let public_key = fields[0].parse().ok()?;
            let endpoint = fields[2].parse().ok();
            let handshake_secs: u64 = fields[4].parse().ok()?;
            let latest_handshake = (handshake_secs != 0)
                .then(|| SystemTime::UNIX_EPOCH + Duration::from_secs(handshake_secs));
            Some(PeerStats {
                public_key,
                endpoint,
                latest_handshake,
                rx_bytes: fields[5].parse().ok()?,
                tx_bytes: fields[6].parse().ok()?,
            })
        })
        .collect()
}

/// Whether `ifname` exists in `namespace` with the UP flag set.
pub(crate) fn link_is_up(namespace: &Namespace, ifname: &str) -> bool {
    let Ok(out) = namespace.ip(&["-o", "link", "show", "dev", ifname]) else {
        return false;
    };
    out.split_once('<')
        .and_then(|(_, rest)| rest.split_once('>'))
        .is_some_and(|(flags, _)| flags.split(',').any(|flag| flag == "UP"))
}

/// Whether `ifname` exists in `namespace`.
pub fn link_exists(namespace: &Namespace, ifname: &str) -> bool {
    namespace.ip(&["-o", "link", "show", "dev", ifname]).is_ok()
}

/// Whether every overlay address of `side` is on its interface.
pub(crate) fn addresses_assigned(namespace: &Namespace, side: &WgSide) -> bool {
    let Ok(out) = namespace.ip(&["-o", "addr", "show", "dev", &side.ifname]) else {
        return false;
    };
    side.overlay
        .iter()
        .all(|cidr| out.contains(&format!(" {cidr} ")))
}

/// Configures a daemon that speaks WireGuard's control protocol, as
/// wg-quick would: `wg setconf`, addresses, MTU, link up, routes.
pub(crate) fn configure_with_wg(
    daemon: &Daemon,
    namespace: &Namespace,
    side: &WgSide,
    workdir: &Path,
) -> Result<(), PeerError> {
    let config_path = workdir.join(format!("{}.setconf", side.ifname));
    write_secret_file(&config_path, &side.setconf_text())?;
    let config = config_path.to_string_lossy();
    let step = |result: Result<String, NetnsError>| {
        result.map(drop).map_err(|e| daemon.configure_error(e))
    };
    step(namespace.exec("wg", &["setconf", &side.ifname, &config]))?;
    for address in &side.overlay {
        step(namespace.ip(&["addr", "add", &address.to_string(), "dev", &side.ifname]))?;
    }
    let mtu = side.mtu.to_string();
    step(namespace.ip(&["link", "set", "dev", &side.ifname, "mtu", &mtu, "up"]))?;
    for route in side.routes() {
        step(namespace.ip(&["route", "add", &route.to_string(), "dev", &side.ifname]))?;
    }
    Ok(())
}

/// `binary` when it is an executable file; otherwise one line saying it
/// is missing (`program`) and how to get it (`install`).
pub(super) fn require_binary(
    binary: &Option<PathBuf>,
    program: &str,
    install: &str,
) -> Result<PathBuf, String> {
    match binary {
        Some(path) if super::is_executable(path) => Ok(path.clone()),
        Some(path) => Err(format!("{program} not found at {}", path.display())),
        None => Err(format!("{program} not found; {install}")),
    }
}

/// Starts a userspace implementation that creates `side.ifname` and serves
/// the configuration protocol (wireguard-go's convention), waits for the
/// link and the socket, and configures it with `wg` and `ip`.
pub(super) fn start_configured_by_wg(
    name: &'static str,
    namespace: &Namespace,
    side: &WgSide,
    workdir: &Path,
    command: &mut std::process::Command,
) -> Result<Box<dyn RunningSide>, PeerError> {
    let mut daemon = Daemon::spawn(name, namespace, &side.ifname, workdir, command, true)?;
    let socket = daemon.uapi_socket();
    daemon.wait_until(&format!("{} and its control socket", side.ifname), || {
        socket.exists() && link_exists(namespace, &side.ifname)
    })?;
    configure_with_wg(&daemon, namespace, side, workdir)?;
    Ok(Box::new(daemon))
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn parses_wg_dump() {
        let key = "HIgo9xNzJMWLKASShiTqIybxZ0U3wGLiUeJ1PKf8ykw=";
        let text = format!(
            "priv\tpub\t51820\toff\n{key}\t(none)\t198.18.0.2:51820\t198.19.0.2/32\t1700000000\t440\t532\toff\n"
        );
        let stats = parse_dump(&text);
        assert_eq!(stats.len(), 1);
        assert_eq!(stats[0].endpoint, Some("198.18.0.2:51820".parse().unwrap()));
        assert!(stats[0].latest_handshake.is_some());
        assert_eq!((stats[0].rx_bytes, stats[0].tx_bytes), (440, 532));
    }
}
