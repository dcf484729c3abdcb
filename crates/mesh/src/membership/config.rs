//! The mesh's settings, inputs and outputs: what a driver configures,
//! the actions and messages it gets back, and what it can report.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use crate::cert::{CertError, Certificate, Group, NetworkPublicKey};
use crate::cidr::Cidr;
use crate::codec::DecodeError;

/// How soon to gossip after learning a new member.
pub const CHANGED_GOSSIP_DELAY: Duration = Duration::from_millis(1000);

/// A member configured by key and endpoint, to join through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bootstrap {
    pub key: PublicKey,
    pub endpoint: SocketAddr,
}

/// Who may be a member.
#[derive(Debug, Clone)]
pub enum Trust {
    /// Whoever presents a valid, unrevoked certificate signed by this
    /// network key, with the addresses it names.
    Network(NetworkPublicKey),
    /// Exactly these members, each with exactly its listed addresses
    /// ([`Certificate::listed`] records; `Member` lines in the config).
    /// No revocations: a member leaves the list by a config change.
    Members(Vec<Certificate>),
}

impl From<NetworkPublicKey> for Trust {
    fn from(network: NetworkPublicKey) -> Self {
        Self::Network(network)
    }
}

/// Settings of the mesh. Defaults live in [`MeshConfig::new`].
#[derive(Debug, Clone)]
pub struct MeshConfig {
    pub trust: Trust,
    /// Our own certificate, presented in every Hello.
    pub certificate: Certificate,
    pub bootstrap: Vec<Bootstrap>,
    /// Our interface addresses with our listening port, announced in our
    /// Hello so members can greet us without a rendezvous (see
    /// [`crate::control::Control::Hello`]). Empty by default.
    pub host_addresses: Vec<SocketAddr>,
    /// Full member list to one random member this often (default 15 s:
    /// a lost announcement heals within one interval).
    pub gossip_interval: Duration,
    /// Ping each member this often (default 10 s: under the 30 s UDP
    /// mapping timeout of common NATs, and RTTs stay fresh).
    pub ping_interval: Duration,
    /// Our revocation and policy digests to every member in session this
    /// often (default 30 s: a member that missed a revocation or a policy
    /// learns it within 37.5 s of meeting one that holds it, at a third of
    /// the pings' message rate; see `revocations.rs`).
    pub revocation_check_interval: Duration,
    /// Forget a member nobody has heard from for this long (default 180 s).
    pub member_timeout: Duration,
    /// A peer that is not a member must present a valid Hello this soon
    /// after its handshake (default 10 s).
    pub verify_timeout: Duration,
    /// Largest control message, so it fits one tunnel packet (the MTU).
    pub max_message_bytes: usize,
    /// The name of the member to send everything without a more specific
    /// route to (`ExitNode` in `[Mesh]`), if its certificate routes a
    /// default prefix. None by default: no member gets a default route.
    pub exit_node: Option<String>,
    /// Up to this many members (this node included), every member keeps
    /// a session with every other, met as soon as it is learned
    /// (`EagerSessions` in `[Mesh]`; default 32: paths are ready before
    /// the first packet, at a cost that grows with the network). Above
    /// it, sessions are on demand (`on_demand.rs`).
    pub eager_sessions: usize,
    /// An on-demand session without user traffic for this long is closed
    /// (`IdleTimeout` in `[Mesh]`; default 60 s: shorter saves pings and
    /// rekeys, longer saves a handshake when traffic comes back).
    pub idle_timeout: Duration,
}

/// [`MeshConfig::eager_sessions`]'s default.
pub const DEFAULT_EAGER_SESSIONS: usize = 32;
/// [`MeshConfig::idle_timeout`]'s default.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);

impl MeshConfig {
    /// `certificate` is our own record: signed by the network, or our
    /// entry of the member list.
    pub fn new(trust: impl Into<Trust>, certificate: Certificate, mtu: usize) -> Self {
        Self {
            trust: trust.into(),
            certificate,
            bootstrap: Vec::new(),
            host_addresses: Vec::new(),
            gossip_interval: Duration::from_secs(15),
            ping_interval: Duration::from_secs(10),
            revocation_check_interval: Duration::from_secs(30),
            member_timeout: Duration::from_secs(180),
            verify_timeout: Duration::from_secs(10),
            max_message_bytes: mtu,
            exit_node: None,
            eager_sessions: DEFAULT_EAGER_SESSIONS,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
        }
    }
}

/// A change to the peer table that the mesh asks of its driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MeshAction {
    /// Make `key` a peer (if it is not), route exactly `addresses` to it,
    /// and use `endpoint` when the peer has none yet.
    Admit {
        key: PublicKey,
        addresses: Vec<Cidr>,
        endpoint: Option<SocketAddr>,
    },
    /// Remove the peer `key` and its routes.
    Remove { key: PublicKey },
    /// `key` said Goodbye but stays a peer (a bootstrap member): forget
    /// our sessions with it, which it no longer holds, so that the next
    /// message to it starts a handshake.
    EndSessions { key: PublicKey },
    /// Send each endpoint of `key` a punch datagram with a TTL too low to
    /// reach the far NAT: it opens our own NAT for the answer without
    /// leaving a stray entry in theirs (which would make their NAT map
    /// their reply to another port).
    Punch {
        key: PublicKey,
        endpoints: Vec<SocketAddr>,
    },
    /// Open `traversal::PREDICTION_SOCKETS` extra sockets and send a
    /// punch from each (low TTL, as `Punch`) to each of `toward`, `key`'s
    /// endpoints: behind a symmetric NAT, each socket holds its own
    /// mapping toward `key`, one of which `key`'s probes may hit. A
    /// socket that hears from `key`'s address carries the traffic to the
    /// endpoint it heard from; the others close after a few seconds.
    PredictPorts {
        key: PublicKey,
        toward: Vec<SocketAddr>,
    },
    /// Send `key` one handshake initiation, a copy to each of
    /// `endpoints`, now, even if one left recently (both sides punched,
    /// or these are the member's own addresses). A peer without a session
    /// is pointed at the first; one with a session (through a relay)
    /// stays where it is until an answer from one of them moves it.
    Connect {
        key: PublicKey,
        endpoints: Vec<SocketAddr>,
    },
    /// Forward WireGuard datagrams between these two members (see
    /// `relay.rs`).
    RelayBetween {
        a: crate::relay::RelaySide,
        b: crate::relay::RelaySide,
    },
    /// Reach `key` through the relay at `relay_endpoint`: point the peer
    /// there and send an initiation now.
    UseRelay {
        key: PublicKey,
        relay_endpoint: SocketAddr,
    },
}

/// A control message to seal and send to `to` inside its session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbound {
    pub to: PublicKey,
    pub message: Vec<u8>,
}

/// Why a control message was ignored. Each has a counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MeshDrop {
    #[error("malformed control message: {0}")]
    Malformed(#[from] DecodeError),
    #[error("certificate refused: {0}")]
    Certificate(#[from] CertError),
    #[error("control message from a peer that is not a member")]
    NotAMember,
}

/// What `fjord show` reports about a member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberStatus {
    pub key: PublicKey,
    pub name: String,
    pub addresses: Vec<Cidr>,
    /// The groups its certificate (or `Member =` line) names.
    pub groups: Vec<Group>,
    /// The prefixes behind it its certificate names (`routes.rs`).
    pub routes: Vec<Cidr>,
    /// It is this node's exit node: the default routes it names are
    /// routed to it.
    pub exit_node: bool,
    pub endpoints: Vec<SocketAddr>,
    /// It has spoken to us (a Hello in a session).
    pub direct: bool,
    /// The member whose relay carries our session with it, if any.
    pub relay: Option<PublicKey>,
    /// Sessions are on demand and none is kept or being opened with it:
    /// the first packet for it opens one (`on_demand.rs`).
    pub on_demand: bool,
    pub rtt: Option<Duration>,
    pub last_heard: Instant,
    pub expires_at: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MeshCounters {
    pub malformed: u64,
    pub refused_certificates: u64,
    pub not_a_member: u64,
    pub members_learned: u64,
    pub members_removed: u64,
    pub revocations_learned: u64,
    /// Introductions we asked a mutual member for.
    pub introductions_requested: u64,
    /// Rendezvous we arranged between two members.
    pub rendezvous_arranged: u64,
    /// Members we gave up reaching directly.
    pub traversals_failed: u64,
    /// Pairs we agreed to relay for.
    pub relays_offered: u64,
    /// Relayed members reached directly later (the relay left behind).
    pub relays_left: u64,
    /// Rendezvous in which we predicted ports (traversal.rs).
    pub port_predictions: u64,
    /// Network policies fetched from members and put in force.
    pub policies_learned: u64,
    /// Policies fetched from members that failed their checks (hash,
    /// signature, parse, version); the one in force stayed.
    pub policies_refused: u64,
    /// Policy transfers given up after repeated requests went unanswered.
    pub policy_transfers_failed: u64,
    /// Policy chunks of no transfer in progress, or that did not fit it.
    pub policy_chunks_dropped: u64,
    /// Sessions opened on demand, for a first packet (`on_demand.rs`).
    pub sessions_on_demand: u64,
    /// On-demand sessions closed after `idle_timeout` without traffic.
    pub sessions_idle_closed: u64,
}

impl MeshCounters {
    /// Each counter with the name `fjord show` gives it.
    pub fn named(&self) -> [(&'static str, u64); 18] {
        [
            ("members_learned", self.members_learned),
            ("members_removed", self.members_removed),
            ("revocations_learned", self.revocations_learned),
            ("policies_learned", self.policies_learned),
            ("policies_refused", self.policies_refused),
            ("policy_transfers_failed", self.policy_transfers_failed),
            ("policy_chunks_dropped", self.policy_chunks_dropped),
            ("introductions_requested", self.introductions_requested),
            ("rendezvous_arranged", self.rendezvous_arranged),
            ("port_predictions", self.port_predictions),
            ("traversals_failed", self.traversals_failed),
            ("relays_offered", self.relays_offered),
            ("relays_left", self.relays_left),
            ("sessions_on_demand", self.sessions_on_demand),
            ("sessions_idle_closed", self.sessions_idle_closed),
            ("malformed", self.malformed),
            ("refused_certificates", self.refused_certificates),
            ("not_a_member", self.not_a_member),
        ]
    }
}
