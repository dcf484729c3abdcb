//! The configuration file: wg-quick's `.conf` format, read into validated
//! types.
//!
//! A file has one `[Interface]` section, any number of `[Peer]` sections,
//! and at most one `[Mesh]` section (fjord's own; see `mesh.rs`).
//! The reading rules are those of `wg` and `wg-quick` (`parse.rs` has the
//! details): `#` starts a comment anywhere on a line, section names and keys
//! are case-insensitive, list keys (`AllowedIPs`, `Address`, `DNS`) take
//! comma-separated values and may repeat. Unlike `wg`, fjord refuses what it
//! does not understand: unknown keys and sections, a key given twice, two
//! peers with the same public key.
//!
//! Every value is parsed into a type that cannot hold an invalid value
//! ([`PrivateKey`], [`Cidr`], [`Mtu`], [`Endpoint`], ...), so code that
//! receives a [`Config`] never re-checks it. Hostnames in `Endpoint` are
//! resolved once, when the file is read.
//!
//! [`Config::to_wg_format`] writes a config back in the same syntax, and
//! parsing that text gives back an equal `Config`.
//!
//! Secrets: the key types never print key material through `Debug`, error
//! messages never quote a value of `PrivateKey` or `PresharedKey`, and text
//! holding keys is kept in [`Zeroizing`] buffers.

mod endpoint;
mod error;
mod keys;
mod mesh;
mod mode;
mod parse;
mod values;
mod write;

#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use fjord_mesh::Cidr;
use fjord_proto::{PresharedKey, PrivateKey, PublicKey};
use zeroize::Zeroizing;

pub use endpoint::{Endpoint, EndpointError, Resolve, SystemResolver};
pub use error::{ConfigError, Location, Problem, SectionKind, ValueError};
pub use mesh::{BootstrapMember, FileSetting, LoadedMesh, MeshSection};
pub use mode::InterfaceMode;
pub use values::{
    CipherSetting, CompressionSetting, FallbackCarrier, InterfaceName, InterfaceNameError,
    KeepaliveInterval, MetricsAddress, Mtu, VerbatimValue, VerbatimValueError,
    interface_name_from_path,
};

/// The MTU of the tunnel interface when the file sets none: 1420, as
/// wg-quick falls back to. That is a 1500-byte path minus 80 bytes for the
/// largest outer header (IPv6 40 + UDP 8 + WireGuard 32), so tunnelled
/// packets are not fragmented on ordinary Ethernet paths; the trade-off is
/// 60 bytes per packet lost on IPv4-only paths, which could use 1440.
pub const DEFAULT_MTU: Mtu = Mtu::WG_QUICK_DEFAULT;

/// The MTU of a switch-mode (TAP) interface when the file sets none: 1402,
/// so that a full frame's datagram is as large as a full packet's in
/// router mode. The MTU of an Ethernet interface counts the IP packet, not
/// the frame: a full frame adds its Ethernet header (14 bytes) and fjord
/// its frame header (4), so 1402 + 18 + 32 = 1452 bytes of UDP payload,
/// 1500 behind IPv6 and UDP headers. A VLAN-tagged frame adds 4 more and
/// is fragmented on such a path.
pub const DEFAULT_SWITCH_MTU: Mtu = Mtu::SWITCH_DEFAULT;

/// A whole configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub interface: InterfaceSection,
    /// Peers in file order; no two share a public key, and none has the
    /// interface's own public key.
    pub peers: Vec<PeerSection>,
    /// `[Mesh]`, if the interface is a member of a fjord mesh.
    pub mesh: Option<MeshSection>,
}

/// The `[Interface]` section.
#[derive(Debug, Clone)]
pub struct InterfaceSection {
    /// `PrivateKey`, required. Kept exactly as written (`wg` accepts
    /// unclamped keys too).
    pub private_key: PrivateKey,
    /// `ListenPort`. `None` (the default) lets the kernel pick a random
    /// port, as does `Some(0)`; a fixed port is needed only by peers that
    /// others connect to.
    pub listen_port: Option<u16>,
    /// `FwMark` for outgoing encrypted packets. `None` (the default, also
    /// written `off` or `0`) marks nothing.
    pub fwmark: Option<std::num::NonZeroU32>,
    /// `Address`: the addresses given to the interface, host bits kept.
    pub addresses: Vec<Cidr>,
    /// `MTU`, if the file sets one; see [`InterfaceSection::mtu`].
    pub mtu: Option<Mtu>,
    /// `FallbackPort` (fjord only): the TCP port this node accepts
    /// carrier connections on, from fjord peers whose UDP is blocked.
    /// `None` (the default) accepts none; 443 passes most firewalls that
    /// allow only TCP, at the cost of the port (no HTTPS server beside).
    pub fallback_port: Option<std::num::NonZeroU16>,
    /// `FallbackCarrier` (fjord only): how datagrams travel when UDP to a
    /// fjord peer is blocked, `fake-tcp` or `tcp`; peers must use the
    /// same. `None` means the default, [`FallbackCarrier::FakeTcp`] (see
    /// docs/design.md for the measurements behind the choice).
    pub fallback_carrier: Option<FallbackCarrier>,
    /// `Cipher`, if the file sets one (fjord's key; `auto` when absent).
    pub cipher: Option<CipherSetting>,
    /// `Mode`: router (the default) or switch.
    pub mode: InterfaceMode,
    /// `Compression`, if the file sets one (fjord's key; `off` when absent).
    pub compression: Option<CompressionSetting>,
    /// `Metrics` (fjord only): where the Prometheus endpoint listens.
    /// `None` (the default) serves no metrics; `--metrics` wins over it.
    /// The endpoint has no authentication and names every peer, so keep
    /// it on loopback or a management network.
    pub metrics: Option<MetricsAddress>,
    /// Keys only wg-quick reads, kept as written.
    pub wg_quick: WgQuick,
}

/// wg-quick's own `[Interface]` keys. They are stored verbatim so that an
/// existing wg-quick file loads unchanged and can be written back; fjord may
/// not act on all of them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WgQuick {
    /// `DNS`: servers and search domains, in file order.
    pub dns: Vec<VerbatimValue>,
    /// `Table`: `off`, `auto`, or a routing table. `None` means `auto`.
    pub table: Option<VerbatimValue>,
    /// `PreUp` commands, in file order (the key may repeat).
    pub pre_up: Vec<VerbatimValue>,
    /// `PostUp` commands, in file order.
    pub post_up: Vec<VerbatimValue>,
    /// `PreDown` commands, in file order.
    pub pre_down: Vec<VerbatimValue>,
    /// `PostDown` commands, in file order.
    pub post_down: Vec<VerbatimValue>,
    /// `SaveConfig`: whether wg-quick writes the running state back to the
    /// file on `down`. Defaults to false.
    pub save_config: bool,
}

/// One `[Peer]` section.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerSection {
    /// `PublicKey`, required and unique within the file.
    pub public_key: PublicKey,
    /// `PresharedKey`; `None` (the default) means the all-zero key.
    pub preshared_key: Option<PresharedKey>,
    /// `Endpoint`; `None` (the default) waits for the peer to connect first.
    pub endpoint: Option<Endpoint>,
    /// `AllowedIPs`, in file order, host bits kept as written.
    pub allowed_ips: Vec<Cidr>,
    /// `PersistentKeepalive`; `None` (the default, also written `off` or
    /// `0`) sends keepalives only when data needs acknowledging.
    pub persistent_keepalive: Option<KeepaliveInterval>,
    /// `FallbackPort` (fjord only): the peer runs fjord and accepts carrier
    /// connections on this TCP port at its endpoint's address, used when
    /// UDP to it goes unanswered. `None` (the default) keeps it on UDP
    /// only, as a plain WireGuard peer must be.
    pub fallback_port: Option<std::num::NonZeroU16>,
    /// `Groups` (fjord only): puts the peer inside the network policy, in
    /// these groups. `None` (the default) leaves a peer that is no mesh
    /// member outside it: every packet passes, as in plain WireGuard.
    pub groups: Option<Vec<fjord_mesh::Group>>,
}

impl Config {
    /// Reads and parses the file at `path`, resolving `Endpoint` hostnames
    /// with the system resolver.
    ///
    /// Refuses a file that holds a private or preshared key and can be read
    /// or written by group or others (wg-quick only warns).
    pub fn load(path: impl AsRef<Path>) -> Result<Config, ConfigError> {
        let path = path.as_ref();
        let read_error = |error| ConfigError::Read {
            path: path.to_path_buf(),
            error,
        };
        let mut file = File::open(path).map_err(read_error)?;
        // Taken from the open file, so the mode checked below is the mode of
        // the file that was read.
        let metadata = file.metadata().map_err(read_error)?;
        let capacity = usize::try_from(metadata.len())
            .unwrap_or(0)
            .saturating_add(1);
        let mut bytes = Zeroizing::new(Vec::with_capacity(capacity));
        file.read_to_end(&mut bytes).map_err(read_error)?;

        let source_name = path.display().to_string();
        let text = match std::str::from_utf8(&bytes) {
            Ok(text) => text,
            Err(error) => {
                let valid = &bytes[..error.valid_up_to()];
                let line = 1 + valid.iter().filter(|&&b| b == b'\n').count();
                return Err(ConfigError::invalid(
                    &source_name,
                    Some(line),
                    Problem::NotUtf8,
                ));
            }
        };
        let config = Config::parse(text, &source_name)?;

        // Every valid config holds a PrivateKey, so every config file must
        // be private to its owner.
        let mode = metadata.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(ConfigError::InsecurePermissions {
                path: path.to_path_buf(),
                mode,
            });
        }
        Ok(config)
    }

    /// Parses configuration text. `source_name` names the text in error
    /// messages (a file name, or `<stdin>`). Hostnames in `Endpoint` are
    /// resolved with the system resolver.
    pub fn parse(text: &str, source_name: &str) -> Result<Config, ConfigError> {
        parse::parse(text, source_name, &SystemResolver)
    }

    /// [`Config::parse`] with a chosen resolver for `Endpoint` hostnames.
    pub fn parse_with_resolver(
        text: &str,
        source_name: &str,
        resolver: &dyn Resolve,
    ) -> Result<Config, ConfigError> {
        parse::parse(text, source_name, resolver)
    }

    /// The config in wg-quick syntax, keys in canonical spelling, one
    /// section after another. Parsing the result gives back an equal
    /// `Config`. The text holds the private key, hence `Zeroizing`.
    pub fn to_wg_format(&self) -> Zeroizing<String> {
        write::to_wg_format(self)
    }
}

impl InterfaceSection {
    /// The MTU to use: the file's, or [`DEFAULT_MTU`] ([`DEFAULT_SWITCH_MTU`]
    /// in switch mode).
    pub fn mtu(&self) -> Mtu {
        self.mtu.unwrap_or(match self.mode {
            InterfaceMode::Router => DEFAULT_MTU,
            InterfaceMode::Switch => DEFAULT_SWITCH_MTU,
        })
    }
}

/// Compares private keys by their bytes. Not constant-time: this is for
/// comparing configurations, not for authenticating anything.
impl PartialEq for InterfaceSection {
    fn eq(&self, other: &Self) -> bool {
        self.private_key.to_base64() == other.private_key.to_base64()
            && self.listen_port == other.listen_port
            && self.fwmark == other.fwmark
            && self.addresses == other.addresses
            && self.mtu == other.mtu
            && self.fallback_port == other.fallback_port
            && self.fallback_carrier == other.fallback_carrier
            && self.cipher == other.cipher
            && self.mode == other.mode
            && self.compression == other.compression
            && self.metrics == other.metrics
            && self.wg_quick == other.wg_quick
    }
}

impl Eq for InterfaceSection {}

impl PeerSection {
    /// The peer as the WireGuard core takes it.
    pub fn to_proto(&self) -> fjord_proto::PeerConfig {
        fjord_proto::PeerConfig {
            public_key: self.public_key,
            preshared_key: self
                .preshared_key
                .clone()
                .unwrap_or_else(PresharedKey::zero),
            endpoint: self.endpoint.as_ref().map(Endpoint::address),
            persistent_keepalive: self
                .persistent_keepalive
                .map(KeepaliveInterval::as_duration),
        }
    }
}
