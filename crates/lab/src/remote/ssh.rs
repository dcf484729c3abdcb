//! One multiplexed OpenSSH connection per host: the user's own `ssh`
//! (agent, keys, `~/.ssh/config` or the inventory's `ssh_config`), a
//! control master whose socket lives in the run's private directory, and
//! every later command a session over it — no new handshake, no listening
//! agent, no stored secret.
//!
//! Exit status 255 is ssh's own: the connection failed or was lost. Such
//! an error is [`RemoteError::Lost`], which ends the run; any other
//! failure is the remote command's and names it.

use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Status `ssh` exits with when it, not the remote command, failed.
const SSH_FAILED: i32 = 255;
/// How long the control master waits for a host to answer, and how many
/// unanswered keepalives two seconds apart declare it lost.
const CONNECT_TIMEOUT_SECS: u32 = 10;
const KEEPALIVE_SECS: u32 = 2;
const KEEPALIVE_MISSES: u32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// ssh could not reach the host, or the connection broke.
    #[error("host {host}: lost the connection during `{command}`: {detail}")]
    Lost {
        host: String,
        command: String,
        detail: String,
    },
    #[error("host {host}: `{command}` failed ({status}): {detail}")]
    Failed {
        host: String,
        command: String,
        status: String,
        detail: String,
    },
    /// What the lab found missing or wrong there, with what to do.
    #[error("host {host}: {detail}")]
    Refused { host: String, detail: String },
    #[error("host {host}: running ssh for `{command}`: {source}")]
    Spawn {
        host: String,
        command: String,
        #[source]
        source: io::Error,
    },
}

impl RemoteError {
    /// Whether the host is gone, so the run cannot go on.
    pub fn is_lost(&self) -> bool {
        matches!(self, RemoteError::Lost { .. })
    }
}

/// Quotes `word` for the remote POSIX shell.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./:=@,+".contains(&b));
    if plain {
        return word.to_string();
    }
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// `words`, quoted and joined into one remote command line.
pub fn command_line<S: AsRef<str>>(words: &[S]) -> String {
    words
        .iter()
        .map(|word| quote(word.as_ref()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// An open control connection to one host; closed on drop.
pub struct Connection {
    /// The inventory's name for the host, which every error starts with.
    host: String,
    destination: String,
    control_path: PathBuf,
    ssh_config: Option<PathBuf>,
    open: bool,
    /// Set by the first [`RemoteError::Lost`]: later commands fail at
    /// once instead of waiting for a host that is gone.
    lost: std::cell::Cell<bool>,
}

impl Connection {
    /// Connects to `destination` (named `host` in messages), its control
    /// socket at `control_path` (in a directory only this user reads).
    pub fn open(
        host: &str,
        destination: &str,
        control_path: &Path,
        ssh_config: Option<&Path>,
    ) -> Result<Self, RemoteError> {
        let mut connection = Self {
            host: host.to_string(),
            destination: destination.to_string(),
            control_path: control_path.to_path_buf(),
            ssh_config: ssh_config.map(Path::to_path_buf),
            open: false,
            lost: std::cell::Cell::new(false),
        };
        let log_path = control_path.with_extension("log");
        let spawn_error = |source| RemoteError::Spawn {
            host: host.to_string(),
            command: "ssh -M".into(),
            source,
        };
        let log = std::fs::File::create(&log_path).map_err(spawn_error)?;
        // `-f` puts the master in the background once it is logged in;
        // its stderr goes to a file, as a pipe would stay open with it.
        let mut command = connection.ssh();
        command
            .args(["-o", "ControlMaster=yes", "-o", "ControlPersist=yes"])
            .args(["-o", &format!("ServerAliveInterval={KEEPALIVE_SECS}")])
            .args(["-o", &format!("ServerAliveCountMax={KEEPALIVE_MISSES}")])
            .args(["-f", "-N", "--", destination])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        let status = command.status().map_err(spawn_error)?;
        if !status.success() {
            let detail = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(RemoteError::Lost {
                host: host.to_string(),
                command: format!("ssh {destination}"),
                detail: last_lines(&detail),
            });
        }
        connection.open = true;
        Ok(connection)
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    /// `ssh` with the run's options and control socket, no destination yet.
    fn ssh(&self) -> Command {
        let mut command = Command::new("ssh");
        if let Some(config) = &self.ssh_config {
            command.arg("-F").arg(config);
        }
        command
            .args(["-o", "BatchMode=yes", "-o", "LogLevel=ERROR"])
            .args(["-o", &format!("ConnectTimeout={CONNECT_TIMEOUT_SECS}")])
            .arg("-o")
            .arg(format!("ControlPath={}", self.control_path.display()));
        command
    }

    /// `ssh` running the remote shell command `script` over the master.
    pub fn command(&self, script: &str) -> Command {
        let mut command = self.ssh();
        command
            .args(["-o", "ControlMaster=no", "--", &self.destination])
            .arg(script);
        command
    }

    /// Runs `script` there and returns its stdout; `what` names it in errors.
    pub fn run(&self, what: &str, script: &str) -> Result<String, RemoteError> {
        self.check_not_lost(what)?;
        self.finish(what, self.command(script).stdin(Stdio::null()).output())
    }

    fn check_not_lost(&self, what: &str) -> Result<(), RemoteError> {
        if self.lost.get() {
            return Err(RemoteError::Lost {
                host: self.host.clone(),
                command: what.to_string(),
                detail: "the connection was lost earlier in the run".into(),
            });
        }
        Ok(())
    }

    /// Runs `script` there with `input` as its stdin (a file to copy).
    pub fn run_with_input(
        &self,
        what: &str,
        script: &str,
        input: &mut dyn Read,
    ) -> Result<String, RemoteError> {
        self.check_not_lost(what)?;
        let spawned = self
            .command(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = spawned.map_err(|source| self.spawn_error(what, source))?;
        let copied = match child.stdin.take() {
            Some(mut stdin) => io::copy(input, &mut stdin).and_then(|_| stdin.flush()),
            None => Ok(()),
        };
        let output = self.finish(what, child.wait_with_output())?;
        copied.map_err(|source| self.spawn_error(what, source))?;
        Ok(output)
    }

    /// Starts `script` there with its stdin and stdout piped, for a
    /// worker whose lines the caller reads as they come (and that may read
    /// the caller's); dropping the stdin ends its input.
    pub fn spawn(&self, what: &str, script: &str) -> Result<Child, RemoteError> {
        self.check_not_lost(what)?;
        self.command(script)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| self.spawn_error(what, source))
    }

    fn spawn_error(&self, what: &str, source: io::Error) -> RemoteError {
        RemoteError::Spawn {
            host: self.host.clone(),
            command: what.to_string(),
            source,
        }
    }

    /// Turns a finished ssh into its stdout or the error naming `what`.
    pub fn finish(&self, what: &str, output: io::Result<Output>) -> Result<String, RemoteError> {
        let output = output.map_err(|source| self.spawn_error(what, source))?;
        let stderr = last_lines(&String::from_utf8_lossy(&output.stderr));
        match output.status.code() {
            Some(0) => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
            Some(SSH_FAILED) | None => Err(self.lost(
                what,
                if stderr.is_empty() {
                    output.status.to_string()
                } else {
                    stderr
                },
            )),
            Some(_) => Err(RemoteError::Failed {
                host: self.host.clone(),
                command: what.to_string(),
                status: output.status.to_string(),
                detail: stderr,
            }),
        }
    }

    /// Marks the connection lost and says so.
    fn lost(&self, what: &str, detail: String) -> RemoteError {
        self.lost.set(true);
        RemoteError::Lost {
            host: self.host.clone(),
            command: what.to_string(),
            detail,
        }
    }

    /// Whether the connection was lost earlier in the run.
    pub fn is_lost(&self) -> bool {
        self.lost.get()
    }

    /// Whether ssh's exit `status` means the connection failed (the
    /// remote command's own statuses are 0 to 254; a signal has none).
    pub fn is_ssh_failure(status: std::process::ExitStatus) -> bool {
        matches!(status.code(), Some(SSH_FAILED) | None)
    }

    /// Asks the master to exit (its sessions end with it).
    pub fn close(&mut self) {
        if !std::mem::take(&mut self.open) || self.lost.get() {
            return;
        }
        let _ = self
            .ssh()
            .args(["-O", "exit", "--", &self.destination])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}

/// The last few lines of `text`, for an error message.
pub fn last_lines(text: &str) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(5)..].join(" / ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_only_what_the_shell_would_split() {
        assert_eq!(quote("/tmp/fjord-lab.x1/fjord"), "/tmp/fjord-lab.x1/fjord");
        assert_eq!(quote("198.19.0.2:5201"), "198.19.0.2:5201");
        assert_eq!(quote("a b"), "'a b'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(
            command_line(&["ip", "link", "del", "$x"]),
            "ip link del '$x'"
        );
    }
}
