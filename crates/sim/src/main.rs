//! `fjord-sim`: runs the mesh scenario at one or more sizes and prints a
//! Markdown table, one row per size.
//!
//! ```text
//! cargo run -p fjord-sim --release -- --members 100,300 --seed 1 [--loss 0.05]
//!     [--eager-sessions 32] [--idle-timeout-secs 60]
//! ```

use std::alloc::System;
use std::time::{Duration, Instant};

use clap::Parser;
use fjord_sim::{LinkConfig, Report, ScenarioConfig, Sessions, SimConfig, scenario};
use stats_alloc::{INSTRUMENTED_SYSTEM, Region, StatsAlloc};

/// Every allocation is counted, so live heap bytes per member can be read
/// (the counters cost an atomic add per allocation, nothing per event).
#[global_allocator]
static ALLOCATOR: &StatsAlloc<System> = &INSTRUMENTED_SYSTEM;

#[derive(Parser)]
#[command(
    about = "Simulates whole fjord meshes (real nodes, simulated network) and prints what they cost"
)]
struct Args {
    /// Mesh sizes to run, each a row of the table.
    #[arg(long, value_delimiter = ',', default_value = "50")]
    members: Vec<usize>,
    /// Seed of keys, placement, loss and every node's randomness.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Probability that any datagram is lost.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Fraction of members behind a NAT of their own (port-preserving).
    #[arg(long, default_value_t = 0.0)]
    nat_fraction: f64,
    /// Members up to which all meet all (`EagerSessions`); above, sessions
    /// are on demand.
    #[arg(long, default_value_t = fjord_mesh::DEFAULT_EAGER_SESSIONS)]
    eager_sessions: usize,
    /// Seconds without user traffic after which an on-demand session
    /// closes (`IdleTimeout`).
    #[arg(long, default_value_t = fjord_mesh::DEFAULT_IDLE_TIMEOUT.as_secs())]
    idle_timeout_secs: u64,
    /// Seconds of the window in which traffic at rest is counted (two
    /// minutes hold one rekey of every session: WireGuard's
    /// REKEY_AFTER_TIME).
    #[arg(long, default_value_t = 120)]
    rest_secs: u64,
}

/// Live heap bytes: allocated and not yet freed, since the start (a
/// reallocation's growth or shrinkage is already counted in these two).
fn live_bytes() -> u64 {
    let stats = ALLOCATOR.stats();
    stats
        .bytes_allocated
        .saturating_sub(stats.bytes_deallocated) as u64
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    anyhow::ensure!(
        (0.0..1.0).contains(&args.loss),
        "--loss is a probability below 1"
    );
    anyhow::ensure!(
        args.members.iter().all(|n| *n >= 3),
        "--members: at least 3 (a bootstrap, a revoker and a victim)"
    );
    println!("{}", Report::TABLE_HEADER);
    for members in &args.members {
        let mut sim = SimConfig::new(
            args.seed,
            LinkConfig {
                loss: args.loss,
                nat_fraction: args.nat_fraction,
                ..LinkConfig::default()
            },
        );
        sim.sessions = Sessions {
            eager: args.eager_sessions,
            idle_timeout: Duration::from_secs(args.idle_timeout_secs),
        };
        let mut config = ScenarioConfig::new(*members, sim);
        config.rest = Duration::from_secs(args.rest_secs);
        config.live_bytes = Some(live_bytes);
        let region = Region::new(ALLOCATOR);
        let started = Instant::now();
        let (report, sim) = scenario::run(&config);
        let wall = started.elapsed();
        println!("{}", report.table_row());
        eprintln!("{}", report.control_breakdown());
        eprintln!(
            "{members} members, seed {}: {:.1} s of wall time for {:.0} s simulated, {} allocations",
            args.seed,
            wall.as_secs_f64(),
            sim.elapsed().as_secs_f64(),
            region.change().allocations,
        );
    }
    Ok(())
}
