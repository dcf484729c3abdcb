//! The suites, each reproducing one reference study's table for any set of
//! systems. A suite runs against one system at a time on hosts the runner
//! built; it returns measurement rows and never panics on a failed test
//! (the row says what failed).

pub mod attack;
mod bdp;
mod latency;
mod loss;
pub mod mesh;
pub mod mesh_pmtu;
mod mesh_relay;
mod quick;
pub mod soak;
mod tcp;
mod throughput;

use std::time::Duration;

use crate::emulator::{Emulator, LinkConfig, RunningEmulator};
use crate::progress::Progress;
use crate::results::Measurement;
use crate::systems::{RunningSystem, System};
use crate::topology::{MIDDLE_LEFT_LINK, MIDDLE_RIGHT_LINK, TwoHosts};

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
}

impl Suite {
    pub const ALL: [Suite; 8] = [
        Suite::Quick,
        Suite::Throughput,
        Suite::Latency,
        Suite::Loss,
        Suite::Bdp,
        Suite::Soak,
        Suite::Mesh,
        Suite::Attack,
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
                "ping RTT by payload size (56, 500, 1000 bytes), as in the VpnCloud tests"
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
                "a handshake flood (spoofed initiations with a valid mac1, none, 20,000/s, max) on the responder of each WireGuard implementation: TCP throughput against no flood, cookie replies against Diffie-Hellman work, time for a restarted initiator to get the tunnel back"
            }
            Suite::Mesh => {
                "a mesh of 20 and 100 nodes (5 and 20 with --quick) from one bootstrap member: convergence time, memory per node and per peer, first packet; NAT, relays and path MTU are not measured yet"
            }
        }
    }

    /// Whether the suite needs the middle namespace with the link emulator.
    pub fn needs_emulator(self) -> bool {
        matches!(self, Suite::Loss | Suite::Bdp)
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
            Suite::Latency => latency::PAYLOADS.len() as u64,
            Suite::Loss => loss::drop_rates(quick).len() as u64,
            Suite::Bdp => 1,
            Suite::Soak => u64::from(soak::CHECKPOINTS),
            Suite::Mesh => mesh::steps(quick),
            Suite::Attack => attack::steps(quick),
        }
    }

    /// Whether the suite builds its own hosts (a [`crate::topology::Lan`]
    /// per mesh size, an attacker beside two hosts, two hosts whose
    /// sides the soak restarts) and starts the system itself, through
    /// [`Suite::run_on_own_hosts`], instead of running on [`TwoHosts`].
    pub fn builds_own_hosts(self) -> bool {
        matches!(self, Suite::Mesh | Suite::Attack | Suite::Soak)
    }

    /// Runs a suite that [builds its own hosts](Suite::builds_own_hosts)
    /// for `system`; work files go under `workdir`.
    pub fn run_on_own_hosts(
        self,
        system: &dyn System,
        quick: bool,
        progress: &Progress,
        workdir: &std::path::Path,
    ) -> Vec<Measurement> {
        match self {
            Suite::Mesh => mesh::run(system, quick, progress, workdir),
            Suite::Attack => attack::run(system, quick, progress, workdir),
            Suite::Soak => soak::run(system, quick, progress, workdir),
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
            // Run through `run_on_own_hosts`.
            Suite::Mesh | Suite::Attack | Suite::Soak => Vec::new(),
        }
    }

    /// The link the emulator shapes while the system comes up and between
    /// trials (each trial sets its own).
    pub fn idle_link(self) -> LinkConfig {
        match self {
            Suite::Bdp => bdp::link(),
            _ => loss::link(0.0),
        }
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
