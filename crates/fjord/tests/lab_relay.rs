//! The lab's `relay` reference system (`fjord lab relay` at each end)
//! carries pings both ways and a verified TCP transfer through real TUN
//! devices, charges its CPU to its own processes, and on drop leaves no
//! process or device behind.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fjord_lab::netns;
use fjord_lab::systems::{self, Relay, System};
use fjord_lab::topology::TwoHosts;
use fjord_lab::traffic::{self, BulkTransfer};

const TRANSFER_BYTES: u64 = 16 << 20;

#[test]
fn relay_carries_verified_traffic_and_cleans_up() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let relay = Relay::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")));
    relay.check().expect("the fjord binary is there");
    let hosts = TwoHosts::direct().expect("two hosts");
    let links_before = hosts.left.links().expect("links");
    let workdir = systems::WorkDir::create("lab-relay").expect("work directory");

    let running = relay.start(&hosts, workdir.path()).expect("relay up");
    assert_eq!(running.mtu(), 1420);
    assert!(
        hosts.left.links().expect("links").len() > links_before.len(),
        "no TUN device in {}",
        hosts.left.name()
    );
    traffic::ping(&hosts.left, running.right_address(), 3).expect("ping left to right");
    traffic::ping(&hosts.right, running.left_address(), 3).expect("ping right to left");

    let pids = running.pids();
    assert_eq!(pids.len(), 2, "one relay per host: {pids:?}");
    let report = BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(60))
        .run(
            &hosts.left,
            &hosts.right,
            SocketAddr::new(running.right_address(), 5201),
        )
        .expect("transfer through the relays");
    assert!(report.verified, "{report}");
    assert_eq!(report.bytes, TRANSFER_BYTES);
    assert!(
        systems::cpu_time(&pids) > Duration::ZERO,
        "the relays did the work, so they were charged CPU: {pids:?}"
    );
    eprintln!("relay: {:.3} Gbit/s", report.throughput_gbit_per_sec());

    drop(running);
    netns::wait_until(Duration::from_secs(5), "relays to exit", || {
        pids.iter()
            .all(|pid| !Path::new(&format!("/proc/{pid}")).exists())
    })
    .expect("relays stopped");
    assert_eq!(hosts.left.links().expect("links"), links_before);
}
