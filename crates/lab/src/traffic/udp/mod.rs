//! One UDP trial between two namespaces: a paced (or flooding, or bursting)
//! sender and a counting, timing receiver. Everything RFC 2544 measures is
//! a sequence of these trials.
//!
//! Flow of [`Trial::run`]:
//! 1. The receiver thread binds the destination in its namespace, raises its
//!    receive buffer (64 MiB), and reports ready.
//! 2. The sender thread connects from its namespace and warms the path up:
//!    one warm-up frame (stream 0) every 5 ms until the receiver has seen
//!    one, which resolves ARP and lets a tunnel finish its handshake before
//!    the clock starts.
//! 3. The sender offers the trial's frames (stream = a fresh number per
//!    trial, sequence from 0) and stamps the time it finished.
//! 4. The receiver keeps counting until `finish + drain`, where drain is the
//!    larger of [`Trial::drain`] and twice the highest latency seen, then
//!    reports.
//!
//! Pacing: frame `n` is due at `start + n / rate`, computed from the start
//! every time, so the schedule never drifts. The sender wakes, sends every
//! frame already due in batches of [`SEND_BATCH`] (one `sendmmsg` each),
//! and sleeps (1 µs timer slack, no spinning) until the next frame is due
//! but at least [`Trial::pacing_quantum`] after its last wake — so at high
//! rates frames leave in small bursts of `rate × quantum` and the sender
//! uses a fraction of a core, leaving the rest to the tunnel under test.
//! A frame the local stack refuses (socket buffer full, `ENOBUFS`) is
//! counted as offered and lost, as on a tester whose port never blocks; the
//! send buffer is 32 MiB so that this happens only when the path itself
//! queues that much. Frames still unsent when the schedule's end plus 2 %
//! (and 5 ms) has passed are given up and reported as `unsent`: the sender
//! could not offer the load, and the trial proves nothing about that rate.
//!
//! Priority: a tester is normally its own hardware; here it shares two
//! cores with the tunnel under test and whatever else runs. A paced sender
//! that is not scheduled for 50 ms sends the missed frames in one burst
//! afterwards, which a queue in the path may drop — loss the path did not
//! cause. Nice values do not help where the kernel groups threads by
//! session (autogroups), so the paced sender and the receiver of paced
//! trials and bursts run in the real-time FIFO class at
//! [`Trial::realtime_priority`] (default 1, the lowest): they sleep most of
//! the time and use only what the offered rate costs — the path under test
//! gets the same CPU time as before — but are woken first, as a hardware
//! tester would be. A flooding sender (and its receiver) keeps the normal
//! class, since it is busy by design and would otherwise crowd out the path;
//! and a paced thread that has worked [`MAX_REALTIME_BUSY`] without a pause
//! (it cannot keep up) returns to the normal class for the rest of the trial.
//!
//! Carriers: a path may name a [`Carrier`] that takes the sender's
//! datagrams instead of the sender's own socket — the peer emulator seals
//! each into one of its WireGuard sessions. The sender opens the carrier
//! in its thread before the warm-up (when the carrier readies the path),
//! and hands it each batch as it would hand its socket; pacing, warm-up
//! and accounting stay as they are, so a carried trial is measured like
//! any other. [`Trial::run_sender_only`] offers frames with nobody
//! counting them, for a generator's own ceiling.
//!
//! Receiver accounting: a frame counts once (a bitmap by sequence catches
//! duplicates); a frame below the highest sequence seen so far is
//! reordered; a frame more than one above it opens a gap. Lost frames are
//! `offered − received` (with offered from the sender), so tail loss counts
//! too. Latency goes into an HDR histogram in nanoseconds (3 significant
//! figures). Frames dropped by the receiver's own socket (buffer overrun,
//! `SO_MEMINFO`) are reported apart: they are the tester's loss, not the
//! path's.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use fjord_sys::thread::{monotonic_nanos, set_thread_normal, set_thread_realtime};

use super::TrafficError;
use super::frame::{FrameSizes, IpVersion, WARMUP_STREAM, udp_payload_bytes};
use crate::netns::Namespace;

pub mod ends;
mod receiver;
mod report;
mod sender;

pub use report::{ReceiverReport, SenderReport, TrialReport};

/// Datagrams per `sendmmsg`.
pub const SEND_BATCH: usize = 64;
/// Longest a real-time generator thread may work without a pause before
/// it returns to the normal class.
pub const MAX_REALTIME_BUSY: Duration = Duration::from_millis(20);
/// Default UDP port of the receiver.
pub const DEFAULT_PORT: u16 = 47_000;

/// How the sender offers frames.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Offer {
    /// Paced at `frames_per_sec` for `duration`.
    Rate {
        frames_per_sec: f64,
        duration: Duration,
    },
    /// As fast as the sender can, for `duration`.
    Flood { duration: Duration },
    /// `frames` back to back, as fast as the sender can.
    Burst { frames: u64 },
}

impl Offer {
    /// How long the offer lasts if the sender keeps up (bursts: unknown, 0).
    pub fn nominal_duration(&self) -> Duration {
        match *self {
            Self::Rate { duration, .. } | Self::Flood { duration } => duration,
            Self::Burst { .. } => Duration::ZERO,
        }
    }
}

/// Which namespace sends, which receives, and where to.
#[derive(Debug, Clone, Copy)]
pub struct UdpPath<'a> {
    pub sender: &'a Namespace,
    pub receiver: &'a Namespace,
    /// An address of the receiver's namespace (bare underlay or a tunnel's
    /// overlay address) and the port to receive on.
    pub destination: SocketAddr,
    /// Takes the sender's datagrams instead of its own socket (`None`:
    /// the sender sends them itself).
    pub carrier: Option<&'a Arc<dyn Carrier>>,
}

impl<'a> UdpPath<'a> {
    pub fn new(sender: &'a Namespace, receiver: &'a Namespace, destination: SocketAddr) -> Self {
        Self {
            sender,
            receiver,
            destination,
            carrier: None,
        }
    }

    /// The same path with the sender's datagrams taken by `carrier`.
    pub fn carried_by(mut self, carrier: &'a Arc<dyn Carrier>) -> Self {
        self.carrier = Some(carrier);
        self
    }
}

/// Carries a trial's datagrams some other way than the sender's own UDP
/// socket (see the module comment).
pub trait Carrier: Send + Sync + std::fmt::Debug {
    /// Called on the sender's thread, inside the sender's namespace,
    /// before the warm-up (so before the clock starts): readies the path
    /// and returns the sending end for one trial of datagrams to
    /// `destination`.
    fn open(&self, destination: SocketAddr) -> io::Result<Box<dyn CarrierSender>>;
}

/// The sending end of a [`Carrier`] for one trial.
pub trait CarrierSender: Send {
    /// Takes `datagrams` (UDP payloads for the trial's destination) in
    /// order, as `sendmmsg` would: how many it took; an error is the
    /// first one's, and [`fjord_sys::mmsg::send_refusal`] tells a full
    /// buffer or a dropped datagram from a broken path.
    fn send(&mut self, datagrams: &[&[u8]]) -> io::Result<usize>;
    /// Waits up to `timeout` for room to send more.
    fn wait_writable(&self, timeout: Duration);
}

/// One trial's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    pub offer: Offer,
    pub frames: FrameSizes,
    /// Least time the receiver keeps listening after the sender finished
    /// (default 500 ms; twice the highest latency seen if that is longer).
    pub drain: Duration,
    /// Least time between two wakes of a pacing sender (default 200 µs):
    /// frames leave in bursts of `rate × quantum` at high rates. Each wake
    /// costs the sender (and, through the frames it wakes them with, the
    /// receiver) tens of µs of CPU in a VM, so a shorter quantum buys
    /// smoother pacing with CPU taken from the path under test: at
    /// 24,000 frames/s, 50 µs cost about twice the CPU of 200 µs here.
    pub pacing_quantum: Duration,
    /// How long warm-up frames may go unanswered before the path counts as
    /// down (default 5 s).
    pub warmup_timeout: Duration,
    /// Real-time FIFO priority of the paced sender and of the receiver of
    /// paced trials and bursts (default 1; `None` keeps the normal class).
    /// Without `CAP_SYS_NICE` the threads stay in the normal class.
    pub realtime_priority: Option<i32>,
}

impl Trial {
    pub fn new(offer: Offer, frames: FrameSizes) -> Self {
        Self {
            offer,
            frames,
            drain: Duration::from_millis(500),
            pacing_quantum: Duration::from_micros(200),
            warmup_timeout: Duration::from_secs(5),
            realtime_priority: Some(1),
        }
    }

    /// `frames_per_sec` of `frames` for `duration`.
    pub fn rate(frames: FrameSizes, frames_per_sec: f64, duration: Duration) -> Self {
        Self::new(
            Offer::Rate {
                frames_per_sec,
                duration,
            },
            frames,
        )
    }

    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    pub fn pacing_quantum(mut self, quantum: Duration) -> Self {
        self.pacing_quantum = quantum;
        self
    }

    /// The receiver's real-time priority: none under a flood, which would
    /// keep it busy and crowd out the path.
    fn receiver_priority(&self) -> Option<i32> {
        match self.offer {
            Offer::Flood { .. } => None,
            _ => self.realtime_priority,
        }
    }

    /// The receiver's last resort if the sender's finish never comes.
    fn give_up_after(&self) -> Duration {
        self.offer.nominal_duration() * 2 + self.warmup_timeout + Duration::from_secs(30)
    }

    fn validate(&self, ip: IpVersion) -> Result<(), TrafficError> {
        let invalid = |what: String| TrafficError::Io {
            operation: "check the UDP trial".into(),
            source: io::Error::new(io::ErrorKind::InvalidInput, what),
        };
        for &size in self.frames.as_slice() {
            if udp_payload_bytes(size, ip).is_none() {
                return Err(invalid(format!(
                    "a {size}-byte frame cannot carry the payload header over {ip:?} \
                     (smallest {}, largest {})",
                    ip.min_frame_bytes(),
                    super::frame::MAX_FRAME_BYTES
                )));
            }
        }
        match self.offer {
            Offer::Rate { frames_per_sec, .. }
                if !(frames_per_sec > 0.0 && frames_per_sec.is_finite()) =>
            {
                Err(invalid(format!("offered rate {frames_per_sec} frames/s")))
            }
            _ => Ok(()),
        }
    }

    /// Runs the trial on `path`: receiver first, then the sender; returns
    /// both sides' counts.
    pub fn run(&self, path: &UdpPath<'_>) -> Result<TrialReport, TrafficError> {
        let ip = IpVersion::of(&path.destination);
        self.validate(ip)?;
        let stream = next_stream();
        let shared = Arc::new(Shared::default());
        let destination = path.destination;
        let give_up_after = self.give_up_after();

        let (ready_tx, ready_rx) = mpsc::channel();
        let receiver = {
            let shared = shared.clone();
            let listen = receiver::Listen {
                bind: destination,
                frames: self.frames.clone(),
                stream,
                drain: self.drain,
                give_up_after,
                realtime_priority: self.receiver_priority(),
                one_clock: true,
            };
            path.receiver
                .spawn_thread(move || {
                    let result = receiver::receive(&listen, &shared, ready_tx);
                    if result.is_err() {
                        shared.abort.store(true, Ordering::Relaxed);
                    }
                    result
                })
                .map_err(|source| io_error("start the UDP receiver thread", source))?
        };
        if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
            shared.abort.store(true, Ordering::Relaxed);
            return Err(join("UDP receiver", receiver).err().unwrap_or_else(|| {
                io_error("UDP receiver", io::Error::other("ended before binding"))
            }));
        }

        let sender = self.spawn_sender(path, stream, &shared);
        let receiver = join("UDP receiver", receiver);
        // The side that failed first explains the other's abort.
        let sender = sender?;
        let receiver = receiver?;
        let target_frames_per_sec = match self.offer {
            Offer::Rate { frames_per_sec, .. } => Some(frames_per_sec),
            _ => None,
        };
        Ok(TrialReport {
            frames: self.frames.clone(),
            target_frames_per_sec,
            sender,
            receiver,
        })
    }
}

impl Trial {
    /// Runs only the sender of a [flood](Offer::Flood) on `path`, with no
    /// warm-up and nobody counting what arrives: how fast the generator
    /// (with its carrier, if the path has one) offers frames when nothing
    /// answers, as into a sink that drops everything.
    pub fn run_sender_only(&self, path: &UdpPath<'_>) -> Result<SenderReport, TrafficError> {
        let ip = IpVersion::of(&path.destination);
        self.validate(ip)?;
        if !matches!(self.offer, Offer::Flood { .. }) {
            return Err(io_error(
                "run a sender alone",
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    "only a flood runs without a receiver",
                ),
            ));
        }
        let shared = Arc::new(Shared::default());
        // Nobody answers the warm-up: take it as done.
        shared.warmed_up.store(true, Ordering::Release);
        self.spawn_sender(path, next_stream(), &shared)
    }

    /// The sender thread on `path.sender`, joined: its report, or why it
    /// failed (after telling the receiver, if any, to give up).
    fn spawn_sender(
        &self,
        path: &UdpPath<'_>,
        stream: u16,
        shared: &Arc<Shared>,
    ) -> Result<SenderReport, TrafficError> {
        let destination = path.destination;
        let carrier = path.carrier.cloned();
        let thread = {
            let shared = shared.clone();
            let trial = self.clone();
            path.sender.spawn_thread(move || {
                let result = sender::send(destination, carrier.as_deref(), &trial, stream, &shared);
                if result.is_err() {
                    shared.abort.store(true, Ordering::Relaxed);
                }
                shared
                    .sender_done_ns
                    .store(monotonic_nanos().max(1), Ordering::Release);
                result
            })
        };
        match thread {
            Ok(handle) => join("UDP sender", handle),
            Err(source) => {
                shared.abort.store(true, Ordering::Relaxed);
                Err(io_error("start the UDP sender thread", source))
            }
        }
    }
}

/// A generator thread's stay in the real-time class: entered when paced
/// work starts, left for good once the thread has been busy without a
/// pause for [`MAX_REALTIME_BUSY`].
struct Realtime {
    active: bool,
    /// Monotonic ns when the thread last ran out of work.
    idle_at: u64,
}

impl Realtime {
    /// Enters the real-time class at `priority` (if any), or says once why
    /// it could not.
    fn enter(priority: Option<i32>) -> Self {
        static WARNED: AtomicBool = AtomicBool::new(false);
        let active = match priority.map(set_thread_realtime) {
            Some(Ok(())) => true,
            Some(Err(error)) => {
                if !WARNED.swap(true, Ordering::Relaxed) {
                    tracing::warn!(%error, "generator threads stay in the normal scheduling class");
                }
                false
            }
            None => false,
        };
        Self {
            active,
            idle_at: monotonic_nanos(),
        }
    }

    /// The thread ran out of work at `now` (it is about to sleep or wait).
    fn idle(&mut self, now: u64) {
        self.idle_at = now;
    }

    /// The thread is still working at `now`.
    fn busy(&mut self, now: u64) {
        if self.active && now.saturating_sub(self.idle_at) > nanos(MAX_REALTIME_BUSY) {
            self.active = false;
            if let Err(error) = set_thread_normal() {
                tracing::warn!(%error, "could not leave the real-time class");
            }
        }
    }
}

fn io_error(operation: &str, source: io::Error) -> TrafficError {
    TrafficError::Io {
        operation: operation.into(),
        source,
    }
}

fn join<T>(what: &str, handle: JoinHandle<io::Result<T>>) -> Result<T, TrafficError> {
    match handle.join() {
        Ok(result) => result.map_err(|source| io_error(what, source)),
        Err(_) => Err(io_error(what, io::Error::other("thread panicked"))),
    }
}

/// Trial stream numbers, never [`WARMUP_STREAM`]: frames of an earlier
/// trial still in flight do not count in the next.
pub(crate) fn next_stream() -> u16 {
    static NEXT: AtomicU16 = AtomicU16::new(1);
    loop {
        let stream = NEXT.fetch_add(1, Ordering::Relaxed);
        if stream != WARMUP_STREAM {
            return stream;
        }
    }
}

/// State one trial's two threads share.
#[derive(Default)]
struct Shared {
    /// Set by whichever side fails; the other gives up.
    abort: AtomicBool,
    /// Set by the receiver when a warm-up frame arrived.
    warmed_up: AtomicBool,
    /// Monotonic ns when the sender finished (0 = still sending).
    sender_done_ns: AtomicU64,
}

fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::Interrupted, "aborted: the other side failed")
}

fn check_abort(abort: &AtomicBool) -> io::Result<()> {
    if abort.load(Ordering::Relaxed) {
        Err(aborted())
    } else {
        Ok(())
    }
}

fn nanos(duration: Duration) -> u64 {
    u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX)
}

fn context(error: io::Error, operation: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{operation}: {error}"))
}
