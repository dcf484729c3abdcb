//! The `[Mesh]` section: fjord's own keys, beside wg-quick's. A file
//! without it is a plain WireGuard configuration.
//!
//! ```text
//! [Mesh]
//! Network = <network public key>          with Certificate, or Member lines
//! Certificate = node.cert                 relative to the file
//! Member = <public key> <name> <address>[,<address>...] [@<group>...]
//!                                         instead of Network and Certificate:
//!                                         one line per member, this node too;
//!                                         `@ops @db` puts it in groups
//! Bootstrap = <public key>@host:port      any number, or a comma list
//! Revocations = revoked.txt               optional, with Network; one a line
//! Policy = policy.signed                  optional, with Network: the network's
//!                                         signed policy (`fjord network policy`)
//! Domain = mesh.example                   optional: members answer DNS for
//!                                         NAME.mesh.example (`fjord_mesh::names`)
//! ExitNode = gw                           optional: route everything else to the
//!                                         member named gw, if its certificate
//!                                         routes 0.0.0.0/0 or ::/0
//! EagerSessions = 32                      optional: up to this many members,
//!                                         all meet all; above, sessions on demand
//! IdleTimeout = 60                        optional: seconds without user traffic
//!                                         before an on-demand session closes
//! ```
//!
//! Parsing checks what the text alone can show; [`MeshSection::load`]
//! reads the files it names and checks the certificate against the
//! network and the interface's key, with the same `file:line: key:
//! problem` messages.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fjord_mesh::names::Domain;
use fjord_mesh::policy::SignedPolicy;
use fjord_mesh::{Bootstrap, Certificate, Cidr, Group, NetworkPublicKey, Revocation, Trust};
use fjord_proto::PublicKey;

use super::endpoint::{Endpoint, Resolve};
use super::error::{ConfigError, Problem, ValueError};
use super::values::parse_decimal;

/// The `[Mesh]` section. Equal sections name the same settings, wherever
/// in the file they stand.
#[derive(Debug, Clone, Eq)]
pub struct MeshSection {
    pub header_line: usize,
    /// `Network`: the network's public key; `None` with a member list.
    pub network: Option<NetworkPublicKey>,
    /// `Certificate`: the file holding this node's certificate; `None`
    /// with a member list.
    pub certificate: Option<FileSetting>,
    /// `Member`: the explicit member list, instead of a network key.
    pub members: Vec<ListedMember>,
    /// `Bootstrap`: members to join through. None for the first member.
    pub bootstrap: Vec<BootstrapMember>,
    /// `Revocations`: a file of revocation lines, if any.
    pub revocations: Option<FileSetting>,
    /// `Policy`: the network's signed policy, if given here.
    pub policy: Option<FileSetting>,
    /// `Domain`: the DNS domain of members' names; `None` runs no DNS
    /// server.
    pub domain: Option<Domain>,
    /// `ExitNode`: the certificate name of the member to route everything
    /// without a more specific route to; `None` routes no default prefix.
    pub exit_node: Option<String>,
    /// `EagerSessions`: up to this many members (this node included),
    /// every member keeps a session with every other; `None` for
    /// [`fjord_mesh::DEFAULT_EAGER_SESSIONS`].
    pub eager_sessions: Option<usize>,
    /// `IdleTimeout`: how long an on-demand session may carry no user
    /// traffic before it closes; `None` for
    /// [`fjord_mesh::DEFAULT_IDLE_TIMEOUT`].
    pub idle_timeout: Option<Duration>,
}

/// The largest `EagerSessions`: a mesh this large where all meet all is
/// past what any node holds.
pub const MAX_EAGER_SESSIONS: u64 = 100_000;
/// The longest `IdleTimeout`, in seconds (a day).
pub const MAX_IDLE_TIMEOUT_SECS: u64 = 86_400;

impl PartialEq for MeshSection {
    fn eq(&self, other: &Self) -> bool {
        self.network == other.network
            && self.certificate == other.certificate
            && self.members == other.members
            && self.bootstrap == other.bootstrap
            && self.revocations == other.revocations
            && self.policy == other.policy
            && self.domain == other.domain
            && self.exit_node == other.exit_node
            && self.eager_sessions == other.eager_sessions
            && self.idle_timeout == other.idle_timeout
    }
}

/// A path as written, with the line it was given on (for messages; not
/// compared).
#[derive(Debug, Clone, Eq)]
pub struct FileSetting {
    pub path: PathBuf,
    pub line: usize,
}

impl PartialEq for FileSetting {
    fn eq(&self, other: &Self) -> bool {
        self.path == other.path
    }
}

/// `Bootstrap = <public key>@<endpoint>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootstrapMember {
    pub public_key: PublicKey,
    pub endpoint: Endpoint,
}

impl std::fmt::Display for BootstrapMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.public_key, self.endpoint)
    }
}

/// `Member = <public key> <name> <address>[,<address>...] [@<group>...]`,
/// as the record the mesh keeps for a member (not compared by line).
#[derive(Debug, Clone, Eq)]
pub struct ListedMember {
    pub record: Certificate,
    pub line: usize,
}

impl PartialEq for ListedMember {
    fn eq(&self, other: &Self) -> bool {
        self.record == other.record
    }
}

impl std::fmt::Display for ListedMember {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.record.node_key, self.record.name)?;
        for (index, address) in self.record.addresses.iter().enumerate() {
            let separator = if index == 0 { " " } else { ", " };
            write!(f, "{separator}{address}")?;
        }
        for group in &self.record.groups {
            write!(f, " @{group}")?;
        }
        Ok(())
    }
}

/// The files of a `[Mesh]` section, read and checked.
#[derive(Debug, Clone)]
pub struct LoadedMesh {
    pub trust: Trust,
    pub certificate: Certificate,
    pub bootstrap: Vec<Bootstrap>,
    pub revocations: Vec<Revocation>,
    /// The policy file's, verified against the network key.
    pub policy: Option<SignedPolicy>,
}

impl MeshSection {
    /// Reads the certificate and revocation files (relative paths are
    /// taken from `config_dir`) and checks that the certificate belongs to
    /// this network and to `own_key`, and is valid at `unix_now`.
    pub fn load(
        &self,
        source_name: &str,
        config_dir: &Path,
        own_key: &PublicKey,
        unix_now: u64,
    ) -> Result<LoadedMesh, ConfigError> {
        let at = |line: usize, key: &'static str, message: String| {
            ConfigError::invalid(
                source_name,
                Some(line),
                Problem::InvalidValue {
                    key,
                    error: ValueError::Mesh(message),
                },
            )
        };
        let bootstrap = self
            .bootstrap
            .iter()
            .map(|member| Bootstrap {
                key: member.public_key,
                endpoint: member.endpoint.address(),
            })
            .collect();
        let (Some(network), Some(certificate_setting)) = (self.network, &self.certificate) else {
            let listed: Vec<Certificate> = self
                .members
                .iter()
                .map(|member| member.record.clone())
                .collect();
            let Some(own) = listed.iter().find(|record| record.node_key == *own_key) else {
                return Err(at(
                    self.header_line,
                    "Member",
                    format!("this interface's key {own_key} is not in the member list"),
                ));
            };
            return Ok(LoadedMesh {
                certificate: own.clone(),
                trust: Trust::Members(listed),
                bootstrap,
                revocations: Vec::new(),
                policy: None,
            });
        };
        let certificate_line = certificate_setting.line;
        let text = read(config_dir, &certificate_setting.path)
            .map_err(|message| at(certificate_line, "Certificate", message))?;
        let certificate: Certificate = text.trim().parse().map_err(|error| {
            at(
                certificate_line,
                "Certificate",
                format!(
                    "{} is not a fjord certificate ({error})",
                    certificate_setting.path.display()
                ),
            )
        })?;
        if certificate.node_key != *own_key {
            return Err(at(
                certificate_line,
                "Certificate",
                format!(
                    "{} is for public key {}, not this interface's PrivateKey",
                    certificate_setting.path.display(),
                    certificate.node_key
                ),
            ));
        }
        certificate.verify(&network, unix_now).map_err(|error| {
            at(
                certificate_line,
                "Certificate",
                format!("{}: {error}", certificate_setting.path.display()),
            )
        })?;
        let mut revocations = Vec::new();
        if let Some(setting) = &self.revocations {
            let text = read(config_dir, &setting.path)
                .map_err(|message| at(setting.line, "Revocations", message))?;
            for (index, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let revocation: Revocation = line.parse().map_err(|error| {
                    at(
                        setting.line,
                        "Revocations",
                        format!(
                            "{}:{}: not a revocation ({error})",
                            setting.path.display(),
                            index + 1
                        ),
                    )
                })?;
                revocation.verify(&network).map_err(|error| {
                    at(
                        setting.line,
                        "Revocations",
                        format!("{}:{}: {error}", setting.path.display(), index + 1),
                    )
                })?;
                revocations.push(revocation);
            }
        }
        let policy = match &self.policy {
            Some(setting) => {
                let text = read(config_dir, &setting.path)
                    .map_err(|message| at(setting.line, "Policy", message))?;
                let file = setting.path.display().to_string();
                let policy = SignedPolicy::verify(text.as_bytes(), &network).map_err(|error| {
                    at(setting.line, "Policy", error.in_file(&file).to_string())
                })?;
                Some(policy)
            }
            None => None,
        };
        Ok(LoadedMesh {
            trust: Trust::Network(network),
            certificate,
            bootstrap,
            revocations,
            policy,
        })
    }
}

fn read(config_dir: &Path, path: &Path) -> Result<String, String> {
    let full = config_dir.join(path);
    std::fs::read_to_string(&full)
        .map_err(|error| format!("cannot read {}: {error}", full.display()))
}

/// The section while it is being read.
#[derive(Debug)]
pub(super) struct MeshDraft {
    pub header_line: usize,
    pub seen: super::parse::SeenKeys,
    network: Option<NetworkPublicKey>,
    certificate: Option<FileSetting>,
    members: Vec<ListedMember>,
    bootstrap: Vec<BootstrapMember>,
    revocations: Option<FileSetting>,
    policy: Option<FileSetting>,
    domain: Option<Domain>,
    exit_node: Option<String>,
    eager_sessions: Option<usize>,
    idle_timeout: Option<Duration>,
}

/// Member lists and network keys are two ways to say who belongs; one
/// section uses one.
const MIXED_MEMBERSHIP: &str =
    "Member lines replace Network, Certificate, Revocations and Policy; use one or the other";

impl MeshDraft {
    pub fn new(header_line: usize) -> Self {
        Self {
            header_line,
            seen: Default::default(),
            network: None,
            certificate: None,
            members: Vec::new(),
            bootstrap: Vec::new(),
            revocations: None,
            policy: None,
            domain: None,
            exit_node: None,
            eager_sessions: None,
            idle_timeout: None,
        }
    }

    fn refuse_if_listed(&self) -> Result<(), ValueError> {
        if self.members.is_empty() {
            Ok(())
        } else {
            Err(ValueError::Mesh(MIXED_MEMBERSHIP.to_string()))
        }
    }

    /// `<public key> <name> <address>[,<address>...] [@<group>...]`
    /// (addresses separated by commas or spaces; each group after the
    /// addresses, marked by `@`).
    pub fn add_member(&mut self, value: &str, line: usize) -> Result<(), ValueError> {
        if self.network.is_some()
            || self.certificate.is_some()
            || self.revocations.is_some()
            || self.policy.is_some()
        {
            return Err(ValueError::Mesh(MIXED_MEMBERSHIP.to_string()));
        }
        let mut words = value
            .split(|c: char| c == ',' || c.is_whitespace())
            .filter(|word| !word.is_empty());
        let (Some(key), Some(name)) = (words.next(), words.next()) else {
            return Err(ValueError::invalid(
                value,
                "<public key> <name> <address>[,<address>...]",
            ));
        };
        let key = key.parse()?;
        let (group_words, address_words): (Vec<&str>, Vec<&str>) =
            words.partition(|word| word.starts_with('@'));
        let addresses = address_words
            .into_iter()
            .map(str::parse::<Cidr>)
            .collect::<Result<Vec<_>, _>>()?;
        let groups = group_words
            .into_iter()
            .map(|word| word[1..].parse::<Group>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|error| ValueError::Mesh(format!("{name}: {error}")))?;
        if addresses.is_empty() {
            return Err(ValueError::Mesh(format!(
                "{name} has no overlay address (e.g. {name} 198.19.0.2/32)"
            )));
        }
        if let Some(first) = self.members.iter().find(|m| m.record.node_key == key) {
            return Err(ValueError::Mesh(format!(
                "{key} is listed twice (first on line {})",
                first.line
            )));
        }
        let record = Certificate::listed_with_groups(key, name, &addresses, &groups)
            .map_err(|error| ValueError::Mesh(format!("{name}: {error}")))?;
        self.members.push(ListedMember { record, line });
        Ok(())
    }

    pub fn set_network(&mut self, value: &str) -> Result<(), ValueError> {
        let network = value.parse().map_err(|_| {
            ValueError::invalid(value, "a network public key (fjord network pubkey)")
        })?;
        self.refuse_if_listed()?;
        self.network = Some(network);
        Ok(())
    }

    pub fn set_certificate(&mut self, value: &str, line: usize) -> Result<(), ValueError> {
        self.refuse_if_listed()?;
        self.certificate = Some(file_setting(value, line)?);
        Ok(())
    }

    pub fn set_revocations(&mut self, value: &str, line: usize) -> Result<(), ValueError> {
        self.refuse_if_listed()?;
        self.revocations = Some(file_setting(value, line)?);
        Ok(())
    }

    pub fn set_policy(&mut self, value: &str, line: usize) -> Result<(), ValueError> {
        self.refuse_if_listed()?;
        self.policy = Some(file_setting(value, line)?);
        Ok(())
    }

    pub fn set_domain(&mut self, value: &str) -> Result<(), ValueError> {
        let domain = value
            .parse::<Domain>()
            .map_err(|error| ValueError::Mesh(format!("'{value}': {error}")))?;
        self.domain = Some(domain);
        Ok(())
    }

    /// A member's certificate name, as `fjord network sign --name` takes it.
    pub fn set_exit_node(&mut self, value: &str) -> Result<(), ValueError> {
        if !fjord_mesh::cert::valid_name(value) {
            return Err(ValueError::Mesh(format!(
                "'{value}' is not a member name (1 to 63 letters, digits, '.', '-' or '_'; the certificate's --name)"
            )));
        }
        self.exit_node = Some(value.to_string());
        Ok(())
    }

    /// A count of members, 0 (always on demand) to [`MAX_EAGER_SESSIONS`].
    pub fn set_eager_sessions(&mut self, value: &str) -> Result<(), ValueError> {
        let members = parse_decimal(value)
            .ok_or_else(|| ValueError::invalid(value, "a number of members (e.g. 32)"))?;
        if members > MAX_EAGER_SESSIONS {
            return Err(ValueError::OutOfRange {
                value: members,
                min: 0,
                max: MAX_EAGER_SESSIONS,
            });
        }
        // At most MAX_EAGER_SESSIONS, which fits any usize.
        self.eager_sessions = Some(members as usize);
        Ok(())
    }

    /// Whole seconds, 1 to [`MAX_IDLE_TIMEOUT_SECS`].
    pub fn set_idle_timeout(&mut self, value: &str) -> Result<(), ValueError> {
        let secs = parse_decimal(value)
            .ok_or_else(|| ValueError::invalid(value, "a number of seconds (e.g. 60)"))?;
        if !(1..=MAX_IDLE_TIMEOUT_SECS).contains(&secs) {
            return Err(ValueError::OutOfRange {
                value: secs,
                min: 1,
                max: MAX_IDLE_TIMEOUT_SECS,
            });
        }
        self.idle_timeout = Some(Duration::from_secs(secs));
        Ok(())
    }

    /// `key@endpoint`, or a comma list of them.
    pub fn add_bootstrap(&mut self, value: &str, resolver: &dyn Resolve) -> Result<(), ValueError> {
        for item in value.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(ValueError::EmptyListEntry);
            }
            let Some((key, endpoint)) = item.split_once('@') else {
                return Err(ValueError::invalid(item, "<public key>@<host:port>"));
            };
            self.bootstrap.push(BootstrapMember {
                public_key: key.trim().parse()?,
                endpoint: Endpoint::parse(endpoint.trim(), resolver)?,
            });
        }
        Ok(())
    }

    pub fn finish(self) -> Result<MeshSection, Problem> {
        let missing = |key| Problem::MeshKeyMissing {
            line: self.header_line,
            key,
        };
        if self.members.is_empty() {
            self.network.ok_or_else(|| missing("Network"))?;
            self.certificate
                .as_ref()
                .ok_or_else(|| missing("Certificate"))?;
        }
        Ok(MeshSection {
            header_line: self.header_line,
            network: self.network,
            certificate: self.certificate,
            members: self.members,
            bootstrap: self.bootstrap,
            revocations: self.revocations,
            policy: self.policy,
            domain: self.domain,
            exit_node: self.exit_node,
            eager_sessions: self.eager_sessions,
            idle_timeout: self.idle_timeout,
        })
    }
}

fn file_setting(value: &str, line: usize) -> Result<FileSetting, ValueError> {
    if value.is_empty() {
        return Err(ValueError::Empty);
    }
    Ok(FileSetting {
        path: PathBuf::from(value),
        line,
    })
}
