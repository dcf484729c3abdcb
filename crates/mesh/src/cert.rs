//! Membership: who may join a fjord network.
//!
//! A network is an Ed25519 key pair. Its secret half signs a
//! [`Certificate`] for each node: the node's WireGuard public key, its
//! name, the overlay prefixes it may send from, and a validity window.
//! Members accept a peer only with a certificate of their network that
//! is signed, unexpired and not revoked, and route to it (and accept from
//! it) only the prefixes the certificate names, so no member can claim
//! another's overlay address.
//!
//! A [`Revocation`], also signed by the network key, invalidates every
//! certificate of one node key issued at or before its time; a node can be
//! re-admitted with a newer certificate.
//!
//! A certificate may also put its node in [`Group`]s, which the network
//! policy ([`crate::policy`]) names in its rules, and name routes: prefixes
//! beyond the node's own addresses (a LAN behind it, or a default route
//! for an exit node) that members route to it.
//!
//! Wire layout (big-endian, see [`crate::codec`]):
//!
//! ```text
//! certificate: "FJC" 1 | network key 32 | node key 32 | issued u64 |
//!              expires u64 | name len u8 + bytes | n u8 + n × prefix |
//!              Ed25519 signature 64 (over everything before it)
//!   in groups: "FJC" 2 | ... as version 1 up to the prefixes ... |
//!              g u8 (1 to 16) + g × (len u8 + group name) | signature 64
//!   routing:   "FJC" 3 | ... as version 1 up to the prefixes ... |
//!              g u8 (0 to 16) + g × group as in version 2 |
//!              r u8 (1 to 16) + r × prefix | signature 64
//! revocation:  "FJR" 1 | network key 32 | node key 32 | revoked u64 |
//!              signature 64
//! ```
//!
//! A certificate without groups or routes is always version 1, byte for
//! byte what fjord wrote before groups existed, so older members still
//! accept it; one with groups but no routes is version 2, as before routes
//! existed. Version 2 with no groups, version 3 with no routes and a route
//! with host bits set are refused, so every certificate has one encoding.
//!
//! Times are seconds since the Unix epoch. The text form of each is its
//! bytes in standard base64 on one line.

use std::fmt;
use std::str::FromStr;

use base64ct::{Base64, Encoding};
use ed25519_dalek::{Signature, Signer, SigningKey, VerifyingKey};
use fjord_proto::PublicKey;
use zeroize::{Zeroize, Zeroizing};

use crate::cidr::Cidr;
use crate::codec::{DecodeError, Reader, Writer};

mod group;

pub use group::{Group, GroupNameError, MAX_GROUP_NAME_LEN, MAX_GROUPS};

const CERTIFICATE_MAGIC: [u8; 4] = *b"FJC\x01";
/// A certificate that names groups.
const CERTIFICATE_IN_GROUPS_MAGIC: [u8; 4] = *b"FJC\x02";
/// A certificate that names routes (and groups, possibly none).
const CERTIFICATE_ROUTING_MAGIC: [u8; 4] = *b"FJC\x03";
const REVOCATION_MAGIC: [u8; 4] = *b"FJR\x01";
/// Length of an Ed25519 signature.
pub(crate) const SIGNATURE_LEN: usize = 64;
/// Most overlay prefixes one certificate may name.
pub const MAX_CERTIFICATE_ADDRESSES: usize = 8;
/// Most routes (prefixes behind the node) one certificate may name.
pub const MAX_CERTIFICATE_ROUTES: usize = 16;
/// Longest node name, in bytes.
pub const MAX_NAME_LEN: usize = 63;
/// How far a certificate's issue time may lie in the future, for members
/// whose clocks disagree a little.
pub const CLOCK_SKEW_SECS: u64 = 300;

/// Why text is not a key, certificate or revocation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("not base64")]
    NotBase64,
    #[error("a network key is 32 bytes in base64 (44 characters)")]
    WrongKeyLength,
    #[error("not a valid Ed25519 public key")]
    InvalidKey,
    #[error(transparent)]
    Decode(#[from] DecodeError),
}

/// Why a well-formed certificate or revocation is not accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    #[error("signed for another network")]
    WrongNetwork,
    #[error("the signature does not verify")]
    BadSignature,
    #[error("expired")]
    Expired,
    #[error("issued in the future")]
    NotYetValid,
    #[error("revoked")]
    Revoked,
    #[error("issued for another node key than the one presenting it")]
    WrongNode,
    #[error("not in the member list, or with other addresses than listed")]
    NotListed,
}

/// Why a certificate cannot be issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    #[error("name must be 1 to {MAX_NAME_LEN} characters of letters, digits, '.', '-' or '_'")]
    InvalidName,
    #[error("a certificate names 1 to {MAX_CERTIFICATE_ADDRESSES} overlay addresses")]
    AddressCount,
    #[error("expiry must be after issue time")]
    EmptyValidity,
    #[error("a certificate names at most {MAX_GROUPS} groups")]
    TooManyGroups,
    #[error("group `{0}` is named twice")]
    DuplicateGroup(Group),
    #[error("a certificate names at most {MAX_CERTIFICATE_ROUTES} routes")]
    TooManyRoutes,
}

/// What a certificate grants its node: its name, the overlay addresses it
/// sends from, its groups and the prefixes routed to it beyond its own
/// addresses.
#[derive(Debug, Clone, Copy, Default)]
pub struct Grant<'a> {
    pub name: &'a str,
    pub addresses: &'a [Cidr],
    pub groups: &'a [Group],
    /// Networks behind the node; `0.0.0.0/0` or `::/0` offers it as an
    /// exit node. Host bits are cleared and repeats dropped when signed.
    pub routes: &'a [Cidr],
}

/// The secret half of a network key. Only `fjord network sign` needs it;
/// it never goes onto a node. Wiped on drop; `Debug` prints nothing of it.
pub struct NetworkSecret(SigningKey);

impl NetworkSecret {
    /// A key from 32 random bytes (the caller draws them from the OS).
    pub fn from_seed(mut seed: [u8; 32]) -> Self {
        let key = Self(SigningKey::from_bytes(&seed));
        seed.zeroize();
        key
    }

    pub fn public_key(&self) -> NetworkPublicKey {
        NetworkPublicKey(self.0.verifying_key())
    }

    pub fn to_base64(&self) -> Zeroizing<String> {
        Zeroizing::new(Base64::encode_string(self.0.as_bytes()))
    }

    pub fn from_base64(text: &str) -> Result<Self, TextError> {
        let seed = decode_32(text)?;
        Ok(Self::from_seed(*seed))
    }

    /// Signs a certificate for `node_key`, valid from `issued_at` to
    /// `expires_at` (Unix seconds).
    pub fn sign(
        &self,
        node_key: PublicKey,
        name: &str,
        addresses: &[Cidr],
        issued_at: u64,
        expires_at: u64,
    ) -> Result<Certificate, IssueError> {
        self.sign_with_groups(node_key, name, addresses, &[], issued_at, expires_at)
    }

    /// [`Self::sign`], putting the node in `groups` too.
    pub fn sign_with_groups(
        &self,
        node_key: PublicKey,
        name: &str,
        addresses: &[Cidr],
        groups: &[Group],
        issued_at: u64,
        expires_at: u64,
    ) -> Result<Certificate, IssueError> {
        let grant = Grant {
            name,
            addresses,
            groups,
            routes: &[],
        };
        self.issue(node_key, &grant, issued_at, expires_at)
    }

    /// Signs a certificate for `node_key` granting `grant`, valid from
    /// `issued_at` to `expires_at` (Unix seconds).
    pub fn issue(
        &self,
        node_key: PublicKey,
        grant: &Grant<'_>,
        issued_at: u64,
        expires_at: u64,
    ) -> Result<Certificate, IssueError> {
        check_fields(grant.name, grant.addresses, grant.groups)?;
        if expires_at <= issued_at {
            return Err(IssueError::EmptyValidity);
        }
        let mut routes: Vec<Cidr> = Vec::with_capacity(grant.routes.len());
        for route in grant.routes.iter().map(Cidr::network) {
            if !routes.contains(&route) {
                routes.push(route);
            }
        }
        if routes.len() > MAX_CERTIFICATE_ROUTES {
            return Err(IssueError::TooManyRoutes);
        }
        let mut certificate = Certificate {
            network: self.public_key(),
            node_key,
            name: grant.name.to_owned(),
            addresses: grant.addresses.to_vec(),
            groups: grant.groups.to_vec(),
            routes,
            issued_at,
            expires_at,
            signature: [0; SIGNATURE_LEN],
        };
        certificate.signature = self.0.sign(&certificate.signed_bytes()).to_bytes();
        Ok(certificate)
    }

    /// Signs `message` (the network policy's text, for one).
    pub(crate) fn sign_message(&self, message: &[u8]) -> [u8; SIGNATURE_LEN] {
        self.0.sign(message).to_bytes()
    }

    /// Revokes every certificate of `node_key` issued at or before
    /// `revoked_at`.
    pub fn revoke(&self, node_key: PublicKey, revoked_at: u64) -> Revocation {
        let mut revocation = Revocation {
            network: self.public_key(),
            node_key,
            revoked_at,
            signature: [0; SIGNATURE_LEN],
        };
        revocation.signature = self.0.sign(&revocation.signed_bytes()).to_bytes();
        revocation
    }
}

impl fmt::Debug for NetworkSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NetworkSecret(public {})", self.public_key())
    }
}

/// The public half of a network key: what every member is configured with.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct NetworkPublicKey(VerifyingKey);

impl NetworkPublicKey {
    pub fn as_bytes(&self) -> &[u8; 32] {
        self.0.as_bytes()
    }

    fn from_bytes(bytes: &[u8; 32]) -> Result<Self, DecodeError> {
        #[cfg(fuzzing)]
        let key = fuzz_memo::decompress(bytes);
        #[cfg(not(fuzzing))]
        let key = VerifyingKey::from_bytes(bytes).ok();
        key.map(Self).ok_or(DecodeError::InvalidField)
    }

    pub(crate) fn verify(
        &self,
        message: &[u8],
        signature: &[u8; SIGNATURE_LEN],
    ) -> Result<(), CertError> {
        #[cfg(fuzzing)]
        let authentic = fuzz_memo::verify(&self.0, message, signature);
        #[cfg(not(fuzzing))]
        let authentic = verify(&self.0, message, signature);
        authentic.then_some(()).ok_or(CertError::BadSignature)
    }
}

fn verify(key: &VerifyingKey, message: &[u8], signature: &[u8; SIGNATURE_LEN]) -> bool {
    key.verify_strict(message, &Signature::from_bytes(signature))
        .is_ok()
}

/// Fuzz builds remember each key decompression and signature check (see
/// `fjord_proto::memo`): the fuzz targets sign with fixed keys, and the
/// curve arithmetic was over half of `mesh_membership`'s time.
#[cfg(fuzzing)]
mod fuzz_memo {
    use ed25519_dalek::VerifyingKey;
    use fjord_proto::memo::{Cache, remembered};

    use super::SIGNATURE_LEN;

    static KEYS: Cache<[u8; 32], Option<VerifyingKey>> = Cache::new();
    static SIGNATURES: Cache<Vec<u8>, bool> = Cache::new();

    pub(super) fn decompress(bytes: &[u8; 32]) -> Option<VerifyingKey> {
        remembered(&KEYS, *bytes, || VerifyingKey::from_bytes(bytes).ok())
    }

    pub(super) fn verify(
        key: &VerifyingKey,
        message: &[u8],
        signature: &[u8; SIGNATURE_LEN],
    ) -> bool {
        let checked = [key.as_bytes().as_slice(), signature, message].concat();
        remembered(&SIGNATURES, checked, || {
            super::verify(key, message, signature)
        })
    }
}

impl FromStr for NetworkPublicKey {
    type Err = TextError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let bytes = decode_32(text)?;
        Self::from_bytes(&bytes).map_err(|_| TextError::InvalidKey)
    }
}

impl fmt::Display for NetworkPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&Base64::encode_string(self.0.as_bytes()))
    }
}

impl fmt::Debug for NetworkPublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NetworkPublicKey({self})")
    }
}

/// A node's membership, signed by the network key.
#[derive(Clone, PartialEq, Eq)]
pub struct Certificate {
    pub network: NetworkPublicKey,
    /// The node's WireGuard public key.
    pub node_key: PublicKey,
    pub name: String,
    /// The overlay prefixes the node may send from and is routed.
    pub addresses: Vec<Cidr>,
    /// The groups the network put the node in (at most [`MAX_GROUPS`],
    /// none named twice), in the order signed.
    pub groups: Vec<Group>,
    /// Prefixes beyond `addresses` routed to the node (a network behind
    /// it; a default route makes it an exit node), at most
    /// [`MAX_CERTIFICATE_ROUTES`], none with host bits set.
    pub routes: Vec<Cidr>,
    pub issued_at: u64,
    pub expires_at: u64,
    signature: [u8; SIGNATURE_LEN],
}

impl Certificate {
    fn signed_bytes(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.bytes(match (self.groups.is_empty(), self.routes.is_empty()) {
            (true, true) => &CERTIFICATE_MAGIC,
            (false, true) => &CERTIFICATE_IN_GROUPS_MAGIC,
            (_, false) => &CERTIFICATE_ROUTING_MAGIC,
        });
        writer.bytes(self.network.as_bytes());
        writer.bytes(self.node_key.as_bytes());
        writer.u64(self.issued_at);
        writer.u64(self.expires_at);
        writer.short_bytes(self.name.as_bytes());
        writer.u8(self.addresses.len() as u8);
        for cidr in &self.addresses {
            writer.cidr(*cidr);
        }
        if !self.groups.is_empty() || !self.routes.is_empty() {
            writer.u8(self.groups.len() as u8);
            for group in &self.groups {
                writer.short_bytes(group.as_str().as_bytes());
            }
        }
        if !self.routes.is_empty() {
            writer.u8(self.routes.len() as u8);
            for route in &self.routes {
                writer.cidr(*route);
            }
        }
        writer.bytes
    }

    /// The record of a member named in an explicit member list (no
    /// network key): unsigned and unexpiring, so it travels in Hellos and
    /// gossip like a certificate, and a node accepts it only as the
    /// record its own list holds for that key ([`Self::verify`] refuses it
    /// for every network: its network key is the identity point, which
    /// strict verification never accepts).
    pub fn listed(node_key: PublicKey, name: &str, addresses: &[Cidr]) -> Result<Self, IssueError> {
        Self::listed_with_groups(node_key, name, addresses, &[])
    }

    /// [`Self::listed`], with the groups its `Member =` line names.
    pub fn listed_with_groups(
        node_key: PublicKey,
        name: &str,
        addresses: &[Cidr],
        groups: &[Group],
    ) -> Result<Self, IssueError> {
        check_fields(name, addresses, groups)?;
        let mut identity = [0u8; 32];
        identity[0] = 1;
        // The compressed identity point always decodes.
        let network =
            NetworkPublicKey::from_bytes(&identity).map_err(|_| IssueError::AddressCount)?;
        Ok(Self {
            network,
            node_key,
            name: name.to_owned(),
            addresses: addresses.to_vec(),
            groups: groups.to_vec(),
            routes: Vec::new(),
            issued_at: 0,
            expires_at: u64::MAX,
            signature: [0; SIGNATURE_LEN],
        })
    }

    pub fn encode(&self) -> Vec<u8> {
        with_signature(self.signed_bytes(), &self.signature)
    }

    /// Parses a certificate; the signature is checked by [`Self::verify`].
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_whole(bytes, Self::read)
    }

    pub(crate) fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let version = match reader.array::<4>()? {
            CERTIFICATE_MAGIC => Version::Plain,
            CERTIFICATE_IN_GROUPS_MAGIC => Version::InGroups,
            CERTIFICATE_ROUTING_MAGIC => Version::Routing,
            _ => return Err(DecodeError::UnknownFormat),
        };
        let network = NetworkPublicKey::from_bytes(&reader.array()?)?;
        let node_key = PublicKey::from_bytes(reader.array()?);
        let issued_at = reader.u64()?;
        let expires_at = reader.u64()?;
        let name = std::str::from_utf8(reader.short_bytes(MAX_NAME_LEN)?)
            .ok()
            .filter(|name| valid_name(name))
            .ok_or(DecodeError::InvalidField)?
            .to_owned();
        let count = reader.count(MAX_CERTIFICATE_ADDRESSES)?;
        let addresses = (0..count)
            .map(|_| reader.cidr())
            .collect::<Result<Vec<_>, _>>()?;
        let groups = match version {
            Version::Plain => Vec::new(),
            Version::InGroups => read_groups(reader, 1)?,
            Version::Routing => read_groups(reader, 0)?,
        };
        let routes = match version {
            Version::Routing => read_routes(reader)?,
            Version::Plain | Version::InGroups => Vec::new(),
        };
        let signature = reader.array()?;
        Ok(Self {
            network,
            node_key,
            name,
            addresses,
            groups,
            routes,
            issued_at,
            expires_at,
            signature,
        })
    }

    /// Accepts the certificate for `network` at `now` (Unix seconds):
    /// the right network, a valid signature, inside its validity window.
    /// Revocations are the caller's to check ([`Revocation::covers`]).
    pub fn verify(&self, network: &NetworkPublicKey, now: u64) -> Result<(), CertError> {
        if self.network != *network {
            return Err(CertError::WrongNetwork);
        }
        network.verify(&self.signed_bytes(), &self.signature)?;
        if now >= self.expires_at {
            return Err(CertError::Expired);
        }
        if self.issued_at > now.saturating_add(CLOCK_SKEW_SECS) {
            return Err(CertError::NotYetValid);
        }
        Ok(())
    }

    pub fn to_base64(&self) -> String {
        Base64::encode_string(&self.encode())
    }
}

impl FromStr for Certificate {
    type Err = TextError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        from_base64(text, Self::read)
    }
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("name", &self.name)
            .field("node_key", &self.node_key)
            .field("addresses", &self.addresses)
            .field("groups", &self.groups)
            .field("routes", &self.routes)
            .field("issued_at", &self.issued_at)
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Withdraws a node's certificates, signed by the network key.
#[derive(Clone, PartialEq, Eq)]
pub struct Revocation {
    pub network: NetworkPublicKey,
    pub node_key: PublicKey,
    pub revoked_at: u64,
    signature: [u8; SIGNATURE_LEN],
}

/// Encoded length of a revocation.
pub const REVOCATION_LEN: usize = 4 + 32 + 32 + 8 + SIGNATURE_LEN;

impl Revocation {
    fn signed_bytes(&self) -> Vec<u8> {
        let mut writer = Writer::default();
        writer.bytes(&REVOCATION_MAGIC);
        writer.bytes(self.network.as_bytes());
        writer.bytes(self.node_key.as_bytes());
        writer.u64(self.revoked_at);
        writer.bytes
    }

    pub fn encode(&self) -> Vec<u8> {
        with_signature(self.signed_bytes(), &self.signature)
    }

    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        decode_whole(bytes, Self::read)
    }

    pub(crate) fn read(reader: &mut Reader<'_>) -> Result<Self, DecodeError> {
        if reader.array::<4>()? != REVOCATION_MAGIC {
            return Err(DecodeError::UnknownFormat);
        }
        Ok(Self {
            network: NetworkPublicKey::from_bytes(&reader.array()?)?,
            node_key: PublicKey::from_bytes(reader.array()?),
            revoked_at: reader.u64()?,
            signature: reader.array()?,
        })
    }

    pub fn verify(&self, network: &NetworkPublicKey) -> Result<(), CertError> {
        if self.network != *network {
            return Err(CertError::WrongNetwork);
        }
        network.verify(&self.signed_bytes(), &self.signature)
    }

    /// Whether this revocation withdraws `certificate`.
    pub fn covers(&self, certificate: &Certificate) -> bool {
        self.node_key == certificate.node_key && certificate.issued_at <= self.revoked_at
    }

    pub fn to_base64(&self) -> String {
        Base64::encode_string(&self.encode())
    }
}

impl FromStr for Revocation {
    type Err = TextError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        from_base64(text, Self::read)
    }
}

impl fmt::Debug for Revocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Revocation")
            .field("node_key", &self.node_key)
            .field("revoked_at", &self.revoked_at)
            .finish_non_exhaustive()
    }
}

/// A signed encoding: the signed bytes, then the signature.
fn with_signature(mut signed: Vec<u8>, signature: &[u8; SIGNATURE_LEN]) -> Vec<u8> {
    signed.extend_from_slice(signature);
    signed
}

/// `read` over all of `bytes`, refusing trailing bytes.
fn decode_whole<T>(
    bytes: &[u8],
    read: fn(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let mut reader = Reader::new(bytes);
    let value = read(&mut reader)?;
    reader.finish()?;
    Ok(value)
}

/// The text form: the encoding in standard base64 on one line.
fn from_base64<T>(
    text: &str,
    read: fn(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, TextError> {
    let bytes = Base64::decode_vec(text.trim()).map_err(|_| TextError::NotBase64)?;
    Ok(decode_whole(&bytes, read)?)
}

/// Which fields a certificate's encoding carries.
enum Version {
    Plain,
    InGroups,
    Routing,
}

/// The groups of a version 2 or 3 certificate: at least `min` (1 in
/// version 2, which exists for them), none twice.
fn read_groups(reader: &mut Reader<'_>, min: usize) -> Result<Vec<Group>, DecodeError> {
    let count = reader.count(MAX_GROUPS)?;
    if count < min {
        return Err(DecodeError::InvalidField);
    }
    let mut groups: Vec<Group> = Vec::with_capacity(count);
    for _ in 0..count {
        let group = std::str::from_utf8(reader.short_bytes(MAX_GROUP_NAME_LEN)?)
            .ok()
            .and_then(|text| text.parse::<Group>().ok())
            .filter(|group| !groups.contains(group))
            .ok_or(DecodeError::InvalidField)?;
        groups.push(group);
    }
    Ok(groups)
}

/// The routes of a version 3 certificate: at least one, none twice, no
/// host bits set (what [`NetworkSecret::issue`] writes).
fn read_routes(reader: &mut Reader<'_>) -> Result<Vec<Cidr>, DecodeError> {
    let count = reader.count(MAX_CERTIFICATE_ROUTES)?;
    if count == 0 {
        return Err(DecodeError::InvalidField);
    }
    let mut routes: Vec<Cidr> = Vec::with_capacity(count);
    for _ in 0..count {
        let route = reader.cidr()?;
        if route != route.network() || routes.contains(&route) {
            return Err(DecodeError::InvalidField);
        }
        routes.push(route);
    }
    Ok(routes)
}

/// What a signed certificate and a listed record both require.
fn check_fields(name: &str, addresses: &[Cidr], groups: &[Group]) -> Result<(), IssueError> {
    if !valid_name(name) {
        return Err(IssueError::InvalidName);
    }
    if addresses.is_empty() || addresses.len() > MAX_CERTIFICATE_ADDRESSES {
        return Err(IssueError::AddressCount);
    }
    if groups.len() > MAX_GROUPS {
        return Err(IssueError::TooManyGroups);
    }
    for (index, group) in groups.iter().enumerate() {
        if groups[..index].contains(group) {
            return Err(IssueError::DuplicateGroup(group.clone()));
        }
    }
    Ok(())
}

/// A node name: 1 to [`MAX_NAME_LEN`] of letters, digits, `.`, `-`, `_`.
pub fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME_LEN).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

fn decode_32(text: &str) -> Result<Zeroizing<[u8; 32]>, TextError> {
    let text = text.trim();
    if text.len() != 44 {
        return Err(TextError::WrongKeyLength);
    }
    let mut bytes = Zeroizing::new([0u8; 32]);
    let decoded = Base64::decode(text, bytes.as_mut()).map_err(|_| TextError::NotBase64)?;
    if decoded.len() != 32 {
        return Err(TextError::WrongKeyLength);
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests;
