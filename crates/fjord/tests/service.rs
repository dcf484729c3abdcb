//! packaging/fjord@.service's `ExecStart=` line as written, with the
//! instance name substituted and /etc/fjord and /usr/bin pointed at a
//! temporary directory and the built binary, run in a namespace as systemd
//! would run it: with `$NOTIFY_SOCKET` and `$WATCHDOG_USEC` set, and only
//! the unit's capability bounding set (CAP_NET_ADMIN CAP_NET_RAW) and
//! no_new_privs (through setpriv). The interface comes up with its
//! address, `READY=1` arrives only after the first handshake initiation
//! left, `WATCHDOG=1` follows every half period, SIGTERM gives
//! `STOPPING=1` and a clean exit. The logs on a pipe carry no ANSI colour,
//! and with `FJORD_LOG_FORMAT=json` every line is a JSON object. A third
//! run adds the README's drop-in for `--user`: `FJORD_USER=nobody` and
//! its capabilities.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fjord_lab::netns::Namespace;
use fjord_lab::systems;

const FJORD: &str = env!("CARGO_BIN_EXE_fjord");
const PRIVATE_KEY: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
const PEER_KEY: &str = "kKWYjFK2POdaKVzFSddI7jbaHt+K7IbMs57OkVKayRQ=";
/// Where the peer's "endpoint" listens, inside the namespace.
const PEER_PORT: u16 = 51_820;
/// A handshake initiation's type byte and length (WireGuard's wire format).
const INITIATION_TYPE: u8 = 1;
const INITIATION_LEN: usize = 148;

/// The README's drop-in for `FJORD_USER`, in setpriv's spelling.
const USER_DROP_IN_CAPABILITIES: &str = "+setuid,+setgid,+setpcap,+chown";

/// The unit file, as shipped.
fn unit() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/fjord@.service");
    std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()))
}

/// The value of the unit's one `KEY=` line.
fn unit_value(unit: &str, key: &str) -> String {
    let values: Vec<&str> = unit
        .lines()
        .filter_map(|line| line.strip_prefix(key)?.strip_prefix('='))
        .collect();
    assert_eq!(values.len(), 1, "one {key}= line expected");
    values[0].trim().to_string()
}

/// `ExecStart=`'s words with `%i` = `name`, /usr/bin/fjord = the built
/// binary and /etc/fjord = `config_dir`.
fn exec_start(name: &str, config_dir: &Path) -> Vec<String> {
    let line = unit_value(&unit(), "ExecStart");
    assert!(
        !line.contains(['"', '\'', '$']),
        "quoting not handled: {line}"
    );
    line.split_whitespace()
        .map(|word| {
            word.replace("%i", name)
                .replace("/usr/bin/fjord", FJORD)
                .replace("/etc/fjord", &config_dir.display().to_string())
        })
        .collect()
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Receives notifications until one contains `wanted`; returns them all.
fn wait_for(socket: &UnixDatagram, wanted: &str, timeout: Duration) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    let mut seen = Vec::new();
    let mut buffer = [0u8; 4096];
    while Instant::now() < deadline {
        socket
            .set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))
            .unwrap();
        let Ok(len) = socket.recv(&mut buffer) else {
            break;
        };
        let message = String::from_utf8_lossy(&buffer[..len]).into_owned();
        let done = message.lines().any(|line| line == wanted);
        seen.push(message);
        if done {
            return seen;
        }
    }
    panic!("no {wanted} within {timeout:?}; got {seen:?}");
}

#[test]
fn exec_start_comes_up_notifies_and_answers_the_watchdog() {
    if !systems::running_as_root("the service test builds a namespace and a TUN device") {
        return;
    }
    let unit = unit();
    assert_eq!(unit_value(&unit, "Type"), "notify");
    // In setpriv's spelling: +net_admin,+net_raw.
    let bounding = unit_value(&unit, "CapabilityBoundingSet")
        .split_whitespace()
        .map(|cap| format!("+{}", cap.trim_start_matches("CAP_").to_lowercase()))
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(bounding, "+net_admin,+net_raw");
    let with_user = format!("{bounding},{USER_DROP_IN_CAPABILITIES}");
    for (format, name, bounding, user) in [
        ("text", "fjst", &bounding, None),
        ("json", "fjsj", &bounding, None),
        ("text", "fjsu", &with_user, Some("nobody")),
    ] {
        let name = format!("{name}{}", std::process::id() % 10_000);
        run_once(&name, format, bounding, user);
    }
}

fn run_once(name: &str, log_format: &str, bounding: &str, user: Option<&str>) {
    let host = Namespace::create("svc").unwrap();
    let dir = TempDir(std::env::temp_dir().join(format!("fjord-service-{name}")));
    std::fs::create_dir_all(&dir.0).unwrap();
    // nobody reaches the notify socket inside (the config is read as root).
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let config = dir.0.join(format!("{name}.conf"));
    std::fs::write(
        &config,
        format!(
            "[Interface]\nPrivateKey = {PRIVATE_KEY}\nAddress = 198.18.0.1/24\n\n\
             [Peer]\nPublicKey = {PEER_KEY}\nAllowedIPs = 198.18.0.2/32\nEndpoint = 127.0.0.1:{PEER_PORT}\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&config, std::fs::Permissions::from_mode(0o600)).unwrap();
    let notify_path = dir.0.join("notify");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    // As systemd's own: anyone may send, so also fjord once it runs as nobody.
    std::fs::set_permissions(&notify_path, std::fs::Permissions::from_mode(0o777)).unwrap();
    // The peer's endpoint: the initiation must be here before READY=1.
    let peer = host
        .spawn_thread(|| UdpSocket::bind(("127.0.0.1", PEER_PORT)))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    peer.set_nonblocking(true).unwrap();

    let words = exec_start(name, &dir.0);
    let log_path = dir.0.join("stderr.log");
    let mut command = host.command("setpriv");
    command
        .arg(format!("--bounding-set=-all,{bounding}"))
        .args(["--no-new-privs", "--"])
        .args(&words)
        .env("NOTIFY_SOCKET", &notify_path)
        .env("WATCHDOG_USEC", "400000")
        .env("FJORD_LOG_FORMAT", log_format)
        .env_remove("FJORD_LOG")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log_path).unwrap());
    match user {
        Some(user) => command.env("FJORD_USER", user),
        None => command.env_remove("FJORD_USER"),
    };
    let mut process = host.spawn(&mut command).unwrap();

    let messages = wait_for(&notify, "READY=1", Duration::from_secs(10));
    let mut datagram = [0u8; 256];
    let (len, _) = peer
        .recv_from(&mut datagram)
        .expect("the first handshake initiation was sent before READY=1");
    assert_eq!((datagram[0], len), (INITIATION_TYPE, INITIATION_LEN));
    assert!(
        messages.iter().any(|m| m.contains("STATUS=")),
        "{messages:?}"
    );
    let links = host.links().unwrap();
    assert!(links.iter().any(|link| link == name), "{links:?}");
    let addresses = host.ip(&["-o", "addr", "show", "dev", name]).unwrap();
    assert!(addresses.contains("198.18.0.1/24"), "{addresses}");
    // Two pings a period of 0.4 s: two within a second, from a live worker.
    for _ in 0..2 {
        wait_for(&notify, "WATCHDOG=1", Duration::from_secs(1));
    }

    process.signal(libc::SIGTERM);
    wait_for(&notify, "STOPPING=1", Duration::from_secs(5));
    let status = process.wait_timeout(Duration::from_secs(5)).unwrap();
    assert!(status.success(), "{status}");
    assert!(!host.links().unwrap().iter().any(|link| link == name));

    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("up"), "{log}");
    if user.is_some() {
        assert!(log.contains("dropped root"), "{log}");
    }
    assert!(!log.contains('\x1b'), "ANSI colour on a pipe: {log:?}");
    if log_format == "json" {
        for line in log.lines() {
            let object: serde_json::Value = serde_json::from_str(line)
                .unwrap_or_else(|error| panic!("not JSON ({error}): {line}"));
            assert!(object.get("level").is_some(), "{line}");
        }
    }
}
