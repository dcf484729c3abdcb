//! The server side: one thread per interface accepts `wg`-protocol
//! connections and answers them from snapshots taken on the worker.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::time::Duration;

use fjord_mesh::names::Domain;
use fjord_net::ControlHandle;
use zeroize::Zeroizing;

use super::lines::SecretLines;
use super::{NAMES_DOMAIN_PREFIX, SOCKET_DIRECTORY, socket_path, write_fjord_counters, write_get};
use crate::reload::SharedReloader;
use crate::status::InterfaceStatus;

/// How long a live configuration socket may take to go away before
/// another process claims the interface name.
const IN_USE_GRACE: Duration = Duration::from_secs(2);

/// Requests longer than this are refused (a `set` of 1,000 peers with
/// 100,000 allowed IPs stays well below it).
const MAX_REQUEST_BYTES: usize = 64 << 20;

#[derive(Debug, thiserror::Error)]
pub enum UapiServerError {
    #[error("interface {0} is already served by another process ({1} answers)")]
    InUse(String, PathBuf),
    #[error("could not create the configuration socket {path}: {source}")]
    Bind {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Removes the socket file when dropped.
pub struct SocketGuard {
    path: PathBuf,
}

impl Drop for SocketGuard {
    fn drop(&mut self) {
        // After `--user`, the directory is no longer ours to change: the
        // file stays, stale, until the next bind or `fjord show` removes it.
        if let Err(error) = std::fs::remove_file(&self.path) {
            tracing::debug!(%error, path = %self.path.display(), "configuration socket left behind");
        }
    }
}

/// Binds `/var/run/wireguard/IFACE.sock`, readable by root only. A stale
/// socket (nobody answers) is replaced; a live one is an error.
pub fn bind(interface: &str) -> Result<(UnixListener, SocketGuard), UapiServerError> {
    let path = socket_path(interface);
    let bind_error = |source| UapiServerError::Bind {
        path: path.clone(),
        source,
    };
    std::fs::create_dir_all(SOCKET_DIRECTORY).map_err(bind_error)?;
    if path.exists() {
        // A process whose interface was just deleted (`wg-quick down`,
        // `ip link del`) answers for a few hundred milliseconds more while
        // it shuts down; `down` then `up` at once must not fail on it.
        let deadline = std::time::Instant::now() + IN_USE_GRACE;
        while UnixStream::connect(&path).is_ok() {
            if std::time::Instant::now() >= deadline {
                return Err(UapiServerError::InUse(interface.to_string(), path));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if path.exists() {
            std::fs::remove_file(&path).map_err(bind_error)?;
        }
    }
    let listener = UnixListener::bind(&path).map_err(bind_error)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok((listener, SocketGuard { path }))
}

/// Serves connections until the worker stops. `reloader` answers
/// `reload=fjord` (`fjord reload IFACE`); without one (an interface that
/// `wg` configures) the request is refused.
pub fn serve(listener: UnixListener, control: ControlHandle, reloader: Option<SharedReloader>) {
    // A reload cannot change it.
    let domain = reloader
        .as_ref()
        .and_then(|reloader| match reloader.lock() {
            Ok(guard) => guard.domain(),
            Err(poisoned) => poisoned.into_inner().domain(),
        });
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        if serve_connection(stream, &control, reloader.as_ref(), domain.as_ref()).is_err() {
            tracing::debug!("configuration client went away");
        }
        if control.call(|_| ()).is_err() {
            return;
        }
    }
}

fn serve_connection(
    stream: UnixStream,
    control: &ControlHandle,
    reloader: Option<&SharedReloader>,
    domain: Option<&Domain>,
) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    let mut writer = &stream;
    let mut reader = SecretLines::new(&stream);
    loop {
        let Some(operation) = reader.next_line()? else {
            return Ok(());
        };
        if operation.is_empty() {
            continue;
        }
        let body = read_body(&mut reader)?;
        let reply = match (operation.as_str(), body) {
            ("get=1", Some(body)) if body.is_empty() => reply_get(control, false, None),
            ("get=fjord", Some(body)) if body.is_empty() => reply_get(control, true, domain),
            ("set=1", Some(body)) => reply_set(control, &body),
            ("reload=fjord", Some(body)) if body.is_empty() => reply_reload(reloader),
            _ => errno_reply(libc::EINVAL),
        };
        writer.write_all(reply.as_bytes())?;
    }
}

/// Lines up to the empty line (wiped when dropped: they may hold keys);
/// `None` if the request is too long.
fn read_body(
    reader: &mut SecretLines<&UnixStream>,
) -> std::io::Result<Option<Zeroizing<Vec<String>>>> {
    let mut lines = Zeroizing::new(Vec::new());
    let mut total = 0;
    loop {
        let Some(mut line) = reader.next_line()? else {
            return Ok((total <= MAX_REQUEST_BYTES).then_some(lines));
        };
        total += line.len() + 1;
        if line.is_empty() {
            return Ok((total <= MAX_REQUEST_BYTES).then_some(lines));
        }
        if total > MAX_REQUEST_BYTES {
            continue;
        }
        // Moved, not copied: the line's bytes stay in one zeroizing place.
        lines.push(std::mem::take(&mut *line));
    }
}

/// `get=1`, or `get=fjord` with fjord's counters and the domain of
/// members' names, if any.
fn reply_get(
    control: &ControlHandle,
    fjord_counters: bool,
    domain: Option<&Domain>,
) -> Zeroizing<String> {
    let Ok(status) = control.call(|context| InterfaceStatus::capture(context)) else {
        return errno_reply(libc::ESHUTDOWN);
    };
    let mut reply = Zeroizing::new(String::new());
    if fjord_counters {
        write_fjord_counters(&status, &mut reply);
        if let Some(domain) = domain {
            reply.push_str(&format!("{NAMES_DOMAIN_PREFIX}{domain}\n"));
        }
    } else {
        write_get(&status, &mut reply);
    }
    reply.push_str("errno=0\n\n");
    reply
}

fn reply_set(control: &ControlHandle, body: &[String]) -> Zeroizing<String> {
    let request = match super::parse_set(body) {
        Ok(request) => request,
        Err(error) => {
            tracing::info!(%error, "refused a configuration change");
            return errno_reply(error.errno);
        }
    };
    match control.call(move |context| super::apply::apply(context, request)) {
        Ok(Ok(())) => errno_reply(0),
        Ok(Err(error)) => {
            tracing::info!(%error, "configuration change failed");
            errno_reply(error.errno)
        }
        Err(_) => errno_reply(libc::ESHUTDOWN),
    }
}

fn reply_reload(reloader: Option<&SharedReloader>) -> Zeroizing<String> {
    let Some(reloader) = reloader else {
        return errno_reply(libc::EOPNOTSUPP);
    };
    // One line each: a reason never holds a newline of its own.
    let one_line = |text: String| text.replace('\n', " ");
    match crate::reload::reload_and_log(reloader) {
        Ok(summary) => Zeroizing::new(format!(
            "reloaded={}\nerrno=0\n\n",
            one_line(summary.to_string())
        )),
        Err(error) => Zeroizing::new(format!(
            "reload_error={}\nerrno={}\n\n",
            one_line(error.to_string()),
            libc::EINVAL
        )),
    }
}

fn errno_reply(errno: i32) -> Zeroizing<String> {
    Zeroizing::new(format!("errno={errno}\n\n"))
}
