//! TCP bulk transfer with a 128-bit XXH3 digest on both ends: proves that
//! every byte crossed intact and measures how fast.
//!
//! Flow: the sink binds in its namespace and says it is listening; then
//! each of N source threads (in the source namespace) connects (to the
//! sink's address, or spread over [`BulkTransfer::destinations`]), sends a
//! 16-byte header (`FJTB`, stream index, payload length, big-endian) and
//! the payload — a seeded xorshift64* keystream, or seeded log lines
//! when the transfer is of text ([`Content`]), generated 64 KiB at a
//! time — and closes its sending half. The sink reads each connection to
//! EOF, hashing as it reads. Elapsed time runs from just before the first
//! connect to the last EOF at the sink. The source then hashes its content
//! by generating the keystream again, outside the timed window.
//!
//! The digest guards against corruption and loss, not against an
//! adversary, so it need not be cryptographic; it must be cheap, because
//! on two cores the sink's hashing competes with the tunnel for CPU.
//! SHA-256 (sha2 0.10) hashes 1.4 GB/s here: a quarter of a core at
//! 3 Gbit/s and most of one at bare veth speed. XXH3-128 hashes 12–21 GB/s.
//!
//! Nothing blocks for long: sockets wake every [`POLL_INTERVAL`], a socket
//! without progress for the stall timeout fails, the whole run has a
//! deadline, and a failure on either end sets a shared abort flag so the
//! other end gives up at once instead of waiting for its own timeout.

mod content;
pub mod ends;
mod keystream;
mod report;

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use xxhash_rust::xxh3::Xxh3;

use super::TrafficError;
use crate::netns::Namespace;
pub use content::Content;
use content::{Generator, content_digest};
use keystream::{chunk_len, stream_seed};
pub use report::{BulkReport, ContentDigest, StreamReport};
use report::{ReceivedStream, SentStream, report};

/// How often blocked sockets wake to check the deadline and the abort flag.
const POLL_INTERVAL: Duration = Duration::from_millis(200);
/// Bytes generated, hashed and written per `write` call.
const CHUNK_BYTES: usize = 64 * 1024;
/// Bytes read per `read` call at the sink.
const RECEIVE_BUFFER_BYTES: usize = 256 * 1024;
const HEADER_MAGIC: &[u8; 4] = b"FJTB";
const HEADER_LEN: usize = 16;

/// What to send: `bytes` in total, split over `streams` connections.
#[derive(Debug, Clone)]
pub struct BulkTransfer {
    pub bytes: u64,
    pub streams: usize,
    /// Seeds the content; stream `i` uses a keystream derived from `(seed, i)`.
    pub seed: u64,
    /// Random bytes (the default) or text.
    pub content: Content,
    /// The whole run, connects included.
    pub timeout: Duration,
    /// Longest time a socket may make no progress.
    pub stall_timeout: Duration,
    /// Addresses the streams connect to in turn (stream `i` to entry
    /// `i mod len`, at the sink's port), for a sink listening on all of
    /// them (an unspecified address); empty: the sink's own address.
    pub destinations: Vec<IpAddr>,
}

impl BulkTransfer {
    /// One stream of `bytes`, seed 1, 120 s overall, 10 s stall.
    pub fn new(bytes: u64) -> Self {
        Self {
            bytes,
            streams: 1,
            seed: 1,
            content: Content::Random,
            timeout: Duration::from_secs(120),
            stall_timeout: Duration::from_secs(10),
            destinations: Vec::new(),
        }
    }

    /// Spreads the streams over `addresses` (see [`Self::destinations`]).
    pub fn destinations(mut self, addresses: Vec<IpAddr>) -> Self {
        self.destinations = addresses;
        self
    }

    pub fn streams(mut self, streams: usize) -> Self {
        self.streams = streams.max(1);
        self
    }

    pub fn content(mut self, content: Content) -> Self {
        self.content = content;
        self
    }

    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn stall_timeout(mut self, stall_timeout: Duration) -> Self {
        self.stall_timeout = stall_timeout;
        self
    }

    /// Runs the sink in `sink_namespace` listening on `sink_address` and the
    /// sources in `source_namespace`, and compares what arrived.
    pub fn run(
        &self,
        source_namespace: &Namespace,
        sink_namespace: &Namespace,
        sink_address: SocketAddr,
    ) -> Result<BulkReport, TrafficError> {
        let streams = self.streams.max(1);
        let deadline = Instant::now() + self.timeout;
        let abort = Arc::new(AtomicBool::new(false));
        let limits = Limits {
            deadline,
            stall: self.stall_timeout,
            abort: abort.clone(),
        };

        let (ready_tx, ready_rx) = mpsc::channel();
        let sink_limits = limits.clone();
        let sink = sink_namespace
            .spawn_thread(move || receive_all(sink_address, streams, &sink_limits, ready_tx))
            .map_err(|source| TrafficError::Io {
                operation: "start the bulk sink thread".into(),
                source,
            })?;
        if ready_rx.recv().is_err() {
            // The sink ended before listening; its result says why.
            return Err(join("bulk sink", sink)
                .err()
                .unwrap_or_else(|| TrafficError::Io {
                    operation: "bulk sink".into(),
                    source: io::Error::other("ended before listening"),
                }));
        }

        let start = Instant::now();
        let mut sources = Vec::with_capacity(streams);
        for (index, length) in split(self.bytes, streams).into_iter().enumerate() {
            let seed = stream_seed(self.seed, index);
            let source_limits = limits.clone();
            let address = match self.destinations.as_slice() {
                [] => sink_address,
                spread => SocketAddr::new(spread[index % spread.len()], sink_address.port()),
            };
            let content = self.content;
            let spawned = source_namespace.spawn_thread(move || {
                send_stream(address, index, length, content, seed, &source_limits)
            });
            match spawned {
                Ok(handle) => sources.push(handle),
                Err(source) => {
                    abort.store(true, Ordering::Relaxed);
                    return Err(TrafficError::Io {
                        operation: format!("start bulk source thread {index}"),
                        source,
                    });
                }
            }
        }

        let sent: Vec<Result<SentStream, TrafficError>> = sources
            .into_iter()
            .enumerate()
            .map(|(index, handle)| join(&format!("bulk source {index}"), handle))
            .collect();
        let received = join("bulk sink", sink);
        let (sent, received) = first_real_error(sent, received)?;
        Ok(report(start, sent, received))
    }
}

/// Time limits shared by every thread of one run.
#[derive(Clone)]
struct Limits {
    deadline: Instant,
    stall: Duration,
    /// Set by whichever thread fails first.
    abort: Arc<AtomicBool>,
}

impl Limits {
    /// Whether to give up after no progress since `last_progress`.
    fn check(&self, last_progress: Instant, what: &str) -> io::Result<()> {
        if self.abort.load(Ordering::Relaxed) {
            return Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "aborted: the other end failed",
            ));
        }
        let now = Instant::now();
        if now >= self.deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what}: run deadline passed"),
            ));
        }
        if now.duration_since(last_progress) >= self.stall {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what}: no progress for {:?}", self.stall),
            ));
        }
        Ok(())
    }

    /// Runs `work`, raising the abort flag if it fails.
    fn guard<T>(&self, work: impl FnOnce() -> io::Result<T>) -> io::Result<T> {
        let result = work();
        if result.is_err() {
            self.abort.store(true, Ordering::Relaxed);
        }
        result
    }
}

fn is_wait(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Splits `bytes` into `streams` lengths differing by at most one.
fn split(bytes: u64, streams: usize) -> Vec<u64> {
    let count = streams as u64;
    (0..count)
        .map(|i| bytes / count + u64::from(i < bytes % count))
        .collect()
}

/// Joins a generator thread, turning a panic into an error.
fn join<T>(what: &str, handle: JoinHandle<io::Result<T>>) -> Result<T, TrafficError> {
    let result = handle
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("thread panicked")));
    result.map_err(|source| TrafficError::Io {
        operation: what.to_string(),
        source,
    })
}

/// Both ends' results, or the error that caused the others: an
/// "aborted" error only reports that some other thread failed first.
#[allow(clippy::type_complexity)]
fn first_real_error(
    sent: Vec<Result<SentStream, TrafficError>>,
    received: Result<Vec<ReceivedStream>, TrafficError>,
) -> Result<(Vec<SentStream>, Vec<ReceivedStream>), TrafficError> {
    let is_abort = |error: &TrafficError| matches!(error, TrafficError::Io { source, .. } if source.kind() == io::ErrorKind::Interrupted);
    let mut errors = Vec::new();
    let mut ok_sent = Vec::new();
    for result in sent {
        match result {
            Ok(stream) => ok_sent.push(stream),
            Err(error) => errors.push(error),
        }
    }
    let ok_received = match received {
        Ok(streams) => streams,
        Err(error) => {
            errors.push(error);
            Vec::new()
        }
    };
    if errors.is_empty() {
        return Ok((ok_sent, ok_received));
    }
    // An end that timed out closes its sockets, so the other end then
    // fails with a broken pipe or a reset: the timeout is the cause.
    let position = errors
        .iter()
        .position(TrafficError::is_timeout)
        .or_else(|| errors.iter().position(|error| !is_abort(error)))
        .unwrap_or(0);
    Err(errors.swap_remove(position))
}

/// The sink: listens, reports readiness, accepts `streams` connections and
/// reads each to EOF on its own thread.
fn receive_all(
    address: SocketAddr,
    streams: usize,
    limits: &Limits,
    ready: mpsc::Sender<()>,
) -> io::Result<Vec<ReceivedStream>> {
    limits.guard(|| {
        let listener = TcpListener::bind(address)
            .map_err(|error| io::Error::new(error.kind(), format!("bind {address}: {error}")))?;
        listener.set_nonblocking(true)?;
        // The receiver is gone only if `run` itself is gone.
        let _ = ready.send(());
        let mut readers = Vec::with_capacity(streams);
        while readers.len() < streams {
            match listener.accept() {
                Ok((stream, _)) => {
                    stream.set_nonblocking(false)?;
                    let reader_limits = limits.clone();
                    readers.push(std::thread::spawn(move || {
                        reader_limits.guard(|| receive_stream(stream, &reader_limits))
                    }));
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => {
                    // Sources time their own connects and raise the abort
                    // flag when they give up; here only the deadline counts.
                    limits.check(Instant::now(), &format!("accept on {address}"))?;
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err(error) => return Err(error),
            }
        }
        let mut received = Vec::with_capacity(streams);
        let mut first_error = None;
        for reader in readers {
            match reader
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("reader panicked")))
            {
                Ok(stream) => received.push(stream),
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        let mut indices: Vec<usize> = received.iter().map(|stream| stream.index).collect();
        indices.sort_unstable();
        indices.dedup();
        if indices.len() != received.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "two connections claimed one stream index",
            ));
        }
        Ok(received)
    })
}

fn receive_stream(mut stream: TcpStream, limits: &Limits) -> io::Result<ReceivedStream> {
    let started = Instant::now();
    stream.set_read_timeout(Some(POLL_INTERVAL))?;
    let mut header = [0u8; HEADER_LEN];
    let mut filled = 0;
    let mut last_progress = Instant::now();
    while filled < HEADER_LEN {
        match stream.read(&mut header[filled..]) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed inside the header",
                ));
            }
            Ok(n) => {
                filled += n;
                last_progress = Instant::now();
            }
            Err(error) if is_wait(&error) => {
                limits.check(last_progress, "sink reading a header")?
            }
            Err(error) => return Err(error),
        }
    }
    if &header[..4] != HEADER_MAGIC {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream header has the wrong magic",
        ));
    }
    let index = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    let mut length = [0u8; 8];
    length.copy_from_slice(&header[8..]);
    let expected = u64::from_be_bytes(length);

    let mut hasher = Xxh3::new();
    let mut buffer = vec![0u8; RECEIVE_BUFFER_BYTES];
    let mut bytes = 0u64;
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => {
                hasher.update(&buffer[..n]);
                bytes += n as u64;
                last_progress = Instant::now();
            }
            Err(error) if is_wait(&error) => {
                limits.check(
                    last_progress,
                    &format!("sink stream {index} after {bytes} of {expected} bytes"),
                )?;
            }
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!("sink stream {index} after {bytes} of {expected} bytes: {error}"),
                ));
            }
        }
    }
    Ok(ReceivedStream {
        index,
        expected,
        bytes,
        digest: hasher.digest128(),
        started,
        finished: Instant::now(),
    })
}

/// One source connection: connect, header, `length` bytes of `content`
/// from `seed`, close.
fn send_stream(
    address: SocketAddr,
    index: usize,
    length: u64,
    content: Content,
    seed: u64,
    limits: &Limits,
) -> io::Result<SentStream> {
    limits.guard(|| {
        let mut stream = connect(address, limits)?;
        stream.set_write_timeout(Some(POLL_INTERVAL))?;
        let mut header = [0u8; HEADER_LEN];
        header[..4].copy_from_slice(HEADER_MAGIC);
        let index_field = u32::try_from(index).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "stream index does not fit 32 bits",
            )
        })?;
        header[4..8].copy_from_slice(&index_field.to_be_bytes());
        header[8..].copy_from_slice(&length.to_be_bytes());
        let mut last_progress = Instant::now();
        write_fully(&mut stream, &header, limits, &mut last_progress, index)?;

        let mut generator = Generator::new(content, seed);
        let mut chunk = vec![0u8; CHUNK_BYTES];
        let mut sent = 0u64;
        while sent < length {
            let take = chunk_len(length - sent);
            let chunk = &mut chunk[..take];
            generator.fill(chunk);
            write_fully(&mut stream, chunk, limits, &mut last_progress, index)?;
            sent += take as u64;
        }
        stream.shutdown(Shutdown::Write)?;
        drop(stream);
        Ok(SentStream {
            index,
            bytes: sent,
            digest: content_digest(content, seed, sent),
        })
    })
}

/// Connects, retrying refusals (the route may not exist yet) for up to the
/// stall time; one attempt may itself wait out a tunnel handshake.
fn connect(address: SocketAddr, limits: &Limits) -> io::Result<TcpStream> {
    let started = Instant::now();
    loop {
        let remaining = limits.stall.saturating_sub(started.elapsed());
        let attempt = remaining.min(limits.deadline.saturating_duration_since(Instant::now()));
        if attempt.is_zero() {
            limits.check(started, &format!("connect to {address}"))?;
        }
        match TcpStream::connect_timeout(&address, attempt.max(Duration::from_millis(1))) {
            Ok(stream) => return Ok(stream),
            Err(error) => {
                if limits
                    .check(started, &format!("connect to {address}"))
                    .is_err()
                {
                    return Err(io::Error::new(
                        error.kind(),
                        format!("connect to {address}: {error}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn write_fully(
    stream: &mut TcpStream,
    mut bytes: &[u8],
    limits: &Limits,
    last_progress: &mut Instant,
    index: usize,
) -> io::Result<()> {
    while !bytes.is_empty() {
        match stream.write(bytes) {
            Ok(0) => {
                return Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "sink closed the connection",
                ));
            }
            Ok(n) => {
                bytes = &bytes[n..];
                *last_progress = Instant::now();
            }
            Err(error) if is_wait(&error) => {
                limits.check(*last_progress, &format!("source stream {index}"))?
            }
            Err(error) => {
                return Err(io::Error::new(
                    error.kind(),
                    format!("source stream {index}: {error}"),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_every_byte() {
        assert_eq!(split(10, 3), [4, 3, 3]);
        assert_eq!(split(2, 4), [1, 1, 0, 0]);
        assert_eq!(split(7, 1), [7]);
    }

    fn io_error(operation: &str, kind: io::ErrorKind) -> TrafficError {
        TrafficError::Io {
            operation: operation.into(),
            source: io::Error::from(kind),
        }
    }

    #[test]
    fn a_timeout_is_the_cause_of_the_broken_pipe_it_leaves() {
        let sent = vec![Err(io_error("bulk source 0", io::ErrorKind::BrokenPipe))];
        let received = Err(io_error("bulk sink", io::ErrorKind::TimedOut));
        let Err(error) = first_real_error(sent, received) else {
            panic!("two failed ends make an error");
        };
        assert!(error.to_string().contains("bulk sink"), "{error}");

        let sent = vec![
            Err(io_error("bulk source 0", io::ErrorKind::Interrupted)),
            Err(io_error("bulk source 1", io::ErrorKind::ConnectionRefused)),
        ];
        let Err(error) = first_real_error(sent, Ok(Vec::new())) else {
            panic!("two failed sources make an error");
        };
        assert!(error.to_string().contains("bulk source 1"), "{error}");
    }

    #[test]
    fn loopback_transfer_verifies() {
        if !crate::netns::is_root() {
            eprintln!("skipping loopback_transfer_verifies: needs root for namespaces");
            return;
        }
        let namespace = Namespace::create("bulk").unwrap();
        let address: SocketAddr = "127.0.0.1:40100".parse().unwrap();
        let report = BulkTransfer::new(3 * 1024 * 1024 + 5)
            .streams(3)
            .timeout(Duration::from_secs(20))
            .run(&namespace, &namespace, address)
            .unwrap();
        assert!(report.verified, "{report:?}");
        assert_eq!(report.bytes, 3 * 1024 * 1024 + 5);
        assert_eq!(report.streams.len(), 3);
        assert_eq!(report.sender_digest, report.receiver_digest);
    }

    #[test]
    fn nothing_listening_fails_fast() {
        if !crate::netns::is_root() {
            eprintln!("skipping nothing_listening_fails_fast: needs root for namespaces");
            return;
        }
        let source = Namespace::create("bsrc").unwrap();
        let sink = Namespace::create("bsnk").unwrap();
        // The sink listens in its own namespace; the source's loopback has
        // nobody there, so connects are refused until the stall time.
        let started = Instant::now();
        let error = BulkTransfer::new(1024)
            .stall_timeout(Duration::from_millis(500))
            .run(&source, &sink, "127.0.0.1:40101".parse().unwrap())
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(5), "{error}");
        assert!(error.to_string().contains("connect"), "{error}");
    }
}
