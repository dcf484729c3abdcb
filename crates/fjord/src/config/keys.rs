//! The keys of a `.conf` file: their spellings, the section each belongs
//! to, and how a line names one (the reading rules are in `parse.rs`).

use super::error::SectionKind;

/// Every key fjord reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KeyName {
    PrivateKey,
    ListenPort,
    FwMark,
    Address,
    Mtu,
    Dns,
    Table,
    PreUp,
    PostUp,
    PreDown,
    PostDown,
    SaveConfig,
    Mode,
    PublicKey,
    PresharedKey,
    Endpoint,
    AllowedIps,
    PersistentKeepalive,
    Network,
    Certificate,
    Member,
    Bootstrap,
    Revocations,
    Policy,
    /// `[Mesh] Domain`: the DNS domain members answer names under.
    Domain,
    /// `[Mesh] ExitNode`: the member everything else is routed to.
    ExitNode,
    /// `[Mesh] EagerSessions`: up to this many members, all meet all.
    EagerSessions,
    /// `[Mesh] IdleTimeout`: seconds before an idle on-demand session closes.
    IdleTimeout,
    /// `[Interface] FallbackPort`: where this node listens for carriers.
    FallbackPort,
    /// `[Peer] FallbackPort`: where the peer listens for carriers.
    PeerFallbackPort,
    FallbackCarrier,
    Cipher,
    Compression,
    /// `[Interface] Metrics`: the Prometheus endpoint's address.
    Metrics,
    /// `[Peer] Groups`: puts a configured peer inside the network policy.
    Groups,
}

/// Number of [`KeyName`] variants, for per-key tables.
pub(super) const KEY_COUNT: usize = 35;

// `SeenKeys` indexes by discriminant; the last variant must fit.
const _: () = assert!(KeyName::Groups as usize + 1 == KEY_COUNT);

const ALL_KEYS: [KeyName; KEY_COUNT] = [
    KeyName::PrivateKey,
    KeyName::ListenPort,
    KeyName::FwMark,
    KeyName::Address,
    KeyName::Mtu,
    KeyName::Dns,
    KeyName::Table,
    KeyName::PreUp,
    KeyName::PostUp,
    KeyName::PreDown,
    KeyName::PostDown,
    KeyName::SaveConfig,
    KeyName::Mode,
    KeyName::PublicKey,
    KeyName::PresharedKey,
    KeyName::Endpoint,
    KeyName::AllowedIps,
    KeyName::PersistentKeepalive,
    KeyName::Network,
    KeyName::Certificate,
    KeyName::Member,
    KeyName::Bootstrap,
    KeyName::Revocations,
    KeyName::Policy,
    KeyName::Domain,
    KeyName::ExitNode,
    KeyName::EagerSessions,
    KeyName::IdleTimeout,
    KeyName::FallbackPort,
    KeyName::PeerFallbackPort,
    KeyName::FallbackCarrier,
    KeyName::Cipher,
    KeyName::Compression,
    KeyName::Metrics,
    KeyName::Groups,
];

impl KeyName {
    /// The canonical spelling, used in messages and when writing.
    pub(super) fn name(self) -> &'static str {
        match self {
            KeyName::PrivateKey => "PrivateKey",
            KeyName::ListenPort => "ListenPort",
            KeyName::FwMark => "FwMark",
            KeyName::Address => "Address",
            KeyName::Mtu => "MTU",
            KeyName::Dns => "DNS",
            KeyName::Table => "Table",
            KeyName::PreUp => "PreUp",
            KeyName::PostUp => "PostUp",
            KeyName::PreDown => "PreDown",
            KeyName::PostDown => "PostDown",
            KeyName::SaveConfig => "SaveConfig",
            KeyName::Mode => "Mode",
            KeyName::PublicKey => "PublicKey",
            KeyName::PresharedKey => "PresharedKey",
            KeyName::Endpoint => "Endpoint",
            KeyName::AllowedIps => "AllowedIPs",
            KeyName::PersistentKeepalive => "PersistentKeepalive",
            KeyName::Network => "Network",
            KeyName::Certificate => "Certificate",
            KeyName::Member => "Member",
            KeyName::Bootstrap => "Bootstrap",
            KeyName::Revocations => "Revocations",
            KeyName::Policy => "Policy",
            KeyName::Domain => "Domain",
            KeyName::ExitNode => "ExitNode",
            KeyName::EagerSessions => "EagerSessions",
            KeyName::IdleTimeout => "IdleTimeout",
            KeyName::FallbackPort | KeyName::PeerFallbackPort => "FallbackPort",
            KeyName::FallbackCarrier => "FallbackCarrier",
            KeyName::Cipher => "Cipher",
            KeyName::Compression => "Compression",
            KeyName::Metrics => "Metrics",
            KeyName::Groups => "Groups",
        }
    }

    pub(super) fn section(self) -> SectionKind {
        match self {
            KeyName::PublicKey
            | KeyName::PresharedKey
            | KeyName::Endpoint
            | KeyName::AllowedIps
            | KeyName::PersistentKeepalive
            | KeyName::PeerFallbackPort
            | KeyName::Groups => SectionKind::Peer,
            KeyName::Network
            | KeyName::Certificate
            | KeyName::Member
            | KeyName::Bootstrap
            | KeyName::Revocations
            | KeyName::Policy => SectionKind::Mesh,
            KeyName::Domain | KeyName::ExitNode | KeyName::EagerSessions | KeyName::IdleTimeout => {
                SectionKind::Mesh
            }
            _ => SectionKind::Interface,
        }
    }

    /// Keys `wg` itself reads; `wg` removes all whitespace from their lines.
    pub(super) fn is_wg_key(self) -> bool {
        matches!(
            self,
            KeyName::PrivateKey
                | KeyName::ListenPort
                | KeyName::FwMark
                | KeyName::PublicKey
                | KeyName::PresharedKey
                | KeyName::Endpoint
                | KeyName::AllowedIps
                | KeyName::PersistentKeepalive
        )
    }

    /// Keys whose values accumulate when repeated.
    pub(super) fn repeats(self) -> bool {
        matches!(
            self,
            KeyName::Address
                | KeyName::Dns
                | KeyName::AllowedIps
                | KeyName::Member
                | KeyName::Bootstrap
                | KeyName::PreUp
                | KeyName::PostUp
                | KeyName::PreDown
                | KeyName::PostDown
        )
    }

    /// Finds the key a line in `section` names: `wg` keys with all
    /// whitespace removed, wg-quick keys with surrounding whitespace
    /// trimmed, both ignoring ASCII case. A name used in several sections
    /// (`FallbackPort`) is the key of this section, else of another.
    pub(super) fn lookup(trimmed_key: &str, section: SectionKind) -> Option<KeyName> {
        let squeezed: String = trimmed_key.chars().filter(|c| !c.is_whitespace()).collect();
        let named = |key: &KeyName| {
            let candidate = if key.is_wg_key() {
                squeezed.as_str()
            } else {
                trimmed_key
            };
            candidate.eq_ignore_ascii_case(key.name())
        };
        let mut candidates = ALL_KEYS.into_iter().filter(named);
        let first = candidates.next()?;
        Some(
            std::iter::once(first)
                .chain(candidates)
                .find(|key| key.section() == section)
                .unwrap_or(first),
        )
    }
}
