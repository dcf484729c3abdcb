//! `peers`: many tunnels, as in the IPsec router study — the same offered
//! load spread over 1, 10, 100 and 1,000 peers, each its own overlay
//! address and session, for each WireGuard implementation as the
//! responder (the system under test). Other systems are skipped.
//!
//! For each peer count N, on the lab's two hosts: the responder on the
//! right host, configured with N peers (`wg setconf`, or fjord's own
//! file), and the lab's peer emulator ([`crate::emulated_peers`]) playing
//! all N on the left host from one process: N keys, N underlay addresses,
//! N sessions, handshaken before anything is measured.
//!
//! 1. **Zero-loss frame rate** (`peers_zero_loss`, frames/s) at 64 and
//!    1,420 bytes: the RFC 2544 search of the `throughput` suite, its
//!    frames spread round robin over the N sessions by the emulator, the
//!    receiver behind the responder's TUN device; the frames always form
//!    the same 1,000 flows ([`crate::emulated_peers::INNER_FLOWS`]), however many peers carry
//!    them. Beside it: the emulator's own ceiling with the same peers and
//!    frames (`emulator_ceiling_fps`: frames it seals and sends per second
//!    of its own CPU time, flooding a port of the right host where nothing
//!    listens for 1 s; on a busy machine its wall-clock rate would say more
//!    about the neighbours), the peers whose sessions carried frames by
//!    the responder's own counters, and the ratio to the same system's
//!    one-peer rate (`one_peer_ratio`; goal ≥ 0.9 at 1,000 peers). The
//!    report also divides the responder's CPU time over the search by the
//!    frames received: its cost per frame, which a busy machine moves far
//!    less than a zero-loss rate.
//! 2. **Memory** (`peers_memory`, bytes): the responder's resident size
//!    after those searches, and per peer (that − with one peer) ÷ (N − 1).
//! 3. **TCP** (`peers_tcp`, bit/s), with the responder of 100 peers: 100
//!    digest-checked flows from the right host through one of the peers,
//!    then the same flows spread over all 100 (flow i to peer i), back to
//!    back, in pairs; the figure that matters is the median of the pairs'
//!    ratios (`one_peer_ratio`), which a busy machine moves little since
//!    it slows both halves of a pair. The emulator in tunnel mode hands
//!    the flows to the left host's own TCP (see `peers/tcp.rs`).
//!
//! The emulator shares the two cores with the responder and the traffic
//! ends, so its ceiling is printed beside each rate, and the figure that
//! matters is a ratio between peer counts in one run, where the
//! emulator's share is much the same: its cost per frame hardly depends
//! on N (compare the ceilings).

mod rows;
mod tcp;

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::time::Duration;

use super::{Setup, Suite};
use crate::emulated_peers::{PeerEmulator, responder_side, route_to_peers};
use crate::measure::CpuCharge;
use crate::progress::Progress;
use crate::results::Measurement;
use crate::systems::wireguard::{Implementation, Interface, LISTEN_PORT, generate_private_key};
use crate::systems::{cpu_time, resident_bytes};
use crate::topology::{HOST_LINK, LEFT_UNDERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};
use crate::traffic::frame::FrameSizes;
use crate::traffic::rfc2544::{ThroughputResult, ThroughputSearch};
use crate::traffic::udp::{Offer, Trial, UdpPath};
use rows::rows;
use tcp::TcpPair;

/// Peer counts, the reference (one peer) first.
pub const PEER_COUNTS: [usize; 4] = [1, 10, 100, 1000];
/// Frame sizes of the zero-loss searches (a 1,420-byte frame is a
/// 1,402-byte packet inside the tunnel).
pub const FRAME_SIZES: [usize; 2] = [64, 1420];
/// The peer count whose responder also carries the TCP flows.
pub const TCP_PEERS: usize = 100;
/// Parallel TCP flows.
pub const TCP_FLOWS: usize = 100;
const UDP_PORT: u16 = 6101;
/// A port of the right host where nothing listens: the emulator's sink.
const SINK_PORT: u16 = 9;
/// How long the emulator alone seals into the sink.
const CEILING_DURATION: Duration = Duration::from_secs(1);
/// How long N handshakes (paced, maybe with cookie round trips) may take.
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);

/// Progress steps per system: one per frame size and peer count, and the
/// TCP pairs.
pub fn steps(_quick: bool) -> u64 {
    (PEER_COUNTS.len() * FRAME_SIZES.len() + 1) as u64
}

fn steps_for(peers: usize) -> u64 {
    FRAME_SIZES.len() as u64 + u64::from(peers == TCP_PEERS)
}

/// One zero-loss search and what was measured around it.
struct FrameRate {
    frame_size: usize,
    search: Result<ThroughputResult, String>,
    /// The emulator alone: frames per second of its own CPU time.
    ceiling: Result<f64, String>,
    /// The responder's CPU time over the search, and its memory after.
    charge: CpuCharge,
    /// Peers whose session had carried data by the search's end.
    carrying: Option<usize>,
}

/// Everything measured at one peer count.
struct CountOutcome {
    peers: usize,
    /// Why nothing (more) could be measured, if so.
    failure: Option<String>,
    frame_rates: Vec<FrameRate>,
    /// The responder's resident size after the searches.
    resident_bytes: Option<u64>,
    /// The TCP pairs, at [`TCP_PEERS`].
    tcp: Option<Vec<TcpPair>>,
}

/// Runs the suite for `system`, on hosts it builds itself.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    let Some(implementation) = setup.wireguard_or_skip(Suite::Peers, quick) else {
        return Vec::new();
    };
    let name = setup.name();
    let hosts = TwoHosts::direct()
        .map_err(|error| format!("building the hosts: {error}"))
        .and_then(|hosts| {
            route_to_peers(&hosts.right, LEFT_UNDERLAY)
                .map_err(|error| format!("routing to the peers: {error}"))?;
            Ok(hosts)
        });
    let mut outcomes = Vec::new();
    for peers in PEER_COUNTS {
        if setup.stopping() {
            break;
        }
        let outcome = match &hosts {
            Ok(hosts) => measure(
                implementation,
                hosts,
                peers,
                quick,
                setup.progress,
                setup.workdir,
            ),
            Err(why) => {
                setup.skip(steps_for(peers));
                CountOutcome::failed(peers, why.clone())
            }
        };
        if let Some(why) = &outcome.failure {
            setup.say(&format!("peers: {peers}: {why}"));
        }
        outcomes.push(outcome);
    }
    rows(name, &outcomes)
}

impl CountOutcome {
    fn failed(peers: usize, why: String) -> Self {
        Self {
            peers,
            failure: Some(why),
            frame_rates: Vec::new(),
            resident_bytes: None,
            tcp: None,
        }
    }
}

/// The responder with `peers` peers, and the emulator playing them, up
/// and handshaken.
fn bring_up<'h>(
    implementation: &dyn Implementation,
    hosts: &'h TwoHosts,
    peers: usize,
    workdir: &Path,
) -> Result<(PeerEmulator<'h>, Interface), String> {
    let responder_key = generate_private_key().map_err(|error| error.to_string())?;
    let emulator = PeerEmulator::start(
        &hosts.left,
        HOST_LINK,
        peers,
        &responder_key.public_key(),
        SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), LISTEN_PORT),
    )
    .map_err(|error| format!("starting the emulated peers: {error}"))?;
    let side = responder_side(
        responder_key,
        LISTEN_PORT,
        RIGHT_OVERLAY,
        &emulator.public_keys(),
    );
    let responder = implementation
        .start(&hosts.right, &side, workdir)
        .map_err(|error| error.to_string())?;
    emulator
        .establish(ESTABLISH_TIMEOUT)
        .map_err(|error| format!("handshakes: {error}"))?;
    Ok((emulator, responder))
}

fn measure(
    implementation: &dyn Implementation,
    hosts: &TwoHosts,
    peers: usize,
    quick: bool,
    progress: &Progress,
    workdir: &Path,
) -> CountOutcome {
    let name = implementation.name();
    let started = std::time::Instant::now();
    let (mut emulator, responder) = match bring_up(implementation, hosts, peers, workdir) {
        Ok(up) => up,
        Err(why) => {
            progress.skip(steps_for(peers));
            return CountOutcome::failed(peers, why);
        }
    };
    progress.line(&format!(
        "{name}: peers: {peers}: responder up and {peers} sessions established in {:.1} s",
        started.elapsed().as_secs_f64()
    ));
    let mut outcome = CountOutcome::failed(peers, String::new());
    outcome.failure = None;
    for frame_size in FRAME_SIZES {
        if progress.stopping() {
            return outcome;
        }
        progress.step(&format!(
            "{name}: peers: {peers}: zero-loss rate, {frame_size}-byte frames"
        ));
        let frame_rate = frame_rate(&emulator, &responder, hosts, frame_size, quick);
        progress.line(&format!(
            "{name}: peers: {peers}: {}",
            rows::frame_rate_summary(&frame_rate)
        ));
        outcome.frame_rates.push(frame_rate);
        progress.done();
    }
    outcome.resident_bytes = Some(resident_bytes(&responder.pids())).filter(|&bytes| bytes > 0);
    if peers == TCP_PEERS && !progress.stopping() {
        progress.step(&format!(
            "{name}: peers: {peers}: TCP, {} pairs of {TCP_FLOWS} flows through one peer \
             and through all, {} MiB each, digest-checked",
            tcp::pairs(quick),
            tcp::bytes(quick) >> 20
        ));
        let (pairs, failure) = tcp::run(&mut emulator, &responder, hosts, quick);
        progress.line(&format!(
            "{name}: peers: {peers}: {}",
            rows::tcp_summary(&pairs)
        ));
        outcome.tcp = Some(pairs);
        outcome.failure = failure;
        progress.done();
    }
    if let Err(error) = emulator.check() {
        outcome.failure = Some(error.to_string());
    }
    // The peers stop sending before the responder goes.
    drop(emulator);
    drop(responder);
    outcome
}

/// The emulator's ceiling, then the zero-loss search, at one frame size.
fn frame_rate(
    emulator: &PeerEmulator<'_>,
    responder: &Interface,
    hosts: &TwoHosts,
    frame_size: usize,
    quick: bool,
) -> FrameRate {
    let frames = FrameSizes::fixed(frame_size);
    let destination = SocketAddr::new(IpAddr::V4(RIGHT_OVERLAY), UDP_PORT);
    let sink = emulator.carrier_into(SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), SINK_PORT));
    let ceiling = Trial::new(
        Offer::Flood {
            duration: CEILING_DURATION,
        },
        frames.clone(),
    )
    .run_sender_only(&UdpPath::new(&hosts.left, &hosts.right, destination).carried_by(&sink))
    .map_err(|error| error.to_string())
    .and_then(|report| match report.cpu_time.as_secs_f64() {
        0.0 => Err("the emulator used no measurable CPU time".to_string()),
        secs => Ok(report.offered() as f64 / secs),
    });

    let mut search = if quick {
        ThroughputSearch::quick(frames)
    } else {
        ThroughputSearch::full(frames)
    };
    if quick {
        super::throughput::overview(&mut search);
    }
    let carrier = emulator.carrier();
    let path = UdpPath::new(&hosts.left, &hosts.right, destination).carried_by(&carrier);
    let pids = responder.pids();
    let cpu_before = cpu_time(&pids);
    let search = search.run(&path).map_err(|error| error.to_string());
    let charge = CpuCharge {
        cpu: cpu_time(&pids).saturating_sub(cpu_before),
        resident_bytes: resident_bytes(&pids),
    };
    let carrying = responder
        .peer_stats()
        .and_then(Result::ok)
        .map(|peers| peers.iter().filter(|peer| peer.rx_bytes > 0).count());
    FrameRate {
        frame_size,
        search,
        ceiling,
        charge,
        carrying,
    }
}
