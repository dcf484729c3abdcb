//! Groups reach every member: in a mesh of three, node1's certificate puts
//! it in `ops` and `db` and node2's in `web`; in a mesh from `Member`
//! lines, node2's line gives it `@web`. `fjord show` on node0 lists each
//! member's groups, in text and JSON, for members it met only through
//! gossip too. A network policy given to one member reaches the others
//! by gossip, at its highest version.
//!
//! Needs root; without it the test skips with one line (fails under CI).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use fjord_lab::netns;
use fjord_lab::systems::mesh::RunningFjordMesh;
use fjord_lab::systems::wireguard::Fjord;
use fjord_lab::systems::{self, FjordMesh, MemberPath, RunningMesh};
use fjord_lab::topology::Lan;

const NODES: usize = 3;
const CONVERGENCE_TIMEOUT: Duration = Duration::from_secs(30);
/// A policy given to one member is announced at once to every member in
/// session, which fetches it in a round trip or two.
const SPREAD_WITHIN: Duration = Duration::from_secs(5);

fn fjord() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fjord"))
}

/// `fjord show IFACE [ARGS]` for `node`'s interface (named as its
/// config file is).
fn show(mesh: &RunningFjordMesh, node: usize, args: &[&str]) -> String {
    let path = mesh.config_path(node);
    let ifname = path.file_stem().expect("a config file name");
    let output = Command::new(fjord())
        .arg("show")
        .arg(ifname)
        .args(args)
        .output()
        .expect("run fjord show");
    assert!(output.status.success(), "fjord show {ifname:?}: {output:?}");
    String::from_utf8(output.stdout).expect("UTF-8")
}

/// Starts every node and waits until node0 has a direct session with
/// the others.
fn start(mesh: &mut RunningFjordMesh) {
    for node in 0..NODES {
        mesh.start_node(node).expect("node started");
    }
    let mut last = Vec::new();
    let converged = netns::wait_until(CONVERGENCE_TIMEOUT, "node0 to meet everyone", || {
        last = mesh.members(0).unwrap_or_default();
        last.len() == NODES - 1 && last.iter().all(|m| m.path == MemberPath::Direct)
    });
    assert!(converged.is_ok(), "{converged:?}; node0 lists {last:#?}");
}

/// The groups `fjord show --json` on `node` lists for each member, by
/// name, sorted by name.
fn groups_shown(mesh: &RunningFjordMesh, node: usize) -> Vec<(String, Vec<String>)> {
    let shown = show(mesh, node, &["--json"]);
    let report: serde_json::Value = serde_json::from_str(&shown).expect("JSON");
    let mut groups: Vec<(String, Vec<String>)> = report[0]["members"]
        .as_array()
        .unwrap_or_else(|| panic!("no members: {shown}"))
        .iter()
        .map(|member| {
            let names = member["groups"].as_array().expect("a groups list");
            (
                member["name"].as_str().unwrap_or_default().to_string(),
                names
                    .iter()
                    .map(|group| group.as_str().unwrap_or_default().to_string())
                    .collect(),
            )
        })
        .collect();
    groups.sort();
    groups
}

fn pair(name: &str, groups: &[&str]) -> (String, Vec<String>) {
    (
        name.to_string(),
        groups.iter().map(ToString::to_string).collect(),
    )
}

/// A LAN of [`NODES`] hosts with `mesh` configured on it, not started;
/// `None` (the test skips) without root.
fn configured(test: &str, mesh: FjordMesh) -> Option<(Lan, systems::WorkDir, RunningFjordMesh)> {
    if !systems::running_as_root("needs root (network namespaces)") {
        return None;
    }
    let lan = Lan::new(NODES).expect("a LAN of three hosts");
    let workdir = systems::WorkDir::create(test).expect("work directory");
    let mesh = mesh
        .configure(&lan.mesh_hosts(), workdir.path())
        .expect("mesh configured");
    Some((lan, workdir, mesh))
}

#[test]
fn certificates_groups_show_on_every_member() {
    let Some((lan, _workdir, mut mesh)) =
        configured("mesh-groups", FjordMesh::new(Fjord::at(fjord())))
    else {
        return;
    };
    mesh.renew_certificate_in_groups(1, "1h", &["ops", "db"])
        .expect("node1 signed in groups");
    mesh.renew_certificate_in_groups(2, "1h", &["web"])
        .expect("node2 signed in groups");
    start(&mut mesh);
    assert_eq!(
        groups_shown(&mesh, 0),
        [pair("node1", &["ops", "db"]), pair("node2", &["web"])]
    );
    // node1 and node2 met through node0's gossip.
    assert_eq!(
        groups_shown(&mesh, 2),
        [pair("node0", &[]), pair("node1", &["ops", "db"])]
    );
    let text = show(&mesh, 0, &[]);
    assert!(text.contains(") @ops @db: "), "{text}");
    assert!(text.contains(") @web: "), "{text}");
    eprintln!("mesh_groups: node0 shows\n{text}");
    drop(mesh);
    drop(lan);
}

#[test]
fn member_lines_groups_show_on_every_member() {
    let listed = FjordMesh::new(Fjord::at(fjord())).with_member_list();
    let Some((lan, _workdir, mut mesh)) = configured("mesh-groups-listed", listed) else {
        return;
    };
    // Every member's list gives node2 the same group.
    let node2 = format!("Member = {} ", mesh.public_key(2));
    for node in 0..NODES {
        let path = mesh.config_path(node).to_path_buf();
        let config = std::fs::read_to_string(&path).expect("config");
        let grouped: String = config
            .lines()
            .map(|line| {
                if line.starts_with(&node2) {
                    format!("{line} @web\n")
                } else {
                    format!("{line}\n")
                }
            })
            .collect();
        assert_ne!(grouped, config, "no Member line for node2 in {config}");
        std::fs::write(&path, grouped).expect("config written");
    }
    start(&mut mesh);
    assert_eq!(
        groups_shown(&mesh, 0),
        [pair("node1", &[]), pair("node2", &["web"])]
    );
    assert_eq!(
        groups_shown(&mesh, 1),
        [pair("node0", &[]), pair("node2", &["web"])]
    );
    drop(mesh);
    drop(lan);
}

/// The network policy `text` at `version`: ops may reach db's Postgres,
/// and anyone may ping anyone.
fn policy(version: u64) -> String {
    format!(
        "# who may reach whom\nversion {version}\n\
         allow from group ops to group db port 5432/tcp\n\
         allow from any to any proto icmp\n"
    )
}

/// `fjord show`'s line for the policy at `version` (with this file's two
/// rules).
fn in_force(version: u64) -> String {
    format!("network policy: version {version}, 2 rules, enforced: ")
}

/// Waits until every node but `given` shows the policy at `version`;
/// how long that took.
fn spread_to_the_others(mesh: &RunningFjordMesh, given: usize, version: u64) -> Duration {
    let started = Instant::now();
    let line = in_force(version);
    let others: Vec<usize> = (0..NODES).filter(|&node| node != given).collect();
    let spread = netns::wait_until(SPREAD_WITHIN, "the policy to reach the others", || {
        others
            .iter()
            .all(|&node| show(mesh, node, &[]).contains(&line))
    });
    let shown: Vec<String> = others.iter().map(|&node| show(mesh, node, &[])).collect();
    assert!(spread.is_ok(), "{spread:?}; the others show {shown:#?}");
    started.elapsed()
}

/// A policy given to ONE member (its file, then a reload) reaches the
/// other two by gossip within seconds, and each member fetched it once;
/// the highest version stays in force everywhere: an older one given
/// later is kept out, a newer one given to another member replaces it
/// everywhere, and a file changed after signing is refused with its line
/// while the policy in force stays.
#[test]
fn a_policy_given_to_one_member_reaches_every_member_at_its_highest_version() {
    let Some((lan, _workdir, mut mesh)) =
        configured("mesh-policy", FjordMesh::new(Fjord::at(fjord())))
    else {
        return;
    };
    start(&mut mesh);
    for node in 0..NODES {
        let shown = show(&mesh, node, &[]);
        assert!(
            shown.contains("network policy: none (every member may reach every other)"),
            "{shown}"
        );
    }

    mesh.give_policy(1, &policy(3)).expect("policy signed");
    let applied = mesh.reload(1).expect("reload with a policy");
    assert!(
        applied.contains("network policy version 3 in force"),
        "{applied}"
    );
    let took = spread_to_the_others(&mesh, 1, 3);
    eprintln!("mesh_groups: version 3 reached the others {took:?} after the reload");
    for node in [0, 2] {
        assert_eq!(mesh.mesh_counter(node, "policies_learned"), Ok(1));
        assert_eq!(mesh.mesh_counter(node, "policies_refused"), Ok(0));
    }

    mesh.give_policy(0, &policy(2)).expect("policy signed");
    let kept = mesh.reload(0).expect("reload with an older policy");
    assert!(kept.contains("network policy version 3 kept"), "{kept}");

    let path = mesh.give_policy(2, &policy(4)).expect("policy signed");
    let applied = mesh.reload(2).expect("reload with a newer policy");
    assert!(
        applied.contains("network policy version 4 in force"),
        "{applied}"
    );
    spread_to_the_others(&mesh, 2, 4);

    let signed = std::fs::read_to_string(&path).expect("signed policy");
    std::fs::write(&path, signed.replace("5432/tcp", "1-65535/tcp")).expect("tampered");
    let refused = mesh.reload(2).expect_err("a tampered policy is refused");
    assert!(
        refused.contains("Policy: ") && refused.contains(".policy:5: the signature does not match"),
        "{refused}"
    );
    for node in 0..NODES {
        let shown = show(&mesh, node, &[]);
        assert!(shown.contains(&in_force(4)), "{shown}");
    }
    drop(mesh);
    drop(lan);
}
