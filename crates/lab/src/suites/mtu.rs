//! `mtu`: the VpnCloud study's MTU comparison. The study ran VpnCloud in
//! TAP mode at tunnel MTUs of 1,400 and 16,384 bytes and saw 885 → 947
//! Mbit/s and the CPU of each side halved: fewer, larger packets mean
//! fewer system calls and crypto calls per byte. Here every system runs
//! at each tunnel MTU of [`Plan::mtus`] (1,400, 9,000 and 16,384; 1,400
//! and 16,384 with `--quick`) on fresh hosts.
//!
//! # The underlay
//!
//! The study's underlay stayed at 1,500 bytes and fragmented the large
//! tunnel packets; here the underlay veth is raised to the tunnel MTU plus
//! [`UNDERLAY_HEADROOM_BYTES`], so every tunnel packet crosses in one
//! jumbo frame (a veth takes up to 65,535) and nothing is fragmented.
//! What is measured is the tunnel's own cost per packet, not the
//! kernel's reassembly. Bare runs on the same underlay at each MTU and is
//! the reference for the ratios.
//!
//! # What each MTU gives
//!
//! 1. The system starts at that MTU ([`System::start_with_mtu`]); a
//!    driver that cannot choose its MTU gives `unsupported: …` rows, but
//!    for the ping test (4.), whose payloads fit any tunnel: that runs at
//!    the system's own MTU, and its rows say so in a note.
//! 2. A ping of a full-size packet (the MTU less the IPv4 and ICMP
//!    headers) must come back through the tunnel; if none does, the
//!    system does not carry that MTU and the rows say `unsupported: …`.
//!    Tried up to 65,000 bytes, every system here carries every MTU:
//!    fjord on TUN and TAP, VpnCloud 2.3 on TAP, wireguard-go, and
//!    boringtun 0.7 once it has read its interface's new MTU (it checks
//!    once a second, hence the probe's retries).
//! 3. `tcp_bulk` (bit/s): [`Plan::transfers`] digest-checked transfers
//!    left → right, one TCP stream each, with the CPU of both sides' tunnel
//!    processes, and per side as a share of one core over the transfers'
//!    time (`cpu_left_percent`, the sender; `cpu_right_percent`).
//! 4. At the first MTU only: the study's ping test (`ping_average`, ms):
//!    [`Plan::ping_count`] pings every 1 ms of 50, 500 and 1,000 bytes,
//!    [`Plan::ping_runs`] runs each, the lowest run's average round trip
//!    (as the study reports it), with that run's p50 beside it.

use std::net::IpAddr;

use super::{Context, Setup, latency, tcp};
use crate::measure::Row;
use crate::results::{Measurement, MeasurementStatus, UNSUPPORTED_PREFIX};
use crate::systems::{RunningSystem, SystemError, cpu_time};
use crate::topology::TwoHosts;
use crate::traffic::BulkTransfer;

/// Bytes the underlay carries beyond the tunnel MTU: fjord's switch-mode
/// budget (1,500 − its default switch MTU of 1,402: IPv6 and UDP headers,
/// WireGuard's header and tag, the frame header), the largest overhead of
/// the systems here; on the lab's IPv4 underlay every one needs less.
pub const UNDERLAY_HEADROOM_BYTES: u16 = 98;
/// The study's ping payloads, in bytes.
pub const PING_PAYLOADS: [usize; 3] = [50, 500, 1000];
const PING_INTERVAL_MS: f64 = 1.0;
/// Full-size pings sent before the transfers, one a second at most
/// (`-W 1`), until one comes back: boringtun reads its interface's MTU
/// once a second, so for up to a second after the lab set it, it still
/// reads packets from its TUN device into 1,500 bytes and drops the rest.
const PROBE_PINGS: usize = 5;
/// IPv4 and ICMP headers: a ping's payload is the MTU less these.
const PING_HEADER_BYTES: u16 = 28;
const FIRST_PORT: u16 = 5601;

/// What one run of the suite measures.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Tunnel MTUs, in bytes; the ping test runs at the first.
    pub mtus: Vec<u16>,
    /// Transfers per MTU, and bytes each.
    pub transfers: usize,
    pub transfer_bytes: u64,
    /// Pings per run, and runs per payload (the best run counts).
    pub ping_count: usize,
    pub ping_runs: usize,
}

impl Plan {
    /// The study's plan (10,000 pings, best of 5), or with `quick` a
    /// few-minute one (1,000 pings, best of 2; two MTUs).
    pub fn new(quick: bool) -> Self {
        if quick {
            Self {
                mtus: vec![1400, 16384],
                transfers: 2,
                transfer_bytes: 64 << 20,
                ping_count: 1000,
                ping_runs: 2,
            }
        } else {
            Self {
                mtus: vec![1400, 9000, 16384],
                transfers: 3,
                transfer_bytes: 256 << 20,
                ping_count: 10_000,
                ping_runs: 5,
            }
        }
    }

    /// Progress steps: one per MTU, one per ping payload.
    pub fn steps(&self) -> u64 {
        (self.mtus.len() + PING_PAYLOADS.len()) as u64
    }

    /// The time limit of one transfer: generous for the slowest tunnel
    /// on a busy machine.
    fn transfer_limit(&self) -> std::time::Duration {
        std::time::Duration::from_secs(30 + (self.transfer_bytes >> 20) / 2)
    }
}

pub fn steps(quick: bool) -> u64 {
    Plan::new(quick).steps()
}

/// Runs the suite for `system` on hosts it builds for each MTU.
pub fn run(setup: &Setup<'_>, quick: bool) -> Vec<Measurement> {
    run_plan(setup, &Plan::new(quick))
}

/// Runs `plan` for `system`.
pub fn run_plan(setup: &Setup<'_>, plan: &Plan) -> Vec<Measurement> {
    let mut rows = Vec::new();
    for (index, &mtu) in plan.mtus.iter().enumerate() {
        if setup.stopping() {
            break;
        }
        rows.extend(measure_at(setup, plan, mtu, index == 0));
    }
    rows
}

/// The underlay's MTU for a tunnel MTU of `mtu` (at most a veth's 65,535).
fn underlay_mtu(mtu: u16) -> u16 {
    mtu.saturating_add(UNDERLAY_HEADROOM_BYTES)
}

fn bulk_row(system: &str, mtu: u16) -> Row {
    Row::new("mtu", "tcp_bulk", system, "bit/s")
        .param("mtu", mtu)
        .param("underlay_mtu", underlay_mtu(mtu))
}

fn ping_row(system: &str, mtu: u16, payload: usize) -> Row {
    Row::new("mtu", "ping_average", system, "ms")
        .param("mtu", mtu)
        .param("payload", payload)
}

/// The rows of one MTU, every one failed with `why`, for a system that
/// did not come up or does not carry the MTU; the steps left are skipped.
fn failed_rows(system: &str, mtu: u16, ping: bool, why: &str) -> Vec<Measurement> {
    let mut rows = vec![bulk_row(system, mtu).failed(why)];
    if ping {
        rows.extend(
            PING_PAYLOADS
                .iter()
                .map(|&payload| ping_row(system, mtu, payload).failed(why)),
        );
    }
    rows
}

/// Starts `system` at `mtu` on fresh hosts and measures it; with `ping`
/// also the ping test.
fn measure_at(setup: &Setup<'_>, plan: &Plan, mtu: u16, ping: bool) -> Vec<Measurement> {
    let name = setup.name();
    let underlay_mtu = underlay_mtu(mtu);
    setup.step(&format!(
        "mtu {mtu} (underlay {underlay_mtu}): {} transfers of {} MiB",
        plan.transfers,
        plan.transfer_bytes >> 20
    ));
    let ping_steps = if ping { PING_PAYLOADS.len() as u64 } else { 0 };
    let give_up = |why: String| {
        setup.say(&format!("mtu {mtu}: {why}"));
        setup.done();
        setup.skip(ping_steps);
        failed_rows(name, mtu, ping, &why)
    };
    let hosts = match TwoHosts::direct().and_then(|hosts| {
        hosts.set_underlay_mtu(underlay_mtu)?;
        Ok(hosts)
    }) {
        Ok(hosts) => hosts,
        Err(error) => return give_up(format!("building the hosts: {error}")),
    };
    let running = match setup.start_with_mtu(&hosts, mtu) {
        Ok(running) => running,
        Err(SystemError::Unsupported(why)) if ping => {
            let why = format!("{UNSUPPORTED_PREFIX} {why}");
            setup.say(&format!("mtu {mtu}: {why}"));
            setup.done();
            let mut rows = vec![bulk_row(name, mtu).failed(why)];
            rows.extend(pings_at_own_mtu(setup, plan, mtu, &hosts));
            return rows;
        }
        Err(SystemError::Unsupported(why)) => {
            return give_up(format!("{UNSUPPORTED_PREFIX} {why}"));
        }
        Err(error) => return give_up(error.to_string()),
    };
    if let Err(why) = full_size_ping(&hosts, running.as_ref(), mtu) {
        return give_up(format!("{UNSUPPORTED_PREFIX} {why}"));
    }
    let context = Context {
        hosts: &hosts,
        system: running.as_ref(),
        system_name: name,
        // The plan, not the context, sets how long the trials are.
        quick: false,
        progress: setup.progress,
        emulator: None,
    };
    let row = bulk(&context, plan, mtu);
    setup.say(&format!("mtu {mtu}: {}", bulk_summary(&row)));
    setup.done();
    let mut rows = vec![row];
    if ping {
        rows.extend(ping_tests(&context, plan, mtu));
    }
    rows
}

/// The ping test of a system whose driver cannot choose the MTU: its
/// payloads fit any tunnel, so it runs at the MTU the system has, and
/// each row says which.
fn pings_at_own_mtu(
    setup: &Setup<'_>,
    plan: &Plan,
    mtu: u16,
    hosts: &TwoHosts,
) -> Vec<Measurement> {
    let name = setup.name();
    let running = match setup.start(hosts) {
        Ok(running) => running,
        Err(error) => {
            let why = error.to_string();
            setup.give_up(&format!("ping test: {why}"), PING_PAYLOADS.len() as u64);
            return PING_PAYLOADS
                .iter()
                .map(|&payload| ping_row(name, mtu, payload).failed(why.clone()))
                .collect();
        }
    };
    let own_mtu = running.mtu();
    let context = Context {
        hosts,
        system: running.as_ref(),
        system_name: name,
        quick: false,
        progress: setup.progress,
        emulator: None,
    };
    let mut rows = ping_tests(&context, plan, mtu);
    for row in &mut rows {
        if row.status == MeasurementStatus::Ok {
            row.note = Some(format!(
                "pinged at its own tunnel MTU of {own_mtu} bytes: its driver cannot choose one"
            ));
        }
    }
    rows
}

/// The study's ping test, one row per payload, filed under `mtu`.
fn ping_tests(context: &Context<'_>, plan: &Plan, mtu: u16) -> Vec<Measurement> {
    let name = context.system_name;
    let mut rows = Vec::new();
    for &payload in &PING_PAYLOADS {
        if context.progress.stopping() {
            break;
        }
        context.progress.step(&format!(
            "{name}: mtu {mtu}: {} pings of {payload} bytes every {PING_INTERVAL_MS} ms, best of {}",
            plan.ping_count, plan.ping_runs
        ));
        rows.push(ping_test(context, plan, mtu, payload));
        context.progress.done();
    }
    rows
}

/// Pings as large as the tunnel MTU allows, one at a time; an error
/// unless one came back within [`PROBE_PINGS`] tries.
fn full_size_ping(hosts: &TwoHosts, running: &dyn RunningSystem, mtu: u16) -> Result<(), String> {
    let payload = usize::from(mtu - PING_HEADER_BYTES);
    for _ in 0..PROBE_PINGS {
        let replies = latency::ping_times(&hosts.left, running.right_address(), payload, 1, 1.0)?;
        if !replies.is_empty() {
            return Ok(());
        }
        // A refused ping returns at once; give the tunnel its second.
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    Err(format!(
        "none of {PROBE_PINGS} full-size packets ({mtu} bytes) came back through the tunnel"
    ))
}

/// The transfers at one MTU, with CPU per side.
fn bulk(context: &Context<'_>, plan: &Plan, mtu: u16) -> Measurement {
    let limit = plan.transfer_limit();
    let transfer = BulkTransfer::new(plan.transfer_bytes)
        .timeout(limit)
        .stall_timeout(limit);
    let sides = context.system.pids_by_side();
    let side_cpu = |sides: &[Vec<u32>; 2]| sides.each_ref().map(|pids| cpu_time(pids));
    let before = sides.as_ref().map(side_cpu);
    let series = tcp::series_of(context, &transfer, plan.transfers, FIRST_PORT);
    let after = sides.as_ref().map(side_cpu);
    let mut extra = series.extra(context.has_processes());
    let elapsed: f64 = series
        .reports
        .iter()
        .map(|report| report.elapsed.as_secs_f64())
        .sum();
    if let (Some(before), Some(after), true) = (before, after, elapsed > 0.0) {
        let percent =
            |side: usize| after[side].saturating_sub(before[side]).as_secs_f64() / elapsed * 100.0;
        let cost = extra.cost.get_or_insert_default();
        cost.cpu_left_percent = Some(percent(0));
        cost.cpu_right_percent = Some(percent(1));
    }
    let rates = series
        .reports
        .iter()
        .map(|report| report.throughput_bits_per_sec)
        .collect();
    let mut measurement =
        bulk_row(context.system_name, mtu).measured(rates, series.status(), extra);
    measurement.note = series.failure;
    measurement
}

/// One line for the progress output.
fn bulk_summary(row: &Measurement) -> String {
    if row.status != MeasurementStatus::Ok {
        return format!(
            "{:?}: {}",
            row.status,
            row.note.as_deref().unwrap_or("no transfer completed")
        );
    }
    let mut text = format!("{:.0} Mbit/s", row.median / 1e6);
    let cost = row.extra.cost.as_ref();
    if let Some((left, right)) = cost.and_then(|c| c.cpu_left_percent.zip(c.cpu_right_percent)) {
        text.push_str(&format!(", CPU left {left:.0} %, right {right:.0} %"));
    }
    if row.extra.verified() != Some(true) {
        text.push_str(", NOT verified");
    }
    text
}

/// The study's ping test for one payload: the best of the runs' average
/// round trips.
fn ping_test(context: &Context<'_>, plan: &Plan, mtu: u16, payload: usize) -> Measurement {
    let row = ping_row(context.system_name, mtu, payload);
    let destination: IpAddr = context.system.right_address();
    let mut best: Option<(f64, Vec<f64>)> = None;
    for _ in 0..plan.ping_runs {
        let rtts = match latency::ping_times(
            &context.hosts.left,
            destination,
            payload,
            plan.ping_count,
            PING_INTERVAL_MS,
        ) {
            Ok(rtts) if !rtts.is_empty() => rtts,
            Ok(_) => return row.failed("no ping was answered"),
            Err(why) => return row.failed(why),
        };
        let average = rtts.iter().sum::<f64>() / rtts.len() as f64;
        if best.as_ref().is_none_or(|(lowest, _)| average < *lowest) {
            best = Some((average, rtts));
        }
    }
    let Some((average, rtts)) = best else {
        return row.failed("no ping run");
    };
    let extra = latency::rtt_statistics(&rtts, plan.ping_count);
    row.measured(vec![average], MeasurementStatus::Ok, extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quick_plan_keeps_the_studys_two_mtus() {
        let quick = Plan::new(true);
        assert_eq!(quick.mtus, [1400, 16384]);
        assert_eq!(quick.steps(), 5);
        let full = Plan::new(false);
        assert_eq!((full.ping_count, full.ping_runs), (10_000, 5));
        // The largest underlay a veth can take.
        let largest = full.mtus.iter().max().unwrap();
        assert!(u32::from(*largest) + u32::from(UNDERLAY_HEADROOM_BYTES) <= 65_535);
    }
}
