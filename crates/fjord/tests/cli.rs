//! What a user sees from the `fjord` command on bad input: one clear line
//! naming the file, line and problem, exit code 2, never a panic.

use std::net::UdpSocket;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use fjord_lab::netns::Namespace;

const FJORD: &str = env!("CARGO_BIN_EXE_fjord");
const GOOD_KEY: &str = "yAnz5TF+lXXJte14tji3zlMNq+hd2rYUIgJBgB3fBmk=";
const PEER_KEY: &str = "kKWYjFK2POdaKVzFSddI7jbaHt+K7IbMs57OkVKayRQ=";

struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!("fjord-cli-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    /// Writes `text` to `name` with `mode` and returns the path.
    fn file(&self, name: &str, text: &str, mode: u32) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn fjord(args: &[&str]) -> Output {
    Command::new(FJORD).args(args).output().unwrap()
}

/// Exit code 2, exactly one line on stderr containing every fragment, no panic.
fn assert_usage_error(output: &Output, fragments: &[&str]) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "stderr: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "more than one line: {stderr}"
    );
    for fragment in fragments {
        assert!(
            stderr.contains(fragment),
            "{fragment:?} missing from: {stderr}"
        );
    }
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn config(extra_interface: &str, peer: &str) -> String {
    format!(
        "[Interface]\nPrivateKey = {GOOD_KEY}\n{extra_interface}\n[Peer]\nPublicKey = {PEER_KEY}\n{peer}\n"
    )
}

fn up(path: &Path) -> Output {
    fjord(&["up", path.to_str().unwrap()])
}

#[test]
fn bad_config_files_name_file_line_and_problem() {
    let dir = TempDir::new("bad");
    let cases = [
        (
            "unknown-key.conf",
            config("Colour = blue", ""),
            vec!["unknown-key.conf:3", "Colour"],
        ),
        (
            "bad-base64.conf",
            config("", "").replace(PEER_KEY, "not!base64=============================="),
            vec!["bad-base64.conf:5", "PublicKey"],
        ),
        (
            "bad-cidr.conf",
            config("", "AllowedIPs = 198.19.0.0/33"),
            vec!["bad-cidr.conf:6", "33"],
        ),
    ];
    for (name, text, fragments) in cases {
        let path = dir.file(name, &text, 0o600);
        assert_usage_error(&up(&path), &fragments);
    }
}

#[test]
fn missing_file_and_loose_permissions_are_refused() {
    let dir = TempDir::new("perm");
    let missing = dir.0.join("nowhere.conf");
    assert_usage_error(&up(&missing), &["nowhere.conf"]);
    let loose = dir.file(
        "loose.conf",
        &config("", "AllowedIPs = 198.19.0.2/32"),
        0o644,
    );
    assert_usage_error(&up(&loose), &["loose.conf", "chmod 600"]);
}

#[test]
fn port_in_use_is_refused() {
    // In a namespace of our own, so the port is certainly ours to take.
    let host = Namespace::create("port").unwrap();
    let dir = TempDir::new("port");
    let name = format!("fjp{}", std::process::id() % 100_000);
    let path = dir.file(
        &format!("{name}.conf"),
        &config("ListenPort = 51999", ""),
        0o600,
    );
    // Bound before fjord starts, and held until it has answered.
    let holder = host
        .spawn_thread(|| UdpSocket::bind("0.0.0.0:51999"))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let output = host
        .command(FJORD)
        .args(["up", path.to_str().unwrap()])
        .output()
        .unwrap();
    drop(holder);
    assert_usage_error(&output, &["51999", "in use"]);
}

#[test]
fn not_root_is_one_line() {
    let dir = TempDir::new("root");
    let path = dir.file("wg7.conf", &config("", ""), 0o644);
    // setpriv drops to nobody; the binary and the file stay readable.
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let output = Command::new("setpriv")
        .args([
            "--reuid=nobody",
            "--regid=nogroup",
            "--clear-groups",
            FJORD,
            "up",
        ])
        .arg(&path)
        .output()
        .unwrap();
    assert_usage_error(&output, &["root"]);
}

#[test]
fn unknown_command_and_bad_lab_names_list_what_is_valid() {
    let output = fjord(&["lab", "run", "--suite", "nonsense"]);
    assert_usage_error(&output, &["unknown suite 'nonsense'", "quick", "bdp"]);
    let output = fjord(&["lab", "quick", "--systems", "bare,nothing"]);
    assert_usage_error(&output, &["unknown system 'nothing'", "wireguard-go"]);
    let output = fjord(&[
        "lab",
        "run",
        "--suite",
        "loss",
        "--congestion-control",
        "nonsense",
    ]);
    // reno is built into every kernel.
    assert_usage_error(&output, &["--congestion-control nonsense", "reno"]);
    let output = fjord(&["not-an-interface", "extra"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn keys_round_trip_through_wg() {
    let generated = fjord(&["genkey"]);
    assert!(generated.status.success());
    let private = String::from_utf8(generated.stdout).unwrap();
    assert_eq!(private.trim_end().len(), 44);
    let mut child = Command::new(FJORD)
        .arg("pubkey")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), private.as_bytes()).unwrap();
    let ours = child.wait_with_output().unwrap();
    let mut wg = Command::new("wg")
        .arg("pubkey")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(wg.stdin.as_mut().unwrap(), private.as_bytes()).unwrap();
    let theirs = wg.wait_with_output().unwrap();
    assert_eq!(ours.stdout, theirs.stdout);
    let mut bad = Command::new(FJORD)
        .arg("pubkey")
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(bad.stdin.as_mut().unwrap(), b"garbage\n").unwrap();
    assert_usage_error(&bad.wait_with_output().unwrap(), &["invalid private key"]);
}

/// What `fjord ARGS --help` prints.
fn help(args: &[&str]) -> String {
    let mut all = args.to_vec();
    all.push("--help");
    let output = fjord(&all);
    assert!(output.status.success(), "{args:?}: {output:?}");
    String::from_utf8(output.stdout).unwrap()
}

#[test]
fn each_subcommand_lists_only_its_own_options() {
    let tunnel_options = [
        "--threads",
        "--cipher",
        "--compression",
        "--user",
        "--log-format",
    ];
    for args in [
        &["network", "sign"][..],
        &["network"],
        &["show"],
        &["genkey"],
        &["lab", "report"],
        &["completions"],
    ] {
        let text = help(args);
        for option in tunnel_options.iter().chain(&["--foreground"]) {
            assert!(!text.contains(option), "{args:?} lists {option}:\n{text}");
        }
    }
    // The tunnel's options where a tunnel runs: `up`, and the bare
    // `fjord [-f] IFACE` form's top-level help.
    for args in [&["up"][..], &[]] {
        let text = help(args);
        for option in tunnel_options {
            assert!(text.contains(option), "{args:?} misses {option}:\n{text}");
        }
        assert!(!text.contains("--test-rekey-divisor"), "{text}");
    }
    assert!(help(&[]).contains("--foreground"));
    // The lab starts fjord tunnels with `--threads`.
    assert!(help(&["lab", "quick"]).contains("--threads"));
    assert!(help(&["lab", "run"]).contains("--threads"));
}

#[test]
fn tunnel_options_are_checked_where_they_are_taken() {
    // Parsed (and refused) by `up` after its file, and before it.
    let output = fjord(&["up", "x.conf", "--threads", "0"]);
    assert_eq!(output.status.code(), Some(2));
    let output = fjord(&["--cipher", "rot13", "up", "x.conf"]);
    assert_eq!(output.status.code(), Some(2));
    // Not taken by commands that run no tunnel.
    let output = fjord(&["network", "new", "--threads", "2"]);
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn completions_and_man_page_come_from_the_definition() {
    for (shell, marker) in [
        ("bash", "_fjord()"),
        ("zsh", "#compdef fjord"),
        ("fish", "complete -c fjord"),
    ] {
        let output = fjord(&["completions", shell]);
        assert!(output.status.success(), "{shell}: {output:?}");
        let script = String::from_utf8(output.stdout).unwrap();
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("no-busy-poll"),
            "{shell} lacks up's options"
        );
    }
    let page = fjord(&["manpage"]);
    assert!(page.status.success());
    let page = String::from_utf8(page.stdout).unwrap();
    assert!(
        page.starts_with(".ie") || page.contains(".TH fjord 1"),
        "{page}"
    );
    let dir = TempDir::new("man");
    assert!(
        fjord(&["manpage", dir.0.to_str().unwrap()])
            .status
            .success()
    );
    for name in ["fjord.1", "fjord-up.1", "fjord-network-sign.1"] {
        assert!(dir.0.join(name).exists(), "{name} not written");
    }
    let up_page = std::fs::read_to_string(dir.0.join("fjord-up.1")).unwrap();
    assert!(up_page.contains("threads"));
    let sign_page = std::fs::read_to_string(dir.0.join("fjord-network-sign.1")).unwrap();
    assert!(!sign_page.contains("threads"), "{sign_page}");
}
