//! One inventory host while a run uses it: its control connection, a
//! private work directory there (`mktemp -d`), the lab's binary, and a
//! record of what the run started, so that [`RemoteHost::clean_up`] —
//! also on drop, also when another host was lost — leaves it as found.
//!
//! Every process the lab starts there writes its PID to `<name>.pid` in
//! the work directory; every interface it creates is listed locally and
//! in the directory's `links`. Clean-up stops those PIDs (TERM, then
//! KILL), deletes those interfaces and removes the directory: nothing
//! else on the host is touched. Before making its directory, a run
//! sweeps what earlier runs that lost this host left ([`super::stale`]);
//! while it lives it holds its directory's lock, so no other run's sweep
//! takes it for stale.

use std::path::Path;
use std::time::{Duration, Instant};

use super::inventory::Host;
use super::ssh::{Connection, RemoteError, command_line, quote};
use super::stale;
use crate::measure::CpuCharge;

/// What the lab runs on every host besides its own binary.
const REQUIRED_TOOLS: [&str; 6] = ["ip", "ping", "mktemp", "tail", "ethtool", "flock"];
/// How long a stopped process may take to exit before it is killed.
const STOP_GRACE_TENTHS: u32 = 30;

pub struct RemoteHost {
    pub host: Host,
    connection: Connection,
    /// The run's private directory on the host.
    workdir: String,
    /// The lab's binary there: the installed one or a copy in `workdir`.
    binary: String,
    /// Interfaces the run created there, deleted at clean-up.
    links: Vec<String>,
    /// How long connecting, checking and copying took.
    pub setup_time: Duration,
    /// What the sweep of earlier runs' leftovers did there, line by line.
    pub swept: Vec<String>,
    /// The session holding the directory's lock; its input's end ends it.
    lock: Option<std::process::Child>,
    cleaned: bool,
}

impl RemoteHost {
    /// Connects, checks that the lab may work there (root, and unless
    /// `install_hint` is `None`, the tools it runs, which the hint says
    /// how to install), makes the work
    /// directory and brings the lab's binary (`local_binary`).
    pub fn set_up(
        host: &Host,
        control_path: &Path,
        ssh_config: Option<&Path>,
        local_binary: &Path,
        install_hint: Option<&str>,
    ) -> Result<Self, RemoteError> {
        let started = Instant::now();
        let connection = Connection::open(&host.name, &host.destination, control_path, ssh_config)?;
        // Only root may stop what an earlier run left.
        let answer = connection.run(
            "id -u; sweep; mktemp -d",
            &format!(
                "id -u && if [ \"$(id -u)\" = 0 ]; then {}; fi; {}",
                stale::sweep_script(),
                stale::make_run_dir_script()
            ),
        )?;
        let (swept, answer) = stale::read_sweep(&answer);
        let mut lines = answer.lines();
        let uid = lines.next().unwrap_or_default().trim().to_string();
        let workdir = lines.next().unwrap_or_default().trim().to_string();
        let mut remote = Self {
            host: host.clone(),
            connection,
            workdir,
            binary: String::new(),
            links: Vec::new(),
            setup_time: Duration::ZERO,
            swept,
            lock: None,
            cleaned: false,
        };
        if remote.workdir.is_empty() {
            return Err(remote.refused("mktemp -d gave no directory".into()));
        }
        if uid != "0" {
            return Err(remote.refused(format!(
                "the lab needs root there (tunnels, interfaces) but logged in as uid {uid}; \
                 give a root destination such as root@{}",
                host.destination
            )));
        }
        if let Some(install_hint) = install_hint {
            remote.require_tools(install_hint)?;
        }
        remote.lock = Some(remote.connection.spawn(
            "hold the run's lock",
            &stale::lock_holder_script(&remote.workdir),
        )?);
        remote.binary = remote.bring_binary(local_binary)?;
        remote.setup_time = started.elapsed();
        Ok(remote)
    }

    /// Refuses a host without the tools the lab runs there.
    fn require_tools(&self, install_hint: &str) -> Result<(), RemoteError> {
        let missing = self.connection.run(
            "command -v",
            &format!(
                "for tool in {}; do command -v \"$tool\" > /dev/null || echo \"$tool\"; done",
                REQUIRED_TOOLS.join(" ")
            ),
        )?;
        match missing.split_whitespace().next() {
            Some(tool) => Err(self.refused(format!("{tool}: not installed ({install_hint})"))),
            None => Ok(()),
        }
    }

    fn refused(&self, detail: String) -> RemoteError {
        RemoteError::Refused {
            host: self.host.name.clone(),
            detail,
        }
    }

    /// The installed `fjord` if it is this very version, else a copy of
    /// `local_binary` in the work directory.
    fn bring_binary(&self, local_binary: &Path) -> Result<String, RemoteError> {
        let ours = format!("fjord {}", env!("CARGO_PKG_VERSION"));
        let installed = self.connection.run(
            "fjord --version",
            "p=$(command -v fjord) && v=$(\"$p\" --version) && echo \"$p\" && echo \"$v\" || true",
        )?;
        let mut lines = installed.lines();
        if let (Some(path), Some(version)) = (lines.next(), lines.next())
            && version.trim() == ours
            && !cfg!(debug_assertions)
        {
            return Ok(path.trim().to_string());
        }
        // A debug build's version says nothing about its code: always copy.
        let target = format!("{}/fjord", self.workdir);
        let mut file = std::fs::File::open(local_binary).map_err(|error| {
            self.refused(format!(
                "reading the lab's binary {}: {error}",
                local_binary.display()
            ))
        })?;
        self.connection.run_with_input(
            "copy the lab's binary",
            &format!("cat > {0} && chmod 700 {0}", quote(&target)),
            &mut file,
        )?;
        Ok(target)
    }

    pub fn connection(&self) -> &Connection {
        &self.connection
    }

    pub fn name(&self) -> &str {
        &self.host.name
    }

    /// The lab's binary on the host.
    pub fn binary(&self) -> &str {
        &self.binary
    }

    /// A path in the run's directory on the host.
    pub fn path(&self, file: &str) -> String {
        format!("{}/{file}", self.workdir)
    }

    /// Runs `words` there (quoted) and returns its stdout.
    pub fn run(&self, words: &[&str]) -> Result<String, RemoteError> {
        let line = command_line(words);
        self.connection.run(&line, &line)
    }

    /// Writes `text` to `file` in the work directory, readable by root only.
    pub fn write_file(&self, file: &str, text: &str) -> Result<(), RemoteError> {
        self.connection.run_with_input(
            &format!("write {file}"),
            &format!("umask 077 && cat > {}", quote(&self.path(file))),
            &mut text.as_bytes(),
        )?;
        Ok(())
    }

    /// Starts `words` there in the background as `name` (its output in
    /// `name.log`, its PID in `name.pid`) and returns at once.
    pub fn start(&self, name: &str, words: &[&str]) -> Result<(), RemoteError> {
        let line = command_line(words);
        // `&` takes only the command, redirected away from the session:
        // a backgrounded list would keep the ssh channel (and this call) open.
        let script = format!(
            "cd {dir} || exit 1; {line} > {name}.log 2>&1 < /dev/null & echo $! > {dir}/{name}.pid",
            dir = quote(&self.workdir),
            name = quote(name),
        );
        self.connection.run(&line, &script)?;
        Ok(())
    }

    /// Starts `words` there as `name` with its stdin and stdout piped
    /// (its PID in `name.pid` while it runs), for a worker that answers
    /// in lines.
    pub fn stream(&self, name: &str, words: &[&str]) -> Result<std::process::Child, RemoteError> {
        let line = command_line(words);
        // The PID file goes when the worker ends, so clean-up never
        // signals a PID the system may have given to another process. A
        // background command's stdin is /dev/null unless redirected: the
        // session's own goes to it through fd 3.
        let script = format!(
            "exec 3<&0; {line} <&3 3<&- & echo $! > {pid} && wait $!; status=$?; rm -f {pid}; exit $status",
            pid = quote(&self.path(&format!("{name}.pid")))
        );
        self.connection.spawn(&line, &script)
    }

    /// Whether `name` (from [`RemoteHost::start`]) still runs.
    pub fn running(&self, name: &str) -> Result<bool, RemoteError> {
        let script = format!(
            "kill -0 \"$(cat {})\" 2>/dev/null && echo yes || true",
            quote(&self.path(&format!("{name}.pid")))
        );
        Ok(self
            .connection
            .run(&format!("is {name} running"), &script)?
            .trim()
            == "yes")
    }

    /// CPU time and resident memory of `name` (from
    /// [`RemoteHost::start`]) so far, as its host's `/proc` says.
    pub fn usage(&self, name: &str) -> Result<CpuCharge, RemoteError> {
        let script = format!(
            "p=$(cat {}) && getconf CLK_TCK && cat /proc/$p/stat && grep VmRSS /proc/$p/status",
            quote(&self.path(&format!("{name}.pid")))
        );
        let text = self.connection.run(&format!("usage of {name}"), &script)?;
        parse_usage(&text)
            .ok_or_else(|| self.refused(format!("{name}: unreadable /proc: {text:?}")))
    }

    /// The last lines `name` logged.
    pub fn log_tail(&self, name: &str) -> String {
        let script = format!(
            "tail -n 5 {} 2>/dev/null || true",
            quote(&self.path(&format!("{name}.log")))
        );
        self.connection
            .run(&format!("tail {name}.log"), &script)
            .map(|text| super::ssh::last_lines(&text))
            .unwrap_or_default()
    }

    /// Stops `name` (TERM, then KILL) and forgets its PID.
    pub fn stop(&self, name: &str) -> Result<(), RemoteError> {
        let script = format!(
            "cd {dir} && {sweep}",
            dir = quote(&self.workdir),
            sweep = stop_script(&format!("{}.pid", quote(name)))
        );
        self.connection.run(&format!("stop {name}"), &script)?;
        Ok(())
    }

    /// Notes that the run created interface `name` there, also in the
    /// directory's `links` for a later run's sweep if this host is lost.
    pub fn created_link(&mut self, name: &str) -> Result<(), RemoteError> {
        if self.links.iter().any(|link| link == name) {
            return Ok(());
        }
        self.links.push(name.to_string());
        let script = format!(
            "echo {} >> {}",
            quote(name),
            quote(&self.path(stale::LINKS_FILE))
        );
        self.connection.run(&format!("note {name}"), &script)?;
        Ok(())
    }

    /// Ends the session holding the directory's lock (its input ends).
    fn release_lock(&mut self) {
        if let Some(mut holder) = self.lock.take() {
            drop(holder.stdin.take());
            if self.connection.is_lost() {
                let _ = holder.kill();
            }
            let _ = holder.wait();
        }
    }

    /// Stops every process the run started there, deletes its interfaces
    /// and its directory. Once; a lost host is left as it is.
    pub fn clean_up(&mut self) -> Result<(), RemoteError> {
        if std::mem::replace(&mut self.cleaned, true) || self.workdir.is_empty() {
            self.release_lock();
            return Ok(());
        }
        self.release_lock();
        let links: String = self
            .links
            .iter()
            .map(|link| format!("ip link del {} 2>/dev/null; ", quote(link)))
            .collect();
        let script = format!(
            "cd {dir} 2>/dev/null && {{ {sweep}; }}; {links}cd / && rm -rf {dir}",
            dir = quote(&self.workdir),
            sweep = stop_script("*.pid"),
        );
        let result = self.connection.run("clean up", &script).map(drop);
        self.connection.close();
        result
    }
}

impl Drop for RemoteHost {
    fn drop(&mut self) {
        if let Err(error) = self.clean_up() {
            tracing::warn!(%error, "could not clean up");
        }
    }
}

/// Reads [`RemoteHost::usage`]'s script: clock ticks per second, the
/// `stat` line (user and system time are the 14th and 15th fields,
/// counted past the command name, which may hold spaces), `VmRSS`.
fn parse_usage(text: &str) -> Option<CpuCharge> {
    let mut lines = text.lines();
    let ticks_per_sec: u64 = lines.next()?.trim().parse().ok()?;
    let stat = lines.next()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    let rss_kib: u64 = lines.next()?.split_whitespace().nth(1)?.parse().ok()?;
    Some(CpuCharge {
        cpu: Duration::from_secs_f64(ticks as f64 / ticks_per_sec.max(1) as f64),
        resident_bytes: rss_kib * 1024,
    })
}

/// Shell lines that stop the PIDs in the files matching `pattern` (in the
/// current directory): TERM, up to three seconds, KILL; then the files go.
fn stop_script(pattern: &str) -> String {
    format!(
        "for f in {pattern}; do [ -f \"$f\" ] || continue; p=$(cat \"$f\"); \
         kill \"$p\" 2>/dev/null; i=0; \
         while kill -0 \"$p\" 2>/dev/null && [ $i -lt {STOP_GRACE_TENTHS} ]; do sleep 0.1; i=$((i+1)); done; \
         kill -9 \"$p\" 2>/dev/null; rm -f \"$f\"; done"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_time_and_memory_from_proc() {
        let text = "100\n4242 (fjord up x) S 1 2 3 0 -1 0 10 0 0 0 250 50 0 0 20 0 3 0\n\
                    VmRSS:\t  8192 kB\n";
        let usage = parse_usage(text).unwrap();
        assert_eq!(usage.cpu, Duration::from_secs(3));
        assert_eq!(usage.resident_bytes, 8 << 20);
        assert!(parse_usage("100\n").is_none());
    }
}
