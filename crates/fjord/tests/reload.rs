//! Live reload (`fjord reload IFACE`, SIGHUP): only what changed in the
//! file is applied, and nothing else moves. A TCP stream through one peer
//! runs on while another peer is added and a third removed; both ends of
//! a tunnel reloaded at the same instant, again and again, never stall
//! it; a bad file is refused with the usual error and changes nothing.
//!
//! Needs root and iperf3; without them the tests skip with one line
//! (fail under CI).

mod support;

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::wireguard::{self, Fjord, Implementation, Initiator, WgSide};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::topology::{LEFT_OVERLAY, RIGHT_OVERLAY, TwoHosts};

fn fjord_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fjord"))
}

fn ready(test: &str) -> bool {
    let iperf3 = systems::find_program("iperf3", &[]);
    support::ready_unless(
        test,
        iperf3.map_or_else(|| vec!["iperf3 not installed".into()], |_| Vec::new()),
    )
}

/// A peer section for a key nobody holds, routed to `prefix`.
fn extra_peer(prefix: &str) -> String {
    let key = wireguard::generate_private_key().expect("a key");
    format!(
        "\n[Peer]\nPublicKey = {}\nAllowedIPs = {prefix}\n",
        key.public_key().to_base64()
    )
}

/// Rewrites the config file that the lab started `side` from, with
/// `extra` appended, as an operator edits it in place.
fn rewrite(workdir: &Path, side: &WgSide, extra: &str) {
    let text = format!("{}{extra}", fjord().config_text(side).as_str());
    let path = config_path(workdir, side);
    std::fs::write(&path, text).expect("rewrite the config");
}

fn config_path(workdir: &Path, side: &WgSide) -> PathBuf {
    workdir.join(format!("{}.conf", side.ifname))
}

fn fjord() -> Fjord {
    Fjord::at(fjord_binary())
}

/// `fjord reload IFACE` in `namespace`: its exit status and output.
fn reload(namespace: &Namespace, ifname: &str) -> (bool, String) {
    let output = namespace
        .command(fjord_binary())
        .args(["reload", ifname])
        .output()
        .expect("run fjord reload");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

fn allowed_ips(namespace: &Namespace, ifname: &str) -> String {
    namespace
        .exec("wg", &["show", ifname, "allowed-ips"])
        .expect("wg show allowed-ips")
}

/// TCP segments the namespace's stack sent again (`/proc/net/snmp`).
fn retransmitted_segments(namespace: &Namespace) -> u64 {
    let snmp = namespace
        .exec("cat", &["/proc/net/snmp"])
        .expect("read /proc/net/snmp");
    let mut tcp = snmp.lines().filter(|line| line.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        panic!("no Tcp lines in /proc/net/snmp:\n{snmp}");
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RetransSegs")
        .and_then(|(_, value)| value.parse().ok())
        .expect("RetransSegs")
}

/// Bytes `ifname` received from its peers (`wg show transfer`).
fn received_bytes(namespace: &Namespace, ifname: &str) -> u64 {
    namespace
        .exec("wg", &["show", ifname, "transfer"])
        .expect("wg show transfer")
        .lines()
        .filter_map(|line| line.split('\t').nth(1)?.parse::<u64>().ok())
        .sum()
}

fn latest_handshake(namespace: &Namespace, ifname: &str) -> String {
    namespace
        .exec("wg", &["show", ifname, "latest-handshakes"])
        .expect("wg show latest-handshakes")
}

struct Pair {
    hosts: TwoHosts,
    workdir: WorkDir,
    left_side: WgSide,
    right_side: WgSide,
    left: wireguard::Interface,
    right: wireguard::Interface,
}

fn start_pair(test: &str, left_extra: &str) -> Pair {
    let hosts = TwoHosts::direct().expect("build two hosts");
    let workdir = WorkDir::create(test).expect("work directory");
    let (left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let right = fjord()
        .start(&hosts.right, &right_side, workdir.path())
        .unwrap_or_else(|error| panic!("start the right side: {error}"));
    let left = fjord()
        .start(&hosts.left, &left_side, workdir.path())
        .unwrap_or_else(|error| panic!("start the left side: {error}"));
    if !left_extra.is_empty() {
        rewrite(workdir.path(), &left_side, left_extra);
        let (ok, text) = reload(&hosts.left, &left_side.ifname);
        assert!(ok, "first reload: {text}");
    }
    fjord_lab::traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(20),
    )
    .expect("the tunnel comes up");
    Pair {
        hosts,
        workdir,
        left_side,
        right_side,
        left,
        right,
    }
}

impl Pair {
    fn logs(&self) -> String {
        [&self.left, &self.right]
            .iter()
            .map(|side| {
                format!(
                    "\n--- {} log:{}",
                    side.ifname(),
                    systems::log_tail(side.log_path(), 30)
                )
            })
            .collect()
    }
}

#[test]
fn a_stream_runs_on_while_peers_are_added_and_removed() {
    let test = "a_stream_runs_on_while_peers_are_added_and_removed";
    if !ready(test) {
        return;
    }
    let removed = extra_peer("198.19.77.0/24");
    let pair = start_pair(test, &removed);
    let (hosts, side) = (&pair.hosts, &pair.left_side);
    assert!(allowed_ips(&hosts.left, &side.ifname).contains("198.19.77.0/24"));
    let handshake_before = latest_handshake(&hosts.left, &side.ifname);

    let _server = netns::Process::spawn(
        hosts
            .right
            .command("iperf3")
            .args(["-s", "-1", "-B", &RIGHT_OVERLAY.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    )
    .expect("iperf3 server");
    netns::wait_until(Duration::from_secs(5), "iperf3 listening", || {
        hosts
            .right
            .exec("ss", &["-Htln", "sport = 5201"])
            .is_ok_and(|out| !out.trim().is_empty())
    })
    .expect("iperf3 server up");
    let retransmits_before = retransmitted_segments(&hosts.left);
    let client = hosts
        .left
        .command("iperf3")
        .args(["-c", &RIGHT_OVERLAY.to_string(), "-t", "4", "-b", "200M"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("iperf3 client");
    // Every 100 ms: TCP segments sent again so far, and bytes the right
    // side has received; a second of it before the reload.
    let sample = || {
        (
            Instant::now(),
            retransmitted_segments(&hosts.left) - retransmits_before,
            received_bytes(&hosts.right, &pair.right_side.ifname),
        )
    };
    let mut timeline = Vec::new();
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(100));
        timeline.push(sample());
    }
    let added = extra_peer("198.19.78.0/24");
    rewrite(pair.workdir.path(), side, &added);
    let reloaded_at = Instant::now();
    let (ok, text) = reload(&hosts.left, &side.ifname);
    let reload_took = reloaded_at.elapsed();
    assert!(ok, "reload: {text}{}", pair.logs());
    assert!(
        text.contains("1 peers added, 1 removed, 0 changed"),
        "{text}"
    );
    for _ in 0..15 {
        std::thread::sleep(Duration::from_millis(100));
        timeline.push(sample());
    }
    let output = client.wait_with_output().expect("iperf3 ends");
    assert!(
        output.status.success(),
        "the stream failed: {}{}",
        String::from_utf8_lossy(&output.stderr),
        pair.logs()
    );
    // The stream never stalls: the receiver gets bytes in every 100 ms.
    let stalls: Vec<usize> = timeline
        .windows(2)
        .enumerate()
        .filter(|(_, pair)| pair[1].2 <= pair[0].2)
        .map(|(index, _)| index)
        .collect();
    assert!(
        stalls.is_empty(),
        "no bytes arrived in intervals {stalls:?}{}",
        pair.logs()
    );
    // Segments sent again in the 300 ms from the reload on, beside those
    // of other 300 ms windows of the stream: on a busy machine TCP sends
    // one again now and then (a tail loss probe when an ACK is late), with
    // or without a reload (measured: 2-7 in 3.5 s without one), so the
    // comparison is what shows the reload's own share.
    let retransmits_at = |when: Instant| {
        timeline
            .iter()
            .rev()
            .find(|(time, _, _)| *time <= when)
            .map_or(0, |(_, retransmits, _)| *retransmits)
    };
    let window = Duration::from_millis(300);
    let reload_end = reloaded_at + reload_took + window;
    let around_reload = retransmits_at(reload_end) - retransmits_at(reloaded_at);
    let first = timeline[0].0;
    let elsewhere: Vec<u64> = (0..11)
        .map(|step| first + window * step)
        .filter(|start| *start + window < reloaded_at || *start > reload_end)
        .map(|start| retransmits_at(start + window) - retransmits_at(start))
        .collect();
    let retransmits = timeline
        .last()
        .map_or(0, |(_, retransmits, _)| *retransmits);
    let routes = allowed_ips(&hosts.left, &side.ifname);
    assert!(
        routes.contains("198.19.78.0/24") && !routes.contains("198.19.77.0/24"),
        "{routes}"
    );
    let kernel_routes = hosts
        .left
        .ip(&["route", "show", "dev", &side.ifname])
        .unwrap();
    assert!(
        kernel_routes.contains("198.19.78.0/24") && !kernel_routes.contains("198.19.77.0/24"),
        "{kernel_routes}"
    );
    assert_eq!(
        latest_handshake(&hosts.left, &side.ifname)
            .lines()
            .find(|line| line.starts_with(&pair.right_side.private_key.public_key().to_base64())),
        handshake_before
            .lines()
            .find(|line| line.starts_with(&pair.right_side.private_key.public_key().to_base64())),
        "the unchanged peer's session was replaced"
    );
    eprintln!(
        "{test}: {text}; reload took {reload_took:?}; {retransmits} segments sent again in the stream, {around_reload} in the 300 ms from the reload on, {elsewhere:?} in other 300 ms windows; bytes arrived in every 100 ms"
    );
}

#[test]
fn both_ends_reloaded_at_once_never_stall_the_tunnel() {
    let test = "both_ends_reloaded_at_once_never_stall_the_tunnel";
    if !ready(test) {
        return;
    }
    let pair = start_pair(test, "");
    let hosts = &pair.hosts;
    let interval = Duration::from_millis(100);
    let ping = hosts
        .left
        .command("ping")
        .args(["-n", "-i", "0.1", "-W", "1", "-w", "9"])
        .arg(RIGHT_OVERLAY.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start ping");
    let reloads = 20;
    for round in 0..reloads {
        // Each round changes both files (a peer comes or goes), so each
        // reload has work to do on both ends at once.
        let extra = if round % 2 == 0 {
            extra_peer("198.19.90.0/24")
        } else {
            String::new()
        };
        rewrite(pair.workdir.path(), &pair.left_side, &extra);
        rewrite(pair.workdir.path(), &pair.right_side, &extra);
        let ((left_ok, left_text), (right_ok, right_text)) = std::thread::scope(|scope| {
            let left = scope.spawn(|| reload(&hosts.left, &pair.left_side.ifname));
            let right = reload(&hosts.right, &pair.right_side.ifname);
            (left.join().expect("left reload"), right)
        });
        assert!(
            left_ok && right_ok,
            "{left_text}\n{right_text}{}",
            pair.logs()
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let output = ping.wait_with_output().expect("ping ends");
    let text = String::from_utf8_lossy(&output.stdout);
    let answered: Vec<u32> = text
        .lines()
        .filter_map(|line| {
            line.split("icmp_seq=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(
        answered.len() > 50,
        "too few answers:\n{text}{}",
        pair.logs()
    );
    // Two answers in a row more than one sequence number apart: a ping
    // in between was lost, and the tunnel stalled longer than an interval.
    let longest_gap = answered
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .max()
        .unwrap_or(1);
    assert!(
        longest_gap <= 2,
        "a stall of {} ping intervals ({interval:?} each):\n{text}{}",
        longest_gap - 1,
        pair.logs()
    );
    eprintln!(
        "{test}: {reloads} simultaneous reloads, {} of {} pings answered, longest gap {} interval(s)",
        answered.len(),
        answered.last().copied().unwrap_or(0),
        longest_gap - 1
    );
}

#[test]
fn a_bad_file_is_refused_and_nothing_changes() {
    let test = "a_bad_file_is_refused_and_nothing_changes";
    if !ready(test) {
        return;
    }
    let pair = start_pair(test, &extra_peer("198.19.77.0/24"));
    let (hosts, side) = (&pair.hosts, &pair.left_side);
    let before = allowed_ips(&hosts.left, &side.ifname);
    rewrite(
        pair.workdir.path(),
        side,
        &format!(
            "{}\nAllowedIPs = 198.19.300.0/24\n",
            extra_peer("198.19.78.0/24")
        ),
    );
    let (ok, text) = reload(&hosts.left, &side.ifname);
    assert!(!ok, "a bad file was taken: {text}");
    let path = config_path(pair.workdir.path(), side);
    assert!(
        text.contains(&path.display().to_string()) && text.contains("AllowedIPs"),
        "no file:line: key: problem in {text:?}"
    );
    assert_eq!(allowed_ips(&hosts.left, &side.ifname), before);
    // A setting only a restart can change is refused too, and named.
    let mut moved = side.clone();
    moved.listen_port += 1;
    let text = fjord().config_text(&moved).to_string();
    std::fs::write(&path, text).expect("rewrite");
    let (ok, text) = reload(&hosts.left, &side.ifname);
    assert!(!ok && text.contains("ListenPort"), "{text}");
    assert_eq!(allowed_ips(&hosts.left, &side.ifname), before);
    let log = std::fs::read_to_string(pair.left.log_path()).unwrap_or_default();
    assert!(
        log.contains("reload refused"),
        "the log does not say so:\n{log}"
    );
    fjord_lab::traffic::ping(&hosts.right, IpAddr::V4(LEFT_OVERLAY), 2)
        .unwrap_or_else(|error| panic!("the tunnel after refused reloads: {error}{}", pair.logs()));
}

/// Whether `members` lists `key` on a direct path.
fn lists_direct(members: &[systems::Member], key: &str) -> bool {
    members
        .iter()
        .any(|member| member.public_key == key && member.path == systems::MemberPath::Direct)
}

#[test]
fn a_member_given_a_wrong_bootstrap_address_joins_once_a_reload_fixes_it() {
    use fjord_lab::systems::{FjordMesh, RunningMesh};
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    const LATE: usize = 2;
    let lan = fjord_lab::topology::Lan::new(3).expect("a LAN of three hosts");
    let workdir = WorkDir::create("reload-bootstrap").expect("work directory");
    let mut mesh = FjordMesh::new(Fjord::at(fjord_binary()))
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    let path = mesh.config_path(LATE).to_path_buf();
    let right = std::fs::read_to_string(&path).expect("read the config");
    // Port 9 of node 0's own address: nothing listens there, so every
    // initiation toward it goes unanswered.
    let (head, bootstrap) = right.split_once("Bootstrap = ").expect("a Bootstrap line");
    let (member, _) = bootstrap.split_once(':').expect("KEY@ADDR:PORT");
    let wrong = format!("{head}Bootstrap = {member}:9\n");
    std::fs::write(&path, &wrong).expect("write the wrong config");
    for node in 0..3 {
        mesh.start_node(node).expect("node started");
    }
    let late_key = mesh.public_key(LATE).to_string();
    let others: Vec<String> = [0, 1]
        .iter()
        .map(|&node| mesh.public_key(node).to_string())
        .collect();
    let pair = netns::wait_until(Duration::from_secs(30), "nodes 0 and 1 meet", || {
        mesh.members(0)
            .is_ok_and(|members| lists_direct(&members, &others[1]))
    });
    assert!(pair.is_ok(), "{pair:?}");
    std::thread::sleep(Duration::from_secs(3));
    let members = mesh.members(0).unwrap_or_default();
    assert!(
        !members.iter().any(|member| member.public_key == late_key),
        "node2 joined through a wrong address: {members:#?}"
    );

    std::fs::write(&path, &right).expect("write the right config");
    let started = Instant::now();
    let reloaded = mesh.reload(LATE).expect("reloaded");
    assert!(
        reloaded.contains("bootstrap members 0 added, 0 removed, 1 moved"),
        "{reloaded}"
    );
    let mut listed = Vec::new();
    let joined = netns::wait_until(Duration::from_secs(30), "node2 in the mesh", || {
        listed = (0..3)
            .map(|node| mesh.members(node).unwrap_or_default())
            .collect();
        lists_direct(&listed[0], &late_key)
            && lists_direct(&listed[1], &late_key)
            && others.iter().all(|key| lists_direct(&listed[LATE], key))
    });
    assert!(joined.is_ok(), "{joined:?}: {listed:#?}");
    eprintln!(
        "reload_bootstrap: {reloaded:?}; node2 met every member {:?} after the reload",
        started.elapsed()
    );
    // The same file again changes nothing.
    let again = mesh.reload(LATE).expect("reloaded again");
    assert!(!again.contains("bootstrap"), "{again}");
    drop(mesh);
    drop(lan);
}
