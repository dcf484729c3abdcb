//! fjord↔fjord through a real tunnel between two namespaces joined by
//! veth (underlay 198.18.0.1/.2, overlay 198.19.0.1/24 and .2/24): ping
//! both ways, 256 MiB of TCP with identical XXH3-128 digests (beside the bare veth
//! rate measured the same way), recovery from a SIGKILLed side, and a
//! clean exit on SIGTERM.
//!
//! Needs root; without it each test skips with one line (fails under CI).

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use fjord_lab::netns;
use fjord_lab::systems;
use fjord_lab::systems::wireguard::{Fjord, Implementation};
use fjord_lab::topology::{RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic::{self, BulkTransfer};
use support::{Tunnel, fjord, left_overlay, ready, right_overlay, show_json, show_text};

const TRANSFER_BYTES: u64 = 256 * 1024 * 1024;
const SINK_PORT: u16 = 5201;

#[test]
fn fjord_to_fjord_ping_and_bulk_transfer() {
    ping_and_bulk_transfer(
        "fjord_to_fjord_ping_and_bulk_transfer",
        fjord().with_threads(1),
    );
}

/// The same with the crypto of large batches spread over three threads
/// (more than this machine has cores, so halves really do run elsewhere
/// and late): nothing may be lost, corrupted or reordered on the way.
#[test]
fn fjord_with_crypto_threads_carries_bulk_intact() {
    let test = "fjord_with_crypto_threads_carries_bulk_intact";
    let Some(tunnel) = ping_and_bulk_transfer(test, fjord().with_threads(3)) else {
        return;
    };
    // The sender sealed, and the receiver opened, batches in shared halves.
    let sender = fjord_counters(&tunnel.left_side.ifname);
    let receiver = fjord_counters(&tunnel.right_side.ifname);
    eprintln!(
        "{test}: crypto splits: sender {:?}, receiver {:?}",
        sender.get("crypto_splits"),
        receiver.get("crypto_splits")
    );
    for (side, counters) in [("sender", &sender), ("receiver", &receiver)] {
        assert!(
            counters
                .get("crypto_splits")
                .is_some_and(|&splits| splits > 0),
            "{}",
            tunnel.context(&format!("{side} never shared its crypto: {counters:?}"))
        );
    }
}

/// Pings both ways and moves 256 MiB (and as much over bare veth); the
/// tunnel, still up, for further checks (`None`: skipped, not root).
fn ping_and_bulk_transfer(test: &str, fjord: Fjord) -> Option<Tunnel> {
    if !ready(test) {
        return None;
    }
    let tunnel = Tunnel::up(test, fjord);
    let hosts = &tunnel.hosts;
    traffic::ping(&hosts.left, right_overlay(), 3)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    traffic::ping(&hosts.right, left_overlay(), 3)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    // Fragmented echoes: re-cut into halves by the sending fjord, joined
    // by the receiving one.
    for (from, to) in [
        (&hosts.left, right_overlay()),
        (&hosts.right, left_overlay()),
    ] {
        traffic::ping_over_tunnel_mtu(from, to)
            .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    }

    let transfer = BulkTransfer::new(TRANSFER_BYTES).timeout(Duration::from_secs(180));
    let bare = transfer
        .run(
            &hosts.left,
            &hosts.right,
            SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), SINK_PORT),
        )
        .expect("bare veth transfer");
    assert!(bare.verified, "bare veth: {bare:?}");
    let tunneled = transfer
        .run(
            &hosts.left,
            &hosts.right,
            SocketAddr::new(right_overlay(), SINK_PORT + 1),
        )
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&format!("tunnel transfer: {error}"))));
    eprintln!("{test}: bare veth: {bare}");
    eprintln!("{test}: fjord tunnel: {tunneled}");
    eprintln!(
        "{test}: fjord/bare = {:.1} %",
        100.0 * tunneled.throughput_bits_per_sec / bare.throughput_bits_per_sec
    );
    assert!(
        tunneled.verified,
        "{}",
        tunnel.context(&format!("{tunneled:?}"))
    );
    assert_eq!(tunneled.bytes, TRANSFER_BYTES);
    assert_eq!(tunneled.sender_digest, tunneled.receiver_digest);
    assert_ciphers(&tunnel, &tunnel.fjord.expected_cipher().to_string());
    Some(tunnel)
}

/// Both sides report `cipher` toward each other (`fjord show`, text and
/// JSON), and neither refused a datagram for its cipher.
fn assert_ciphers(tunnel: &Tunnel, cipher: &str) {
    for ifname in [&tunnel.left_side.ifname, &tunnel.right_side.ifname] {
        let shown = show_json(ifname);
        assert_eq!(
            shown.ciphers,
            vec![Some(cipher.to_string())],
            "{}",
            tunnel.context(&format!("{ifname}'s cipher"))
        );
        assert!(show_text(ifname).contains(&format!("  cipher: {cipher}\n")));
        for reason in ["cipher_not_negotiated", "cipher_downgraded"] {
            assert_eq!(shown.drops(reason), 0, "{}", tunnel.context(reason));
        }
    }
}

/// Two fjord nodes negotiate inside the session: AES-256-GCM where both
/// have hardware AES and allow it; one side forced to ChaCha20-Poly1305
/// (`--cipher chacha20-poly1305`) keeps the whole tunnel on it. Either way
/// 32 MiB cross intact.
#[test]
fn fjord_nodes_negotiate_their_data_cipher() {
    let test = "fjord_nodes_negotiate_their_data_cipher";
    if !ready(test) {
        return;
    }
    for (left, right) in [
        (fjord(), fjord()),
        (fjord(), fjord().chacha_only()),
        (fjord().chacha_only(), fjord()),
    ] {
        let expected = if left.expected_cipher() == right.expected_cipher() {
            left.expected_cipher()
        } else {
            fjord_proto::DataCipher::ChaCha20Poly1305
        };
        let hosts = TwoHosts::direct().expect("build two hosts");
        let tunnel = Tunnel::up_pair(test, left, right, hosts);
        let transfer = BulkTransfer::new(32 << 20).timeout(Duration::from_secs(120));
        let report = transfer
            .run(
                &tunnel.hosts.left,
                &tunnel.hosts.right,
                SocketAddr::new(right_overlay(), SINK_PORT),
            )
            .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
        assert!(
            report.verified,
            "{}",
            tunnel.context(&format!("{report:?}"))
        );
        eprintln!("{test}: {expected}: {report}");
        assert_ciphers(&tunnel, &expected.to_string());
    }
}

#[test]
fn fjord_recovers_after_a_side_is_killed() {
    let test = "fjord_recovers_after_a_side_is_killed";
    if !ready(test) {
        return;
    }
    let mut tunnel = Tunnel::up(test, fjord());
    let status = tunnel.right.kill().expect("the right side was running");
    eprintln!("{test}: right side killed ({status})");
    netns::wait_until(
        Duration::from_secs(2),
        "the killed side's interface to vanish",
        || !systems::link_exists(&tunnel.hosts.right, &tunnel.right_side.ifname),
    )
    .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));

    // A fresh process with the same config; the left side keeps running and
    // must accept the new handshake.
    let restarted = Instant::now();
    tunnel.right = fjord()
        .start(
            &tunnel.hosts.right,
            &tunnel.right_side,
            tunnel.workdir.path(),
        )
        .unwrap_or_else(|error| panic!("restart right fjord: {error}"));
    let budget = Duration::from_secs(5);
    traffic::wait_for_ping(
        &tunnel.hosts.right,
        left_overlay(),
        budget.saturating_sub(restarted.elapsed()),
    )
    .unwrap_or_else(|error| {
        panic!(
            "{}",
            tunnel.context(&format!("restarted side → survivor: {error}"))
        )
    });
    traffic::wait_for_ping(
        &tunnel.hosts.left,
        right_overlay(),
        budget.saturating_sub(restarted.elapsed()),
    )
    .unwrap_or_else(|error| {
        panic!(
            "{}",
            tunnel.context(&format!("survivor → restarted side: {error}"))
        )
    });
    eprintln!(
        "{test}: tunnel back {:?} after the restart",
        restarted.elapsed()
    );
    assert!(restarted.elapsed() <= budget);
    traffic::ping(&tunnel.hosts.left, right_overlay(), 3)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
}

#[test]
fn fjord_exits_cleanly_on_sigterm() {
    let test = "fjord_exits_cleanly_on_sigterm";
    if !ready(test) {
        return;
    }
    let mut tunnel = Tunnel::up(test, fjord());
    let status = tunnel
        .left
        .stop()
        .unwrap_or_else(|| panic!("{}", tunnel.context("the left side was not running")));
    assert!(
        status.success(),
        "{}",
        tunnel.context(&format!("fjord exited with {status} on SIGTERM"))
    );
    assert!(
        !systems::link_exists(&tunnel.hosts.left, &tunnel.left_side.ifname),
        "{}",
        tunnel.context("interface still there after fjord exited")
    );
    // The other side is unaffected.
    assert!(systems::link_exists(
        &tunnel.hosts.right,
        &tunnel.right_side.ifname
    ));
}

/// fjord's own counters from its UAPI socket (`get=fjord`).
fn fjord_counters(ifname: &str) -> std::collections::HashMap<String, u64> {
    use std::io::{Read, Write};
    let path = format!("/var/run/wireguard/{ifname}.sock");
    let mut socket = std::os::unix::net::UnixStream::connect(&path).expect("UAPI socket");
    socket.write_all(b"get=fjord\n\n").expect("UAPI request");
    let mut reply = String::new();
    socket.read_to_string(&mut reply).expect("UAPI reply");
    reply
        .lines()
        .filter_map(|line| {
            let (key, value) = line.split_once('=')?;
            Some((key.to_string(), value.parse().ok()?))
        })
        .collect()
}

const BURSTS: usize = 20;
const BURST_DATAGRAMS: usize = 40;

/// The datagrams of one kind of UDP burst test.
#[derive(Clone, Copy)]
struct Bursts {
    /// Full-size datagram length.
    datagram_bytes: usize,
    /// One `send` per burst with UDP GSO (only for datagrams that fit the
    /// tunnel's MTU), or one `sendmmsg`.
    gso: bool,
}

impl Bursts {
    /// Datagram `index`: its index, then bytes derived from it. The last
    /// of each burst is shorter, as GSO allows.
    fn datagram(self, index: usize) -> Vec<u8> {
        let len = if index % BURST_DATAGRAMS == BURST_DATAGRAMS - 1 {
            self.datagram_bytes / 3
        } else {
            self.datagram_bytes
        };
        let mut datagram = (index as u32).to_be_bytes().to_vec();
        datagram.extend((4..len).map(|i| (i * 31 + index * 7) as u8));
        datagram
    }

    /// Sends the bursts, each in one system call, so that it crosses the
    /// tunnel back to back and reaches the far side in few receive
    /// batches. A burst leaves once the previous one has arrived
    /// (`arrived` counts datagrams at the receiver), so a busy machine
    /// cannot pile them up.
    fn send(self, destination: SocketAddr, arrived: &AtomicUsize) -> std::io::Result<()> {
        use std::os::fd::AsFd;
        let socket = std::net::UdpSocket::bind("0.0.0.0:0")?;
        socket.connect(destination)?;
        if self.gso {
            fjord_sys::socket::set_int_option(
                socket.as_fd(),
                libc::SOL_UDP,
                libc::UDP_SEGMENT,
                self.datagram_bytes as libc::c_int,
            )?;
        }
        for burst in 0..BURSTS {
            let datagrams: Vec<Vec<u8>> = (0..BURST_DATAGRAMS)
                .map(|i| self.datagram(burst * BURST_DATAGRAMS + i))
                .collect();
            if self.gso {
                socket.send(&datagrams.concat())?;
            } else {
                let taken = fjord_sys::mmsg::send_batch(
                    socket.as_fd(),
                    datagrams.iter().map(Vec::as_slice),
                )?;
                assert_eq!(taken, BURST_DATAGRAMS, "one sendmmsg takes the burst");
            }
            let sent = (burst + 1) * BURST_DATAGRAMS;
            netns::wait_until(Duration::from_secs(3), "the burst to arrive", || {
                arrived.load(Ordering::Acquire) >= sent
            })
            .map_err(|_| {
                std::io::Error::other(format!(
                    "burst {burst}: {} of the {sent} datagrams sent so far arrived within 3 s",
                    arrived.load(Ordering::Acquire)
                ))
            })?;
        }
        Ok(())
    }
}

#[test]
fn udp_bursts_reach_the_kernel_merged_intact_and_in_order() {
    let bursts = Bursts {
        datagram_bytes: 1200,
        gso: true,
    };
    // Four packets or more per TUN write on average.
    udp_bursts_arrive_merged(
        "udp_bursts_reach_the_kernel_merged_intact_and_in_order",
        bursts,
        4,
    );
}

/// 1,500-byte datagrams through a 1,420-byte tunnel: two IPv4 fragments
/// each, which the sending fjord re-cuts into halves of one length and the
/// receiving one joins, and then merges like any UDP.
#[test]
fn fragmented_udp_bursts_are_joined_intact_and_in_order() {
    let bursts = Bursts {
        datagram_bytes: 1472,
        gso: false,
    };
    // Fewer writes than datagrams: joined, and merged too.
    udp_bursts_arrive_merged(
        "fragmented_udp_bursts_are_joined_intact_and_in_order",
        bursts,
        2,
    );
}

/// Sends `bursts` through a fjord tunnel and checks that every datagram
/// arrived intact and in order, in at most one TUN write per
/// `packets_per_write` packets fjord received.
fn udp_bursts_arrive_merged(test: &str, bursts: Bursts, packets_per_write: u64) {
    if !ready(test) {
        return;
    }
    let tunnel = Tunnel::up(test, fjord());
    let ifname = tunnel.right_side.ifname.clone();
    let before = fjord_counters(&ifname);
    let sink = SocketAddr::new(right_overlay(), 6000);
    // Bound before anything is sent; it stays in the right namespace.
    let socket = tunnel
        .hosts
        .right
        .spawn_thread(move || std::net::UdpSocket::bind(sink))
        .expect("bind thread")
        .join()
        .expect("bind thread")
        .expect("bind the sink");
    let arrived = Arc::new(AtomicUsize::new(0));
    let counted = arrived.clone();
    let receiver = std::thread::spawn(move || -> std::io::Result<Vec<Vec<u8>>> {
        socket.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut received = Vec::new();
        let mut buffer = [0u8; 2048];
        while received.len() < BURSTS * BURST_DATAGRAMS {
            match socket.recv(&mut buffer) {
                Ok(len) => received.push(buffer[..len].to_vec()),
                Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(error) => return Err(error),
            }
            counted.store(received.len(), Ordering::Release);
        }
        Ok(received)
    });
    tunnel
        .hosts
        .left
        .spawn_thread(move || bursts.send(sink, &arrived))
        .expect("sender thread")
        .join()
        .expect("sender")
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&format!("send: {error}"))));
    let received = receiver.join().expect("receiver").expect("receive");
    let after = fjord_counters(&ifname);
    let delta = |key: &str| after[key] - before.get(key).copied().unwrap_or(0);
    eprintln!(
        "{test}: {} datagrams received; right side: {} packets to TUN in {} writes, {} write errors",
        received.len(),
        delta("rx_packets"),
        delta("tun_writes"),
        delta("tun_write_errors"),
    );
    let expected: Vec<Vec<u8>> = (0..BURSTS * BURST_DATAGRAMS)
        .map(|index| bursts.datagram(index))
        .collect();
    assert!(
        received == expected,
        "{}",
        tunnel.context(&format!(
            "{} of {} datagrams arrived, or some changed or out of order",
            received.len(),
            expected.len()
        ))
    );
    assert_eq!(
        delta("tun_write_errors"),
        0,
        "{}",
        tunnel.context("TUN write errors")
    );
    assert!(
        delta("tun_writes") < delta("rx_packets") / packets_per_write,
        "{}",
        tunnel.context("bursts were not merged into few TUN writes")
    );
    let log = std::fs::read_to_string(tunnel.right.log_path()).unwrap_or_default();
    assert!(
        !log.contains("refused"),
        "{}",
        tunnel.context("fjord fell back")
    );
}
