//! Network namespaces, veth links and processes inside them, each removed
//! when its guard drops — also when a test fails or panics.
//!
//! Every namespace name carries the creating process's PID
//! (`fj<pid>-<role>`), so [`remove_stale`] can delete leftovers of crashed
//! runs without touching namespaces of runs still alive. All commands go
//! through `ip` (iproute2) so each step can be repeated by hand.

use std::io;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

const NAME_PREFIX: &str = "fj";

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("could not start `{command}`: {source}")]
    Spawn {
        command: String,
        #[source]
        source: io::Error,
    },
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
}

fn describe(command: &Command) -> String {
    let mut text = command.get_program().to_string_lossy().into_owned();
    for arg in command.get_args() {
        text.push(' ');
        text.push_str(&arg.to_string_lossy());
    }
    text
}

/// Runs `command` to completion; an error carries its stderr.
pub fn run(command: &mut Command) -> Result<Output, NetnsError> {
    let description = describe(command);
    tracing::debug!(command = %description, "run");
    let output = command
        .stdin(Stdio::null())
        .output()
        .map_err(|source| NetnsError::Spawn {
            command: description.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(NetnsError::Failed {
            command: description,
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
        });
    }
    Ok(output)
}

/// Runs `ip ARGS…` in the current namespace.
pub fn ip(args: &[&str]) -> Result<String, NetnsError> {
    let output = run(Command::new("ip").args(args))?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// A network namespace, deleted (with everything in it) on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

static NEXT_SUFFIX: AtomicU32 = AtomicU32::new(0);

/// The TCP congestion control every namespace the lab creates uses; unset,
/// namespaces keep the machine's default (which new ones inherit).
static CONGESTION_CONTROL: OnceLock<String> = OnceLock::new();

const AVAILABLE_CONGESTION_CONTROL: &str = "/proc/sys/net/ipv4/tcp_available_congestion_control";
/// What a namespace other than the first may pick (the kernel refuses the
/// rest with EPERM, whatever it offers).
const ALLOWED_CONGESTION_CONTROL: &str = "/proc/sys/net/ipv4/tcp_allowed_congestion_control";

/// Makes every namespace created from now on use the TCP congestion
/// control `name`, which the kernel must offer and allow namespaces to
/// pick. Set once per process.
pub fn use_congestion_control(name: &str) -> Result<(), String> {
    let read = |path: &str| {
        std::fs::read_to_string(path).map_err(|error| format!("reading {path}: {error}"))
    };
    check_congestion_control(
        name,
        &read(AVAILABLE_CONGESTION_CONTROL)?,
        &read(ALLOWED_CONGESTION_CONTROL)?,
    )?;
    let chosen = CONGESTION_CONTROL.get_or_init(|| name.to_string());
    if chosen != name {
        return Err(format!(
            "the lab already uses TCP congestion control {chosen}, not {name}"
        ));
    }
    Ok(())
}

/// Whether namespaces can use `name`, given the kernel's `available` and
/// `allowed` lists; the error says what to do.
fn check_congestion_control(name: &str, available: &str, allowed: &str) -> Result<(), String> {
    let listed = |list: &str| list.split_whitespace().any(|offered| offered == name);
    let comma_list = |list: &str| list.split_whitespace().collect::<Vec<_>>().join(", ");
    if !listed(available) {
        return Err(format!(
            "--congestion-control {name}: this kernel offers {} (load another with `modprobe tcp_<name>`)",
            comma_list(available)
        ));
    }
    if !listed(allowed) {
        return Err(format!(
            "--congestion-control {name}: the kernel offers it, but a network namespace may only \
             pick one of net.ipv4.tcp_allowed_congestion_control ({}); allow it first: \
             sysctl -w net.ipv4.tcp_allowed_congestion_control=\"{} {name}\"",
            comma_list(allowed),
            allowed.split_whitespace().collect::<Vec<_>>().join(" ")
        ));
    }
    Ok(())
}

impl Namespace {
    /// Creates `fj<pid>-<role><n>` with loopback up and no route out (and
    /// the congestion control of [`use_congestion_control`], if set).
    pub fn create(role: &str) -> Result<Self, NetnsError> {
        let suffix = NEXT_SUFFIX.fetch_add(1, Ordering::Relaxed);
        let name = format!("{NAME_PREFIX}{}-{role}{suffix}", std::process::id());
        ip(&["netns", "add", &name])?;
        let namespace = Self { name };
        namespace.ip(&["link", "set", "lo", "up"])?;
        if let Some(algorithm) = CONGESTION_CONTROL.get() {
            namespace.exec(
                "sysctl",
                &[
                    "-qw",
                    &format!("net.ipv4.tcp_congestion_control={algorithm}"),
                ],
            )?;
        }
        Ok(namespace)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// A command that runs `program` inside this namespace.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut command = Command::new("ip");
        command.args(["netns", "exec", &self.name]).arg(program);
        command
    }

    /// Runs `ip ARGS…` inside this namespace.
    pub fn ip(&self, args: &[&str]) -> Result<String, NetnsError> {
        let output = run(Command::new("ip").args(["-n", &self.name]).args(args))?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Runs many `ip` commands (one per line of `commands`, without the
    /// leading `ip`) inside this namespace in one process: thousands of
    /// neighbour entries take one spawn instead of thousands.
    pub fn ip_batch(&self, commands: &str) -> Result<(), NetnsError> {
        use std::io::Write as _;
        let mut command = Command::new("ip");
        command.args(["-n", &self.name, "-batch", "-"]);
        let description = describe(&command);
        let spawn_error = |source| NetnsError::Spawn {
            command: description.clone(),
            source,
        };
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(spawn_error)?;
        let written = child
            .stdin
            .take()
            .map_or(Ok(()), |mut stdin| stdin.write_all(commands.as_bytes()));
        let output = child.wait_with_output().map_err(spawn_error)?;
        written.map_err(spawn_error)?;
        if !output.status.success() {
            return Err(NetnsError::Failed {
                command: description,
                status: output.status.to_string(),
                stderr: String::from_utf8_lossy(&output.stderr).trim().to_string(),
            });
        }
        Ok(())
    }

    /// Runs `program ARGS…` inside this namespace and returns its stdout.
    pub fn exec(&self, program: &str, args: &[&str]) -> Result<String, NetnsError> {
        let output = run(self.command(program).args(args))?;
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Starts `command` (from [`Namespace::command`]); killed when the guard drops.
    pub fn spawn(&self, command: &mut Command) -> Result<Process, NetnsError> {
        Process::spawn(command)
    }

    /// Runs `work` on a new thread inside this namespace. Sockets created
    /// there stay in the namespace, so generators need no child process.
    pub fn spawn_thread<T, F>(&self, work: F) -> io::Result<std::thread::JoinHandle<io::Result<T>>>
    where
        T: Send + 'static,
        F: FnOnce() -> io::Result<T> + Send + 'static,
    {
        let path = Path::new("/run/netns").join(&self.name);
        std::thread::Builder::new()
            .name(format!("in-{}", self.name))
            .spawn(move || {
                fjord_sys::process::enter_network_namespace(&path)?;
                work()
            })
    }

    /// Names of links in this namespace.
    pub fn links(&self) -> Result<Vec<String>, NetnsError> {
        let out = self.ip(&["-o", "link", "show"])?;
        Ok(out
            .lines()
            .filter_map(|line| line.split(':').nth(1))
            .map(|name| name.trim().split('@').next().unwrap_or("").to_string())
            .collect())
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        // Processes still inside would keep interfaces alive; the guards of
        // processes are dropped first by their owners, and `ip netns del`
        // removes veth ends along with the namespace.
        if let Err(error) = ip(&["netns", "del", &self.name]) {
            tracing::warn!(namespace = %self.name, %error, "could not delete namespace");
        }
    }
}

/// Joins `a` and `b` by a veth pair named `a_if` (in `a`) and `b_if` (in `b`),
/// both up.
pub fn veth(a: &Namespace, a_if: &str, b: &Namespace, b_if: &str) -> Result<(), NetnsError> {
    // Create inside `a` so no interface ever appears in the caller's namespace.
    a.ip(&[
        "link",
        "add",
        a_if,
        "type",
        "veth",
        "peer",
        "name",
        b_if,
        "netns",
        b.name(),
    ])?;
    a.ip(&["link", "set", a_if, "up"])?;
    b.ip(&["link", "set", b_if, "up"])?;
    Ok(())
}

/// A child process, killed (SIGTERM, then SIGKILL) and reaped on drop.
#[derive(Debug)]
pub struct Process {
    child: Option<Child>,
    description: String,
}

impl Process {
    pub fn spawn(command: &mut Command) -> Result<Self, NetnsError> {
        let description = describe(command);
        tracing::debug!(command = %description, "spawn");
        let child = command.spawn().map_err(|source| NetnsError::Spawn {
            command: description.clone(),
            source,
        })?;
        Ok(Self {
            child: Some(child),
            description,
        })
    }

    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn child_mut(&mut self) -> Option<&mut Child> {
        self.child.as_mut()
    }

    /// Whether the process has exited (and its status if so).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|child| child.try_wait().ok().flatten())
    }

    /// Sends `signal` to the process (by its PID, which we own).
    pub fn signal(&self, signal: i32) {
        if let Some(pid) = self.id() {
            // The child is ours and not yet reaped, so its PID is still its own.
            let _ = fjord_sys::process::send_signal(pid, signal);
        }
    }

    /// SIGTERM, wait up to `grace`, then SIGKILL; returns the exit status.
    pub fn stop(&mut self, grace: Duration) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        if let Ok(Some(status)) = child.try_wait() {
            self.child = None;
            return Some(status);
        }
        self.signal(fjord_sys::process::SIGTERM);
        let deadline = Instant::now() + grace;
        let child = self.child.as_mut()?;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        tracing::warn!(process = %self.description, "did not stop on SIGTERM; killing");
        let _ = child.kill();
        let status = child.wait().ok();
        self.child = None;
        status
    }

    /// Waits for the process to exit by itself, up to `timeout`.
    pub fn wait_timeout(
        &mut self,
        timeout: Duration,
    ) -> Result<std::process::ExitStatus, NetnsError> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(child) = self.child.as_mut()
                && let Ok(Some(status)) = child.try_wait()
            {
                self.child = None;
                return Ok(status);
            }
            if self.child.is_none() || Instant::now() >= deadline {
                return Err(NetnsError::Timeout(
                    timeout,
                    format!("`{}` to exit", self.description),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes.
pub fn wait_until(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> bool,
) -> Result<(), NetnsError> {
    let deadline = Instant::now() + timeout;
    loop {
        if check() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(NetnsError::Timeout(timeout, what.to_string()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Deletes namespaces left by fjord runs whose process no longer exists.
/// Returns the names removed.
pub fn remove_stale() -> Vec<String> {
    let Ok(listing) = ip(&["netns", "list"]) else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for name in listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
    {
        let Some(pid) = name
            .strip_prefix(NAME_PREFIX)
            .and_then(|rest| rest.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
        else {
            continue;
        };
        if Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if ip(&["netns", "del", name]).is_ok() {
            removed.push(name.to_string());
        }
    }
    removed
}

pub use fjord_sys::process::is_root;

#[cfg(test)]
mod tests {
    use super::check_congestion_control;

    #[test]
    fn a_congestion_control_namespaces_may_not_pick_says_how_to_allow_it() {
        assert_eq!(
            check_congestion_control("bbr", "reno bbr cubic", "reno bbr\n"),
            Ok(())
        );
        let refused = check_congestion_control("cubic", "reno bbr cubic\n", "reno bbr\n");
        assert_eq!(
            refused,
            Err(
                "--congestion-control cubic: the kernel offers it, but a network namespace may \
                 only pick one of net.ipv4.tcp_allowed_congestion_control (reno, bbr); allow it \
                 first: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"reno bbr cubic\""
                    .to_string()
            )
        );
        let missing = check_congestion_control("vegas", "reno bbr", "reno bbr").unwrap_err();
        assert!(missing.contains("offers reno, bbr"), "{missing}");
    }
}
