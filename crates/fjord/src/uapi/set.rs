//! `set=1` requests: parsed completely into a [`SetRequest`] before anything
//! is applied, so a bad line anywhere leaves the interface untouched.
//!
//! Interface keys (`private_key`, `listen_port`, `fwmark`, `replace_peers`)
//! come before the first `public_key`; every key after a `public_key`
//! belongs to that peer. Errors carry the errno `wg` prints.

use std::net::SocketAddr;

use fjord_mesh::Cidr;
use fjord_proto::{PresharedKey, PrivateKey, PublicKey};

use super::unhex32;

/// A rejected request, with the errno to answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason} (errno {errno})")]
pub struct SetError {
    pub errno: i32,
    pub reason: String,
}

impl SetError {
    pub fn invalid(reason: impl Into<String>) -> Self {
        Self {
            errno: libc::EINVAL,
            reason: reason.into(),
        }
    }

    pub fn protocol(reason: impl Into<String>) -> Self {
        Self {
            errno: libc::EPROTO,
            reason: reason.into(),
        }
    }
}

/// A private key change: `Some(None)` removes the key (all-zero key).
pub type PrivateKeyChange = Option<Option<PrivateKey>>;

#[derive(Debug, Default)]
pub struct SetRequest {
    pub private_key: PrivateKeyChange,
    pub listen_port: Option<u16>,
    /// `Some(0)` clears the mark.
    pub fwmark: Option<u32>,
    pub replace_peers: bool,
    pub peers: Vec<PeerChange>,
}

#[derive(Debug, Clone)]
pub struct PeerChange {
    pub public_key: PublicKey,
    pub remove: bool,
    pub update_only: bool,
    /// `Some(zero)` clears the key.
    pub preshared_key: Option<PresharedKey>,
    pub endpoint: Option<SocketAddr>,
    /// Seconds; `Some(0)` turns it off.
    pub persistent_keepalive: Option<u16>,
    pub replace_allowed_ips: bool,
    pub allowed_ips: Vec<Cidr>,
}

impl PeerChange {
    fn new(public_key: PublicKey) -> Self {
        Self {
            public_key,
            remove: false,
            update_only: false,
            preshared_key: None,
            endpoint: None,
            persistent_keepalive: None,
            replace_allowed_ips: false,
            allowed_ips: Vec::new(),
        }
    }
}

fn flag(key: &str, value: &str) -> Result<bool, SetError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(SetError::invalid(format!(
            "{key}={value}: expected true or false"
        ))),
    }
}

fn number<T: std::str::FromStr>(key: &str, value: &str) -> Result<T, SetError> {
    value
        .parse()
        .map_err(|_| SetError::invalid(format!("{key}={value}: not a valid number")))
}

fn key_bytes(key: &str, value: &str) -> Result<[u8; 32], SetError> {
    unhex32(value).ok_or_else(|| SetError::invalid(format!("{key}: expected 64 hex digits")))
}

/// `[v6]:port` or `v4:port`, as wg sends endpoints.
fn endpoint(value: &str) -> Result<SocketAddr, SetError> {
    value
        .parse::<SocketAddr>()
        .map(crate::uapi::canonical_endpoint)
        .map_err(|_| SetError::invalid(format!("endpoint={value}: expected address:port")))
}

/// Parses the lines of a `set=1` request (without the blank line).
pub fn parse_set(lines: &[String]) -> Result<SetRequest, SetError> {
    let mut request = SetRequest::default();
    for line in lines {
        let (key, value) = line
            .split_once('=')
            // Not echoed: a mangled `private_key` line would put the key in the log.
            .ok_or_else(|| SetError::protocol("a line without '='"))?;
        if key == "public_key" {
            let public_key = PublicKey::from_bytes(key_bytes(key, value)?);
            request.peers.push(PeerChange::new(public_key));
            continue;
        }
        let Some(peer) = request.peers.last_mut() else {
            match key {
                "private_key" => {
                    let bytes = zeroize::Zeroizing::new(key_bytes(key, value)?);
                    request.private_key =
                        Some((*bytes != [0u8; 32]).then(|| PrivateKey::from_raw_bytes(*bytes)));
                }
                "listen_port" => request.listen_port = Some(number(key, value)?),
                "fwmark" => request.fwmark = Some(number(key, value)?),
                "replace_peers" => request.replace_peers = flag(key, value)?,
                _ => return Err(SetError::invalid(format!("unknown interface key '{key}'"))),
            }
            continue;
        };
        match key {
            "remove" => peer.remove = flag(key, value)?,
            "update_only" => peer.update_only = flag(key, value)?,
            "preshared_key" => {
                let bytes = zeroize::Zeroizing::new(key_bytes(key, value)?);
                peer.preshared_key = Some(PresharedKey::from_bytes(*bytes));
            }
            "endpoint" => peer.endpoint = Some(endpoint(value)?),
            "persistent_keepalive_interval" => {
                peer.persistent_keepalive = Some(number(key, value)?)
            }
            "replace_allowed_ips" => peer.replace_allowed_ips = flag(key, value)?,
            "allowed_ip" => {
                let cidr: Cidr = value
                    .parse()
                    .map_err(|error| SetError::invalid(format!("allowed_ip={value}: {error}")))?;
                peer.allowed_ips.push(cidr);
            }
            "protocol_version" => {
                if value != "1" {
                    return Err(SetError::invalid(format!(
                        "protocol_version={value}: only 1 is known"
                    )));
                }
            }
            _ => return Err(SetError::invalid(format!("unknown peer key '{key}'"))),
        }
    }
    Ok(request)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(text: &str) -> Vec<String> {
        text.lines().map(str::to_string).collect()
    }

    const KEY_A: &str = "e84b5a6d2717c1003a13b431570353dbaca9146cf150c5f8575680feba52027a";
    const KEY_B: &str = "b85996fecc9c7f1fc6d2572a76eda11d59bcd20be8e543b15ce4bd85a8e75a33";

    #[test]
    fn parses_the_protocol_example() {
        let request = parse_set(&lines(&format!(
            "private_key={KEY_A}\nfwmark=0\nlisten_port=12912\nreplace_peers=true\n\
             public_key={KEY_B}\npreshared_key={KEY_A}\nreplace_allowed_ips=true\nallowed_ip=198.19.4.4/32\n\
             endpoint=[fd00::33]:51820\n\
             public_key={KEY_A}\nupdate_only=true\nendpoint=198.18.22.19:3233\npersistent_keepalive_interval=111\n\
             allowed_ip=198.19.4.6/32\nprotocol_version=1\n\
             public_key={KEY_B}\nremove=true\nendpoint=[fd00::33%2]:51820"
        )))
        .unwrap();
        assert!(matches!(request.private_key, Some(Some(_))));
        assert_eq!(request.listen_port, Some(12912));
        assert_eq!(request.fwmark, Some(0));
        assert!(request.replace_peers);
        assert_eq!(request.peers.len(), 3);
        assert!(request.peers[2].remove);
        assert!(request.peers[0].replace_allowed_ips);
        assert_eq!(
            request.peers[0].endpoint,
            Some("[fd00::33]:51820".parse().unwrap())
        );
        assert!(request.peers[1].update_only);
        assert_eq!(request.peers[1].persistent_keepalive, Some(111));
    }

    #[test]
    fn zero_private_key_means_remove() {
        let request = parse_set(&lines(&format!("private_key={}", "0".repeat(64)))).unwrap();
        assert!(matches!(request.private_key, Some(None)));
    }

    #[test]
    fn refuses_bad_input_with_errno() {
        for bad in [
            "listen_port=70000".to_string(),
            "private_key=zz".to_string(),
            "bogus=1".to_string(),
            format!("public_key={KEY_A}\nallowed_ip=198.19.0.0/33"),
            format!("public_key={KEY_A}\nendpoint=nowhere"),
            format!("public_key={KEY_A}\nprotocol_version=2"),
            format!("public_key={KEY_A}\nremove=maybe"),
            format!("public_key={KEY_A}\nlisten_port=1"),
        ] {
            assert_eq!(
                parse_set(&lines(&bad)).unwrap_err().errno,
                libc::EINVAL,
                "{bad}"
            );
        }
        assert_eq!(
            parse_set(&lines("garbage")).unwrap_err().errno,
            libc::EPROTO
        );
    }

    #[test]
    fn v4_mapped_endpoints_become_v4() {
        let request = parse_set(&lines(&format!(
            "public_key={KEY_A}\nendpoint=[::ffff:198.18.0.1]:5"
        )))
        .unwrap();
        assert_eq!(
            request.peers[0].endpoint,
            Some("198.18.0.1:5".parse().unwrap())
        );
    }
}
