//! The client side: `fjord show` asks any userspace implementation.

use std::io::Write;
use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fjord_proto::PublicKey;
use zeroize::Zeroizing;

use super::lines::SecretLines;
use super::{SOCKET_DIRECTORY, unhex32};

#[derive(Debug, thiserror::Error)]
pub enum UapiClientError {
    #[error("no interface {0} (no socket at {1})")]
    NoSuchInterface(String, PathBuf),
    #[error("talking to {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path} answered errno={errno}")]
    Errno { path: PathBuf, errno: i32 },
    #[error("{path} sent a malformed line: {line}")]
    Malformed { path: PathBuf, line: String },
}

/// A `get=1` reply, parsed.
#[derive(Debug, Clone, Default)]
pub struct UapiInterface {
    pub has_private_key: bool,
    pub public_key: Option<PublicKey>,
    pub listen_port: u16,
    pub fwmark: u32,
    pub peers: Vec<UapiPeer>,
    /// fjord's own counters, when the implementation is fjord.
    pub counters: Vec<(String, u64)>,
    /// Mesh members, when the implementation is fjord in a mesh.
    pub members: Vec<crate::status::MemberLine>,
    /// Peers that fall back to a carrier, when the implementation is fjord.
    pub fallback: Vec<crate::status::FallbackLine>,
    /// The domain of members' names (`[Mesh] Domain`), if fjord has one.
    pub domain: Option<String>,
    /// The exit node fjord chose (`[Mesh] ExitNode`), if any.
    pub exit_node: Option<crate::status::ExitNodeLine>,
}

#[derive(Debug, Clone)]
pub struct UapiPeer {
    pub public_key: PublicKey,
    pub has_preshared_key: bool,
    pub endpoint: Option<SocketAddr>,
    pub last_handshake: Option<Duration>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
    pub persistent_keepalive: u16,
    pub allowed_ips: Vec<String>,
    /// The data cipher toward the peer, when the implementation is fjord
    /// and a session is up.
    pub cipher: Option<String>,
    /// Compression toward the peer, likewise.
    pub compression: Option<crate::status::PeerCompression>,
}

pub fn socket_path(interface: &str) -> PathBuf {
    Path::new(SOCKET_DIRECTORY).join(format!("{interface}.sock"))
}

/// Interface names with a configuration socket, sorted. A socket nobody
/// answers on is stale (its daemon died, or ran as another user and could
/// not remove it) and is removed, as `wg` does.
pub fn socket_paths() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(SOCKET_DIRECTORY) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let interface = name.strip_suffix(".sock")?;
            if let Err(error) = UnixStream::connect(entry.path())
                && error.kind() == std::io::ErrorKind::ConnectionRefused
            {
                let _ = std::fs::remove_file(entry.path());
                return None;
            }
            Some(interface.to_string())
        })
        .collect();
    names.sort();
    names
}

/// Sends `request`; the reply's lines up to `errno=0`, wiped when dropped
/// (a `get=1` reply holds the private key).
fn request(path: &Path, request: &str) -> Result<Zeroizing<Vec<String>>, UapiClientError> {
    let (lines, errno) = request_with_errno(path, request)?;
    if errno != 0 {
        return Err(UapiClientError::Errno {
            path: path.to_path_buf(),
            errno,
        });
    }
    Ok(lines)
}

/// The reply's lines before `errno=N`, and N.
fn request_with_errno(
    path: &Path,
    request: &str,
) -> Result<(Zeroizing<Vec<String>>, i32), UapiClientError> {
    let io = |source| UapiClientError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut stream = UnixStream::connect(path).map_err(io)?;
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(io)?;
    stream.write_all(request.as_bytes()).map_err(io)?;
    let mut lines = Zeroizing::new(Vec::new());
    let mut reader = SecretLines::new(&stream);
    let mut errno = 0;
    while let Some(mut line) = reader.next_line().map_err(io)? {
        if line.is_empty() {
            break;
        }
        if let Some(value) = line.strip_prefix("errno=") {
            errno = value.parse().unwrap_or(-1);
            break;
        }
        lines.push(std::mem::take(&mut *line));
    }
    Ok((lines, errno))
}

/// `fjord reload IFACE`: asks the `fjord up` that serves `interface` to
/// re-read its file. `Ok(Ok(summary))` when it did, `Ok(Err(reason))`
/// when it refused (the running configuration unchanged).
pub fn reload(interface: &str) -> Result<Result<String, String>, UapiClientError> {
    let path = socket_path(interface);
    if !path.exists() {
        return Err(UapiClientError::NoSuchInterface(
            interface.to_string(),
            path,
        ));
    }
    // Reading the file and applying it takes longer than a `get`.
    let (lines, errno) = request_with_errno(&path, "reload=fjord\n\n")?;
    let field = |key: &str| {
        lines
            .iter()
            .find_map(|line| line.strip_prefix(key).map(str::to_string))
    };
    if errno == 0 {
        return Ok(Ok(field("reloaded=").unwrap_or_default()));
    }
    Ok(Err(field("reload_error=").unwrap_or_else(|| {
        format!("{interface} does not reload (errno {errno}): only an interface started with `fjord up CONFIG` has a file to read again")
    })))
}

/// Asks `interface`'s implementation for its configuration and state.
pub fn query(interface: &str) -> Result<UapiInterface, UapiClientError> {
    let path = socket_path(interface);
    if !path.exists() {
        return Err(UapiClientError::NoSuchInterface(
            interface.to_string(),
            path,
        ));
    }
    let lines = request(&path, "get=1\n\n")?;
    let mut parsed = parse_get(&path, &lines)?;
    // Only fjord answers this; others reply with an errno, which is fine.
    if let Ok(counter_lines) = request(&path, "get=fjord\n\n") {
        parsed.counters = counter_lines
            .iter()
            .filter_map(|line| {
                let (key, value) = line.split_once('=')?;
                Some((key.to_string(), value.parse().ok()?))
            })
            .collect();
        parsed.members = counter_lines
            .iter()
            .filter_map(|line| crate::status::MemberLine::parse(line.strip_prefix("member=")?))
            .collect();
        parsed.domain = counter_lines
            .iter()
            .find_map(|line| Some(line.strip_prefix(super::NAMES_DOMAIN_PREFIX)?.to_string()));
        parsed.exit_node = counter_lines.iter().find_map(|line| {
            crate::status::ExitNodeLine::parse(
                line.strip_prefix(fjord_mesh::report::EXIT_NODE_PREFIX)?,
            )
        });
        parsed.fallback = counter_lines
            .iter()
            .filter_map(|line| crate::status::FallbackLine::parse(line.strip_prefix("fallback=")?))
            .collect();
        for (line, key, cipher) in peer_lines(&counter_lines, super::PEER_CIPHER_PREFIX) {
            let peer = find_peer(&mut parsed.peers, &path, line, key)?;
            if let Some(peer) = peer {
                peer.cipher = Some(cipher.to_string());
            }
        }
        for (line, key, fields) in peer_lines(&counter_lines, super::PEER_COMPRESSION_PREFIX) {
            let compression = crate::status::PeerCompression::parse(fields).ok_or_else(|| {
                UapiClientError::Malformed {
                    path: path.clone(),
                    line: line.clone(),
                }
            })?;
            if let Some(peer) = find_peer(&mut parsed.peers, &path, line, key)? {
                peer.compression = Some(compression);
            }
        }
    }
    Ok(parsed)
}

/// The `prefix<public key> <value>` lines among `lines`, as (line, key
/// text, value).
fn peer_lines<'a>(
    lines: &'a [String],
    prefix: &'a str,
) -> impl Iterator<Item = (&'a String, &'a str, &'a str)> {
    lines.iter().filter_map(move |line| {
        let (key, value) = line.strip_prefix(prefix)?.split_once(' ')?;
        Some((line, key, value))
    })
}

/// The peer whose base64 public key is `key` (from `line`), if listed.
fn find_peer<'a>(
    peers: &'a mut [UapiPeer],
    path: &Path,
    line: &str,
    key: &str,
) -> Result<Option<&'a mut UapiPeer>, UapiClientError> {
    let key = key
        .parse::<PublicKey>()
        .map_err(|_| UapiClientError::Malformed {
            path: path.to_path_buf(),
            line: line.to_string(),
        })?;
    Ok(peers.iter_mut().find(|peer| peer.public_key == key))
}

/// Parses the lines of a `get=1` reply (without `errno=`) from `path`.
pub fn parse_get(path: &Path, lines: &[String]) -> Result<UapiInterface, UapiClientError> {
    let malformed = |line: &str| UapiClientError::Malformed {
        path: path.to_path_buf(),
        // A key line is named, never shown: it may hold the private key.
        line: match line.split_once('=') {
            Some((key @ ("private_key" | "preshared_key"), _)) => format!("{key}=(hidden)"),
            _ => line.to_string(),
        },
    };
    let mut interface = UapiInterface::default();
    for line in lines {
        let (key, value) = line.split_once('=').ok_or_else(|| malformed(line))?;
        if key == "public_key" {
            let bytes = unhex32(value).ok_or_else(|| malformed(line))?;
            interface.peers.push(UapiPeer {
                public_key: PublicKey::from_bytes(bytes),
                has_preshared_key: false,
                endpoint: None,
                last_handshake: None,
                rx_bytes: 0,
                tx_bytes: 0,
                persistent_keepalive: 0,
                allowed_ips: Vec::new(),
                cipher: None,
                compression: None,
            });
            continue;
        }
        let number = || value.parse::<u64>().map_err(|_| malformed(line));
        match interface.peers.last_mut() {
            None => match key {
                "private_key" => {
                    let bytes =
                        zeroize::Zeroizing::new(unhex32(value).ok_or_else(|| malformed(line))?);
                    interface.has_private_key = *bytes != [0u8; 32];
                    if interface.has_private_key {
                        let key = fjord_proto::PrivateKey::from_bytes(*bytes);
                        interface.public_key = Some(key.public_key());
                    }
                }
                "listen_port" => interface.listen_port = number()? as u16,
                "fwmark" => interface.fwmark = number()? as u32,
                _ => {}
            },
            Some(peer) => match key {
                "preshared_key" => peer.has_preshared_key = value.chars().any(|c| c != '0'),
                "endpoint" => peer.endpoint = value.parse().ok(),
                "last_handshake_time_sec" => {
                    let secs = number()?;
                    peer.last_handshake = (secs != 0).then(|| Duration::from_secs(secs));
                }
                "last_handshake_time_nsec" => {
                    let nanos = number()?;
                    if let Some(at) = peer.last_handshake.as_mut() {
                        *at += Duration::from_nanos(nanos);
                    }
                }
                "rx_bytes" => peer.rx_bytes = number()?,
                "tx_bytes" => peer.tx_bytes = number()?,
                "persistent_keepalive_interval" => peer.persistent_keepalive = number()? as u16,
                "allowed_ip" => peer.allowed_ips.push(value.to_string()),
                _ => {}
            },
        }
    }
    Ok(interface)
}
