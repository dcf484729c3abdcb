//! The attack suite's measuring side: one implementation on both hosts
//! of [`AttackedHosts`], the right side flooded, and the three things the
//! suite does to it: transfers with and without a flood, counter readings
//! around them, and restarts of the left side.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::Path;
use std::time::{Duration, Instant};

use fjord_proto::{DropCounters, HandshakeCounters, PublicKey};

use crate::attack::hosts::{ATTACKER_LINK, spoofed_sources};
use crate::attack::{
    AttackedHosts, EchoService, Flood, FloodRate, FloodTarget, Replies, ReplyCounters,
    time_to_echo, udp_socket_drops,
};
use crate::systems::cpu_time;
use crate::systems::wireguard::{End, Implementation, Initiator, LISTEN_PORT, Pair};
use crate::topology::{RIGHT_OVERLAY, RIGHT_UNDERLAY};
use crate::traffic::{self, BulkReport, BulkTransfer};

/// How long a flood runs before anything is measured, so the responder
/// has seen the load.
pub const FLOOD_SETTLE: Duration = Duration::from_secs(1);
/// How long a restarted side may take to carry an echo again.
pub const RESTART_LIMIT: Duration = Duration::from_secs(30);
/// How long one transfer may take, and go without progress.
const TRANSFER_LIMIT: Duration = Duration::from_secs(60);
const TRANSFER_STALL: Duration = Duration::from_secs(15);
/// How long the tunnel may take to answer a ping before a transfer.
const TUNNEL_CHECK_LIMIT: Duration = Duration::from_secs(20);
pub(super) const FIRST_SINK_PORT: u16 = 5401;
const ECHO_PORT: u16 = 5499;

/// One implementation on both hosts, the right side flooded.
/// Field order matters: daemons stop, then the echo service ends, then
/// (in the caller) the hosts go.
pub struct Tunnel<'a> {
    pair: Pair<'a>,
    hosts: &'a AttackedHosts,
    replies: ReplyCounters<'a>,
    next_sink_port: u16,
    _echo: EchoService,
}

/// The responder's handshake work over one or more windows.
#[derive(Debug, Clone, Default)]
pub struct HandshakeWork {
    pub window: Duration,
    pub replies: Replies,
    /// By the implementation's own count, where it keeps one.
    pub counters: Option<HandshakeCounters>,
    /// What the responder refused, by reason, by its own count, where it
    /// keeps one.
    pub drops: Option<DropCounters>,
    pub socket_drops: u64,
    pub cpu: Duration,
}

/// Counters read at one moment, to take differences of.
pub struct Snapshot {
    at: Instant,
    replies: Replies,
    counters: Option<HandshakeCounters>,
    drops: Option<DropCounters>,
    socket_drops: u64,
    cpu: Duration,
}

/// A transfer during a flood, and what the responder did meanwhile.
pub struct FloodedTransfer {
    pub transfer: Result<BulkReport, String>,
    pub work: Result<HandshakeWork, String>,
    /// Spoofed initiations per second the flood sent.
    pub sent_per_sec: Option<f64>,
}

impl FloodedTransfer {
    /// Neither transfer nor work, for `why`.
    pub fn failed(why: String) -> Self {
        Self {
            transfer: Err(why.clone()),
            work: Err(why),
            sent_per_sec: None,
        }
    }

    /// Stops `flood`, which ran during `transfer`; a flood that had
    /// already died makes the whole measurement fail, since the transfer
    /// did not run under it to the end.
    pub fn after(
        flood: Flood,
        transfer: Result<BulkReport, String>,
        work: Result<HandshakeWork, String>,
    ) -> Self {
        match flood.stop() {
            Ok(report) => Self {
                transfer,
                work,
                sent_per_sec: Some(report.per_second()),
            },
            Err(error) => Self::failed(format!("the flood stopped early: {error}")),
        }
    }
}

impl<'a> Tunnel<'a> {
    pub fn start(
        implementation: &'a dyn Implementation,
        hosts: &'a AttackedHosts,
        workdir: &'a Path,
    ) -> Result<Self, String> {
        let pair = Pair::start(implementation, &hosts.hosts, Initiator::Left, workdir)?;
        let replies = ReplyCounters::install(&hosts.attacker, LISTEN_PORT)
            .map_err(|error| format!("counting replies: {error}"))?;
        let echo = EchoService::start(&hosts.hosts.right, ECHO_PORT)
            .map_err(|error| format!("starting the echo service: {error}"))?;
        let tunnel = Self {
            pair,
            hosts,
            replies,
            next_sink_port: FIRST_SINK_PORT,
            _echo: echo,
        };
        tunnel.check_up()?;
        Ok(tunnel)
    }

    /// Whether the tunnel answers a ping (after a restart that timed
    /// out, a plain initiator may need its retries).
    pub fn check_up(&self) -> Result<(), String> {
        traffic::wait_for_ping(
            &self.hosts.hosts.left,
            IpAddr::V4(RIGHT_OVERLAY),
            TUNNEL_CHECK_LIMIT,
        )
        .map(drop)
        .map_err(|error| format!("no ping through the tunnel: {error}"))
    }

    /// A digest-checked TCP transfer of `bytes` left → right through the
    /// tunnel.
    pub fn transfer(&mut self, bytes: u64) -> Result<BulkReport, String> {
        transfer(self.hosts, RIGHT_OVERLAY, &mut self.next_sink_port, bytes)
    }

    /// Starts a flood at `rate` and waits [`FLOOD_SETTLE`].
    pub fn start_flood(&self, rate: FloodRate) -> Result<Flood, String> {
        start_flood(self.hosts, self.pair.side(End::Right).public_key(), rate)
    }

    /// A transfer of `bytes` while a flood at `rate` runs.
    pub fn flooded_transfer(&mut self, rate: FloodRate, bytes: u64) -> FloodedTransfer {
        let flood = match self.start_flood(rate) {
            Ok(flood) => flood,
            Err(why) => return FloodedTransfer::failed(why),
        };
        let before = self.snapshot();
        let transfer = self.transfer(bytes);
        let after = self.snapshot();
        let work = match (before, after) {
            (Ok(before), Ok(after)) => Ok(HandshakeWork::between(&before, &after)),
            (Err(why), _) | (_, Err(why)) => Err(why),
        };
        FloodedTransfer::after(flood, transfer, work)
    }

    fn snapshot(&self) -> Result<Snapshot, String> {
        let right = self.pair.interface(End::Right)?;
        let counters = self
            .pair
            .implementation()
            .handshake_counters(right)
            .transpose()?;
        let drops = self
            .pair
            .implementation()
            .drop_counters(right)
            .transpose()?;
        Ok(Snapshot {
            at: Instant::now(),
            replies: self
                .replies
                .read()
                .map_err(|error| format!("reading reply counters: {error}"))?,
            counters,
            drops,
            socket_drops: udp_socket_drops(&self.hosts.hosts.right, LISTEN_PORT)
                .map_err(|error| format!("reading socket drops: {error}"))?,
            cpu: cpu_time(&right.pids()),
        })
    }

    /// Stops the left side and starts it again with the same keys, under
    /// a flood at `rate` if given; the time from starting it to the first
    /// echo through the tunnel, `None` past [`RESTART_LIMIT`].
    pub fn restart_left(&mut self, rate: Option<FloodRate>) -> Result<Option<Duration>, String> {
        let flood = rate.map(|rate| self.start_flood(rate)).transpose()?;
        let started = self.pair.restart(End::Left)?;
        let back = time_to_echo(
            &self.hosts.hosts.left,
            SocketAddr::new(IpAddr::V4(RIGHT_OVERLAY), ECHO_PORT),
            started,
            RESTART_LIMIT,
        )
        .map_err(|error| format!("probing through the tunnel: {error}"))?;
        if let Some(flood) = flood {
            flood
                .stop()
                .map_err(|error| format!("the flood stopped early: {error}"))?;
        }
        Ok(back)
    }
}

/// A digest-checked TCP transfer of `bytes` from the left host to `to` on
/// the right one, each on a port of its own (no wait for an old
/// connection's): `next_port`, which moves on.
pub(super) fn transfer(
    hosts: &AttackedHosts,
    to: Ipv4Addr,
    next_port: &mut u16,
    bytes: u64,
) -> Result<BulkReport, String> {
    let port = *next_port;
    *next_port = next_port.wrapping_add(1).max(FIRST_SINK_PORT);
    BulkTransfer::new(bytes)
        .timeout(TRANSFER_LIMIT)
        .stall_timeout(TRANSFER_STALL)
        .run(
            &hosts.hosts.left,
            &hosts.hosts.right,
            SocketAddr::new(IpAddr::V4(to), port),
        )
        .map_err(|error| error.to_string())
}

/// Starts a flood at `rate` on the right host's WireGuard port, with a
/// mac1 keyed to `responder`, and waits [`FLOOD_SETTLE`].
pub fn start_flood(
    hosts: &AttackedHosts,
    responder: PublicKey,
    rate: FloodRate,
) -> Result<Flood, String> {
    let (destination_mac, source_mac) = hosts
        .attack_link_macs()
        .map_err(|error| error.to_string())?;
    let target = FloodTarget {
        address: SocketAddrV4::new(RIGHT_UNDERLAY, LISTEN_PORT),
        public_key: responder,
        destination_mac,
        source_mac,
        sources: spoofed_sources(),
    };
    let flood = Flood::start(&hosts.attacker, ATTACKER_LINK, target, rate)
        .map_err(|error| format!("starting the flood: {error}"))?;
    std::thread::sleep(FLOOD_SETTLE);
    Ok(flood)
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
                    cookie_replies_withheld: after
                        .cookie_replies_withheld
                        .saturating_sub(before.cookie_replies_withheld),
                });
        Self {
            window: after.at.saturating_duration_since(before.at),
            replies: after.replies.since(&before.replies),
            counters,
            drops: before
                .drops
                .as_ref()
                .zip(after.drops.as_ref())
                .map(|(before, after)| after.since(before)),
            socket_drops: after.socket_drops.saturating_sub(before.socket_drops),
            cpu: after.cpu.saturating_sub(before.cpu),
        }
    }

    /// The work of both windows together.
    pub fn plus(&self, other: &HandshakeWork) -> HandshakeWork {
        let counters = match (self.counters, other.counters) {
            (Some(mine), Some(theirs)) => Some(HandshakeCounters {
                initiations_computed: mine.initiations_computed + theirs.initiations_computed,
                cookie_replies: mine.cookie_replies + theirs.cookie_replies,
                cookie_replies_withheld: mine.cookie_replies_withheld
                    + theirs.cookie_replies_withheld,
            }),
            (mine, theirs) => mine.or(theirs),
        };
        let drops = match (&self.drops, &other.drops) {
            (Some(mine), Some(theirs)) => {
                let mut total = mine.clone();
                total.add(theirs);
                Some(total)
            }
            (mine, theirs) => mine.clone().or_else(|| theirs.clone()),
        };
        HandshakeWork {
            window: self.window + other.window,
            replies: Replies {
                cookie_replies: self.replies.cookie_replies + other.replies.cookie_replies,
                responses: self.replies.responses + other.replies.responses,
            },
            counters,
            drops,
            socket_drops: self.socket_drops + other.socket_drops,
            cpu: self.cpu + other.cpu,
        }
    }
}
