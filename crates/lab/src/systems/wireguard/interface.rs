//! A running side of a WireGuard tunnel ([`Interface`]): the daemon
//! serving one interface, its log, and how to reach it; configured with
//! `wg` and `ip` where it speaks WireGuard's control protocol.

use std::fs;
use std::io::{self, BufRead, BufReader, Write as _};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{Duration, SystemTime};

use fjord_proto::PublicKey;

use super::{SideResult, WgSide};
use crate::netns::{self, Namespace, NetnsError};
use crate::systems::SystemError;
use crate::systems::support::{self, LoggedProcess, START_TIMEOUT, start_failed};

/// One side of a tunnel, up; dropping it stops the daemon (SIGTERM, then
/// SIGKILL).
#[derive(Debug)]
pub struct Interface {
    implementation: &'static str,
    ifname: String,
    /// The namespace's name, for `wg show` inside it.
    namespace: String,
    daemon: LoggedProcess,
    /// Whether `wg` can surely talk to it (wireguard-go, boringtun).
    uapi: bool,
    /// Scrapes the daemon's metrics while it runs (`fjord-metrics`).
    scraper: Option<super::scraper::Scraper>,
}

/// One peer's line of `wg show IFNAME dump`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerStats {
    pub public_key: PublicKey,
    pub endpoint: Option<SocketAddr>,
    pub latest_handshake: Option<SystemTime>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

impl Interface {
    /// Spawns `command` (from [`Namespace::command`]) serving `side`, stdout
    /// and stderr into `workdir/IFNAME.log`.
    pub(super) fn spawn(
        implementation: &'static str,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
        command: &mut Command,
        uapi: bool,
    ) -> Result<Self, SystemError> {
        let log_path = workdir.join(format!("{}.log", side.ifname));
        let label = format!("{implementation} ({})", side.ifname);
        let daemon = LoggedProcess::spawn(label, command, log_path)
            .map_err(|detail| start_failed(implementation, detail))?;
        Ok(Self {
            implementation,
            ifname: side.ifname.clone(),
            namespace: namespace.name().to_string(),
            daemon,
            uapi,
            scraper: None,
        })
    }

    /// Keeps `scraper` running until the daemon stops.
    pub(super) fn keep_scraper(&mut self, scraper: super::scraper::Scraper) {
        self.scraper = Some(scraper);
    }

    /// Polls `ready` until it holds, failing early if the daemon exits.
    pub(super) fn wait_until(
        &mut self,
        what: &str,
        mut ready: impl FnMut() -> bool,
    ) -> Result<(), SystemError> {
        self.daemon
            .wait_until(START_TIMEOUT, what, |_| ready())
            .map_err(|detail| start_failed(self.implementation, detail))
    }

    /// Configures a daemon that speaks WireGuard's control protocol, as
    /// wg-quick would: `wg setconf`, addresses, MTU, link up, routes.
    pub(super) fn configure_with_wg(
        &self,
        namespace: &Namespace,
        side: &WgSide,
        workdir: &Path,
    ) -> Result<(), SystemError> {
        let config_path = workdir.join(format!("{}.setconf", side.ifname));
        support::write_secret_file(&config_path, &side.setconf_text())?;
        let config = config_path.to_string_lossy();
        let step = |result: Result<String, NetnsError>| {
            result.map(drop).map_err(|error| {
                start_failed(
                    self.implementation,
                    format!("{error}; {}", self.daemon.tail()),
                )
            })
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

    /// The implementation's name (`fjord`, `wireguard-go`, …).
    pub fn implementation(&self) -> &str {
        self.implementation
    }

    pub fn ifname(&self) -> &str {
        &self.ifname
    }

    /// PIDs of the processes serving this side.
    pub fn pids(&self) -> Vec<u32> {
        self.daemon.pid().into_iter().collect()
    }

    /// The file holding the daemon's stdout and stderr.
    pub fn log_path(&self) -> &Path {
        self.daemon.log_path()
    }

    /// SIGTERM, a grace period, then SIGKILL; the exit status, or `None`
    /// if it was already stopped.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.daemon.stop()
    }

    /// SIGKILL without warning (a crash), then reap; `None` if it was
    /// already stopped.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let status = self.daemon.kill();
        self.remove_stale_socket();
        status
    }

    /// The exit status if the daemon has exited by itself.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.daemon.try_wait()
    }

    /// Per-peer state from `wg show IFNAME dump`, where the implementation
    /// answers WireGuard's control protocol; `None` where it does not.
    pub fn peer_stats(&self) -> Option<Result<Vec<PeerStats>, NetnsError>> {
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
        Some(dump.map(|output| parse_dump(&String::from_utf8_lossy(&output.stdout))))
    }

    /// Where wireguard-go's convention puts the control socket.
    fn uapi_socket(&self) -> PathBuf {
        uapi_socket(&self.ifname)
    }

    /// The reply to `request` (`get=1`, `get=fjord`) on this side's
    /// control socket; see [`query`].
    pub fn query(&self, request: &str) -> Result<String, String> {
        query(&self.ifname, request)
    }

    /// A killed daemon leaves its control socket behind. The name is ours
    /// (see [`super::unique_ifname`]), but a restarted daemon may serve it
    /// again, so only a socket nobody answers on is removed.
    fn remove_stale_socket(&self) {
        let socket = self.uapi_socket();
        if let Err(error) = std::os::unix::net::UnixStream::connect(&socket)
            && error.kind() == io::ErrorKind::ConnectionRefused
        {
            let _ = fs::remove_file(socket);
        }
    }
}

/// Where fjord, wireguard-go and boringtun put their control sockets
/// (every namespace shares the directory).
fn uapi_socket(ifname: &str) -> PathBuf {
    Path::new("/var/run/wireguard").join(format!("{ifname}.sock"))
}

/// A busy daemon (converging, flooded, under full load) may answer
/// slowly, but never this slowly.
const QUERY_TIMEOUT: Duration = Duration::from_secs(5);

/// The reply to `request` (`get=1`, or fjord's `get=fjord`) on `ifname`'s
/// control socket, asked in-process (cheaper than starting `wg show` or
/// `fjord show` when daemons are polled often), up to and including its
/// `errno=` line.
pub(crate) fn query(ifname: &str, request: &str) -> Result<String, String> {
    let path = uapi_socket(ifname);
    let mut stream = std::os::unix::net::UnixStream::connect(&path)
        .map_err(|e| format!("connecting to {}: {e}", path.display()))?;
    let exchange = |stream: &mut std::os::unix::net::UnixStream| -> io::Result<String> {
        stream.set_read_timeout(Some(QUERY_TIMEOUT))?;
        stream.write_all(format!("{request}\n\n").as_bytes())?;
        let mut reply = String::new();
        for line in BufReader::new(stream).lines() {
            let line = line?;
            let done = line.starts_with("errno=");
            reply.push_str(&line);
            reply.push('\n');
            if done {
                break;
            }
        }
        Ok(reply)
    };
    exchange(&mut stream).map_err(|e| format!("{request}: {e}"))
}

impl Drop for Interface {
    fn drop(&mut self) {
        // Before the daemon, so no scrape meets a closed port.
        drop(self.scraper.take());
        self.daemon.stop();
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

/// Whether every overlay address of `side` is on its interface.
pub(super) fn addresses_assigned(namespace: &Namespace, side: &WgSide) -> bool {
    let Ok(out) = namespace.ip(&["-o", "addr", "show", "dev", &side.ifname]) else {
        return false;
    };
    side.overlay
        .iter()
        .all(|cidr| out.contains(&format!(" {cidr} ")))
}

/// Starts a userspace implementation that creates `side.ifname` and serves
/// the configuration protocol (wireguard-go's convention), waits for the
/// link and the socket, and configures it with `wg` and `ip`.
pub(super) fn start_configured_by_wg(
    implementation: &'static str,
    namespace: &Namespace,
    side: &WgSide,
    workdir: &Path,
    command: &mut Command,
) -> SideResult {
    let mut interface = Interface::spawn(implementation, namespace, side, workdir, command, true)?;
    let socket = interface.uapi_socket();
    interface.wait_until(&format!("{} and its control socket", side.ifname), || {
        socket.exists() && support::link_exists(namespace, &side.ifname)
    })?;
    interface.configure_with_wg(namespace, side, workdir)?;
    Ok(interface)
}

/// `wg` from wireguard-tools, needed to configure wireguard-go and boringtun.
pub(super) fn wg_tool() -> Result<PathBuf, String> {
    support::find_program("wg", &[])
        .ok_or_else(|| "wg not found; install with `apt-get install wireguard-tools`".to_string())
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
