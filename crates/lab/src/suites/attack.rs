//! `attack`: a handshake flood against the responder of an established
//! tunnel, for each WireGuard implementation (both sides run the same
//! one; other systems speak no WireGuard and are skipped).
//!
//! On [`AttackedHosts`] (the two hosts, and an attacker on its own link to
//! the right host) the tunnel comes up, the left side initiating. Then, for
//! each flood in [`FLOODS`] (none, [`PACED_RATE`] spoofed initiations a
//! second, and as fast as the generator goes), the flood starts and after
//! [`FLOOD_SETTLE`] (so the responder has seen the load):
//!
//! 1. **Throughput** (`flood_throughput`, bit/s): a digest-checked TCP
//!    transfer left → right through the tunnel. The figure that matters is
//!    its ratio to the same transfer without a flood, in the same run
//!    (`no_flood_ratio`; goal ≥ 0.9).
//! 2. **Handshake work** (`flood_handshakes`, replies/s): over that
//!    transfer, the cookie replies that reached the attacker's namespace
//!    per second (what any implementation can be seen to do); beside them
//!    the initiations the responder read with Diffie–Hellman work by its
//!    own count (fjord; the others do not report it: n/a), the datagrams
//!    its kernel dropped unread at the full socket, and its CPU time.
//! 3. **Restart** (`restart_recovery`, s): the left side (the initiator)
//!    is stopped and started again with the same keys while the flood
//!    goes on; the time from starting it (its daemon's start and
//!    configuration included) to the first UDP echo through the tunnel
//!    (probes every 10 ms from when its interface is up). Goal for fjord:
//!    under 2 s.
//!    A plain WireGuard initiator answers a cookie reply at its next
//!    retry, 5 s later, by design.
//!
//! The generator takes most of a core when unpaced: on a 2-core machine
//! that flood measures the machine as much as the tunnel.

use std::net::{IpAddr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use fjord_proto::HandshakeCounters;

use crate::attack::hosts::{ATTACKER_LINK, spoofed_sources};
use crate::attack::{
    AttackedHosts, EchoService, Flood, FloodRate, FloodReport, FloodTarget, Replies, ReplyCounters,
    time_to_echo, udp_socket_drops,
};
use crate::measure::Row;
use crate::progress::Progress;
use crate::results::{Extra, Measurement, MeasurementStatus};
use crate::systems::wireguard::{
    Implementation, Initiator, Interface, LISTEN_PORT, WgSide, point_to_point,
};
use crate::systems::{System, cpu_time};
use crate::topology::{RIGHT_OVERLAY, RIGHT_UNDERLAY};
use crate::traffic::{self, BulkReport, BulkTransfer};

/// The paced flood's rate: the one issue 15 was tried at.
pub const PACED_RATE: u32 = 20_000;
/// The floods, in order: the first (none) is every figure's reference.
pub const FLOODS: [Option<FloodRate>; 3] = [
    None,
    Some(FloodRate::PerSecond(PACED_RATE)),
    Some(FloodRate::Unpaced),
];
/// How long a flood runs before anything is measured.
pub const FLOOD_SETTLE: Duration = Duration::from_secs(1);
/// How long a restarted side may take to carry an echo again.
pub const RESTART_LIMIT: Duration = Duration::from_secs(30);
/// How long one transfer may take, and go without progress.
const TRANSFER_LIMIT: Duration = Duration::from_secs(60);
const TRANSFER_STALL: Duration = Duration::from_secs(15);
/// How long the tunnel may take to answer a ping before a flood level.
const TUNNEL_CHECK_LIMIT: Duration = Duration::from_secs(20);
const FIRST_SINK_PORT: u16 = 5401;
const ECHO_PORT: u16 = 5499;

fn transfer_bytes(quick: bool) -> u64 {
    if quick { 128 << 20 } else { 512 << 20 }
}

/// Progress steps per system: one per flood.
pub fn steps(_quick: bool) -> u64 {
    FLOODS.len() as u64
}

/// The `flood` parameter of a row.
fn flood_label(flood: Option<FloodRate>) -> String {
    flood.map_or_else(|| "none".to_string(), |rate| rate.to_string())
}

fn row(test: &'static str, system: &str, unit: &'static str, flood: Option<FloodRate>) -> Row {
    Row::new("attack", test, system, unit).param("flood", flood_label(flood))
}

/// Runs the suite for `system` on hosts it builds itself.
pub fn run(
    system: &dyn System,
    quick: bool,
    progress: &Progress,
    workdir: &Path,
) -> Vec<Measurement> {
    let name = system.name();
    let Some(implementation) = system.wireguard() else {
        progress.line(&format!(
            "{name}: attack: speaks no WireGuard, so there is no handshake to flood"
        ));
        progress.skip(steps(quick));
        return Vec::new();
    };
    let failed_all = |why: String| {
        progress.line(&format!("{name}: attack: {why}"));
        progress.skip(steps(quick));
        FLOODS
            .iter()
            .flat_map(|flood| {
                [
                    row("flood_throughput", name, "bit/s", *flood).failed(why.clone()),
                    row("restart_recovery", name, "s", *flood).failed(why.clone()),
                ]
            })
            .collect()
    };
    let hosts = match AttackedHosts::build() {
        Ok(hosts) => hosts,
        Err(error) => return failed_all(format!("building the hosts: {error}")),
    };
    let mut tunnel = match Tunnel::start(implementation, &hosts, workdir) {
        Ok(tunnel) => tunnel,
        Err(why) => return failed_all(why),
    };
    let mut rows = Vec::new();
    let mut reference: Option<f64> = None;
    for (index, flood) in FLOODS.into_iter().enumerate() {
        if progress.stopping() {
            break;
        }
        progress.step(&format!(
            "{name}: attack: flood {}: transfer and restart",
            flood_label(flood)
        ));
        let sink_port = FIRST_SINK_PORT + index as u16;
        let level = tunnel.measure(flood, transfer_bytes(quick), sink_port);
        let mut throughput = level.throughput_row(name, flood);
        if flood.is_none() {
            reference = throughput_of(&throughput);
        } else if let (Some(with), Some(without)) = (throughput_of(&throughput), reference) {
            throughput.extra.no_flood_ratio = Some(with / without);
        }
        progress.line(&format!("{name}: attack: {}", level.summary(&throughput)));
        rows.push(throughput);
        if flood.is_some() {
            rows.push(level.handshakes_row(name, flood));
        }
        rows.push(level.recovery_row(name, flood));
        progress.done();
    }
    rows
}

fn throughput_of(measurement: &Measurement) -> Option<f64> {
    (measurement.status == MeasurementStatus::Ok && measurement.extra.verified == Some(true))
        .then_some(measurement.median)
}

/// One implementation on both hosts, the right side flooded.
struct Tunnel<'a> {
    implementation: &'a dyn Implementation,
    hosts: &'a AttackedHosts,
    workdir: &'a Path,
    left_side: WgSide,
    right_side: WgSide,
    /// `None` only while it restarts.
    left: Option<Interface>,
    right: Interface,
    replies: ReplyCounters<'a>,
    // Dropped before the hosts, like everything here.
    _echo: EchoService,
}

/// What one flood level gave.
struct Level {
    flood: Option<FloodReport>,
    transfer: Result<BulkReport, String>,
    work: Result<HandshakeWork, String>,
    recovery: Result<Option<Duration>, String>,
}

/// The responder's handshake work over a window.
struct HandshakeWork {
    window: Duration,
    replies: Replies,
    /// By the implementation's own count, where it keeps one.
    counters: Option<HandshakeCounters>,
    socket_drops: u64,
    cpu: Duration,
}

/// Counters read at one moment, to take differences of.
struct Snapshot {
    at: Instant,
    replies: Replies,
    counters: Option<HandshakeCounters>,
    socket_drops: u64,
    cpu: Duration,
}

impl<'a> Tunnel<'a> {
    fn start(
        implementation: &'a dyn Implementation,
        hosts: &'a AttackedHosts,
        workdir: &'a Path,
    ) -> Result<Self, String> {
        let (left_side, right_side) =
            point_to_point(Initiator::Left).map_err(|error| error.to_string())?;
        let right = implementation
            .start(&hosts.hosts.right, &right_side, workdir)
            .map_err(|error| error.to_string())?;
        let left = implementation
            .start(&hosts.hosts.left, &left_side, workdir)
            .map_err(|error| error.to_string())?;
        let replies = ReplyCounters::install(&hosts.attacker, LISTEN_PORT)
            .map_err(|error| format!("counting replies: {error}"))?;
        let echo = EchoService::start(&hosts.hosts.right, ECHO_PORT)
            .map_err(|error| format!("starting the echo service: {error}"))?;
        let tunnel = Self {
            implementation,
            hosts,
            workdir,
            left_side,
            right_side,
            left: Some(left),
            right,
            replies,
            _echo: echo,
        };
        tunnel.check_up()?;
        Ok(tunnel)
    }

    /// Whether the tunnel answers a ping (after a restart that timed
    /// out, a plain initiator may need its retries).
    fn check_up(&self) -> Result<(), String> {
        traffic::wait_for_ping(
            &self.hosts.hosts.left,
            IpAddr::V4(RIGHT_OVERLAY),
            TUNNEL_CHECK_LIMIT,
        )
        .map(drop)
        .map_err(|error| format!("no ping through the tunnel: {error}"))
    }

    fn flood_target(&self) -> Result<FloodTarget, String> {
        let (destination_mac, source_mac) = self
            .hosts
            .attack_link_macs()
            .map_err(|error| error.to_string())?;
        Ok(FloodTarget {
            address: SocketAddrV4::new(RIGHT_UNDERLAY, LISTEN_PORT),
            public_key: self.right_side.public_key(),
            destination_mac,
            source_mac,
            sources: spoofed_sources(),
        })
    }

    /// Transfer, then restart, under `flood` (none: the reference).
    fn measure(&mut self, flood: Option<FloodRate>, bytes: u64, sink_port: u16) -> Level {
        let failed = |why: String| Level {
            flood: None,
            transfer: Err(why.clone()),
            work: Err(why.clone()),
            recovery: Err(why),
        };
        if let Err(why) = self.check_up() {
            return failed(why);
        }
        let running = match flood.map(|rate| self.start_flood(rate)).transpose() {
            Ok(running) => running,
            Err(why) => return failed(why),
        };
        if running.is_some() {
            std::thread::sleep(FLOOD_SETTLE);
        }
        let before = self.snapshot();
        let transfer = BulkTransfer::new(bytes)
            .timeout(TRANSFER_LIMIT)
            .stall_timeout(TRANSFER_STALL)
            .run(
                &self.hosts.hosts.left,
                &self.hosts.hosts.right,
                SocketAddr::new(IpAddr::V4(RIGHT_OVERLAY), sink_port),
            )
            .map_err(|error| error.to_string());
        let after = self.snapshot();
        let work = match (before, after) {
            (Ok(before), Ok(after)) => Ok(HandshakeWork::between(&before, &after)),
            (Err(why), _) | (_, Err(why)) => Err(why),
        };
        let recovery = self.restart_left();
        let flood = match running.map(Flood::stop).transpose() {
            Ok(report) => report,
            Err(error) => {
                let why = format!("the flood stopped: {error}");
                return Level {
                    flood: None,
                    transfer: Err(why.clone()),
                    work: Err(why.clone()),
                    recovery: Err(why),
                };
            }
        };
        Level {
            flood,
            transfer,
            work,
            recovery,
        }
    }

    fn start_flood(&self, rate: FloodRate) -> Result<Flood, String> {
        let target = self.flood_target()?;
        Flood::start(&self.hosts.attacker, ATTACKER_LINK, target, rate)
            .map_err(|error| format!("starting the flood: {error}"))
    }

    fn snapshot(&self) -> Result<Snapshot, String> {
        let counters = self
            .implementation
            .handshake_counters(&self.right)
            .transpose()?;
        Ok(Snapshot {
            at: Instant::now(),
            replies: self
                .replies
                .read()
                .map_err(|error| format!("reading reply counters: {error}"))?,
            counters,
            socket_drops: udp_socket_drops(&self.hosts.hosts.right, LISTEN_PORT)
                .map_err(|error| format!("reading socket drops: {error}"))?,
            cpu: cpu_time(&self.right.pids()),
        })
    }

    /// Stops the left side and starts it again with the same keys; the
    /// time from starting it to the first echo through the tunnel, `None`
    /// past [`RESTART_LIMIT`].
    fn restart_left(&mut self) -> Result<Option<Duration>, String> {
        // Dropping stops the daemon and removes a control socket it left.
        drop(self.left.take());
        let started = Instant::now();
        let left = self
            .implementation
            .start(&self.hosts.hosts.left, &self.left_side, self.workdir)
            .map_err(|error| format!("restarting the left side: {error}"))?;
        self.left = Some(left);
        time_to_echo(
            &self.hosts.hosts.left,
            SocketAddr::new(IpAddr::V4(RIGHT_OVERLAY), ECHO_PORT),
            started,
            RESTART_LIMIT,
        )
        .map_err(|error| format!("probing through the tunnel: {error}"))
    }
}

impl HandshakeWork {
    fn between(before: &Snapshot, after: &Snapshot) -> Self {
        let counters =
            before
                .counters
                .zip(after.counters)
                .map(|(before, after)| HandshakeCounters {
                    initiations_computed: after
                        .initiations_computed
                        .saturating_sub(before.initiations_computed),
                    cookie_replies: after.cookie_replies.saturating_sub(before.cookie_replies),
                });
        Self {
            window: after.at.saturating_duration_since(before.at),
            replies: after.replies.since(&before.replies),
            counters,
            socket_drops: after.socket_drops.saturating_sub(before.socket_drops),
            cpu: after.cpu.saturating_sub(before.cpu),
        }
    }
}

impl Level {
    fn flood_rate(&self) -> Option<f64> {
        self.flood.as_ref().map(FloodReport::per_second)
    }

    fn throughput_row(&self, system: &str, flood: Option<FloodRate>) -> Measurement {
        let row = row("flood_throughput", system, "bit/s", flood);
        match &self.transfer {
            Ok(report) => {
                let extra = Extra {
                    bytes: Some(report.bytes),
                    verified: Some(report.verified),
                    xxh3_128: Some(report.receiver_digest.to_string()),
                    flood_sent_per_sec: self.flood_rate(),
                    ..Extra::default()
                };
                row.measured(
                    vec![report.throughput_bits_per_sec],
                    MeasurementStatus::Ok,
                    extra,
                )
            }
            Err(why) => row.failed(why.clone()),
        }
    }

    fn handshakes_row(&self, system: &str, flood: Option<FloodRate>) -> Measurement {
        let row = row("flood_handshakes", system, "replies/s", flood);
        let work = match &self.work {
            Ok(work) if !work.window.is_zero() => work,
            Ok(_) => return row.failed("no time between the counter readings"),
            Err(why) => return row.failed(why.clone()),
        };
        let secs = work.window.as_secs_f64();
        let extra = Extra {
            cookie_replies: Some(work.replies.cookie_replies),
            initiations_computed: work.counters.map(|c| c.initiations_computed),
            socket_drops: Some(work.socket_drops),
            cpu_seconds: Some(work.cpu.as_secs_f64()),
            window_secs: Some(secs),
            flood_sent_per_sec: self.flood_rate(),
            ..Extra::default()
        };
        let mut measurement = row.measured(
            vec![work.replies.cookie_replies as f64 / secs],
            MeasurementStatus::Ok,
            extra,
        );
        if work.replies.responses > 0 {
            measurement.note = Some(format!(
                "{} handshake responses went to spoofed sources",
                work.replies.responses
            ));
        }
        measurement
    }

    fn recovery_row(&self, system: &str, flood: Option<FloodRate>) -> Measurement {
        let row = row("restart_recovery", system, "s", flood);
        let extra = Extra {
            time_limit_secs: Some(RESTART_LIMIT.as_secs_f64()),
            flood_sent_per_sec: self.flood_rate(),
            ..Extra::default()
        };
        match &self.recovery {
            Ok(Some(took)) => row.measured(vec![took.as_secs_f64()], MeasurementStatus::Ok, extra),
            Ok(None) => row.measured(
                vec![RESTART_LIMIT.as_secs_f64()],
                MeasurementStatus::TimedOut,
                extra,
            ),
            Err(why) => row.failed(why.clone()),
        }
    }

    /// One progress line.
    fn summary(&self, throughput: &Measurement) -> String {
        let mut parts = Vec::new();
        if let Some(rate) = self.flood_rate() {
            parts.push(format!("flood {rate:.0}/s"));
        }
        parts.push(match &self.transfer {
            Ok(report) => {
                let mut text = format!("{:.3} Gbit/s", report.throughput_gbit_per_sec());
                if let Some(ratio) = throughput.extra.no_flood_ratio {
                    text.push_str(&format!(" ({ratio:.2}× no flood)"));
                }
                text
            }
            Err(why) => format!("transfer failed: {why}"),
        });
        if let (Ok(work), Some(_)) = (&self.work, &self.flood) {
            let secs = work.window.as_secs_f64().max(f64::EPSILON);
            let mut text = format!(
                "{:.0} cookie replies/s",
                work.replies.cookie_replies as f64 / secs
            );
            if let Some(counters) = work.counters {
                text.push_str(&format!(
                    ", {:.0} initiations computed/s",
                    counters.initiations_computed as f64 / secs
                ));
            }
            parts.push(text);
        }
        parts.push(match &self.recovery {
            Ok(Some(took)) => format!("restart: back after {:.3} s", took.as_secs_f64()),
            Ok(None) => format!("restart: not back after {} s", RESTART_LIMIT.as_secs()),
            Err(why) => format!("restart failed: {why}"),
        });
        parts.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floods_start_with_the_reference_and_label_their_rows() {
        assert_eq!(FLOODS[0], None);
        let labels: Vec<String> = FLOODS.iter().map(|flood| flood_label(*flood)).collect();
        assert_eq!(labels, ["none", "20000/s", "max"]);
        assert_eq!(steps(true), 3);
    }
}
