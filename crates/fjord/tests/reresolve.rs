//! A peer configured by name is found again when the name moves: fjord on
//! the left host has `Endpoint = <name>:port` where the name first
//! resolves to an address nobody uses; the name is then pointed at the
//! right host, and without a restart the silent peer is looked up again,
//! the handshake completes and pings pass, with the new address as the
//! peer's endpoint.
//!
//! The name comes from a hosts file only the left host's processes see:
//! `ip netns exec` bind-mounts `/etc/netns/<namespace>/hosts` over
//! `/etc/hosts` for them, so the machine's own `/etc/hosts` is never
//! touched. The file is rewritten in place (a bind mount follows the
//! inode, not the name) and removed at the end.
//!
//! Needs root; without it the test skips with one line (fails under CI).

mod support;

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fjord_lab::netns::Namespace;
use fjord_lab::systems::WorkDir;
use fjord_lab::systems::wireguard::{self, Implementation, Initiator};
use fjord_lab::topology::{RIGHT_OVERLAY, RIGHT_UNDERLAY, TwoHosts};
use fjord_lab::traffic;
use support::ByHand;

const NAME: &str = "peer.reresolve.test";
/// Where the name points first: on the subnet, but nobody's address.
const NOBODY: &str = "198.18.0.9";

/// `/etc/netns/<namespace>/hosts`, removed (with its directory) on drop.
struct NamespaceHosts {
    dir: PathBuf,
}

impl NamespaceHosts {
    fn create(namespace: &Namespace, address: &str) -> Self {
        let dir = Path::new("/etc/netns").join(namespace.name());
        std::fs::create_dir_all(&dir).expect("create /etc/netns/<namespace>");
        let hosts = Self { dir };
        hosts.point_to(address);
        hosts
    }

    /// Rewrites the file in place, so the bind mount sees the new text.
    fn point_to(&self, address: &str) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .open(self.dir.join("hosts"))
            .expect("open the namespace's hosts file");
        writeln!(file, "127.0.0.1 localhost\n{address} {NAME}").expect("write hosts");
    }
}

impl Drop for NamespaceHosts {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn a_silent_peer_configured_by_name_is_looked_up_again() {
    let test = "a_silent_peer_configured_by_name_is_looked_up_again";
    if !support::ready(test) {
        return;
    }
    let hosts = TwoHosts::direct().expect("build two hosts");
    let names = NamespaceHosts::create(&hosts.left, NOBODY);
    let workdir = WorkDir::create(test).expect("work directory");
    let (mut left_side, right_side) = wireguard::point_to_point(Initiator::Left).expect("keys");
    left_side.peers[0].endpoint = None;
    let _right = support::fjord()
        .start(&hosts.right, &right_side, workdir.path())
        .unwrap_or_else(|error| panic!("start the right side: {error}"));

    // The peer section is the file's last, so the endpoint line joins it.
    let mut config = left_side.wg_quick_text().to_string();
    config.push_str(&format!("Endpoint = {NAME}:{}\n", right_side.listen_port));
    // Up means the config (and the name in it) was read.
    let left = ByHand::up(&hosts.left, workdir.path(), &left_side.ifname, &config);
    let log_tail = || left.log_tail();

    assert!(
        traffic::ping(&hosts.left, IpAddr::V4(RIGHT_OVERLAY), 2).is_err(),
        "reached the peer while its name pointed nowhere\n{}",
        log_tail()
    );
    names.point_to(&RIGHT_UNDERLAY.to_string());
    let moved = Instant::now();
    traffic::wait_for_ping(
        &hosts.left,
        IpAddr::V4(RIGHT_OVERLAY),
        Duration::from_secs(40),
    )
    .unwrap_or_else(|error| panic!("after the name moved: {error}\n{}", log_tail()));
    eprintln!(
        "{test}: tunnel up {:?} after the name moved\n{}",
        moved.elapsed(),
        log_tail()
    );

    let endpoints = hosts
        .left
        .exec("wg", &["show", &left_side.ifname, "endpoints"])
        .expect("wg show endpoints");
    let expected = SocketAddr::new(IpAddr::V4(RIGHT_UNDERLAY), right_side.listen_port);
    assert!(
        endpoints.contains(&expected.to_string()),
        "endpoint is not {expected}: {endpoints}"
    );
}
