//! How a revocation given to one member reaches the others: at start,
//! before that member met anyone (the flood reaches nobody), and while a
//! member is away (the flood misses it).

use super::*;

/// Node `index` with the network trust and a day-long certificate, given
/// `revocations` before it meets anyone (as `fjord up` reads its
/// `Revocations` file), then started.
fn start_revoking(
    sim: &mut Sim,
    index: u16,
    bootstrap: Option<u16>,
    revocations: &[Revocation],
) -> PublicKey {
    let trust = Trust::Network(sim.secret.public_key());
    let certificate = sim.certificate(index, 86_400);
    let mut mesh = sim.new_mesh(index, trust, certificate, bootstrap);
    for revocation in revocations {
        mesh.revoke(revocation.clone()).unwrap();
    }
    sim.start(index, mesh)
}

/// Whether `at` has forgotten `gone`: no member, no peer, no routes.
fn dropped(sim: &Sim, at: &PublicKey, gone: &PublicKey) -> bool {
    let node = &sim.nodes[at];
    !node.mesh.is_member(gone) && !node.peers.contains_key(gone)
}

/// Advances in `step`s until `done` holds or `limit` passed; how long
/// it took.
fn time_until(
    sim: &mut Sim,
    step: Duration,
    limit: Duration,
    done: impl Fn(&Sim) -> bool,
) -> Option<Duration> {
    let start = sim.now;
    while !done(sim) {
        if sim.now - start >= limit {
            return None;
        }
        sim.advance(step);
    }
    Some(sim.now - start)
}

#[test]
fn a_revocation_read_at_start_by_a_member_that_is_not_the_bootstrap_spreads() {
    let mut sim = Sim::new();
    let bootstrap = sim.join(0, None);
    let victim = sim.join(2, Some(0));
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged());

    // Node 1 is started with the victim's revocation: it learns it before
    // it is in session with anyone, so its flood goes nowhere.
    let revocation = sim.secret.revoke(victim, EPOCH_SECS);
    let revoker = start_revoking(&mut sim, 1, Some(0), &[revocation]);
    assert_eq!(sim.nodes[&revoker].mesh.counters().revocations_learned, 1);

    // The greeting with the bootstrap member carries it over: both sides
    // send their digest, and the bootstrap member's differs. No simulated
    // time passes (`start` delivers the whole exchange).
    let took = time_until(
        &mut sim,
        Duration::from_millis(100),
        Duration::from_secs(1),
        |sim| dropped(sim, &bootstrap, &victim),
    );
    assert_eq!(took, Some(Duration::ZERO), "bootstrap kept the victim");
    assert_eq!(sim.nodes[&bootstrap].mesh.counters().revocations_learned, 1);
    // The bootstrap member's list named the victim, and was refused.
    assert!(dropped(&sim, &revoker, &victim));

    // It stays out: its Hellos and pings are refused, its peer removed.
    sim.advance(Duration::from_secs(60));
    assert!(dropped(&sim, &bootstrap, &victim));
    assert!(dropped(&sim, &revoker, &victim));
    assert!(sim.nodes[&bootstrap].mesh.is_member(&revoker));
    assert!(sim.nodes[&revoker].mesh.is_member(&bootstrap));
}

#[test]
fn a_member_away_during_a_revocation_learns_it_within_the_check_bound() {
    let mut sim = Sim::new();
    let bootstrap = sim.join(0, None);
    let revoker = sim.join(1, Some(0));
    let victim = sim.join(2, Some(0));
    let bystander = sim.join(3, Some(0));
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged());

    // The bootstrap member is away when node 1 is given the revocation:
    // the flood reaches the bystander but not it.
    sim.nodes.get_mut(&bootstrap).unwrap().online = false;
    let revocation = sim.secret.revoke(victim, EPOCH_SECS);
    sim.nodes
        .get_mut(&revoker)
        .unwrap()
        .mesh
        .revoke(revocation)
        .unwrap();
    sim.pump();
    assert!(dropped(&sim, &bystander, &victim));
    sim.advance(Duration::from_secs(20));
    sim.nodes.get_mut(&bootstrap).unwrap().online = true;
    assert!(sim.nodes[&bootstrap].mesh.is_member(&victim));

    // Back, with its sessions as they were (no new greeting), it learns
    // the revocation at its own next check: within 1.25 ×
    // revocation_check_interval (the jitter) of its return, plus the
    // round trip, which takes no simulated time here.
    let interval = MeshConfig::new(
        Trust::Network(sim.secret.public_key()),
        sim.certificate(0, 1),
        1420,
    )
    .revocation_check_interval;
    let bound = interval * 5 / 4;
    let took = time_until(&mut sim, Duration::from_millis(100), bound, |sim| {
        dropped(sim, &bootstrap, &victim)
    });
    assert!(took.is_some(), "still a member {bound:?} after its return");
    assert_eq!(sim.nodes[&bootstrap].mesh.counters().revocations_learned, 1);
    // And the victim, still gossiped by nobody, does not come back.
    sim.advance(Duration::from_secs(120));
    for node in [bootstrap, revoker, bystander] {
        assert!(dropped(&sim, &node, &victim));
    }
}

#[test]
fn members_with_the_same_revocations_exchange_digests_only() {
    let mut sim = Sim::new();
    sim.join(0, None);
    for index in 1..4 {
        sim.join(index, Some(0));
    }
    let revocation = sim.secret.revoke(key(9).public_key(), EPOCH_SECS);
    sim.nodes
        .get_mut(&key(1).public_key())
        .unwrap()
        .mesh
        .revoke(revocation)
        .unwrap();
    sim.advance(Duration::from_secs(3));
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.counters().revocations_learned, 1);
        assert_eq!(node.mesh.counters().malformed, 0);
    }
    // Steady state: the periodic checks send digests (every member in
    // session, every interval), which match, so no list travels.
    let lists = sim.revocation_lists;
    sim.advance(Duration::from_secs(120));
    assert_eq!(sim.revocation_lists, lists);
    for node in sim.nodes.values() {
        assert_eq!(node.mesh.counters().revocations_learned, 1);
    }
}

#[test]
fn digests_match_only_for_the_same_revocations() {
    let secret = NetworkSecret::from_seed([3; 32]);
    let a = secret.revoke(key(1).public_key(), 100);
    let b = secret.revoke(key(2).public_key(), 100);
    let later = secret.revoke(key(2).public_key(), 101);
    let digest = |list: &[&Revocation]| RevocationDigest::of(list.iter().copied());
    assert_eq!(digest(&[&a, &b]), digest(&[&b, &a]), "order does not count");
    assert_ne!(digest(&[&a, &b]), digest(&[&a, &later]));
    assert_ne!(digest(&[&a]), digest(&[&a, &b]));
    assert_eq!(digest(&[]).count, 0);
    assert_eq!(digest(&[&a, &b]).count, 2);
}

#[test]
fn a_revoked_bootstrap_member_loses_its_peer_and_routes_too() {
    let mut sim = Sim::new();
    let bootstrap = sim.join(0, None);
    let member = sim.join(1, Some(0));
    let other = sim.join(2, Some(0));
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged());
    // Both joined through node 0, whose peer a timeout alone would keep
    // (to rejoin through it); a revocation removes it outright.
    let revocation = sim.secret.revoke(bootstrap, EPOCH_SECS);
    sim.nodes
        .get_mut(&member)
        .unwrap()
        .mesh
        .revoke(revocation)
        .unwrap();
    sim.pump();
    assert!(dropped(&sim, &member, &bootstrap));
    assert!(dropped(&sim, &other, &bootstrap));
    sim.advance(Duration::from_secs(60));
    assert!(dropped(&sim, &member, &bootstrap));
    assert!(dropped(&sim, &other, &bootstrap));
    assert!(sim.nodes[&member].mesh.is_member(&other));
    assert!(sim.nodes[&other].mesh.is_member(&member));
}
