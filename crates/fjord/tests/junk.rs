//! Bad datagrams at a real fjord tunnel's UDP port while digest-checked
//! TCP transfers run through it, between two namespaces joined by veth:
//! random bytes, transport packets captured off the wire and then
//! truncated, tampered with or replayed unchanged. Each kind must be
//! refused and counted under its reason in `fjord show`, the transfers
//! must arrive intact, the peer's endpoint must stay where it was, and
//! fjord's log must not grow by a line per bad datagram (nor by a line per
//! move of the endpoint when replayed copies outrun their originals).
//!
//! A tampered copy of a packet fjord already received is refused by the
//! replay window before any decryption; tampering that reaches the AEAD
//! needs a counter fjord has not seen, so the tampered kind carries one.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems::wireguard::LISTEN_PORT;
use fjord_lab::topology::{self, HOST_LINK, RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic::{BulkReport, BulkTransfer};
use fjord_sys::mmsg::{Received, recv_batch};
use fjord_sys::packet::PacketSocket;
use support::{Tunnel, fjord, log_lines, ready, right_overlay, show_json, show_text};

/// Each transfer; they run back to back until every kind was sent.
const TRANSFER_BYTES: u64 = 32 * 1024 * 1024;
const SINK_PORT: u16 = 5301;
/// Real transport packets captured to truncate, tamper with and replay.
const CAPTURED: usize = 300;
/// Bad datagrams of each kind.
const PER_KIND: usize = 2000;
/// Datagrams sent back to back before a millisecond's pause.
const BURST: usize = 50;
/// Every reason a kind below may land in.
const WATCHED: [&str; 6] = [
    "unknown_message_type",
    "malformed_message",
    "authentication_failed",
    "unknown_receiver_index",
    "replayed_counter",
    "counter_too_old",
];

/// xorshift64*: reproducible junk.
struct Junk(u64);

impl Junk {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }

    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// The UDP payload of an IPv4 frame addressed to `destination`, if it is one.
fn udp_payload_to(frame: &[u8], destination: SocketAddr) -> Option<&[u8]> {
    let ip = frame.get(14..)?;
    if frame.get(12..14)? != [0x08, 0x00] || ip.first()? >> 4 != 4 || *ip.get(9)? != 17 {
        return None;
    }
    let header_len = usize::from(ip[0] & 0x0f) * 4;
    let to = Ipv4Addr::new(*ip.get(16)?, ip[17], ip[18], ip[19]);
    let udp = ip.get(header_len..)?;
    let port = u16::from_be_bytes([*udp.get(2)?, *udp.get(3)?]);
    let udp_len = usize::from(u16::from_be_bytes([*udp.get(4)?, *udp.get(5)?]));
    if SocketAddr::from((to, port)) != destination {
        return None;
    }
    udp.get(8..udp_len)
}

/// Hands `each` copies of transport data messages (not keepalives)
/// arriving at `destination`, read off `HOST_LINK` in the caller's
/// namespace, until it has seen `count` or `timeout` passed; how many.
fn capture_transport_packets(
    destination: SocketAddr,
    count: usize,
    timeout: Duration,
    mut each: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<usize> {
    let socket = PacketSocket::bind(HOST_LINK)?;
    socket.set_ignore_outgoing(true)?;
    let mut frames = vec![vec![0u8; 2048]; 64];
    let mut received = [Received::default(); 64];
    let mut captured = 0;
    let deadline = Instant::now() + timeout;
    while captured < count && Instant::now() < deadline {
        let buffers = frames.iter_mut().map(Vec::as_mut_slice);
        match recv_batch(socket.as_fd(), buffers, &mut received) {
            Ok(n) => {
                for (frame, meta) in frames.iter().zip(&received).take(n) {
                    let frame = &frame[..meta.len.min(frame.len())];
                    if let Some(payload) = udp_payload_to(frame, destination)
                        && payload.first() == Some(&4)
                        && payload.len() > 32
                        && captured < count
                    {
                        each(payload)?;
                        captured += 1;
                    }
                }
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => {
                // Nothing captured yet: look again in a moment.
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(error) => return Err(error),
        }
    }
    Ok(captured)
}

/// How a kind's datagrams reach fjord.
enum Delivery {
    /// Sent from the left host, in bursts.
    Prepared(Vec<Vec<u8>>),
    /// This many transport packets, each sent again from the right host
    /// the moment it is seen on the wire.
    ReplayedAtOnce(usize),
}

/// The transport packet's counter, moved to one fjord has not seen.
fn with_fresh_counter(packet: &mut [u8], junk: &mut Junk) {
    let counter = u64::from_le_bytes(packet[8..16].try_into().expect("eight bytes"));
    let fresh = counter + (1 << 32) + junk.next() % (1 << 20);
    packet[8..16].copy_from_slice(&fresh.to_le_bytes());
}

/// The kinds of bad datagram, each with the reasons it must be counted under.
fn kinds(
    captured: &[Vec<u8>],
    junk: &mut Junk,
) -> Vec<(&'static str, Vec<&'static str>, Delivery)> {
    let pick = |junk: &mut Junk| captured[junk.below(captured.len())].clone();
    let random_bytes = (0..PER_KIND)
        .map(|_| {
            let len = 4 + junk.below(1400 - 4);
            let mut datagram = junk.bytes(len);
            // A valid message type (1–4, upper bytes zero) is a one in a
            // billion chance; rule it out rather than be lucky.
            datagram[1] |= 0x80;
            datagram
        })
        .collect();
    let short_bytes = (0..PER_KIND / 4)
        .map(|_| {
            let len = 1 + junk.below(3);
            junk.bytes(len)
        })
        .collect();
    let truncated = (0..PER_KIND)
        .map(|_| {
            let mut packet = pick(junk);
            packet.truncate(4 + junk.below(32 - 4));
            packet
        })
        .collect();
    let tampered = (0..PER_KIND)
        .map(|index| {
            let mut packet = pick(junk);
            with_fresh_counter(&mut packet, junk);
            if index % 2 == 0 {
                // One bit flipped in the ciphertext or the tag.
                let at = 16 + junk.below(packet.len() - 16);
                packet[at] ^= 1 << junk.below(8);
            } else {
                // Cut short, but still a whole header and a tag's length.
                let len = 32 + junk.below(packet.len() - 32);
                packet.truncate(len);
            }
            packet
        })
        .collect();
    let misaddressed = (0..PER_KIND / 2)
        .map(|_| {
            let mut packet = pick(junk);
            let index = junk.next() as u32;
            packet[4..8].copy_from_slice(&index.to_le_bytes());
            packet
        })
        .collect();
    let replayed = (0..PER_KIND).map(|_| pick(junk)).collect();
    use Delivery::{Prepared, ReplayedAtOnce};
    // A replay within the last 2,048 packets is a replayed counter; the
    // packets captured earlier are far behind the window by now.
    let replays = ["replayed_counter", "counter_too_old"];
    vec![
        (
            "random bytes",
            vec!["unknown_message_type"],
            Prepared(random_bytes),
        ),
        (
            "random bytes shorter than a type",
            vec!["malformed_message"],
            Prepared(short_bytes),
        ),
        (
            "truncated transport packets",
            vec!["malformed_message"],
            Prepared(truncated),
        ),
        (
            "tampered transport packets",
            vec!["authentication_failed"],
            Prepared(tampered),
        ),
        (
            "transport packets for a random receiver",
            vec!["unknown_receiver_index"],
            Prepared(misaddressed),
        ),
        (
            "transport packets replayed later",
            replays.to_vec(),
            Prepared(replayed),
        ),
        (
            "transport packets replayed at once",
            replays.to_vec(),
            ReplayedAtOnce(PER_KIND),
        ),
    ]
}

/// The kernel's count of UDP datagrams dropped for a full receive buffer
/// in `namespace` (`/proc/net/snmp`, `Udp: … RcvbufErrors`).
fn udp_receive_buffer_errors(namespace: &Namespace) -> u64 {
    let snmp = namespace
        .exec("cat", &["/proc/net/snmp"])
        .expect("read /proc/net/snmp");
    let mut udp = snmp.lines().filter(|line| line.starts_with("Udp:"));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(name, _)| *name == "RcvbufErrors")
        .and_then(|(_, value)| value.parse().ok())
        .unwrap_or(0)
}

fn watched_sum(drops: &BTreeMap<String, u64>, reasons: &[&str]) -> u64 {
    reasons
        .iter()
        .map(|reason| drops.get(*reason).copied().unwrap_or(0))
        .sum()
}

/// Digest-checked transfers back to back until `stop`; their reports.
fn transfers_until(
    hosts: &TwoHosts,
    stop: &AtomicBool,
    started: &AtomicBool,
) -> Vec<Result<BulkReport, String>> {
    let transfer = BulkTransfer::new(TRANSFER_BYTES).timeout(Duration::from_secs(60));
    let mut reports = Vec::new();
    for round in 0.. {
        let sink = SocketAddr::new(right_overlay(), SINK_PORT + round);
        started.store(true, Ordering::Release);
        let report = transfer
            .run(&hosts.left, &hosts.right, sink)
            .map_err(|error| error.to_string());
        let failed = report.is_err();
        reports.push(report);
        if failed || stop.load(Ordering::Acquire) {
            break;
        }
    }
    reports
}

/// Sends each kind of bad datagram at the right side's fjord while the
/// transfers run, checking each is counted under its reasons (and no
/// other); each kind with how many were sent and counted.
fn send_every_kind(
    test: &str,
    tunnel: &Tunnel,
    right_ifname: &str,
    fjord_port: SocketAddr,
) -> Vec<(&'static str, u64, u64)> {
    let captured = tunnel
        .hosts
        .right
        .spawn_thread(move || {
            let mut captured = Vec::new();
            capture_transport_packets(fjord_port, CAPTURED, Duration::from_secs(10), |packet| {
                captured.push(packet.to_vec());
                Ok(())
            })?;
            Ok(captured)
        })
        .expect("capture thread")
        .join()
        .expect("capture thread")
        .expect("capture transport packets");
    assert_eq!(
        captured.len(),
        CAPTURED,
        "{}",
        tunnel.context("too few transport packets on the wire")
    );

    let attacker = tunnel
        .hosts
        .left
        .spawn_thread(|| UdpSocket::bind("0.0.0.0:0"))
        .expect("attacker thread")
        .join()
        .expect("attacker thread")
        .expect("attacker socket");
    let mut junk = Junk(0x5eed_f00d);
    let mut results = Vec::new();
    for (kind, reasons, delivery) in kinds(&captured, &mut junk) {
        let before = show_json(right_ifname).drops;
        let overflows_before = udp_receive_buffer_errors(&tunnel.hosts.right);
        let sent = match delivery {
            Delivery::Prepared(datagrams) => {
                for burst in datagrams.chunks(BURST) {
                    for datagram in burst {
                        attacker
                            .send_to(datagram, fjord_port)
                            .expect("send a bad datagram");
                    }
                    // Paces the bursts, so fjord's socket buffer keeps up.
                    std::thread::sleep(Duration::from_millis(1));
                }
                datagrams.len()
            }
            Delivery::ReplayedAtOnce(count) => tunnel
                .hosts
                .right
                .spawn_thread(move || {
                    let replayer = UdpSocket::bind("0.0.0.0:0")?;
                    capture_transport_packets(
                        fjord_port,
                        count,
                        Duration::from_secs(10),
                        |packet| replayer.send_to(packet, fjord_port).map(drop),
                    )
                })
                .expect("replay thread")
                .join()
                .expect("replay thread")
                .expect("replay transport packets"),
        } as u64;
        // fjord counts them as it reads them; wait until it has read all
        // of them, or nothing more arrives.
        let mut counted = 0;
        let mut after = before.clone();
        let deadline = Instant::now() + Duration::from_secs(5);
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
            after = show_json(right_ifname).drops;
            let now_counted = watched_sum(&after, &reasons) - watched_sum(&before, &reasons);
            if now_counted >= sent || (now_counted == counted && counted > 0) {
                counted = now_counted;
                break;
            }
            counted = now_counted;
        }
        let overflows = udp_receive_buffer_errors(&tunnel.hosts.right) - overflows_before;
        eprintln!(
            "{test}: {kind}: {sent} sent, {counted} counted as {} ({overflows} datagrams of any kind lost to a full socket buffer meanwhile)",
            reasons.join(" + ")
        );
        assert!(
            counted <= sent && counted + overflows >= sent,
            "{}",
            tunnel.context(&format!(
                "{kind}: {sent} sent, {counted} counted as {reasons:?}, {overflows} lost to the socket buffer: {after:?}"
            ))
        );
        for other in WATCHED.iter().filter(|reason| !reasons.contains(reason)) {
            let grew = watched_sum(&after, &[other]) - watched_sum(&before, &[other]);
            assert_eq!(
                grew, 0,
                "{kind} were counted as {other} too: before {before:?}, after {after:?}"
            );
        }
        results.push((kind, sent, counted));
    }

    results
}

/// Raises the flag when dropped, on a panic's unwinding too.
struct RaiseOnDrop<'a>(&'a AtomicBool);

impl Drop for RaiseOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Release);
    }
}

#[test]
fn bad_datagrams_are_refused_counted_by_reason_and_not_logged_one_by_one() {
    let test = "bad_datagrams_are_refused_counted_by_reason_and_not_logged_one_by_one";
    if !ready(test) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    // Wire-sized frames on the veth, so a capture holds single datagrams.
    for host in [&hosts.left, &hosts.right] {
        topology::disable_offloads(host, HOST_LINK).expect("offloads off");
    }
    let tunnel = Tunnel::up_on(test, fjord(), hosts);
    let right_ifname = tunnel.right_side.ifname.clone();
    let fjord_port = SocketAddr::from((RIGHT_UNDERLAY, LISTEN_PORT));

    // Scoped, so a failed assertion cannot leave the transfer thread
    // holding the tunnel: the guard stops it, the scope joins it, and the
    // tunnel's namespaces and daemons go with the test.
    let stop = AtomicBool::new(false);
    let started = AtomicBool::new(false);
    let (log_before, results, reports) = std::thread::scope(|scope| {
        let transfers = scope.spawn(|| transfers_until(&tunnel.hosts, &stop, &started));
        let stop_transfers = RaiseOnDrop(&stop);
        while !started.load(Ordering::Acquire) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let log_before = log_lines(&tunnel.right).len();
        let results = send_every_kind(test, &tunnel, &right_ifname, fjord_port);
        drop(stop_transfers);
        let reports = transfers.join().expect("transfer thread");
        (log_before, results, reports)
    });
    for report in &reports {
        match report {
            Ok(report) => {
                eprintln!("{test}: transfer meanwhile: {report}");
                assert!(
                    report.verified,
                    "{}",
                    tunnel.context(&format!("{report:?}"))
                );
                assert_eq!(report.sender_digest, report.receiver_digest);
                assert_eq!(report.bytes, TRANSFER_BYTES);
            }
            Err(error) => panic!("{}", tunnel.context(&format!("transfer: {error}"))),
        }
    }

    let shown = show_json(&right_ifname);
    assert_eq!(
        shown.endpoints,
        [Some(format!("{}:{LISTEN_PORT}", topology::LEFT_UNDERLAY))],
        "bad datagrams from elsewhere moved the peer's endpoint"
    );
    let text = show_text(&right_ifname);
    eprintln!("{test}: fjord show:\n{text}");
    let dropped = text
        .lines()
        .find(|line| line.trim_start().starts_with("dropped:"))
        .unwrap_or_else(|| panic!("no dropped: line in fjord show:\n{text}"));
    for reason in WATCHED {
        assert!(dropped.contains(reason), "{reason} missing from {dropped}");
    }

    // The first refusals are reported at once, the rest wait a minute:
    // one line for all of them, not one per datagram.
    netns::wait_until(Duration::from_secs(5), "a warning about refusals", || {
        let log = log_lines(&tunnel.right);
        log[log_before.min(log.len())..]
            .iter()
            .any(|line| line.contains("WARN") && line.contains("refused "))
    })
    .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    let bad: u64 = results.iter().map(|(_, sent, _)| sent).sum();
    let log = log_lines(&tunnel.right);
    let new_lines = &log[log_before.min(log.len())..];
    eprintln!(
        "{test}: {bad} bad datagrams; the right side's log grew by {} lines:\n{}",
        new_lines.len(),
        new_lines.join("\n")
    );
    // Only lines about bad datagrams count: a busy machine may add a
    // rekey's or a retried handshake's line, which says nothing of them.
    let about_refusals = new_lines
        .iter()
        .filter(|line| {
            line.contains("refus")
                || line.contains("drop")
                || WATCHED.iter().any(|reason| line.contains(reason))
        })
        .count();
    assert!(
        about_refusals <= 5,
        "{}",
        tunnel.context(&format!("{about_refusals} new log lines about refusals"))
    );
    // A replayed copy that outruns its original moves the endpoint there
    // and back, as often as the race goes its way: one line for all of it.
    let endpoint_moves = new_lines
        .iter()
        .filter(|line| line.contains("peer endpoint changed"))
        .count();
    assert!(
        endpoint_moves <= 1,
        "{}",
        tunnel.context(&format!(
            "{endpoint_moves} new log lines about the peer's endpoint"
        ))
    );
    assert!(
        new_lines
            .iter()
            .any(|line| line.contains("WARN") && line.contains("refused ")),
        "{}",
        tunnel.context("no warning about the refused datagrams")
    );
}
