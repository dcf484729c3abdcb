//! The link emulator: a bump in the wire between two interfaces of the
//! middle namespace (see [`crate::topology::TwoHosts::with_middle`]) that
//! bridges Ethernet frames with AF_PACKET raw sockets and impairs each
//! direction on its own: delay, jitter, random and bursty loss, a rate
//! limit with a bounded queue, reordering and duplication.
//!
//! The kernel here has no netem, so this is the lab's netem. Impairments
//! act in the middle, where a network would lose packets, never in a
//! sender's own output path; and on wire-sized frames, which is why the
//! middle layout turns segmentation offloads off (any super-frame that
//! still arrives is counted as [`DropReason::Oversize`] and dropped — it
//! could not be sent on anyway).
//!
//! Layout: [`config`] and [`spec`] describe a direction; [`link`] (with
//! [`models`], [`rng`] and [`scheduler`]) is the pure decision logic, tested
//! on simulated time; `pump` and `worker` do the I/O in threads that live
//! in the middle namespace.
//!
//! How the I/O keeps time cheaply: one raw socket per interface
//! (`PACKET_QDISC_BYPASS`, `PACKET_IGNORE_OUTGOING`), batches of 64 with
//! `recvmmsg`/`sendmmsg`, frames held in recycled slots. Each frame's
//! arrival time is the kernel's receive timestamp, so a busy direction is
//! read only every so often (up to 1 ms, at most half the delay) in large
//! batches without adding delay. Threads sleep in `ppoll` until the next
//! release, set ahead by their measured wakeup latency, and run at
//! real-time priority by default (see [`ThreadPriority`]).
//!
//! ```no_run
//! # use fjord_lab::emulator::{Emulator, LinkConfig};
//! # use fjord_lab::topology::{TwoHosts, MIDDLE_LEFT_LINK, MIDDLE_RIGHT_LINK};
//! let hosts = TwoHosts::with_middle()?;
//! let link: LinkConfig = "delay=20ms,loss=1%,rate=100mbit".parse()?;
//! let emulator = Emulator::start(
//!     hosts.middle.as_ref().unwrap(),
//!     MIDDLE_LEFT_LINK,
//!     MIDDLE_RIGHT_LINK,
//!     link.clone(),
//!     link,
//! )?;
//! // … measure between hosts.left and hosts.right …
//! let stats = emulator.stop()?;
//! println!("{} frames lost left to right", stats.left_to_right.dropped.random_loss);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod config;
pub mod link;
pub mod models;
mod pump;
pub mod rng;
pub mod scheduler;
pub mod spec;
pub mod stats;
mod worker;

use std::io;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use fjord_sys::packet::PacketSocket;
use fjord_sys::socket::{SocketBuffer, enable_receive_timestamps, force_buffer_size};

pub use config::{
    ConfigError, GilbertElliott, JitterOrder, LinkConfig, Probability, QueueLimit, Reorder,
};
pub use spec::SpecError;
pub use stats::{DropCounts, DropReason, EmulatorStats, LinkStats};

use crate::netns::Namespace;
use link::LinkModel;
use pump::{Clock, Direction, Pump};

/// How the two directions share threads.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Threading {
    /// One thread per direction: directions never wait for each other.
    /// At 1 Gbit/s through 45 ms on a busy 2-core machine: mean release
    /// error +4 to +80 µs, nothing dropped.
    #[default]
    PerDirection,
    /// One thread serves both: one thread fewer, but no cheaper in the
    /// same runs (the work is per frame) and its timing was worse (mean
    /// release error +30 to +210 µs).
    Shared,
}

/// Scheduling of the emulator's threads. The emulator stands in for a
/// network, which does not queue behind the hosts' work for CPU; favouring
/// its threads keeps a busy machine from turning into extra delay and loss.
/// They sleep between releases, so they take only the CPU they need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadPriority {
    /// Whatever the starting thread had.
    Inherit,
    /// A nice value; negative ones favour the emulator over ordinary work.
    Nice(i32),
    /// SCHED_FIFO at this priority (1–99), ahead of all ordinary work; the
    /// kernel's real-time throttling still leaves others 5 % of each CPU.
    Realtime(i32),
}

/// Tuning of the emulator itself (not of the emulated link).
#[derive(Clone, Debug)]
pub struct EmulatorOptions {
    pub threading: Threading,
    /// Default `Realtime(10)`: on a shared 2-core machine with builds
    /// running, ordinary priority measured releases up to 150 ms late.
    /// Falls back (with a warning) to the inherited priority without
    /// CAP_SYS_NICE.
    pub priority: ThreadPriority,
    /// Frame slots per direction: frames held at once (in the rate
    /// limiter's queue and in flight). `None` sizes it from the link:
    /// room for 250,000 frames/s over the longest hold, plus the queue,
    /// plus 4096 (at least). Slots are allocated as first needed, so a
    /// generous bound costs nothing until used.
    pub buffer_frames: Option<usize>,
    /// How late frames may leave, in exchange for fewer wakeups: the
    /// emulator wakes this long after a release time (less its measured
    /// wakeup latency) and sends everything due by then. It applies the
    /// slack itself because Linux ignores the timer slack of real-time
    /// threads. Default 50 µs, the timer slack Linux gives ordinary threads.
    /// At 1 Gbit/s of 1500-byte frames, 50 µs measured about 5000 wakeups/s,
    /// 0.5 core and a mean release error of +42 µs; 250 µs about 2300
    /// wakeups/s, 0.36 core and +122 µs.
    pub release_slack: Duration,
    /// Receive and send buffer of each raw socket, bytes. Default 32 MiB:
    /// room for a few tens of milliseconds of 1 Gbit/s should the emulator
    /// be descheduled.
    pub socket_buffer_bytes: usize,
}

impl Default for EmulatorOptions {
    fn default() -> Self {
        Self {
            threading: Threading::default(),
            priority: ThreadPriority::Realtime(10),
            buffer_frames: None,
            release_slack: Duration::from_micros(50),
            socket_buffer_bytes: 32 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    #[error("invalid {direction} link: {source}")]
    Config {
        direction: &'static str,
        #[source]
        source: ConfigError,
    },
    #[error("could not open a raw socket on `{link}` in the middle namespace: {source}")]
    Open {
        link: String,
        #[source]
        source: io::Error,
    },
    #[error("could not start an emulator thread: {0}")]
    Spawn(#[source] io::Error),
    #[error("an emulator thread failed: {0}")]
    Worker(#[source] io::Error),
    #[error("an emulator thread panicked")]
    WorkerPanicked,
}

/// Starts emulators.
#[derive(Debug)]
pub struct Emulator;

impl Emulator {
    /// Bridges `left_link` and `right_link` of `middle`, impairing frames
    /// from left to right with `left_to_right` and the others with
    /// `right_to_left`; default [`EmulatorOptions`].
    pub fn start(
        middle: &Namespace,
        left_link: &str,
        right_link: &str,
        left_to_right: LinkConfig,
        right_to_left: LinkConfig,
    ) -> Result<RunningEmulator, EmulatorError> {
        Self::start_with(
            middle,
            left_link,
            right_link,
            left_to_right,
            right_to_left,
            EmulatorOptions::default(),
        )
    }

    pub fn start_with(
        middle: &Namespace,
        left_link: &str,
        right_link: &str,
        left_to_right: LinkConfig,
        right_to_left: LinkConfig,
        options: EmulatorOptions,
    ) -> Result<RunningEmulator, EmulatorError> {
        for (direction, config) in [
            ("left-to-right", &left_to_right),
            ("right-to-left", &right_to_left),
        ] {
            config
                .validate()
                .map_err(|source| EmulatorError::Config { direction, source })?;
        }
        let ports = open_ports(middle, left_link, right_link, options.socket_buffer_bytes)?;
        let [left, right] = ports.map(|(socket, mtu)| (Arc::new(socket), mtu));
        let slots = |config: &LinkConfig| {
            options
                .buffer_frames
                .unwrap_or_else(|| default_buffer_frames(config))
        };
        let left_to_right = Pump::new(
            Direction::LeftToRight,
            left.0.clone(),
            right.0.clone(),
            LinkModel::new(left_to_right.clone()),
            (left.1, right.1),
            slots(&left_to_right),
        );
        let right_to_left = Pump::new(
            Direction::RightToLeft,
            right.0,
            left.0,
            LinkModel::new(right_to_left.clone()),
            (right.1, left.1),
            slots(&right_to_left),
        );
        let groups = match options.threading {
            Threading::PerDirection => vec![vec![left_to_right], vec![right_to_left]],
            Threading::Shared => vec![vec![left_to_right, right_to_left]],
        };
        let shared = Arc::new(Shared {
            left_to_right: Mutex::default(),
            right_to_left: Mutex::default(),
            cpu_nanos: groups.iter().map(|_| AtomicU64::new(0)).collect(),
            thread_ids: Mutex::default(),
        });
        let mut running = RunningEmulator {
            stop: Arc::new(AtomicBool::new(false)),
            workers: Vec::new(),
            shared,
        };
        let clock = Clock::new();
        for (worker, pumps) in groups.into_iter().enumerate() {
            let (stop, shared) = (running.stop.clone(), running.shared.clone());
            let tuning = worker::Tuning {
                release_slack: options.release_slack,
                priority: options.priority,
            };
            let handle = middle
                .spawn_thread(move || worker::run(pumps, clock, stop, shared, worker, tuning))
                .map_err(EmulatorError::Spawn)?;
            running.workers.push(handle);
        }
        Ok(running)
    }
}

/// Opens one raw socket per link inside `middle` (sockets stay in the
/// namespace they were created in, whichever thread uses them).
fn open_ports(
    middle: &Namespace,
    left_link: &str,
    right_link: &str,
    buffer_bytes: usize,
) -> Result<[(PacketSocket, u32); 2], EmulatorError> {
    let links = [left_link.to_string(), right_link.to_string()];
    let opener = middle
        .spawn_thread(move || {
            let open = |link: &String| {
                open_port(link, buffer_bytes).map_err(|source| EmulatorError::Open {
                    link: link.clone(),
                    source,
                })
            };
            Ok(open(&links[0]).and_then(|left| Ok([left, open(&links[1])?])))
        })
        .map_err(EmulatorError::Spawn)?;
    match opener.join() {
        Ok(Ok(ports)) => ports,
        Ok(Err(error)) => Err(EmulatorError::Spawn(error)),
        Err(_) => Err(EmulatorError::WorkerPanicked),
    }
}

fn open_port(link: &str, buffer_bytes: usize) -> io::Result<(PacketSocket, u32)> {
    let socket = PacketSocket::bind(link)?;
    socket.set_qdisc_bypass(true)?;
    socket.set_ignore_outgoing(true)?;
    socket.set_promiscuous()?;
    // The kernel doubles the size it is given; ask for half.
    force_buffer_size(socket.as_fd(), SocketBuffer::Receive, buffer_bytes / 2)?;
    force_buffer_size(socket.as_fd(), SocketBuffer::Send, buffer_bytes / 2)?;
    enable_receive_timestamps(socket.as_fd())?;
    let mtu = socket.mtu()?;
    Ok((socket, mtu))
}

/// Frame slots for a direction when the options leave it open.
pub fn default_buffer_frames(config: &LinkConfig) -> usize {
    const FRAMES_PER_SEC: f64 = 250_000.0;
    let in_flight = (config.max_hold().as_secs_f64() * FRAMES_PER_SEC).ceil() as usize;
    let queue = match config.rate_bits_per_sec {
        Some(_) => match config.queue_limit {
            QueueLimit {
                packets: Some(packets),
                ..
            } => packets as usize,
            QueueLimit {
                bytes: Some(bytes), ..
            } => usize::try_from(bytes / 60).unwrap_or(usize::MAX),
            _ => 1 << 16,
        },
        None => 0,
    };
    (4096 + in_flight + queue).min(1 << 21)
}

/// State the worker threads publish and the handle reads.
#[derive(Debug)]
pub(crate) struct Shared {
    left_to_right: Mutex<LinkStats>,
    right_to_left: Mutex<LinkStats>,
    /// CPU time of each worker thread, nanoseconds.
    cpu_nanos: Vec<AtomicU64>,
    /// Kernel thread IDs of the workers.
    thread_ids: Mutex<Vec<u32>>,
}

/// A running emulator; stops (and joins its threads) on drop.
#[derive(Debug)]
pub struct RunningEmulator {
    stop: Arc<AtomicBool>,
    workers: Vec<JoinHandle<io::Result<()>>>,
    shared: Arc<Shared>,
}

impl RunningEmulator {
    /// Counters as last published (every couple of milliseconds).
    pub fn stats(&self) -> EmulatorStats {
        let read = |stats: &Mutex<LinkStats>| stats.lock().map(|s| *s).unwrap_or_default();
        let cpu_nanos = self
            .shared
            .cpu_nanos
            .iter()
            .map(|slot| slot.load(Ordering::Relaxed))
            .sum();
        EmulatorStats {
            left_to_right: read(&self.shared.left_to_right),
            right_to_left: read(&self.shared.right_to_left),
            cpu_time: Duration::from_nanos(cpu_nanos),
        }
    }

    /// Kernel thread IDs of the emulator's threads (once they have started).
    pub fn thread_ids(&self) -> Vec<u32> {
        self.shared
            .thread_ids
            .lock()
            .map(|ids| ids.clone())
            .unwrap_or_default()
    }

    /// Whether every thread is still forwarding.
    pub fn is_running(&self) -> bool {
        !self.workers.is_empty() && self.workers.iter().all(|worker| !worker.is_finished())
    }

    /// Stops forwarding, joins the threads and returns the final counters
    /// (frames still in flight are discarded and counted as such).
    pub fn stop(mut self) -> Result<EmulatorStats, EmulatorError> {
        self.shutdown()?;
        Ok(self.stats())
    }

    fn shutdown(&mut self) -> Result<(), EmulatorError> {
        self.stop.store(true, Ordering::Release);
        let mut result = Ok(());
        for worker in self.workers.drain(..) {
            let outcome = match worker.join() {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(EmulatorError::Worker(error)),
                Err(_) => Err(EmulatorError::WorkerPanicked),
            };
            if result.is_ok() {
                result = outcome;
            }
        }
        result
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        if let Err(error) = self.shutdown() {
            tracing::warn!(%error, "link emulator stopped with an error");
        }
    }
}
