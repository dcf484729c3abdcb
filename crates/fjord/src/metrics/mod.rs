//! The Prometheus endpoint, opt-in with `Metrics = ADDR:PORT` in
//! `[Interface]` or `--metrics ADDR:PORT`.
//!
//! Flow of one scrape, all on the `metrics` thread but the snapshot:
//! ```text
//! accept ─ read_head (8 KiB, 2 s) ─ parse_head ─ GET /metrics?
//!   └─ Registry::encode
//!        ├─ InterfaceCollector ─ ControlHandle::call ─▶ worker, between
//!        │    batches: InterfaceStatus::capture (the get=fjord snapshot)
//!        └─ ProcessCollector ─ /proc/self/stat, /proc/self/statm
//!   └─ 200, OpenMetrics text, Connection: close
//! ```
//! The data path keeps its plain per-worker counters and does nothing
//! for metrics: no atomics, no locks. A scrape costs the worker one
//! snapshot, as `fjord show` does. Connections are served one at a time
//! (a scraper sends one request every few seconds).
//!
//! The endpoint has no authentication and lists every peer's public key
//! and traffic: bind it to loopback, or to an address only the monitoring
//! network reaches.

mod collect;
pub mod http;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

use fjord_net::ControlHandle;
use prometheus_client::registry::Registry;

pub use collect::encode_interface;
use http::{HeadOutcome, Request};

use crate::config::MetricsAddress;

/// The exposition's media type (OpenMetrics text 1.0).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// How long writing a response may take before the client is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    #[error("Metrics: cannot listen on {address}: {source}")]
    Bind {
        address: SocketAddr,
        #[source]
        source: io::Error,
    },
}

impl MetricsError {
    /// Whether the address is the user's to fix (taken, or not this
    /// host's), as opposed to a failure while running.
    pub fn is_usage(&self) -> bool {
        let MetricsError::Bind { source, .. } = self;
        matches!(
            source.kind(),
            io::ErrorKind::AddrInUse | io::ErrorKind::AddrNotAvailable
        )
    }
}

/// Listens on `address`. Called before privileges are dropped, so a port
/// below 1024 works.
pub fn bind(address: MetricsAddress) -> Result<TcpListener, MetricsError> {
    let address = address.socket_address();
    let listener =
        TcpListener::bind(address).map_err(|source| MetricsError::Bind { address, source })?;
    if !address.ip().is_loopback() {
        tracing::warn!(
            %address,
            "metrics served beyond loopback, without authentication: anyone who reaches it sees every peer's key and traffic"
        );
    }
    Ok(listener)
}

/// Serves scrapes on a thread of its own until the worker stops.
pub fn spawn(listener: TcpListener, control: ControlHandle) -> io::Result<()> {
    let address = listener.local_addr()?;
    std::thread::Builder::new()
        .name("metrics".into())
        .spawn(move || serve(listener, control))?;
    tracing::info!(%address, "serving metrics at http://{address}/metrics");
    Ok(())
}

/// The registry a scrape encodes: the interface's families, then the
/// process's.
fn registry(control: ControlHandle) -> Registry {
    let mut registry = Registry::default();
    registry.register_collector(Box::new(collect::InterfaceCollector { control }));
    registry.register_collector(Box::new(collect::ProcessCollector));
    registry
}

/// The body of a scrape, ending in `# EOF`; `None` once the worker has
/// stopped.
fn render(registry: &Registry) -> Option<String> {
    let mut body = String::with_capacity(16 * 1024);
    prometheus_client::encoding::text::encode(&mut body, registry).ok()?;
    Some(body)
}

fn serve(listener: TcpListener, control: ControlHandle) {
    let registry = registry(control.clone());
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let worker_running = match answer(stream, &registry) {
            Ok(running) => running,
            Err(error) => {
                tracing::debug!(%error, "metrics client went away");
                true
            }
        };
        if !worker_running || control.call(|_| ()).is_err() {
            return;
        }
    }
}

/// Answers one connection; `false` once the worker has stopped.
fn answer(mut stream: TcpStream, registry: &Registry) -> io::Result<bool> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let text = "text/plain; charset=utf-8";
    let (status, content_type, extra, body) =
        match http::read_head(&mut stream, http::HEAD_DEADLINE)? {
            HeadOutcome::Closed => return Ok(true),
            HeadOutcome::TimedOut => (
                "408 Request Timeout",
                text,
                None,
                "request head not received in time\n".to_string(),
            ),
            HeadOutcome::Refused(http::HeadError::TooLarge) => (
                "431 Request Header Fields Too Large",
                text,
                None,
                "request head too large\n".to_string(),
            ),
            HeadOutcome::Refused(http::HeadError::Malformed) => (
                "400 Bad Request",
                text,
                None,
                "malformed request\n".to_string(),
            ),
            HeadOutcome::Request(Request::OtherMethod) => (
                "405 Method Not Allowed",
                text,
                Some("Allow: GET"),
                "only GET is served\n".to_string(),
            ),
            HeadOutcome::Request(Request::OtherPath) => (
                "404 Not Found",
                text,
                None,
                format!("metrics are at {}\n", http::METRICS_PATH),
            ),
            HeadOutcome::Request(Request::Metrics) => match render(registry) {
                Some(body) => ("200 OK", CONTENT_TYPE, None, body),
                None => {
                    http::write_response(
                        &mut stream,
                        "503 Service Unavailable",
                        text,
                        None,
                        b"the tunnel's worker has stopped\n",
                    )?;
                    return Ok(false);
                }
            },
        };
    http::write_response(&mut stream, status, content_type, extra, body.as_bytes())?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fjord_proto::{HandshakeCounters, PresharedKey, PrivateKey};

    use super::*;
    use crate::status::{FallbackLine, InterfaceStatus, MemberLine, PeerCompression, PeerStatus};

    fn key(byte: u8) -> fjord_proto::PublicKey {
        PrivateKey::from_bytes([byte; 32]).public_key()
    }

    /// A mesh node with two members, one carried by the fallback.
    fn status() -> InterfaceStatus {
        let peer = |byte: u8, rx_bytes: u64| PeerStatus {
            public_key: key(byte),
            preshared_key: PresharedKey::zero(),
            endpoint: None,
            allowed_ips: Vec::new(),
            last_handshake: Some(Duration::from_secs(1_700_000_000)),
            rx_bytes,
            tx_bytes: 7,
            rx_datagrams: 3,
            tx_datagrams: 1,
            handshakes_completed: 1,
            handshakes_abandoned: 0,
            persistent_keepalive: None,
            sending_cipher: None,
            compression: PeerCompression::default(),
        };
        let member = |byte: u8, name: &str, path: &str| MemberLine {
            public_key: key(byte).to_base64(),
            name: name.to_string(),
            addresses: Vec::new(),
            endpoint: None,
            path: path.to_string(),
            rtt_micros: Some(1500),
            path_mtu: Some(1452),
            expires_at: None,
            groups: Vec::new(),
            routes: Vec::new(),
        };
        InterfaceStatus {
            name: "fj0".to_string(),
            private_key: None,
            public_key: Some(key(9)),
            listen_port: 51820,
            fwmark: 0,
            datapath_mtu: 1420,
            peers: vec![peer(1, 1234), peer(2, 0), peer(3, 5)],
            drops: vec![("replayed_counter", 3), ("no_route", 0)],
            handshakes: HandshakeCounters {
                initiations_computed: 4,
                cookie_replies: 2,
                cookie_replies_withheld: 1,
            },
            data: fjord_net::DataStats {
                tx_packets: 10,
                ..Default::default()
            },
            members: vec![
                member(1, "alpha", "direct"),
                member(2, "beta", "relay alpha"),
            ],
            fallback: vec![FallbackLine {
                public_key: key(1).to_base64(),
                path: "carrier 198.18.0.2:443".to_string(),
            }],
            fallback_counters: vec![("fallback_to_carrier", 1)],
            mesh_counters: vec![("relays_offered", 6)],
            mac_addresses: None,
            policy: None,
            offloads: fjord_net::Offloads {
                tun_vnet_hdr: true,
                udp_gso: true,
                udp_gro: false,
            },
            exit_node: None,
        }
    }

    fn exposition(status: &InterfaceStatus) -> String {
        #[derive(Debug)]
        struct Fixed(InterfaceStatus);
        impl prometheus_client::collector::Collector for Fixed {
            fn encode(
                &self,
                mut encoder: prometheus_client::encoding::DescriptorEncoder,
            ) -> std::fmt::Result {
                encode_interface(&self.0, &mut encoder)
            }
        }
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(status.clone())));
        let mut body = String::new();
        prometheus_client::encoding::text::encode(&mut body, &registry).expect("encode");
        body
    }

    #[test]
    fn families_are_named_and_helped_as_prometheus_wants() {
        let body = exposition(&status());
        let one = key(1).to_base64();
        let two = key(2).to_base64();
        for line in [
            format!("fjord_peer_receive_bytes_total{{public_key=\"{one}\",name=\"alpha\"}} 1234"),
            format!(
                "fjord_peer_latest_handshake_seconds{{public_key=\"{}\"}} 1700000000",
                key(3).to_base64()
            ),
            "fjord_drops_total{reason=\"replayed_counter\"} 3".to_string(),
            "fjord_drops_total{reason=\"no_route\"} 0".to_string(),
            "fjord_unanswered_initiations_total 1".to_string(),
            "fjord_cookie_replies_total 2".to_string(),
            "fjord_transmit_packets_total 10".to_string(),
            "fjord_datapath_mtu_bytes 1420".to_string(),
            "fjord_offload_enabled{kind=\"tun_vnet_hdr\"} 1".to_string(),
            "fjord_offload_enabled{kind=\"udp_gso\"} 1".to_string(),
            "fjord_offload_enabled{kind=\"udp_gro\"} 0".to_string(),
            "fjord_mesh_relays_offered_total 6".to_string(),
            "fjord_fallback_to_carrier_total 1".to_string(),
            "fjord_mesh_members 2".to_string(),
            format!("fjord_member_path{{public_key=\"{one}\",name=\"alpha\",path=\"fallback\"}} 1"),
            format!("fjord_member_path{{public_key=\"{one}\",name=\"alpha\",path=\"direct\"}} 0"),
            format!("fjord_member_path{{public_key=\"{two}\",name=\"beta\",path=\"relay\"}} 1"),
            format!("fjord_member_path_mtu_bytes{{public_key=\"{two}\",name=\"beta\"}} 1452"),
            format!("fjord_member_rtt_seconds{{public_key=\"{two}\",name=\"beta\"}} 0.0015"),
        ] {
            assert!(body.lines().any(|l| l == line), "no {line:?} in\n{body}");
        }
        assert!(body.ends_with("# EOF\n"));
        // Every family has help and a type, and every sample is fjord's.
        let families: Vec<&str> = body
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|rest| rest.split(' ').next().unwrap_or(""))
            .collect();
        for family in &families {
            assert!(
                body.contains(&format!("# HELP {family} ")),
                "{family} has no help"
            );
        }
        for sample in body.lines().filter(|line| !line.starts_with('#')) {
            assert!(sample.starts_with("fjord_"), "{sample}");
        }
        let mut unique = families.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), families.len(), "a family twice: {families:?}");
    }

    /// `get=fjord` and the metrics read one list: every counter line of
    /// the reply is a metric with the same value.
    #[test]
    fn every_get_fjord_counter_is_a_metric() {
        let status = status();
        let body = exposition(&status);
        let mut reply = String::new();
        crate::uapi::write_fjord_counters(&status, &mut reply);
        let readings = crate::counters::interface_readings(&status);
        let mut checked = 0;
        for line in reply.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            if value.parse::<u64>().is_err() {
                continue; // member=, fallback=, peer_cipher= lines
            }
            let reading = readings
                .iter()
                .find(|reading| reading.key == key)
                .unwrap_or_else(|| panic!("{key} is not in the list"));
            let suffix = if reading.kind == crate::counters::Kind::Counter {
                "_total"
            } else {
                ""
            };
            let labels = reading
                .label
                .as_ref()
                .map(|(name, value)| format!("{{{name}=\"{value}\"}}"))
                .unwrap_or_default();
            let sample = format!("fjord_{}{suffix}{labels} {value}", reading.family);
            assert!(body.lines().any(|l| l == sample), "{key}: no {sample:?}");
            checked += 1;
        }
        assert!(checked > 15, "{reply}");
        // Zero drops are metrics but not reply lines.
        assert!(!reply.contains("drop_no_route"));
    }
}
