//! The suites, each reproducing one reference study's table for any set of
//! systems. A suite runs against one system at a time on hosts the runner
//! built; it returns measurement rows and never panics on a failed test
//! (the row says what failed).

pub mod attack;
mod bdp;
mod compress;
pub(crate) mod latency;
mod loss;
pub mod mesh;
pub mod mesh_pmtu;
pub mod mesh_policy;
mod mesh_relay;
pub mod mtu;
pub mod peers;
mod policy;
pub(crate) mod quick;
pub mod soak;
mod tcp;
pub(crate) mod throughput;

use std::path::Path;
use std::time::Duration;

use crate::emulator::{Emulator, LinkConfig, RunningEmulator};
use crate::progress::Progress;
use crate::results::Measurement;
use crate::systems::{RunningMesh, RunningSystem, System, SystemError};
use crate::topology::{MIDDLE_LEFT_LINK, MIDDLE_RIGHT_LINK, MeshHost, TwoHosts};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    Quick,
    Throughput,
    Latency,
    Loss,
    Bdp,
    Soak,
    Mesh,
    Attack,
    Peers,
    Compress,
    Mtu,
    Policy,
}

impl Suite {
    pub const ALL: [Suite; 12] = [
        Suite::Quick,
        Suite::Throughput,
        Suite::Latency,
        Suite::Loss,
        Suite::Bdp,
        Suite::Soak,
        Suite::Mesh,
        Suite::Attack,
        Suite::Peers,
        Suite::Compress,
        Suite::Mtu,
        Suite::Policy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Suite::Quick => "quick",
            Suite::Throughput => "throughput",
            Suite::Latency => "latency",
            Suite::Loss => "loss",
            Suite::Bdp => "bdp",
            Suite::Soak => "soak",
            Suite::Mesh => "mesh",
            Suite::Attack => "attack",
            Suite::Peers => "peers",
            Suite::Compress => "compress",
            Suite::Mtu => "mtu",
            Suite::Policy => "policy",
        }
    }

    pub fn description(self) -> &'static str {
        match self {
            Suite::Quick => {
                "a few-minute overview: TCP throughput (1 and 4 streams), 64- and 1518-byte frame rates, RTT"
            }
            Suite::Throughput => {
                "RFC 2544 frame-size sweep, IMIX and overload receive rate, both directions"
            }
            Suite::Latency => {
                "ping RTT by payload size (56, 500, 1000 bytes) every 10 ms as in the VpnCloud tests, and 56 and 1000 bytes on an idle link (every 200 ms) and every 1 ms"
            }
            Suite::Loss => {
                "time to move a 10 MB file at 0-25 % random drop, as in the TCP-over-TCP study"
            }
            Suite::Bdp => {
                "TCP efficiency on a 1 Gbit/s, 45 ms one-way long fat pipe, as in the HPN-SSH study"
            }
            Suite::Soak => {
                "an hour of 4-stream TCP (5 min with --quick, or --soak-minutes) with rekeys and a restart of one side every 10 min: each side's memory and its growth, digest-checked transfers, both sides' counters against each other"
            }
            Suite::Attack => {
                "a handshake flood (spoofed initiations with a valid mac1, none, 20,000/s, max) on the responder of each WireGuard implementation: TCP throughput against no flood, cookie replies against Diffie-Hellman work, time for a restarted initiator to get the tunnel back; bare takes the same floods at a socket nobody reads, what the machine itself keeps"
            }
            Suite::Peers => {
                "the same load spread over 1, 10, 100 and 1,000 peers of one responder (the peer emulator plays them): zero-loss frame rate at 64 and 1,420 bytes with its ratio to one peer, memory per peer, TCP over 100 flows to 1 and 100 peers"
            }
            Suite::Compress => {
                "32 MiB of text (generated access logs) and of already-compressed data (random bytes) over a 100 Mbit/s link, beside its theoretical TCP goodput, as in the PPP-over-SSH study"
            }
            Suite::Mtu => {
                "TCP throughput and CPU per side at tunnel MTUs 1,400, 9,000 and 16,384 on a jumbo underlay, and the study's ping test (10,000 pings every 1 ms of 50/500/1,000 bytes, best of 5), as in the VpnCloud study"
            }
            Suite::Policy => {
                "three members of one network: TCP transfers between two of them with no policy and a signed 100-rule policy, alone and while the third opens 1,000,000 UDP flows; the flows the target tracks after a scan of its 65,535 TCP ports and after the flood, against its cap"
            }
            Suite::Mesh => {
                "a mesh of 20 and 100 nodes (5 and 20 with --quick) from one bootstrap member: convergence time, memory per node and per peer, first packet; a NAT matrix (direct or relayed, time to a session), relay cost against the direct path, path MTU across a link that drops ICMP"
            }
        }
    }

    /// Whether the suite needs the middle namespace with the link emulator.
    pub fn needs_emulator(self) -> bool {
        matches!(self, Suite::Loss | Suite::Bdp | Suite::Compress)
    }

    /// Parses `quick,loss`; an unknown name lists the valid ones.
    pub fn parse_list(text: &str) -> Result<Vec<Suite>, String> {
        let mut suites = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(suite) = Suite::ALL.into_iter().find(|s| s.name() == name) else {
                let valid: Vec<&str> = Suite::ALL.iter().map(|s| s.name()).collect();
                return Err(format!(
                    "unknown suite '{name}'; valid suites: {}",
                    valid.join(", ")
                ));
            };
            if !suites.contains(&suite) {
                suites.push(suite);
            }
        }
        if suites.is_empty() {
            return Err("no suites given".to_string());
        }
        Ok(suites)
    }

    /// How many progress steps the suite takes per system.
    pub fn steps(self, quick: bool) -> u64 {
        match self {
            Suite::Quick => 5,
            Suite::Throughput => throughput::steps(quick),
            Suite::Latency => latency::steps(),
            Suite::Loss => loss::drop_rates(quick).len() as u64,
            Suite::Bdp => 1,
            Suite::Soak => u64::from(soak::CHECKPOINTS),
            Suite::Mesh => mesh::steps(quick),
            Suite::Attack => attack::steps(quick),
            Suite::Peers => peers::steps(quick),
            Suite::Compress => compress::steps(),
            Suite::Mtu => mtu::steps(quick),
            Suite::Policy => policy::steps(quick),
        }
    }

    /// Whether the suite builds its own hosts (a [`crate::topology::Lan`]
    /// per mesh size, an attacker beside two hosts, a responder beside
    /// the peer emulator, two hosts whose sides the soak restarts, two
    /// hosts per MTU with a jumbo underlay) and
    /// starts the system itself, through
    /// [`Suite::run_on_own_hosts`], instead of running on [`TwoHosts`].
    pub fn builds_own_hosts(self) -> bool {
        matches!(
            self,
            Suite::Mesh | Suite::Attack | Suite::Peers | Suite::Soak | Suite::Mtu | Suite::Policy
        )
    }

    /// Runs a suite that [builds its own hosts](Suite::builds_own_hosts)
    /// for the system in `setup`.
    pub fn run_on_own_hosts(self, setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
        match self {
            Suite::Mesh => mesh::run(setup, quick),
            Suite::Attack => attack::run(setup, quick),
            Suite::Peers => peers::run(setup, quick),
            Suite::Soak => soak::run(setup, quick),
            Suite::Mtu => mtu::run(setup, quick),
            Suite::Policy => policy::run(setup, quick),
            _ => Vec::new(),
        }
    }

    /// Runs the suite for one system that is up on `context.hosts`.
    pub fn run(self, context: &mut Context<'_>) -> Vec<Measurement> {
        match self {
            Suite::Quick => quick::run(context),
            Suite::Throughput => throughput::run(context),
            Suite::Latency => latency::run(context),
            Suite::Loss => loss::run(context),
            Suite::Bdp => bdp::run(context),
            Suite::Compress => compress::run(context),
            // Run through `run_on_own_hosts`.
            Suite::Mesh
            | Suite::Attack
            | Suite::Peers
            | Suite::Soak
            | Suite::Mtu
            | Suite::Policy => Vec::new(),
        }
    }

    /// The link the emulator shapes while the system comes up and between
    /// trials (each trial sets its own).
    pub fn idle_link(self) -> LinkConfig {
        match self {
            Suite::Bdp => bdp::link(),
            Suite::Compress => compress::link(),
            _ => loss::link(0.0),
        }
    }
}

/// What a suite that [builds its own hosts](Suite::builds_own_hosts)
/// starts from, in one value so that every such suite (and every plan
/// a test runs directly) takes the same inputs in the same way.
#[derive(Clone, Copy)]
pub struct Setup<'a> {
    pub system: &'a dyn System,
    pub progress: &'a Progress,
    /// Where the system's work files go.
    pub workdir: &'a Path,
}

impl<'a> Setup<'a> {
    pub fn name(&self) -> &'a str {
        self.system.name()
    }

    /// Whether the run is asked to stop.
    pub fn stopping(&self) -> bool {
        self.progress.stopping()
    }

    /// One progress line about the system: `name: text`.
    pub fn say(&self, text: &str) {
        self.progress.line(&format!("{}: {text}", self.name()));
    }

    /// Begins a progress step of the system: `name: text`.
    pub fn step(&self, text: &str) {
        self.progress.step(&format!("{}: {text}", self.name()));
    }

    /// Ends the progress step under way.
    pub fn done(&self) {
        self.progress.done();
    }

    /// Skips `steps` the suite will not take.
    pub fn skip(&self, steps: u64) {
        self.progress.skip(steps);
    }

    /// Says why the suite cannot go on (`name: text`) and skips the
    /// `steps` it will not take.
    pub fn give_up(&self, text: &str, steps: u64) {
        self.say(text);
        self.skip(steps);
    }

    /// The WireGuard implementation behind the system, for a suite that
    /// drives one; for any other system, one progress line saying why the
    /// suite has nothing to measure there, and the suite's steps skipped.
    pub fn wireguard_or_skip(
        &self,
        suite: Suite,
        quick: bool,
    ) -> Option<&'a dyn crate::systems::wireguard::Implementation> {
        match self.system.wireguard() {
            Ok(implementation) => Some(implementation),
            Err(why) => {
                self.give_up(
                    &format!("{}: skipped: {why}", suite.name()),
                    suite.steps(quick),
                );
                None
            }
        }
    }

    /// Brings the system's tunnel up between `hosts`, its files in the
    /// work directory.
    pub fn start(&self, hosts: &TwoHosts) -> Result<Box<dyn RunningSystem>, SystemError> {
        self.system.start(hosts, self.workdir)
    }

    /// [`Setup::start`] with the tunnel's interfaces at `mtu_bytes`.
    pub fn start_with_mtu(
        &self,
        hosts: &TwoHosts,
        mtu_bytes: u16,
    ) -> Result<Box<dyn RunningSystem>, SystemError> {
        self.system.start_with_mtu(hosts, self.workdir, mtu_bytes)
    }

    /// Configures the system's mesh across `hosts`.
    pub fn start_mesh(&self, hosts: &[MeshHost<'_>]) -> Result<Box<dyn RunningMesh>, SystemError> {
        self.system.start_mesh(hosts, self.workdir)
    }
}

/// What a suite works with.
pub struct Context<'a> {
    pub hosts: &'a TwoHosts,
    pub system: &'a dyn RunningSystem,
    pub system_name: &'a str,
    /// Shorter trials and fewer points, for a few-minute run.
    pub quick: bool,
    pub progress: &'a Progress,
    /// The emulator in the middle namespace, for suites that need one.
    pub emulator: Option<RunningEmulator>,
}

impl Context<'_> {
    /// Restarts the emulator with `link` in both directions.
    pub fn shape(&mut self, link: LinkConfig) -> Result<(), String> {
        let Some(middle) = self.hosts.middle.as_ref() else {
            return Err("this topology has no middle namespace for the emulator".into());
        };
        if let Some(running) = self.emulator.take() {
            running
                .stop()
                .map_err(|e| format!("stopping the emulator: {e}"))?;
        }
        let started = Emulator::start(
            middle,
            MIDDLE_LEFT_LINK,
            MIDDLE_RIGHT_LINK,
            link.clone(),
            link,
        )
        .map_err(|e| format!("starting the emulator: {e}"))?;
        self.emulator = Some(started);
        // Give queued frames of the previous trial time to drain away.
        std::thread::sleep(Duration::from_millis(50));
        Ok(())
    }

    /// Whether the tunnel has processes to charge CPU to.
    pub fn has_processes(&self) -> bool {
        !self.system.pids().is_empty()
    }
}
