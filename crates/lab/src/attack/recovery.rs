//! How long a tunnel takes to carry traffic again: an [`EchoService`] on
//! one host answers UDP probes, and [`time_to_echo`] on the other sends
//! one every [`PROBE_INTERVAL`] until the first answer comes back. The
//! first probe starts the handshake (unless the tunnel started one
//! itself); the rest wait in the tunnel's staging queue or are dropped,
//! so the answer comes one round trip after the handshake, within one
//! probe interval.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::netns::Namespace;

/// Probes go out this often.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(10);
/// How often the echo service checks whether to stop.
const ECHO_POLL: Duration = Duration::from_millis(100);

/// Echoes every UDP datagram to `port` back to its sender, in a thread of
/// its namespace, until dropped.
pub struct EchoService {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl EchoService {
    pub fn start(namespace: &Namespace, port: u16) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (bound_tx, bound_rx) = std::sync::mpsc::channel();
        let thread = {
            let stop = stop.clone();
            namespace.spawn_thread(move || {
                let socket = match UdpSocket::bind((Ipv4Addr::UNSPECIFIED, port)) {
                    Ok(socket) => socket,
                    Err(error) => {
                        let _ = bound_tx.send(Err(error));
                        return Ok(());
                    }
                };
                socket.set_read_timeout(Some(ECHO_POLL))?;
                let _ = bound_tx.send(Ok(()));
                let mut buf = [0u8; 64];
                while !stop.load(Ordering::Relaxed) {
                    match socket.recv_from(&mut buf) {
                        Ok((len, from)) => {
                            // A lost echo is the prober's to notice.
                            let _ = socket.send_to(&buf[..len], from);
                        }
                        Err(error)
                            if matches!(
                                error.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) => {}
                        Err(error) => return Err(error),
                    }
                }
                Ok(())
            })?
        };
        let service = Self {
            stop,
            thread: Some(thread),
        };
        match bound_rx.recv() {
            Ok(Ok(())) => Ok(service),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(io::Error::other("the echo service ended before binding")),
        }
    }
}

impl Drop for EchoService {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Probes `echo` from `namespace` until an answer arrives or `limit` has
/// passed since `since`: the time from `since` to the answer (`None`:
/// none in time). `since` is when the wait began for whoever waits (a
/// restarted daemon's start, say), not the first probe.
pub fn time_to_echo(
    namespace: &Namespace,
    echo: SocketAddr,
    since: Instant,
    limit: Duration,
) -> io::Result<Option<Duration>> {
    let prober = namespace.spawn_thread(move || {
        let socket = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
        socket.set_read_timeout(Some(PROBE_INTERVAL))?;
        let start = Instant::now();
        let mut sequence: u64 = 0;
        let mut buf = [0u8; 64];
        while since.elapsed() < limit {
            // The route may not be there yet, or the tunnel may refuse
            // while it has no session: keep probing either way.
            let _ = socket.send_to(&sequence.to_be_bytes(), echo);
            sequence += 1;
            let next = start + PROBE_INTERVAL * sequence as u32;
            while let Some(left) = next.checked_duration_since(Instant::now()) {
                socket.set_read_timeout(Some(left.max(Duration::from_micros(100))))?;
                match socket.recv_from(&mut buf) {
                    Ok((_, from)) if from == echo => return Ok(Some(since.elapsed())),
                    Ok(_) => {}
                    Err(error)
                        if matches!(
                            error.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        break;
                    }
                    // An ICMP error from an earlier probe: keep going.
                    Err(_) => std::thread::sleep(left.min(PROBE_INTERVAL)),
                }
            }
        }
        Ok(None)
    })?;
    prober
        .join()
        .map_err(|_| io::Error::other("the prober thread panicked"))?
}
