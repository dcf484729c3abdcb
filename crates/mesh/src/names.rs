//! Member names over DNS: each member answers for the network's members
//! under the network's domain (`Domain =` in `[Mesh]`), on its overlay
//! address. Sans-I/O: the driver hands [`Names::answer`] one request
//! datagram and sends back what it writes; it refreshes the member view
//! with [`Names::set_members`] whenever membership changes.
//!
//! What is answered (the crate `hickory-proto` parses and builds every
//! message; nothing here reads DNS bytes by hand):
//!
//! ```text
//! NAME.DOMAIN  A / AAAA / ANY  the member's overlay addresses      NOERROR
//!              another type    no records                          NOERROR
//! DOMAIN       any type        no records                          NOERROR
//! X.DOMAIN     X no member     -                                   NXDOMAIN
//! reverse name of a member address (in-addr.arpa, ip6.arpa)
//!              PTR / ANY       NAME.DOMAIN.                        NOERROR
//!              another type    no records                          NOERROR
//! anything else (other domains, other addresses, other classes)    REFUSED
//! not a standard query                                             NOTIMP
//! unreadable after the header, or not exactly one question         FORMERR
//! shorter than a header, or a response                             (silence)
//! ```
//!
//! Answers are authoritative (AA), carry [`TTL_SECS`], never offer
//! recursion (RA clear), and fit the request's limit: 512 bytes, or the
//! size its EDNS record allows; past that the answers are dropped and TC
//! is set, so the client asks again over TCP or with a larger buffer.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use hickory_proto::op::{Edns, Header, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::rdata::{A, AAAA, PTR};
use hickory_proto::rr::{DNSClass, Name, RData, Record};
use hickory_proto::serialize::binary::{BinDecodable, BinDecoder, BinEncodable, BinEncoder};

/// Question types, for [`query_bytes`].
pub use hickory_proto::rr::RecordType;

/// Time to live of every answer: short, so members that leave or are
/// revoked drop out of caches within a minute.
pub const TTL_SECS: u32 = 60;
/// The largest answer a plain UDP request may receive (RFC 1035).
pub const PLAIN_UDP_LIMIT_BYTES: u16 = 512;
/// The EDNS buffer size this server announces: the common size that
/// avoids IP fragmentation.
pub const EDNS_PAYLOAD_BYTES: u16 = 1232;

/// A network's DNS domain: a valid name of at least one label, kept in
/// lower case and fully qualified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Domain(Name);

/// Why text is not a domain.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    #[error(
        "not a DNS name (letters, digits and hyphens in dot-separated labels of at most 63 bytes)"
    )]
    NotADnsName,
    #[error("the root is not a domain for members")]
    Root,
    #[error("reverse-lookup names (.arpa) are answered already")]
    Arpa,
}

impl FromStr for Domain {
    type Err = DomainError;

    fn from_str(text: &str) -> Result<Self, DomainError> {
        let valid_label = |label: &str| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|byte| byte.is_ascii_alphanumeric() || byte == b'-')
        };
        let labels = text.strip_suffix('.').unwrap_or(text);
        if labels.is_empty() {
            return Err(DomainError::Root);
        }
        if !labels.split('.').all(valid_label) {
            return Err(DomainError::NotADnsName);
        }
        let mut name = Name::from_ascii(labels).map_err(|_| DomainError::NotADnsName)?;
        name.set_fqdn(true);
        let name = name.to_lowercase();
        if Name::from_ascii("arpa.").is_ok_and(|arpa| arpa.zone_of(&name)) {
            return Err(DomainError::Arpa);
        }
        Ok(Self(name))
    }
}

impl fmt::Display for Domain {
    /// Without the trailing dot: `mesh.example`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.0.to_ascii();
        f.write_str(text.strip_suffix('.').unwrap_or(&text))
    }
}

impl Domain {
    /// `name` under this domain, without the trailing dot, or `None`
    /// when `name` is not one DNS label.
    pub fn qualify(&self, name: &str) -> Option<String> {
        member_name(name, &self.0).map(|full| {
            let text = full.to_ascii();
            text.strip_suffix('.').unwrap_or(&text).to_string()
        })
    }
}

/// `label.domain.` in lower case, when `label` is one valid DNS label.
fn member_name(label: &str, domain: &Name) -> Option<Name> {
    let single = Name::from_ascii(label).ok()?;
    if single.num_labels() != 1 || label.contains('.') {
        return None;
    }
    single.to_lowercase().append_domain(domain).ok()
}

/// One member as the answers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedMember {
    /// Its certificate's name; members whose name is not one DNS label
    /// are left out.
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

/// The answering side: a domain and the members under it.
#[derive(Debug, Clone)]
pub struct Names {
    domain: Domain,
    /// `name.domain.` (lower case) → the member's addresses.
    addresses: HashMap<Name, Vec<IpAddr>>,
    /// Reverse name of each member address → `name.domain.`.
    reverse: HashMap<Name, Name>,
}

/// What a request asks about, once read.
enum Lookup<'a> {
    Member(&'a [IpAddr]),
    Reverse(&'a Name),
    Apex,
    Unknown,
    Refused,
}

impl Names {
    /// No members yet.
    pub fn new(domain: Domain) -> Self {
        Self {
            domain,
            addresses: HashMap::new(),
            reverse: HashMap::new(),
        }
    }

    pub fn domain(&self) -> &Domain {
        &self.domain
    }

    /// Replaces the member view (members joined, left, were revoked).
    pub fn set_members<'a>(&mut self, members: impl IntoIterator<Item = &'a NamedMember>) {
        self.addresses.clear();
        self.reverse.clear();
        for member in members {
            let Some(full) = member_name(&member.name, &self.domain.0) else {
                continue;
            };
            for address in &member.addresses {
                self.reverse
                    .insert(Name::from(*address).to_lowercase(), full.clone());
            }
            self.addresses
                .entry(full)
                .or_default()
                .extend(member.addresses.iter().copied());
        }
    }

    /// Answers one request datagram: writes the response into `response`
    /// (cleared first) and returns true, or returns false when the request
    /// gets no answer at all (shorter than a header, or itself a response).
    pub fn answer(&self, request: &[u8], response: &mut Vec<u8>) -> bool {
        response.clear();
        let Ok(header) = Header::read(&mut BinDecoder::new(request)) else {
            return false;
        };
        if header.message_type != MessageType::Query {
            return false;
        }
        let (reply, limit_bytes) = match Message::from_vec(request) {
            Ok(message) => (self.reply(&message), message.max_payload()),
            Err(_) => (
                Message::error_msg(header.id, header.op_code, ResponseCode::FormErr),
                PLAIN_UDP_LIMIT_BYTES,
            ),
        };
        encode_within(reply, limit_bytes, response)
    }

    fn reply(&self, request: &Message) -> Message {
        let metadata = &request.metadata;
        let mut reply = Message::response(metadata.id, metadata.op_code);
        reply.metadata.recursion_desired = metadata.recursion_desired;
        if request.edns.is_some() {
            let mut edns = Edns::new();
            edns.set_max_payload(EDNS_PAYLOAD_BYTES);
            reply.set_edns(edns);
        }
        if metadata.op_code != OpCode::Query {
            reply.metadata.response_code = ResponseCode::NotImp;
            return reply;
        }
        let [query] = request.queries.as_slice() else {
            reply.metadata.response_code = ResponseCode::FormErr;
            return reply;
        };
        reply.add_query(query.clone());
        let mut name = query.name().clone();
        name.set_fqdn(true);
        let lookup = if query.query_class() != DNSClass::IN {
            Lookup::Refused
        } else {
            self.look_up(&name)
        };
        let query_type = query.query_type();
        let answers: Vec<Record> = match lookup {
            Lookup::Refused => {
                reply.metadata.response_code = ResponseCode::Refused;
                return reply;
            }
            Lookup::Unknown => {
                reply.metadata.authoritative = true;
                reply.metadata.response_code = ResponseCode::NXDomain;
                return reply;
            }
            Lookup::Apex => Vec::new(),
            Lookup::Member(addresses) => addresses
                .iter()
                .filter_map(|address| address_data(*address, query_type))
                .map(|data| Record::from_rdata(name.clone(), TTL_SECS, data))
                .collect(),
            Lookup::Reverse(member) => match query_type {
                RecordType::PTR | RecordType::ANY => vec![Record::from_rdata(
                    name.clone(),
                    TTL_SECS,
                    RData::PTR(PTR(member.clone())),
                )],
                _ => Vec::new(),
            },
        };
        reply.metadata.authoritative = true;
        reply.add_answers(answers);
        reply
    }

    fn look_up(&self, name: &Name) -> Lookup<'_> {
        if let Some(addresses) = self.addresses.get(name) {
            return Lookup::Member(addresses);
        }
        if let Some(member) = self.reverse.get(name) {
            return Lookup::Reverse(member);
        }
        let domain = &self.domain.0;
        if name == domain {
            Lookup::Apex
        } else if domain.zone_of(name) {
            Lookup::Unknown
        } else {
            Lookup::Refused
        }
    }
}

/// The record data `address` gives for a question of `query_type`.
fn address_data(address: IpAddr, query_type: RecordType) -> Option<RData> {
    match (address, query_type) {
        (IpAddr::V4(v4), RecordType::A | RecordType::ANY) => Some(RData::A(A(v4))),
        (IpAddr::V6(v6), RecordType::AAAA | RecordType::ANY) => Some(RData::AAAA(AAAA(v6))),
        _ => None,
    }
}

/// Encodes `reply` into `out`, and if it exceeds `limit_bytes`, again
/// without its answers and with TC set. False only if even that fails.
fn encode_within(mut reply: Message, limit_bytes: u16, out: &mut Vec<u8>) -> bool {
    if encode(&reply, out) && out.len() <= usize::from(limit_bytes) {
        return true;
    }
    reply.answers.clear();
    reply.metadata.truncation = true;
    if encode(&reply, out) && out.len() <= usize::from(limit_bytes) {
        return true;
    }
    // The question itself is too long to echo (a 255-byte name with an
    // OPT record still fits 512 bytes, so this is for odd requests).
    reply.queries.clear();
    encode(&reply, out)
}

fn encode(message: &Message, out: &mut Vec<u8>) -> bool {
    out.clear();
    let mut encoder = BinEncoder::new(out);
    message.emit(&mut encoder).is_ok()
}

/// A query for `name` of `query_type`, encoded: what a client sends (for
/// tests, the fuzz seeds and the benchmark).
pub fn query_bytes(id: u16, name: &str, query_type: RecordType) -> Vec<u8> {
    let mut message = Message::new(id, MessageType::Query, OpCode::Query);
    message.metadata.recursion_desired = true;
    if let Ok(name) = Name::from_ascii(name) {
        message.add_query(Query::query(name, query_type));
    }
    message.to_vec().unwrap_or_default()
}

#[cfg(test)]
mod tests;
