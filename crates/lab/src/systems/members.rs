//! fjord between two members of one network (a `[Mesh]` with
//! certificates, the right host bootstrapped from the left) instead of
//! two configured `[Peer]`s: `fjord-mesh` without a network policy,
//! `fjord-policy` with a signed one of [`POLICY_RULES`] rules that lets
//! the two members reach each other on every port, so every packet the
//! suites send goes through the firewall and its connection tracking.
//! Beside each other in one run they price the policy (issue 47's goal:
//! ≥ 0.95× of `fjord-mesh`).

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use super::mesh::RunningFjordMesh;
use super::support::start_failed;
use super::wireguard::{Fjord, Implementation};
use super::{FjordMesh, MemberPath, RunningMesh, RunningSystem, StartResult, System};
use crate::topology::TwoHosts;

const MESH_NAME: &str = "fjord-mesh";
const POLICY_NAME: &str = "fjord-policy";
/// Rules of the lab's policy: what a team's policy might hold.
pub const POLICY_RULES: usize = 100;
/// How long the two members may take to meet directly.
const MEET_TIMEOUT: Duration = Duration::from_secs(15);

/// The lab's policy: rules for teams and services no lab member is in,
/// then the two that let node0 and node1 (the certificates' names)
/// reach each other with any protocol. Rules only allow, so each new
/// flow is weighed against all of them.
pub fn lab_policy() -> String {
    let mut text = String::from("# the lab's policy: teams to their services\nversion 1\n");
    for rule in 0..POLICY_RULES - 2 {
        // Writing to a String cannot fail.
        let _ = writeln!(
            text,
            "allow from group team-{rule} to group service-{rule} port {}/tcp",
            8000 + rule
        );
    }
    text.push_str("allow from member node0 to member node1 proto any\n");
    text.push_str("allow from member node1 to member node0 proto any\n");
    text
}

/// fjord as two members of a network, with or without [`lab_policy`].
pub struct FjordMembers {
    fjord: Fjord,
    policy: bool,
}

impl FjordMembers {
    /// `fjord-mesh`: two members, no policy.
    pub fn locate() -> Self {
        Self {
            fjord: Fjord::locate(),
            policy: false,
        }
    }

    /// `fjord-policy`: two members holding [`lab_policy`].
    pub fn with_policy(mut self) -> Self {
        self.policy = true;
        self
    }
}

impl System for FjordMembers {
    fn name(&self) -> &str {
        if self.policy { POLICY_NAME } else { MESH_NAME }
    }

    fn description(&self) -> &str {
        if self.policy {
            "fjord between two members of one network holding a signed 100-rule network policy (every flow tracked by the firewall)"
        } else {
            "fjord between two members of one network (certificates, bootstrap), no network policy: fjord-policy's reference"
        }
    }

    fn check(&self) -> Result<String, String> {
        let path = self.fjord.installed()?;
        Ok(format!("{}, {}", path.display(), self.fjord.settings()))
    }

    fn start(&self, hosts: &TwoHosts, workdir: &Path) -> StartResult {
        let failed = |detail: String| start_failed(self.name(), detail);
        let mut mesh =
            FjordMesh::new(self.fjord.clone()).configure(&hosts.mesh_hosts(), workdir)?;
        if self.policy {
            let text = lab_policy();
            for node in 0..2 {
                mesh.give_policy(node, &text).map_err(failed)?;
            }
        }
        for node in 0..2 {
            mesh.start_node(node).map_err(failed)?;
        }
        meet_directly(&mut mesh).map_err(failed)?;
        if self.policy {
            for node in 0..2 {
                if mesh.policy_version(node).map_err(failed)?.is_none() {
                    return Err(failed(format!("node{node} holds no policy")));
                }
            }
        }
        let mtu = super::support::link_mtu(&hosts.left, mesh.ifname(0)).unwrap_or(1420);
        Ok(Box::new(RunningMembers { mesh, mtu }))
    }
}

/// Waits until each member lists the other on a direct path.
fn meet_directly(mesh: &mut RunningFjordMesh) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let direct = |mesh: &mut RunningFjordMesh, node, other| {
            mesh.member(node, other)
                .is_some_and(|member| member.path == MemberPath::Direct)
        };
        if direct(mesh, 0, 1) && direct(mesh, 1, 0) {
            return Ok(());
        }
        if started.elapsed() > MEET_TIMEOUT {
            // The members' own view says why (and whether one exited).
            let view = mesh.members(1).map(|members| format!("{members:?}"));
            return Err(format!(
                "the two members did not meet directly within {MEET_TIMEOUT:?}: node1 lists {view:?}"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct RunningMembers {
    mesh: RunningFjordMesh,
    mtu: u16,
}

impl RunningSystem for RunningMembers {
    fn left_address(&self) -> IpAddr {
        self.mesh.overlay_address(0)
    }

    fn right_address(&self) -> IpAddr {
        self.mesh.overlay_address(1)
    }

    fn pids(&self) -> Vec<u32> {
        (0..2).filter_map(|node| self.mesh.pid(node)).collect()
    }

    fn pids_by_side(&self) -> Option<[Vec<u32>; 2]> {
        Some([0, 1].map(|node| self.mesh.pid(node).into_iter().collect()))
    }

    fn mtu(&self) -> u16 {
        self.mtu
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lab_policy_has_its_rules_and_allows_the_two_members() {
        let policy = fjord_mesh::policy::Policy::parse(lab_policy().as_bytes()).expect("parses");
        assert_eq!(policy.rules().len(), POLICY_RULES);
    }
}
