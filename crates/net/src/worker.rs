//! The worker: one thread that owns the TUN device, the UDP socket and the
//! node, and runs every packet to completion.
//!
//! ```text
//! loop {
//!     epoll wait (TUN readable | UDP readable | a peer's socket readable |
//!         control waker | signal | next timer), or just poll while a reply
//!         to recent traffic may be coming (busy_poll.rs)
//!     one turn over the ready sources (worker/turn.rs): bounded batches
//!     from the TUN, then from each peer's own socket, then from the
//!     interface's socket (one batch only while the others have work, and
//!     under a handshake flood within an eighth of a core); then timers,
//!     queued control datagrams, events and control calls; sources left
//!     ready make the next wait a poll that returns at once
//!     a handshake completed or an endpoint moved: that endpoint gets a
//!         connected socket of its own (steering.rs)
//!     once a second: follow the MTU, log refused datagrams (drop_report.rs),
//!         close sockets of endpoints no peer uses
//! }
//! ```
//!
//! With `--threads` above one, the seal and open calls of large batches
//! are shared with idle threads (`crypto_stage.rs`); all else stays here.
//!
//! Sources are edge-triggered, so each is drained until it would block;
//! bounding each turn keeps one busy direction from starving the other.

mod carriers;
mod events;
mod steer;
mod transmit;
mod turn;

use std::io;
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use fjord_mesh::Node;
use mio::unix::SourceFd;
use mio::{Events, Interest, Poll, Token, Waker};

use crate::busy_poll::{BusyPoll, SPIN_WINDOW};
use crate::carrier_log::CarrierLog;
use crate::control::{ControlCall, ControlContext, ControlHandle};
use crate::crypto_stage::CryptoStage;
use crate::datapath::{Inbound, Outbound, Pace, ReceiveOn};
use crate::drop_report::DropReport;
use crate::egress::Egress;
use crate::endpoint_log::EndpointLog;
use crate::port_prediction::PortPrediction;
use crate::stall_watch::{Stall, StallWatch};
use crate::stats::DataStats;
use crate::time_share::TimeShare;
use crate::tun::TunDevice;
use crate::unanswered_log::UnansweredLog;
use turn::{FLOODED_SOCKET_CREDIT, FLOODED_SOCKET_SHARE, Ready};

const TUN: Token = Token(0);
const UDP: Token = Token(1);
const CONTROL: Token = Token(2);
const SHUTDOWN: Token = Token(3);
/// The fallback carriers' listener; their connections poll as
/// `carrier_tokens.start + slot` (carrier/).
const CARRIER_LISTENER: Token = Token(4);
/// The fake-TCP carrier's raw socket (carrier/fake_tcp/).
const FAKE_TCP: Token = Token(5);
/// Notice of the host's address changes (worker/steer.rs).
const ADDRESSES: Token = Token(6);
/// Steered sockets (steering.rs) poll as `STEERED + slot`.
const STEERED: usize = 16;
/// Port prediction sockets poll from here on (port_prediction.rs).
const PREDICTION: usize = STEERED + crate::steering::MAX_STEERED;

/// Batches per source before yielding to the others.
const BATCHES_PER_TURN: usize = 8;
/// How often the worker looks for changes made behind its back (the MTU)
/// and at refused datagrams.
const HOUSEKEEPING_INTERVAL: Duration = Duration::from_secs(1);
/// Turns in a row without progress (see [`DataStats::idle_turns`]) after
/// which the worker waits [`IDLE_WAIT`] between turns instead of polling
/// again at once: a loop that cannot make progress then costs a few
/// percent of a core instead of all of it, and traffic that comes still
/// wakes the worker at once.
const IDLE_TURNS_BEFORE_WAIT: u32 = 64;
const IDLE_WAIT: Duration = Duration::from_millis(1);
/// At most one warning per member per this long about its refusing our
/// certificate: a refused node greets again at every handshake.
const REFUSAL_LOG_INTERVAL: Duration = Duration::from_secs(60);
/// At most one warning about turns without progress per this long.
const IDLE_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// `--threads` when not given: one per two CPUs this process may run on,
/// at least one. Per Gbit/s a tunnel spends about as much CPU in the
/// kernel (copies, the TCP/UDP stack, softirq) as in its own crypto, so
/// crypto threads on every core would only fight the kernel for them. On
/// two cores, measured with both tunnel ends and the traffic on one
/// machine, a second thread carried no more and cost ~8 % more CPU per Gbit.
pub fn default_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |cpus| (cpus.get() / 2).max(1))
}

/// Why the worker stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// SIGINT or SIGTERM.
    Signal,
    /// The interface was deleted.
    InterfaceDeleted,
}

#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("event loop setup failed ({what}): {source}")]
    Setup {
        what: &'static str,
        #[source]
        source: io::Error,
    },
    #[error("waiting for events failed: {0}")]
    Poll(#[source] io::Error),
}

pub struct Worker {
    node: Node,
    tun: TunDevice,
    udp: Egress,
    fwmark: u32,
    poll: Poll,
    control: Receiver<ControlCall>,
    /// Read end of the signal pipe; registered with epoll, kept open here.
    _signal_pipe: mio::net::UnixStream,
    outbound: Outbound,
    inbound: Inbound,
    control_buffer: Vec<u8>,
    stats: DataStats,
    next_housekeeping: Instant,
    drop_report: DropReport,
    /// Rate-limits the lines about peer endpoints that moved.
    endpoint_log: EndpointLog<fjord_proto::PeerId>,
    /// Keeps each member's refusals of our certificate to a line a minute.
    refusal_log: EndpointLog<fjord_proto::PublicKey>,
    /// Keeps a dead peer's abandoned handshakes to one warning.
    unanswered_log: UnansweredLog<String>,
    /// Which carrier problems were warned about (one per far end and kind
    /// an hour).
    carrier_log: CarrierLog,
    /// Peers with packets waiting and nothing leaving (one warning each).
    stalls: StallWatch<fjord_proto::PublicKey>,
    /// Turns in a row that found work and moved no data, and when that
    /// was last told in the log.
    idle_streak: u32,
    idle_warned_at: Option<Instant>,
    busy_poll_window: Duration,
    /// Threads sharing the crypto (`--threads`), this one included.
    threads: usize,
    prediction: PortPrediction,
    /// Poll tokens of carrier connections, one per slot.
    carrier_tokens: std::ops::Range<usize>,
    /// The interface's socket's share of time under a flood, and when it
    /// may be read again after using it up (unwatched until then).
    flooded_socket: TimeShare,
    udp_paused_until: Option<Instant>,
    /// Readable when the host's addresses change; `None` if it could not
    /// be opened (kept source addresses then go stale until a restart).
    address_watch: Option<fjord_sys::address_watch::AddressWatch>,
}

impl Worker {
    /// Sets up the event loop. SIGINT and SIGTERM end [`Worker::run`].
    pub fn new(
        node: Node,
        tun: TunDevice,
        udp: Egress,
        fwmark: u32,
    ) -> Result<(Self, ControlHandle), WorkerError> {
        let setup =
            |what: &'static str| move |source: io::Error| WorkerError::Setup { what, source };
        let poll = Poll::new().map_err(setup("epoll"))?;
        let waker = Arc::new(Waker::new(poll.registry(), CONTROL).map_err(setup("waker"))?);
        let (handle, control) = ControlHandle::new(waker);
        let (shutdown, signal_end) =
            std::os::unix::net::UnixStream::pair().map_err(setup("signal pipe"))?;
        shutdown
            .set_nonblocking(true)
            .map_err(setup("signal pipe"))?;
        signal_end
            .set_nonblocking(true)
            .map_err(setup("signal pipe"))?;
        let mut shutdown = mio::net::UnixStream::from_std(shutdown);
        for signal in [libc::SIGINT, libc::SIGTERM] {
            let end = signal_end.try_clone().map_err(setup("signal pipe"))?;
            signal_hook::low_level::pipe::register(signal, end).map_err(setup("signal handler"))?;
        }
        poll.registry()
            .register(&mut SourceFd(&tun.as_raw_fd()), TUN, Interest::READABLE)
            .map_err(setup("register TUN"))?;
        poll.registry()
            .register(&mut SourceFd(&udp.as_raw_fd()), UDP, Interest::READABLE)
            .map_err(setup("register UDP"))?;
        poll.registry()
            .register(&mut shutdown, SHUTDOWN, Interest::READABLE)
            .map_err(setup("register signal pipe"))?;
        if let Some(fd) = udp.carriers().listener_fd() {
            poll.registry()
                .register(&mut SourceFd(&fd), CARRIER_LISTENER, Interest::READABLE)
                .map_err(setup("register the carrier listener"))?;
        }
        if let Some((fd, _)) = udp.carriers().fake_tcp() {
            poll.registry()
                .register(&mut SourceFd(&fd), FAKE_TCP, Interest::READABLE)
                .map_err(setup("register the fake-TCP socket"))?;
        }
        let address_watch = fjord_sys::address_watch::AddressWatch::open()
            .and_then(|watch| {
                poll.registry()
                    .register(
                        &mut SourceFd(&watch.as_raw_fd()),
                        ADDRESSES,
                        Interest::READABLE,
                    )
                    .map(|()| watch)
            })
            .inspect_err(|error| {
                tracing::warn!(%error, "cannot watch the host's address changes; a removed source address stays in use until a restart");
            })
            .ok();
        let prediction = PortPrediction::new(PREDICTION);
        let carrier_tokens =
            prediction.token_end()..prediction.token_end() + crate::carrier::MAX_CARRIERS;
        let mtu = node.device().mtu();
        let layout = node.inner_layout();
        let drop_report = DropReport::new(Instant::now(), &node.drops());
        let worker = Self {
            node,
            tun,
            udp,
            fwmark,
            poll,
            control,
            _signal_pipe: shutdown,
            outbound: Outbound::new(mtu, layout),
            inbound: Inbound::new(),
            control_buffer: vec![0; 65_536],
            stats: DataStats::default(),
            next_housekeeping: Instant::now() + HOUSEKEEPING_INTERVAL,
            drop_report,
            endpoint_log: EndpointLog::default(),
            refusal_log: EndpointLog::with_interval(REFUSAL_LOG_INTERVAL),
            unanswered_log: UnansweredLog::default(),
            carrier_log: CarrierLog::default(),
            stalls: StallWatch::default(),
            idle_streak: 0,
            idle_warned_at: None,
            busy_poll_window: SPIN_WINDOW,
            threads: 1,
            prediction,
            carrier_tokens,
            flooded_socket: TimeShare::new(
                Instant::now(),
                FLOODED_SOCKET_SHARE,
                FLOODED_SOCKET_CREDIT,
            ),
            udp_paused_until: None,
            address_watch,
        };
        Ok((worker, handle))
    }

    /// Always sleep when there is nothing to do (see `busy_poll.rs` for
    /// what polling briefly after traffic buys and costs).
    pub fn without_busy_poll(mut self) -> Self {
        self.busy_poll_window = Duration::ZERO;
        self
    }

    /// Spreads the encryption and decryption of large batches over
    /// `threads` threads, this worker's included (see `crypto_stage.rs`).
    pub fn with_threads(mut self, threads: usize) -> Self {
        self.threads = threads.max(1);
        self
    }

    pub fn stats(&self) -> &DataStats {
        &self.stats
    }

    /// Runs until a signal arrives or the interface disappears.
    pub fn run(mut self) -> Result<StopReason, WorkerError> {
        let stage = CryptoStage::new(self.threads).map_err(|source| WorkerError::Setup {
            what: "crypto threads",
            source,
        })?;
        tracing::debug!(threads = stage.threads(), "crypto threads");
        let mut events = Events::with_capacity(64);
        // Send initiations and persistent keepalives that are due at start.
        self.after_io(Instant::now());
        let mut busy_poll = BusyPoll::with_window(Instant::now(), self.busy_poll_window);
        let mut ready = Ready::default();
        let mut tun_at_last_wake = false;
        // When timers due were last handled: a deadline not past it would
        // make every wait return at once.
        let mut timers_handled_at = Instant::now();
        loop {
            let node_deadline = self.node.poll_timeout();
            let timer_stuck = node_deadline.is_some_and(|deadline| deadline <= timers_handled_at);
            let deadline = node_deadline.map_or(self.next_housekeeping, |next| {
                next.min(self.next_housekeeping)
            });
            let before_poll = Instant::now();
            let deadline = match self.udp_paused_until {
                Some(until) if until <= before_poll => {
                    self.watch_udp();
                    deadline
                }
                Some(until) => deadline.min(until),
                None => deadline,
            };
            // With work left from the last turn, only look for more: new
            // readiness (a peer's socket, the control waker) shows up here
            // and nowhere else, also while a flood never lets a source run
            // dry.
            let busy = ready.any(self.udp_paused_until.is_some());
            let stuck = self.idle_streak >= IDLE_TURNS_BEFORE_WAIT;
            let spinning = !busy && !stuck && busy_poll.should_spin(before_poll);
            let timeout = if stuck {
                IDLE_WAIT.min(deadline.saturating_duration_since(before_poll))
            } else if busy {
                Duration::ZERO
            } else if spinning {
                std::thread::yield_now();
                Duration::ZERO
            } else {
                deadline.saturating_duration_since(before_poll) + Duration::from_micros(50)
            };
            if let Err(error) = self.poll.poll(&mut events, Some(timeout)) {
                if error.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(WorkerError::Poll(error));
            }
            if spinning && events.is_empty() {
                busy_poll.spent(before_poll.elapsed());
            }
            let mut listener_ready = false;
            let mut carriers_writable = Vec::new();
            for event in &events {
                match event.token() {
                    TUN => ready.tun = true,
                    UDP => ready.udp = true,
                    CARRIER_LISTENER => listener_ready = true,
                    FAKE_TCP => ready.steered.push(ReceiveOn::FakeTcp),
                    ADDRESSES => self.read_address_changes(),
                    Token(token) if (STEERED..PREDICTION).contains(&token) => {
                        ready.steered.push(ReceiveOn::Steered(token - STEERED));
                    }
                    Token(token) if self.carrier_tokens.contains(&token) => {
                        let slot = token - self.carrier_tokens.start;
                        if event.is_writable() {
                            carriers_writable.push(slot);
                        }
                        if event.is_readable() || event.is_read_closed() || event.is_error() {
                            ready.steered.push(ReceiveOn::Carrier(slot));
                        }
                    }
                    token if self.prediction.owns(token) => {
                        if let Some(slot) = self.prediction_hit(token) {
                            ready.steered.push(ReceiveOn::Steered(slot));
                        }
                    }
                    SHUTDOWN => {
                        // Mesh members hear Goodbye instead of waiting
                        // minutes to notice we are gone.
                        let now = Instant::now();
                        self.node.leave_mesh(now);
                        self.after_io(now);
                        return Ok(StopReason::Signal);
                    }
                    // CONTROL: the calls run after every turn anyway.
                    _ => {}
                }
            }
            if listener_ready {
                let accepted = self.accept_carriers();
                ready
                    .steered
                    .extend(accepted.into_iter().map(ReceiveOn::Carrier));
            }
            for slot in carriers_writable {
                self.carrier_writable(slot);
            }
            ready.steered.sort_unstable();
            ready.steered.dedup();
            // A ping's reply is read in the wake after its request came
            // in, so what counts is whether TUN was ready last time.
            let pace = if tun_at_last_wake {
                Pace::Busy
            } else {
                Pace::Idle
            };
            tun_at_last_wake = ready.tun;
            let now = Instant::now();
            let data_calls = self.stats.data_calls();
            let turned = ready.any(self.udp_paused_until.is_some());
            if turned {
                busy_poll.traffic(now);
                if let Some(stop) = self.turn(now, &mut ready, &stage, pace) {
                    return Ok(stop);
                }
            }
            self.after_io(now);
            timers_handled_at = now;
            let moved_nothing = turned
                && ready.any(self.udp_paused_until.is_some())
                && self.stats.data_calls() == data_calls;
            self.count_idle_turn(now, moved_nothing || timer_stuck, &ready, timer_stuck);
            // A flood can keep a socket from ever running dry: `fjord
            // show` and `wg set` must not wait for that.
            if self.run_control_calls(now) {
                self.after_io(Instant::now());
            }
        }
    }

    fn read_address_changes(&mut self) {
        let Some(watch) = &self.address_watch else {
            return;
        };
        match watch.drain() {
            Ok(true) => self.addresses_changed(),
            Ok(false) => {}
            Err(error) => tracing::debug!(%error, "reading address change notices failed"),
        }
    }

    /// Counts a turn that found work and could not do it (`idle`), and
    /// tells the log once when a run of them makes the worker wait.
    fn count_idle_turn(&mut self, now: Instant, idle: bool, ready: &Ready, timer_stuck: bool) {
        if !idle {
            self.idle_streak = 0;
            return;
        }
        self.stats.idle_turns += 1;
        self.idle_streak = self.idle_streak.saturating_add(1);
        let warn = self.idle_streak == IDLE_TURNS_BEFORE_WAIT
            && self
                .idle_warned_at
                .is_none_or(|at| now.saturating_duration_since(at) >= IDLE_WARNING_INTERVAL);
        if warn {
            self.idle_warned_at = Some(now);
            tracing::warn!(
                tun = ready.tun,
                udp = ready.udp,
                peer_sockets = ready.steered.len(),
                timer_stuck,
                "{IDLE_TURNS_BEFORE_WAIT} turns in a row found work but moved no data; waiting {} ms between turns until data moves again (counted as idle_turns in `fjord show`; please report this)",
                IDLE_WAIT.as_millis()
            );
        }
    }

    /// One warning for each peer that packets wait for while nothing
    /// leaves toward it (stall_watch.rs).
    fn watch_stalls(&mut self, now: Instant) {
        let device = self.node.device();
        let mut stalls = Vec::new();
        let mut present = std::collections::HashSet::new();
        for id in device.peer_ids() {
            let Some(status) = device.peer_status(id) else {
                continue;
            };
            present.insert(status.public_key);
            let queued = status.staged_packets;
            if let Some(stall) = self.stalls.observe(status.public_key, now, queued) {
                stalls.push((status, stall));
            }
        }
        self.stalls.retain(|key| present.contains(key));
        for (status, stall) in stalls {
            let peer = status.public_key.to_base64();
            match stall {
                Stall::Began(waited) => {
                    let endpoint = status
                        .endpoint
                        .map_or_else(|| "none".to_string(), |endpoint| endpoint.to_string());
                    tracing::warn!(
                        %peer,
                        endpoint,
                        queued = status.staged_packets,
                        "packets have waited {} s for this peer and nothing has left toward it: no session yet (its handshake is unanswered: check its endpoint, both sides' keys, and that UDP reaches it)",
                        waited.as_secs()
                    );
                }
                Stall::Ended => tracing::info!(%peer, "traffic to the stalled peer leaves again"),
            }
        }
    }

    /// Follows MTU changes made with `ip link set mtu`, and logs refused
    /// datagrams (rate-limited).
    fn housekeeping(&mut self, now: Instant) {
        self.next_housekeeping = now + HOUSEKEEPING_INTERVAL;
        self.tidy_steering(now);
        self.watch_stalls(now);
        for slot in self.udp.carriers_mut().expired(now) {
            self.close_carrier(slot, true);
        }
        self.udp.carriers().tick(now);
        self.report_flows();
        if let Some(refusals) = self.drop_report.due(now, &self.node.drops()) {
            if refusals.suspicious {
                tracing::warn!(
                    "refused {} datagrams: {} (each counted in `fjord show`; at most one such line a minute)",
                    refusals.total,
                    refusals.by_reason
                );
            } else {
                tracing::debug!(
                    "refused {} datagrams: {}",
                    refusals.total,
                    refusals.by_reason
                );
            }
        }
        let Ok(mtu) = self.tun.mtu() else { return };
        let mtu = usize::from(mtu);
        if mtu != self.node.device().mtu() || mtu != self.outbound.mtu() {
            tracing::info!(mtu, "interface MTU changed");
            self.node.device_mut().set_mtu(mtu);
            self.outbound.set_mtu(mtu);
        }
    }

    /// Timers, then the node's output in two loops: its datagrams
    /// (worker/transmit.rs), then its events (worker/events.rs).
    fn after_io(&mut self, now: Instant) {
        if now >= self.next_housekeeping {
            self.housekeeping(now);
        }
        if self
            .node
            .poll_timeout()
            .is_some_and(|deadline| deadline <= now)
        {
            self.node.handle_timeout(now);
        }
        self.send_transmits(now);
        while let Some(event) = self.node.poll_event(now) {
            self.handle_node_event(now, event);
        }
    }

    /// Runs the control calls waiting; whether there were any.
    fn run_control_calls(&mut self, now: Instant) -> bool {
        let mut ran = false;
        while let Ok(call) = self.control.try_recv() {
            ran = true;
            let interface = self.tun.name().to_string();
            let mut context = ControlContext {
                node: &mut self.node,
                now,
                interface: &interface,
                stats: &self.stats,
                udp: &mut self.udp,
                fwmark: &mut self.fwmark,
                rebound: false,
                tun_offload: self.tun.offload(),
            };
            call(&mut context);
            if context.rebound {
                self.watch_udp();
                self.connect_sessions();
            }
        }
        ran
    }
}
