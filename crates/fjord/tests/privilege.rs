//! `fjord up --user nobody`: a tunnel whose two sides gave up root once
//! set up. Every thread of each process runs as nobody with exactly
//! CAP_NET_ADMIN (the one capability the README documents), and the
//! tunnel still does what a user checks: ping, a digest-checked transfer,
//! `fjord show` as root over the configuration socket, a firewall mark
//! and a new listen port set through that socket (which need the kept
//! capability), and on SIGTERM a clean exit that removes the interface.
//! An unknown user is refused with exit code 2 before anything is set up.
//!
//! The namespace test needs root; without it, it skips with one line
//! (fails under CI).

mod support;

use std::process::Command;
use std::time::Duration;

use fjord_lab::attack::connected_udp_sockets;
use fjord_lab::systems;
use fjord_lab::traffic;
use fjord_sys::privilege::{CAP_NET_ADMIN, lookup_user};
use support::{Tunnel, left_overlay, ready, right_overlay, show_text};

const USER: &str = "nobody";
const TRANSFER_BYTES: u64 = 16 * 1024 * 1024;
const SINK_PORT: u16 = 5301;

/// The fields of `/proc/PID/task/TID/status` this test reads.
#[derive(Debug, PartialEq, Eq)]
struct Credentials {
    /// Real, effective, saved and filesystem IDs.
    uids: Vec<u32>,
    gids: Vec<u32>,
    groups: Vec<u32>,
    effective: u64,
    permitted: u64,
    inheritable: u64,
    ambient: u64,
    bounding: u64,
    no_new_privs: bool,
}

fn credentials(status: &str) -> Credentials {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
            .unwrap_or_else(|| panic!("no {name} in status"))
            .trim()
            .to_string()
    };
    let ids = |name: &str| -> Vec<u32> {
        field(name)
            .split_whitespace()
            .map(|id| id.parse().expect("numeric ID"))
            .collect()
    };
    let mask = |name: &str| u64::from_str_radix(&field(name), 16).expect("hex capability mask");
    Credentials {
        uids: ids("Uid"),
        gids: ids("Gid"),
        groups: ids("Groups"),
        effective: mask("CapEff"),
        permitted: mask("CapPrm"),
        inheritable: mask("CapInh"),
        ambient: mask("CapAmb"),
        bounding: mask("CapBnd"),
        no_new_privs: field("NoNewPrivs") == "1",
    }
}

/// The credentials of every thread of `pid` (the worker, the
/// configuration server, the name re-resolver, the crypto threads).
fn thread_credentials(pid: u32) -> Vec<(String, Credentials)> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("list the threads");
    tasks
        .flatten()
        .map(|task| {
            let status =
                std::fs::read_to_string(task.path().join("status")).expect("thread status");
            let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            (name.trim().to_string(), credentials(&status))
        })
        .collect()
}

/// One `set=1` request on `ifname`'s configuration socket; its errno.
fn uapi_set(ifname: &str, body: &str) -> i32 {
    support::reply_errno(&support::uapi_request(
        ifname,
        &format!("set=1\n{body}\n\n"),
    ))
}

#[test]
fn tunnel_runs_as_nobody_with_net_admin_only() {
    let test = "tunnel_runs_as_nobody_with_net_admin_only";
    if !ready(test) {
        return;
    }
    let account = lookup_user(USER)
        .expect("user database")
        .expect("the system has a nobody account");
    let mut tunnel = Tunnel::up(test, support::fjord().with_threads(2).with_user(USER));

    // Traffic first, so the crypto threads exist when their credentials
    // are read.
    traffic::ping(&tunnel.hosts.right, left_overlay(), 3)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    let transfer = tunnel.verified_transfer(TRANSFER_BYTES, SINK_PORT);
    eprintln!("{test}: {transfer}");

    let expected = Credentials {
        uids: vec![account.uid; 4],
        gids: vec![account.gid; 4],
        groups: Vec::new(),
        effective: CAP_NET_ADMIN.mask(),
        permitted: CAP_NET_ADMIN.mask(),
        inheritable: CAP_NET_ADMIN.mask(),
        ambient: CAP_NET_ADMIN.mask(),
        bounding: CAP_NET_ADMIN.mask(),
        no_new_privs: true,
    };
    for side in [&tunnel.left, &tunnel.right] {
        let [pid] = side.pids()[..] else {
            panic!("one process per side: {:?}", side.pids());
        };
        let threads = thread_credentials(pid);
        eprintln!(
            "{test}: {} (pid {pid}) threads: {:?}",
            side.ifname(),
            threads.iter().map(|(name, _)| name).collect::<Vec<_>>()
        );
        assert!(
            threads.len() >= 3,
            "worker, uapi and crypto threads: {threads:?}"
        );
        for (name, found) in &threads {
            assert_eq!(found, &expected, "{} thread {name}", side.ifname());
        }
    }

    // Each side gave its peer a socket of its own on the port it bound
    // as root (what keeps a handshake flood off the tunnel), though
    // opened after the drop.
    for (host, side) in [
        (&tunnel.hosts.left, &tunnel.left_side),
        (&tunnel.hosts.right, &tunnel.right_side),
    ] {
        let connected = connected_udp_sockets(host, side.listen_port).expect("read /proc/net/udp");
        assert_eq!(
            connected,
            1,
            "{}",
            tunnel.context(&format!("{}: connected sockets", side.ifname))
        );
    }

    // Root still reads the state over the socket fjord made before the drop.
    let shown = show_text(&tunnel.left_side.ifname);
    assert!(
        shown.contains("latest handshake") && shown.contains("transfer"),
        "{}",
        tunnel.context(&format!("fjord show:\n{shown}"))
    );
    // A firewall mark and a new UDP socket (forced buffers, the mark)
    // need the kept CAP_NET_ADMIN; the peer follows the new port.
    let ifname = tunnel.right_side.ifname.clone();
    assert_eq!(
        uapi_set(&ifname, "fwmark=4660"),
        0,
        "{}",
        tunnel.context("fwmark")
    );
    assert_eq!(
        uapi_set(&ifname, "listen_port=51999"),
        0,
        "{}",
        tunnel.context("listen port")
    );
    traffic::wait_for_ping(&tunnel.hosts.right, left_overlay(), Duration::from_secs(10))
        .unwrap_or_else(|error| {
            panic!("{}", tunnel.context(&format!("after the rebind: {error}")))
        });
    assert!(
        show_text(&ifname).contains("fwmark: 0x1234"),
        "{}",
        show_text(&ifname)
    );

    // SIGTERM: a clean exit, and the interface is gone.
    for (side, host, name) in [
        (
            &mut tunnel.left,
            &tunnel.hosts.left,
            &tunnel.left_side.ifname,
        ),
        (
            &mut tunnel.right,
            &tunnel.hosts.right,
            &tunnel.right_side.ifname,
        ),
    ] {
        let status = side.stop().expect("the side was running");
        assert!(status.success(), "{name} exited with {status}");
        assert!(!systems::link_exists(host, name), "{name} is still there");
    }
    let _ = traffic::ping(&tunnel.hosts.left, right_overlay(), 1).expect_err("the tunnel is down");
}

#[test]
fn an_unknown_user_is_refused_before_anything_is_set_up() {
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .args([
            "up",
            "--user",
            "no-such-user-fjord",
            "/nonexistent/fjx0.conf",
        ])
        .output()
        .expect("run fjord");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--user no-such-user-fjord: no such user"),
        "{stderr}"
    );
    let output = Command::new(env!("CARGO_BIN_EXE_fjord"))
        .arg("fjx0")
        .env("FJORD_USER", "no-such-user-fjord")
        .output()
        .expect("run fjord");
    assert_eq!(output.status.code(), Some(2));
    assert!(!std::path::Path::new("/var/run/wireguard/fjx0.sock").exists());
}
