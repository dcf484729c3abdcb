//! The registry of fjord's own message kinds: every kind, its number and
//! who handles it, in one table ([`ExtensionKind`]).
//!
//! A fjord message is the plaintext of an ordinary transport data message
//! whose first byte is [`EXTENSION_MARKER`]:
//!
//! ```text
//! marker 0x1f | kind u8 | body length u16 | body | (WireGuard's zero padding)
//! ```
//!
//! The marker's high nibble (1) is no IP version, so a plain WireGuard
//! peer that ever received one would drop it as a malformed inner packet;
//! fjord sends these only to peers that proved they are fjord.
//!
//! A received payload is classified once, by the device
//! (`peer/data.rs`): [`Recipient::Protocol`] kinds are handled inside
//! this crate (the session offer, `negotiation.rs`); every other one is
//! handed over as [`crate::Received::Extension`] with its [`Recipient`],
//! and `fjord_mesh::Node` routes on that alone: frames to the switch,
//! path MTU probes and acks to the prober, the rest to the membership
//! state machine, which decodes the body (`fjord_mesh::control`).
//!
//! A kind the receiver does not know keeps to its range's recipient
//! ([`PROTOCOL_KINDS`] stay in this crate, the rest go to membership),
//! fails to decode there and is dropped and counted; nothing else
//! happens. That is what keeps new kinds compatible with older nodes.
//!
//! # How to add a fjord message
//! 1. Add one line to the table below: name, an unused number (mesh kinds
//!    below [`PROTOCOL_KINDS`], protocol-core kinds inside it; numbers are
//!    never reused) and its recipient.
//! 2. That is the only place a number is written. `Control::decode`
//!    (`fjord_mesh::control`) matches every kind, so the compiler then
//!    points at the rest: a membership or path MTU kind gets its
//!    `Control` variant (its body's encoding lives there) and its
//!    handling in the mesh; a new [`Recipient`] gets its arm where
//!    `fjord_mesh::Node` routes (`finish_datagram`).

use std::ops::RangeInclusive;

/// First plaintext byte of every fjord message.
pub const EXTENSION_MARKER: u8 = 0x1f;
/// Marker, kind and body length.
pub const EXTENSION_HEADER_LEN: usize = 4;
/// Kinds handled by the protocol core itself, never passed on as
/// [`crate::Received::Extension`]; the mesh uses kinds below these.
pub const PROTOCOL_KINDS: RangeInclusive<u8> = 0x40..=0x7f;

/// Who handles a kind of fjord message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Recipient {
    /// The protocol core (this crate): what two sessions agree on.
    Protocol,
    /// The mesh's membership state machine (`fjord_mesh::Mesh`).
    Membership,
    /// The mesh node's path MTU prober.
    PathMtu,
    /// A switch-mode interface: the payload is an Ethernet frame, data
    /// rather than control.
    Switch,
}

/// Declares [`ExtensionKind`] from the one table of kinds, so a kind's
/// number and recipient can only be written once.
macro_rules! extension_kinds {
    ($($(#[$doc:meta])* $name:ident = $code:literal => $recipient:ident,)*) => {
        /// Every fjord message kind this version knows.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ExtensionKind {
            $($(#[$doc])* $name,)*
        }

        impl ExtensionKind {
            /// The kind's byte on the wire.
            pub const fn code(self) -> u8 {
                match self {
                    $(ExtensionKind::$name => $code,)*
                }
            }

            /// The kind a byte on the wire names, if this version knows it.
            pub const fn from_code(code: u8) -> Option<Self> {
                match code {
                    $($code => Some(ExtensionKind::$name),)*
                    _ => None,
                }
            }

            /// Who handles this kind.
            pub const fn recipient(self) -> Recipient {
                match self {
                    $(ExtensionKind::$name => Recipient::$recipient,)*
                }
            }
        }
    };
}

extension_kinds! {
    /// A member's certificate: "I am a member, and I speak fjord".
    Hello = 1 => Membership,
    Members = 2 => Membership,
    Revocations = 3 => Membership,
    Goodbye = 4 => Membership,
    Ping = 5 => Membership,
    Pong = 6 => Membership,
    Introduce = 7 => Membership,
    Rendezvous = 8 => Membership,
    RelayRequest = 9 => Membership,
    RelayOffer = 10 => Membership,
    MtuProbe = 11 => PathMtu,
    MtuAck = 12 => PathMtu,
    /// An Ethernet frame of a switch-mode interface (`fjord_mesh::switch`).
    Frame = 13 => Switch,
    RevocationDigest = 14 => Membership,
    Refused = 15 => Membership,
    /// "I see you send from this endpoint" (a member's NAT mapping).
    Observed = 16 => Membership,
    /// "I hold this version of the network policy" (`fjord_mesh::control`).
    PolicyDigest = 17 => Membership,
    /// "Send me these chunks of that policy."
    PolicyRequest = 18 => Membership,
    /// One chunk of a policy's signed text.
    PolicyChunk = 19 => Membership,
    /// What a fjord node offers for one session (`negotiation.rs`).
    SessionOffer = 0x40 => Protocol,
}

/// Whether `plaintext` (a decrypted transport payload) is a fjord message
/// rather than an IP packet.
#[inline]
pub fn is_extension(plaintext: &[u8]) -> bool {
    plaintext.first() == Some(&EXTENSION_MARKER)
}

/// The kind of the fjord message `plaintext`, if it is one of a kind this
/// version knows.
#[inline]
pub fn kind_of(plaintext: &[u8]) -> Option<ExtensionKind> {
    match plaintext {
        [EXTENSION_MARKER, code, ..] => ExtensionKind::from_code(*code),
        _ => None,
    }
}

/// Who handles the fjord message `plaintext`; `None` if it is none. A
/// kind this version does not know goes by its range (module
/// documentation).
#[inline]
pub fn recipient_of(plaintext: &[u8]) -> Option<Recipient> {
    match plaintext.split_first() {
        Some((&EXTENSION_MARKER, rest)) => Some(Recipient::of_code(rest.first().copied())),
        _ => None,
    }
}

impl Recipient {
    /// Who handles a fjord message whose kind byte is `code` (`None`: the
    /// message ends after its marker, which membership drops as malformed).
    #[inline]
    pub fn of_code(code: Option<u8>) -> Self {
        let Some(code) = code else {
            return Recipient::Membership;
        };
        match ExtensionKind::from_code(code) {
            Some(kind) => kind.recipient(),
            None if PROTOCOL_KINDS.contains(&code) => Recipient::Protocol,
            None => Recipient::Membership,
        }
    }
}

/// Writes the header of a fjord message of `kind` with a `body_len`-byte
/// body into `header`.
pub fn write_header(header: &mut [u8; EXTENSION_HEADER_LEN], kind: ExtensionKind, body_len: u16) {
    let length = body_len.to_be_bytes();
    *header = [EXTENSION_MARKER, kind.code(), length[0], length[1]];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_names_at_most_one_kind_and_back() {
        for code in 0..=u8::MAX {
            if let Some(kind) = ExtensionKind::from_code(code) {
                assert_eq!(kind.code(), code);
                let protocol = kind.recipient() == Recipient::Protocol;
                assert_eq!(protocol, PROTOCOL_KINDS.contains(&code), "{kind:?}");
            }
        }
    }

    #[test]
    fn unknown_kinds_go_by_their_range() {
        assert_eq!(recipient_of(&[0x1f, 0x7e]), Some(Recipient::Protocol));
        assert_eq!(recipient_of(&[0x1f, 0x3f]), Some(Recipient::Membership));
        assert_eq!(recipient_of(&[0x1f, 13]), Some(Recipient::Switch));
        assert_eq!(recipient_of(&[0x1f, 12]), Some(Recipient::PathMtu));
        assert_eq!(recipient_of(&[0x45, 0x40]), None);
        assert_eq!(recipient_of(&[]), None);
    }
}
