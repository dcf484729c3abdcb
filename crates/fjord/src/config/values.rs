//! Small validated value types of the configuration, and the interface name
//! taken from a file name.

use std::fmt;
use std::num::NonZeroU16;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use super::error::{ValueError, quote};

/// An interface MTU in bytes, 576 to 65535.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Mtu(u16);

/// `Cipher`: which transport-data ciphers fjord offers other fjord nodes.
/// Plain WireGuard peers always get ChaCha20-Poly1305.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CipherSetting {
    /// `auto`, the default: AES-256-GCM with a fjord peer that offers it
    /// too, where this CPU has hardware AES (3–4× less CPU per byte than
    /// ChaCha20-Poly1305 on such CPUs); ChaCha20-Poly1305 otherwise.
    #[default]
    Auto,
    /// `chacha20-poly1305`: WireGuard's cipher with every peer.
    ChaCha20Poly1305,
}

impl CipherSetting {
    pub const EXPECTED: &'static str = "'auto' or 'chacha20-poly1305'";

    /// The policy the protocol runs with on this machine.
    pub fn policy(self, hardware_aes: bool) -> fjord_proto::CipherPolicy {
        match self {
            CipherSetting::Auto if hardware_aes => fjord_proto::CipherPolicy::OfferAes256Gcm,
            _ => fjord_proto::CipherPolicy::ChaCha20Poly1305Only,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CipherSetting::Auto => "auto",
            CipherSetting::ChaCha20Poly1305 => "chacha20-poly1305",
        }
    }
}

impl FromStr for CipherSetting {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        if text.eq_ignore_ascii_case("auto") {
            Ok(CipherSetting::Auto)
        } else if text.eq_ignore_ascii_case("chacha20-poly1305") {
            Ok(CipherSetting::ChaCha20Poly1305)
        } else {
            Err(ValueError::invalid(text, Self::EXPECTED))
        }
    }
}

impl fmt::Display for CipherSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// `Compression`: whether fjord compresses its data to other fjord
/// nodes. Plain WireGuard peers never get compressed data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CompressionSetting {
    /// `off`, the default: compression makes packet sizes depend on
    /// content, which leaks secrets that share packets with
    /// attacker-controlled data (CRIME, BREACH, VORACLE).
    #[default]
    Off,
    /// `lz4`: LZ4 per packet with each fjord peer that enabled it too,
    /// for low-entropy traffic (text, JSON, logs) on slow links.
    Lz4,
    /// `zstd`: zstd at level 1 per packet with each fjord peer that
    /// enabled it too (LZ4 with one that enabled only LZ4): more ratio for
    /// more CPU, for links slower than the CPU, best with a large MTU.
    Zstd,
}

impl CompressionSetting {
    pub const EXPECTED: &'static str = "'off', 'lz4' or 'zstd'";

    /// The policy the protocol runs with.
    pub fn policy(self) -> fjord_proto::CompressionPolicy {
        match self {
            CompressionSetting::Off => fjord_proto::CompressionPolicy::Off,
            CompressionSetting::Lz4 => fjord_proto::CompressionPolicy::Lz4,
            CompressionSetting::Zstd => fjord_proto::CompressionPolicy::Zstd,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            CompressionSetting::Off => "off",
            CompressionSetting::Lz4 => "lz4",
            CompressionSetting::Zstd => "zstd",
        }
    }
}

impl FromStr for CompressionSetting {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        if text.eq_ignore_ascii_case("off") {
            Ok(CompressionSetting::Off)
        } else if text.eq_ignore_ascii_case("lz4") {
            Ok(CompressionSetting::Lz4)
        } else if text.eq_ignore_ascii_case("zstd") {
            Ok(CompressionSetting::Zstd)
        } else {
            Err(ValueError::invalid(text, Self::EXPECTED))
        }
    }
}

impl fmt::Display for CompressionSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl Mtu {
    /// The smallest accepted MTU: the datagram size every IPv4 host must
    /// accept. IPv6 needs at least 1280 on the path; fjord does not enforce
    /// that here.
    pub const MIN: u16 = 576;

    /// wg-quick's fallback MTU; see [`super::DEFAULT_MTU`].
    pub(super) const WG_QUICK_DEFAULT: Mtu = Mtu(1420);

    /// The switch-mode default; see [`super::DEFAULT_SWITCH_MTU`].
    pub(super) const SWITCH_DEFAULT: Mtu = Mtu(1402);

    pub fn new(bytes: u16) -> Result<Mtu, ValueError> {
        if bytes < Self::MIN {
            return Err(ValueError::OutOfRange {
                value: u64::from(bytes),
                min: u64::from(Self::MIN),
                max: u64::from(u16::MAX),
            });
        }
        Ok(Mtu(bytes))
    }

    /// The MTU in bytes.
    pub fn bytes(self) -> u16 {
        self.0
    }

    pub(super) fn parse(text: &str) -> Result<Mtu, ValueError> {
        let value = parse_decimal(text).ok_or_else(|| ValueError::invalid(text, "a number"))?;
        let bytes = u16::try_from(value).map_err(|_| ValueError::OutOfRange {
            value,
            min: u64::from(Self::MIN),
            max: u64::from(u16::MAX),
        })?;
        Mtu::new(bytes)
    }
}

impl fmt::Display for Mtu {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A `PersistentKeepalive` interval: 1 to 65535 whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeepaliveInterval(NonZeroU16);

impl KeepaliveInterval {
    pub fn from_secs(secs: NonZeroU16) -> Self {
        KeepaliveInterval(secs)
    }

    pub fn secs(self) -> NonZeroU16 {
        self.0
    }

    pub fn as_duration(self) -> Duration {
        Duration::from_secs(u64::from(self.0.get()))
    }

    /// `off` or `0` (no keepalive), or seconds up to 65535.
    pub(super) fn parse_optional(text: &str) -> Result<Option<KeepaliveInterval>, ValueError> {
        if text.eq_ignore_ascii_case("off") {
            return Ok(None);
        }
        let value = parse_decimal(text)
            .ok_or_else(|| ValueError::invalid(text, "a number of seconds or 'off'"))?;
        let secs = u16::try_from(value).map_err(|_| ValueError::OutOfRange {
            value,
            min: 0,
            max: u64::from(u16::MAX),
        })?;
        Ok(NonZeroU16::new(secs).map(KeepaliveInterval))
    }
}

/// Text kept exactly as written, for wg-quick keys fjord stores without
/// interpreting (`DNS`, `Table`, `PostUp`, ...). Guaranteed to survive being
/// written back: not empty, no surrounding whitespace, no line break and
/// no `#`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct VerbatimValue(String);

/// Why text cannot be a [`VerbatimValue`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerbatimValueError {
    #[error("empty value")]
    Empty,
    #[error("value has whitespace at its start or end")]
    SurroundingWhitespace,
    #[error("value contains '#', which would start a comment")]
    CommentCharacter,
    #[error("value contains a line break")]
    LineBreak,
}

impl VerbatimValue {
    pub fn new(text: impl Into<String>) -> Result<Self, VerbatimValueError> {
        let text = text.into();
        if text.is_empty() {
            return Err(VerbatimValueError::Empty);
        }
        if text.trim() != text {
            return Err(VerbatimValueError::SurroundingWhitespace);
        }
        if text.contains('#') {
            return Err(VerbatimValueError::CommentCharacter);
        }
        if text.contains('\n') {
            return Err(VerbatimValueError::LineBreak);
        }
        Ok(VerbatimValue(text))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for VerbatimValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A valid Linux network interface name: 1 to 15 bytes, no `/`, `:` or
/// whitespace, not `.` or `..` (the kernel's `dev_valid_name`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InterfaceName(String);

/// Longest interface name in bytes (`IFNAMSIZ` minus the terminating NUL).
pub const INTERFACE_NAME_MAX_BYTES: usize = 15;

/// Why a name cannot name a Linux interface.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InterfaceNameError {
    #[error("{} has no file name to take an interface name from", path.display())]
    NoFileName { path: PathBuf },
    #[error("interface name is not valid UTF-8")]
    NotUtf8,
    #[error("interface name is empty")]
    Empty,
    #[error(
        "interface name '{name}' is {len} bytes; Linux allows at most {INTERFACE_NAME_MAX_BYTES}"
    )]
    TooLong { name: String, len: usize },
    #[error("interface name '{0}' is not allowed")]
    Reserved(String),
    #[error("interface name '{0}' contains '/', ':' or whitespace")]
    InvalidCharacter(String),
}

impl InterfaceName {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for InterfaceName {
    type Err = InterfaceNameError;

    fn from_str(name: &str) -> Result<Self, Self::Err> {
        if name.is_empty() {
            return Err(InterfaceNameError::Empty);
        }
        if name.len() > INTERFACE_NAME_MAX_BYTES {
            return Err(InterfaceNameError::TooLong {
                name: quote(name),
                len: name.len(),
            });
        }
        if name == "." || name == ".." {
            return Err(InterfaceNameError::Reserved(name.to_string()));
        }
        if name
            .chars()
            .any(|c| c == '/' || c == ':' || c.is_whitespace() || c.is_control())
        {
            return Err(InterfaceNameError::InvalidCharacter(quote(name)));
        }
        Ok(InterfaceName(name.to_string()))
    }
}

impl fmt::Display for InterfaceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The interface a configuration file describes, named after the file as
/// wg-quick does: `/etc/wireguard/wg0.conf` → `wg0`.
pub fn interface_name_from_path(path: &Path) -> Result<InterfaceName, InterfaceNameError> {
    let stem = path
        .file_stem()
        .ok_or_else(|| InterfaceNameError::NoFileName {
            path: path.to_path_buf(),
        })?;
    stem.to_str().ok_or(InterfaceNameError::NotUtf8)?.parse()
}

/// A decimal number of ASCII digits only (no sign, no spaces), or `None`
/// if it is not one or overflows `u64`.
pub(super) fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `FwMark`: `off`, or a 32-bit number in decimal or `0x` hexadecimal.
/// Zero means no mark, as in `wg`.
pub(super) fn parse_fwmark(text: &str) -> Result<Option<std::num::NonZeroU32>, ValueError> {
    if text.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let expected = "a number, 0x-prefixed hex number, or 'off'";
    let hex = text.strip_prefix("0x").or_else(|| text.strip_prefix("0X"));
    let value = match hex {
        Some(digits) if !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_hexdigit()) => {
            u64::from_str_radix(digits, 16).ok()
        }
        Some(_) => None,
        None => parse_decimal(text),
    }
    .ok_or_else(|| ValueError::invalid(text, expected))?;
    let mark = u32::try_from(value).map_err(|_| ValueError::OutOfRange {
        value,
        min: 0,
        max: u64::from(u32::MAX),
    })?;
    Ok(std::num::NonZeroU32::new(mark))
}

/// `ListenPort`: 0 to 65535.
pub(super) fn parse_listen_port(text: &str) -> Result<u16, ValueError> {
    let value = parse_decimal(text).ok_or_else(|| ValueError::invalid(text, "a port number"))?;
    u16::try_from(value).map_err(|_| ValueError::OutOfRange {
        value,
        min: 0,
        max: u64::from(u16::MAX),
    })
}

/// `FallbackCarrier`: how datagrams travel when UDP to a fjord peer is
/// blocked. Both ends of a carrier must use the same kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FallbackCarrier {
    /// TCP-shaped packets over a raw socket (`fake-tcp`): datagram
    /// semantics, so the tunnel's own TCP keeps its speed under loss;
    /// needs CAP_NET_RAW and IPv4.
    #[default]
    FakeTcp,
    /// A real TCP connection (`tcp`): passes even firewalls that proxy
    /// TCP, needs no privileges, but its retransmissions stall the
    /// tunnel under heavy loss.
    Tcp,
}

impl FallbackCarrier {
    pub(super) fn parse(text: &str) -> Result<Self, ValueError> {
        match text {
            "fake-tcp" => Ok(Self::FakeTcp),
            "tcp" => Ok(Self::Tcp),
            _ => Err(ValueError::invalid(text, "fake-tcp or tcp")),
        }
    }
}

impl fmt::Display for FallbackCarrier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::FakeTcp => "fake-tcp",
            Self::Tcp => "tcp",
        })
    }
}

/// `FallbackPort`: a TCP port, 1 to 65535 (0, "any free port", would be
/// a port no peer knows).
pub(super) fn parse_fallback_port(text: &str) -> Result<std::num::NonZeroU16, ValueError> {
    let value = parse_decimal(text).ok_or_else(|| ValueError::invalid(text, "a port number"))?;
    u16::try_from(value)
        .ok()
        .and_then(std::num::NonZeroU16::new)
        .ok_or(ValueError::OutOfRange {
            value,
            min: 1,
            max: u64::from(u16::MAX),
        })
}

/// `SaveConfig`: `true` or `false`, any case, as wg-quick reads it.
pub(super) fn parse_bool(text: &str) -> Result<bool, ValueError> {
    if text.eq_ignore_ascii_case("true") {
        Ok(true)
    } else if text.eq_ignore_ascii_case("false") {
        Ok(false)
    } else {
        Err(ValueError::invalid(text, "true or false"))
    }
}

/// `Metrics` (fjord only) and `--metrics`: where the Prometheus endpoint
/// listens, an IP address and a port from 1 to 65535 (`127.0.0.1:9587`,
/// `[::1]:9587`). A name is refused: the endpoint is bound once, before
/// any resolver could be trusted to answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct MetricsAddress(std::net::SocketAddr);

impl MetricsAddress {
    pub const EXPECTED: &'static str = "an IP address and port, like 127.0.0.1:9587";

    pub fn socket_address(self) -> std::net::SocketAddr {
        self.0
    }
}

impl FromStr for MetricsAddress {
    type Err = ValueError;

    fn from_str(text: &str) -> Result<Self, ValueError> {
        let address: std::net::SocketAddr = text
            .parse()
            .map_err(|_| ValueError::invalid(text, Self::EXPECTED))?;
        if address.port() == 0 {
            return Err(ValueError::OutOfRange {
                value: 0,
                min: 1,
                max: u64::from(u16::MAX),
            });
        }
        Ok(MetricsAddress(address))
    }
}

impl fmt::Display for MetricsAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
