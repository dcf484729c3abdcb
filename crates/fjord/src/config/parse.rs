//! The wg-quick `.conf` reader, written by hand (general INI crates merge
//! repeated sections or mangle `#` and `;` in values).
//!
//! Reading rules, line by line, as `wg` and `wg-quick` read:
//! - `#` starts a comment anywhere on a line; blank lines are skipped.
//! - `[Interface]` and `[Peer]` open sections, in any case and with any
//!   whitespace inside the brackets. `[Interface]` may appear once, `[Peer]`
//!   any number of times, in any order.
//! - Other lines are `Key = value`, split at the first `=`. Keys are
//!   case-insensitive. For the keys `wg` reads (`PrivateKey`, `PublicKey`,
//!   `AllowedIPs`, ...) all whitespace is removed from key and value, as
//!   `wg` does; for wg-quick's keys (`Address`, `PostUp`, ...) only the
//!   surrounding whitespace is trimmed, so commands keep their spaces.
//! - `AllowedIPs` takes a comma-separated list and may repeat; an empty
//!   value adds nothing. `Address` and `DNS` take lists separated by commas
//!   or spaces (wg-quick splits on both) and may repeat. The hook keys
//!   (`PreUp`, ...) may repeat; each line is one command. Every other key
//!   may appear once per section.
//!
//! After the last line: the `[Interface]` must exist and have a
//! `PrivateKey`, every `[Peer]` a `PublicKey`, and no two peers (nor a peer
//! and the interface) may share a public key. The first problem found is
//! reported.

use std::collections::HashMap;

use fjord_mesh::Cidr;
use fjord_proto::{PresharedKey, PrivateKey, PublicKey};
use zeroize::Zeroizing;

use super::endpoint::{Endpoint, Resolve};
use super::error::{ConfigError, Problem, SectionKind, ValueError, quote};
use super::keys::{KEY_COUNT, KeyName};
use super::mesh::MeshDraft;
use super::mode::{InterfaceMode, SwitchConflicts};
use super::values::{
    CipherSetting, CompressionSetting, FallbackCarrier, KeepaliveInterval, MetricsAddress, Mtu,
    VerbatimValue, parse_bool, parse_fallback_port, parse_fwmark, parse_listen_port,
};
use super::{Config, InterfaceSection, PeerSection, WgQuick};

/// Reads `text` into a [`Config`]; see the module documentation.
pub(super) fn parse(
    text: &str,
    source_name: &str,
    resolver: &dyn Resolve,
) -> Result<Config, ConfigError> {
    let mut reader = Reader {
        source_name,
        resolver,
        interface: None,
        peers: Vec::new(),
        mesh: None,
        current: None,
        peer_lines: HashMap::new(),
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    for (index, line) in text.lines().enumerate() {
        reader.read_line(line, index + 1)?;
    }
    reader.finish()
}

/// Which section the following keys belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    Interface,
    /// Index into `Reader::peers`.
    Peer(usize),
    Mesh,
}

struct Reader<'a> {
    source_name: &'a str,
    resolver: &'a dyn Resolve,
    interface: Option<InterfaceDraft>,
    peers: Vec<PeerDraft>,
    mesh: Option<MeshDraft>,
    current: Option<Current>,
    /// Header line of the first peer with each public key, for duplicates.
    peer_lines: HashMap<PublicKey, usize>,
}

/// The first line each single-valued key was set on, per section.
#[derive(Debug)]
pub(super) struct SeenKeys([Option<usize>; KEY_COUNT]);

// Arrays derive `Default` only up to 32 elements.
impl Default for SeenKeys {
    fn default() -> Self {
        Self([None; KEY_COUNT])
    }
}

impl SeenKeys {
    fn record(&mut self, key: KeyName, section: SectionKind, line: usize) -> Result<(), Problem> {
        if key.repeats() {
            return Ok(());
        }
        let slot = &mut self.0[key as usize];
        if let Some(first_line) = *slot {
            return Err(Problem::DuplicateKey {
                key: key.name(),
                section,
                first_line,
            });
        }
        *slot = Some(line);
        Ok(())
    }

    /// The line `key` was set on, if it was (single-valued keys only).
    fn line(&self, key: KeyName) -> Option<usize> {
        self.0[key as usize]
    }
}

struct InterfaceDraft {
    header_line: usize,
    seen: SeenKeys,
    private_key: Option<PrivateKey>,
    listen_port: Option<u16>,
    fwmark: Option<std::num::NonZeroU32>,
    addresses: Vec<Cidr>,
    mtu: Option<Mtu>,
    fallback_port: Option<std::num::NonZeroU16>,
    fallback_carrier: Option<FallbackCarrier>,
    cipher: Option<CipherSetting>,
    mode: InterfaceMode,
    compression: Option<CompressionSetting>,
    metrics: Option<MetricsAddress>,
    wg_quick: WgQuick,
}

struct PeerDraft {
    header_line: usize,
    seen: SeenKeys,
    public_key: Option<PublicKey>,
    preshared_key: Option<PresharedKey>,
    endpoint: Option<Endpoint>,
    allowed_ips: Vec<Cidr>,
    /// The first line with a non-empty `AllowedIPs`, for switch mode.
    allowed_ips_line: Option<usize>,
    persistent_keepalive: Option<KeepaliveInterval>,
    fallback_port: Option<std::num::NonZeroU16>,
    groups: Option<Vec<fjord_mesh::Group>>,
}

impl Reader<'_> {
    fn read_line(&mut self, line: &str, line_number: usize) -> Result<(), ConfigError> {
        let source_name = self.source_name;
        let at_line = |problem| ConfigError::invalid(source_name, Some(line_number), problem);
        let content = match line.find('#') {
            Some(comment) => &line[..comment],
            None => line,
        };
        let content = content.trim();
        if content.is_empty() {
            return Ok(());
        }
        if content.starts_with('[') {
            let section = section_header(content).map_err(at_line)?;
            self.close_peer()?;
            return self.open_section(section, line_number).map_err(at_line);
        }
        self.read_key_value(content, line_number).map_err(at_line)
    }

    fn read_key_value(&mut self, content: &str, line_number: usize) -> Result<(), Problem> {
        let (raw_key, raw_value) = content.split_once('=').ok_or(Problem::NotKeyValue)?;
        let raw_key = raw_key.trim();
        if raw_key.is_empty() {
            return Err(Problem::MissingKey);
        }
        let Some(current) = self.current else {
            return Err(Problem::KeyOutsideSection {
                key: quote(raw_key),
            });
        };
        let section = match current {
            Current::Interface => SectionKind::Interface,
            Current::Peer(_) => SectionKind::Peer,
            Current::Mesh => SectionKind::Mesh,
        };
        let key = KeyName::lookup(raw_key, section).ok_or_else(|| Problem::UnknownKey {
            key: quote(raw_key),
            section,
        })?;
        if key.section() != section {
            return Err(Problem::WrongSection {
                key: key.name(),
                section,
                belongs: key.section(),
            });
        }
        // Held in a zeroizing buffer: the value may be a key.
        // Sized once: a growing String would free copies of the key.
        let mut value = Zeroizing::new(String::with_capacity(raw_value.len()));
        if key.is_wg_key() {
            value.extend(raw_value.chars().filter(|c| !c.is_whitespace()));
        } else {
            value.push_str(raw_value.trim());
        }
        let invalid = |error: ValueError| Problem::InvalidValue {
            key: key.name(),
            error,
        };
        match current {
            Current::Interface => {
                // `current` is Interface only once the draft exists.
                let Some(interface) = self.interface.as_mut() else {
                    return Ok(());
                };
                interface.seen.record(key, section, line_number)?;
                interface.set(key, &value).map_err(invalid)
            }
            Current::Peer(index) => {
                let resolver = self.resolver;
                // `current` only ever holds the index of a pushed peer.
                let Some(peer) = self.peers.get_mut(index) else {
                    return Ok(());
                };
                peer.seen.record(key, section, line_number)?;
                if key == KeyName::AllowedIps && !value.is_empty() {
                    peer.allowed_ips_line.get_or_insert(line_number);
                }
                peer.set(key, &value, resolver).map_err(invalid)
            }
            Current::Mesh => {
                let resolver = self.resolver;
                let Some(mesh) = self.mesh.as_mut() else {
                    return Ok(());
                };
                mesh.seen.record(key, section, line_number)?;
                mesh.set(key, &value, line_number, resolver)
                    .map_err(invalid)
            }
        }
    }

    fn open_section(&mut self, section: SectionKind, line_number: usize) -> Result<(), Problem> {
        match section {
            SectionKind::Interface => {
                if let Some(interface) = &self.interface {
                    return Err(Problem::DuplicateInterface {
                        first_line: interface.header_line,
                    });
                }
                self.interface = Some(InterfaceDraft::new(line_number));
                self.current = Some(Current::Interface);
            }
            SectionKind::Peer => {
                self.peers.push(PeerDraft::new(line_number));
                self.current = Some(Current::Peer(self.peers.len() - 1));
            }
            SectionKind::Mesh => {
                if let Some(mesh) = &self.mesh {
                    return Err(Problem::DuplicateMesh {
                        first_line: mesh.header_line,
                    });
                }
                self.mesh = Some(MeshDraft::new(line_number));
                self.current = Some(Current::Mesh);
            }
        }
        Ok(())
    }

    /// Checks the peer section being read, if any, now that it has ended.
    /// Its problems belong to the whole section, so they name its header
    /// line rather than the current line.
    fn close_peer(&mut self) -> Result<(), ConfigError> {
        let Some(Current::Peer(index)) = self.current.take() else {
            return Ok(());
        };
        let Some(peer) = self.peers.get(index) else {
            return Ok(());
        };
        let file_error = |problem| ConfigError::invalid(self.source_name, None, problem);
        let Some(public_key) = peer.public_key else {
            return Err(file_error(Problem::NoPublicKey {
                line: peer.header_line,
            }));
        };
        if let Some(&first_line) = self.peer_lines.get(&public_key) {
            return Err(file_error(Problem::DuplicatePeer {
                key: public_key,
                first_line,
                second_line: peer.header_line,
            }));
        }
        self.peer_lines.insert(public_key, peer.header_line);
        Ok(())
    }

    fn finish(mut self) -> Result<Config, ConfigError> {
        let source_name = self.source_name;
        let file_error = |problem| ConfigError::invalid(source_name, None, problem);
        self.close_peer()?;
        self.check_mode()?;
        let interface = self
            .interface
            .ok_or_else(|| file_error(Problem::NoInterface))?;
        let private_key = interface
            .private_key
            .ok_or_else(|| file_error(Problem::NoPrivateKey))?;
        let own_public_key = private_key.public_key();

        let mut peers = Vec::with_capacity(self.peers.len());
        for draft in self.peers {
            // Every peer went through `close_peer`, which checked this.
            let Some(public_key) = draft.public_key else {
                return Err(file_error(Problem::NoPublicKey {
                    line: draft.header_line,
                }));
            };
            if public_key == own_public_key {
                return Err(file_error(Problem::PeerIsSelf {
                    line: draft.header_line,
                }));
            }
            peers.push(PeerSection {
                public_key,
                preshared_key: draft.preshared_key,
                endpoint: draft.endpoint,
                allowed_ips: draft.allowed_ips,
                persistent_keepalive: draft.persistent_keepalive,
                fallback_port: draft.fallback_port,
                groups: draft.groups,
            });
        }
        let mesh = self
            .mesh
            .map(MeshDraft::finish)
            .transpose()
            .map_err(file_error)?;
        Ok(Config {
            mesh,
            interface: InterfaceSection {
                private_key,
                listen_port: interface.listen_port,
                fwmark: interface.fwmark,
                addresses: interface.addresses,
                mtu: interface.mtu,
                fallback_port: interface.fallback_port,
                fallback_carrier: interface.fallback_carrier,
                cipher: interface.cipher,
                mode: interface.mode,
                compression: interface.compression,
                metrics: interface.metrics,
                wg_quick: interface.wg_quick,
            },
            peers,
        })
    }
}

impl Reader<'_> {
    /// What switch mode cannot work with, found in the file itself.
    fn check_mode(&self) -> Result<(), ConfigError> {
        let Some(interface) = &self.interface else {
            return Ok(());
        };
        let conflicts = SwitchConflicts {
            mode_line: interface.seen.line(KeyName::Mode),
            mesh_line: self.mesh.as_ref().map(|mesh| mesh.header_line),
            allowed_ips_line: self.peers.iter().find_map(|peer| peer.allowed_ips_line),
        };
        conflicts.check(self.source_name, interface.mode)
    }
}

impl InterfaceDraft {
    fn new(header_line: usize) -> Self {
        InterfaceDraft {
            header_line,
            seen: SeenKeys::default(),
            private_key: None,
            listen_port: None,
            fwmark: None,
            addresses: Vec::new(),
            mtu: None,
            fallback_port: None,
            fallback_carrier: None,
            cipher: None,
            mode: InterfaceMode::default(),
            compression: None,
            metrics: None,
            wg_quick: WgQuick::default(),
        }
    }

    fn set(&mut self, key: KeyName, value: &str) -> Result<(), ValueError> {
        match key {
            KeyName::PrivateKey => self.private_key = Some(PrivateKey::from_base64(value)?),
            KeyName::ListenPort => self.listen_port = Some(parse_listen_port(value)?),
            KeyName::FwMark => self.fwmark = parse_fwmark(value)?,
            KeyName::Address => {
                for item in words(value) {
                    self.addresses.push(item.parse()?);
                }
            }
            // wg-quick treats an empty MTU or Table as unset.
            KeyName::Mtu if value.is_empty() => {}
            KeyName::Mtu => self.mtu = Some(Mtu::parse(value)?),
            KeyName::Dns => {
                for item in words(value) {
                    self.wg_quick.dns.push(verbatim(item)?);
                }
            }
            KeyName::Table if value.is_empty() => {}
            KeyName::Table => self.wg_quick.table = Some(verbatim(value)?),
            KeyName::PreUp => push_hook(&mut self.wg_quick.pre_up, value)?,
            KeyName::PostUp => push_hook(&mut self.wg_quick.post_up, value)?,
            KeyName::PreDown => push_hook(&mut self.wg_quick.pre_down, value)?,
            KeyName::PostDown => push_hook(&mut self.wg_quick.post_down, value)?,
            KeyName::SaveConfig => self.wg_quick.save_config = parse_bool(value)?,
            KeyName::FallbackPort => self.fallback_port = Some(parse_fallback_port(value)?),
            KeyName::FallbackCarrier => {
                self.fallback_carrier = Some(FallbackCarrier::parse(value)?);
            }
            KeyName::Cipher => self.cipher = Some(value.parse()?),
            KeyName::Mode => self.mode = InterfaceMode::parse(value)?,
            KeyName::Compression => self.compression = Some(value.parse()?),
            KeyName::Metrics => self.metrics = Some(value.parse()?),
            // Other sections' keys never reach here: `read_line` checks.
            _ => {}
        }
        Ok(())
    }
}

impl PeerDraft {
    fn new(header_line: usize) -> Self {
        PeerDraft {
            header_line,
            seen: SeenKeys::default(),
            public_key: None,
            preshared_key: None,
            endpoint: None,
            allowed_ips: Vec::new(),
            allowed_ips_line: None,
            persistent_keepalive: None,
            fallback_port: None,
            groups: None,
        }
    }

    fn set(&mut self, key: KeyName, value: &str, resolver: &dyn Resolve) -> Result<(), ValueError> {
        match key {
            KeyName::PublicKey => self.public_key = Some(value.parse()?),
            KeyName::PresharedKey => self.preshared_key = Some(PresharedKey::from_base64(value)?),
            KeyName::Endpoint => self.endpoint = Some(Endpoint::parse(value, resolver)?),
            // An empty AllowedIPs adds nothing; an empty item in a list is
            // an error, as in `wg`.
            KeyName::AllowedIps if value.is_empty() => {}
            KeyName::AllowedIps => {
                for item in value.split(',') {
                    if item.is_empty() {
                        return Err(ValueError::EmptyListEntry);
                    }
                    self.allowed_ips.push(item.parse()?);
                }
            }
            KeyName::PersistentKeepalive => {
                self.persistent_keepalive = KeepaliveInterval::parse_optional(value)?;
            }
            KeyName::PeerFallbackPort => self.fallback_port = Some(parse_fallback_port(value)?),
            KeyName::Groups => self.groups = Some(parse_groups(value)?),
            // Interface keys never reach here: `read_line` checks the section.
            _ => {}
        }
        Ok(())
    }
}

/// `Groups = ops, db`: a comma list of group names.
fn parse_groups(value: &str) -> Result<Vec<fjord_mesh::Group>, ValueError> {
    let mut groups: Vec<fjord_mesh::Group> = Vec::new();
    for item in value.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(ValueError::EmptyListEntry);
        }
        let group = item
            .parse()
            .map_err(|error: fjord_mesh::cert::GroupNameError| {
                ValueError::Mesh(error.to_string())
            })?;
        if groups.contains(&group) {
            return Err(ValueError::Mesh(format!("group `{item}` is named twice")));
        }
        groups.push(group);
    }
    Ok(groups)
}

impl MeshDraft {
    fn set(
        &mut self,
        key: KeyName,
        value: &str,
        line: usize,
        resolver: &dyn Resolve,
    ) -> Result<(), ValueError> {
        match key {
            KeyName::Network => self.set_network(value),
            KeyName::Certificate => self.set_certificate(value, line),
            KeyName::Member => self.add_member(value, line),
            KeyName::Bootstrap => self.add_bootstrap(value, resolver),
            KeyName::Revocations => self.set_revocations(value, line),
            KeyName::Policy => self.set_policy(value, line),
            KeyName::Domain => self.set_domain(value),
            KeyName::ExitNode => self.set_exit_node(value),
            KeyName::EagerSessions => self.set_eager_sessions(value),
            KeyName::IdleTimeout => self.set_idle_timeout(value),
            // Other sections' keys never reach here: `read_line` checks.
            _ => Ok(()),
        }
    }
}

/// The section a `[...]` line opens.
fn section_header(content: &str) -> Result<SectionKind, Problem> {
    let Some(inner) = content
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
    else {
        return Err(Problem::MalformedSectionHeader);
    };
    let name: String = inner.chars().filter(|c| !c.is_whitespace()).collect();
    if name.eq_ignore_ascii_case("Interface") {
        Ok(SectionKind::Interface)
    } else if name.eq_ignore_ascii_case("Peer") {
        Ok(SectionKind::Peer)
    } else if name.eq_ignore_ascii_case("Mesh") {
        Ok(SectionKind::Mesh)
    } else {
        Err(Problem::UnknownSection(quote(inner.trim())))
    }
}

/// Items of a wg-quick list: separated by commas or whitespace, empty items
/// skipped (wg-quick replaces commas with spaces and splits words).
fn words(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|item| !item.is_empty())
}

fn verbatim(text: &str) -> Result<VerbatimValue, ValueError> {
    // Values here are trimmed, comment-free single lines, so this only
    // fails for an empty value.
    VerbatimValue::new(text).map_err(|_| ValueError::Empty)
}

/// Adds a hook command; an empty one is skipped (wg-quick would run nothing).
fn push_hook(hooks: &mut Vec<VerbatimValue>, value: &str) -> Result<(), ValueError> {
    if !value.is_empty() {
        hooks.push(verbatim(value)?);
    }
    Ok(())
}
