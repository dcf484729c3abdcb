//! A refused node is told why (issue 44): the refusing member answers its
//! Hello with the reason, once a minute per key, and the refused node
//! hands the answer to its driver.

use super::*;
use crate::control::RefusalReason;

fn hello(certificate: Certificate) -> Vec<u8> {
    Control::Hello {
        certificate: Box::new(certificate),
        wants_members: false,
        host_addresses: Vec::new(),
    }
    .encode()
}

/// The refusals `mesh` queued, by recipient; other messages are dropped.
fn refusals_sent(mesh: &mut Mesh) -> Vec<(PublicKey, RefusalReason)> {
    std::iter::from_fn(|| mesh.poll_message())
        .filter_map(|outbound| match Control::decode(&outbound.message) {
            Ok(Control::Refused { reason }) => Some((outbound.to, reason)),
            _ => None,
        })
        .collect()
}

#[test]
fn a_node_of_another_network_learns_why_it_was_refused() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    let outsider = NetworkSecret::from_seed([9; 32]);
    let foreign = outsider
        .sign(
            key(9).public_key(),
            "outsider",
            &["198.19.0.9/32".parse().unwrap()],
            EPOCH_SECS - 10,
            EPOCH_SECS + 86_400,
        )
        .unwrap();
    let trust = Trust::Network(outsider.public_key());
    let refused = sim.join_trusting(9, trust, foreign, Some(0));
    let node = sim.nodes.get_mut(&refused).unwrap();
    assert_eq!(
        node.mesh.poll_refusal(),
        Some(Refusal {
            by: first,
            reason: RefusalReason::OtherNetwork
        })
    );
    assert_eq!(node.mesh.poll_refusal(), None);
    // The member greeted the outsider back and was refused in turn (by
    // the outsider's network): not news to pass on from a non-member.
    let member = &mut sim.nodes.get_mut(&first).unwrap().mesh;
    assert!(member.counters().refused_certificates >= 1);
    assert_eq!(member.poll_refusal(), None);
}

#[test]
fn a_refused_key_is_answered_at_most_once_a_minute() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let start = sim.now;
    let stranger = key(7).public_key();
    let foreign = NetworkSecret::from_seed([9; 32])
        .sign(
            stranger,
            "x",
            &["198.19.9.9/32".parse().unwrap()],
            EPOCH_SECS - 1,
            EPOCH_SECS + 999,
        )
        .unwrap();
    let mesh = &mut sim.nodes.get_mut(&key(0).public_key()).unwrap().mesh;
    let mut answers = Vec::new();
    // It handshakes and greets again and again (every 5 s for 3 minutes).
    for seconds in (0..180).step_by(5) {
        let now = start + Duration::from_secs(seconds);
        mesh.handle_unverified(now, stranger);
        let _ = mesh.handle_control(now, stranger, Sim::address(7), &hello(foreign.clone()));
        for answer in refusals_sent(mesh) {
            answers.push((seconds, answer));
        }
    }
    let reason = RefusalReason::OtherNetwork;
    assert_eq!(
        answers,
        [
            (0, (stranger, reason)),
            (60, (stranger, reason)),
            (120, (stranger, reason))
        ]
    );
    assert_eq!(mesh.counters().refused_certificates, 36);
}

#[test]
fn each_refusal_says_its_reason() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let now = sim.now;
    let expired = key(20).public_key();
    let early = key(21).public_key();
    let revoked = key(22).public_key();
    let impostor = key(23).public_key();
    let sign = |key: PublicKey, issued: u64, expires: u64| {
        sim.secret
            .sign(
                key,
                "n",
                &["198.19.1.1/32".parse().unwrap()],
                issued,
                expires,
            )
            .unwrap()
    };
    let cases = [
        (expired, sign(expired, EPOCH_SECS - 100, EPOCH_SECS - 1)),
        (early, sign(early, EPOCH_SECS + 600, EPOCH_SECS + 900)),
        (revoked, sign(revoked, EPOCH_SECS - 100, EPOCH_SECS + 900)),
        // A member's real certificate, presented by another key.
        (impostor, sim.certificate(0, 900)),
    ];
    let revocation = sim.secret.revoke(revoked, EPOCH_SECS - 50);
    let mesh = &mut sim.nodes.get_mut(&key(0).public_key()).unwrap().mesh;
    mesh.revoke(revocation).unwrap();
    for (key, certificate) in cases {
        mesh.handle_unverified(now, key);
        let _ = mesh.handle_control(now, key, Sim::address(9), &hello(certificate));
    }
    assert_eq!(
        refusals_sent(mesh),
        [
            (expired, RefusalReason::Expired),
            (early, RefusalReason::NotYetValid),
            (revoked, RefusalReason::Revoked),
            (impostor, RefusalReason::WrongNode),
        ]
    );
    // The revoked peer goes at the next timeout, after its notice (which
    // needs its session) was queued, not before.
    mesh.handle_timeout(now);
    let removed: Vec<MeshAction> = std::iter::from_fn(|| mesh.poll_action()).collect();
    assert!(removed.contains(&MeshAction::Remove { key: revoked }));
}

#[test]
fn a_member_list_answers_not_listed() {
    let mut sim = Sim::new();
    let list: Vec<Certificate> = (0..2).map(listed).collect();
    listed_mesh(&mut sim, &list, 2);
    let stranger = sim.join_trusting(7, Trust::Members(vec![listed(7)]), listed(7), Some(0));
    let node = sim.nodes.get_mut(&stranger).unwrap();
    assert_eq!(
        node.mesh.poll_refusal(),
        Some(Refusal {
            by: key(0).public_key(),
            reason: RefusalReason::NotListed
        })
    );
}

#[test]
fn a_refusal_from_a_key_never_greeted_is_not_taken() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    let now = sim.now;
    let stranger = key(7).public_key();
    let mesh = &mut sim.nodes.get_mut(&first).unwrap().mesh;
    mesh.handle_unverified(now, stranger);
    let refused = Control::Refused {
        reason: RefusalReason::Revoked,
    }
    .encode();
    assert_eq!(
        mesh.handle_control(now, stranger, Sim::address(7), &refused),
        Err(MeshDrop::NotAMember)
    );
    assert_eq!(mesh.poll_refusal(), None);
}

#[test]
fn the_keys_answered_are_bounded() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let start = sim.now;
    // Answering needs no valid certificate of theirs: refusals are what
    // is counted here, so each key presents another key's certificate.
    let borrowed = sim.certificate(1, 900);
    let mesh = &mut sim.nodes.get_mut(&key(0).public_key()).unwrap().mesh;
    let greet = |mesh: &mut Mesh, index: usize, now: Instant| {
        // Any 32 bytes will do: the mesh never computes with the key.
        let mut bytes = [7u8; 32];
        bytes[..8].copy_from_slice(&(index as u64).to_be_bytes());
        let stranger = PublicKey::from_bytes(bytes);
        let _ = mesh.handle_control(now, stranger, Sim::address(9), &hello(borrowed.clone()));
        refusals_sent(mesh).len()
    };
    let answered: usize = (0..MAX_ANSWERED_KEYS)
        .map(|index| greet(mesh, index, start))
        .sum();
    assert_eq!(answered, MAX_ANSWERED_KEYS);
    // Full of keys answered within the minute: a new one is not.
    let soon = start + Duration::from_secs(30);
    assert_eq!(greet(mesh, MAX_ANSWERED_KEYS, soon), 0);
    // A minute on, the old ones are forgotten and there is room again.
    let later = start + REFUSAL_NOTICE_INTERVAL;
    assert_eq!(greet(mesh, MAX_ANSWERED_KEYS + 1, later), 1);
    assert_eq!(mesh.refusals_answered.len(), 1);
}
