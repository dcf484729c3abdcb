//! Live reload of `fjord up`: SIGHUP (what `systemctl reload` sends) or
//! `fjord reload IFACE` re-reads the config file and applies only what
//! changed, in one step on the worker between packet batches:
//!
//! ```text
//! read and check the file (and the [Mesh] files it names) ─ refused
//! whole if it does not parse, or changes what only a restart can ─ plan
//! the difference with the running file ─ on the worker: peers removed,
//! changed, added; revocations; renewed certificate; bootstrap list;
//! exit node; cipher and compression offers ─ then the routes of allowed IPs that came or went
//! and the MTU (ip commands) ─ the new file becomes the running one
//! ```
//!
//! Peers whose section did not change are not touched: their sessions,
//! endpoints (roamed or not) and timers run on. A changed peer keeps its
//! session too; only what changed is set (a new endpoint, keepalive,
//! preshared key for the next handshake, allowed IPs). Reloading both
//! ends of a tunnel at once is harmless for that reason: neither side
//! starts a handshake or forgets a session because of a reload.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use fjord_mesh::{Bootstrap, BootstrapChange, Certificate, Cidr, PolicyOffer, Revocation};
use fjord_net::ControlHandle;
use fjord_proto::PublicKey;

use crate::config::{CipherSetting, CompressionSetting, Config, LoadedMesh, PeerSection};
use crate::netconf::{self, RouteTable};
use crate::up::{DataOffer, load_mesh};

/// Why a reload changed nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    /// The file (or a file it names) is wrong: the usual one-line error.
    #[error("{0}")]
    BadFile(String),
    #[error(
        "{path}: {setting} changed; that takes a restart (`fjord down`/`up`, or `systemctl restart`), not a reload"
    )]
    NeedsRestart { path: String, setting: &'static str },
    #[error("the interface stopped")]
    Stopped,
}

/// What one reload did, for the log and `fjord reload`.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReloadSummary {
    pub peers_added: usize,
    pub peers_removed: usize,
    pub peers_changed: usize,
    pub revocations_added: usize,
    pub certificate_renewed: bool,
    pub bootstrap: BootstrapChange,
    pub mtu: Option<u16>,
    pub offer_changed: bool,
    /// `[Mesh] ExitNode` named another member.
    pub exit_node: Option<String>,
    /// What became of the file's network policy, when it names one.
    pub policy: Option<PolicyOffer>,
}

impl std::fmt::Display for ReloadSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} peers added, {} removed, {} changed",
            self.peers_added, self.peers_removed, self.peers_changed
        )?;
        if self.revocations_added > 0 {
            write!(f, ", {} revocations added", self.revocations_added)?;
        }
        if self.certificate_renewed {
            f.write_str(", certificate renewed")?;
        }
        if !self.bootstrap.is_empty() {
            let BootstrapChange {
                added,
                removed,
                moved,
            } = self.bootstrap;
            write!(
                f,
                ", bootstrap members {added} added, {removed} removed, {moved} moved"
            )?;
        }
        if let Some(mtu) = self.mtu {
            write!(f, ", MTU {mtu}")?;
        }
        if self.offer_changed {
            f.write_str(", cipher or compression offer changed")?;
        }
        if let Some(exit_node) = &self.exit_node {
            write!(f, ", exit node now {exit_node}")?;
        }
        match self.policy {
            Some(PolicyOffer::Applied { version }) => {
                write!(f, ", network policy version {version} in force")?
            }
            Some(PolicyOffer::Older { offered, in_force }) => write!(
                f,
                ", network policy version {in_force} kept (the file's version {offered} is older)"
            )?,
            Some(PolicyOffer::SameVersionKept { version }) => write!(
                f,
                ", network policy version {version} kept (the file has other rules under the same \
                 version: sign them with a higher one)"
            )?,
            Some(PolicyOffer::Unchanged { .. }) | None => {}
        }
        Ok(())
    }
}

/// The running configuration of one `fjord up`, and how to change it.
pub struct Reloader {
    path: PathBuf,
    interface: String,
    running: Config,
    /// Revocations already given to the mesh (from the file or a reload).
    revocations: HashSet<(PublicKey, u64)>,
    certificate_issued_at: Option<u64>,
    /// `--cipher`/`--compression` given on the command line win over the
    /// file, at start and on every reload.
    command_line: DataOfferOverride,
    control: ControlHandle,
}

/// The command line's data offer, which the file cannot change.
#[derive(Debug, Clone, Copy, Default)]
pub struct DataOfferOverride {
    pub cipher: Option<CipherSetting>,
    pub compression: Option<CompressionSetting>,
}

impl DataOfferOverride {
    pub fn offer(&self, config: &Config) -> DataOffer {
        DataOffer {
            cipher: self.cipher.or(config.interface.cipher).unwrap_or_default(),
            compression: self
                .compression
                .or(config.interface.compression)
                .unwrap_or_default(),
        }
    }
}

/// A [`Reloader`] shared by the SIGHUP thread and the configuration
/// socket (`fjord reload`), so two reloads never interleave.
pub type SharedReloader = Arc<Mutex<Reloader>>;

impl Reloader {
    pub fn new(
        path: &Path,
        interface: &str,
        running: Config,
        mesh: Option<&LoadedMesh>,
        command_line: DataOfferOverride,
        control: ControlHandle,
    ) -> Self {
        Self {
            path: path.to_path_buf(),
            interface: interface.to_string(),
            running,
            revocations: mesh
                .map(|mesh| mesh.revocations.iter().map(revocation_id).collect())
                .unwrap_or_default(),
            certificate_issued_at: mesh.map(|mesh| mesh.certificate.issued_at),
            command_line,
            control,
        }
    }

    /// Re-reads the file and applies the difference; on any error the
    /// running configuration is left exactly as it was.
    /// The running config's `[Mesh] Domain` (a change needs a restart).
    pub fn domain(&self) -> Option<fjord_mesh::names::Domain> {
        self.running.mesh.as_ref()?.domain.clone()
    }

    pub fn reload(&mut self) -> Result<ReloadSummary, ReloadError> {
        let config = Config::load(&self.path).map_err(|e| ReloadError::BadFile(e.to_string()))?;
        let mesh = load_mesh(&config, &self.path).map_err(|e| ReloadError::BadFile(e.0))?;
        self.check_restart_settings(&config)?;
        let plan = Plan::between(&self.running, &config);
        let revocations: Vec<Revocation> = mesh
            .iter()
            .flat_map(|mesh| &mesh.revocations)
            .filter(|revocation| !self.revocations.contains(&revocation_id(revocation)))
            .cloned()
            .collect();
        let certificate: Option<Certificate> = mesh
            .as_ref()
            .map(|mesh| mesh.certificate.clone())
            .filter(|certificate| {
                self.certificate_issued_at
                    .is_none_or(|issued| certificate.issued_at > issued)
            });
        // Only a changed list is handed over: an unchanged one would
        // re-dial nothing anyway, and the worker need not compare.
        let bootstrap_section = |config: &Config| config.mesh.as_ref().map(|m| m.bootstrap.clone());
        let bootstrap: Option<Vec<Bootstrap>> = mesh
            .as_ref()
            .filter(|_| bootstrap_section(&self.running) != bootstrap_section(&config))
            .map(|mesh| mesh.bootstrap.clone());
        let old_offer = self.command_line.offer(&self.running);
        let new_offer = self.command_line.offer(&config);
        let offer = (old_offer != new_offer).then_some(new_offer);
        let new_exit_node = exit_node(&config);
        let exit_node_change = (exit_node(&self.running) != new_exit_node).then_some(new_exit_node);

        let mut summary = ReloadSummary {
            peers_added: plan.added.len(),
            peers_removed: plan.removed.len(),
            peers_changed: plan.changed.len(),
            revocations_added: revocations.len(),
            offer_changed: offer.is_some(),
            exit_node: exit_node_change.clone().flatten(),
            ..ReloadSummary::default()
        };
        let policy = mesh.as_ref().and_then(|mesh| mesh.policy.clone());
        let applied_revocations: Vec<(PublicKey, u64)> =
            revocations.iter().map(revocation_id).collect();
        let applied = self
            .control
            .call(move |context| plan.apply(context, revocations, certificate, bootstrap, offer))
            .map_err(|_| ReloadError::Stopped)?;
        let renewed = applied.renewed;
        summary.bootstrap = applied.bootstrap;
        summary.certificate_renewed = renewed.is_some();
        if let Some(issued) = renewed {
            self.certificate_issued_at = Some(issued);
        }
        self.revocations.extend(applied_revocations);
        if let Some(name) = exit_node_change {
            self.control
                .call(move |context| context.node.set_exit_node(context.now, name))
                .map_err(|_| ReloadError::Stopped)?;
        }
        if let Some(policy) = policy {
            summary.policy = self
                .control
                .call(move |context| context.node.offer_policy(context.now, policy))
                .map_err(|_| ReloadError::Stopped)?;
        }

        self.update_routes(&config);
        let mtu = config.interface.mtu().bytes();
        if mtu != self.running.interface.mtu().bytes() {
            // The worker follows the interface's MTU by itself.
            match netconf::ip(&[
                "link",
                "set",
                "mtu",
                &mtu.to_string(),
                "dev",
                &self.interface,
            ]) {
                Ok(_) => summary.mtu = Some(mtu),
                Err(error) => tracing::warn!(%error, "reload: could not set the new MTU"),
            }
        }
        self.running = config;
        Ok(summary)
    }

    /// Settings that a running interface cannot take: its sockets,
    /// addresses, routing table and mode were set up at start.
    fn check_restart_settings(&self, new: &Config) -> Result<(), ReloadError> {
        let old = &self.running;
        let (a, b) = (&old.interface, &new.interface);
        let mesh_identity = |config: &Config| {
            config
                .mesh
                .as_ref()
                .map(|mesh| (mesh.network, mesh.members.clone()))
        };
        let domain = |config: &Config| config.mesh.as_ref().and_then(|mesh| mesh.domain.clone());
        let sessions = |config: &Config| {
            config
                .mesh
                .as_ref()
                .map(|mesh| (mesh.eager_sessions, mesh.idle_timeout))
        };
        let checks: [(&'static str, bool); 14] = [
            (
                "PrivateKey",
                a.private_key.public_key() != b.private_key.public_key(),
            ),
            ("ListenPort", a.listen_port != b.listen_port),
            ("FwMark", a.fwmark != b.fwmark),
            ("Address", a.addresses != b.addresses),
            ("Mode", a.mode != b.mode),
            ("Table", a.wg_quick.table != b.wg_quick.table),
            ("FallbackPort", a.fallback_port != b.fallback_port),
            ("FallbackCarrier", a.fallback_carrier != b.fallback_carrier),
            (
                "[Mesh] Network or Member",
                mesh_identity(old) != mesh_identity(new),
            ),
            ("[Mesh] Domain", domain(old) != domain(new)),
            (
                "[Mesh] EagerSessions or IdleTimeout (read at start)",
                sessions(old) != sessions(new),
            ),
            (
                "[Mesh] ExitNode set or removed (the sockets' firewall mark is chosen at start)",
                exit_node(old).is_some() != exit_node(new).is_some(),
            ),
            (
                "a default route (AllowedIPs 0.0.0.0/0 or ::/0)",
                has_default_route(old) != has_default_route(new),
            ),
            (
                "a first FallbackPort (the carrier is set up at start)",
                !uses_carrier(old) && uses_carrier(new),
            ),
        ];
        match checks.into_iter().find(|(_, changed)| *changed) {
            Some((setting, _)) => Err(ReloadError::NeedsRestart {
                path: self.path.display().to_string(),
                setting,
            }),
            None => Ok(()),
        }
    }

    /// Routes for allowed IPs that a reload added, and removes those no
    /// peer has any more. Routes bound to the interface go with it, so
    /// nothing needs undoing at shutdown.
    fn update_routes(&self, new: &Config) {
        let table = RouteTable::parse(new.interface.wg_quick.table.as_ref().map(|t| t.as_str()))
            .unwrap_or(RouteTable::Auto);
        let old_prefixes = prefixes(&self.running);
        let new_prefixes = prefixes(new);
        let added: Vec<Cidr> = new_prefixes.difference(&old_prefixes).copied().collect();
        if !added.is_empty() {
            let mut routes = netconf::Netconf::default();
            let fwmark = new.interface.fwmark.map_or(0, |mark| mark.get());
            if let Err(error) = routes.add_routes(&self.interface, &added, table, fwmark) {
                tracing::warn!(%error, "reload: could not add routes for new allowed IPs");
            }
        }
        for prefix in old_prefixes.difference(&new_prefixes) {
            if let Err(error) = netconf::remove_route(&self.interface, prefix, table) {
                tracing::debug!(%error, "reload: route of a removed allowed IP not removed");
            }
        }
    }
}

/// Reloads and logs the outcome; what SIGHUP and `fjord reload` run.
pub fn reload_and_log(reloader: &SharedReloader) -> Result<ReloadSummary, ReloadError> {
    let mut reloader = match reloader.lock() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    };
    let started = Instant::now();
    let result = reloader.reload();
    match &result {
        Ok(summary) => tracing::info!(
            interface = reloader.interface,
            took_ms = started.elapsed().as_millis() as u64,
            "reloaded: {summary}"
        ),
        Err(error) => tracing::error!(
            interface = reloader.interface,
            "reload refused; the running configuration is unchanged: {error}"
        ),
    }
    result
}

/// Reloads on every SIGHUP until the process ends.
pub fn spawn_on_sighup(reloader: SharedReloader) -> std::io::Result<()> {
    let (mut read_end, write_end) = std::os::unix::net::UnixStream::pair()?;
    signal_hook::low_level::pipe::register(libc::SIGHUP, write_end)?;
    std::thread::Builder::new()
        .name("reload".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            while std::io::Read::read(&mut read_end, &mut byte).is_ok_and(|read| read > 0) {
                // Several signals before this wakes are one reload.
                let _ = read_end.set_nonblocking(true);
                while std::io::Read::read(&mut read_end, &mut byte).is_ok_and(|read| read > 0) {}
                let _ = read_end.set_nonblocking(false);
                let _ = reload_and_log(&reloader);
            }
        })?;
    Ok(())
}

fn revocation_id(revocation: &Revocation) -> (PublicKey, u64) {
    (revocation.node_key, revocation.revoked_at)
}

fn prefixes(config: &Config) -> HashSet<Cidr> {
    config
        .peers
        .iter()
        .flat_map(|peer| peer.allowed_ips.iter().map(Cidr::network))
        .collect()
}

/// Whether `fjord up` opened a fallback carrier for this file (see
/// `open_carrier`): our `FallbackPort`, or a peer's.
fn uses_carrier(config: &Config) -> bool {
    config.interface.fallback_port.is_some()
        || config.peers.iter().any(|peer| peer.fallback_port.is_some())
}

fn exit_node(config: &Config) -> Option<String> {
    config.mesh.as_ref()?.exit_node.clone()
}

fn has_default_route(config: &Config) -> bool {
    config
        .peers
        .iter()
        .any(|peer| peer.allowed_ips.iter().any(|cidr| cidr.prefix_len() == 0))
}

/// What the worker applied of the mesh's changes.
struct Applied {
    /// The renewed certificate's issue time, if one was taken.
    renewed: Option<u64>,
    bootstrap: BootstrapChange,
}

/// The peers' difference between two files.
struct Plan {
    removed: Vec<PublicKey>,
    /// New sections of peers that changed, with their old sections.
    changed: Vec<(PeerSection, PeerSection)>,
    added: Vec<PeerSection>,
}

impl Plan {
    fn between(old: &Config, new: &Config) -> Self {
        let find = |config: &Config, key: &PublicKey| {
            config
                .peers
                .iter()
                .find(|peer| peer.public_key == *key)
                .cloned()
        };
        let removed = old
            .peers
            .iter()
            .filter(|peer| find(new, &peer.public_key).is_none())
            .map(|peer| peer.public_key)
            .collect();
        let mut changed = Vec::new();
        let mut added = Vec::new();
        for peer in &new.peers {
            match find(old, &peer.public_key) {
                Some(before) if before == *peer => {}
                Some(before) => changed.push((peer.clone(), before)),
                None => added.push(peer.clone()),
            }
        }
        Self {
            removed,
            changed,
            added,
        }
    }

    /// Runs on the worker.
    fn apply(
        self,
        context: &mut fjord_net::ControlContext<'_>,
        revocations: Vec<Revocation>,
        certificate: Option<Certificate>,
        bootstrap: Option<Vec<Bootstrap>>,
        offer: Option<DataOffer>,
    ) -> Applied {
        let now = context.now;
        let node = &mut *context.node;
        for key in self.removed {
            if let Some(id) = node.device().peer_id(&key) {
                node.remove_peer(id);
            }
        }
        for (peer, before) in self.changed {
            let Some(id) = node.device().peer_id(&peer.public_key) else {
                continue;
            };
            let device = node.device_mut();
            if peer.preshared_key != before.preshared_key {
                device.set_peer_preshared_key(id, peer.to_proto().preshared_key);
            }
            // Only a changed endpoint is set: an unchanged one may have
            // roamed, and the peer is where it was last heard from.
            if peer.endpoint != before.endpoint
                && let Some(endpoint) = peer.to_proto().endpoint
            {
                device.set_peer_endpoint(id, endpoint);
            }
            if peer.persistent_keepalive != before.persistent_keepalive {
                let interval = peer.to_proto().persistent_keepalive;
                device.set_peer_persistent_keepalive(id, now, interval);
            }
            if peer.allowed_ips != before.allowed_ips {
                node.clear_allowed_ips(id);
                for cidr in &peer.allowed_ips {
                    node.add_allowed_ip(id, *cidr);
                }
            }
            if peer.fallback_port != before.fallback_port {
                node.set_peer_fallback(now, id, peer.fallback_port.map(|port| port.get()));
            }
            if peer.groups != before.groups {
                node.set_peer_groups(id, peer.groups.clone());
            }
        }
        for peer in self.added {
            match node.add_peer(peer.to_proto(), &peer.allowed_ips) {
                Ok(id) => {
                    if let Some(port) = peer.fallback_port {
                        node.set_peer_fallback(now, id, Some(port.get()));
                    }
                    if peer.groups.is_some() {
                        node.set_peer_groups(id, peer.groups.clone());
                    }
                    if peer.endpoint.is_some() {
                        node.device_mut().initiate_handshake(id, now);
                    }
                }
                Err(error) => tracing::warn!(%error, "reload: peer not added"),
            }
        }
        for revocation in revocations {
            // Verified against the network when the file was read.
            if let Err(error) = node.revoke(now, revocation) {
                tracing::warn!(%error, "reload: revocation not applied");
            }
        }
        let renewed = certificate.and_then(|certificate| {
            let issued = certificate.issued_at;
            match node.renew_certificate(now, certificate) {
                Ok(true) => Some(issued),
                Ok(false) => None,
                Err(error) => {
                    tracing::warn!(%error, "reload: renewed certificate not taken");
                    None
                }
            }
        });
        let bootstrap = bootstrap
            .map(|list| node.set_bootstrap(now, list))
            .unwrap_or_default();
        if let Some(offer) = offer {
            crate::up::apply_offer(node.device_mut(), offer);
        }
        Applied { renewed, bootstrap }
    }
}
