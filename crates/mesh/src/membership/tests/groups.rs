//! Groups travel with the certificate: a member that learns another
//! through gossip (never meeting it first) reports its groups, from a
//! signed certificate and from a member list alike.

use super::*;
use crate::cert::Group;

fn groups(names: &[&str]) -> Vec<Group> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

/// What node `who` reports of node `of`'s groups.
fn groups_seen(sim: &Sim, who: u16, of: u16) -> Vec<Group> {
    let member = sim.nodes[&key(who).public_key()]
        .mesh
        .members()
        .find(|member| member.key == key(of).public_key())
        .expect("a known member");
    member.groups
}

#[test]
fn gossip_carries_a_certificate_s_groups() {
    let mut sim = Sim::new();
    sim.join(0, None);
    let plain = sim.certificate(1, 86_400);
    let grouped = sim
        .secret
        .sign_with_groups(
            plain.node_key,
            &plain.name,
            &plain.addresses,
            &groups(&["ops", "db"]),
            plain.issued_at,
            plain.expires_at,
        )
        .unwrap();
    sim.join_with(1, grouped, Some(0));
    sim.advance(Duration::from_millis(50));
    sim.join(2, Some(0));
    sim.advance(Duration::from_secs(5));
    assert!(sim.converged(), "not converged 5 s after the joins");
    assert_eq!(groups_seen(&sim, 2, 1), groups(&["ops", "db"]));
    assert_eq!(groups_seen(&sim, 1, 2), groups(&[]));
}

#[test]
fn a_member_list_s_groups_are_reported() {
    let mut sim = Sim::new();
    let mut list: Vec<Certificate> = (0..3).map(listed).collect();
    list[1] = Certificate::listed_with_groups(
        list[1].node_key,
        &list[1].name,
        &list[1].addresses,
        &groups(&["web"]),
    )
    .unwrap();
    for (index, own) in (0..).zip(&list) {
        let bootstrap = (index > 0).then_some(0);
        sim.join_trusting(index, Trust::Members(list.clone()), own.clone(), bootstrap);
        sim.advance(Duration::from_millis(50));
    }
    sim.advance(Duration::from_secs(5));
    assert!(sim.converged(), "not converged 5 s after the joins");
    assert_eq!(groups_seen(&sim, 2, 1), groups(&["web"]));
}
