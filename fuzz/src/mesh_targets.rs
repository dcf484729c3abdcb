//! Fuzz target bodies for `fjord_mesh`: the control message and
//! certificate parsers, and the [`Mesh`] state machine fed control
//! messages from peers that the fuzzer picks.
//!
//! The fuzzer cannot forge an Ed25519 signature, so [`mesh_membership`]
//! draws certificates and revocations from a kit signed once per process
//! (valid, renewed, short-lived, not yet valid, from another network) and
//! lets the input choose which to send, from whom and when; raw and
//! mutated messages cover everything else.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use fjord_mesh::cert::{
    MAX_CERTIFICATE_ADDRESSES, MAX_CERTIFICATE_ROUTES, MAX_GROUPS, MAX_NAME_LEN, REVOCATION_LEN,
};
use fjord_mesh::control::{Control, MAX_ENDPOINTS, MemberRecord};
use fjord_mesh::policy::{MAX_POLICY_RULES, Policy, PolicyProblem, SignedPolicy};
use fjord_mesh::{
    Bootstrap, Certificate, Cidr, Mesh, MeshAction, MeshConfig, NetworkPublicKey, NetworkSecret,
    Revocation,
};
use fjord_proto::extension::{self, Recipient};
use fjord_proto::{PrivateKey, PublicKey, WallClock};

use crate::proto_targets::Input;

/// `Control::decode` on arbitrary bytes; a success must be of a kind the
/// registry (`fjord_proto::extension`) routes to a control recipient, and
/// encode back to the same bytes, followed only by zero padding.
pub fn control_parse(data: &[u8]) {
    let Ok(control) = Control::decode(data) else {
        return;
    };
    assert!(Control::is_control(data));
    assert!(matches!(
        extension::recipient_of(data),
        Some(Recipient::Membership | Recipient::PathMtu)
    ));
    let encoded = control.encode();
    assert!(
        data.starts_with(&encoded),
        "{control:?} re-encoded differently"
    );
    assert!(data[encoded.len()..].iter().all(|&byte| byte == 0));
}

/// Certificates, revocations and network keys from arbitrary bytes and
/// text. A binary success must encode back to the same bytes, a text
/// success must print and parse back to itself; checking signatures of
/// whatever parsed must not panic either.
pub fn cert_parse(data: &[u8]) {
    if let Ok(certificate) = Certificate::decode(data) {
        assert_eq!(certificate.encode(), data);
        assert!((1..=MAX_NAME_LEN).contains(&certificate.name.len()));
        assert!(certificate.addresses.len() <= MAX_CERTIFICATE_ADDRESSES);
        assert!(certificate.groups.len() <= MAX_GROUPS);
        assert!(certificate.routes.len() <= MAX_CERTIFICATE_ROUTES);
        assert!(
            certificate
                .routes
                .iter()
                .all(|route| *route == route.network())
        );
        let _ = certificate.verify(&certificate.network, certificate.issued_at);
    }
    if let Ok(revocation) = Revocation::decode(data) {
        assert_eq!(revocation.encode(), data);
        assert_eq!(data.len(), REVOCATION_LEN);
        let _ = revocation.verify(&revocation.network);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(certificate) = text.parse::<Certificate>() {
        assert_eq!(certificate.to_base64().parse().as_ref(), Ok(&certificate));
    }
    if let Ok(revocation) = text.parse::<Revocation>() {
        assert_eq!(revocation.to_base64().parse().as_ref(), Ok(&revocation));
    }
    if let Ok(key) = text.parse::<NetworkPublicKey>() {
        assert_eq!(key.to_string().parse().as_ref(), Ok(&key));
    }
}

/// The network key the policy seeds are signed with.
fn policy_network() -> &'static NetworkSecret {
    static SECRET: OnceLock<NetworkSecret> = OnceLock::new();
    SECRET.get_or_init(|| NetworkSecret::from_seed([3; 32]))
}

/// Network policy text from arbitrary bytes, plain and signed. A policy
/// that parses prints to text that parses back to the same version and
/// rules (and prints the same again), and signs to text that verifies;
/// a signed text that verifies is the text given, and parses as a plain
/// policy too (its signature line is a comment). The policy's fixed
/// network key signs, so signed seeds verify.
pub fn policy_parse(data: &[u8]) {
    let network = policy_network();
    if let Ok(policy) = Policy::parse(data) {
        assert!(policy.rules().len() <= MAX_POLICY_RULES);
        let printed = policy.to_string();
        let again = Policy::parse(printed.as_bytes()).expect("a printed policy parses");
        assert_eq!(again.version(), policy.version());
        assert_eq!(again.rules(), policy.rules());
        assert_eq!(again.to_string(), printed);
        match SignedPolicy::sign(data, network) {
            Ok(signed) => {
                let verified = SignedPolicy::verify(signed.text(), &network.public_key())
                    .expect("a signed policy verifies");
                assert_eq!(verified.policy.rules(), policy.rules());
            }
            // Only the signature line can push it over the bound.
            Err(error) => assert_eq!(error.problem, PolicyProblem::TooLarge),
        }
    }
    if let Ok(signed) = SignedPolicy::verify(data, &network.public_key()) {
        assert_eq!(signed.text(), data);
        let plain = Policy::parse(data).expect("a signed policy parses as a policy");
        assert_eq!(plain.rules(), signed.policy.rules());
    }
}

const EPOCH_SECS: u64 = 1_800_000_000;
/// Peers the input can speak as; the last has only a foreign certificate.
const PEERS: usize = 5;
const MEMBER_PEERS: u8 = 4;
const ENDPOINTS: [&str; 4] = [
    "198.18.0.1:51820",
    "198.18.0.2:4000",
    "[2001:db8::1]:51820",
    "203.0.113.7:1",
];
/// Outbound messages remembered for replaying to the mesh.
const HISTORY: usize = 16;
/// Operations per input, so each run stays fast.
const MAX_OPERATIONS: usize = 256;
const MTUS: [usize; 4] = [1420, 1280, 200, 0];

/// Signed once per process: signatures dominate a run otherwise.
struct Kit {
    network: NetworkPublicKey,
    own: Certificate,
    peers: [PublicKey; PEERS],
    /// Indexed as [`Kit::certificate`] documents.
    certificates: Vec<Certificate>,
    /// Indexed as [`Kit::revocation`] documents.
    revocations: Vec<Revocation>,
    /// Every address list the network signed, per node key: the only
    /// routes the mesh may ever ask for.
    signed: HashMap<PublicKey, Vec<Vec<Cidr>>>,
}

fn address(text: &str) -> SocketAddr {
    // Invariant: the constants above are valid socket addresses.
    text.parse().expect("constant address")
}

fn cidr(text: &str) -> Cidr {
    // Invariant: only called with valid constant prefixes.
    text.parse().expect("constant prefix")
}

fn node_key(index: u8) -> PublicKey {
    PrivateKey::from_bytes([index + 10; 32]).public_key()
}

fn sign(
    secret: &NetworkSecret,
    key: PublicKey,
    addresses: &[Cidr],
    from: u64,
    to: u64,
) -> Certificate {
    // Invariant: fixed valid names, 1-2 addresses, and `from < to`.
    secret
        .sign(key, "node", addresses, from, to)
        .expect("valid certificate request")
}

impl Kit {
    fn get() -> &'static Kit {
        static KIT: OnceLock<Kit> = OnceLock::new();
        KIT.get_or_init(Kit::new)
    }

    /// Certificates: `4 * kind + peer` for the four member peers, where
    /// kind 0 is valid for an hour, 1 renewed (issued later, other
    /// addresses), 2 expires after 30 s; then 12 not valid for another
    /// hour (peer 0), 13 the last peer's from another network, 14 ours.
    fn new() -> Self {
        let secret = NetworkSecret::from_seed([3; 32]);
        let foreign = NetworkSecret::from_seed([9; 32]);
        let peers: [PublicKey; PEERS] = std::array::from_fn(|i| node_key(i as u8));
        let own_key = PrivateKey::from_bytes([1; 32]).public_key();
        let now = EPOCH_SECS;
        let mut certificates = Vec::new();
        for kind in 0..3 {
            for (index, key) in peers.iter().take(usize::from(MEMBER_PEERS)).enumerate() {
                let host = cidr(&format!("198.19.0.{}/32", index + 1));
                let certificate = match kind {
                    0 => sign(&secret, *key, &[host], now - 10, now + 3_600),
                    1 => {
                        let renewed = [
                            cidr(&format!("198.19.1.{}/32", index + 1)),
                            cidr(&format!("fd00::{}/128", index + 1)),
                        ];
                        sign(&secret, *key, &renewed, now + 5, now + 86_400)
                    }
                    _ => sign(&secret, *key, &[host], now - 10, now + 30),
                };
                certificates.push(certificate);
            }
        }
        let later = [cidr("198.19.2.1/32")];
        certificates.push(sign(&secret, peers[0], &later, now + 3_600, now + 7_200));
        let elsewhere = [cidr("198.19.0.5/32")];
        certificates.push(sign(&foreign, peers[4], &elsewhere, now - 10, now + 3_600));
        let own = sign(
            &secret,
            own_key,
            &[cidr("198.19.0.100/32")],
            now - 10,
            now + 3_600,
        );
        certificates.push(own.clone());

        let mut revocations = Vec::new();
        for at in [now, now + 10] {
            for key in peers.iter().take(usize::from(MEMBER_PEERS)) {
                revocations.push(secret.revoke(*key, at));
            }
        }
        revocations.push(secret.revoke(own_key, now));
        revocations.push(foreign.revoke(peers[0], now + 10));

        let mut signed: HashMap<PublicKey, Vec<Vec<Cidr>>> = HashMap::new();
        for certificate in certificates
            .iter()
            .filter(|c| c.network == secret.public_key())
        {
            signed
                .entry(certificate.node_key)
                .or_default()
                .push(certificate.addresses.clone());
        }
        Self {
            network: secret.public_key(),
            own,
            peers,
            certificates,
            revocations,
            signed,
        }
    }

    fn own_key(&self) -> PublicKey {
        self.own.node_key
    }

    fn peer(&self, choice: u8) -> PublicKey {
        self.peers[usize::from(choice) % PEERS]
    }

    fn certificate(&self, choice: u8) -> &Certificate {
        &self.certificates[usize::from(choice) % self.certificates.len()]
    }

    /// Revocations: `4 * kind + peer`, kind 0 at the epoch (covers kinds
    /// 0 and 2 above), 1 ten seconds later (covers renewals too); then 8
    /// ours, 9 from another network.
    fn revocation(&self, choice: u8) -> &Revocation {
        &self.revocations[usize::from(choice) % self.revocations.len()]
    }
}

fn endpoint(choice: u8) -> SocketAddr {
    address(ENDPOINTS[usize::from(choice) % ENDPOINTS.len()])
}

/// One mesh node, fed by the input, and what it sent.
struct MeshWorld {
    kit: &'static Kit,
    now: Instant,
    mesh: Mesh,
    /// The latest outbound messages, for replaying.
    history: Vec<Vec<u8>>,
    /// The nonce of the latest Ping to each peer, so Pongs can match.
    pings: HashMap<PublicKey, u64>,
}

impl MeshWorld {
    fn new(flags: u8, seed: u8) -> Self {
        let kit = Kit::get();
        let now = Instant::now();
        let mut config = MeshConfig::new(
            kit.network,
            kit.own.clone(),
            MTUS[usize::from(flags >> 1) % 4],
        );
        if flags & 1 == 1 {
            config.bootstrap.push(Bootstrap {
                key: kit.peers[0],
                endpoint: endpoint(0),
            });
        }
        let wall_clock = WallClock {
            base: now,
            base_since_epoch: Duration::from_secs(EPOCH_SECS),
        };
        let mut mesh = Mesh::new(config, now, wall_clock, u64::from(seed));
        if flags & 1 == 1 {
            let admit = mesh.poll_action();
            assert_eq!(
                admit,
                Some(MeshAction::Admit {
                    key: kit.peers[0],
                    addresses: Vec::new(),
                    endpoint: Some(endpoint(0)),
                })
            );
        }
        let mut world = Self {
            kit,
            now,
            mesh,
            history: Vec::new(),
            pings: HashMap::new(),
        };
        world.drain();
        world
    }

    /// Applies what the mesh asks for, checking it is sane.
    fn drain(&mut self) {
        let own = self.kit.own_key();
        while let Some(refusal) = self.mesh.poll_refusal() {
            assert!(
                self.kit.peers.contains(&refusal.by),
                "refused by a stranger"
            );
        }
        while let Some(action) = self.mesh.poll_action() {
            match action {
                MeshAction::Admit { key, addresses, .. } => {
                    assert_ne!(key, own, "admitted ourselves");
                    let signed = self.kit.signed.get(&key);
                    assert!(
                        signed.is_some_and(|lists| lists.contains(&addresses)),
                        "routes {addresses:?} to {key:?} that no certificate names"
                    );
                }
                MeshAction::Remove { key } => assert_ne!(key, own, "removed ourselves"),
                MeshAction::EndSessions { key } => {
                    assert_ne!(key, own, "ended our sessions with ourselves")
                }
                MeshAction::Punch { key, endpoints } => {
                    assert_ne!(key, own, "punched toward ourselves");
                    assert!(!endpoints.is_empty(), "a punch with nowhere to go");
                }
                MeshAction::PredictPorts { key, toward } => {
                    assert_ne!(key, own, "predicted ports toward ourselves");
                    assert!(!toward.is_empty(), "a prediction with nowhere to punch");
                }
                MeshAction::Connect { key, .. } | MeshAction::UseRelay { key, .. } => {
                    assert_ne!(key, own, "connected to ourselves");
                }
                MeshAction::RelayBetween { a, b } => {
                    assert!(a.key != b.key, "relaying a member to itself");
                    assert!(a.key != own && b.key != own, "relaying for ourselves");
                }
            }
        }
        while let Some(outbound) = self.mesh.poll_message() {
            assert!(self.kit.peers.contains(&outbound.to), "sent to a stranger");
            let control = Control::decode(&outbound.message);
            let Ok(control) = control else {
                panic!("sent a message that does not decode: {control:?}");
            };
            assert_eq!(control.encode(), outbound.message);
            match control {
                Control::Hello { certificate, .. } => assert_eq!(*certificate, self.kit.own),
                Control::Ping { nonce } => {
                    self.pings.insert(outbound.to, nonce);
                }
                _ => {}
            }
            if self.history.len() == HISTORY {
                self.history.remove(0);
            }
            self.history.push(outbound.message);
        }
    }

    fn deliver(&mut self, input: &mut Input<'_>, control: &Control) {
        let (key, from) = (self.kit.peer(input.u8()), endpoint(input.u8()));
        let _ = self
            .mesh
            .handle_control(self.now, key, from, &control.encode());
    }

    fn advance(&mut self, by: Duration) {
        self.now += by;
        self.mesh.handle_timeout(self.now);
        let next = self.mesh.poll_timeout();
        assert!(
            next.is_some_and(|next| next > self.now),
            "a timer stays due"
        );
    }

    fn members(&self, input: &mut Input<'_>) -> Control {
        let count = input.u8() % 9;
        let records = (0..count)
            .map(|_| MemberRecord {
                certificate: self.kit.certificate(input.u8()).clone(),
                endpoints: (0..input.u8() % 3).map(|_| endpoint(input.u8())).collect(),
                host_addresses: (0..input.u8() % 3).map(|_| endpoint(input.u8())).collect(),
                heard_secs_ago: u32::from(input.u16()),
            })
            .collect();
        Control::Members(records)
    }

    /// Feeds a message the mesh sent back to it, as if from a peer, maybe
    /// truncated or with one byte changed.
    fn replay(&mut self, input: &mut Input<'_>) {
        if self.history.is_empty() {
            return;
        }
        let mut message = self.history[usize::from(input.u8()) % self.history.len()].clone();
        match input.u8() % 3 {
            0 => {}
            1 => message.truncate(usize::from(input.u16())),
            _ => {
                let position = usize::from(input.u16());
                if let Some(byte) = message.get_mut(position) {
                    *byte ^= input.u8();
                }
            }
        }
        let (key, from) = (self.kit.peer(input.u8()), endpoint(input.u8()));
        let _ = self.mesh.handle_control(self.now, key, from, &message);
    }
}

/// A [`Mesh`] fed a sequence of operations, each speaking as one of five
/// peers (four members of the network, one of another) from one of four
/// endpoints:
///
/// | op % 8 | action |
/// |---|---|
/// | 0 | arbitrary control bytes (u16 length, then bytes) |
/// | 1 | Hello with a kit certificate, `wants_members`, one byte maybe flipped |
/// | 2 | Members: up to 8 records of kit certificates, endpoints and ages |
/// | 3 | Revocations: up to 3 from the kit |
/// | 4 | Goodbye, Ping, or a Pong answering the latest Ping to that peer |
/// | 5 | a session came up, or an unknown peer handshaked (`handle_unverified`) |
/// | 6 | time passes (u16 ms, u8 10-second steps, or to `poll_timeout`), then `handle_timeout` |
/// | 7 | replay a sent message (maybe cut or changed), revoke locally, or leave |
///
/// The first byte picks whether peer 0 is a bootstrap member (bit 0) and
/// the MTU (bits 1-2), the second seeds the mesh. After each operation
/// every action and message is drained and checked: no Admit or Remove
/// names our own key, every route is one a certificate of that key names,
/// every message goes to a known peer and decodes to what was encoded,
/// and every Hello carries our certificate; a refusal of our own
/// certificate comes from a known peer. Must never panic.
pub fn mesh_membership(data: &[u8]) {
    let mut input = Input(data);
    let (flags, seed) = (input.u8(), input.u8());
    let mut world = MeshWorld::new(flags, seed);
    for _ in 0..MAX_OPERATIONS {
        let Some(op) = input.byte() else { break };
        match op % 8 {
            0 => {
                let (key, from) = (world.kit.peer(input.u8()), endpoint(input.u8()));
                let len = usize::from(input.u16() % 2048);
                let bytes = input.bytes(len);
                let _ = world.mesh.handle_control(world.now, key, from, bytes);
            }
            1 => {
                let hello = Control::Hello {
                    certificate: Box::new(world.kit.certificate(input.u8()).clone()),
                    wants_members: input.u8() & 1 == 1,
                    host_addresses: (0..input.u8() % 3).map(|_| endpoint(input.u8())).collect(),
                };
                let mut message = hello.encode();
                let position = usize::from(input.u8());
                if let Some(byte) = message.get_mut(position) {
                    *byte ^= input.u8();
                }
                let (key, from) = (world.kit.peer(input.u8()), endpoint(input.u8()));
                let _ = world.mesh.handle_control(world.now, key, from, &message);
            }
            2 => {
                let members = world.members(&mut input);
                world.deliver(&mut input, &members);
            }
            3 => {
                let count = input.u8() % 4;
                let revocations = (0..count)
                    .map(|_| world.kit.revocation(input.u8()).clone())
                    .collect();
                world.deliver(&mut input, &Control::Revocations(revocations));
            }
            4 => {
                let control = match input.u8() % 3 {
                    0 => Control::Goodbye,
                    1 => Control::Ping {
                        nonce: u64::from(input.u16()),
                    },
                    _ => {
                        let key = world.kit.peer(input.u8());
                        let nonce = world.pings.get(&key).copied().unwrap_or(0);
                        let from = endpoint(input.u8());
                        let pong = Control::Pong { nonce }.encode();
                        let _ = world.mesh.handle_control(world.now, key, from, &pong);
                        world.drain();
                        continue;
                    }
                };
                world.deliver(&mut input, &control);
            }
            5 => {
                let (kind, key) = (input.u8(), world.kit.peer(input.u8()));
                if kind & 1 == 0 {
                    world.mesh.handle_session(world.now, key);
                } else {
                    world.mesh.handle_unverified(world.now, key);
                }
            }
            6 => match input.u8() % 3 {
                0 => world.advance(Duration::from_millis(u64::from(input.u16()))),
                1 => world.advance(Duration::from_secs(10 * u64::from(input.u8()))),
                _ => {
                    let due = world.mesh.poll_timeout().unwrap_or(world.now);
                    world.advance(due.saturating_duration_since(world.now));
                }
            },
            _ => match input.u8() % 3 {
                0 => world.replay(&mut input),
                1 => {
                    let revocation = world.kit.revocation(input.u8()).clone();
                    let _ = world.mesh.revoke(revocation);
                }
                _ => world.mesh.leave(),
            },
        }
        world.drain();
    }
    let own = world.kit.own_key();
    assert!(!world.mesh.is_member(&own));
    for member in world.mesh.members() {
        assert_ne!(member.key, own);
        assert!(member.endpoints.len() <= MAX_ENDPOINTS);
        let signed = world.kit.signed.get(&member.key);
        assert!(signed.is_some_and(|lists| lists.contains(&member.addresses)));
    }
}

#[cfg(test)]
mod tests {
    //! `cargo test -- --ignored write_mesh_seeds` rewrites the committed
    //! seeds of the mesh targets from the kit above.

    use std::path::Path;

    use super::*;

    fn write(target: &str, name: &str, bytes: &[u8]) {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("seeds")
            .join(target);
        std::fs::create_dir_all(&dir).expect("seed directory");
        std::fs::write(dir.join(name), bytes).expect("seed file");
    }

    /// Peers (by index) and kit entries used in the scripts below.
    const PEER0: u8 = 0;
    const PEER1: u8 = 1;
    const STRANGER: u8 = 4;
    const VALID: u8 = 0;
    const RENEWED: u8 = 4;
    const SHORT: u8 = 8;
    const NOT_YET_VALID: u8 = 12;
    const FOREIGN: u8 = 13;
    const OURS: u8 = 14;

    /// The id of a policy seed: any version and hash decode.
    fn policy_id() -> fjord_mesh::control::PolicyId {
        fjord_mesh::control::PolicyId {
            version: 7,
            hash: [0x5a; fjord_mesh::control::POLICY_HASH_LEN],
        }
    }

    fn hello(certificate: u8, wants: u8, peer: u8) -> Vec<u8> {
        vec![1, certificate, wants, 0, 0, peer, 0]
    }

    #[test]
    #[ignore = "writes seed files"]
    fn write_policy_seeds() {
        let policy = "# who may reach whom\nversion 7\n\
                      allow from group ops to group db port 5432/tcp\n\
                      allow from any to any proto icmp\n\
                      allow from group web to 10.20.0.0/16 port 443/tcp\n\
                      allow from member build-1 to fd00::/64 port 8000-8100/udp\n\
                      allow from 198.18.0.1 to any proto any # a host\n";
        write("policy_parse", "policy", policy.as_bytes());
        let signed = SignedPolicy::sign(policy.as_bytes(), policy_network()).unwrap();
        write("policy_parse", "signed", signed.text());
        let tampered = String::from_utf8(signed.text().to_vec())
            .unwrap()
            .replace("5432", "5433");
        write("policy_parse", "signed_tampered", tampered.as_bytes());
        write(
            "policy_parse",
            "bad_line",
            b"version 1\nallow from group Ops to any proto udp\n",
        );
        write("policy_parse", "not_text", b"version 1\n\xff\xfe\n");
    }

    #[test]
    #[ignore = "writes seed files"]
    fn write_mesh_seeds() {
        let kit = Kit::get();
        let record = |certificate: &Certificate, endpoints: &[&str], heard_secs_ago| MemberRecord {
            certificate: certificate.clone(),
            endpoints: endpoints.iter().map(|e| address(e)).collect(),
            host_addresses: endpoints.iter().map(|e| address(e)).collect(),
            heard_secs_ago,
        };
        let samples = [
            (
                "hello",
                Control::Hello {
                    certificate: Box::new(kit.own.clone()),
                    wants_members: true,
                    host_addresses: vec![address("198.18.0.1:51820")],
                },
            ),
            (
                "members",
                Control::Members(vec![
                    record(&kit.certificates[1], &["198.18.0.2:51820"], 3),
                    record(
                        &kit.certificates[6],
                        &["[2001:db8::2]:1", "198.18.0.3:2"],
                        0,
                    ),
                ]),
            ),
            (
                "revocations",
                Control::Revocations(vec![kit.revocations[0].clone(), kit.revocations[5].clone()]),
            ),
            (
                "revocation_digest",
                Control::RevocationDigest {
                    count: 2,
                    hash: [7; 16],
                },
            ),
            ("goodbye", Control::Goodbye),
            ("ping", Control::Ping { nonce: 42 }),
            (
                "policy_digest",
                Control::PolicyDigest {
                    id: policy_id(),
                    len: 2_500,
                },
            ),
            (
                "policy_request",
                Control::PolicyRequest {
                    id: policy_id(),
                    first: 1,
                    count: 2,
                },
            ),
            (
                "policy_chunk_last",
                Control::PolicyChunk {
                    id: policy_id(),
                    index: 2,
                    count: 3,
                    bytes: b"allow from any to any proto icmp\n".to_vec(),
                },
            ),
        ];
        for (name, control) in &samples {
            write("control_parse", name, &control.encode());
        }
        let mut padded = Control::Pong { nonce: 7 }.encode();
        padded.resize(32, 0);
        write("control_parse", "pong_padded", &padded);
        let mut chunk = Control::PolicyChunk {
            id: policy_id(),
            index: 0,
            count: 3,
            bytes: vec![b'#'; fjord_mesh::control::POLICY_CHUNK_BYTES],
        }
        .encode();
        write("control_parse", "policy_chunk_full", &chunk);
        chunk.resize(chunk.len().next_multiple_of(16) + 16, 0);
        write("control_parse", "policy_chunk_padded", &chunk);
        let members = samples[1].1.encode();
        write(
            "control_parse",
            "members_truncated",
            &members[..members.len() - 5],
        );

        write("cert_parse", "certificate", &kit.own.encode());
        write(
            "cert_parse",
            "certificate_two_prefixes",
            &kit.certificates[4].encode(),
        );
        write("cert_parse", "revocation", &kit.revocations[0].encode());
        write(
            "cert_parse",
            "certificate_text",
            kit.own.to_base64().as_bytes(),
        );
        let revocation_text = format!("{}\n", kit.revocations[9].to_base64());
        write("cert_parse", "revocation_text", revocation_text.as_bytes());
        write(
            "cert_parse",
            "network_key_text",
            kit.network.to_string().as_bytes(),
        );
        let grouped = policy_network()
            .sign_with_groups(
                kit.own.node_key,
                "db-1",
                &kit.own.addresses,
                &["ops".parse().unwrap(), "db".parse().unwrap()],
                EPOCH_SECS,
                EPOCH_SECS + 3_600,
            )
            .unwrap();
        write("cert_parse", "certificate_in_groups", &grouped.encode());
        write(
            "cert_parse",
            "certificate_in_groups_text",
            grouped.to_base64().as_bytes(),
        );
        let routes: Vec<Cidr> = ["198.18.200.0/24", "0.0.0.0/0", "fd00:1::/64"]
            .iter()
            .map(|route| route.parse().unwrap())
            .collect();
        for (name, groups) in [
            ("certificate_routing", &[][..]),
            (
                "certificate_routing_in_groups",
                &["ops".parse().unwrap()][..],
            ),
        ] {
            let grant = fjord_mesh::Grant {
                name: "gw-1",
                addresses: &kit.own.addresses,
                groups,
                routes: &routes,
            };
            let routing = policy_network()
                .issue(kit.own.node_key, &grant, EPOCH_SECS, EPOCH_SECS + 3_600)
                .unwrap();
            write("cert_parse", name, &routing.encode());
        }

        // Joins through peer 0, learns peer 1 and 2, pings, answers.
        let mut join = vec![1, 7];
        join.extend(hello(VALID + PEER0, 0, PEER0));
        join.extend([2, 2, 1, 0, 5, 0, 2, 1, 2, 1, 0, PEER0, 0]);
        join.extend([5, 0, PEER1, 6, 1, 2, 4, 2, PEER0, 0, 4, 1, 9, 0, PEER1, 1]);
        join.extend([6, 2, 7, 0, 3, 0, STRANGER, 2]);
        write("mesh_membership", "join_through_bootstrap", &join);

        // Strangers handshake; one proves itself, one cannot, one lies.
        let mut verify = vec![4, 1, 5, 1, PEER1, 5, 1, STRANGER];
        verify.extend(hello(VALID + PEER1, 1, PEER1));
        verify.extend(hello(FOREIGN, 0, STRANGER));
        verify.extend(hello(OURS, 0, PEER0));
        verify.extend(hello(VALID + 2, 1, PEER0));
        verify.extend([6, 1, 2, 6, 2]);
        write("mesh_membership", "unverified_peers", &verify);

        // Members revoked by gossip, locally, then a renewal and leaving.
        let mut revoke = vec![0, 3];
        revoke.extend(hello(VALID + PEER0, 1, PEER0));
        revoke.extend(hello(VALID + PEER1, 0, PEER1));
        revoke.extend([3, 2, PEER1, 9, PEER0, 0, 7, 1, 0]);
        revoke.extend(hello(RENEWED + PEER1, 0, PEER1));
        revoke.extend([7, 2]);
        write("mesh_membership", "revocations_and_leave", &revoke);

        // Short-lived and not-yet-valid certificates as time passes.
        let mut expiry = vec![2, 9];
        expiry.extend(hello(SHORT + PEER1, 1, PEER1));
        expiry.extend([2, 1, NOT_YET_VALID, 0, 0, 0, PEER1, 1]);
        expiry.extend([6, 1, 4, 6, 1, 250]);
        expiry.extend(hello(NOT_YET_VALID, 0, PEER0));
        expiry.extend([6, 1, 200, 7, 0, 0, 1, 0, 0, PEER0, 0]);
        expiry.extend(hello(NOT_YET_VALID, 0, PEER0));
        write("mesh_membership", "expiry_and_renewal", &expiry);

        let mut raw = vec![6, 0, 0, PEER0, 1, 9, 0];
        raw.extend(&padded[..9]);
        raw.extend([7, 0, 0]);
        write("mesh_membership", "raw_bytes", &raw);
    }
}

/// What the firewall reads of a packet (its five-tuple, or an ICMP
/// error's reported tuple) from arbitrary bytes: never panics, and what
/// it reads lies in the packet (addresses of the version the first
/// nibble names).
pub fn firewall_packet(data: &[u8]) {
    use fjord_mesh::firewall::packet::{self, Packet};
    let version = data.first().map(|first| first >> 4);
    let check = |tuple: &packet::Tuple| {
        assert_eq!(tuple.source.is_ipv6(), version == Some(6));
        assert_eq!(tuple.destination.is_ipv6(), version == Some(6));
    };
    let read = packet::read(data);
    // A signature stands in for the read on the firewall's fast path: it
    // is taken only of what reads as a whole TCP or UDP packet.
    if packet::signature(data).is_some() {
        assert!(
            matches!(read, Packet::Flow(tuple) if matches!(tuple.protocol, packet::TCP | packet::UDP)),
            "{read:?}"
        );
    }
    match read {
        Packet::Flow(tuple) => check(&tuple),
        Packet::FirstFragment { tuple, datagram } => {
            check(&tuple);
            assert_eq!(datagram.protocol, tuple.protocol);
            assert_eq!(datagram.source, tuple.source);
        }
        Packet::LaterFragment(datagram) => {
            assert_eq!(datagram.source.is_ipv6(), version == Some(6));
        }
        Packet::IcmpError { error, about } => {
            check(&error);
            assert_eq!(about.source.is_ipv6(), error.source.is_ipv6());
        }
        Packet::Unreadable => {}
    }
}
