//! A bootstrap list changed by a reload (issue 45).

use super::*;

fn entry(index: u16) -> Bootstrap {
    Bootstrap {
        key: key(index).public_key(),
        endpoint: Sim::address(index),
    }
}

#[test]
fn a_node_whose_bootstrap_member_is_wrong_joins_once_the_list_is_fixed() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    sim.join(2, Some(0));
    // Node 9 never comes up: node 1's Hello goes nowhere.
    let newcomer = sim.join(1, Some(9));
    sim.advance(Duration::from_secs(30));
    assert!(!sim.nodes[&newcomer].mesh.is_member(&first));

    let change = sim
        .nodes
        .get_mut(&newcomer)
        .unwrap()
        .mesh
        .set_bootstrap(vec![entry(0)]);
    assert_eq!(
        change,
        BootstrapChange {
            added: 1,
            removed: 1,
            moved: 0
        }
    );
    sim.pump();
    sim.advance(Duration::from_secs(5));
    assert!(sim.converged());
    // The member it never met is gone with its peer.
    assert!(
        !sim.nodes[&newcomer]
            .peers
            .contains_key(&key(9).public_key())
    );
}

#[test]
fn a_member_taken_off_the_list_keeps_its_session() {
    let mut sim = Sim::new();
    let first = sim.join(0, None);
    let other = sim.join(1, Some(0));
    sim.advance(Duration::from_secs(5));
    assert!(sim.converged());

    let node = sim.nodes.get_mut(&other).unwrap();
    let change = node.mesh.set_bootstrap(Vec::new());
    assert_eq!(change.removed, 1);
    sim.pump();
    let node = &sim.nodes[&other];
    assert!(node.mesh.is_member(&first));
    assert!(node.sessions.contains(&first));
    assert!(node.peers.get(&first).is_some_and(|a| !a.is_empty()));
    sim.advance(Duration::from_secs(60));
    assert!(sim.converged());
}

#[test]
fn an_unmet_bootstrap_member_that_moved_is_dialled_at_its_new_endpoint() {
    let mut sim = Sim::new();
    let newcomer = sim.join(1, Some(9));
    let moved = Bootstrap {
        key: key(9).public_key(),
        endpoint: SocketAddr::from(([198, 18, 9, 99], 51820)),
    };
    let node = sim.nodes.get_mut(&newcomer).unwrap();
    let change = node.mesh.set_bootstrap(vec![moved]);
    assert_eq!(change.moved, 1);
    // Unchanged, it is left alone.
    assert!(node.mesh.set_bootstrap(vec![moved]).is_empty());
    sim.pump();
    assert!(
        sim.connected
            .contains(&(newcomer, moved.key, vec![moved.endpoint]))
    );
}

#[test]
fn a_member_started_before_its_bootstrap_member_dials_it_again_each_second() {
    let mut sim = Sim::new();
    // Node 0, its bootstrap member, is not up yet.
    let newcomer = sim.join(1, Some(0));
    let bootstrap = entry(0);
    let dialled = |sim: &Sim| {
        sim.connected
            .iter()
            .filter(|(from, to, _)| *from == newcomer && *to == bootstrap.key)
            .count()
    };
    sim.advance(Duration::from_millis(1500));
    assert_eq!(dialled(&sim), 1, "dialled again after a second");
    // Then the bootstrap member comes up and the next dial meets it, well
    // before WireGuard's own retry (5 s).
    let first = sim.join(0, None);
    sim.advance(Duration::from_secs(1));
    assert!(sim.nodes[&newcomer].mesh.is_member(&first));
    let after_meeting = dialled(&sim);
    sim.advance(Duration::from_secs(10));
    assert_eq!(
        dialled(&sim),
        after_meeting,
        "no dial once a member is known"
    );
}

#[test]
fn a_bootstrap_member_that_never_comes_is_dialled_a_bounded_number_of_times() {
    let mut sim = Sim::new();
    let newcomer = sim.join(1, Some(9));
    sim.advance(Duration::from_secs(60));
    let redials = sim
        .connected
        .iter()
        .filter(|(from, to, _)| *from == newcomer && *to == key(9).public_key())
        .count();
    assert_eq!(redials, usize::from(crate::membership::redial::REDIALS));
}
