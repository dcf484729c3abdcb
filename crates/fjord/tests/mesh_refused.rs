//! A refused node is told (issue 44): a node whose certificate another
//! network signed handshakes with its bootstrap member, which refuses the
//! certificate and answers inside the session; within 10 s the outsider's
//! own log carries exactly one warning naming the member and the reason,
//! and none follows while the member answers at most once a minute. The
//! same for a node left out of a member list.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::path::{Path, PathBuf};
use std::time::Duration;

use fjord_lab::netns;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, RunningMesh};
use fjord_lab::topology::Lan;

/// Node 0 is the member everyone bootstraps from; node 1 the outsider.
const OUTSIDER: usize = 1;
const WARNING_TIMEOUT: Duration = Duration::from_secs(10);
/// How long to watch for a second line after the first: well past the
/// outsider's next handshakes, well under the member's minute.
const QUIET_WATCH: Duration = Duration::from_secs(15);

/// The outsider's warning lines about refusals, from its log in `dir`.
fn refusal_lines(dir: &Path) -> Vec<String> {
    let log = std::fs::read_to_string(dir.join(format!("node{OUTSIDER}.log"))).unwrap_or_default();
    log.lines()
        .filter(|line| line.contains("WARN") && line.contains("refused our certificate"))
        .map(String::from)
        .collect()
}

fn outsider_is_told(mesh: FjordMesh, workdir_name: &str, expected: &str) {
    let lan = Lan::new(2).expect("a LAN of two hosts");
    let workdir = systems::WorkDir::create(workdir_name).expect("work directory");
    let mut mesh = mesh
        .with_outsider(OUTSIDER)
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    mesh.start_node(0).expect("member started");
    mesh.start_node(OUTSIDER).expect("outsider started");
    let member = mesh.public_key(0).to_string();

    let started = std::time::Instant::now();
    let told = netns::wait_until(WARNING_TIMEOUT, "the outsider's refusal warning", || {
        !refusal_lines(mesh.dir()).is_empty()
    });
    assert!(told.is_ok(), "{told:?}; logs in {}", mesh.dir().display());
    eprintln!("{workdir_name}: told {:?} after start", started.elapsed());
    std::thread::sleep(QUIET_WATCH);
    let lines = refusal_lines(mesh.dir());
    assert_eq!(lines.len(), 1, "exactly one warning: {lines:#?}");
    let line = &lines[0];
    eprintln!("{workdir_name}: {line}");
    assert!(
        line.contains(&format!(
            "member {member} refused our certificate: {expected}"
        )),
        "names the member (by key: it never told its name) and the reason: {line}"
    );
    assert!(
        mesh.members(0)
            .expect("the member answers")
            .iter()
            .all(|listed| listed.public_key != mesh.public_key(OUTSIDER).to_string()),
        "the outsider stays out"
    );
}

#[test]
fn a_node_of_another_network_is_told_why_it_was_refused() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let fjord = Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")));
    outsider_is_told(
        FjordMesh::new(fjord),
        "mesh-refused",
        "signed by another network (the member trusts another network",
    );
}

#[test]
fn a_node_left_out_of_a_member_list_is_told_why_it_was_refused() {
    if !systems::running_as_root("needs root (network namespaces)") {
        return;
    }
    let fjord = Fjord::at(PathBuf::from(env!("CARGO_BIN_EXE_fjord")));
    outsider_is_told(
        FjordMesh::new(fjord).with_member_list(),
        "mesh-refused-list",
        "not in its member list",
    );
}
