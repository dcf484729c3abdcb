//! fjord-only control messages, carried inside authenticated WireGuard
//! sessions.
//!
//! A control message is a fjord message (`fjord_proto::extension`, which
//! registers every kind, its number and its recipient, and says how to
//! add one) for the membership state machine or the path MTU prober.
//! fjord sends them only to peers that proved they are fjord members (a
//! valid [`Control::Hello`]), and to configured bootstrap members.
//!
//! Kinds: Hello (our certificate: "I am a member, and I speak fjord",
//! and whether we want the receiver's member list),
//! Members (a batch of other members with their certificates, observed
//! endpoints and how long ago the sender heard of them), Revocations,
//! RevocationDigest (how many revocations the sender holds and a hash of
//! them, `membership/revocations.rs`: a receiver whose own differs sends
//! its list back), Goodbye (the sender leaves the mesh), Ping/Pong (path
//! RTT), and
//! Introduce/Observed/Rendezvous (NAT traversal through a mutual member) and
//! RelayRequest/RelayOffer (a member relays when no direct path opens),
//! and MtuProbe/MtuAck (path MTU probing, `pmtu.rs`: a probe is padded
//! with zeros to the size under test, the ack is small and says how many
//! plaintext bytes arrived). The Ethernet frames of a switch-mode
//! interface (`switch.rs`) share the format: data, not control, so they
//! are never decoded as a [`Control`]. Refused (15) answers a Hello whose
//! certificate the sender refused, with a one-byte [`RefusalReason`]: the
//! handshake succeeded, so without it the refused node would look healthy
//! to its operator while no member ever takes it in.
//! PolicyDigest/PolicyRequest/PolicyChunk (17-19) carry the network
//! policy, whose signed text is cut into chunks (`control/policy.rs` for
//! their bodies, `membership/policy_transfer.rs` for the exchange).
//!
//! A kind the receiver does not know fails to decode and is dropped (and
//! counted as malformed); nothing else happens. That is what keeps new
//! kinds compatible: RevocationDigest (14) is newer than the rest, and a
//! node that predates it ignores it and still gets revocations the old
//! way, in Revocations messages; a node that predates Refused (15) just
//! goes on without being told, and one that predates Observed (16) does
//! not learn that its NAT changes its port (it sends the plain initiations
//! of a rendezvous as before); one that predates the policy kinds never
//! asks for a policy, and keeps none from other members. Refusal reasons follow the same rule one
//! level down: a code the receiver does not know reads as
//! [`RefusalReason::Other`].

use std::net::SocketAddr;

use fjord_proto::PublicKey;
use fjord_proto::extension::{EXTENSION_HEADER_LEN, EXTENSION_MARKER, ExtensionKind};

use crate::cert::{CertError, Certificate, Revocation};
use crate::codec::{DecodeError, Reader, Writer};

mod policy;

pub use policy::{
    MAX_POLICY_CHUNKS, MAX_REQUESTED_CHUNKS, POLICY_CHUNK_BYTES, POLICY_HASH_LEN, PolicyId,
    chunk_count,
};

/// Marker, kind and length.
pub const CONTROL_HEADER_LEN: usize = EXTENSION_HEADER_LEN;
/// Most observed endpoints gossiped per member.
pub const MAX_ENDPOINTS: usize = 4;
/// Most entries in one Members or Revocations message; the sender also
/// keeps each message within the tunnel MTU.
pub const MAX_BATCH_ENTRIES: usize = 64;

/// Bytes of the revocation hash in a [`Control::RevocationDigest`].
pub const REVOCATION_HASH_LEN: usize = 16;

/// Why a member refused the certificate in a Hello, as one byte on the
/// wire. Coarser than [`CertError`]: what the refused node's operator can
/// act on, not how the check failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RefusalReason {
    /// Signed by another network key, or the signature does not verify
    /// (from the refusing member's side the two look alike: it only holds
    /// its own network's key).
    OtherNetwork,
    Expired,
    /// Issued after the refusing member's clock: one of the clocks is off.
    NotYetValid,
    Revoked,
    /// Not in the refusing member's member list, or with other addresses.
    NotListed,
    /// Issued for another node key than the one that presented it.
    WrongNode,
    /// A code this version does not know (a newer member's reason), kept
    /// as it came so the message encodes back to the same bytes.
    Other(u8),
}

impl RefusalReason {
    /// The reason's byte on the wire.
    pub fn code(self) -> u8 {
        match self {
            RefusalReason::Other(code) => code,
            RefusalReason::OtherNetwork => 1,
            RefusalReason::Expired => 2,
            RefusalReason::NotYetValid => 3,
            RefusalReason::Revoked => 4,
            RefusalReason::NotListed => 5,
            RefusalReason::WrongNode => 6,
        }
    }

    /// What a byte on the wire means: every code is some reason.
    pub fn from_code(code: u8) -> Self {
        match code {
            1 => RefusalReason::OtherNetwork,
            2 => RefusalReason::Expired,
            3 => RefusalReason::NotYetValid,
            4 => RefusalReason::Revoked,
            5 => RefusalReason::NotListed,
            6 => RefusalReason::WrongNode,
            other => RefusalReason::Other(other),
        }
    }
}

impl From<CertError> for RefusalReason {
    fn from(error: CertError) -> Self {
        match error {
            CertError::WrongNetwork | CertError::BadSignature => RefusalReason::OtherNetwork,
            CertError::Expired => RefusalReason::Expired,
            CertError::NotYetValid => RefusalReason::NotYetValid,
            CertError::Revoked => RefusalReason::Revoked,
            CertError::NotListed => RefusalReason::NotListed,
            CertError::WrongNode => RefusalReason::WrongNode,
        }
    }
}

impl std::fmt::Display for RefusalReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RefusalReason::OtherNetwork => "signed by another network",
            RefusalReason::Expired => "expired",
            RefusalReason::NotYetValid => "not valid yet",
            RefusalReason::Revoked => "revoked",
            RefusalReason::NotListed => "not in its member list",
            RefusalReason::WrongNode => "issued for another node key",
            RefusalReason::Other(code) => {
                return write!(f, "reason code {code}, unknown to this version");
            }
        })
    }
}

/// One member as another member describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberRecord {
    pub certificate: Certificate,
    /// Where the describing member last saw it send from (its NAT mapping).
    pub endpoints: Vec<SocketAddr>,
    /// Where the member says it listens (see [`Control::Hello`]).
    pub host_addresses: Vec<SocketAddr>,
    /// How long ago the describing member last heard from it, or of it.
    pub heard_secs_ago: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Control {
    /// The sender's certificate; `wants_members` asks the receiver for
    /// its member list (a node joining through a bootstrap member asks;
    /// greetings between members who learned of each other do not).
    /// `host_addresses` are the sender's own interface addresses with its
    /// listening port: a datagram to one never passes the sender's NAT
    /// (if it has one), so members greet these directly, with no
    /// rendezvous; a member on the open internet, or on a shared LAN, is
    /// met at once.
    Hello {
        certificate: Box<Certificate>,
        wants_members: bool,
        host_addresses: Vec<SocketAddr>,
    },
    Members(Vec<MemberRecord>),
    Revocations(Vec<Revocation>),
    /// "I hold `count` revocations, hashing to `hash`" (see
    /// `membership/revocations.rs` for the hash): a receiver whose own
    /// digest differs answers with its Revocations.
    RevocationDigest {
        count: u32,
        hash: [u8; REVOCATION_HASH_LEN],
    },
    Goodbye,
    Ping {
        nonce: u64,
    },
    Pong {
        nonce: u64,
    },
    /// "I cannot reach `peer`; tell it where I am." Sent to a member that
    /// reaches both. `predict_ports`: plain punches failed before, so
    /// this round both sides also try port prediction (traversal.rs).
    Introduce {
        peer: PublicKey,
        predict_ports: bool,
    },
    /// "`peer` wants to meet you; it is seen at `endpoints`": the
    /// introducer sends one to each side, and both aim at the other at
    /// once, so each NAT sees an outgoing packet before the incoming one.
    Rendezvous {
        peer: PublicKey,
        endpoints: Vec<SocketAddr>,
        predict_ports: bool,
    },
    /// "I see you send from `endpoint`": an introducer tells each side of
    /// a rendezvous where its NAT maps it, so a member learns whether its
    /// NAT keeps its port (see `traversal.rs`).
    Observed {
        endpoint: SocketAddr,
    },
    /// "No direct path to `peer` opened; relay between us."
    RelayRequest {
        peer: PublicKey,
    },
    /// "Reach `peer` through me": the relay sends one to each side.
    RelayOffer {
        peer: PublicKey,
    },
    /// Path MTU probe `id`; the zero padding behind it makes the datagram
    /// the size under test.
    MtuProbe {
        id: u32,
    },
    /// "Probe `id` arrived with `plaintext_bytes` of plaintext."
    MtuAck {
        id: u32,
        plaintext_bytes: u16,
    },
    /// "I refused the certificate in your Hello": sent to a peer that is
    /// not (or no longer) a member, at most once a minute per key.
    Refused {
        reason: RefusalReason,
    },
    /// "I hold policy `id`, whose signed text is `len` bytes": a member
    /// that holds an older one (or none) asks for it.
    PolicyDigest {
        id: PolicyId,
        len: u32,
    },
    /// "Send me `count` chunks of policy `id` from chunk `first` on."
    PolicyRequest {
        id: PolicyId,
        first: u16,
        count: u16,
    },
    /// Chunk `index` of the `count` chunks of policy `id`'s signed text.
    PolicyChunk {
        id: PolicyId,
        index: u16,
        count: u16,
        bytes: Vec<u8>,
    },
}

impl Control {
    /// Whether `plaintext` (a decrypted transport payload) is a fjord
    /// message rather than an IP packet.
    pub fn is_control(plaintext: &[u8]) -> bool {
        fjord_proto::extension::is_extension(plaintext)
    }

    /// Parses a control message from a decrypted payload, ignoring
    /// WireGuard's zero padding after it. Never panics.
    pub fn decode(plaintext: &[u8]) -> Result<Self, DecodeError> {
        let mut reader = Reader::new(plaintext);
        if reader.u8()? != EXTENSION_MARKER {
            return Err(DecodeError::UnknownFormat);
        }
        let kind = reader.u8()?;
        let len = usize::from(reader.u16()?);
        let mut body = Reader::new(reader.take(len)?);
        if reader.remaining().iter().any(|&byte| byte != 0) {
            return Err(DecodeError::TrailingBytes);
        }
        let Some(kind) = ExtensionKind::from_code(kind) else {
            return Err(DecodeError::UnknownFormat);
        };
        let control = match kind {
            ExtensionKind::Hello => Control::Hello {
                certificate: Box::new(Certificate::read(&mut body)?),
                wants_members: read_flag(&mut body)?,
                host_addresses: read_addresses(&mut body)?,
            },
            ExtensionKind::Members => {
                let count = body.count(MAX_BATCH_ENTRIES)?;
                let records = (0..count)
                    .map(|_| read_member(&mut body))
                    .collect::<Result<_, _>>()?;
                Control::Members(records)
            }
            ExtensionKind::Revocations => {
                let count = body.count(MAX_BATCH_ENTRIES)?;
                let revocations = (0..count)
                    .map(|_| Revocation::read(&mut body))
                    .collect::<Result<_, _>>()?;
                Control::Revocations(revocations)
            }
            ExtensionKind::RevocationDigest => Control::RevocationDigest {
                count: body.u32()?,
                hash: body.array()?,
            },
            ExtensionKind::Goodbye => Control::Goodbye,
            ExtensionKind::Ping => Control::Ping { nonce: body.u64()? },
            ExtensionKind::Pong => Control::Pong { nonce: body.u64()? },
            ExtensionKind::Introduce => Control::Introduce {
                peer: PublicKey::from_bytes(body.array()?),
                predict_ports: read_flag(&mut body)?,
            },
            ExtensionKind::RelayRequest => Control::RelayRequest {
                peer: PublicKey::from_bytes(body.array()?),
            },
            ExtensionKind::RelayOffer => Control::RelayOffer {
                peer: PublicKey::from_bytes(body.array()?),
            },
            ExtensionKind::MtuProbe => Control::MtuProbe { id: body.u32()? },
            ExtensionKind::MtuAck => Control::MtuAck {
                id: body.u32()?,
                plaintext_bytes: body.u16()?,
            },
            ExtensionKind::Refused => Control::Refused {
                reason: RefusalReason::from_code(body.u8()?),
            },
            ExtensionKind::Observed => Control::Observed {
                endpoint: body.socket_addr()?,
            },
            ExtensionKind::PolicyDigest => Control::PolicyDigest {
                id: PolicyId::read(&mut body)?,
                len: policy::read_text_len(&mut body)?,
            },
            ExtensionKind::PolicyRequest => {
                let id = PolicyId::read(&mut body)?;
                let (first, count) = policy::read_range(&mut body)?;
                Control::PolicyRequest { id, first, count }
            }
            ExtensionKind::PolicyChunk => {
                let id = PolicyId::read(&mut body)?;
                let (index, count, bytes) = policy::read_chunk(&mut body)?;
                Control::PolicyChunk {
                    id,
                    index,
                    count,
                    bytes: bytes.to_vec(),
                }
            }
            ExtensionKind::Rendezvous => {
                let peer = PublicKey::from_bytes(body.array()?);
                let endpoints = read_addresses(&mut body)?;
                Control::Rendezvous {
                    peer,
                    endpoints,
                    predict_ports: read_flag(&mut body)?,
                }
            }
            // Not control messages: routed elsewhere by their recipient.
            ExtensionKind::Frame | ExtensionKind::SessionOffer => {
                return Err(DecodeError::UnknownFormat);
            }
        };
        body.finish()?;
        Ok(control)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut body = Writer::default();
        let kind = match self {
            Control::Hello {
                certificate,
                wants_members,
                host_addresses,
            } => {
                body.bytes(&certificate.encode());
                body.u8(u8::from(*wants_members));
                write_addresses(&mut body, host_addresses);
                ExtensionKind::Hello
            }
            Control::Members(records) => {
                body.u8(records.len().min(MAX_BATCH_ENTRIES) as u8);
                for record in records.iter().take(MAX_BATCH_ENTRIES) {
                    write_member(&mut body, record);
                }
                ExtensionKind::Members
            }
            Control::Revocations(revocations) => {
                body.u8(revocations.len().min(MAX_BATCH_ENTRIES) as u8);
                for revocation in revocations.iter().take(MAX_BATCH_ENTRIES) {
                    body.bytes(&revocation.encode());
                }
                ExtensionKind::Revocations
            }
            Control::RevocationDigest { count, hash } => {
                body.u32(*count);
                body.bytes(hash);
                ExtensionKind::RevocationDigest
            }
            Control::Goodbye => ExtensionKind::Goodbye,
            Control::Ping { nonce } => {
                body.u64(*nonce);
                ExtensionKind::Ping
            }
            Control::Pong { nonce } => {
                body.u64(*nonce);
                ExtensionKind::Pong
            }
            Control::Introduce {
                peer,
                predict_ports,
            } => {
                body.bytes(peer.as_bytes());
                body.u8(u8::from(*predict_ports));
                ExtensionKind::Introduce
            }
            Control::RelayRequest { peer } => {
                body.bytes(peer.as_bytes());
                ExtensionKind::RelayRequest
            }
            Control::RelayOffer { peer } => {
                body.bytes(peer.as_bytes());
                ExtensionKind::RelayOffer
            }
            Control::MtuProbe { id } => {
                body.u32(*id);
                ExtensionKind::MtuProbe
            }
            Control::MtuAck {
                id,
                plaintext_bytes,
            } => {
                body.u32(*id);
                body.u16(*plaintext_bytes);
                ExtensionKind::MtuAck
            }
            Control::Refused { reason } => {
                body.u8(reason.code());
                ExtensionKind::Refused
            }
            Control::Observed { endpoint } => {
                body.socket_addr(*endpoint);
                ExtensionKind::Observed
            }
            Control::Rendezvous {
                peer,
                endpoints,
                predict_ports,
            } => {
                body.bytes(peer.as_bytes());
                write_addresses(&mut body, endpoints);
                body.u8(u8::from(*predict_ports));
                ExtensionKind::Rendezvous
            }
            Control::PolicyDigest { id, len } => {
                id.write(&mut body);
                body.u32(*len);
                ExtensionKind::PolicyDigest
            }
            Control::PolicyRequest { id, first, count } => {
                id.write(&mut body);
                body.u16(*first);
                body.u16(*count);
                ExtensionKind::PolicyRequest
            }
            Control::PolicyChunk {
                id,
                index,
                count,
                bytes,
            } => {
                id.write(&mut body);
                policy::write_chunk(&mut body, *index, *count, bytes);
                ExtensionKind::PolicyChunk
            }
        };
        let mut message = Writer::default();
        message.u8(EXTENSION_MARKER);
        message.u8(kind.code());
        // Bodies are bounded by MTU-sized batches, far below 64 KiB.
        message.u16(body.bytes.len().min(usize::from(u16::MAX)) as u16);
        message.bytes(&body.bytes);
        message.bytes
    }
}

/// Encoded length of one member record, so senders can fill a message up
/// to the MTU.
pub fn member_record_len(record: &MemberRecord) -> usize {
    let mut writer = Writer::default();
    write_member(&mut writer, record);
    writer.bytes.len()
}

fn write_member(writer: &mut Writer, record: &MemberRecord) {
    let certificate = record.certificate.encode();
    writer.u16(certificate.len() as u16);
    writer.bytes(&certificate);
    write_addresses(writer, &record.endpoints);
    write_addresses(writer, &record.host_addresses);
    writer.bytes(&record.heard_secs_ago.to_be_bytes());
}

/// A boolean as one byte, 0 or 1; anything else is invalid.
fn read_flag(reader: &mut Reader<'_>) -> Result<bool, DecodeError> {
    match reader.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(DecodeError::InvalidField),
    }
}

/// At most [`MAX_ENDPOINTS`] addresses, count first.
fn write_addresses(writer: &mut Writer, addresses: &[SocketAddr]) {
    let addresses = &addresses[..addresses.len().min(MAX_ENDPOINTS)];
    writer.u8(addresses.len() as u8);
    for address in addresses {
        writer.socket_addr(*address);
    }
}

fn read_addresses(reader: &mut Reader<'_>) -> Result<Vec<SocketAddr>, DecodeError> {
    let count = reader.count(MAX_ENDPOINTS)?;
    (0..count).map(|_| reader.socket_addr()).collect()
}

fn read_member(reader: &mut Reader<'_>) -> Result<MemberRecord, DecodeError> {
    let len = usize::from(reader.u16()?);
    let certificate = Certificate::decode(reader.take(len)?)?;
    let endpoints = read_addresses(reader)?;
    let host_addresses = read_addresses(reader)?;
    let heard_secs_ago = u32::from_be_bytes(reader.array()?);
    Ok(MemberRecord {
        certificate,
        endpoints,
        host_addresses,
        heard_secs_ago,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cert::NetworkSecret;
    use fjord_proto::PrivateKey;

    fn certificate(seed: u8) -> Certificate {
        let secret = NetworkSecret::from_seed([1; 32]);
        let key = PrivateKey::from_bytes([seed; 32]).public_key();
        let address = format!("198.19.0.{seed}/32").parse().unwrap();
        secret.sign(key, "n", &[address], 10, 20).unwrap()
    }

    fn samples() -> Vec<Control> {
        vec![
            Control::Hello {
                certificate: Box::new(certificate(1)),
                wants_members: true,
                host_addresses: vec!["198.18.0.1:51820".parse().unwrap()],
            },
            Control::Members(vec![
                MemberRecord {
                    certificate: certificate(2),
                    endpoints: vec!["198.18.0.2:51820".parse().unwrap()],
                    host_addresses: vec!["[fd00::2]:51820".parse().unwrap()],
                    heard_secs_ago: 3,
                },
                MemberRecord {
                    certificate: certificate(3),
                    endpoints: vec![],
                    host_addresses: vec![],
                    heard_secs_ago: 0,
                },
            ]),
            Control::Revocations(vec![
                NetworkSecret::from_seed([1; 32])
                    .revoke(PrivateKey::from_bytes([4; 32]).public_key(), 15),
            ]),
            Control::RevocationDigest {
                count: 3,
                hash: [9; REVOCATION_HASH_LEN],
            },
            Control::Goodbye,
            Control::Ping { nonce: 42 },
            Control::Pong { nonce: 43 },
            Control::Introduce {
                peer: PrivateKey::from_bytes([5; 32]).public_key(),
                predict_ports: true,
            },
            Control::RelayRequest {
                peer: PrivateKey::from_bytes([7; 32]).public_key(),
            },
            Control::RelayOffer {
                peer: PrivateKey::from_bytes([8; 32]).public_key(),
            },
            Control::MtuProbe { id: 7 },
            Control::Observed {
                endpoint: "198.18.4.1:40158".parse().unwrap(),
            },
            Control::MtuAck {
                id: 7,
                plaintext_bytes: 1216,
            },
            Control::Rendezvous {
                peer: PrivateKey::from_bytes([6; 32]).public_key(),
                endpoints: vec![
                    "198.18.1.1:4000".parse().unwrap(),
                    "[fd00::2]:51820".parse().unwrap(),
                ],
                predict_ports: false,
            },
            Control::Refused {
                reason: RefusalReason::Expired,
            },
            Control::PolicyDigest {
                id: policy_id(),
                len: 5000,
            },
            Control::PolicyRequest {
                id: policy_id(),
                first: 4,
                count: 1,
            },
            Control::PolicyChunk {
                id: policy_id(),
                index: 4,
                count: 5,
                bytes: vec![b'a'; 904],
            },
        ]
    }

    fn policy_id() -> PolicyId {
        PolicyId {
            version: 7,
            hash: [0xab; POLICY_HASH_LEN],
        }
    }

    #[test]
    fn policy_messages_out_of_bounds_are_refused() {
        let digest = |len| Control::PolicyDigest {
            id: policy_id(),
            len,
        };
        let too_long = u32::try_from(crate::policy::MAX_POLICY_BYTES + 1).unwrap();
        for len in [0, too_long] {
            assert_eq!(
                Control::decode(&digest(len).encode()),
                Err(DecodeError::InvalidField)
            );
        }
        let request = |first, count| Control::PolicyRequest {
            id: policy_id(),
            first,
            count,
        };
        let past_the_end = MAX_POLICY_CHUNKS as u16;
        assert!(Control::decode(&request(past_the_end, 1).encode()).is_err());
        assert!(Control::decode(&request(0, 0).encode()).is_err());
        let greedy = request(0, MAX_REQUESTED_CHUNKS as u16 + 1).encode();
        assert_eq!(Control::decode(&greedy), Err(DecodeError::TooMany));
        let chunk = |index, count, len| Control::PolicyChunk {
            id: policy_id(),
            index,
            count,
            bytes: vec![1; len],
        };
        for bad in [chunk(5, 5, 10), chunk(0, 0, 10), chunk(0, 1, 0)] {
            assert!(Control::decode(&bad.encode()).is_err(), "{bad:?}");
        }
        // The writer cuts an oversized chunk, so a hand-made one tests the reader.
        let mut oversized = chunk(0, 1, POLICY_CHUNK_BYTES).encode();
        let at = CONTROL_HEADER_LEN + 8 + POLICY_HASH_LEN + 4;
        oversized[at..at + 2].copy_from_slice(&(POLICY_CHUNK_BYTES as u16 + 1).to_be_bytes());
        oversized.push(1);
        let body_len = (oversized.len() - CONTROL_HEADER_LEN) as u16;
        oversized[2..4].copy_from_slice(&body_len.to_be_bytes());
        assert_eq!(Control::decode(&oversized), Err(DecodeError::TooMany));
    }

    #[test]
    fn every_kind_round_trips_with_padding() {
        for control in samples() {
            let mut bytes = control.encode();
            assert!(Control::is_control(&bytes));
            bytes.resize(bytes.len().next_multiple_of(16), 0);
            assert_eq!(Control::decode(&bytes).unwrap(), control);
        }
    }

    #[test]
    fn an_unknown_kind_is_an_error_a_node_ignores() {
        // What a node from before RevocationDigest makes of one: the kind
        // byte is all it checks, so any later kind fails the same way.
        let mut bytes = Control::RevocationDigest {
            count: 1,
            hash: [0; REVOCATION_HASH_LEN],
        }
        .encode();
        bytes[1] = 200;
        assert_eq!(Control::decode(&bytes), Err(DecodeError::UnknownFormat));
    }

    #[test]
    fn every_refusal_reason_round_trips_and_unknown_codes_read_as_other() {
        let reasons = [
            RefusalReason::OtherNetwork,
            RefusalReason::Expired,
            RefusalReason::NotYetValid,
            RefusalReason::Revoked,
            RefusalReason::NotListed,
            RefusalReason::WrongNode,
            RefusalReason::Other(0),
        ];
        for reason in reasons {
            let bytes = Control::Refused { reason }.encode();
            assert_eq!(Control::decode(&bytes), Ok(Control::Refused { reason }));
        }
        // A reason added after this version: still a refusal, just vaguer,
        // and it encodes back to what came.
        let mut bytes = Control::Refused {
            reason: RefusalReason::Expired,
        }
        .encode();
        bytes[CONTROL_HEADER_LEN] = 200;
        let decoded = Control::decode(&bytes).unwrap();
        assert_eq!(
            decoded,
            Control::Refused {
                reason: RefusalReason::Other(200)
            }
        );
        assert_eq!(decoded.encode(), bytes);
    }

    #[test]
    fn truncations_and_garbage_are_errors_not_panics() {
        for control in samples() {
            let bytes = control.encode();
            for cut in 0..bytes.len() {
                assert!(Control::decode(&bytes[..cut]).is_err());
            }
            let mut trailing = bytes.clone();
            trailing.push(1);
            assert_eq!(Control::decode(&trailing), Err(DecodeError::TrailingBytes));
        }
    }
}
