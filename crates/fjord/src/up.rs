//! `fjord up CONFIG`: bring an interface up from a wg-quick style file and
//! run it in the foreground until SIGINT/SIGTERM or until the interface is
//! deleted, then take everything down again.
//!
//! Order: PreUp; the configuration socket (claimed first, so that a second
//! `fjord up` of the same interface fails before touching anything); UDP
//! socket; TUN interface (TAP in switch mode); addresses and MTU; peers;
//! routes (and, in a mesh, a thread that routes members' networks:
//! `member_routes.rs`); with `--user`, root given up (`privilege.rs`); serving the
//! configuration socket; PostUp; readiness to systemd once the worker
//! has sent its first initiations (`service.rs`). A `[Mesh]` section's
//! files are read and checked with the config file, before anything is
//! created. On the way
//! down: PreDown, routes and rules, interface, PostDown (as wg-quick).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use fjord_mesh::names::Domain;
use fjord_mesh::switch::{MacAddress, SwitchConfig};
use fjord_mesh::{Cidr, Mesh, MeshConfig, Node};
use fjord_net::{DeviceKind, Egress, StopReason, TunDevice, Worker};
use fjord_proto::{CipherPolicy, Device, DeviceConfig, PrivateKey, Rng, Timing, WallClock};
use fjord_sys::privilege::Account;

use crate::config::{
    CipherSetting, CompressionSetting, Config, FallbackCarrier, InterfaceMode, LoadedMesh,
    MetricsAddress, interface_name_from_path,
};
use crate::member_routes::{self, MemberRoutes};
use crate::netconf::{self, Netconf, RouteTable, run_hook};
use crate::reload::{self, DataOfferOverride, Reloader};
use crate::reresolve::{self, NamedEndpoint};
use crate::{metrics, nameserver, uapi};

/// With `Domain` in `[Mesh]`, the name server bound to the interface's
/// addresses (before root is given up: port 53 needs it).
fn bind_name_server(
    config: &Config,
    mesh: Option<&LoadedMesh>,
) -> anyhow::Result<Option<(nameserver::NameServer, Domain)>> {
    let (Some(mesh), Some(domain)) = (mesh, config.mesh.as_ref().and_then(|m| m.domain.clone()))
    else {
        return Ok(None);
    };
    let own = nameserver::named_member(&mesh.certificate.name, &mesh.certificate.addresses);
    let server = nameserver::bind(domain.clone(), &own_addresses(config), own)?;
    Ok(Some((server, domain)))
}

fn own_addresses(config: &Config) -> Vec<std::net::IpAddr> {
    config
        .interface
        .addresses
        .iter()
        .map(Cidr::address)
        .collect()
}

/// Errors that mean "your input is wrong" (exit code 2) rather than
/// "something failed while running" (exit code 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Options of `fjord up` beyond the config file.
#[derive(Debug, Clone, Default)]
pub struct UpOptions {
    /// Turn off TUN and UDP segmentation offloads (for measurements).
    pub no_offload: bool,
    /// Sleep at once when idle (see `fjord_net::Worker::without_busy_poll`).
    pub no_busy_poll: bool,
    /// Threads sharing the crypto (`--threads`); 0 counts as 1.
    pub threads: usize,
    /// The protocol's timer durations: WireGuard's, unless a test sped up
    /// rekeys (`--test-rekey-divisor`).
    pub timing: Timing,
    /// `--cipher` / `FJORD_CIPHER`, which wins over the file's `Cipher`.
    pub cipher: Option<CipherSetting>,
    /// `--compression` / `FJORD_COMPRESSION`, which wins over the file's
    /// `Compression`.
    pub compression: Option<CompressionSetting>,
    /// The account to run as once set up (`--user`); `None` stays root.
    pub user: Option<Account>,
    /// `--metrics`, which wins over the file's `Metrics`.
    pub metrics: Option<MetricsAddress>,
}

/// What this node offers other fjord nodes for the data of each session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataOffer {
    pub cipher: CipherSetting,
    pub compression: CompressionSetting,
}

/// The operating system's CSPRNG.
pub struct SystemRng;

impl Rng for SystemRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        // Invariant: getrandom only fails on exotic platforms without a
        // kernel entropy source; there is no safe way to continue without one.
        getrandom::fill(dest).expect("the kernel's random number generator is available");
    }
}

/// The system's wall clock, pinned to `now`.
fn wall_clock(now: Instant) -> WallClock {
    WallClock {
        base: now,
        base_since_epoch: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default(),
    }
}

/// A protocol device with the system's randomness and wall clock pinned
/// to `now`, offering fjord peers the ciphers `offer.cipher` allows on
/// this CPU, and compression if `offer.compression` enables it.
pub fn new_device(
    private_key: Option<PrivateKey>,
    mtu: u16,
    timing: Timing,
    offer: DataOffer,
    now: Instant,
) -> Device {
    let config = DeviceConfig {
        private_key,
        mtu: usize::from(mtu),
    };
    let mut device = Device::new(config, Box::new(SystemRng), wall_clock(now));
    device.set_timing(timing);
    apply_offer(&mut device, offer);
    device
}

/// Offers fjord peers the ciphers `offer.cipher` allows on this CPU, and
/// compression if `offer.compression` enables it: at start, and again on
/// a reload (sessions that exist keep what they agreed until their next
/// handshake).
pub fn apply_offer(device: &mut Device, offer: DataOffer) {
    let cipher = offer.cipher;
    let hardware_aes = fjord_proto::aead::hardware_aes();
    let policy = cipher.policy(hardware_aes);
    device.set_cipher_policy(policy);
    let with_fjord_peers = match (policy, cipher) {
        (CipherPolicy::OfferAes256Gcm, _) => "AES-256-GCM where the peer offers it too",
        (_, CipherSetting::ChaCha20Poly1305) => "ChaCha20-Poly1305 (Cipher = chacha20-poly1305)",
        (_, CipherSetting::Auto) => "ChaCha20-Poly1305 (this CPU has no hardware AES)",
    };
    tracing::info!(
        "data cipher with fjord peers: {with_fjord_peers}; with WireGuard peers: ChaCha20-Poly1305"
    );
    let mut compression = offer.compression;
    if let Err(error) = device.set_compression_policy(compression.policy()) {
        tracing::warn!(%error, "zstd's library could not set up; compressing with LZ4 instead");
        compression = CompressionSetting::Lz4;
        let _ = device.set_compression_policy(compression.policy());
    }
    match compression {
        CompressionSetting::Off => {}
        CompressionSetting::Lz4 => tracing::info!(
            "compression with fjord peers: LZ4 where the peer enables it too (Compression = lz4); never with WireGuard peers"
        ),
        CompressionSetting::Zstd => tracing::info!(
            "compression with fjord peers: zstd where the peer enables it too, LZ4 where the peer has only that (Compression = zstd); never with WireGuard peers"
        ),
    }
}

/// Reads and checks the files a `[Mesh]` section names (relative to the
/// config file's directory).
pub fn load_mesh(config: &Config, config_path: &Path) -> Result<Option<LoadedMesh>, UsageError> {
    let Some(section) = &config.mesh else {
        return Ok(None);
    };
    let dir = config_path.parent().unwrap_or(Path::new("."));
    let unix_now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    section
        .load(
            &config_path.display().to_string(),
            dir,
            &config.interface.private_key.public_key(),
            unix_now,
        )
        .map(Some)
        .map_err(|error| UsageError(error.to_string()))
}

/// Builds the protocol node for `config`, a mesh member if `mesh` is
/// given, announcing `host_addresses` (where members may greet it).
pub fn build_node(
    config: &Config,
    mesh: Option<LoadedMesh>,
    host_addresses: Vec<SocketAddr>,
    timing: Timing,
    offer: DataOffer,
    now: Instant,
) -> anyhow::Result<Node> {
    let private_key = Some(config.interface.private_key.clone());
    let mtu = config.interface.mtu().bytes();
    let mut node = Node::new(new_device(private_key, mtu, timing, offer, now));
    if config.interface.mode == InterfaceMode::Switch {
        node.enable_switch(SwitchConfig::default());
    }
    for peer in &config.peers {
        let id = node
            .add_peer(peer.to_proto(), &peer.allowed_ips)
            .map_err(|error| UsageError(error.to_string()))?;
        if let Some(port) = peer.fallback_port {
            node.set_peer_fallback(now, id, Some(port.get()));
        }
        if peer.groups.is_some() {
            node.set_peer_groups(id, peer.groups.clone());
        }
        // Every peer whose endpoint we know hears from us at once (as
        // wireguard-go does only for a persistent keepalive): after a
        // restart, the peer still sends on a session we forgot, and would
        // notice only after 15 s of unanswered data; our handshake
        // replaces it within a round trip.
        if peer.endpoint.is_some() {
            node.device_mut().initiate_handshake(id, now);
        }
    }
    if let Some(loaded) = mesh {
        // Members run fjord; one that listens for carriers is assumed to
        // do so where this node does.
        if let Some(port) = config.interface.fallback_port {
            node.set_member_fallback_port(Some(port.get()));
        }
        warn_if_not_forwarding(&loaded.certificate);
        let mut mesh_config = MeshConfig::new(loaded.trust, loaded.certificate, usize::from(mtu));
        mesh_config.bootstrap = loaded.bootstrap;
        mesh_config.exit_node = config.mesh.as_ref().and_then(|m| m.exit_node.clone());
        if let Some(members) = config.mesh.as_ref().and_then(|m| m.eager_sessions) {
            mesh_config.eager_sessions = members;
        }
        if let Some(timeout) = config.mesh.as_ref().and_then(|m| m.idle_timeout) {
            mesh_config.idle_timeout = timeout;
        }
        mesh_config.host_addresses = host_addresses;
        let mut seed = [0u8; 8];
        SystemRng.fill_bytes(&mut seed);
        let mut mesh = Mesh::new(mesh_config, now, wall_clock(now), u64::from_le_bytes(seed));
        for revocation in loaded.revocations {
            // Verified against the network when the file was read.
            let _ = mesh.revoke(revocation);
        }
        if let Some(policy) = loaded.policy {
            let offer = mesh.offer_policy(policy);
            tracing::info!(?offer, "the network policy");
        }
        node.enable_mesh(now, mesh);
    }
    Ok(node)
}

pub fn up(config_path: &Path, options: &UpOptions) -> anyhow::Result<()> {
    let config = Config::load(config_path).map_err(|error| UsageError(error.to_string()))?;
    let mesh = load_mesh(&config, config_path)?;
    // A reload reads the same file again, whatever the directory then.
    let config_path = &std::fs::canonicalize(config_path).unwrap_or(config_path.to_path_buf());
    let command_line = DataOfferOverride {
        cipher: options.cipher,
        compression: options.compression,
    };
    let name =
        interface_name_from_path(config_path).map_err(|error| UsageError(error.to_string()))?;
    let interface = name.as_str().to_string();
    let table = RouteTable::parse(config.interface.wg_quick.table.as_ref().map(|t| t.as_str()))
        .map_err(|problem| UsageError(format!("{}: {problem}", config_path.display())))?;
    warn_unapplied(&config);

    for hook in &config.interface.wg_quick.pre_up {
        run_hook("PreUp", hook.as_str(), &interface)?;
    }
    let allowed: Vec<Cidr> = config
        .peers
        .iter()
        .flat_map(|p| p.allowed_ips.iter().copied())
        .collect();
    // A default route needs the socket marked so its packets escape the
    // tunnel; an exit node's comes later, when the member is met.
    let chooses_exit_node = config.mesh.as_ref().is_some_and(|m| m.exit_node.is_some());
    let needs_mark = table == RouteTable::Auto
        && (chooses_exit_node || allowed.iter().any(|c| c.prefix_len() == 0));
    let configured_mark = config.interface.fwmark.map_or(0, |m| m.get());
    let fwmark = if needs_mark && configured_mark == 0 {
        netconf::free_table()?
    } else {
        configured_mark
    };
    let (listener, _socket_guard) =
        uapi::bind(&interface).map_err(|error| UsageError(error.to_string()))?;
    let metrics_listener = bind_metrics(options.metrics.or(config.interface.metrics))?;
    let mut udp = Egress::bind(config.interface.listen_port.unwrap_or(0), fwmark)
        .map_err(|error| UsageError(error.to_string()))?;
    open_carrier(&config, &mut udp, fwmark)?;
    let mtu = config.interface.mtu().bytes();
    let kind = match config.interface.mode {
        InterfaceMode::Router => DeviceKind::Tun,
        InterfaceMode::Switch => DeviceKind::Tap {
            mac_address: MacAddress::for_node(&config.interface.private_key.public_key()).0,
        },
    };
    let tun = TunDevice::create(&interface, kind, mtu, !options.no_offload)?;
    tracing::info!(
        interface,
        mode = %config.interface.mode,
        listen_port = udp.port(),
        offload = tun.offload(),
        gso_segments = udp.max_gso_segments(),
        gro_segments = udp.gro_segments(),
        "interface created"
    );

    let mut netconf = Netconf::default();
    netconf.configure_link(&interface, &config.interface.addresses, mtu)?;
    let host_addresses = match &mesh {
        Some(_) => announced_addresses(udp.port(), &interface),
        None => Vec::new(),
    };
    let reloader_mesh = mesh.clone();
    let name_server = bind_name_server(&config, mesh.as_ref())?;
    let node = build_node(
        &config,
        mesh,
        host_addresses,
        options.timing,
        command_line.offer(&config),
        Instant::now(),
    )?;
    netconf.add_routes(&interface, &allowed, table, fwmark)?;
    if chooses_exit_node && table == RouteTable::Auto {
        netconf::mark_sources_valid();
    }
    if let Some(account) = &options.user {
        crate::privilege::hand_over(&udp, account)?;
    }

    let (mut worker, control) = Worker::new(node, tun, udp, fwmark)?;
    worker = worker.with_threads(options.threads);
    if options.no_busy_poll {
        worker = worker.without_busy_poll();
    }
    // Everything that needs root is done; no thread has started yet.
    if let Some(account) = &options.user {
        crate::privilege::drop_to(account)?;
    }
    reresolve::spawn(control.clone(), named_endpoints(&config))?;
    let member_routes = Arc::new(Mutex::new(MemberRoutes::new(&interface, table, fwmark)));
    if config.mesh.is_some() {
        member_routes::spawn(member_routes.clone(), control.clone())?;
    }
    let resolved = match name_server {
        Some((server, domain)) => {
            server.spawn(control.clone())?;
            nameserver::register(&interface, &domain, &own_addresses(&config))
        }
        None => None,
    };
    let reloader = Arc::new(Mutex::new(Reloader::new(
        config_path,
        &interface,
        config.clone(),
        reloader_mesh.as_ref(),
        command_line,
        control.clone(),
    )));
    reload::spawn_on_sighup(reloader.clone())?;
    let control_for_service = control.clone();
    if let Some(metrics_listener) = metrics_listener {
        metrics::spawn(metrics_listener, control.clone())?;
    }
    std::thread::Builder::new()
        .name("uapi".into())
        .spawn(move || uapi::serve(listener, control, Some(reloader)))?;
    for hook in &config.interface.wg_quick.post_up {
        run_hook("PostUp", hook.as_str(), &interface)?;
    }
    tracing::info!(interface, peers = config.peers.len(), "up");
    crate::service::spawn(control_for_service, interface.clone(), config.peers.len())?;

    let reason = worker.run()?;
    crate::service::stopping();
    drop(resolved);
    match reason {
        StopReason::Signal => tracing::info!(interface, "stopping on signal"),
        StopReason::InterfaceDeleted => {
            tracing::info!(interface, "interface was deleted; stopping")
        }
    }
    for hook in &config.interface.wg_quick.pre_down {
        if let Err(error) = run_hook("PreDown", hook.as_str(), &interface) {
            tracing::warn!(%error, "PreDown hook failed");
        }
    }
    member_routes
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clear();
    drop(netconf);
    for hook in &config.interface.wg_quick.post_down {
        if let Err(error) = run_hook("PostDown", hook.as_str(), &interface) {
            tracing::warn!(%error, "PostDown hook failed");
        }
    }
    Ok(())
}

/// Listens for scrapes at `address`, if metrics are on; an address that
/// is taken or not this host's is a usage error (exit code 2).
pub fn bind_metrics(
    address: Option<MetricsAddress>,
) -> anyhow::Result<Option<std::net::TcpListener>> {
    let Some(address) = address else {
        return Ok(None);
    };
    metrics::bind(address).map(Some).map_err(|error| {
        if error.is_usage() {
            UsageError(error.to_string()).into()
        } else {
            error.into()
        }
    })
}

/// Prepares the fallback carrier if any peer may need it (a peer with a
/// fallback port) or peers may use it to reach us (our `FallbackPort`):
/// fake TCP's raw socket, or the TCP listener.
fn open_carrier(config: &Config, udp: &mut Egress, fwmark: u32) -> anyhow::Result<()> {
    let port = config.interface.fallback_port.map(|port| port.get());
    let falls_back = port.is_some() || config.peers.iter().any(|peer| peer.fallback_port.is_some());
    if !falls_back {
        return Ok(());
    }
    let carrier = config.interface.fallback_carrier.unwrap_or_default();
    let in_use = |error: std::io::Error| -> anyhow::Error {
        match (error.kind(), port) {
            (std::io::ErrorKind::AddrInUse, Some(port)) => {
                UsageError(format!("FallbackPort: TCP port {port} is already in use")).into()
            }
            (std::io::ErrorKind::PermissionDenied, _) => UsageError(format!(
                "FallbackCarrier = {carrier} needs CAP_NET_RAW ({error}); FallbackCarrier = tcp does not"
            ))
            .into(),
            _ => anyhow::anyhow!("opening the {carrier} fallback carrier: {error}"),
        }
    };
    match carrier {
        FallbackCarrier::FakeTcp => udp
            .carriers_mut()
            .use_fake_tcp(port, fwmark)
            .map_err(in_use)?,
        FallbackCarrier::Tcp => {
            if let Some(port) = port {
                udp.carriers_mut().listen(port, fwmark).map_err(in_use)?;
            }
        }
    }
    tracing::info!(%carrier, listen_port = port, "fallback carrier ready");
    Ok(())
}

/// Peers and bootstrap members whose endpoint is a name, to look up again
/// when they go silent.
fn named_endpoints(config: &Config) -> Vec<NamedEndpoint> {
    let peers = config
        .peers
        .iter()
        .filter_map(|peer| Some((peer.public_key, peer.endpoint.as_ref()?)));
    let bootstrap = config
        .mesh
        .iter()
        .flat_map(|mesh| &mesh.bootstrap)
        .map(|member| (member.public_key, &member.endpoint));
    peers
        .chain(bootstrap)
        .filter_map(|(public_key, endpoint)| {
            let (host, port) = endpoint.name_and_port()?;
            Some(NamedEndpoint {
                public_key,
                host: host.to_string(),
                port,
            })
        })
        .collect()
}

/// A member whose certificate routes networks behind it must forward
/// packets between the interface and them; the kernel does, once asked.
fn warn_if_not_forwarding(certificate: &fjord_mesh::Certificate) {
    let families = [
        (true, "/proc/sys/net/ipv4/ip_forward", "net.ipv4.ip_forward"),
        (
            false,
            "/proc/sys/net/ipv6/conf/all/forwarding",
            "net.ipv6.conf.all.forwarding",
        ),
    ];
    for (ipv4, path, sysctl) in families {
        let routes_family = certificate
            .routes
            .iter()
            .any(|route| route.is_ipv4() == ipv4);
        let forwarding = std::fs::read_to_string(path).is_ok_and(|value| value.trim() == "1");
        if routes_family && !forwarding {
            tracing::warn!(
                "this member's certificate routes networks behind it, but {sysctl} is off: members' packets to them are dropped here (sysctl -w {sysctl}=1)"
            );
        }
    }
}

fn warn_unapplied(config: &Config) {
    if !config.interface.wg_quick.dns.is_empty() {
        tracing::warn!(
            "DNS = … is not applied by `fjord up`; run wg-quick with WG_QUICK_USERSPACE_IMPLEMENTATION=fjord for that"
        );
    }
    if config.interface.wg_quick.save_config {
        tracing::warn!("SaveConfig = true is ignored by `fjord up`");
    }
    // A network policy comes with a [Mesh]; without one, no policy can be
    // in force, so a peer's groups would never be checked.
    if config.mesh.is_none() && config.peers.iter().any(|peer| peer.groups.is_some()) {
        tracing::warn!(
            "a [Peer] has Groups, but without a [Mesh] no network policy is in force: every packet of every peer passes"
        );
    }
}

/// This host's addresses for the mesh Hello; none (members then meet us
/// through rendezvous only) if they cannot be read.
fn announced_addresses(port: u16, interface: &str) -> Vec<SocketAddr> {
    match fjord_net::host_addresses::host_addresses(
        port,
        interface,
        fjord_mesh::control::MAX_ENDPOINTS,
    ) {
        Ok(addresses) => {
            tracing::debug!(?addresses, "announcing host addresses to the mesh");
            addresses
        }
        Err(error) => {
            tracing::warn!(%error, "cannot list this host's addresses; members will meet it through introductions only");
            Vec::new()
        }
    }
}
