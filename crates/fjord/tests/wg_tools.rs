//! fjord as a drop-in userspace WireGuard: configured only through the
//! unchanged `wg` and `wg-quick` tools, in real namespaces (root needed).

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fjord_lab::netns::{self, Namespace, Process};
use fjord_lab::systems::wireguard::{generate_private_key, unique_ifname};
use fjord_lab::topology::TwoHosts;
use fjord_lab::traffic::tcp_bulk::BulkTransfer;
use fjord_proto::PrivateKey;

const FJORD: &str = env!("CARGO_BIN_EXE_fjord");

fn workdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fjord-wgtools-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

fn key() -> PrivateKey {
    generate_private_key().unwrap()
}

/// Runs `wg ARGS` in `ns`; panics with its stderr on failure.
fn wg(ns: &Namespace, args: &[&str]) -> String {
    ns.exec("wg", args)
        .unwrap_or_else(|error| panic!("wg {args:?}: {error}"))
}

fn wg_quick(ns: &Namespace, action: &str, conf: &Path) -> Result<String, netns::NetnsError> {
    let output = netns::run(
        ns.command("wg-quick")
            .arg(action)
            .arg(conf)
            .env("WG_QUICK_USERSPACE_IMPLEMENTATION", FJORD),
    )?;
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

/// A fjord daemon started by `wg-quick up`. Dropping the guard sends it
/// SIGTERM if it still runs, so a failing test leaves no daemon behind
/// (its UDP socket would keep the deleted namespace, and itself, alive).
struct QuickUp {
    ifname: String,
}

impl Drop for QuickUp {
    fn drop(&mut self) {
        for pid in fjord_pids(&self.ifname) {
            let _ = fjord_sys::process::send_signal(pid, fjord_sys::process::SIGTERM);
        }
    }
}

/// `wg-quick up CONF` with fjord as the userspace implementation.
fn wg_quick_up(ns: &Namespace, conf: &Path) -> QuickUp {
    wg_quick(ns, "up", conf).unwrap();
    let ifname = conf.file_stem().unwrap().to_string_lossy().into_owned();
    QuickUp { ifname }
}

fn ping(ns: &Namespace, address: &str) -> bool {
    ns.exec("ping", &["-c", "2", "-i", "0.2", "-W", "2", address])
        .is_ok()
}

/// Waits until `address` answers a ping from `ns` (handshakes take a moment).
fn wait_ping(ns: &Namespace, address: &str) {
    wait_ping_for(ns, address, Duration::from_secs(10));
}

fn wait_ping_for(ns: &Namespace, address: &str, limit: Duration) {
    netns::wait_until(limit, &format!("ping {address}"), || ping(ns, address)).unwrap();
}

/// Bytes `ifname` in `ns` has received from `peer` (base64 public key),
/// as `wg show IFNAME transfer` lists them.
fn received_from(ns: &Namespace, ifname: &str, peer: &str) -> u64 {
    let listing = wg(ns, &["show", ifname, "transfer"]);
    listing
        .lines()
        .find_map(|line| line.strip_prefix(peer))
        .and_then(|counts| counts.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no transfer line for {peer}: {listing}"))
}

/// Waits until `ifname` in `ns` has received `bytes` more from `peer`
/// than it had on entry, or until `finished` says the traffic is over;
/// returns whether the bytes came.
fn wait_for_bytes_from(
    ns: &Namespace,
    ifname: &str,
    peer: &str,
    bytes: u64,
    finished: impl Fn() -> bool,
) -> bool {
    let goal = received_from(ns, ifname, peer) + bytes;
    let mut came = false;
    netns::wait_until(
        Duration::from_secs(30),
        &format!("{bytes} more bytes from {peer} on {ifname}"),
        || {
            came = received_from(ns, ifname, peer) >= goal;
            came || finished()
        },
    )
    .unwrap();
    came
}

/// The MTU the data path of fjord serving `ifname` works with: it takes
/// up `ip link set mtu` at its next housekeeping round (`get=fjord`).
fn datapath_mtu(ifname: &str) -> Option<u32> {
    uapi(ifname, "get=fjord\n\n")
        .iter()
        .find_map(|line| line.strip_prefix("datapath_mtu=")?.parse().ok())
}

/// Waits until the data paths serving `ifnames` all work with `mtu`.
fn wait_for_datapath_mtu(ifnames: &[&str], mtu: u32) {
    netns::wait_until(
        Duration::from_secs(10),
        &format!("fjord's data paths to take up MTU {mtu}"),
        || {
            ifnames
                .iter()
                .all(|ifname| datapath_mtu(ifname) == Some(mtu))
        },
    )
    .unwrap();
}

/// PIDs of fjord processes serving `ifname` (started by wg-quick, so not ours to signal).
fn fjord_pids(ifname: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.first().is_some_and(|a| a.ends_with("fjord")) && args.iter().any(|a| a == ifname) {
            pids.push(pid);
        }
    }
    pids
}

fn interface_text(key: &PrivateKey, port: u16, addresses: &str) -> String {
    format!(
        "[Interface]\nPrivateKey = {}\nListenPort = {port}\nAddress = {addresses}\n",
        key.to_base64().as_str()
    )
}

fn peer_text(key: &PrivateKey, psk: Option<&str>, endpoint: Option<&str>, allowed: &str) -> String {
    let mut text = format!(
        "\n[Peer]\nPublicKey = {}\nAllowedIPs = {allowed}\n",
        key.public_key()
    );
    if let Some(psk) = psk {
        text.push_str(&format!("PresharedKey = {psk}\n"));
    }
    if let Some(endpoint) = endpoint {
        text.push_str(&format!("Endpoint = {endpoint}\n"));
    }
    text
}

fn random_psk() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).unwrap();
    fjord_proto::PresharedKey::from_bytes(bytes)
        .to_base64()
        .to_string()
}

#[test]
fn wg_quick_brings_fjord_up_and_down() {
    let hosts = TwoHosts::direct().unwrap();
    let dir = workdir("quick");
    let (left_key, right_key) = (key(), key());
    let psk = random_psk();
    let (left_if, right_if) = (unique_ifname(), unique_ifname());
    let left_conf = dir.join(format!("{left_if}.conf"));
    let right_conf = dir.join(format!("{right_if}.conf"));
    write_private(
        &left_conf,
        &(interface_text(&left_key, 51820, "198.19.0.1/24, fd00:19::1/64")
            + &peer_text(
                &right_key,
                Some(&psk),
                Some("198.18.0.2:51820"),
                "198.19.0.2/32, fd00:19::2/128",
            )),
    );
    write_private(
        &right_conf,
        &(interface_text(&right_key, 51820, "198.19.0.2/24, fd00:19::2/64")
            + &peer_text(&left_key, Some(&psk), None, "198.19.0.1/32, fd00:19::1/128")),
    );
    let _up2 = wg_quick_up(&hosts.left, &left_conf);
    let _up3 = wg_quick_up(&hosts.right, &right_conf);

    wait_ping(&hosts.left, "198.19.0.2");
    wait_ping(&hosts.left, "fd00:19::2");
    wait_ping(&hosts.right, "198.19.0.1");

    // TCP over both overlay families, checked end to end.
    for sink in ["198.19.0.2:5201", "[fd00:19::2]:5202"] {
        let report = BulkTransfer::new(16 << 20)
            .timeout(Duration::from_secs(60))
            .run(&hosts.left, &hosts.right, sink.parse().unwrap())
            .unwrap();
        assert!(
            report.verified,
            "transfer to {sink} arrived altered: {report:?}"
        );
    }
    // UDP: datagrams echoed back through the tunnel.
    assert_udp_echo(
        &hosts.left,
        &hosts.right,
        "198.19.0.2:7001".parse().unwrap(),
    );

    let endpoints = wg(&hosts.left, &["show", &left_if, "endpoints"]);
    assert!(endpoints.contains("198.18.0.2:51820"), "{endpoints}");
    let allowed = wg(&hosts.left, &["show", &left_if, "allowed-ips"]);
    assert!(
        allowed.contains("198.19.0.2/32") && allowed.contains("fd00:19::2/128"),
        "{allowed}"
    );
    let handshakes = wg(&hosts.left, &["show", &left_if, "latest-handshakes"]);
    let stamp: u64 = handshakes
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert!(stamp > 1_700_000_000, "{handshakes}");
    let transfer = wg(&hosts.left, &["show", &left_if, "transfer"]);
    let fields: Vec<u64> = transfer
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(fields[1] > 16 << 20, "sent bytes {transfer}");
    let showconf = wg(&hosts.left, &["showconf", &left_if]);
    assert!(
        showconf.contains(&right_key.public_key().to_base64()),
        "{showconf}"
    );
    assert!(showconf.contains("PresharedKey"), "{showconf}");
    let full = wg(&hosts.left, &["show", &left_if]);
    println!("wg show {left_if} (fjord):\n{full}");

    let pids = fjord_pids(&left_if);
    assert_eq!(pids.len(), 1, "one fjord process serves {left_if}");
    wg_quick(&hosts.left, "down", &left_conf).unwrap();
    netns::wait_until(
        Duration::from_secs(5),
        "fjord to exit after wg-quick down",
        || fjord_pids(&left_if).is_empty(),
    )
    .unwrap();
    assert!(!Path::new(&format!("/var/run/wireguard/{left_if}.sock")).exists());
    wg_quick(&hosts.right, "down", &right_conf).unwrap();
    let _ = std::fs::remove_dir_all(dir);
}

fn assert_udp_echo(client: &Namespace, server: &Namespace, address: SocketAddr) {
    // Bound before the client sends; it stays in the server's namespace.
    let socket = server
        .spawn_thread(move || std::net::UdpSocket::bind(address))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let echo = std::thread::spawn(move || -> std::io::Result<u32> {
        socket.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut buf = [0u8; 2048];
        let mut echoed = 0;
        while let Ok((len, from)) = socket.recv_from(&mut buf) {
            socket.send_to(&buf[..len], from)?;
            echoed += 1;
            if echoed == 200 {
                break;
            }
        }
        Ok(echoed)
    });
    let answered = client
        .spawn_thread(move || {
            let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
            socket.set_read_timeout(Some(Duration::from_millis(500)))?;
            let mut answered = 0;
            let mut buf = [0u8; 2048];
            for i in 0..200u32 {
                let payload = [i.to_le_bytes().as_slice(), &[7u8; 996]].concat();
                socket.send_to(&payload, address)?;
                if let Ok(len) = socket.recv(&mut buf)
                    && buf[..len] == payload[..]
                {
                    answered += 1;
                }
            }
            Ok(answered)
        })
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let _ = echo.join();
    assert!(
        answered >= 195,
        "only {answered} of 200 UDP datagrams came back"
    );
}

/// A hub with two peers, each on its own veth: left (B) and right (C).
struct Star {
    hub: Namespace,
    b: Namespace,
    c: Namespace,
}

fn star() -> Star {
    let hub = Namespace::create("hub").unwrap();
    let b = Namespace::create("b").unwrap();
    let c = Namespace::create("c").unwrap();
    netns::veth(&hub, "to-b", &b, "eth0").unwrap();
    netns::veth(&hub, "to-c", &c, "eth0").unwrap();
    hub.ip(&["addr", "add", "198.18.1.1/24", "dev", "to-b"])
        .unwrap();
    b.ip(&["addr", "add", "198.18.1.2/24", "dev", "eth0"])
        .unwrap();
    hub.ip(&["addr", "add", "198.18.2.1/24", "dev", "to-c"])
        .unwrap();
    c.ip(&["addr", "add", "198.18.2.2/24", "dev", "eth0"])
        .unwrap();
    Star { hub, b, c }
}

#[test]
fn live_edits_leave_other_peers_alone() {
    let net = star();
    let dir = workdir("edits");
    let (hub_key, b_key, c_key) = (key(), key(), key());
    let (hub_if, b_if, c_if) = (unique_ifname(), unique_ifname(), unique_ifname());
    let confs = [
        (
            &net.hub,
            &hub_if,
            interface_text(&hub_key, 51820, "198.19.0.1/24")
                + &peer_text(&b_key, None, Some("198.18.1.2:51820"), "198.19.0.2/32")
                + &peer_text(&c_key, None, Some("198.18.2.2:51820"), "198.19.0.3/32"),
        ),
        (
            &net.b,
            &b_if,
            interface_text(&b_key, 51820, "198.19.0.2/24")
                + &peer_text(&hub_key, None, Some("198.18.1.1:51820"), "198.19.0.0/24"),
        ),
        (
            &net.c,
            &c_if,
            interface_text(&c_key, 51820, "198.19.0.3/24")
                + &peer_text(&hub_key, None, Some("198.18.2.1:51820"), "198.19.0.0/24"),
        ),
    ];
    let mut paths = Vec::new();
    let mut daemons = Vec::new();
    for (ns, ifname, text) in &confs {
        let path = dir.join(format!("{ifname}.conf"));
        write_private(&path, text);
        daemons.push(wg_quick_up(ns, &path));
        paths.push(((*ns), path));
    }
    wait_ping(&net.c, "198.19.0.1");
    wait_ping(&net.b, "198.19.0.1");
    let c_handshake_before = wg(&net.hub, &["show", &hub_if, "latest-handshakes"]);

    // C streams to the hub while the hub's B entry is edited every which way.
    let (c_ns, hub_ns) = (&net.c, &net.hub);
    let b_pub = b_key.public_key().to_base64();
    let c_pub = c_key.public_key().to_base64();
    let new_psk_path = dir.join("psk");
    write_private(&new_psk_path, &random_psk());
    std::thread::scope(|scope| {
        let transfer = scope.spawn(|| {
            BulkTransfer::new(192 << 20)
                .timeout(Duration::from_secs(120))
                .run(c_ns, hub_ns, "198.19.0.1:5301".parse().unwrap())
                .unwrap()
        });
        let edits: Vec<Vec<&str>> = vec![
            vec![
                "set",
                &hub_if,
                "peer",
                &b_pub,
                "endpoint",
                "198.18.1.9:51820",
            ],
            vec![
                "set",
                &hub_if,
                "peer",
                &b_pub,
                "allowed-ips",
                "198.19.0.2/32,198.19.9.0/24",
            ],
            vec![
                "set",
                &hub_if,
                "peer",
                &b_pub,
                "preshared-key",
                new_psk_path.to_str().unwrap(),
            ],
            vec!["set", &hub_if, "peer", &b_pub, "persistent-keepalive", "25"],
            vec!["set", &hub_if, "peer", &b_pub, "remove"],
            vec![
                "set",
                &hub_if,
                "peer",
                &b_pub,
                "endpoint",
                "198.18.1.2:51820",
                "allowed-ips",
                "198.19.0.2/32",
            ],
            vec!["set", &hub_if, "listen-port", "51999"],
        ];
        // Each edit once C's stream is seen flowing (since the last edit).
        let mut amid_traffic = 0;
        for edit in edits {
            if wait_for_bytes_from(hub_ns, &hub_if, &c_pub, 1 << 20, || transfer.is_finished()) {
                amid_traffic += 1;
            }
            wg(hub_ns, &edit);
        }
        let report = transfer.join().unwrap();
        assert!(report.verified, "C's transfer was disturbed: {report:?}");
        println!(
            "C -> hub during edits: {:.2} Gbit/s, {} bytes verified, {amid_traffic} of 7 edits \
             made while C's stream flowed",
            report.throughput_bits_per_sec / 1e9,
            report.bytes
        );
    });
    let line_for = |text: &str, key: &str| {
        text.lines()
            .find(|l| l.contains(key))
            .unwrap_or("")
            .to_string()
    };
    let c_handshake_after = wg(&net.hub, &["show", &hub_if, "latest-handshakes"]);
    assert_eq!(
        line_for(&c_handshake_before, &c_pub),
        line_for(&c_handshake_after, &c_pub),
        "C's session was renegotiated by edits to B"
    );
    assert_eq!(
        wg(&net.hub, &["show", &hub_if, "listen-port"]).trim(),
        "51999"
    );
    // B was removed and re-added, so the hub forgot B's session while B
    // still holds it: as in WireGuard, B starts a new handshake once its
    // packets go unanswered for 15 s (KEEPALIVE + REKEY_TIMEOUT).
    wg(
        &net.b,
        &[
            "set",
            &b_if,
            "peer",
            &hub_key.public_key().to_base64(),
            "endpoint",
            "198.18.1.1:51999",
        ],
    );
    wait_ping_for(&net.b, "198.19.0.1", Duration::from_secs(30));
    for (ns, path) in paths {
        let _ = wg_quick(ns, "down", &path);
    }
    let _ = std::fs::remove_dir_all(dir);
}

/// `fjord -f IFACE` in `ns`, as a guarded process of ours.
fn start_foreground(ns: &Namespace, ifname: &str) -> Process {
    let process = ns
        .spawn(
            ns.command(FJORD)
                .arg("-f")
                .arg(ifname)
                .stderr(std::process::Stdio::null()),
        )
        .unwrap();
    let socket = format!("/var/run/wireguard/{ifname}.sock");
    netns::wait_until(
        Duration::from_secs(5),
        "fjord's configuration socket",
        || UnixStream::connect(&socket).is_ok(),
    )
    .unwrap();
    process
}

#[test]
fn interface_moved_to_another_namespace_keeps_working() {
    let hosts = TwoHosts::direct().unwrap();
    let inner = Namespace::create("inner").unwrap();
    let dir = workdir("move");
    let (left_key, right_key) = (key(), key());
    let (left_if, right_if) = (unique_ifname(), unique_ifname());

    let _left = start_foreground(&hosts.left, &left_if);
    let left_setconf = dir.join("left.setconf");
    write_private(
        &left_setconf,
        &format!(
            "[Interface]\nPrivateKey = {}\nListenPort = 51820\n{}",
            left_key.to_base64().as_str(),
            peer_text(&right_key, None, Some("198.18.0.2:51820"), "198.19.0.0/24")
        ),
    );
    wg(
        &hosts.left,
        &["setconf", &left_if, left_setconf.to_str().unwrap()],
    );
    // The WireGuard pattern: the interface moves, the UDP socket stays.
    hosts
        .left
        .ip(&["link", "set", &left_if, "netns", inner.name()])
        .unwrap();
    inner
        .ip(&["addr", "add", "198.19.0.1/24", "dev", &left_if])
        .unwrap();
    inner.ip(&["link", "set", &left_if, "up"]).unwrap();

    let right_conf = dir.join(format!("{right_if}.conf"));
    write_private(
        &right_conf,
        &(interface_text(&right_key, 51820, "198.19.0.2/24")
            + &peer_text(&left_key, None, None, "198.19.0.1/32")),
    );
    let _up5 = wg_quick_up(&hosts.right, &right_conf);

    wait_ping(&inner, "198.19.0.2");
    let report = BulkTransfer::new(32 << 20)
        .timeout(Duration::from_secs(60))
        .run(&inner, &hosts.right, "198.19.0.2:5401".parse().unwrap())
        .unwrap();
    assert!(report.verified, "{report:?}");
    // The underlay namespace has no tunnel interface and no overlay route.
    assert!(!hosts.left.links().unwrap().contains(&left_if));
    let _ = wg_quick(&hosts.right, "down", &right_conf);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn process_exits_when_its_interface_is_deleted() {
    let host = Namespace::create("del").unwrap();
    let ifname = unique_ifname();
    let mut process = start_foreground(&host, &ifname);
    host.ip(&["link", "del", &ifname]).unwrap();
    let status = process.wait_timeout(Duration::from_secs(5)).unwrap();
    assert!(status.success(), "{status}");
    assert!(!Path::new(&format!("/var/run/wireguard/{ifname}.sock")).exists());
}

/// Sends one raw request on the configuration socket; returns the reply lines.
fn uapi(ifname: &str, request: &str) -> Vec<String> {
    let mut stream = UnixStream::connect(format!("/var/run/wireguard/{ifname}.sock")).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut lines = Vec::new();
    for line in BufReader::new(stream).lines() {
        let line = line.unwrap();
        if line.is_empty() {
            break;
        }
        let done = line.starts_with("errno=");
        lines.push(line);
        if done {
            break;
        }
    }
    lines
}

#[test]
fn bad_requests_get_an_errno_and_change_nothing() {
    let host = Namespace::create("bad").unwrap();
    let ifname = unique_ifname();
    let _process = start_foreground(&host, &ifname);
    let peer = key().public_key();
    let peer_hex: String = peer.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
    let good =
        format!("set=1\nlisten_port=51830\npublic_key={peer_hex}\nallowed_ip=198.19.0.2/32\n\n");
    assert_eq!(uapi(&ifname, &good), vec!["errno=0"]);
    let before = uapi(&ifname, "get=1\n\n");

    for bad in [
        "set=1\nlisten_port=99999\n\n".to_string(),
        format!("set=1\nlisten_port=51831\npublic_key={peer_hex}\nallowed_ip=198.19.0.0/40\n\n"),
        format!("set=1\npublic_key={peer_hex}\nendpoint=not-an-address\n\n"),
        format!("set=1\npublic_key={peer_hex}\nsurprise=1\n\n"),
        "set=1\nprivate_key=abc\n\n".to_string(),
        "hello=1\n\n".to_string(),
        "set=1\nno equals sign\n\n".to_string(),
    ] {
        let reply = uapi(&ifname, &bad);
        let errno = reply
            .last()
            .and_then(|l| l.strip_prefix("errno="))
            .unwrap_or("missing");
        assert_ne!(errno, "0", "{bad:?} was accepted");
        assert_ne!(errno, "missing", "{bad:?}: no errno in {reply:?}");
    }
    let after = uapi(&ifname, "get=1\n\n");
    let stable = |lines: &[String]| -> Vec<String> {
        lines
            .iter()
            .filter(|l| !l.starts_with("last_handshake"))
            .cloned()
            .collect()
    };
    assert_eq!(
        stable(&before),
        stable(&after),
        "a refused request changed the interface"
    );
    let show = wg(&host, &["show", &ifname, "listen-port"]);
    assert_eq!(show.trim(), "51830");
}

#[test]
fn setconf_with_a_thousand_peers_and_a_hundred_thousand_routes() {
    let host = Namespace::create("big").unwrap();
    let ifname = unique_ifname();
    let _process = start_foreground(&host, &ifname);
    let dir = workdir("big");

    let mut text = format!(
        "[Interface]\nPrivateKey = {}\nListenPort = 51840\n",
        key().to_base64().as_str()
    );
    let mut expected: BTreeSet<(String, String)> = BTreeSet::new();
    // One peer with 100,000 prefixes: 65,536 IPv4 host routes in 198.18.0.0/16
    // and 34,464 IPv6 /64s in fd00::/8.
    let big = key().public_key().to_base64();
    text.push_str(&format!("\n[Peer]\nPublicKey = {big}\n"));
    let mut routes = Vec::new();
    for i in 0..65_536u32 {
        routes.push(format!("198.18.{}.{}/32", i >> 8, i & 0xff));
    }
    for i in 0..34_464u32 {
        routes.push(format!("fd00:aa:{:x}:{:x}::/64", i >> 16, i & 0xffff));
    }
    for chunk in routes.chunks(500) {
        text.push_str(&format!("AllowedIPs = {}\n", chunk.join(",")));
    }
    for route in &routes {
        // Compare in canonical form (`fd00:aa:0:0::/64` prints as `fd00:aa::/64`).
        let canonical = route.parse::<fjord_mesh::Cidr>().unwrap().to_string();
        expected.insert((big.clone(), canonical));
    }
    // 999 more peers with one /32 each in 198.19.0.0/16.
    for i in 1..1000u32 {
        let public = key().public_key().to_base64();
        let route = format!("198.19.{}.{}/32", i >> 8, i & 0xff);
        text.push_str(&format!(
            "\n[Peer]\nPublicKey = {public}\nAllowedIPs = {route}\n"
        ));
        expected.insert((public, route));
    }
    let path = dir.join("big.setconf");
    write_private(&path, &text);

    let started = Instant::now();
    wg(&host, &["setconf", &ifname, path.to_str().unwrap()]);
    let applied = started.elapsed();
    let started = Instant::now();
    let listed = wg(&host, &["show", &ifname, "allowed-ips"]);
    let read_back = started.elapsed();
    println!(
        "setconf of 1,000 peers / {} prefixes: applied in {:.2} s, `wg show allowed-ips` in {:.2} s",
        expected.len(),
        applied.as_secs_f64(),
        read_back.as_secs_f64()
    );
    let mut reported: BTreeSet<(String, String)> = BTreeSet::new();
    for line in listed.lines() {
        let mut fields = line.split_whitespace();
        let peer = fields.next().unwrap().to_string();
        for route in fields.filter(|f| *f != "(none)") {
            reported.insert((peer.clone(), route.to_string()));
        }
    }
    assert_eq!(reported.len(), expected.len());
    assert!(
        reported == expected,
        "wg show allowed-ips differs from what was set"
    );
    let peers = wg(&host, &["show", &ifname, "peers"]);
    assert_eq!(peers.lines().count(), 1000);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn mtu_changes_while_traffic_flows() {
    let hosts = TwoHosts::direct().unwrap();
    let dir = workdir("mtu");
    let (left_key, right_key) = (key(), key());
    let (left_if, right_if) = (unique_ifname(), unique_ifname());
    let left_conf = dir.join(format!("{left_if}.conf"));
    let right_conf = dir.join(format!("{right_if}.conf"));
    write_private(
        &left_conf,
        &(interface_text(&left_key, 51820, "198.19.0.1/24")
            + &peer_text(&right_key, None, Some("198.18.0.2:51820"), "198.19.0.2/32")),
    );
    write_private(
        &right_conf,
        &(interface_text(&right_key, 51820, "198.19.0.2/24")
            + &peer_text(&left_key, None, None, "198.19.0.1/32")),
    );
    let _up6 = wg_quick_up(&hosts.left, &left_conf);
    let _up7 = wg_quick_up(&hosts.right, &right_conf);
    wait_ping(&hosts.left, "198.19.0.2");
    let (left, right) = (&hosts.left, &hosts.right);
    let left_pub = left_key.public_key().to_base64();
    let both = [left_if.as_str(), right_if.as_str()];
    std::thread::scope(|scope| {
        let transfer = scope.spawn(|| {
            BulkTransfer::new(256 << 20)
                .timeout(Duration::from_secs(120))
                .run(left, right, "198.19.0.2:5501".parse().unwrap())
                .unwrap()
        });
        // Each change once the stream is seen flowing at the MTU before it.
        let mut amid_traffic = 0;
        for mtu in [34000, 1280, 9000, 1420] {
            if wait_for_bytes_from(right, &right_if, &left_pub, 4 << 20, || {
                transfer.is_finished()
            }) {
                amid_traffic += 1;
            }
            for (ns, ifname) in [(left, &left_if), (right, &right_if)] {
                ns.ip(&["link", "set", "dev", ifname, "mtu", &mtu.to_string()])
                    .unwrap();
            }
            wait_for_datapath_mtu(&both, mtu);
        }
        let report = transfer.join().unwrap();
        assert!(report.verified, "{report:?}");
        println!("{amid_traffic} of 4 MTU changes made while the stream flowed");
    });
    // A 34 KB MTU carries a 30,000-byte ping in one tunnel packet.
    for (ns, ifname) in [(left, &left_if), (right, &right_if)] {
        ns.ip(&["link", "set", "dev", ifname, "mtu", "34000"])
            .unwrap();
    }
    wait_for_datapath_mtu(&both, 34000);
    let out = left
        .exec(
            "ping",
            &[
                "-c",
                "2",
                "-s",
                "30000",
                "-M",
                "do",
                "-W",
                "2",
                "198.19.0.2",
            ],
        )
        .unwrap();
    assert!(out.contains("2 received"), "{out}");
    let _ = wg_quick(left, "down", &left_conf);
    let _ = wg_quick(right, "down", &right_conf);
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn ipv6_endpoints_carry_the_tunnel() {
    let hosts = TwoHosts::direct().unwrap();
    for (ns, address) in [
        (&hosts.left, "fd00:18::1/64"),
        (&hosts.right, "fd00:18::2/64"),
    ] {
        ns.ip(&["-6", "addr", "add", address, "dev", "eth0", "nodad"])
            .unwrap();
    }
    let dir = workdir("v6");
    let (left_key, right_key) = (key(), key());
    let (left_if, right_if) = (unique_ifname(), unique_ifname());
    let left_conf = dir.join(format!("{left_if}.conf"));
    let right_conf = dir.join(format!("{right_if}.conf"));
    write_private(
        &left_conf,
        &(interface_text(&left_key, 51820, "198.19.0.1/24")
            + &peer_text(
                &right_key,
                None,
                Some("[fd00:18::2]:51820"),
                "198.19.0.2/32",
            )),
    );
    write_private(
        &right_conf,
        &(interface_text(&right_key, 51820, "198.19.0.2/24")
            + &peer_text(&left_key, None, None, "198.19.0.1/32")),
    );
    let _up8 = wg_quick_up(&hosts.left, &left_conf);
    let _up9 = wg_quick_up(&hosts.right, &right_conf);
    wait_ping(&hosts.left, "198.19.0.2");
    let endpoints = wg(&hosts.right, &["show", &right_if, "endpoints"]);
    assert!(endpoints.contains("[fd00:18::1]:51820"), "{endpoints}");
    let report = BulkTransfer::new(16 << 20)
        .timeout(Duration::from_secs(60))
        .run(
            &hosts.right,
            &hosts.left,
            "198.19.0.1:5601".parse().unwrap(),
        )
        .unwrap();
    assert!(report.verified, "{report:?}");
    let _ = wg_quick(&hosts.left, "down", &left_conf);
    let _ = wg_quick(&hosts.right, "down", &right_conf);
    let _ = std::fs::remove_dir_all(dir);
}

/// Left sits behind a masquerading router; its persistent keepalive keeps
/// the NAT mapping open and, when the router's public address changes,
/// tells right where left went.
#[test]
fn roaming_behind_nat_with_persistent_keepalive() {
    let left = Namespace::create("natl").unwrap();
    let router = Namespace::create("natr").unwrap();
    let right = Namespace::create("natp").unwrap();
    netns::veth(&left, "eth0", &router, "inside").unwrap();
    netns::veth(&router, "outside", &right, "eth0").unwrap();
    left.ip(&["addr", "add", "198.18.5.2/24", "dev", "eth0"])
        .unwrap();
    left.ip(&["route", "add", "198.18.0.0/24", "via", "198.18.5.1"])
        .unwrap();
    router
        .ip(&["addr", "add", "198.18.5.1/24", "dev", "inside"])
        .unwrap();
    router
        .ip(&["addr", "add", "198.18.0.1/24", "dev", "outside"])
        .unwrap();
    right
        .ip(&["addr", "add", "198.18.0.2/24", "dev", "eth0"])
        .unwrap();
    router
        .exec("sysctl", &["-q", "-w", "net.ipv4.ip_forward=1"])
        .unwrap();
    let dir = workdir("nat");
    let rules = dir.join("nat.nft");
    std::fs::write(
        &rules,
        "table ip nat {\n  chain post {\n    type nat hook postrouting priority 100;\n    \
         oifname \"outside\" ip saddr 198.18.5.0/24 masquerade\n  }\n}\n",
    )
    .unwrap();
    netns::run(router.command("nft").arg("-f").arg(&rules)).unwrap();

    let (left_key, right_key) = (key(), key());
    let (left_if, right_if) = (unique_ifname(), unique_ifname());
    let left_conf = dir.join(format!("{left_if}.conf"));
    let right_conf = dir.join(format!("{right_if}.conf"));
    write_private(
        &left_conf,
        &(interface_text(&left_key, 51820, "198.19.0.1/24")
            + &peer_text(&right_key, None, Some("198.18.0.2:51820"), "198.19.0.2/32")
            + "PersistentKeepalive = 1\n"),
    );
    write_private(
        &right_conf,
        &(interface_text(&right_key, 51820, "198.19.0.2/24")
            + &peer_text(&left_key, None, None, "198.19.0.1/32")),
    );
    let _up10 = wg_quick_up(&right, &right_conf);
    let _up11 = wg_quick_up(&left, &left_conf);
    // Right never had left's address; the keepalive taught it the NAT's.
    wait_ping(&right, "198.19.0.1");
    let endpoint = wg(&right, &["show", &right_if, "endpoints"]);
    assert!(endpoint.contains("198.18.0.1:"), "{endpoint}");

    // The router's public address changes (masquerade forgets its mappings).
    router
        .ip(&["addr", "del", "198.18.0.1/24", "dev", "outside"])
        .unwrap();
    router
        .ip(&["addr", "add", "198.18.0.3/24", "dev", "outside"])
        .unwrap();
    netns::wait_until(
        Duration::from_secs(10),
        "right to learn left's new address",
        || wg(&right, &["show", &right_if, "endpoints"]).contains("198.18.0.3:"),
    )
    .unwrap();
    wait_ping(&right, "198.19.0.1");
    let _ = wg_quick(&left, "down", &left_conf);
    let _ = wg_quick(&right, "down", &right_conf);
    let _ = std::fs::remove_dir_all(dir);
}
