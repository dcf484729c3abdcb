//! The lab's `mtu` suite, CI-sized: bare and fjord at the VpnCloud
//! study's two tunnel MTUs (1,400 and 16,384 bytes) on a jumbo underlay,
//! with shorter transfers and fewer pings than `--quick`. Every row is
//! measured, every transfer arrives intact, and fjord's rows carry the
//! CPU of each side.
//!
//! Needs root; without it the test skips with one line (fails under CI).
//! No figure here is a performance threshold: the suite reports those.

use std::path::PathBuf;

use fjord_lab::progress::Progress;
use fjord_lab::results::{Measurement, MeasurementStatus};
use fjord_lab::suites::Setup;
use fjord_lab::suites::mtu::{self, PING_PAYLOADS, Plan};
use fjord_lab::systems::{self, System, WorkDir};

/// Whether the suite can run (root); the lab then starts this build's fjord.
fn ready() -> bool {
    if !systems::running_as_root("the mtu suite needs root (network namespaces)") {
        return false;
    }
    systems::wireguard::use_fjord_binary(PathBuf::from(env!("CARGO_BIN_EXE_fjord")));
    true
}

/// The suite's rows for `system` under `plan`, its files in `workdir`.
fn run(system: &dyn System, plan: &Plan, workdir: &WorkDir) -> Vec<Measurement> {
    let progress = Progress::new(plan.steps());
    let setup = Setup {
        system,
        progress: &progress,
        workdir: workdir.path(),
    };
    mtu::run_plan(&setup, plan)
}

#[test]
fn bare_and_fjord_carry_verified_transfers_at_both_study_mtus() {
    if !ready() {
        return;
    }
    let plan = Plan {
        transfer_bytes: 16 << 20,
        ping_count: 200,
        ..Plan::new(true)
    };
    assert_eq!(plan.mtus, [1400, 16384]);
    let workdir = WorkDir::create("mtu").expect("work directory");
    for system in systems::select("bare,fjord").expect("lab systems") {
        let rows = run(system.as_ref(), &plan, &workdir);
        let name = system.name();
        for row in &rows {
            assert_eq!(row.status, MeasurementStatus::Ok, "{row:#?}");
            assert!(row.median > 0.0, "{row:#?}");
        }
        let transfers: Vec<_> = rows.iter().filter(|row| row.test == "tcp_bulk").collect();
        assert_eq!(transfers.len(), plan.mtus.len(), "{name}: {rows:#?}");
        for row in transfers {
            assert_eq!(row.extra.verified(), Some(true), "{row:#?}");
            if name == "fjord" {
                let cost = row.extra.cost.clone().unwrap_or_default();
                assert!(cost.cpu_left_percent.is_some(), "{row:#?}");
                assert!(cost.cpu_right_percent.is_some(), "{row:#?}");
            }
        }
        let pings = rows.iter().filter(|row| row.test == "ping_average").count();
        assert_eq!(pings, PING_PAYLOADS.len(), "{name}: {rows:#?}");
    }
}

/// A driver that cannot choose the tunnel MTU (fjord's TCP fallback
/// here): its transfers say `unsupported`, and the ping test, whose
/// payloads fit any tunnel, runs at the MTU the system has and says so.
#[test]
fn a_system_without_an_mtu_setting_is_pinged_at_its_own() {
    if !ready() {
        return;
    }
    let plan = Plan {
        ping_count: 200,
        ..Plan::new(true)
    };
    let workdir = WorkDir::create("mtu-own").expect("work directory");
    let system = systems::select("fjord-fallback")
        .expect("lab systems")
        .remove(0);
    let rows = run(system.as_ref(), &plan, &workdir);
    let (transfers, pings): (Vec<_>, Vec<_>) = rows.iter().partition(|row| row.test == "tcp_bulk");
    assert_eq!(transfers.len(), plan.mtus.len(), "{rows:#?}");
    for row in transfers {
        assert_eq!(row.status, MeasurementStatus::Failed, "{row:#?}");
        assert!(
            row.note
                .as_deref()
                .is_some_and(|note| note.starts_with("unsupported:")),
            "{row:#?}"
        );
    }
    assert_eq!(pings.len(), PING_PAYLOADS.len(), "{rows:#?}");
    for row in pings {
        assert_eq!(row.status, MeasurementStatus::Ok, "{row:#?}");
        assert!(row.median > 0.0, "{row:#?}");
        let note = row.note.as_deref().unwrap_or_default();
        assert!(
            note.contains("its own tunnel MTU of 1420 bytes"),
            "{row:#?}"
        );
    }
}
