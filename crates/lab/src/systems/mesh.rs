//! Meshes: one node per host of a [`Lan`], every node bootstrapped from
//! node 0 only, as a system's [`RunningMesh`]. fjord's is [`FjordMesh`].
//!
//! Starting a fjord mesh, step by step (each file in a private work
//! directory, secrets mode 0600):
//!
//! ```text
//! network.key      a fresh network key (what `fjord network new` prints)
//! node<i>.key      node i's WireGuard private key
//! node<i>.cert     its certificate: name node<i>, address 198.19.x.y/32
//! <ifname>.conf    [Interface] PrivateKey, ListenPort, Address (a prefix
//!                  covering every node); [Mesh] Network, Certificate and,
//!                  on every node but node 0, Bootstrap = <node 0's
//!                  key>@<node 0's underlay address>:51820
//! node<i>.log      `fjord up <ifname>.conf`'s output, run in host i
//! ```
//!
//! Nodes start with [`RunningMesh::start_node`], so a caller can measure
//! node 0 alone before the others join. Members are read from the node's
//! control socket (`get=fjord`, what `fjord show` prints), in-process: a
//! hundred nodes polled four times a second would otherwise cost four
//! hundred process starts a second on the machine that runs them. Interface
//! names come from [`unique_ifname`]: control sockets live in the shared
//! `/var/run/wireguard`, so names must differ across hosts and tests.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::{SystemTime, UNIX_EPOCH};

use fjord_mesh::report::MemberLine;
use fjord_mesh::{Cidr, NetworkSecret};
use fjord_proto::{PrivateKey, PublicKey};
use zeroize::Zeroizing;

use super::SystemError;
use super::support::{LoggedProcess, WorkDir, start_failed, write_secret_file};
use super::wireguard::{
    Fjord, Implementation, LISTEN_PORT, fjord, generate_private_key, unique_ifname,
};
use crate::topology::{MeshHost, lan_overlay, lan_overlay_prefix_len};

const NAME: &str = "fjord";
/// Certificates are valid for a day: far longer than any run.
const CERTIFICATE_VALIDITY_SECS: u64 = 86_400;

/// A mesh whose nodes are configured, one per host of a [`Lan`]. Dropping
/// it stops every node that still runs.
pub trait RunningMesh: Send {
    /// How many nodes (hosts) the mesh has.
    fn nodes(&self) -> usize;
    /// Starts `node` (returns once its process is spawned, not when it is up).
    fn start_node(&mut self, node: usize) -> Result<(), String>;
    /// The members `node` lists now; an error if it does not answer (not
    /// up yet, or exited: then the error quotes its log).
    fn members(&mut self, node: usize) -> Result<Vec<Member>, String>;
    /// [`RunningMesh::members`] of each of `nodes`, in order; a system may
    /// ask them all at once, so one slow node does not hold up the rest.
    fn members_of(&mut self, nodes: &[usize]) -> Vec<Result<Vec<Member>, String>> {
        nodes.iter().map(|&node| self.members(node)).collect()
    }
    /// How `node` lists node `other` (named `node<other>`), if it does and
    /// answers.
    fn member(&mut self, node: usize, other: usize) -> Option<Member> {
        let name = format!("node{other}");
        self.members(node)
            .ok()?
            .into_iter()
            .find(|member| member.name == name)
    }
    /// `node`'s WireGuard public key.
    fn public_key(&self, node: usize) -> PublicKey;
    /// `node`'s overlay address.
    fn overlay_address(&self, node: usize) -> IpAddr;
    /// The PID of `node`'s process while it runs.
    fn pid(&self, node: usize) -> Option<u32>;
    /// Stops `node` as an operator would (SIGTERM, then SIGKILL after a
    /// grace period); its exit status, `None` if it was not running.
    fn stop_node(&mut self, node: usize) -> Option<ExitStatus>;
    /// Gives the running `node` the network policy `text`, as an operator
    /// does: signed with the network key, then a reload.
    fn give_policy_and_reload(&mut self, node: usize, text: &str) -> Result<(), String>;
    /// The version of the network policy `node` holds now (`None`: none);
    /// an error if it does not answer.
    fn policy_version(&mut self, node: usize) -> Result<Option<u64>, String>;
    /// The flows `node`'s firewall tracks now and has evicted so far;
    /// an error without a policy in force, or if it does not answer.
    fn policy_flows(&mut self, node: usize) -> Result<PolicyFlows, String>;
}

/// A node's connection tracking, by its own count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PolicyFlows {
    pub tracked: u64,
    pub evicted: u64,
}

/// One member as a node lists it (`get=fjord`'s `member=` lines, as in
/// `fjord show`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Base64 WireGuard public key.
    pub public_key: String,
    pub name: String,
    pub addresses: Vec<String>,
    pub endpoint: Option<String>,
    pub path: MemberPath,
    pub rtt_micros: Option<u64>,
    /// The probed path MTU (IP datagram bytes), once found.
    pub path_mtu: Option<u64>,
    /// When its certificate expires (Unix seconds), if it has one.
    pub expires_at: Option<u64>,
}

/// How a node reaches a member (`fjord show`'s `path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberPath {
    /// A session is up, straight to the member's endpoint.
    Direct,
    /// A session is up through the member named `via` (`relay <name>`).
    Relayed { via: String },
    /// Known, but no session yet.
    Connecting,
    /// Known, no session kept: sessions are on demand (a large mesh) and
    /// the first packet for the member opens one.
    OnDemand,
    /// A path this lab does not know.
    Other,
}

impl From<String> for MemberPath {
    fn from(path: String) -> Self {
        match path.as_str() {
            "direct" => Self::Direct,
            "connecting" => Self::Connecting,
            "on-demand" => Self::OnDemand,
            relayed if relayed.starts_with("relay ") => Self::Relayed {
                via: relayed["relay ".len()..].to_string(),
            },
            _ => Self::Other,
        }
    }
}

impl From<MemberLine> for Member {
    fn from(line: MemberLine) -> Self {
        Self {
            public_key: line.public_key,
            name: line.name,
            addresses: line.addresses,
            endpoint: line.endpoint,
            path: MemberPath::from(line.path),
            rtt_micros: line.rtt_micros,
            path_mtu: line.path_mtu,
            expires_at: line.expires_at,
        }
    }
}

/// The members `ifname`'s node lists, asked on its control socket.
fn query_members(ifname: &str) -> Result<Vec<Member>, String> {
    parse_members(&fjord::get_fjord(ifname)?)
}

/// The `member=` lines of a `get=fjord` reply that ended with `errno=0`.
fn parse_members(reply: &str) -> Result<Vec<Member>, String> {
    fjord::check_reply(reply)?;
    reply
        .lines()
        .filter_map(|line| line.strip_prefix("member="))
        .map(|value| {
            MemberLine::parse(value)
                .map(Member::from)
                .ok_or_else(|| format!("get=fjord: malformed member line {value:?}"))
        })
        .collect()
}

/// fjord in mesh mode on every host of a [`Lan`].
#[derive(Debug, Clone)]
pub struct FjordMesh {
    fjord: Fjord,
    /// Nodes whose certificate another network signed (with a member
    /// list: nodes left out of it, which list only themselves).
    outsiders: Vec<usize>,
    /// Members named by `Member` lines instead of certificates.
    member_list: bool,
}

impl FjordMesh {
    pub fn new(fjord: Fjord) -> Self {
        Self {
            fjord,
            outsiders: Vec::new(),
            member_list: false,
        }
    }

    /// Defines the mesh by an explicit member list (`Member` lines, every
    /// member's key and overlay address) instead of a network key.
    pub fn with_member_list(mut self) -> Self {
        self.member_list = true;
        self
    }

    /// Makes `node` an outsider: its certificate (and the `Network` of its
    /// own config, so that it starts) come from a second network key, and
    /// it bootstraps from node 0 like every other node. No member may ever
    /// list it.
    pub fn with_outsider(mut self, node: usize) -> Self {
        self.outsiders.push(node);
        self
    }

    /// Writes the network key and every node's key, certificate and config
    /// into a new directory under `workdir`; starts no node.
    pub fn configure(
        &self,
        hosts: &[MeshHost<'_>],
        workdir: &Path,
    ) -> Result<RunningFjordMesh, SystemError> {
        let binary = self.fjord.installed().map_err(SystemError::NotInstalled)?;
        let failed = |detail: String| start_failed(NAME, detail);
        let dir = WorkDir::create_in(workdir, "mesh").map_err(|e| failed(e.to_string()))?;
        let network = new_network_secret()?;
        write_secret_file(&dir.file("network.key"), &network.to_base64())?;
        let outsiders = new_network_secret()?;
        let count = hosts.len();
        let prefix_len = lan_overlay_prefix_len(count);
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.as_secs());

        let mut keys = Vec::with_capacity(count);
        for _ in 0..count {
            keys.push(generate_private_key()?);
        }
        let bootstrap = keys
            .first()
            .zip(hosts.first())
            .map(|(key, host)| format!("{}@{}:{LISTEN_PORT}", key.public_key(), host.underlay));
        let member_line = |index: usize, key: &PrivateKey| {
            format!(
                "Member = {} node{index} {}/32",
                key.public_key(),
                lan_overlay(index)
            )
        };
        let member_list: Vec<String> = keys
            .iter()
            .enumerate()
            .filter(|(index, _)| !self.outsiders.contains(index))
            .map(|(index, key)| member_line(index, key))
            .collect();
        let mut nodes = Vec::with_capacity(count);
        for (index, (private_key, host)) in keys.into_iter().zip(hosts).enumerate() {
            let name = format!("node{index}");
            let ifname = unique_ifname();
            let signer = if self.outsiders.contains(&index) {
                &outsiders
            } else {
                &network
            };
            let overlay = lan_overlay(index);
            let certificate = signer
                .sign(
                    private_key.public_key(),
                    &name,
                    &[Cidr::host(IpAddr::V4(overlay))],
                    now,
                    now + CERTIFICATE_VALIDITY_SECS,
                )
                .map_err(|e| failed(format!("sign {name}'s certificate: {e}")))?;
            write_secret_file(&dir.file(&format!("{name}.key")), &private_key.to_base64())?;
            let certificate_path = dir.file(&format!("{name}.cert"));
            write_secret_file(&certificate_path, &format!("{}\n", certificate.to_base64()))?;

            let mut config = Zeroizing::new(String::new());
            // Writing to a String cannot fail.
            let _ = writeln!(config, "[Interface]");
            let _ = writeln!(config, "PrivateKey = {}", private_key.to_base64().as_str());
            let _ = writeln!(config, "ListenPort = {LISTEN_PORT}");
            let _ = writeln!(config, "Address = {overlay}/{prefix_len}");
            let _ = writeln!(config, "\n[Mesh]");
            if !self.member_list {
                let _ = writeln!(config, "Network = {}", signer.public_key());
                let _ = writeln!(config, "Certificate = {}", certificate_path.display());
            } else if self.outsiders.contains(&index) {
                let _ = writeln!(config, "{}", member_line(index, &private_key));
            } else {
                for line in &member_list {
                    let _ = writeln!(config, "{line}");
                }
            }
            if index != 0
                && let Some(bootstrap) = &bootstrap
            {
                let _ = writeln!(config, "Bootstrap = {bootstrap}");
            }
            let config_path = dir.file(&format!("{ifname}.conf"));
            write_secret_file(&config_path, &config)?;
            nodes.push(MeshNode {
                name,
                ifname,
                namespace: host.namespace.name().to_string(),
                config_path,
                public_key: private_key.public_key(),
                overlay,
                process: None,
            });
        }
        Ok(RunningFjordMesh {
            binary,
            threads: self.fjord.threads(),
            nodes,
            dir,
        })
    }
}

fn new_network_secret() -> Result<NetworkSecret, SystemError> {
    let mut seed = Zeroizing::new([0u8; 32]);
    getrandom::fill(seed.as_mut()).map_err(|error| SystemError::Io {
        operation: "generate a network key".into(),
        source: std::io::Error::other(error.to_string()),
    })?;
    Ok(NetworkSecret::from_seed(*seed))
}

/// One node of a [`RunningFjordMesh`].
struct MeshNode {
    /// `node<index>`: its certificate's name and its log's.
    name: String,
    ifname: String,
    /// The host's namespace, for commands inside it.
    namespace: String,
    config_path: PathBuf,
    public_key: PublicKey,
    overlay: Ipv4Addr,
    /// `fjord up`, once started.
    process: Option<LoggedProcess>,
}

/// The fjord mesh of [`FjordMesh::configure`].
pub struct RunningFjordMesh {
    binary: PathBuf,
    threads: Option<u16>,
    nodes: Vec<MeshNode>,
    /// Holds keys, configs and logs until the nodes have stopped.
    dir: WorkDir,
}

impl RunningFjordMesh {
    /// The directory with the mesh's keys, configs and logs.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `node`'s interface name.
    pub fn ifname(&self, node: usize) -> &str {
        &self.node(node).ifname
    }

    /// `node`'s `fjord up` file, for tests that edit it and reload.
    pub fn config_path(&self, node: usize) -> &Path {
        &self.node(node).config_path
    }

    fn node(&self, node: usize) -> &MeshNode {
        &self.nodes[node]
    }

    /// Revokes node `revoked` in `node`'s `Revocations` file as an
    /// operator does: `fjord network revoke` appended to the file, which
    /// `node`'s config names. fjord reads the file when it comes up, and
    /// a running `node` on a [`reload`](Self::reload).
    pub fn revoke_in_file(&self, node: usize, revoked: usize) -> Result<(), String> {
        let mut command = Command::new(&self.binary);
        command
            .args(["network", "revoke", "--network-key"])
            .arg(self.dir.file("network.key"))
            .arg("--public-key")
            .arg(self.node(revoked).public_key.to_string());
        let revocation = fjord_output(&mut command, "fjord network revoke", None)?;
        let path = self
            .dir
            .file(&format!("{}.revocations", self.node(node).name));
        self.name_in_config(node, "Revocations", &path)?;
        append(&path, &revocation)
    }

    /// Gives `node` the network policy `text`, signed with the network
    /// key (`fjord network policy`), in the file its config's `Policy`
    /// names (the line is added if missing). fjord reads it when it comes
    /// up, and a running `node` on a [`reload`](Self::reload). Returns the
    /// path of the signed file.
    pub fn give_policy(&self, node: usize, text: &str) -> Result<PathBuf, String> {
        let mut command = Command::new(&self.binary);
        command
            .args(["network", "policy", "--network-key"])
            .arg(self.dir.file("network.key"));
        let signed = fjord_output(&mut command, "fjord network policy", Some(text.as_bytes()))?;
        let path = self.dir.file(&format!("{}.policy", self.node(node).name));
        std::fs::write(&path, signed).map_err(|e| format!("write {}: {e}", path.display()))?;
        self.name_in_config(node, "Policy", &path)?;
        Ok(path)
    }

    /// Adds `KEY = path` to `node`'s config unless it has a `KEY` line.
    fn name_in_config(&self, node: usize, key: &str, path: &Path) -> Result<(), String> {
        let config_path = &self.node(node).config_path;
        let config = std::fs::read_to_string(config_path)
            .map_err(|e| format!("read {}: {e}", config_path.display()))?;
        if config.contains(&format!("\n{key} = ")) {
            return Ok(());
        }
        // [Mesh] is the config's last section.
        append(
            config_path,
            format!("{key} = {}\n", path.display()).as_bytes(),
        )
    }

    /// Signs `node` a new certificate valid for `valid` (`12h`, `90m`)
    /// with `fjord network sign`, as an operator renewing a short-lived
    /// one does, and puts it in place of the file its config names.
    pub fn renew_certificate(&self, node: usize, valid: &str) -> Result<(), String> {
        self.renew_certificate_in_groups(node, valid, &[])
    }

    /// [`Self::renew_certificate`], putting the node in `groups`
    /// (`fjord network sign --group`).
    pub fn renew_certificate_in_groups(
        &self,
        node: usize,
        valid: &str,
        groups: &[&str],
    ) -> Result<(), String> {
        self.sign_again(node, valid, "--group", groups)
    }

    /// [`Self::renew_certificate`], routing `routes` (networks behind the
    /// node, `0.0.0.0/0` for an exit node) to it (`fjord network sign
    /// --route`).
    pub fn renew_certificate_routing(
        &self,
        node: usize,
        valid: &str,
        routes: &[&str],
    ) -> Result<(), String> {
        self.sign_again(node, valid, "--route", routes)
    }

    /// Signs `node` a new certificate with `option` given once for each of
    /// `values`, in place of the file its config names.
    fn sign_again(
        &self,
        node: usize,
        valid: &str,
        option: &str,
        values: &[&str],
    ) -> Result<(), String> {
        let entry = self.node(node);
        let mut command = Command::new(&self.binary);
        command
            .args(["network", "sign", "--network-key"])
            .arg(self.dir.file("network.key"))
            .arg("--public-key")
            .arg(entry.public_key.to_string())
            .args(["--name", &entry.name, "--valid", valid, "--address"])
            .arg(format!("{}/32", entry.overlay))
            .args(values.iter().flat_map(|value| [option, value]));
        let certificate = fjord_output(&mut command, "fjord network sign", None)?;
        let path = self.dir.file(&format!("{}.cert", entry.name));
        write_secret_file(&path, &String::from_utf8_lossy(&certificate))
            .map_err(|e| format!("write {}: {e}", path.display()))
    }

    /// `fjord reload` of `node`'s interface: what it printed, or why it
    /// refused.
    pub fn reload(&self, node: usize) -> Result<String, String> {
        let entry = self.node(node);
        let output = Command::new("ip")
            .args(["netns", "exec", &entry.namespace])
            .arg(&self.binary)
            .args(["reload", &entry.ifname])
            .output()
            .map_err(|e| format!("run fjord reload: {e}"))?;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            Ok(text)
        } else {
            Err(format!(
                "{}: fjord reload: {}{text}",
                entry.name,
                String::from_utf8_lossy(&output.stderr)
            ))
        }
    }

    /// `node`'s mesh counter `name` (`port_predictions`, ...) as `fjord
    /// show` reads it from the control socket.
    pub fn mesh_counter(&self, node: usize, name: &str) -> Result<u64, String> {
        let key = format!("mesh_{name}=");
        self.status_number(node, &key)?
            .ok_or_else(|| format!("{}: get=fjord has no {key}", self.node(node).name))
    }

    /// The number on `node`'s `get=fjord` line that starts with `key`
    /// (`None`: no such line).
    fn status_number(&self, node: usize, key: &str) -> Result<Option<u64>, String> {
        let entry = self.node(node);
        let reply = fjord::get_fjord(&entry.ifname).map_err(|e| format!("{}: {e}", entry.name))?;
        fjord::check_reply(&reply)?;
        Ok(reply
            .lines()
            .find_map(|line| line.strip_prefix(key)?.parse().ok()))
    }
}

impl RunningMesh for RunningFjordMesh {
    fn nodes(&self) -> usize {
        self.nodes.len()
    }

    fn start_node(&mut self, node: usize) -> Result<(), String> {
        let log_path = self.dir.file(&format!("{}.log", self.nodes[node].name));
        let entry = &mut self.nodes[node];
        if entry.process.is_some() {
            return Err(format!("{} is already running", entry.name));
        }
        let mut command = Command::new("ip");
        command
            .args(["netns", "exec", &entry.namespace])
            .arg(&self.binary)
            .arg("up")
            .arg(&entry.config_path);
        if let Some(threads) = self.threads {
            command.arg("--threads").arg(threads.to_string());
        }
        let label = format!("fjord ({}, {})", entry.name, entry.ifname);
        entry.process = Some(LoggedProcess::spawn(label, &mut command, log_path)?);
        Ok(())
    }

    fn members(&mut self, node: usize) -> Result<Vec<Member>, String> {
        self.check_running(node)?;
        let entry = &self.nodes[node];
        query_members(&entry.ifname).map_err(|e| format!("{}: {e}", entry.name))
    }

    fn members_of(&mut self, nodes: &[usize]) -> Vec<Result<Vec<Member>, String>> {
        let running: Vec<Result<(), String>> =
            nodes.iter().map(|&node| self.check_running(node)).collect();
        let entries = &self.nodes;
        std::thread::scope(|scope| {
            let queries: Vec<_> = nodes
                .iter()
                .zip(running)
                .map(|(&node, running)| {
                    let entry = &entries[node];
                    running.map(|()| {
                        scope.spawn(move || {
                            query_members(&entry.ifname).map_err(|e| format!("{}: {e}", entry.name))
                        })
                    })
                })
                .collect();
            queries
                .into_iter()
                .map(|query| {
                    query?
                        .join()
                        .unwrap_or_else(|_| Err("the query thread panicked".to_string()))
                })
                .collect()
        })
    }

    fn public_key(&self, node: usize) -> PublicKey {
        self.node(node).public_key
    }

    fn overlay_address(&self, node: usize) -> IpAddr {
        IpAddr::V4(self.node(node).overlay)
    }

    fn pid(&self, node: usize) -> Option<u32> {
        self.node(node).process.as_ref()?.pid()
    }

    fn stop_node(&mut self, node: usize) -> Option<ExitStatus> {
        let status = self.nodes[node].process.as_mut()?.stop();
        self.nodes[node].process = None;
        status
    }

    fn give_policy_and_reload(&mut self, node: usize, text: &str) -> Result<(), String> {
        self.give_policy(node, text)?;
        self.reload(node).map(drop)
    }

    fn policy_flows(&mut self, node: usize) -> Result<PolicyFlows, String> {
        self.check_running(node)?;
        let number = |mesh: &Self, key: &str| {
            mesh.status_number(node, key)?
                .ok_or_else(|| format!("node{node}: no policy in force (no {key})"))
        };
        Ok(PolicyFlows {
            tracked: number(self, "policy_tracked_flows=")?,
            evicted: number(self, "policy_evicted_flows=")?,
        })
    }

    fn policy_version(&mut self, node: usize) -> Result<Option<u64>, String> {
        self.check_running(node)?;
        // fjord's `get=fjord` line for the policy in force, absent without one.
        self.status_number(node, "policy_version=")
    }
}

impl RunningFjordMesh {
    /// An error if `node` is not running, quoting its log if it exited.
    fn check_running(&mut self, node: usize) -> Result<(), String> {
        let entry = &mut self.nodes[node];
        let Some(process) = entry.process.as_mut() else {
            return Err(format!("{} is not running", entry.name));
        };
        match process.try_wait() {
            Some(status) => Err(format!(
                "{} exited ({status}); {}",
                entry.name,
                process.tail()
            )),
            None => Ok(()),
        }
    }
}

impl Drop for RunningFjordMesh {
    fn drop(&mut self) {
        // Signal every node first so they shut down together, then reap
        // each (SIGKILL after the grace period if one hangs).
        for process in self.nodes.iter().filter_map(|node| node.process.as_ref()) {
            process.terminate();
        }
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                process.stop();
            }
        }
    }
}

/// Appends `bytes` to the file at `path`, creating it if need be.
fn append(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(bytes))
        .map_err(|e| format!("append to {}: {e}", path.display()))
}

/// What a `fjord` command printed, given `input` on its standard input;
/// its standard error as the error when it fails.
fn fjord_output(
    command: &mut Command,
    what: &str,
    input: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("run {what}: {e}"))?;
    if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
        stdin
            .write_all(input)
            .map_err(|e| format!("write to {what}: {e}"))?;
    }
    let output = child
        .wait_with_output()
        .map_err(|e| format!("{what}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "{what}: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_member_lines_of_a_get_fjord_reply() {
        let reply = "private_key=00\nlisten_port=51820\n\
            member=a,node0,198.19.0.1/32,198.18.0.1:51820,direct,312\n\
            member=b,node2,,-,connecting,-\n\
            member=c,node3,198.19.0.4/32,-,relay node0,-\n\
            member=d,node4,,-,sideways,-\n\
            errno=0\n";
        let members = parse_members(reply).unwrap();
        assert_eq!(members.len(), 4);
        assert_eq!(members[0].path, MemberPath::Direct);
        assert_eq!(members[0].rtt_micros, Some(312));
        assert_eq!(members[1].path, MemberPath::Connecting);
        assert_eq!(members[1].endpoint, None);
        assert_eq!(
            members[2].path,
            MemberPath::Relayed {
                via: "node0".to_string()
            }
        );
        assert_eq!(members[3].path, MemberPath::Other);
        assert!(parse_members("member=a,node0\nerrno=0\n").is_err());
        assert!(parse_members("errno=22\n").is_err());
        assert!(parse_members("member=b,node2,,-,connecting,-\n").is_err());
    }
}
