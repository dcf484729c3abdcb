//! Routes behind members reach every member's peer table; a default route
//! only the chosen exit node's, and only while its certificate names one.

use super::*;
use crate::cert::Grant;
use crate::membership::ExitNodeStatus;

fn cidr(text: &str) -> Cidr {
    text.parse().unwrap()
}

/// Node `index`'s certificate routing `routes`, issued `age_secs` ago.
fn routing(sim: &Sim, index: u16, routes: &[&str], age_secs: u64) -> Certificate {
    let plain = sim.certificate(index, 86_400);
    let routes: Vec<Cidr> = routes.iter().map(|text| cidr(text)).collect();
    let grant = Grant {
        name: &plain.name,
        addresses: &plain.addresses,
        routes: &routes,
        ..Grant::default()
    };
    sim.secret
        .issue(
            plain.node_key,
            &grant,
            EPOCH_SECS - age_secs,
            plain.expires_at,
        )
        .unwrap()
}

/// What node `who`'s peer table routes to node `to`.
fn routed(sim: &Sim, who: u16, to: u16) -> Vec<Cidr> {
    sim.nodes[&key(who).public_key()].peers[&key(to).public_key()].clone()
}

fn mesh_of(sim: &mut Sim, index: u16) -> &mut Mesh {
    &mut sim.nodes.get_mut(&key(index).public_key()).unwrap().mesh
}

/// Node 0, node 1 routing a LAN, node 2 offering a default route; all met.
fn routed_mesh() -> Sim {
    let mut sim = Sim::new();
    sim.join(0, None);
    let lan = routing(&sim, 1, &["198.18.200.0/24"], 10);
    sim.join_with(1, lan, Some(0));
    let exit = routing(&sim, 2, &["0.0.0.0/0", "198.18.201.0/24"], 10);
    sim.join_with(2, exit, Some(0));
    sim.advance(Duration::from_secs(3));
    assert!(sim.converged(), "not converged 3 s after the joins");
    sim
}

#[test]
fn a_member_s_routes_join_its_addresses_everywhere() {
    let sim = routed_mesh();
    for who in [0, 2] {
        assert_eq!(
            routed(&sim, who, 1),
            [cidr("198.19.0.1/32"), cidr("198.18.200.0/24")]
        );
    }
    // Nobody chose node 2 as exit node: its default route goes nowhere.
    assert_eq!(
        routed(&sim, 0, 2),
        [cidr("198.19.0.2/32"), cidr("198.18.201.0/24")]
    );
    let mesh = &sim.nodes[&key(0).public_key()].mesh;
    assert_eq!(
        mesh.member_routes(),
        [cidr("198.18.200.0/24"), cidr("198.18.201.0/24")]
    );
    assert_eq!(mesh.exit_node(), ExitNodeStatus::NotChosen);
}

#[test]
fn only_the_chosen_exit_node_gets_the_default_route() {
    let mut sim = routed_mesh();
    let generation = mesh_of(&mut sim, 0).routes_generation();
    mesh_of(&mut sim, 0).set_exit_node(Some("node-2".into()));
    sim.pump();
    let default = cidr("0.0.0.0/0");
    assert!(routed(&sim, 0, 2).contains(&default));
    assert!(!routed(&sim, 1, 2).contains(&default), "node 1 chose none");
    let mesh = &sim.nodes[&key(0).public_key()].mesh;
    assert!(mesh.routes_generation() > generation);
    assert!(mesh.member_routes().contains(&default));
    assert_eq!(
        mesh.exit_node(),
        ExitNodeStatus::Serving {
            name: "node-2".into(),
            key: key(2).public_key()
        }
    );
    assert!(
        mesh.members()
            .any(|member| member.exit_node && member.key == key(2).public_key())
    );

    // A member without a default route cannot serve; one unknown neither.
    mesh_of(&mut sim, 0).set_exit_node(Some("node-1".into()));
    sim.pump();
    assert!(!routed(&sim, 0, 2).contains(&default));
    let status = mesh_of(&mut sim, 0).exit_node();
    assert_eq!(
        status,
        ExitNodeStatus::NoDefaultRoute {
            name: "node-1".into()
        }
    );
    mesh_of(&mut sim, 0).set_exit_node(Some("node-7".into()));
    assert_eq!(
        mesh_of(&mut sim, 0).exit_node(),
        ExitNodeStatus::Unknown {
            name: "node-7".into()
        }
    );
}

#[test]
fn an_exit_node_that_joins_later_takes_effect() {
    let mut sim = Sim::new();
    sim.join(0, None);
    mesh_of(&mut sim, 0).set_exit_node(Some("node-2".into()));
    let exit = routing(&sim, 2, &["0.0.0.0/0"], 10);
    sim.join_with(2, exit, Some(0));
    sim.advance(Duration::from_secs(1));
    assert!(routed(&sim, 0, 2).contains(&cidr("0.0.0.0/0")));
}

#[test]
fn routes_follow_renewal_and_departure() {
    let mut sim = routed_mesh();
    mesh_of(&mut sim, 0).set_exit_node(Some("node-2".into()));
    sim.pump();
    // Node 2 renews without its default route: it stops serving.
    let renewed = routing(&sim, 2, &["198.18.202.0/24"], 5);
    let now = sim.now;
    let taken = mesh_of(&mut sim, 2).renew_certificate(now, renewed);
    assert_eq!(taken, Ok(true));
    sim.pump();
    assert_eq!(
        routed(&sim, 0, 2),
        [cidr("198.19.0.2/32"), cidr("198.18.202.0/24")]
    );
    assert_eq!(
        mesh_of(&mut sim, 0).exit_node(),
        ExitNodeStatus::NoDefaultRoute {
            name: "node-2".into()
        }
    );
    // Node 1 leaves: its LAN is no longer routed.
    mesh_of(&mut sim, 1).leave();
    sim.pump();
    let routes = mesh_of(&mut sim, 0).member_routes();
    assert_eq!(routes, [cidr("198.18.202.0/24")]);
}
