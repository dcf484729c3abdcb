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

/// `fjord ARGS < input`.
fn fjord_with_input(args: &[&str], input: &[u8]) -> Output {
    let mut child = Command::new(FJORD)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(child.stdin.as_mut().unwrap(), input).unwrap();
    child.wait_with_output().unwrap()
}

/// A new network key in `dir` (mode 600) and its public key.
fn network_key(dir: &TempDir, name: &str) -> (PathBuf, String) {
    let secret = fjord(&["network", "new"]);
    assert!(secret.status.success());
    let public = fjord_with_input(&["network", "pubkey"], &secret.stdout);
    assert!(public.status.success());
    let path = dir.file(name, &String::from_utf8(secret.stdout).unwrap(), 0o600);
    (
        path,
        String::from_utf8(public.stdout).unwrap().trim().to_string(),
    )
}

#[test]
fn a_policy_is_signed_checked_and_refused_when_changed() {
    let dir = TempDir::new("policy");
    let (key, public) = network_key(&dir, "network.key");
    let (other_key, _) = network_key(&dir, "other.key");
    let key = key.to_str().unwrap();
    let policy = "# who may reach whom\nversion 7\n\
                  allow from group ops to group db port 5432/tcp\n\
                  allow from any to any proto icmp\n";
    let signed = fjord_with_input(
        &["network", "policy", "--network-key", key],
        policy.as_bytes(),
    );
    assert!(signed.status.success(), "{signed:?}");
    let text = String::from_utf8(signed.stdout).unwrap();
    assert!(text.starts_with(policy), "{text}");
    assert!(
        text.lines()
            .last()
            .unwrap()
            .starts_with("# fjord-policy-signature "),
        "{text}"
    );
    let check = ["network", "policy", "--check", "--network", public.as_str()];
    let checked = fjord_with_input(&check, text.as_bytes());
    assert!(checked.status.success(), "{checked:?}");
    assert_eq!(
        String::from_utf8(checked.stdout).unwrap(),
        "policy version 7, 2 rules, signed by the network\n"
    );
    let tampered = text.replace("5432/tcp", "22/tcp");
    assert_usage_error(
        &fjord_with_input(&check, tampered.as_bytes()),
        &["standard input:5: the signature does not match the text"],
    );
    let foreign = fjord_with_input(
        &[
            "network",
            "policy",
            "--network-key",
            other_key.to_str().unwrap(),
        ],
        policy.as_bytes(),
    );
    assert_usage_error(
        &fjord_with_input(&check, &foreign.stdout),
        &["standard input:5: signed by another key than this network's"],
    );
    assert_usage_error(
        &fjord_with_input(&check, policy.as_bytes()),
        &["standard input:4: no `# fjord-policy-signature` line"],
    );
    // Nothing is signed that does not parse, with the line at fault.
    assert_usage_error(
        &fjord_with_input(
            &["network", "policy", "--network-key", key],
            b"version 1\nallow from group Ops to any proto any\n",
        ),
        &["standard input:2: group `Ops`"],
    );
    // A key file others may read is refused, as for `sign`.
    let loose = dir.file("loose.key", &std::fs::read_to_string(key).unwrap(), 0o644);
    assert_usage_error(
        &fjord_with_input(
            &[
                "network",
                "policy",
                "--network-key",
                loose.to_str().unwrap(),
            ],
            policy.as_bytes(),
        ),
        &["mode 0644", "chmod 600"],
    );
}

/// `fjord network sign` of `PEER_KEY` as `name` at 198.19.0.2/32 with
/// `key`, `option` given once for each of `values`.
fn sign_with(key: &std::path::Path, name: &str, option: &str, values: &[&str]) -> Output {
    let mut args = vec![
        "network",
        "sign",
        "--network-key",
        key.to_str().unwrap(),
        "--public-key",
        PEER_KEY,
        "--name",
        name,
        "--address",
        "198.19.0.2/32",
    ];
    for value in values {
        args.extend([option, value]);
    }
    fjord(&args)
}

#[test]
fn sign_puts_groups_in_a_certificate_and_refuses_bad_names() {
    let dir = TempDir::new("groups");
    let (key, _) = network_key(&dir, "network.key");
    let sign = |groups: &[&str]| sign_with(&key, "db-1", "--group", groups);
    let grouped = sign(&["ops", "db"]);
    assert!(grouped.status.success(), "{grouped:?}");
    let certificate: fjord_mesh::Certificate =
        String::from_utf8(grouped.stdout).unwrap().parse().unwrap();
    let groups: Vec<String> = certificate.groups.iter().map(ToString::to_string).collect();
    assert_eq!(groups, ["ops", "db"]);
    assert_usage_error(
        &sign(&["Ops"]),
        &["--group Ops: group `Ops`: a group name is 1 to 31 characters"],
    );
    let seventeen: Vec<String> = (0..17).map(|n| format!("g{n}")).collect();
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    assert_usage_error(&sign(&seventeen), &["at most 16 groups"]);
}

/// `fjord lab report A B=label --out DIR` writes one report of both runs;
/// without --out, or into a run's own directory, it refuses with exit 2.
#[test]
fn lab_report_merges_runs_into_a_directory_of_their_own() {
    let root = std::env::temp_dir().join(format!("fjord-cli-merge-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let fixture = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../lab/tests/data/report/fixture_results.json"
    );
    for run in ["site-a", "site-b"] {
        std::fs::create_dir_all(root.join(run)).unwrap();
        std::fs::copy(fixture, root.join(run).join("results.json")).unwrap();
    }
    let a = root.join("site-a").display().to_string();
    let b = format!("{}=day-2", root.join("site-b").display());
    let out = root.join("merged").display().to_string();

    let merged = fjord(&["lab", "report", &a, &b, "--out", &out]);
    assert!(merged.status.success(), "{merged:?}");
    let report = std::fs::read_to_string(root.join("merged/report.md")).unwrap();
    assert!(report.contains("fjord (site-a)") && report.contains("fjord (day-2)"));
    // The merge's own directory draws again from its merged.json.
    std::fs::remove_file(root.join("merged/report.md")).unwrap();
    let redrawn = fjord(&["lab", "report", &out]);
    assert!(redrawn.status.success(), "{redrawn:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("merged/report.md")).unwrap(),
        report
    );

    let no_out = fjord(&["lab", "report", &a, &b]);
    assert_eq!(no_out.status.code(), Some(2), "{no_out:?}");
    let into_a_run = fjord(&["lab", "report", &a, &b, "--out", &a]);
    assert_eq!(into_a_run.status.code(), Some(2), "{into_a_run:?}");
    assert!(String::from_utf8_lossy(&into_a_run.stderr).contains("results.json"));
    let _ = std::fs::remove_dir_all(&root);
}

#[test]
fn sign_puts_routes_in_a_certificate_and_refuses_bad_prefixes() {
    let dir = TempDir::new("routes");
    let (key, _) = network_key(&dir, "network.key");
    let sign = |routes: &[&str]| sign_with(&key, "gw-1", "--route", routes);
    let routed = sign(&["198.18.200.0/24", "0.0.0.0/0"]);
    assert!(routed.status.success(), "{routed:?}");
    let certificate: fjord_mesh::Certificate =
        String::from_utf8(routed.stdout).unwrap().parse().unwrap();
    let routes: Vec<String> = certificate.routes.iter().map(ToString::to_string).collect();
    assert_eq!(routes, ["198.18.200.0/24", "0.0.0.0/0"]);
    assert_usage_error(
        &sign(&["198.18.200.0/33"]),
        &["--route 198.18.200.0/33: prefix length 33 is longer than 32"],
    );
    assert_usage_error(
        &sign(&["lan"]),
        &["--route lan: 'lan' is not an IP address"],
    );
    assert_usage_error(
        &sign(&["198.18.200.7/24"]),
        &["--route 198.18.200.7/24: host bits are set; the network is 198.18.200.0/24"],
    );
    let seventeen: Vec<String> = (0..17).map(|n| format!("198.18.{n}.0/24")).collect();
    let seventeen: Vec<&str> = seventeen.iter().map(String::as_str).collect();
    assert_usage_error(&sign(&seventeen), &["at most 16 routes"]);
}
