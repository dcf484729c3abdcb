//! fjord itself, through `fjord up CONFIG`.
//!
//! The contract: `fjord up` runs in the foreground, reads a wg-quick style
//! file (mode 0600) whose stem names the interface (`/x/fj3.conf` → `fj3`),
//! assigns the addresses and routes itself, logs to stderr, and on SIGINT or
//! SIGTERM removes its interface and exits 0. The driver writes the file,
//! starts the daemon and waits until the interface is up with its addresses.
//!
//! In switch mode ([`Fjord::in_switch_mode`], the lab system `fjord-tap`)
//! the file says `Mode = switch` and has no `AllowedIPs`: the interface is
//! a TAP carrying Ethernet frames, with the same addresses and MTU, so the
//! same suites compare it with the TUN interface.

use std::path::{Path, PathBuf};

use fjord_proto::{Codec, DropCounters, DropReason, HandshakeCounters};
use zeroize::Zeroizing;

use super::{Implementation, Interface, SideResult, WgSide, interface};
use crate::netns::Namespace;
use crate::systems::support;
use crate::systems::{FjordMesh, RunningMesh, SystemError};
use crate::topology::MeshHost;

const NAME: &str = "fjord";
/// fjord with its data cipher forced to WireGuard's (`--cipher
/// chacha20-poly1305`): what fjord costs where AES-256-GCM is not agreed.
const CHACHA_NAME: &str = "fjord-chacha";
/// The name of fjord in switch mode, as a lab system.
const SWITCH_NAME: &str = "fjord-tap";
/// Both: switch mode with WireGuard's data cipher.
const SWITCH_CHACHA_NAME: &str = "fjord-tap-chacha";
/// fjord with compression on both sides (`--compression lz4`).
const COMPRESS_NAME: &str = "fjord-compress";
/// Compression with WireGuard's data cipher.
const CHACHA_COMPRESS_NAME: &str = "fjord-chacha-compress";
/// Switch mode with compression (no system in the list: frames are never
/// compressed, so it carries what fjord-tap does); named so every setting
/// has a name.
const SWITCH_COMPRESS_NAME: &str = "fjord-tap-compress";
const SWITCH_CHACHA_COMPRESS_NAME: &str = "fjord-tap-chacha-compress";
/// fjord with zstd compression on both sides (`--compression zstd`).
const ZSTD_NAME: &str = "fjord-zstd";
/// The tunnel MTU of [`JUMBO_ZSTD_NAME`] and [`JUMBO_COMPRESS_NAME`]: a
/// packet holds about six times the text, which zstd compresses 4× where
/// a 1,420-byte packet gives it 2.7× (LZ4: 2.5× and 1.9×). The underlay
/// fragments each such packet.
pub const JUMBO_MTU: u16 = 9000;
/// zstd at tunnel MTU [`JUMBO_MTU`].
const JUMBO_ZSTD_NAME: &str = "fjord-zstd-9000";
/// LZ4 at tunnel MTU [`JUMBO_MTU`].
const JUMBO_COMPRESS_NAME: &str = "fjord-compress-9000";
/// fjord with `--metrics` on each side, scraped every second
/// (`scraper.rs`): what being watched costs the data path.
const METRICS_NAME: &str = "fjord-metrics";
/// Where each side of `fjord-metrics` serves: each side's namespace has
/// its own loopback, so one address serves for both.
const SCRAPED_METRICS: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9586);
/// Any other combination of compression and MTU, which no lab system
/// uses.
const OTHER_NAME: &str = "fjord-custom";

/// Environment variable naming the fjord binary explicitly.
pub const BINARY_ENV: &str = "FJORD_BIN";
/// Read by fjord itself when `--threads` is not given.
const THREADS_ENV: &str = "FJORD_THREADS";

/// The binary a running `fjord lab` registered as itself; used when
/// `$FJORD_BIN` is unset, so the lab measures the fjord that runs it.
static RUNNING_BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();

/// `--threads` given to the running `fjord lab`, for every fjord it starts.
static RUNNING_THREADS: std::sync::OnceLock<u16> = std::sync::OnceLock::new();

/// Makes [`Fjord::locate`] prefer `binary` (after `$FJORD_BIN`).
pub fn use_binary(binary: PathBuf) {
    let _ = RUNNING_BINARY.set(binary);
}

/// Makes [`Fjord::locate`] run each side with `--threads threads`.
pub fn use_threads(threads: u16) {
    let _ = RUNNING_THREADS.set(threads);
}

#[derive(Debug, Clone)]
pub struct Fjord {
    binary: Option<PathBuf>,
    /// `--threads`; `None` leaves fjord's default (or `$FJORD_THREADS`).
    threads: Option<u16>,
    /// `--test-rekey-divisor`: faster rekeys, for tests.
    rekey_divisor: Option<u32>,
    /// `--cipher chacha20-poly1305`: no AES-256-GCM, even between fjord nodes.
    chacha_only: bool,
    /// `--compression CODEC` (`lz4`, `zstd`): compress what pays, toward
    /// fjord peers that compress too.
    compression: Option<Codec>,
    /// The tunnel MTU where a suite does not set its own (the `mtu` suite
    /// does).
    mtu: Option<u16>,
    /// `--user`: the account each side runs as once set up.
    user: Option<String>,
    /// `FJORD_LOG`: what each side logs; fjord's default when `None`.
    log_filter: Option<String>,
    /// `Mode = switch`: a TAP interface instead of TUN.
    switch: bool,
    /// `--metrics ADDR:PORT`: each side serves Prometheus metrics there
    /// (inside its own namespace).
    metrics: Option<std::net::SocketAddr>,
    /// Whether the lab scrapes `metrics` every second while a side runs.
    scraped: bool,
}

impl Fjord {
    /// `$FJORD_BIN`, else `target/release/fjord`, else `target/debug/fjord`
    /// (under `$CARGO_TARGET_DIR` or the workspace's `target/`).
    pub fn locate() -> Self {
        let binary = std::env::var_os(BINARY_ENV)
            .map(PathBuf::from)
            .or_else(|| RUNNING_BINARY.get().cloned())
            .or_else(|| {
                let target = std::env::var_os("CARGO_TARGET_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"));
                ["release", "debug"]
                    .iter()
                    .map(|profile| target.join(profile).join("fjord"))
                    .find(|path| support::is_executable(path))
            });
        Self {
            binary,
            threads: RUNNING_THREADS.get().copied(),
            rekey_divisor: None,
            chacha_only: false,
            compression: None,
            mtu: None,
            user: None,
            log_filter: None,
            switch: false,
            metrics: None,
            scraped: false,
        }
    }

    /// The binary at `binary` (tests pass `env!("CARGO_BIN_EXE_fjord")`).
    pub fn at(binary: PathBuf) -> Self {
        Self {
            binary: Some(binary),
            threads: None,
            rekey_divisor: None,
            chacha_only: false,
            compression: None,
            mtu: None,
            user: None,
            log_filter: None,
            switch: false,
            metrics: None,
            scraped: false,
        }
    }

    /// `--threads` for each process, if set.
    pub(crate) fn threads(&self) -> Option<u16> {
        self.threads
    }

    /// Runs each side with `--threads threads`.
    pub fn with_threads(mut self, threads: u16) -> Self {
        self.threads = Some(threads);
        self
    }

    /// Runs each side in switch mode: a TAP interface, frames switched by
    /// MAC address (named `fjord-tap` as a lab system).
    pub fn in_switch_mode(mut self) -> Self {
        self.switch = true;
        self
    }

    /// The `fjord up` file for `side`: in switch mode with `Mode = switch`
    /// and without allowed IPs, which switch mode refuses.
    pub fn config_text(&self, side: &WgSide) -> Zeroizing<String> {
        if !self.switch {
            return side.wg_quick_text();
        }
        let mut side = side.clone();
        for peer in &mut side.peers {
            peer.allowed_ips.clear();
        }
        let mut text = side.wg_quick_text();
        let interface = "[Interface]\n";
        let at = text.find(interface).map_or(0, |at| at + interface.len());
        text.insert_str(at, "Mode = switch\n");
        text
    }

    /// Runs each side with its rekey cycle `divisor` times faster
    /// (`--test-rekey-divisor`), so tests see many rekeys in seconds.
    /// Both ends of a tunnel must agree.
    pub fn with_rekey_divisor(mut self, divisor: u32) -> Self {
        self.rekey_divisor = Some(divisor);
        self
    }

    /// Runs each side with `--cipher chacha20-poly1305`, as the system
    /// `fjord-chacha`.
    pub fn chacha_only(mut self) -> Self {
        self.chacha_only = true;
        self
    }

    /// Runs each side with `--compression lz4`, as the system
    /// `fjord-compress`.
    pub fn compressed(self) -> Self {
        self.compressed_with(Codec::Lz4)
    }

    /// Runs each side with `--compression codec`.
    pub fn compressed_with(mut self, codec: Codec) -> Self {
        self.compression = Some(codec);
        self
    }

    /// Whether each side runs with compression.
    pub fn compresses(&self) -> bool {
        self.compression.is_some()
    }

    /// Runs each side at tunnel MTU `mtu` where the suite leaves the
    /// default (the `mtu` suite sets its own).
    pub fn with_mtu(mut self, mtu: u16) -> Self {
        self.mtu = Some(mtu);
        self
    }

    /// The data cipher two sides of this fjord agree on on this machine.
    pub fn expected_cipher(&self) -> fjord_proto::DataCipher {
        if !self.chacha_only && fjord_proto::aead::hardware_aes() {
            fjord_proto::DataCipher::Aes256Gcm
        } else {
            fjord_proto::DataCipher::ChaCha20Poly1305
        }
    }

    /// Runs each side as `user` once its interface is set up (`--user`).
    pub fn with_user(mut self, user: &str) -> Self {
        self.user = Some(user.to_string());
        self
    }

    /// Runs each side with `--metrics address` (each in its namespace, so
    /// one loopback address serves for both).
    pub fn with_metrics(mut self, address: std::net::SocketAddr) -> Self {
        self.metrics = Some(address);
        self
    }

    /// Runs each side with `--metrics` and scrapes it every second while
    /// it runs, as the system `fjord-metrics`.
    pub fn with_scraped_metrics(mut self) -> Self {
        self.metrics = Some(SCRAPED_METRICS);
        self.scraped = true;
        self
    }

    /// Runs each side with `FJORD_LOG=filter` (`trace` logs everything).
    pub fn with_log_filter(mut self, filter: &str) -> Self {
        self.log_filter = Some(filter.to_string());
        self
    }
}

impl Implementation for Fjord {
    fn name(&self) -> &'static str {
        if self.scraped {
            let plain = self.compression.is_none()
                && self.mtu.is_none()
                && !self.switch
                && !self.chacha_only;
            return if plain { METRICS_NAME } else { OTHER_NAME };
        }
        match (self.compression, self.mtu, self.switch || self.chacha_only) {
            (Some(Codec::Zstd), None, false) => return ZSTD_NAME,
            (Some(Codec::Zstd), Some(JUMBO_MTU), false) => return JUMBO_ZSTD_NAME,
            (Some(Codec::Lz4), Some(JUMBO_MTU), false) => return JUMBO_COMPRESS_NAME,
            (Some(Codec::Lz4) | None, None, _) => {}
            _ => return OTHER_NAME,
        }
        match (self.switch, self.chacha_only, self.compresses()) {
            (false, false, false) => NAME,
            (false, true, false) => CHACHA_NAME,
            (true, false, false) => SWITCH_NAME,
            (true, true, false) => SWITCH_CHACHA_NAME,
            (false, false, true) => COMPRESS_NAME,
            (false, true, true) => CHACHA_COMPRESS_NAME,
            (true, false, true) => SWITCH_COMPRESS_NAME,
            (true, true, true) => SWITCH_CHACHA_COMPRESS_NAME,
        }
    }

    fn settings(&self) -> String {
        let threads = match (self.threads, std::env::var(THREADS_ENV)) {
            (Some(threads), _) => threads.to_string(),
            (None, Ok(threads)) => format!("{threads} (${THREADS_ENV})"),
            (None, Err(_)) => format!("{} (default)", fjord_net::default_threads()),
        };
        let compression = self.compression.map_or("off", Codec::name);
        let mtu = self
            .mtu
            .map(|mtu| format!(", tunnel MTU {mtu}"))
            .unwrap_or_default();
        let metrics = if self.scraped {
            ", metrics scraped every second"
        } else {
            ""
        };
        format!(
            "threads {threads}, cipher {}, compression {compression}{mtu}{metrics}",
            self.expected_cipher()
        )
    }

    fn installed(&self) -> Result<PathBuf, String> {
        support::require_binary(
            self.binary.as_deref(),
            "fjord binary",
            &format!("build it with `cargo build --release -p fjord` or set {BINARY_ENV}"),
        )
    }

    fn start(&self, namespace: &Namespace, side: &WgSide, workdir: &Path) -> SideResult {
        let binary = self.installed().map_err(SystemError::NotInstalled)?;
        let config_path = workdir.join(format!("{}.conf", side.ifname));
        let mut side = side.clone();
        if let Some(mtu) = self.mtu.filter(|_| side.mtu == super::side::DEFAULT_MTU) {
            side.mtu = mtu;
        }
        let side = &side;
        support::write_secret_file(&config_path, &self.config_text(side))?;
        let mut command = namespace.command(&binary);
        command.arg("up").arg(&config_path);
        if let Some(threads) = self.threads {
            command.arg("--threads").arg(threads.to_string());
        }
        if let Some(divisor) = self.rekey_divisor {
            command.arg("--test-rekey-divisor").arg(divisor.to_string());
        }
        if self.chacha_only {
            command.arg("--cipher").arg("chacha20-poly1305");
        }
        if let Some(codec) = self.compression {
            command.arg("--compression").arg(codec.name());
        }
        if let Some(user) = &self.user {
            command.arg("--user").arg(user);
        }
        if let Some(address) = self.metrics {
            command.arg("--metrics").arg(address.to_string());
        }
        if let Some(filter) = &self.log_filter {
            command.env("FJORD_LOG", filter);
        }
        let mut interface =
            Interface::spawn(self.name(), namespace, side, workdir, &mut command, false)?;
        interface.wait_until(&format!("{} up with its addresses", side.ifname), || {
            support::link_is_up(namespace, &side.ifname)
                && interface::addresses_assigned(namespace, side)
        })?;
        if let Some(address) = self.metrics.filter(|_| self.scraped) {
            let scraper = super::scraper::Scraper::start(namespace, address).map_err(|detail| {
                SystemError::StartFailed {
                    system: self.name().to_string(),
                    detail,
                }
            })?;
            interface.keep_scraper(scraper);
        }
        Ok(interface)
    }

    fn handshake_counters(&self, side: &Interface) -> Option<Result<HandshakeCounters, String>> {
        Some(get_fjord(side.ifname()).and_then(|reply| parse_handshake_counters(&reply)))
    }

    fn drop_counters(&self, side: &Interface) -> Option<Result<DropCounters, String>> {
        Some(get_fjord(side.ifname()).and_then(|reply| parse_drop_counters(&reply)))
    }

    fn with_fast_rekeys(&self, divisor: u32) -> Option<Box<dyn Implementation>> {
        Some(Box::new(self.clone().with_rekey_divisor(divisor)))
    }

    fn start_mesh(
        &self,
        hosts: &[MeshHost<'_>],
        workdir: &Path,
    ) -> Result<Box<dyn RunningMesh>, SystemError> {
        if self.switch {
            // A [Mesh] section refuses switch mode.
            return Err(crate::systems::no_mesh_mode(self.name()));
        }
        let mesh = FjordMesh::new(self.clone()).configure(hosts, workdir)?;
        Ok(Box::new(mesh))
    }
}

/// Prefix of the handshake counters in a `get=fjord` reply.
const HANDSHAKE_PREFIX: &str = "handshake_";
/// Prefix of the drop counters (one line per reason counted) in a
/// `get=fjord` reply.
const DROP_PREFIX: &str = "drop_";

/// fjord's own counters and members (`get=fjord`, what `fjord show`
/// prints), asked on `ifname`'s control socket in-process: cheaper than
/// starting `fjord show` when many daemons are polled often.
pub(crate) fn get_fjord(ifname: &str) -> Result<String, String> {
    interface::query(ifname, "get=fjord")
}

/// Whether a `get=fjord` reply ended with `errno=0`.
pub(crate) fn check_reply(reply: &str) -> Result<(), String> {
    match reply.lines().find_map(|line| line.strip_prefix("errno=")) {
        Some("0") => Ok(()),
        Some(errno) => Err(format!("get=fjord failed: errno {errno}")),
        None => Err("get=fjord: the reply ended early".to_string()),
    }
}

/// The counters of a `get=fjord` reply named `prefix…=N`, without the
/// prefix, after checking that the reply succeeded.
fn prefixed_counters<'a>(
    reply: &'a str,
    prefix: &'a str,
) -> Result<impl Iterator<Item = Result<(&'a str, u64), String>> + 'a, String> {
    check_reply(reply)?;
    Ok(reply.lines().filter_map(move |line| {
        let (name, value) = line.strip_prefix(prefix)?.split_once('=')?;
        Some(
            value
                .parse()
                .map(|count| (name, count))
                .map_err(|_| format!("get=fjord: malformed counter {line:?}")),
        )
    }))
}

/// The `handshake_*` counters of a `get=fjord` reply.
fn parse_handshake_counters(reply: &str) -> Result<HandshakeCounters, String> {
    let mut counters = HandshakeCounters::default();
    let mut found = 0;
    for counter in prefixed_counters(reply, HANDSHAKE_PREFIX)? {
        let (name, count) = counter?;
        let slot = match name {
            "initiations_computed" => &mut counters.initiations_computed,
            "cookie_replies" => &mut counters.cookie_replies,
            "cookie_replies_withheld" => &mut counters.cookie_replies_withheld,
            _ => continue,
        };
        *slot = count;
        found += 1;
    }
    if found < 2 {
        return Err("get=fjord: no handshake counters (a fjord before they existed?)".to_string());
    }
    Ok(counters)
}

/// The `drop_*` counters of a `get=fjord` reply (reasons never counted
/// have no line); reasons this build does not know are left out.
fn parse_drop_counters(reply: &str) -> Result<DropCounters, String> {
    let mut counters = DropCounters::default();
    for counter in prefixed_counters(reply, DROP_PREFIX)? {
        let (name, count) = counter?;
        if let Some(reason) = DropReason::from_name(name) {
            counters.count_many(reason, count);
        }
    }
    Ok(counters)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_drop_counters() {
        let reply = "datapath_mtu=1420\ndrop_invalid_mac1=7\ndrop_cookie_required=345\n\
                     drop_of_the_future=1\nhandshake_cookie_replies=345\nerrno=0\n";
        let counters = parse_drop_counters(reply).unwrap();
        assert_eq!(counters.get(DropReason::InvalidMac1), 7);
        assert_eq!(counters.get(DropReason::CookieRequired), 345);
        assert_eq!(counters.total(), 352);
        assert!(parse_drop_counters("drop_invalid_mac1=x\nerrno=0\n").is_err());
        assert!(parse_drop_counters("errno=5\n").is_err());
    }

    #[test]
    fn reads_handshake_counters() {
        let reply = "datapath_mtu=1420\nhandshake_initiations_computed=12\n\
                     handshake_cookie_replies=345\ntx_packets=9\nerrno=0\n";
        let counters = parse_handshake_counters(reply).unwrap();
        assert_eq!(counters.initiations_computed, 12);
        assert_eq!(counters.cookie_replies, 345);
        assert!(parse_handshake_counters("datapath_mtu=1420\nerrno=0\n").is_err());
        assert!(parse_handshake_counters("handshake_cookie_replies=x\nerrno=0\n").is_err());
        assert!(parse_handshake_counters("errno=1\n").is_err());
    }
}
