//! Many flows, few bytes: what a port scanner or a misbehaving member does
//! to a firewall's connection tracking. A TCP connect scan (one SYN per
//! port, as `nmap -sT` sends, answered by a reset where nothing listens)
//! and UDP datagrams each opening a new five-tuple, paced so the flood
//! measures the tracking table rather than the generator's core.

use std::io;
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::netns::Namespace;

/// How many connects a scan has in flight (one thread each).
const SCAN_THREADS: u16 = 8;
/// How long a connect may wait for the SYN's answer before the next port.
const CONNECT_WAIT: Duration = Duration::from_millis(200);
/// Datagrams between two looks at the clock in a paced UDP flood.
const PACE_BATCH: u64 = 256;

/// What a scan or a flood did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlowsReport {
    /// Flows opened: SYNs sent, or datagrams with a new five-tuple.
    pub opened: u64,
    /// Of a scan, the ports that answered at all (reset or accept).
    pub answered: u64,
    pub elapsed: Duration,
}

/// Connects from `namespace` to every port in `ports` of `target`, one
/// SYN each, [`SCAN_THREADS`] at a time.
pub fn tcp_connect_scan(
    namespace: &Namespace,
    target: IpAddr,
    ports: std::ops::RangeInclusive<u16>,
) -> io::Result<FlowsReport> {
    let started = Instant::now();
    let answered = Arc::new(AtomicU64::new(0));
    let opened = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for lane in 0..SCAN_THREADS {
        let ports = ports.clone();
        let (answered, opened) = (Arc::clone(&answered), Arc::clone(&opened));
        workers.push(namespace.spawn_thread(move || {
            for port in ports.filter(|port| port % SCAN_THREADS == lane) {
                opened.fetch_add(1, Ordering::Relaxed);
                match TcpStream::connect_timeout(&SocketAddr::new(target, port), CONNECT_WAIT) {
                    Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                    Err(error) if error.kind() == io::ErrorKind::ConnectionRefused => {
                        answered.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(_) => 0,
                };
            }
            Ok(())
        })?);
    }
    for worker in workers {
        worker
            .join()
            .map_err(|_| io::Error::other("a scan thread panicked"))??;
    }
    Ok(FlowsReport {
        opened: opened.load(Ordering::Relaxed),
        answered: answered.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    })
}

/// Sends `flows` one-byte datagrams from `namespace` to `target`, each a
/// five-tuple of its own (ports 1 and up on the target, from as many
/// local sockets as it takes), at most `per_second` a second.
pub fn udp_flows(
    namespace: &Namespace,
    target: IpAddr,
    flows: u64,
    per_second: u64,
) -> io::Result<std::thread::JoinHandle<io::Result<FlowsReport>>> {
    namespace.spawn_thread(move || {
        let started = Instant::now();
        let ports_per_socket = u64::from(u16::MAX);
        let mut opened = 0u64;
        while opened < flows {
            // A new local port for each pass over the target's ports.
            let socket = UdpSocket::bind(SocketAddr::new(unspecified(target), 0))?;
            for port in 1..=ports_per_socket.min(flows - opened) {
                // A port unreachable may come back for an earlier datagram
                // and fail this send; the flow was opened all the same.
                let _ = socket.send_to(&[0], SocketAddr::new(target, port as u16));
                opened += 1;
                if opened.is_multiple_of(PACE_BATCH) {
                    let due = Duration::from_secs_f64(opened as f64 / per_second as f64);
                    if let Some(ahead) = due.checked_sub(started.elapsed()) {
                        std::thread::sleep(ahead);
                    }
                }
            }
        }
        Ok(FlowsReport {
            opened,
            answered: 0,
            elapsed: started.elapsed(),
        })
    })
}

fn unspecified(like: IpAddr) -> IpAddr {
    match like {
        IpAddr::V4(_) => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
    }
}
