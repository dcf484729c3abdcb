//! The two files each charon reads, written per run: `strongswan.conf`
//! (the daemon: plugins, logging, control socket) and `swanctl.conf` (the
//! connection and its key), and where a side keeps them.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use crate::systems::WorkDir;
use crate::topology::{LEFT_OVERLAY, LEFT_UNDERLAY, RIGHT_OVERLAY, RIGHT_UNDERLAY};

/// IKE proposal: AES-256-GCM, HMAC-SHA-256 as PRF, X25519.
const IKE_PROPOSAL: &str = "aes256gcm16-prfsha256-x25519";
/// ESP proposal (the data path).
pub(super) const ESP_PROPOSAL: &str = "aes256gcm16";
/// How `swanctl --list-sas` names [`ESP_PROPOSAL`] on an installed SA.
pub(super) const ESP_LISTED: &str = "ESP:AES_GCM_16-256";
/// The connection and child SA name in `swanctl.conf`.
pub(super) const CONNECTION: &str = "lab";
/// Everything charon needs for a PSK IKEv2 tunnel over libipsec: crypto
/// from OpenSSL (AES-GCM, SHA-2, X25519), the IKEv2 key derivation, the
/// userspace ESP before kernel-netlink (so it provides the IPsec backend
/// and netlink only addresses and routes), IKE sockets, the vici socket.
const PLUGINS: &str = "random nonce openssl kdf kernel-libipsec kernel-netlink socket-default vici";

/// One host's addresses and its peer's.
pub(super) struct Addresses {
    pub(super) underlay: Ipv4Addr,
    pub(super) peer_underlay: Ipv4Addr,
    pub(super) overlay: Ipv4Addr,
    pub(super) peer_overlay: Ipv4Addr,
}

/// The right host's addresses; the left's are the mirror image.
pub(super) const RIGHT_ADDRESSES: Addresses = Addresses {
    underlay: RIGHT_UNDERLAY,
    peer_underlay: LEFT_UNDERLAY,
    overlay: RIGHT_OVERLAY,
    peer_overlay: LEFT_OVERLAY,
};
pub(super) const LEFT_ADDRESSES: Addresses = Addresses {
    underlay: LEFT_UNDERLAY,
    peer_underlay: RIGHT_UNDERLAY,
    overlay: LEFT_OVERLAY,
    peer_overlay: RIGHT_OVERLAY,
};

/// A side's files, all under its own directory.
pub(super) struct SidePaths {
    pub(super) strongswan_conf: PathBuf,
    pub(super) swanctl_conf: PathBuf,
    /// Bind-mounted over `/run` in charon's mount namespace.
    pub(super) run_dir: PathBuf,
    pub(super) vici_socket: PathBuf,
}

impl SidePaths {
    pub(super) fn new(dir: &WorkDir, role: &str) -> Self {
        let side = dir.file(role);
        Self {
            strongswan_conf: side.join("strongswan.conf"),
            swanctl_conf: side.join("swanctl.conf"),
            run_dir: side.join("run"),
            vici_socket: side.join("charon.vici"),
        }
    }

    pub(super) fn vici_uri(&self) -> String {
        format!("unix://{}", self.vici_socket.display())
    }
}

/// 32 random bytes as swanctl's hex notation (`0x…`).
pub(super) fn random_key() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("random pre-shared key: {e}"))?;
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    Ok(format!("0x{hex}"))
}

/// `strongswan.conf` for one charon: no includes from /etc, so the host's
/// own strongSwan setup cannot change what the lab measures.
pub(super) fn strongswan_conf(paths: &SidePaths) -> String {
    format!(
        "charon {{\n\
         \x20 load_modular = no\n\
         \x20 load = {PLUGINS}\n\
         \x20 filelog {{\n\
         \x20   stderr {{\n\
         \x20     default = 1\n\
         \x20     flush_line = yes\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 syslog {{\n\
         \x20   daemon {{\n\
         \x20     default = -1\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 plugins {{\n\
         \x20   vici {{\n\
         \x20     socket = {vici}\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n",
        vici = paths.vici_uri(),
    )
}

/// `swanctl.conf` for one side: one IKEv2 connection between the underlay
/// addresses, one child SA between the overlay /32s, forced into UDP.
pub(super) fn swanctl_conf(addresses: &Addresses, key: &str) -> String {
    let (first, second) = (LEFT_UNDERLAY, RIGHT_UNDERLAY);
    format!(
        "connections {{\n\
         \x20 {CONNECTION} {{\n\
         \x20   version = 2\n\
         \x20   local_addrs = {underlay}\n\
         \x20   remote_addrs = {peer_underlay}\n\
         \x20   proposals = {IKE_PROPOSAL}\n\
         \x20   encap = yes\n\
         \x20   local {{\n\
         \x20     auth = psk\n\
         \x20     id = {underlay}\n\
         \x20   }}\n\
         \x20   remote {{\n\
         \x20     auth = psk\n\
         \x20     id = {peer_underlay}\n\
         \x20   }}\n\
         \x20   children {{\n\
         \x20     {CONNECTION} {{\n\
         \x20       local_ts = {overlay}/32\n\
         \x20       remote_ts = {peer_overlay}/32\n\
         \x20       esp_proposals = {ESP_PROPOSAL}\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20 }}\n\
         }}\n\
         secrets {{\n\
         \x20 ike-{CONNECTION} {{\n\
         \x20   id-1 = {first}\n\
         \x20   id-2 = {second}\n\
         \x20   secret = {key}\n\
         \x20 }}\n\
         }}\n",
        underlay = addresses.underlay,
        peer_underlay = addresses.peer_underlay,
        overlay = addresses.overlay,
        peer_overlay = addresses.peer_overlay,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_two_sides_mirror_each_other_and_share_one_key() {
        let key = random_key().unwrap();
        assert_eq!(key.len(), 2 + 64);
        assert_ne!(key, random_key().unwrap());
        let left = swanctl_conf(&LEFT_ADDRESSES, &key);
        let right = swanctl_conf(&RIGHT_ADDRESSES, &key);
        assert!(left.contains("local_addrs = 198.18.0.1\n"), "{left}");
        assert!(left.contains("remote_ts = 198.19.0.2/32\n"), "{left}");
        assert!(right.contains("local_ts = 198.19.0.2/32\n"), "{right}");
        assert!(right.contains("id = 198.18.0.1\n"), "{right}");
        for conf in [&left, &right] {
            assert!(conf.contains(&format!("secret = {key}\n")));
            assert!(conf.contains("esp_proposals = aes256gcm16\n"));
            assert!(conf.contains("encap = yes\n"));
        }
    }

    #[test]
    fn charon_reads_nothing_but_its_own_settings() {
        let dir = WorkDir::create("ipsec-config-test").unwrap();
        let paths = SidePaths::new(&dir, "left");
        let conf = strongswan_conf(&paths);
        let socket = format!("socket = unix://{}\n", paths.vici_socket.display());
        assert!(conf.contains(&socket), "{conf}");
        assert!(conf.contains("load_modular = no\n"));
        assert!(conf.contains("kernel-libipsec kernel-netlink"));
        assert!(!conf.contains("include"));
        assert_eq!(
            conf.matches('{').count(),
            conf.matches('}').count(),
            "{conf}"
        );
    }
}
