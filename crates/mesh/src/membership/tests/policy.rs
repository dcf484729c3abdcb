//! The network policy: a member holds the highest version it was given,
//! whatever order the versions come in, and a policy given to one member
//! reaches every other by gossip (`policy_transfer.rs`): at once to those
//! in session, on the first greeting to one that joins later, and by the
//! periodic check to one that lost chunks or missed it. What fails its
//! checks never replaces the policy in force.

use super::*;
use crate::control::{POLICY_CHUNK_BYTES, PolicyId, chunk_count};
use crate::membership::PolicyOffer;
use crate::policy::SignedPolicy;

fn signed(sim: &Sim, version: u64) -> SignedPolicy {
    signed_by(&sim.secret, version, 0)
}

/// A policy at `version` with `extra_rules` rules beside the ICMP one,
/// signed by `secret` (about 60 bytes a rule).
fn signed_by(secret: &NetworkSecret, version: u64, extra_rules: usize) -> SignedPolicy {
    let mut text = format!("version {version}\nallow from any to any proto icmp\n");
    for rule in 0..extra_rules {
        text.push_str(&format!(
            "allow from group team-{rule} to group db port {}/tcp\n",
            1000 + rule
        ));
    }
    SignedPolicy::sign(text.as_bytes(), secret).unwrap()
}

/// The version node `index` holds.
fn version_at(sim: &Sim, index: u16) -> Option<u64> {
    sim.nodes[&key(index).public_key()]
        .mesh
        .policy()
        .map(|held| held.policy.version())
}

fn mesh_of(sim: &mut Sim, index: u16) -> &mut Mesh {
    &mut sim.nodes.get_mut(&key(index).public_key()).unwrap().mesh
}

/// Nodes 0..count, each joining through node 0, met directly.
fn started(count: u16) -> Sim {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..count {
        sim.join(index, Some(0));
    }
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged());
    sim
}

fn everyone_holds(sim: &Sim, version: u64) -> bool {
    sim.nodes
        .values()
        .all(|node| node.mesh.policy().map(|p| p.policy.version()) == Some(version))
}

#[test]
fn the_highest_version_given_stays_in_force() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let node = key(0).public_key();
    let (three, two) = (signed(&sim, 3), signed(&sim, 2));
    let mesh = &mut sim.nodes.get_mut(&node).unwrap().mesh;
    assert!(mesh.policy().is_none(), "no policy: everything allowed");

    assert_eq!(
        mesh.offer_policy(three.clone()),
        PolicyOffer::Applied { version: 3 }
    );
    assert_eq!(
        mesh.offer_policy(two),
        PolicyOffer::Older {
            offered: 2,
            in_force: 3
        }
    );
    assert_eq!(
        mesh.offer_policy(three.clone()),
        PolicyOffer::Unchanged { version: 3 }
    );
    assert_eq!(mesh.policy(), Some(&three));
}

#[test]
fn a_policy_given_to_one_member_reaches_every_member_at_once() {
    let mut sim = started(5);
    // A policy of about 12 KiB: thirteen chunks, one request window.
    let policy = signed_by(&sim.secret, 4, 200);
    assert!(chunk_count(policy.text().len()) > 10);
    assert_eq!(
        mesh_of(&mut sim, 3).offer_policy(policy.clone()),
        PolicyOffer::Applied { version: 4 }
    );
    // No simulated time passes: the announcement, the requests and the
    // chunks are one exchange.
    sim.pump();
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.policy(), Some(&policy));
    }
    let learned: u64 = sim
        .nodes
        .values()
        .map(|node| node.mesh.counters().policies_learned)
        .sum();
    assert_eq!(learned, 4, "each other member fetched it once");
    // Steady state: digests go round, nothing is fetched again.
    let chunks = sim.policy_chunks;
    sim.advance(Duration::from_secs(120));
    assert_eq!(sim.policy_chunks, chunks);
    assert!(everyone_holds(&sim, 4));
}

#[test]
fn an_older_policy_never_replaces_a_newer_one() {
    let mut sim = started(4);
    let (old, new) = (signed(&sim, 2), signed(&sim, 5));
    let away = key(3).public_key();
    // Node 3 holds version 2 alone while it is away; version 5 spreads
    // to the rest.
    sim.nodes.get_mut(&away).unwrap().online = false;
    mesh_of(&mut sim, 3).offer_policy(old.clone());
    mesh_of(&mut sim, 1).offer_policy(new.clone());
    sim.pump();
    assert_eq!(version_at(&sim, 0), Some(5));
    assert_eq!(version_at(&sim, 3), Some(2));
    // Back: its digest of version 2 is answered with version 5's, which
    // it fetches; nobody fetches version 2.
    sim.nodes.get_mut(&away).unwrap().online = true;
    sim.advance(Duration::from_secs(40));
    assert!(everyone_holds(&sim, 5));
    // Given locally later, the older one is kept out too.
    assert_eq!(
        mesh_of(&mut sim, 0).offer_policy(old),
        PolicyOffer::Older {
            offered: 2,
            in_force: 5
        }
    );
    sim.advance(Duration::from_secs(40));
    assert!(everyone_holds(&sim, 5));
}

#[test]
fn two_texts_signed_with_one_version_settle_on_the_same_one_everywhere() {
    let mut sim = started(3);
    let a = signed_by(&sim.secret, 6, 1);
    let b = signed_by(&sim.secret, 6, 2);
    let winner = if PolicyId::of(6, a.text()) > PolicyId::of(6, b.text()) {
        &a
    } else {
        &b
    };
    mesh_of(&mut sim, 1).offer_policy(a.clone());
    mesh_of(&mut sim, 2).offer_policy(b.clone());
    sim.advance(Duration::from_secs(40));
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.policy(), Some(winner));
    }
}

/// Feeds node 0 the chunks of `text` as policy `id` from node 1, after
/// node 1's digest: what a member that forged or garbled a policy sends.
fn serve(sim: &mut Sim, id: PolicyId, text: &[u8]) -> Vec<Control> {
    let (from, address) = (key(1).public_key(), Sim::address(1));
    let now = sim.now;
    let mesh = mesh_of(sim, 0);
    let len = u32::try_from(text.len()).unwrap();
    let digest = Control::PolicyDigest { id, len }.encode();
    mesh.handle_control(now, from, address, &digest).unwrap();
    let mut sent = Vec::new();
    while let Some(outbound) = mesh.poll_message() {
        sent.push(Control::decode(&outbound.message).unwrap());
    }
    let count = chunk_count(text.len()) as u16;
    for (index, bytes) in text.chunks(POLICY_CHUNK_BYTES).enumerate() {
        let chunk = Control::PolicyChunk {
            id,
            index: index as u16,
            count,
            bytes: bytes.to_vec(),
        };
        mesh.handle_control(now, from, address, &chunk.encode())
            .unwrap();
    }
    while mesh.poll_message().is_some() {}
    sent
}

#[test]
fn a_forged_or_garbled_policy_is_refused_and_the_one_in_force_stays() {
    let mut sim = started(2);
    let in_force = signed(&sim, 3);
    mesh_of(&mut sim, 0).offer_policy(in_force.clone());
    sim.pump();
    let outsider = NetworkSecret::from_seed([9; 32]);

    let foreign = signed_by(&outsider, 10, 0).text().to_vec();
    let genuine = signed(&sim, 11);
    let tampered = String::from_utf8(genuine.text().to_vec())
        .unwrap()
        .replace("proto icmp", "proto any ")
        .into_bytes();
    let unparsable = b"version 12\nlet everyone in\n".to_vec();
    let forged: [(u64, &[u8]); 3] = [(10, &foreign), (11, &tampered), (12, &unparsable)];
    for (round, (version, text)) in forged.into_iter().enumerate() {
        let id = PolicyId::of(version, text);
        let asked = serve(&mut sim, id, text);
        assert!(
            matches!(asked[..], [Control::PolicyRequest { first: 0, .. }]),
            "{asked:?}"
        );
        let counters = mesh_of(&mut sim, 0).counters().clone();
        assert_eq!(counters.policies_refused, round as u64 + 1);
        assert_eq!(mesh_of(&mut sim, 0).policy(), Some(&in_force));
        // Offered again, it is not fetched again.
        assert_eq!(serve(&mut sim, id, text), []);
    }
    // The genuine text under a hash that is not its own: garbled on
    // the way, refused, and fetched again when offered again.
    let wrong_hash = PolicyId {
        version: 11,
        hash: [7; 32],
    };
    serve(&mut sim, wrong_hash, genuine.text());
    let mesh = mesh_of(&mut sim, 0);
    assert_eq!(mesh.counters().policies_refused, 4);
    assert_eq!(mesh.counters().policies_learned, 0);
    assert_eq!(mesh.policy(), Some(&in_force));
    assert_eq!(serve(&mut sim, wrong_hash, genuine.text()).len(), 1);
    // Chunks of no transfer are dropped and counted.
    let before = mesh_of(&mut sim, 0).counters().policy_chunks_dropped;
    let stray = Control::PolicyChunk {
        id: PolicyId::of(11, genuine.text()),
        index: 0,
        count: 1,
        bytes: vec![b'x'; 10],
    };
    let now = sim.now;
    mesh_of(&mut sim, 0)
        .handle_control(now, key(1).public_key(), Sim::address(1), &stray.encode())
        .unwrap();
    assert_eq!(
        mesh_of(&mut sim, 0).counters().policy_chunks_dropped,
        before + 1
    );
    // The genuine policy from node 1 still spreads.
    mesh_of(&mut sim, 1).offer_policy(genuine);
    sim.pump();
    assert!(everyone_holds(&sim, 11));
}

#[test]
fn a_member_that_joins_later_fetches_the_policy_on_its_first_greeting() {
    let mut sim = started(3);
    let policy = signed(&sim, 7);
    mesh_of(&mut sim, 2).offer_policy(policy);
    sim.pump();
    assert!(everyone_holds(&sim, 7));
    sim.join(3, Some(0));
    assert_eq!(
        version_at(&sim, 3),
        Some(7),
        "with the join, no time passed"
    );

    // A policy read from the file before its member met anyone (as
    // `fjord up` does) goes out on the member's first greetings.
    let trust = Trust::Network(sim.secret.public_key());
    let certificate = sim.certificate(4, 86_400);
    let mut mesh = sim.new_mesh(4, trust, certificate, Some(0));
    mesh.offer_policy(signed(&sim, 8));
    sim.start(4, mesh);
    sim.advance(Duration::from_secs(3));
    assert!(everyone_holds(&sim, 8));
}

#[test]
fn lost_chunks_are_asked_for_again() {
    let mut sim = started(4);
    // About 115 KiB: four request windows.
    let policy = signed_by(&sim.secret, 9, 2200);
    let chunks = chunk_count(policy.text().len());
    assert!(
        chunks > 3 * crate::control::MAX_REQUESTED_CHUNKS,
        "{chunks}"
    );
    sim.policy_chunk_loss = Some(7);
    mesh_of(&mut sim, 0).offer_policy(policy.clone());
    sim.pump();
    assert!(!everyone_holds(&sim, 9), "one in seven chunks lost");
    // Each lost chunk costs one retry interval.
    sim.advance(Duration::from_secs(20));
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.policy(), Some(&policy));
        assert_eq!(node.mesh.counters().policy_transfers_failed, 0);
    }
}

#[test]
fn a_transfer_given_up_is_repaired_by_the_next_check() {
    let mut sim = started(3);
    // Every chunk is lost: each transfer gives up after its retries.
    sim.policy_chunk_loss = Some(1);
    let policy = signed(&sim, 2);
    mesh_of(&mut sim, 1).offer_policy(policy);
    sim.pump();
    let retries = u32::from(POLICY_TRANSFER_RETRIES) + 1;
    sim.advance(POLICY_RETRY_INTERVAL * retries + Duration::from_millis(1));
    for index in [0, 2] {
        assert_eq!(version_at(&sim, index), None);
        assert_eq!(
            mesh_of(&mut sim, index).counters().policy_transfers_failed,
            1
        );
    }
    // The loss ends: the holder's next check (at most 37.5 s away) brings
    // it.
    sim.policy_chunk_loss = None;
    sim.advance(Duration::from_secs(38));
    assert!(everyone_holds(&sim, 2));
}

#[test]
fn a_member_list_passes_no_policy_on() {
    let mut sim = Sim::new();
    let list: Vec<Certificate> = (0..3).map(listed).collect();
    listed_mesh(&mut sim, &list, 3);
    sim.advance(Duration::from_secs(3));
    let policy = signed(&sim, 1);
    mesh_of(&mut sim, 0).offer_policy(policy);
    sim.advance(Duration::from_secs(40));
    assert_eq!(version_at(&sim, 1), None, "no network key to verify it");
    assert_eq!(sim.policy_chunks, 0);
}
