//! The inventory of real hosts (`fjord lab run --hosts lab.toml`):
//!
//! ```toml
//! allow_floods = false          # optional; floods across hosts are refused
//! overlay = "198.19.0.0/16"     # optional; the tunnel's subnet
//! ssh_config = "ssh_config"     # optional; `ssh -F`, relative to this file
//!
//! [[hosts]]
//! name = "a"
//! ssh = "root@lab-a.example"    # anything `ssh` takes as a destination
//! underlay = "192.0.2.10"       # the address the tunnel runs over
//! role = "left"                 # left, right or router
//! ```
//!
//! Every problem is reported as `file:line: problem`, the line being the
//! entry's (or the key's) in the file.

use std::net::{IpAddr, Ipv4Addr};
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// The overlay subnet when the inventory names none: the benchmarking
/// range's upper half, as in the namespace topology.
pub const DEFAULT_OVERLAY: Overlay = Overlay {
    network: Ipv4Addr::new(198, 19, 0, 0),
    prefix_len: 16,
};

#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {problem}")]
    Invalid {
        path: PathBuf,
        line: usize,
        problem: String,
    },
}

/// What a host does in the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Runs the left side of every tunnel and the traffic sources.
    Left,
    /// Runs the right side and the traffic sinks.
    Right,
    /// Forwards between the two; the lab only describes it.
    Router,
}

impl Role {
    pub fn name(self) -> &'static str {
        match self {
            Role::Left => "left",
            Role::Right => "right",
            Role::Router => "router",
        }
    }
}

/// One host of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// How the lab names the host in messages and reports.
    pub name: String,
    /// What `ssh` connects to (`user@host`, or a `Host` of the ssh config).
    pub destination: String,
    /// The address the tunnel and the bare figures use.
    pub underlay: IpAddr,
    pub role: Role,
}

/// The tunnel's IPv4 subnet; left takes its first address, right its second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overlay {
    pub network: Ipv4Addr,
    pub prefix_len: u8,
}

impl Overlay {
    pub fn left(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 1)
    }

    pub fn right(&self) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network) + 2)
    }

    fn contains(&self, address: IpAddr) -> bool {
        let IpAddr::V4(address) = address else {
            return false;
        };
        let mask = u32::MAX
            .checked_shl(32 - u32::from(self.prefix_len))
            .unwrap_or(0);
        u32::from(address) & mask == u32::from(self.network)
    }
}

/// A checked inventory: one left host, one right host, at most one router.
#[derive(Debug, Clone)]
pub struct Inventory {
    pub path: PathBuf,
    pub hosts: Vec<Host>,
    /// Whether the `attack` suite and unbounded overload may run across
    /// these hosts (they flood the network between them).
    pub allow_floods: bool,
    pub overlay: Overlay,
    /// `ssh -F` file, resolved against the inventory's directory.
    pub ssh_config: Option<PathBuf>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileShape {
    allow_floods: Option<bool>,
    overlay: Option<Spanned<String>>,
    ssh_config: Option<String>,
    #[serde(default)]
    hosts: Vec<Spanned<HostShape>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HostShape {
    name: Spanned<String>,
    ssh: Spanned<String>,
    underlay: Spanned<String>,
    role: Spanned<String>,
}

impl Inventory {
    /// Reads and checks the inventory at `path`.
    pub fn load(path: &Path) -> Result<Self, InventoryError> {
        let text = std::fs::read_to_string(path).map_err(|source| InventoryError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(path, &text)
    }

    /// Checks the inventory `text`, read from `path` (for messages and
    /// for resolving `ssh_config`).
    pub fn parse(path: &Path, text: &str) -> Result<Self, InventoryError> {
        let invalid = |span: Option<Range<usize>>, problem: String| InventoryError::Invalid {
            path: path.to_path_buf(),
            line: span.map_or(1, |span| line_of(text, span.start)),
            problem,
        };
        let shape: FileShape =
            toml::from_str(text).map_err(|error| invalid(error.span(), error.message().into()))?;

        let overlay = match &shape.overlay {
            None => DEFAULT_OVERLAY,
            Some(value) => parse_overlay(value.get_ref())
                .map_err(|problem| invalid(Some(value.span()), format!("overlay: {problem}")))?,
        };
        let mut hosts: Vec<Host> = Vec::with_capacity(shape.hosts.len());
        for entry in &shape.hosts {
            let host = entry.get_ref();
            let at = |value: &Spanned<String>| Some(value.span());
            let name = host.name.get_ref().trim();
            if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(invalid(
                    at(&host.name),
                    format!("name {name:?}: give a short name without spaces"),
                ));
            }
            if hosts.iter().any(|other| other.name == name) {
                return Err(invalid(
                    at(&host.name),
                    format!("name {name:?}: another host has this name"),
                ));
            }
            let destination = host.ssh.get_ref().trim();
            // ssh would read a leading `-` as an option, not a host.
            if destination.is_empty()
                || destination.starts_with('-')
                || destination
                    .chars()
                    .any(|c| c.is_whitespace() || c.is_control())
            {
                return Err(invalid(
                    at(&host.ssh),
                    format!(
                        "host {name}: ssh {destination:?}: give a destination such as user@host"
                    ),
                ));
            }
            let underlay: IpAddr = host.underlay.get_ref().trim().parse().map_err(|_| {
                invalid(
                    at(&host.underlay),
                    format!(
                        "host {name}: underlay {:?} is not an IP address",
                        host.underlay.get_ref()
                    ),
                )
            })?;
            if overlay.contains(underlay) {
                return Err(invalid(
                    at(&host.underlay),
                    format!(
                        "host {name}: underlay {underlay} lies inside the overlay {}/{}",
                        overlay.network, overlay.prefix_len
                    ),
                ));
            }
            if let Some(other) = hosts.iter().find(|other| other.underlay == underlay) {
                return Err(invalid(
                    at(&host.underlay),
                    format!(
                        "host {name}: underlay {underlay} is also host {}'s",
                        other.name
                    ),
                ));
            }
            let role = match host.role.get_ref().trim() {
                "left" => Role::Left,
                "right" => Role::Right,
                "router" => Role::Router,
                other => {
                    return Err(invalid(
                        at(&host.role),
                        format!("host {name}: role {other:?}: give left, right or router"),
                    ));
                }
            };
            if let Some(other) = hosts.iter().find(|other| other.role == role) {
                return Err(invalid(
                    at(&host.role),
                    format!(
                        "host {name}: host {} is already the {} host; one host per role",
                        other.name,
                        role.name()
                    ),
                ));
            }
            hosts.push(Host {
                name: name.to_string(),
                destination: destination.to_string(),
                underlay,
                role,
            });
        }
        let end = Some(text.len()..text.len());
        for role in [Role::Left, Role::Right] {
            if !hosts.iter().any(|host| host.role == role) {
                return Err(invalid(
                    end.clone(),
                    format!(
                        "no {} host: add a [[hosts]] entry with role = \"{}\"",
                        role.name(),
                        role.name()
                    ),
                ));
            }
        }
        let ssh_config = shape.ssh_config.map(|file| {
            let file = PathBuf::from(file);
            match path.parent() {
                Some(directory) if file.is_relative() => directory.join(file),
                _ => file,
            }
        });
        Ok(Self {
            path: path.to_path_buf(),
            hosts,
            allow_floods: shape.allow_floods.unwrap_or(false),
            overlay,
            ssh_config,
        })
    }

    /// The host with `role`; left and right always exist.
    pub fn host(&self, role: Role) -> Option<&Host> {
        self.hosts.iter().find(|host| host.role == role)
    }
}

/// `198.19.0.0/16`: an IPv4 network with room for two hosts.
fn parse_overlay(text: &str) -> Result<Overlay, String> {
    let (address, prefix_len) = text
        .trim()
        .split_once('/')
        .ok_or_else(|| format!("{text:?}: give a subnet such as 198.19.0.0/16"))?;
    let network: Ipv4Addr = address
        .parse()
        .map_err(|_| format!("{address:?} is not an IPv4 address"))?;
    let prefix_len: u8 = prefix_len
        .parse()
        .ok()
        .filter(|&len| len <= 30)
        .ok_or_else(|| format!("prefix /{prefix_len}: give 0 to 30 (two hosts must fit)"))?;
    let overlay = Overlay {
        network,
        prefix_len,
    };
    if !overlay.contains(IpAddr::V4(network)) {
        return Err(format!(
            "{network}/{prefix_len} has host bits set; give the network address"
        ));
    }
    Ok(overlay)
}

/// The 1-based line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    let offset = offset.min(text.len());
    text.as_bytes()[..offset]
        .iter()
        .filter(|&&byte| byte == b'\n')
        .count()
        + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_HOSTS: &str = r#"
[[hosts]]
name = "a"
ssh = "root@198.18.1.2"
underlay = "198.18.0.1"
role = "left"

[[hosts]]
name = "b"
ssh = "lab-b"
underlay = "198.18.0.2"
role = "right"
"#;

    fn parse(text: &str) -> Result<Inventory, String> {
        Inventory::parse(Path::new("/etc/lab/lab.toml"), text).map_err(|e| e.to_string())
    }

    #[test]
    fn two_hosts_with_defaults() {
        let inventory = parse(TWO_HOSTS).unwrap();
        assert!(!inventory.allow_floods);
        assert_eq!(inventory.overlay, DEFAULT_OVERLAY);
        assert_eq!(inventory.overlay.left(), Ipv4Addr::new(198, 19, 0, 1));
        assert_eq!(inventory.overlay.right(), Ipv4Addr::new(198, 19, 0, 2));
        let right = inventory.host(Role::Right).unwrap();
        assert_eq!(
            (right.name.as_str(), right.destination.as_str()),
            ("b", "lab-b")
        );
        assert_eq!(right.underlay, IpAddr::V4(Ipv4Addr::new(198, 18, 0, 2)));
        assert_eq!(inventory.ssh_config, None);
    }

    #[test]
    fn settings_and_a_relative_ssh_config() {
        let text = format!(
            "allow_floods = true\noverlay = \"10.99.0.0/24\"\nssh_config = \"ssh/config\"\n{TWO_HOSTS}"
        );
        let inventory = parse(&text).unwrap();
        assert!(inventory.allow_floods);
        assert_eq!(inventory.overlay.right(), Ipv4Addr::new(10, 99, 0, 2));
        assert_eq!(
            inventory.ssh_config,
            Some(PathBuf::from("/etc/lab/ssh/config"))
        );
    }

    #[test]
    fn problems_name_the_file_and_line() {
        let bad_role = TWO_HOSTS.replace("role = \"right\"", "role = \"middle\"");
        assert_eq!(
            parse(&bad_role).unwrap_err(),
            "/etc/lab/lab.toml:12: host b: role \"middle\": give left, right or router"
        );
        let bad_address = TWO_HOSTS.replace("198.18.0.2", "198.18.0.300");
        assert_eq!(
            parse(&bad_address).unwrap_err(),
            "/etc/lab/lab.toml:11: host b: underlay \"198.18.0.300\" is not an IP address"
        );
        let same_role = TWO_HOSTS.replace("\"right\"", "\"left\"");
        assert!(
            parse(&same_role)
                .unwrap_err()
                .contains(":12: host b: host a is already the left host"),
        );
        let option = TWO_HOSTS.replace("lab-b", "-oProxyCommand=x");
        assert!(parse(&option).unwrap_err().contains(":10: host b: ssh"));
        let unknown = format!("{TWO_HOSTS}port = 22\n");
        assert!(
            parse(&unknown)
                .unwrap_err()
                .starts_with("/etc/lab/lab.toml:"),
            "{}",
            parse(&unknown).unwrap_err()
        );
        let missing = TWO_HOSTS.replace("ssh = \"lab-b\"\n", "");
        assert!(parse(&missing).unwrap_err().contains("ssh"));
        assert!(
            parse("[[hosts]\n")
                .unwrap_err()
                .starts_with("/etc/lab/lab.toml:1:")
        );
    }

    #[test]
    fn both_ends_are_required_and_addresses_distinct() {
        let left_only = TWO_HOSTS.split("[[hosts]]").nth(1).unwrap();
        let text = format!("[[hosts]]{left_only}");
        assert!(parse(&text).unwrap_err().contains("no right host"));
        let same = TWO_HOSTS.replace("198.18.0.2", "198.18.0.1");
        assert!(parse(&same).unwrap_err().contains("also host a's"));
        let inside = TWO_HOSTS.replace("198.18.0.2", "198.19.0.9");
        assert!(parse(&inside).unwrap_err().contains("inside the overlay"));
        let overlay = format!("overlay = \"198.19.0.1/16\"\n{TWO_HOSTS}");
        assert!(parse(&overlay).unwrap_err().contains(":1: overlay:"));
    }
}
