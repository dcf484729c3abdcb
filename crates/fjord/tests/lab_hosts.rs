//! `fjord lab run --hosts`, end to end through real OpenSSH: two hosts
//! are network namespaces, each with its own sshd, joined by a veth (the
//! underlay, 198.18.0.1 and .2); the lab runs in a third namespace that
//! reaches each host's sshd over a management link (198.18.1.0/30 and
//! 198.18.2.0/30), as a controller would over a lab's management network.
//! A throwaway key pair, host key, ssh config and known_hosts are made
//! for the test; nothing has a route out.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fjord_lab::netns::{self, Namespace, Process};
use fjord_lab::report::load_record;
use fjord_lab::results::{MeasurementStatus, SystemStatus};

const FJORD: &str = env!("CARGO_BIN_EXE_fjord");
const SSHD: &str = "/usr/sbin/sshd";

/// One host: its namespace, its sshd, its management address.
struct SshHost {
    /// Stopped before the namespace goes.
    sshd: Option<Process>,
    namespace: Namespace,
}

/// The controller's namespace and the two hosts; everything is removed on
/// drop (sshd by its PID, then the namespaces with their links).
struct Lab {
    hosts: Vec<SshHost>,
    controller: Namespace,
    dir: PathBuf,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for host in &mut self.hosts {
            drop(host.sshd.take());
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn run(command: &mut Command) -> Output {
    let output = command.output().expect("command runs");
    assert!(
        output.status.success(),
        "{command:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

impl Lab {
    /// Builds the namespaces, keys, sshd's and the inventory.
    fn new(name: &str) -> Option<Self> {
        if !netns::is_root() || !Path::new(SSHD).exists() {
            eprintln!("skipped: needs root and {SSHD} (apt-get install openssh-server)");
            return None;
        }
        use std::os::unix::fs::DirBuilderExt as _;
        let dir = std::env::temp_dir().join(format!("fjord-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::DirBuilder::new().mode(0o700).create(&dir).unwrap();
        let controller = Namespace::create("ctl").unwrap();
        let mut lab = Self {
            hosts: Vec::new(),
            controller,
            dir,
        };
        for key in ["client_key", "host_key"] {
            run(Command::new("ssh-keygen")
                .args([
                    "-q",
                    "-t",
                    "ed25519",
                    "-N",
                    "",
                    "-C",
                    "fjord-lab-test",
                    "-f",
                ])
                .arg(lab.dir.join(key)));
        }
        let client_public = std::fs::read_to_string(lab.dir.join("client_key.pub")).unwrap();
        let host_public = std::fs::read_to_string(lab.dir.join("host_key.pub")).unwrap();
        write(&lab.dir.join("authorized_keys"), &client_public);
        let mut known_hosts = String::new();
        let mut ssh_config = String::new();
        for (index, host) in ["a", "b"].into_iter().enumerate() {
            let namespace = Namespace::create(host).unwrap();
            let management = format!("198.18.{}.2", index + 1);
            netns::veth(&lab.controller, &format!("to-{host}"), &namespace, "mgmt").unwrap();
            lab.controller
                .ip(&[
                    "addr",
                    "add",
                    &format!("198.18.{}.1/30", index + 1),
                    "dev",
                    &format!("to-{host}"),
                ])
                .unwrap();
            namespace
                .ip(&["addr", "add", &format!("{management}/30"), "dev", "mgmt"])
                .unwrap();
            let config = lab.dir.join(format!("sshd_{host}"));
            write(
                &config,
                &format!(
                    "ListenAddress {management}\nHostKey {dir}/host_key\n\
                     AuthorizedKeysFile {dir}/authorized_keys\nPermitRootLogin prohibit-password\n\
                     PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\n\
                     StrictModes no\nPidFile none\nLogLevel ERROR\nMaxSessions 64\nMaxStartups 64\n",
                    dir = lab.dir.display()
                ),
            );
            lab.hosts.push(SshHost {
                sshd: None,
                namespace,
            });
            lab.start_sshd(index);
            known_hosts.push_str(&format!("{management} {host_public}"));
            ssh_config.push_str(&format!(
                "Host {host}\n  HostName {management}\n  User root\n  IdentityFile {dir}/client_key\n  \
                 IdentitiesOnly yes\n  UserKnownHostsFile {dir}/known_hosts\n  \
                 GlobalKnownHostsFile /dev/null\n  StrictHostKeyChecking yes\n",
                dir = lab.dir.display()
            ));
        }
        let [a, b] = [&lab.hosts[0].namespace, &lab.hosts[1].namespace];
        netns::veth(a, "eth0", b, "eth0").unwrap();
        a.ip(&["addr", "add", "198.18.0.1/24", "dev", "eth0"])
            .unwrap();
        b.ip(&["addr", "add", "198.18.0.2/24", "dev", "eth0"])
            .unwrap();
        write(&lab.dir.join("known_hosts"), &known_hosts);
        write(&lab.dir.join("ssh_config"), &ssh_config);
        write(
            &lab.dir.join("lab.toml"),
            "ssh_config = \"ssh_config\"\n\n\
             [[hosts]]\nname = \"a\"\nssh = \"a\"\nunderlay = \"198.18.0.1\"\nrole = \"left\"\n\n\
             [[hosts]]\nname = \"b\"\nssh = \"b\"\nunderlay = \"198.18.0.2\"\nrole = \"right\"\n",
        );
        for index in 0..2 {
            lab.wait_for_login(index);
        }
        Some(lab)
    }

    /// Starts host `index`'s sshd (again, after a test killed it).
    fn start_sshd(&mut self, index: usize) {
        let config = self.dir.join(format!("sshd_{}", ["a", "b"][index]));
        let empty_rc = self.dir.join("empty_bashrc");
        write(&empty_rc, "");
        let namespace = &self.hosts[index].namespace;
        // Each login runs the user's shell, and bash run by sshd reads
        // ~/.bashrc even for a plain command. This machine's runs `pyenv
        // rehash`, which takes a lock: the lab's concurrent commands then
        // wait on each other for up to a minute each. A host's sshd sees
        // an empty ~/.bashrc, bound over the real one in the mount
        // namespace `ip netns exec` gives it, so nothing else sees it.
        let sshd = namespace
            .spawn(
                namespace
                    .command("sh")
                    .arg("-c")
                    .arg(
                        "[ -f \"$HOME/.bashrc\" ] && mount --bind \"$1\" \"$HOME/.bashrc\"; \
                         exec \"$2\" -D -e -f \"$3\"",
                    )
                    .arg("sh")
                    .arg(&empty_rc)
                    .arg(SSHD)
                    .arg(&config)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null()),
            )
            .unwrap();
        self.hosts[index].sshd = Some(sshd);
    }

    /// Waits until host `index`'s sshd (listening once it has read its
    /// keys) takes a login.
    fn wait_for_login(&self, index: usize) {
        let host = ["a", "b"][index];
        let started = Instant::now();
        loop {
            let login = self
                .controller
                .command("ssh")
                .arg("-F")
                .arg(self.dir.join("ssh_config"))
                .args(["-o", "BatchMode=yes", host, "true"])
                .stdin(Stdio::null())
                .output()
                .unwrap();
            if login.status.success() {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "no ssh login to {host}: {}",
                String::from_utf8_lossy(&login.stderr)
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// `fjord lab run --hosts lab.toml ARGS…` in the controller's namespace.
    fn lab_command(&self, args: &[&str]) -> Command {
        self.lab_subcommand("run", args)
    }

    /// `fjord lab SUBCOMMAND --hosts lab.toml ARGS…` in the controller's
    /// namespace.
    fn lab_subcommand(&self, subcommand: &str, args: &[&str]) -> Command {
        // A release build for figures (`quick_suite_three_rounds`).
        let binary = std::env::var("FJORD_LAB_BIN").unwrap_or_else(|_| FJORD.to_string());
        let mut command = self.controller.command(binary);
        command
            .args(["lab", subcommand, "--hosts"])
            .arg(self.dir.join("lab.toml"))
            .args(args)
            .stdin(Stdio::null());
        command
    }

    /// Commands of the processes in host `index`'s namespace but its sshd's.
    fn processes(&self, index: usize) -> Vec<String> {
        let listing = netns::ip(&["netns", "pids", self.hosts[index].namespace.name()]).unwrap();
        listing
            .split_whitespace()
            .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
            .map(|cmdline| String::from_utf8_lossy(&cmdline).replace('\0', " "))
            .filter(|command| !command.starts_with(SSHD) && !command.starts_with("sshd"))
            .collect()
    }

    /// Links of host `index` besides the ones the test made.
    fn extra_links(&self, index: usize) -> Vec<String> {
        self.hosts[index]
            .namespace
            .links()
            .unwrap()
            .into_iter()
            .filter(|link| !["lo", "mgmt", "eth0"].contains(&link.as_str()))
            .collect()
    }
}

#[test]
fn quick_suite_runs_between_hosts_over_ssh() {
    let Some(lab) = Lab::new("hosts") else { return };
    let out = lab.dir.join("run");
    let started = Instant::now();
    let output = lab
        .lab_command(&["--suite", "quick", "--systems", "bare,fjord", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the run failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}\n{stderr}\nin {:?}", started.elapsed());

    let record = load_record(&out).unwrap();
    for system in ["bare", "fjord"] {
        let outcome = record.systems.iter().find(|s| s.name == system).unwrap();
        assert_eq!(outcome.status, SystemStatus::Ran, "{outcome:?}");
        for test in ["tcp_bulk", "rfc2544_throughput", "rtt"] {
            let row = record
                .measurements
                .iter()
                .find(|m| m.system == system && m.test == test)
                .unwrap_or_else(|| panic!("{system} has no {test} row"));
            assert_eq!(row.status, MeasurementStatus::Ok, "{row:?}");
            assert!(row.median > 0.0, "{system} {test}: {row:?}");
        }
    }
    let fjord_tcp = record
        .measurements
        .iter()
        .find(|m| m.system == "fjord" && m.test == "tcp_bulk")
        .unwrap();
    assert_eq!(fjord_tcp.extra.verified(), Some(true), "{fjord_tcp:?}");
    assert!(fjord_tcp.ratio_to_bare.is_some_and(|r| r > 0.0));
    // CPU per bit, read from both hosts' /proc.
    for test in ["tcp_bulk", "rfc2544_throughput"] {
        let row = record
            .measurements
            .iter()
            .find(|m| m.system == "fjord" && m.test == test)
            .unwrap();
        let cost = row.extra.cost.as_ref();
        assert!(
            cost.and_then(|cost| cost.cpu_seconds_per_gbit)
                .is_some_and(|per_gbit| per_gbit > 0.0),
            "{row:?}"
        );
    }

    assert_eq!(record.hosts.len(), 2, "{:?}", record.hosts);
    for (facts, (name, role)) in record.hosts.iter().zip([("a", "left"), ("b", "right")]) {
        assert_eq!((facts.name.as_str(), facts.role.as_str()), (name, role));
        assert!(!facts.kernel.is_empty() && facts.cores > 0, "{facts:?}");
        assert_eq!(
            (facts.nic.as_str(), facts.nic_driver.as_str()),
            ("eth0", "veth")
        );
        assert_eq!(facts.mtu, Some(1500));
        assert!(facts.systems["fjord"].starts_with("fjord "), "{facts:?}");
    }
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    assert!(report.contains("## Hosts"), "{report}");

    for index in 0..2 {
        assert_eq!(lab.processes(index), Vec::<String>::new(), "left running");
        assert_eq!(lab.extra_links(index), Vec::<String>::new(), "links left");
    }
}

/// A lab run a test started in the background, stopped on drop as
/// Ctrl-C would stop it (SIGTERM: it cleans its hosts up and closes its
/// ssh connections), so a failing test leaves no ssh master behind.
struct LabRun(Option<std::process::Child>);

impl LabRun {
    fn running(&mut self) -> bool {
        self.0
            .as_mut()
            .is_some_and(|child| child.try_wait().unwrap().is_none())
    }

    fn finish(mut self) -> Output {
        // Taken only here, and `finish` consumes the run.
        let child = self.0.take().expect("a run finishes once");
        child.wait_with_output().unwrap()
    }
}

impl Drop for LabRun {
    fn drop(&mut self) {
        let Some(mut child) = self.0.take() else {
            return;
        };
        let _ = fjord_sys::process::send_signal(child.id(), fjord_sys::process::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

#[test]
fn a_lost_host_ends_the_run_and_the_other_is_cleaned_up() {
    let Some(lab) = Lab::new("lost") else { return };
    let out = lab.dir.join("run");
    let mut run = LabRun(Some(
        lab.lab_command(&["--suite", "quick", "--systems", "fjord", "--out"])
            .arg(&out)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    ));
    // Once fjord's tunnel is up on b, b goes away: every process in its
    // namespace (its sshd and all it started for the lab) is killed. Bare
    // runs the quick suite first (about a minute, longer on a busy machine).
    let started = Instant::now();
    while !lab
        .processes(1)
        .iter()
        .any(|command| command.contains(" up "))
    {
        assert!(
            started.elapsed() < Duration::from_secs(240) && run.running(),
            "fjord never came up on b"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    let b = lab.hosts[1].namespace.name().to_string();
    for pid in netns::ip(&["netns", "pids", &b])
        .unwrap()
        .split_whitespace()
    {
        // Every process in b descends from the sshd this test started.
        let _ = Command::new("kill").args(["-KILL", pid]).status();
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while run.running() {
        assert!(
            Instant::now() < deadline,
            "the run did not end after losing b"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let output = run.finish();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the run went on without b");
    assert!(stderr.contains("host b: lost"), "{stderr}");
    assert_eq!(lab.processes(0), Vec::<String>::new(), "left running on a");
    assert_eq!(lab.extra_links(0), Vec::<String>::new(), "links left on a");

    // b keeps its run's directory (the lab's binary there names it); the
    // next run that reaches b sweeps it first and says so. The hosts'
    // namespaces share this machine's /tmp, so a's sweep may be the one.
    let b_dir = stderr
        .lines()
        .find_map(|line| line.strip_prefix("host b: ready in "))
        .and_then(|rest| rest.split_once('(')?.1.strip_suffix("/fjord)"))
        .unwrap_or_else(|| panic!("b's run directory in {stderr}"))
        .to_string();
    assert!(Path::new(&b_dir).is_dir(), "b keeps {b_dir}");
    let mut lab = lab;
    lab.start_sshd(1);
    lab.wait_for_login(1);
    let next = lab
        .lab_subcommand("install-peers", &["--dry-run"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&next.stderr);
    assert!(
        said.contains(&format!("removed {b_dir}, left by an earlier run")),
        "{said}"
    );
    assert!(!Path::new(&b_dir).exists(), "{b_dir} swept");
}

/// The figures beside `fjord lab run --suite quick --rounds 3` between
/// namespaces: the same through SSH. Minutes long, so by hand:
/// `FJORD_LAB_BIN=target/release/fjord FJORD_LAB_OUT=dir cargo test
/// --test lab_hosts -- --ignored`.
#[test]
#[ignore = "minutes long; run by hand for figures"]
fn quick_suite_three_rounds() {
    let Some(lab) = Lab::new("rounds") else {
        return;
    };
    let out = std::env::var("FJORD_LAB_OUT").map_or_else(|_| lab.dir.join("run"), PathBuf::from);
    let output = lab
        .lab_command(&[
            "--suite",
            "quick",
            "--systems",
            "bare,fjord",
            "--rounds",
            "3",
            "--out",
        ])
        .arg(&out)
        .output()
        .unwrap();
    println!(
        "{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(output.status.success());
}
