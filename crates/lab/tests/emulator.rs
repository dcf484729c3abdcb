//! The link emulator measured in real namespaces, the way a user would
//! check it: ping for delay, sequence-numbered UDP for loss, duplication
//! and reordering, receiver-side throughput for the rate limit and for
//! 1 Gbit/s at 45 ms. Needs root.
//!
//! The checks hold on a busy machine: a delay is never shorter than
//! configured and not far longer, a rate limit is never exceeded, loss lies
//! in a wide band around the configured rate while the emulator's own drop
//! count lies in a statistical one. How precise and fast the emulator is
//! (±1 ms, ±3 %, 1 Gbit/s offered and 95 % delivered) depends on the
//! machine being idle, so it is a measurement, not a check:
//! `cargo test --release -p fjord-lab --test emulator -- --ignored --nocapture`.
//!
//! The tests take turns (one lock), since each measures timing on a shared
//! 2-core machine. Run with `--nocapture` to see the figures.

use std::io;
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime};

use fjord_lab::emulator::{
    Emulator, EmulatorError, EmulatorOptions, EmulatorStats, GilbertElliott, LinkConfig, LinkStats,
    Probability, RunningEmulator, Threading,
};
use fjord_lab::netns::{self, Namespace};
use fjord_lab::topology::{
    HOST_LINK, LEFT_UNDERLAY, MIDDLE_LEFT_LINK, MIDDLE_RIGHT_LINK, RIGHT_UNDERLAY, TwoHosts,
};
use fjord_sys::mmsg::{self, Received};
use fjord_sys::socket::{SocketBuffer, enable_receive_timestamps, force_buffer_size};
use fjord_sys::thread::set_thread_realtime;

/// Ethernet (14), IPv4 (20) and UDP (8) headers around a UDP payload.
const UDP_FRAME_OVERHEAD_BYTES: usize = 42;
/// Payload of a UDP datagram that makes a 1500-byte IP packet.
const FULL_PAYLOAD_BYTES: usize = 1472;
/// How much earlier than its release time the emulator may send a frame:
/// half its wakeup lead, which it caps at 500 µs.
const EARLY_RELEASE: Duration = Duration::from_micros(250);

static TURN: Mutex<()> = Mutex::new(());

/// Most datagrams the generators move per system call.
const BATCH: usize = 64;

fn take_turn() -> MutexGuard<'static, ()> {
    assert!(netns::is_root(), "emulator tests need root");
    TURN.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Hosts with the emulator between them. Field order matters: the
/// emulator stops before the namespaces go.
struct Lab {
    emulator: RunningEmulator,
    hosts: TwoHosts,
}

impl Lab {
    fn start(left_to_right: LinkConfig, right_to_left: LinkConfig) -> Self {
        Self::start_with(left_to_right, right_to_left, EmulatorOptions::default())
    }

    fn start_with(
        left_to_right: LinkConfig,
        right_to_left: LinkConfig,
        options: EmulatorOptions,
    ) -> Self {
        let hosts = TwoHosts::with_middle().expect("build left, middle, right");
        pin_neighbours(&hosts);
        let middle = hosts.middle.as_ref().expect("middle namespace");
        let options_threading = options.threading;
        let emulator = Emulator::start_with(
            middle,
            MIDDLE_LEFT_LINK,
            MIDDLE_RIGHT_LINK,
            left_to_right,
            right_to_left,
            options,
        )
        .expect("start the emulator");
        let threads = match options_threading {
            Threading::PerDirection => 2,
            Threading::Shared => 1,
        };
        netns::wait_until(Duration::from_secs(2), "emulator threads", || {
            emulator.thread_ids().len() == threads
        })
        .unwrap();
        Self { emulator, hosts }
    }
}

fn mac_address(namespace: &Namespace) -> String {
    let link = namespace.ip(&["-o", "link", "show", HOST_LINK]).unwrap();
    link.split_whitespace()
        .skip_while(|word| *word != "link/ether")
        .nth(1)
        .expect("an Ethernet address")
        .to_string()
}

/// Static ARP entries, so no ARP exchange (itself subject to loss) stands
/// in front of the first datagrams.
fn pin_neighbours(hosts: &TwoHosts) {
    for (namespace, peer, peer_namespace) in [
        (&hosts.left, RIGHT_UNDERLAY, &hosts.right),
        (&hosts.right, LEFT_UNDERLAY, &hosts.left),
    ] {
        let mac = mac_address(peer_namespace);
        let peer = peer.to_string();
        namespace
            .ip(&[
                "neigh",
                "replace",
                &peer,
                "lladdr",
                &mac,
                "dev",
                HOST_LINK,
                "nud",
                "permanent",
            ])
            .unwrap();
    }
}

fn ms(value: u64) -> Duration {
    Duration::from_millis(value)
}

fn percent(value: f64) -> Probability {
    Probability::from_percent(value).unwrap()
}

/// Runs `measure`, and once more if `acceptable` rejects the first result.
fn with_one_retry<T: std::fmt::Debug>(
    what: &str,
    measure: impl Fn() -> T,
    acceptable: impl Fn(&T) -> bool,
) -> T {
    let first = measure();
    if acceptable(&first) {
        return first;
    }
    println!("{what}: outlier {first:?}; measuring once more");
    measure()
}

// ---------------------------------------------------------------------------
// UDP generator and receiver

/// Runs the calling generator thread at real-time priority (below the
/// emulator's), so builds sharing the machine do not throttle the offered
/// load; the generators sleep between batches.
fn favour_generator() {
    if let Err(error) = set_thread_realtime(5) {
        println!("generator keeps normal priority: {error}");
    }
}

/// Sets both socket buffers; the kernel doubles what it is given, so ask
/// for half.
fn set_buffer_sizes(socket: &UdpSocket, receive_bytes: usize, send_bytes: usize) -> io::Result<()> {
    force_buffer_size(socket.as_fd(), SocketBuffer::Receive, receive_bytes / 2)?;
    force_buffer_size(socket.as_fd(), SocketBuffer::Send, send_bytes / 2)?;
    Ok(())
}

#[derive(Debug, Clone, Copy)]
struct SendReport {
    sent: u64,
    elapsed: Duration,
}

/// Sends `count` datagrams of `payload_bytes` from left to right at
/// `per_second`, paced in small batches. Each starts with its sequence
/// number and the wall-clock time just before its batch was sent (both
/// big-endian u64, the time in nanoseconds since the Unix epoch).
fn send_paced(
    hosts: &TwoHosts,
    port: u16,
    payload_bytes: usize,
    per_second: f64,
    count: u64,
) -> JoinHandle<io::Result<SendReport>> {
    hosts
        .left
        .spawn_thread(move || {
            favour_generator();
            let socket = UdpSocket::bind((LEFT_UNDERLAY, 0))?;
            socket.connect((RIGHT_UNDERLAY, port))?;
            set_buffer_sizes(&socket, 4 << 20, 8 << 20)?;
            // Batches about 100 µs apart.
            let batch = ((per_second * 100e-6).ceil() as usize).clamp(1, BATCH);
            let mut messages = vec![vec![0u8; payload_bytes]; batch];
            let start = Instant::now();
            let mut sent = 0u64;
            while sent < count {
                let target = start + Duration::from_secs_f64(sent as f64 / per_second);
                if let Some(wait) = target.checked_duration_since(Instant::now()) {
                    std::thread::sleep(wait);
                }
                let n = batch.min((count - sent) as usize);
                let now = nanos_since_epoch(SystemTime::now());
                for (i, message) in messages.iter_mut().take(n).enumerate() {
                    message[..8].copy_from_slice(&(sent + i as u64).to_be_bytes());
                    message[8..16].copy_from_slice(&now.to_be_bytes());
                }
                let mut done = 0;
                while done < n {
                    done += mmsg::send_batch(
                        socket.as_fd(),
                        messages[done..n].iter().map(Vec::as_slice),
                    )?;
                }
                sent += n as u64;
            }
            Ok(SendReport {
                sent,
                elapsed: start.elapsed(),
            })
        })
        .unwrap()
}

fn nanos_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos() as u64
}

/// Sequence numbers and kernel arrival times at the receiver, in order,
/// and how long each datagram took from its sender's stamp.
#[derive(Debug, Default)]
struct Arrivals {
    sequence: Vec<u64>,
    stamps: Vec<SystemTime>,
    one_way: Vec<Duration>,
}

impl Arrivals {
    /// The quickest datagram's time from sender to receiver.
    fn shortest_one_way(&self) -> Option<Duration> {
        self.one_way.iter().min().copied()
    }

    fn unique(&self) -> u64 {
        let mut seen = self.sequence.clone();
        seen.sort_unstable();
        seen.dedup();
        seen.len() as u64
    }

    fn duplicates(&self) -> u64 {
        self.sequence.len() as u64 - self.unique()
    }

    /// First arrivals of a sequence number lower than one already seen.
    fn late(&self) -> u64 {
        let mut seen = std::collections::HashSet::new();
        let (mut highest, mut late) = (None, 0);
        for &number in &self.sequence {
            if seen.insert(number) {
                if highest.is_some_and(|highest| number < highest) {
                    late += 1;
                }
                highest = highest.max(Some(number));
            }
        }
        late
    }

    /// Runs of consecutive missing sequence numbers below `sent`.
    fn loss_runs(&self, sent: u64) -> Vec<u64> {
        let mut received = vec![false; sent as usize];
        for &number in &self.sequence {
            if let Some(slot) = received.get_mut(number as usize) {
                *slot = true;
            }
        }
        let mut runs = Vec::new();
        let mut run = 0;
        for got in received {
            if got {
                if run > 0 {
                    runs.push(run);
                }
                run = 0;
            } else {
                run += 1;
            }
        }
        if run > 0 {
            runs.push(run);
        }
        runs
    }
}

struct Receiver {
    stop: Arc<AtomicBool>,
    /// Datagrams received so far.
    arrived: Arc<AtomicU64>,
    thread: JoinHandle<io::Result<Arrivals>>,
}

impl Receiver {
    /// Binds the receiver on the right host; returns once it is listening.
    fn start(hosts: &TwoHosts, port: u16) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let arrived = Arc::new(AtomicU64::new(0));
        let (ready, listening) = mpsc::channel();
        let (flag, counter) = (stop.clone(), arrived.clone());
        let thread = hosts
            .right
            .spawn_thread(move || {
                favour_generator();
                let socket = UdpSocket::bind((RIGHT_UNDERLAY, port))?;
                set_buffer_sizes(&socket, 64 << 20, 1 << 20)?;
                enable_receive_timestamps(socket.as_fd())?;
                socket.set_read_timeout(Some(ms(20)))?;
                let _ = ready.send(());
                let mut buffers = vec![[0u8; 2048]; BATCH];
                let mut received = [Received::default(); BATCH];
                let mut arrivals = Arrivals::default();
                // Reads until asked to stop *and* the socket is empty: a
                // receiver thread starved while the link drained still
                // holds datagrams that arrived.
                loop {
                    let stopping = flag.load(Ordering::Acquire);
                    let batch = buffers.iter_mut().map(|buffer| &mut buffer[..]);
                    match mmsg::recv_batch(socket.as_fd(), batch, &mut received) {
                        Ok(count) => {
                            for (buffer, meta) in buffers.iter().zip(&received).take(count) {
                                let field = |at: usize| {
                                    // Every datagram carries 16 bytes or more (see `send_paced`).
                                    u64::from_be_bytes(buffer[at..at + 8].try_into().unwrap())
                                };
                                let stamp = meta.timestamp.unwrap_or_else(SystemTime::now);
                                let sent_at = Duration::from_nanos(field(8));
                                let arrived_at = Duration::from_nanos(nanos_since_epoch(stamp));
                                arrivals.sequence.push(field(0));
                                arrivals.stamps.push(stamp);
                                arrivals.one_way.push(arrived_at.saturating_sub(sent_at));
                            }
                            counter.fetch_add(count as u64, Ordering::Release);
                        }
                        Err(error)
                            if matches!(
                                error.kind(),
                                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                            ) =>
                        {
                            if stopping {
                                return Ok(arrivals);
                            }
                        }
                        Err(error) => return Err(error),
                    }
                }
            })
            .unwrap();
        listening
            .recv_timeout(Duration::from_secs(5))
            .expect("receiver listening");
        Self {
            stop,
            arrived,
            thread,
        }
    }

    /// Stops once the sender's frames have drained: the emulator holds
    /// none, and neither it nor the receiver saw a new one for a poll
    /// interval (they may still be on their way through the kernel).
    fn finish(self, emulator: &RunningEmulator) -> Arrivals {
        let progress = || {
            let link = emulator.stats().left_to_right;
            (
                link.in_flight_frames,
                link.frames_in,
                self.arrived.load(Ordering::Acquire),
            )
        };
        let mut last = progress();
        let drained = netns::wait_until(Duration::from_secs(10), "the link to drain", || {
            let now = progress();
            let quiet = now.0 == 0 && now == last;
            last = now;
            quiet
        });
        if let Err(error) = drained {
            println!("receiver stops anyway: {error}");
        }
        self.stop.store(true, Ordering::Release);
        self.thread.join().unwrap().unwrap()
    }
}

/// Sends `count` datagrams left to right and collects what arrives.
fn udp_run(lab: &Lab, payload_bytes: usize, per_second: f64, count: u64) -> (SendReport, Arrivals) {
    let receiver = Receiver::start(&lab.hosts, 9000);
    let report = send_paced(&lab.hosts, 9000, payload_bytes, per_second, count)
        .join()
        .unwrap()
        .unwrap();
    let arrivals = receiver.finish(&lab.emulator);
    (report, arrivals)
}

/// CPU time used so far: by this whole test process (generator threads,
/// emulator, and the kernel work they do), and by the whole machine (busy
/// time summed over CPUs, other builds included).
fn cpu_used() -> (Duration, Duration) {
    const TICK: Duration = Duration::from_millis(10);
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
    let after_command = &own[own.rfind(')').unwrap() + 2..];
    let fields: Vec<u64> = after_command
        .split_whitespace()
        .map(|field| field.parse().unwrap_or(0))
        .collect();
    let process = TICK * (fields[11] + fields[12]) as u32;
    let stat = std::fs::read_to_string("/proc/stat").unwrap();
    let machine: Vec<u64> = stat
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .skip(1)
        .filter_map(|field| field.parse().ok())
        .collect();
    let busy: u64 = machine.iter().take(8).sum::<u64>() - machine[3] - machine[4];
    (process, TICK * busy as u32)
}

// ---------------------------------------------------------------------------
// The measurements

/// Round-trip times of 20 pings 50 ms apart, in milliseconds.
fn ping_times(lab: &Lab) -> Vec<f64> {
    let out = lab
        .hosts
        .left
        .exec(
            "ping",
            &[
                "-n",
                "-c",
                "20",
                "-i",
                "0.05",
                "-W",
                "2",
                &RIGHT_UNDERLAY.to_string(),
            ],
        )
        .unwrap_or_else(|error| panic!("ping failed: {error}"));
    let mut times: Vec<f64> = out
        .lines()
        .filter_map(|line| line.split("time=").nth(1))
        .filter_map(|rest| rest.split_whitespace().next()?.parse().ok())
        .collect();
    times.sort_by(f64::total_cmp);
    times
}

/// A lab with 20 ms of delay each way.
fn delayed_20ms_each_way() -> Lab {
    Lab::start(LinkConfig::delayed(ms(20)), LinkConfig::delayed(ms(20)))
}

fn print_ping_times(lab: &Lab, times: &[f64]) {
    let stats = lab.emulator.stats();
    println!(
        "20 ms each way: RTT min {:.3} ms, median {:.3} ms, max {:.3} ms over {} pings; \
         emulator release error mean {:+.1} / {:+.1} µs, latest {:?} / {:?} (each way)",
        times[0],
        times[times.len() / 2],
        times[times.len() - 1],
        times.len(),
        stats.left_to_right.mean_release_error_secs() * 1e6,
        stats.right_to_left.mean_release_error_secs() * 1e6,
        stats.left_to_right.release_late_max,
        stats.right_to_left.release_late_max,
    );
}

#[test]
fn delay_of_20ms_each_way_adds_40ms_to_the_round_trip() {
    let _turn = take_turn();
    let lab = delayed_20ms_each_way();
    let times = ping_times(&lab);
    assert_eq!(times.len(), 20, "every ping answered: {times:?}");
    print_ping_times(&lab, &times);
    let shortest = 40.0 - 2.0 * EARLY_RELEASE.as_secs_f64() * 1e3;
    assert!(
        times[0] >= shortest,
        "a round trip beat the configured delay: {times:?}"
    );
    // Not far more: a busy machine adds some, a delay applied twice 40 ms.
    assert!(times[10] <= 50.0, "median round trip: {times:?}");
}

/// Frames sent through 5 % random loss, and what became of them.
#[derive(Debug)]
struct LossRun {
    sent: u64,
    /// Lost as the receiver saw it.
    loss: f64,
    stats: LinkStats,
}

fn loss_of_5_percent() -> LossRun {
    let lossy = LinkConfig {
        loss: percent(5.0),
        seed: 2024,
        ..LinkConfig::default()
    };
    let lab = Lab::start(lossy, LinkConfig::default());
    let (report, arrivals) = udp_run(&lab, 64, 50_000.0, 100_000);
    LossRun {
        sent: report.sent,
        loss: 1.0 - arrivals.unique() as f64 / report.sent as f64,
        stats: lab.emulator.stats().left_to_right,
    }
}

fn print_loss(run: &LossRun) {
    let stats = &run.stats;
    println!(
        "loss=5%: {:.3} % of {} datagrams lost (emulator: {} random drops of {} frames, \
         {} other drops, {} socket overruns)",
        run.loss * 100.0,
        run.sent,
        stats.dropped.random_loss,
        stats.frames_in,
        stats.dropped.after_read() - stats.dropped.random_loss,
        stats.dropped.socket_overrun,
    );
}

#[test]
fn random_loss_of_5_percent_drops_about_5_percent() {
    let _turn = take_turn();
    let run = loss_of_5_percent();
    print_loss(&run);
    let stats = &run.stats;
    // The emulator's own decisions: 4 standard deviations of a binomial.
    let frames = stats.frames_in as f64;
    let dropped = stats.dropped.random_loss as f64 / frames;
    let sigma = (0.05 * 0.95 / frames).sqrt();
    assert!(
        (dropped - 0.05).abs() <= 4.0 * sigma,
        "the emulator dropped {dropped} of what it read"
    );
    assert_eq!(
        stats.dropped.after_read(),
        stats.dropped.random_loss,
        "{stats:?}"
    );
    // What the receiver saw: that loss, and little else on a busy machine.
    assert!((0.04..=0.07).contains(&run.loss), "measured {}", run.loss);
}

/// 150 Mbit/s offered to a link limited to 100 Mbit/s, for 3 s.
#[derive(Debug)]
struct RateRun {
    offered_bits_per_sec: f64,
    /// At the receiver, over the last 2.5 s (kernel arrival times).
    received_bits_per_sec: f64,
    stats: LinkStats,
}

const RATE_LIMIT_BITS_PER_SEC: f64 = 100e6;

fn rate_limited_to_100mbit() -> RateRun {
    let frame_bits = ((FULL_PAYLOAD_BYTES + UDP_FRAME_OVERHEAD_BYTES) * 8) as f64;
    let limited = LinkConfig {
        rate_bits_per_sec: Some(RATE_LIMIT_BITS_PER_SEC as u64),
        ..LinkConfig::default()
    };
    let lab = Lab::start(limited, LinkConfig::default());
    let per_second = 1.5 * RATE_LIMIT_BITS_PER_SEC / frame_bits;
    let (report, arrivals) = udp_run(
        &lab,
        FULL_PAYLOAD_BYTES,
        per_second,
        (per_second * 3.0) as u64,
    );
    let stamps = &arrivals.stamps;
    let start = stamps[0] + ms(500);
    let steady: Vec<_> = stamps.iter().filter(|stamp| **stamp >= start).collect();
    let span = steady[steady.len() - 1].duration_since(*steady[0]).unwrap();
    RateRun {
        offered_bits_per_sec: report.sent as f64 * frame_bits / report.elapsed.as_secs_f64(),
        received_bits_per_sec: (steady.len() - 1) as f64 * frame_bits / span.as_secs_f64(),
        stats: lab.emulator.stats().left_to_right,
    }
}

fn print_rate(run: &RateRun) {
    println!(
        "rate=100mbit: offered {:.2} Mbit/s, {:.2} Mbit/s at the receiver ({:+.2} %); \
         {} tail drops, queue high water {} frames",
        run.offered_bits_per_sec / 1e6,
        run.received_bits_per_sec / 1e6,
        (run.received_bits_per_sec / RATE_LIMIT_BITS_PER_SEC - 1.0) * 100.0,
        run.stats.dropped.queue_full,
        run.stats.queue_high_water_packets
    );
}

#[test]
fn rate_limit_of_100mbit_caps_what_arrives() {
    let _turn = take_turn();
    let run = rate_limited_to_100mbit();
    print_rate(&run);
    let rate = run.received_bits_per_sec / RATE_LIMIT_BITS_PER_SEC;
    // Never above the limit (5 % for a busy receiver's timestamps), and
    // not far below it: the queue stays full, so the link is never idle.
    assert!(rate <= 1.05, "the limit was exceeded: {run:?}");
    assert!(rate >= 0.8, "far below the limit: {run:?}");
    // The excess waited in the queue up to its limit, then was dropped.
    assert_eq!(run.stats.queue_high_water_packets, 1000, "{run:?}");
    assert!(run.stats.dropped.queue_full > 0, "{run:?}");
}

#[derive(Debug)]
struct GigabitRun {
    offered_bits_per_sec: f64,
    delivered: f64,
    received_bits_per_sec: f64,
    /// The quickest datagram's time from sender to receiver.
    shortest_one_way: Duration,
    /// CPU used over the run, in cores: emulator threads, the whole test
    /// process (sender, receiver, emulator), the whole machine.
    emulator_cores: f64,
    process_cores: f64,
    machine_cores: f64,
    /// Times per second the emulator's threads went to sleep and woke.
    wakeups_per_sec: f64,
    stats: EmulatorStats,
}

/// Voluntary context switches of the emulator's threads so far.
fn voluntary_switches(emulator: &RunningEmulator) -> u64 {
    emulator
        .thread_ids()
        .iter()
        .filter_map(|id| std::fs::read_to_string(format!("/proc/self/task/{id}/status")).ok())
        .filter_map(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix("voluntary_ctxt_switches:"))
                .and_then(|value| value.trim().parse::<u64>().ok())
        })
        .sum()
}

/// 1500-byte IP packets at 1 Gbit/s for 3 s through 45 ms each way.
fn gigabit_at_45ms(options: EmulatorOptions) -> GigabitRun {
    let delayed = LinkConfig::delayed(ms(45));
    let lab = Lab::start_with(delayed.clone(), delayed, options);
    let ip_bits = 1500.0 * 8.0;
    let per_second = 1e9 / ip_bits;
    let emulator_before = lab.emulator.stats().cpu_time;
    let (process_before, machine_before) = cpu_used();
    let wakeups_before = voluntary_switches(&lab.emulator);
    let started = Instant::now();
    let (report, arrivals) = udp_run(
        &lab,
        FULL_PAYLOAD_BYTES,
        per_second,
        (per_second * 3.0) as u64,
    );
    let wall = started.elapsed().as_secs_f64();
    let wakeups = voluntary_switches(&lab.emulator) - wakeups_before;
    let (process_after, machine_after) = cpu_used();
    // Published after the link drained (the receiver waited for that).
    let stats = lab.emulator.stats();
    let unique = arrivals.unique();
    let span = arrivals.stamps[arrivals.stamps.len() - 1]
        .duration_since(arrivals.stamps[0])
        .unwrap_or(Duration::from_secs(3));
    GigabitRun {
        offered_bits_per_sec: report.sent as f64 * ip_bits / report.elapsed.as_secs_f64(),
        delivered: unique as f64 / report.sent as f64,
        received_bits_per_sec: unique as f64 * ip_bits / span.as_secs_f64(),
        shortest_one_way: arrivals.shortest_one_way().unwrap_or_default(),
        emulator_cores: (stats.cpu_time - emulator_before).as_secs_f64() / wall,
        process_cores: (process_after - process_before).as_secs_f64() / wall,
        machine_cores: (machine_after - machine_before).as_secs_f64() / wall,
        wakeups_per_sec: wakeups as f64 / wall,
        stats,
    }
}

fn print_gigabit(label: &str, run: &GigabitRun) {
    let link = run.stats.left_to_right;
    println!(
        "{label}: offered {:.3} Gbit/s, delivered {:.2} % ({:.3} Gbit/s at the receiver), \
         quickest in {:?}; CPU in cores: emulator {:.2} ({:.0} wakeups/s), test process {:.2}, machine {:.2} \
         (of 2, other work included); \
         release error mean {:+.1} µs, latest {:?}; largest frame {} B; drops {:?}",
        run.offered_bits_per_sec / 1e9,
        run.delivered * 100.0,
        run.received_bits_per_sec / 1e9,
        run.shortest_one_way,
        run.emulator_cores,
        run.wakeups_per_sec,
        run.process_cores,
        run.machine_cores,
        link.mean_release_error_secs() * 1e6,
        link.release_late_max,
        link.largest_frame_bytes,
        link.dropped,
    );
}

#[test]
fn carries_1gbit_of_1500_byte_frames_through_45ms_each_way() {
    let _turn = take_turn();
    let run = gigabit_at_45ms(EmulatorOptions::default());
    print_gigabit("1 Gbit/s, 45 ms each way", &run);
    // No frame skips the delay line, however busy the machine.
    assert!(
        run.shortest_one_way >= ms(45) - EARLY_RELEASE,
        "a datagram crossed in {:?}",
        run.shortest_one_way
    );
    // Most of the stream arrives (an idle machine delivers all of it; see
    // `precision_on_an_idle_machine`).
    assert!(run.delivered >= 0.5, "delivered {}", run.delivered);
    let link = run.stats.left_to_right;
    assert_eq!(link.dropped.oversize, 0);
    assert!(
        link.largest_frame_bytes <= 1518,
        "{}",
        link.largest_frame_bytes
    );
    assert!(link.is_balanced(), "{link:?}");
}

/// The tight figures, for an idle machine: ping within 1 ms of the
/// configured delay, 5 % loss within half a percent, the rate limit within
/// 3 %, 1 Gbit/s offered and 95 % of it delivered. Each measurement is
/// repeated once before it fails (contention from another build is the
/// usual cause):
/// `cargo test --release -p fjord-lab --test emulator -- --ignored --nocapture`.
#[test]
#[ignore = "measurement of an idle machine, not a check"]
fn precision_on_an_idle_machine() {
    let _turn = take_turn();
    let lab = delayed_20ms_each_way();
    let within_a_millisecond = |times: &Vec<f64>| {
        times.len() == 20 && (times[0] - 40.0).abs() <= 1.0 && (times[10] - 40.0).abs() <= 1.0
    };
    let times = with_one_retry("ping", || ping_times(&lab), within_a_millisecond);
    print_ping_times(&lab, &times);
    assert!(within_a_millisecond(&times), "{times:?}");
    drop(lab);

    let near_5_percent = |run: &LossRun| (run.loss - 0.05).abs() <= 0.005;
    let run = with_one_retry("5 % loss", loss_of_5_percent, near_5_percent);
    print_loss(&run);
    assert!(near_5_percent(&run), "{run:?}");
    assert_eq!(run.stats.dropped.total(), run.stats.dropped.random_loss);

    let near_the_limit =
        |run: &RateRun| (run.received_bits_per_sec / RATE_LIMIT_BITS_PER_SEC - 1.0).abs() <= 0.03;
    let run = with_one_retry("100 Mbit/s", rate_limited_to_100mbit, near_the_limit);
    print_rate(&run);
    assert!(near_the_limit(&run), "{run:?}");

    let sustained = |run: &GigabitRun| run.offered_bits_per_sec >= 0.95e9 && run.delivered >= 0.95;
    let run = with_one_retry(
        "1 Gbit/s at 45 ms",
        || gigabit_at_45ms(EmulatorOptions::default()),
        sustained,
    );
    print_gigabit("1 Gbit/s, 45 ms each way", &run);
    assert!(
        run.offered_bits_per_sec >= 0.95e9,
        "the sender managed only {} bit/s",
        run.offered_bits_per_sec
    );
    assert!(run.delivered >= 0.95, "delivered {}", run.delivered);
}

/// Threading modes and release slack at 1 Gbit/s, for choosing the
/// defaults (the generators run at real-time priority here, so the
/// emulator needs it too; compare priorities with them at normal priority):
/// `cargo test --release -p fjord-lab --test emulator -- --ignored --nocapture`.
#[test]
#[ignore = "measurement, not a check"]
fn compare_threading_and_slack_at_1gbit() {
    let _turn = take_turn();
    for threading in [Threading::PerDirection, Threading::Shared] {
        for slack_micros in [50, 250] {
            for _ in 0..2 {
                let options = EmulatorOptions {
                    threading,
                    release_slack: Duration::from_micros(slack_micros),
                    ..EmulatorOptions::default()
                };
                let label = format!("{threading:?}, slack {slack_micros} µs");
                print_gigabit(&label, &gigabit_at_45ms(options));
            }
        }
    }
}

#[test]
fn gilbert_elliott_loss_comes_in_bursts_as_configured() {
    let _turn = take_turn();
    let model = GilbertElliott::gilbert(percent(2.0), percent(20.0));
    let bursty = LinkConfig {
        gilbert_elliott: Some(model),
        seed: 77,
        ..LinkConfig::default()
    };
    let lab = Lab::start(bursty, LinkConfig::default());
    let sent = 50_000;
    let (report, arrivals) = udp_run(&lab, 64, 20_000.0, sent);
    assert_eq!(report.sent, sent);
    let stats = lab.emulator.stats().left_to_right;
    let runs = arrivals.loss_runs(sent);
    let lost: u64 = runs.iter().sum();
    let loss = lost as f64 / sent as f64;
    let mean_run = lost as f64 / runs.len() as f64;
    // Tolerances: 4 standard deviations. The chain's occupancy over n steps
    // has variance π_b·π_g·(1+λ)/(1-λ)/n with λ = 1-p-r; a run length is
    // geometric with mean 1/r and variance (1-r)/r².
    let expected = model.expected_loss();
    let lambda = 1.0 - 0.02 - 0.2;
    let loss_sigma =
        (expected * (1.0 - expected) * (1.0 + lambda) / (1.0 - lambda) / sent as f64).sqrt();
    let run_sigma = (0.8f64.sqrt() / 0.2) / (runs.len() as f64).sqrt();
    println!(
        "ge=2%/20%: loss {:.2} % (expected {:.2} % ± {:.2}), mean burst {mean_run:.2} frames \
         (expected 5 ± {:.2}) over {} bursts; emulator counted {} burst drops, {} others",
        loss * 100.0,
        expected * 100.0,
        4.0 * loss_sigma * 100.0,
        4.0 * run_sigma,
        runs.len(),
        stats.dropped.burst_loss,
        stats.dropped.total() - stats.dropped.burst_loss,
    );
    assert!((loss - expected).abs() <= 4.0 * loss_sigma, "loss {loss}");
    assert!(
        (mean_run - 5.0).abs() <= 4.0 * run_sigma,
        "mean burst {mean_run}"
    );
    // What the receiver misses, the emulator dropped (in bursts, or
    // because it fell behind); a few other frames, such as IPv6 neighbour
    // discovery, cross the chain too.
    assert!(
        stats.dropped.total() >= lost && stats.dropped.burst_loss <= lost + 5,
        "receiver missed {lost}, emulator dropped {:?}",
        stats.dropped
    );
}

#[test]
fn duplication_and_reordering_count_as_configured() {
    let _turn = take_turn();
    let config = LinkConfig {
        delay: ms(1),
        duplicate: percent(2.0),
        reorder: Some(fjord_lab::emulator::Reorder {
            probability: percent(5.0),
            extra_delay: ms(2),
        }),
        seed: 5,
        ..LinkConfig::default()
    };
    let lab = Lab::start(config, LinkConfig::default());
    // 100 µs apart, so a frame held 2 ms back is overtaken by about 20.
    let sent = 20_000u64;
    let (_, arrivals) = udp_run(&lab, 64, 10_000.0, sent);
    let stats = lab.emulator.stats().left_to_right;
    let n = sent as f64;
    let duplicates = arrivals.duplicates();
    let late = arrivals.late();
    let dup_tolerance = 4.0 * (n * 0.02 * 0.98).sqrt();
    // A frame arrives late unless a duplicate of it that was not held back
    // got there first: 5 % × (1 − 2 % × 95 %).
    let expected_late = n * 0.05 * (1.0 - 0.02 * 0.95);
    let late_tolerance = 4.0 * (n * 0.05 * 0.95).sqrt();
    println!(
        "duplicate=2%, reorder=5%/2ms over {sent}: {duplicates} duplicates (expected 400 ± {dup_tolerance:.0}), \
         {late} late (expected {expected_late:.0} ± {late_tolerance:.0}); emulator: {} duplicated, {} held back",
        stats.duplicated, stats.reordered
    );
    assert!((duplicates as f64 - n * 0.02).abs() <= dup_tolerance);
    assert!((late as f64 - expected_late).abs() <= late_tolerance);
    // Neither duplication nor reordering loses a frame; with the machine
    // busy the emulator may fall behind, and then it counts what it dropped.
    let missing = sent - arrivals.unique();
    assert!(
        missing <= stats.dropped.total(),
        "{missing} frames lost that the emulator did not count: {:?}",
        stats.dropped
    );
    assert!(stats.duplicated >= duplicates && stats.duplicated <= duplicates + 5);
    let held_tolerance = 4.0 * ((n + duplicates as f64) * 0.05 * 0.95).sqrt();
    assert!((stats.reordered as f64 - (n + duplicates as f64) * 0.05).abs() <= held_tolerance);
}

#[test]
fn offload_super_frames_are_counted_and_dropped() {
    let _turn = take_turn();
    let lab = Lab::start(LinkConfig::default(), LinkConfig::default());
    // Listening before the sender connects; it stays in the right namespace.
    let listener = lab
        .hosts
        .right
        .spawn_thread(|| TcpListener::bind((RIGHT_UNDERLAY, 9100)))
        .unwrap()
        .join()
        .unwrap()
        .unwrap();
    let listener = std::thread::spawn(move || -> io::Result<()> {
        listener.set_nonblocking(true)?;
        let mut accepted = None;
        let _ = netns::wait_until(Duration::from_secs(3), "the sender to connect", || {
            accepted = listener.accept().ok();
            accepted.is_some()
        });
        let (stream, _) = accepted
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "no connection within 3 s"))?;
        stream.set_nonblocking(false)?;
        stream.set_read_timeout(Some(ms(1500)))?;
        let mut sink = Vec::new();
        let _ = io::Read::read_to_end(&mut (&stream), &mut sink);
        Ok(())
    });
    // Connect while offloads are off (a checksum-offloaded SYN would carry
    // an unfinished checksum), then undo the topology's precaution on the
    // left host: TCP now hands veth 64 KiB segments no wire would carry.
    let (connected, go) = (mpsc::channel(), mpsc::channel::<()>());
    let (connected_tx, connected_rx) = connected;
    let (go_tx, go_rx) = go;
    let sender = lab
        .hosts
        .left
        .spawn_thread(move || {
            let stream =
                TcpStream::connect_timeout(&(RIGHT_UNDERLAY, 9100).into(), Duration::from_secs(2))?;
            let _ = connected_tx.send(());
            let _ = go_rx.recv_timeout(Duration::from_secs(2));
            stream.set_write_timeout(Some(ms(500)))?;
            let _ = io::Write::write_all(&mut (&stream), &vec![7u8; 4 << 20]);
            Ok(())
        })
        .unwrap();
    connected_rx
        .recv_timeout(Duration::from_secs(3))
        .expect("TCP connects");
    lab.hosts
        .left
        .exec(
            "ethtool",
            &[
                "-K", HOST_LINK, "tx", "on", "sg", "on", "tso", "on", "gso", "on",
            ],
        )
        .unwrap();
    go_tx.send(()).unwrap();
    sender.join().unwrap().unwrap();
    listener.join().unwrap().unwrap();
    let counted = netns::wait_until(Duration::from_secs(2), "oversize frames counted", || {
        lab.emulator.stats().left_to_right.dropped.oversize > 0
    });
    let stats = lab.emulator.stats().left_to_right;
    println!(
        "with TSO on upstream: {} oversize frames dropped, largest {} B",
        stats.dropped.oversize, stats.largest_frame_bytes
    );
    assert!(counted.is_ok(), "{stats:?}");
    assert!(stats.largest_frame_bytes > 1518);
    assert!(
        lab.emulator.is_running(),
        "oversize frames do not stop the emulator"
    );
}

#[test]
fn teardown_leaves_no_namespace_or_thread_behind() {
    let _turn = take_turn();
    for stop_explicitly in [true, false] {
        let lab = Lab::start(LinkConfig::delayed(ms(5)), LinkConfig::delayed(ms(5)));
        netns::wait_until(Duration::from_secs(2), "emulator threads", || {
            lab.emulator.thread_ids().len() == 2
        })
        .unwrap();
        let threads = lab.emulator.thread_ids();
        let names: Vec<String> = [
            &lab.hosts.left,
            &lab.hosts.right,
            lab.hosts.middle.as_ref().unwrap(),
        ]
        .iter()
        .map(|namespace| namespace.name().to_string())
        .collect();
        let ping = lab
            .hosts
            .left
            .exec("ping", &["-c", "1", "-W", "2", &RIGHT_UNDERLAY.to_string()]);
        assert!(ping.is_ok(), "the emulator bridges: {ping:?}");
        let Lab { emulator, hosts } = lab;
        if stop_explicitly {
            let stats = emulator.stop().unwrap();
            assert!(stats.left_to_right.frames_out >= 1);
        } else {
            drop(emulator);
        }
        // A joined thread's /proc entry outlives the join by a moment: the
        // kernel wakes the joiner as the thread releases its memory, and
        // removes the task only after that.
        for id in &threads {
            let task = format!("/proc/self/task/{id}");
            let gone = netns::wait_until(Duration::from_secs(1), "thread exit", || {
                !std::path::Path::new(&task).exists()
            });
            assert!(gone.is_ok(), "emulator thread {id} still running");
        }
        drop(hosts);
        let listing = netns::ip(&["netns", "list"]).unwrap();
        for name in names {
            assert!(!listing.contains(&name), "{name} left behind");
        }
    }
}

#[test]
fn starting_on_a_missing_link_names_it() {
    let _turn = take_turn();
    let hosts = TwoHosts::with_middle().unwrap();
    let middle = hosts.middle.as_ref().unwrap();
    let error = Emulator::start(
        middle,
        "no-such-link",
        MIDDLE_RIGHT_LINK,
        LinkConfig::default(),
        LinkConfig::default(),
    )
    .unwrap_err();
    assert!(matches!(error, EmulatorError::Open { ref link, .. } if link == "no-such-link"));
    assert!(error.to_string().contains("no-such-link"), "{error}");
}
