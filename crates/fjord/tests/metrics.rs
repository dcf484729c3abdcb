//! The Prometheus endpoint of a real fjord↔fjord tunnel between two
//! namespaces (underlay 198.18.0.1/.2, overlay 198.19.0.1/24 and .2/24),
//! each side serving `--metrics 127.0.0.1:9587` on its own namespace's
//! loopback: scrapes during a verified TCP transfer see the byte counters
//! move by what was sent (within the tunnel's overhead), odd requests get
//! their status codes, and a scrape of an interface with 1,000 peers
//! answers in under 50 ms.
//!
//! Needs root; without it each test skips with one line (fails under CI).
//! The namespaces go when the tunnel drops, also when a test fails.

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fjord_lab::netns::Namespace;
use support::{Tunnel, fjord, ready, reply_errno, uapi_request};

const METRICS: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9587);
const TRANSFER_BYTES: u64 = 64 * 1024 * 1024;
const SINK_PORT: u16 = 5201;

/// Sends `request` to the metrics endpoint in `namespace`; the whole
/// response, and how long it took from connect to the last byte.
fn request_in(namespace: &Namespace, request: &'static str) -> (String, Duration) {
    namespace
        .spawn_thread(move || {
            let started = Instant::now();
            let mut stream = TcpStream::connect(METRICS)?;
            stream.set_read_timeout(Some(Duration::from_secs(10)))?;
            stream.write_all(request.as_bytes())?;
            let mut response = Vec::new();
            stream.read_to_end(&mut response)?;
            let took = started.elapsed();
            Ok((String::from_utf8_lossy(&response).into_owned(), took))
        })
        .expect("thread in the namespace")
        .join()
        .expect("scrape thread")
        .expect("scrape")
}

const SCRAPE: &str = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:9587\r\n\r\n";

/// The body of a successful scrape.
fn scrape(namespace: &Namespace) -> String {
    let (response, _) = request_in(namespace, SCRAPE);
    let (head, body) = response.split_once("\r\n\r\n").expect("a head");
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains(
            "\r\nContent-Type: application/openmetrics-text; version=1.0.0; charset=utf-8\r\n"
        ),
        "{head}"
    );
    assert!(head.contains("\r\nConnection: close"), "{head}");
    assert!(body.ends_with("# EOF\n"), "{body}");
    body.to_string()
}

/// The value of the only sample of `family` (with any labels).
fn sample(body: &str, family: &str) -> u64 {
    let values: Vec<u64> = body
        .lines()
        .filter(|line| {
            line.strip_prefix(family)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse().ok())
        .collect();
    assert_eq!(values.len(), 1, "{family} in\n{body}");
    values[0]
}

#[test]
fn scrapes_during_a_transfer_count_what_was_sent() {
    let test = "scrapes_during_a_transfer_count_what_was_sent";
    if !ready(test) {
        return;
    }
    let tunnel = Tunnel::up(test, fjord().with_threads(1).with_metrics(METRICS));
    let (left, right) = (&tunnel.hosts.left, &tunnel.hosts.right);
    let datagrams_before = sample(&scrape(left), "fjord_peer_transmit_datagrams_total");
    let sent_before = sample(&scrape(left), "fjord_peer_transmit_bytes_total");
    let received_before = sample(&scrape(right), "fjord_peer_receive_bytes_total");

    // A scraper every 100 ms on the sending side while the data flows.
    let done = Arc::new(AtomicBool::new(false));
    let scraper = {
        let done = Arc::clone(&done);
        left.spawn_thread(move || {
            let mut scrapes: Vec<(u64, Duration)> = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let started = Instant::now();
                let mut stream = TcpStream::connect(METRICS)?;
                stream.write_all(SCRAPE.as_bytes())?;
                let mut response = String::new();
                stream.read_to_string(&mut response)?;
                let sent = sample(&response, "fjord_peer_transmit_bytes_total");
                scrapes.push((sent, started.elapsed()));
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(scrapes)
        })
        .expect("scraper thread")
    };
    let report = tunnel.verified_transfer(TRANSFER_BYTES, SINK_PORT);
    done.store(true, Ordering::Relaxed);
    let scrapes = scraper.join().expect("scraper").expect("scrapes");

    let body = scrape(left);
    let sent = sample(&body, "fjord_peer_transmit_bytes_total") - sent_before;
    let received = sample(&scrape(right), "fjord_peer_receive_bytes_total") - received_before;
    // Each data message carries at most one 1,420-byte inner packet.
    let datagrams = sample(&body, "fjord_peer_transmit_datagrams_total") - datagrams_before;
    assert!(
        datagrams >= TRANSFER_BYTES / 1_420 && datagrams <= sent / 32,
        "{datagrams} data messages for {sent} B sent"
    );
    let slowest = scrapes.iter().map(|(_, took)| *took).max();
    eprintln!(
        "{test}: {} B in {:?}; sender counted {sent} B sent, receiver {received} B received \
         ({:.2}% and {:.2}% over the payload); {} scrapes during the transfer, slowest {slowest:?}",
        report.bytes,
        report.elapsed,
        (sent as f64 / TRANSFER_BYTES as f64 - 1.0) * 100.0,
        (received as f64 / TRANSFER_BYTES as f64 - 1.0) * 100.0,
        scrapes.len()
    );
    // Each datagram carries at most one MTU (1,420) of inner packet: its
    // IP and TCP headers (52 with timestamps) plus WireGuard's 32 bytes
    // and up to 15 of padding; ACKs and handshakes add a little. 15 %
    // covers that with room; less than the payload would be a miscount.
    for (what, bytes) in [("sent", sent), ("received", received)] {
        assert!(
            (TRANSFER_BYTES..=TRANSFER_BYTES * 115 / 100).contains(&bytes),
            "{}",
            tunnel.context(&format!(
                "{what} {bytes} B for {TRANSFER_BYTES} B of payload"
            ))
        );
    }
    // The counters moved while they were being read, never backwards.
    assert!(scrapes.len() >= 2, "{scrapes:?}");
    assert!(
        scrapes.windows(2).all(|pair| pair[0].0 <= pair[1].0),
        "{scrapes:?}"
    );
    assert!(sample(&body, "fjord_transmit_packets_total") > TRANSFER_BYTES / 1420);
    assert!(sample(&body, "fjord_process_resident_memory_bytes") > 0);
    assert!(body.contains("# HELP fjord_process_cpu_seconds "));
    // Each offload is reported, on or off, under one family.
    assert!(body.contains("# HELP fjord_offload_enabled "));
    for kind in ["tun_vnet_hdr", "udp_gso", "udp_gro"] {
        let prefix = format!("fjord_offload_enabled{{kind=\"{kind}\"}} ");
        let value = body
            .lines()
            .find_map(|line| line.strip_prefix(prefix.as_str()));
        assert!(
            matches!(value, Some("0" | "1")),
            "{kind}: {value:?} in\n{body}"
        );
    }
}

#[test]
fn odd_requests_get_their_status() {
    let test = "metrics_odd_requests_get_their_status";
    if !ready(test) {
        return;
    }
    let tunnel = Tunnel::up(test, fjord().with_threads(1).with_metrics(METRICS));
    let left = &tunnel.hosts.left;
    for (request, status) in [
        ("GET / HTTP/1.1\r\n\r\n", "404 Not Found"),
        (
            "POST /metrics HTTP/1.1\r\nContent-Length: 2\r\n\r\nhi",
            "405 Method Not Allowed",
        ),
        ("GET /metrics HTTP/9\r\n\r\n", "400 Bad Request"),
    ] {
        let (response, _) = request_in(left, request);
        assert!(
            response.starts_with(&format!("HTTP/1.1 {status}\r\n")),
            "{request:?}: {response}"
        );
    }
    // Still serving after them.
    scrape(left);
}

#[test]
fn a_thousand_peers_scrape_in_under_50_ms() {
    let test = "a_thousand_peers_scrape_in_under_50_ms";
    if !ready(test) {
        return;
    }
    let tunnel = Tunnel::up(test, fjord().with_threads(1).with_metrics(METRICS));
    let ifname = &tunnel.left_side.ifname;
    // 999 more peers, no endpoint and no handshake, each with one
    // overlay address (198.19.4.0 to 198.19.7.230).
    let mut set = String::from("set=1\n");
    for index in 0..999u32 {
        let mut seed = [0u8; 32];
        // Clamping clears the low bits of byte 0: the index goes after it.
        seed[1..5].copy_from_slice(&index.to_le_bytes());
        seed[31] = 0x40;
        let key = fjord_proto::PrivateKey::from_bytes(seed).public_key();
        let hex: String = key.as_bytes().iter().map(|b| format!("{b:02x}")).collect();
        set.push_str(&format!(
            "public_key={hex}\nallowed_ip=198.19.{}.{}/32\n",
            4 + index / 256,
            index % 256
        ));
    }
    set.push('\n');
    assert_eq!(reply_errno(&uapi_request(ifname, &set)), 0);

    let left = &tunnel.hosts.left;
    let body = scrape(left);
    let peers = body
        .lines()
        .filter(|line| line.starts_with("fjord_peer_receive_bytes_total{"))
        .count();
    let configured = uapi_request(ifname, "get=1\n\n")
        .lines()
        .filter(|line| line.starts_with("public_key="))
        .count();
    assert_eq!(
        (peers, configured),
        (1000, 1000),
        "peers scraped, configured; {} bytes",
        body.len()
    );
    let mut times: Vec<Duration> = (0..9).map(|_| request_in(left, SCRAPE).1).collect();
    times.sort_unstable();
    let median = times[times.len() / 2];
    eprintln!(
        "{test}: {} bytes a scrape; times {times:?}, median {median:?}",
        body.len()
    );
    assert!(median < Duration::from_millis(50), "{times:?}");
}
