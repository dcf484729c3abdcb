//! What a lost host keeps of a run, and how the next run there clears it.
//!
//! A run's host that is lost mid-run (unreachable, or its sshd gone)
//! cannot be cleaned: it keeps the run's directory `/tmp/fjord-lab.*`
//! (the lab's binary, the tunnel's config files with their private keys,
//! logs, PID files, the `links` it created) and, if it only lost its
//! network, the tunnel processes still running and their interfaces.
//!
//! Every run holds a lock on `lock` in its directory for as long as its
//! connection lives (a `flock` in a session of its own, see
//! [`super::host`]): the next run on that host sweeps, before anything
//! else, every `/tmp/fjord-lab.*` older than ten seconds (its lock file
//! holds the time it was made; a younger one may be a starting run's, not
//! yet locked) whose lock nobody holds — it stops the
//! processes named by its PID files whose command line names that
//! directory (a PID the system gave to another process since is left
//! alone), deletes the interfaces listed in its `links`, removes the
//! directory, and says so. A directory whose lock is still held belongs
//! to a live run (or to one whose lost connection the host has not yet
//! noticed) and is left alone, also said; so is one without a lock file,
//! made by a lab older than this sweep, whose run may still be going.

use super::ssh::quote;

/// Where runs keep their directories, and the prefix of their names.
pub const RUN_DIR_PATTERN: &str = "/tmp/fjord-lab.*";
/// The lock file in a run's directory, held while the run lives.
pub const LOCK_FILE: &str = "lock";
/// The interfaces a run created, one per line, in its directory.
pub const LINKS_FILE: &str = "links";
/// A run's directory younger than this may be one whose run has not yet
/// taken its lock (it is made, then locked, one round trip later).
const YOUNG_SECS: u32 = 10;
/// How long a stale process may take to exit before it is killed.
const STOP_GRACE_TENTHS: u32 = 30;

/// The shell lines of the sweep: one line of output per thing it did or
/// left, each starting with `swept: `.
pub fn sweep_script() -> String {
    format!(
        "command -v flock > /dev/null && for d in {pattern}; do \
           [ -d \"$d\" ] || continue; \
           if [ ! -f \"$d/{lock}\" ]; then \
             echo \"swept: left $d alone: no lock file (an older lab's run, perhaps still running)\"; continue; fi; \
           made=$(cat \"$d/{lock}\" 2>/dev/null); \
           if [ $(( $(date +%s) - ${{made:-0}} )) -lt {young} ]; then \
             echo \"swept: left $d alone: made just now, by a run starting\"; continue; fi; \
           if ! flock -n \"$d/{lock}\" true 2>/dev/null; then \
             echo \"swept: left $d alone: a run holds its lock\"; continue; fi; \
           for f in \"$d\"/*.pid; do [ -f \"$f\" ] || continue; p=$(cat \"$f\"); \
             if tr '\\0' ' ' < /proc/\"$p\"/cmdline 2>/dev/null | grep -qF \"$d/\"; then \
               kill \"$p\" 2>/dev/null; i=0; \
               while kill -0 \"$p\" 2>/dev/null && [ $i -lt {grace} ]; do sleep 0.1; i=$((i+1)); done; \
               kill -9 \"$p\" 2>/dev/null; echo \"swept: stopped process $p of $d\"; fi; done; \
           if [ -f \"$d/{links}\" ]; then while read -r l; do \
             ip link del \"$l\" 2>/dev/null && echo \"swept: deleted interface $l of $d\"; \
             done < \"$d/{links}\"; fi; \
           rm -rf \"$d\" && echo \"swept: removed $d, left by an earlier run\"; \
         done; true",
        pattern = RUN_DIR_PATTERN,
        lock = LOCK_FILE,
        links = LINKS_FILE,
        grace = STOP_GRACE_TENTHS,
        young = YOUNG_SECS,
    )
}

/// What the sweep said it did, one entry per line, and the rest of `text`.
pub fn read_sweep(text: &str) -> (Vec<String>, String) {
    let mut swept = Vec::new();
    let mut rest = String::new();
    for line in text.lines() {
        match line.strip_prefix("swept: ") {
            Some(done) => swept.push(done.to_string()),
            None => {
                rest.push_str(line);
                rest.push('\n');
            }
        }
    }
    (swept, rest)
}

/// Shell lines that make a run's directory, with its lock file holding
/// the time it was made, and print its path.
pub fn make_run_dir_script() -> String {
    format!(
        "d=$(mktemp -d {}) && date +%s > \"$d/{LOCK_FILE}\" && echo \"$d\"",
        RUN_DIR_PATTERN.replace('*', "XXXXXXXX")
    )
}

/// The line that holds `dir`'s lock for as long as its session lives:
/// `cat` ends (and the lock goes) when the session's input does.
pub fn lock_holder_script(dir: &str) -> String {
    format!(
        "exec flock {} cat > /dev/null",
        quote(&format!("{dir}/{LOCK_FILE}"))
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sweep_report_is_told_apart_from_other_output() {
        let (swept, rest) = read_sweep(
            "0\nswept: stopped process 42 of /tmp/fjord-lab.x\n\
             swept: removed /tmp/fjord-lab.x, left by an earlier run\n/tmp/fjord-lab.y\n",
        );
        assert_eq!(
            swept,
            [
                "stopped process 42 of /tmp/fjord-lab.x",
                "removed /tmp/fjord-lab.x, left by an earlier run"
            ]
        );
        assert_eq!(rest, "0\n/tmp/fjord-lab.y\n");
    }

    /// The sweep on this machine's own shell, on a directory of its own
    /// pattern: only where `flock` exists (util-linux).
    #[test]
    fn the_sweep_removes_an_unlocked_run_and_keeps_a_locked_one() {
        if std::process::Command::new("flock")
            .arg("-V")
            .output()
            .is_err()
        {
            return;
        }
        let base = std::env::temp_dir().join(format!("fjord-sweep-{}", std::process::id()));
        let (stale, live) = (base.join("fjord-lab.stale"), base.join("fjord-lab.live"));
        for dir in [&stale, &live] {
            std::fs::create_dir_all(dir).unwrap();
            // Made a minute ago, by the time in the lock file.
            let made = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                - 60;
            std::fs::write(dir.join(LOCK_FILE), format!("{made}\n")).unwrap();
        }
        // A PID file naming a process that is not the run's: left running.
        std::fs::write(stale.join("x.pid"), format!("{}\n", std::process::id())).unwrap();
        let mut holder = std::process::Command::new("sh")
            .arg("-c")
            .arg(lock_holder_script(live.to_str().unwrap()))
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(200));
        let script =
            sweep_script().replace(RUN_DIR_PATTERN, &format!("{}/fjord-lab.*", base.display()));
        let output = std::process::Command::new("sh")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        drop(holder.stdin.take());
        holder.wait().unwrap();
        let (swept, _) = read_sweep(&String::from_utf8_lossy(&output.stdout));
        let (stale_left, live_left) = (stale.exists(), live.exists());
        let _ = std::fs::remove_dir_all(&base);
        assert!(!stale_left && live_left, "{swept:?}");
        assert!(
            swept
                .iter()
                .any(|line| line.contains("left") && line.contains(".live"))
        );
        assert!(
            !swept.iter().any(|line| line.contains("stopped")),
            "{swept:?}"
        );
    }
}
