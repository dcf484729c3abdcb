//! A stalled peer is not silent: with packets waiting for a peer whose
//! endpoint nobody answers, fjord says so once in its log within a few
//! seconds (not only after the 90 s of unanswered handshakes), and not
//! again while the stall lasts.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::net::{IpAddr, SocketAddr};
use std::process::Stdio;
use std::time::{Duration, Instant};

use fjord_lab::netns;
use fjord_lab::systems::WorkDir;
use fjord_lab::systems::wireguard::{self, Initiator};
use fjord_lab::topology::{RIGHT_OVERLAY, TwoHosts};
use support::ByHand;

/// On the hosts' subnet, but nobody's address.
const NOBODY: &str = "198.18.0.9";
const STALL_LINE: &str = "nothing has left toward it";

#[test]
fn packets_waiting_for_an_unanswering_peer_are_told_once() {
    let test = "packets_waiting_for_an_unanswering_peer_are_told_once";
    if !support::ready(test) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    let workdir = WorkDir::create(test).expect("work directory");
    let (mut left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    let nobody: IpAddr = NOBODY.parse().expect("an address");
    left_side.peers[0].endpoint = Some(SocketAddr::new(nobody, right_side.listen_port));
    let left = ByHand::up(
        &hosts.left,
        workdir.path(),
        &left_side.ifname,
        &left_side.wg_quick_text(),
    );
    let log_tail = || left.log_tail();

    // Pings for 15 s: each waits for a session that never comes.
    let started = Instant::now();
    let ping = hosts
        .left
        .command("ping")
        .args(["-n", "-q", "-i", "0.5", "-c", "30", "-W", "1"])
        .arg(RIGHT_OVERLAY.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ping");
    let lines = || {
        std::fs::read_to_string(&left.log_path)
            .unwrap_or_default()
            .lines()
            .filter(|line| line.contains(STALL_LINE))
            .count()
    };
    netns::wait_until(Duration::from_secs(12), "the stall warning", || lines() > 0)
        .unwrap_or_else(|error| panic!("{error}\n{}", log_tail()));
    let told_after = started.elapsed();
    let output = ping.wait_with_output().expect("ping ends");
    assert!(!output.status.success(), "the peer answered after all");
    assert_eq!(lines(), 1, "told more than once:\n{}", log_tail());
    eprintln!("{test}: told after {told_after:?}\n{}", log_tail());
}
