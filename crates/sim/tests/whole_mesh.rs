//! Whole meshes of real nodes on the simulated network, at a size CI
//! runs in seconds: what a user of the mesh would check, not how fast.

use std::time::Duration;

use fjord_sim::{LinkConfig, Partition, ScenarioConfig, Sessions, Sim, SimConfig, scenario};

fn config(seed: u64) -> SimConfig {
    SimConfig::new(seed, LinkConfig::default())
}

/// Whether every two members of `members` know each other with a session.
fn full_mesh(sim: &Sim, members: &[usize]) -> bool {
    members.iter().all(|at| {
        members
            .iter()
            .all(|other| at == other || sim.knows_with_session(*at, *other))
    })
}

#[test]
fn thirty_members_joined_through_one_meet_each_other_and_a_revocation_reaches_all() {
    let mut config = ScenarioConfig::new(30, config(7));
    config.settle = Duration::from_secs(10);
    config.rest = Duration::from_secs(30);
    let (report, mut sim) = scenario::run(&config);

    assert!(report.full_mesh.is_some(), "no full mesh: {report:?}");
    assert!(report.newcomer.known_by_all.is_some(), "{report:?}");
    assert!(report.newcomer.met_by_all.is_some(), "{report:?}");
    assert!(report.first_packet.since_first_send.is_some(), "{report:?}");
    assert!(
        report.revocation.is_some(),
        "the revocation stopped: {report:?}"
    );
    assert_eq!(report.false_evictions, 0, "members removed while alive");

    // The revoked member is the only one missing anywhere; the rest, the
    // two newcomers included, are a full mesh (the last newcomer's first
    // packet ended its step before it had met everyone).
    sim.run_for(Duration::from_secs(10));
    let revoked: Vec<usize> = (0..sim.members.len())
        .filter(|m| (0..sim.members.len()).all(|at| at == *m || !sim.knows(at, *m)))
        .collect();
    assert_eq!(revoked.len(), 1, "exactly one member revoked");
    let alive: Vec<usize> = (0..sim.members.len())
        .filter(|m| *m != revoked[0])
        .collect();
    assert!(full_mesh(&sim, &alive));
    // At rest the mesh talks only to itself: no user data was counted.
    assert_eq!(report.rest_traffic.data.datagrams, 0);
    assert!(report.rest_traffic.control.bytes > 0);
}

#[test]
fn a_seed_replays_the_same_run() {
    let mut config = ScenarioConfig::new(6, config(3));
    config.settle = Duration::from_secs(5);
    config.rest = Duration::from_secs(20);
    let (first, _) = scenario::run(&config);
    let (second, _) = scenario::run(&config);
    assert_eq!(first.table_row(), second.table_row());
    assert_eq!(first.events, second.events);
    assert_eq!(first.rest_traffic, second.rest_traffic);
}

#[test]
fn members_behind_nats_and_five_percent_loss_still_make_a_full_mesh() {
    let mut sim = Sim::new(SimConfig::new(
        11,
        LinkConfig {
            loss: 0.05,
            nat_fraction: 0.4,
            ..LinkConfig::default()
        },
    ));
    sim.start_member(None);
    for _ in 1..12 {
        sim.run_for(Duration::from_millis(20));
        sim.start_member(Some(0));
    }
    assert!(sim.members.iter().any(|m| m.behind_nat));
    sim.run_for(Duration::from_secs(60));
    let everyone: Vec<usize> = (0..sim.members.len()).collect();
    assert!(full_mesh(&sim, &everyone));
}

#[test]
fn a_partition_shorter_than_the_member_timeout_evicts_nobody() {
    let mut sim = Sim::new(config(5));
    sim.start_member(None);
    for _ in 1..10 {
        sim.run_for(Duration::from_millis(20));
        sim.start_member(Some(0));
    }
    sim.run_for(Duration::from_secs(10));
    let everyone: Vec<usize> = (0..sim.members.len()).collect();
    assert!(full_mesh(&sim, &everyone));

    // Three members lose the rest for a minute, then come back.
    let cut_off = [2, 5, 7];
    let until = sim.now() + Duration::from_secs(60);
    sim.network.partition(Partition {
        side: (0..sim.members.len())
            .map(|m| cut_off.contains(&m))
            .collect(),
        until,
    });
    sim.run_for(Duration::from_secs(90));
    let removed: u64 = sim
        .members
        .iter()
        .map(|m| m.node.mesh().unwrap().counters().members_removed)
        .sum();
    assert_eq!(removed, 0);
    assert!(full_mesh(&sim, &everyone));
}

/// A mesh past its eager threshold: 48 members, all meet all up to 8,
/// idle sessions close after 10 s.
fn on_demand_config(seed: u64) -> SimConfig {
    let mut config = config(seed);
    config.sessions = Sessions {
        eager: 8,
        idle_timeout: Duration::from_secs(10),
    };
    config
}

#[test]
fn past_the_eager_threshold_members_know_all_but_keep_few_sessions_and_meet_on_demand() {
    let mut config = ScenarioConfig::new(48, on_demand_config(13));
    config.rest = Duration::from_secs(30);
    let (report, mut sim) = scenario::run(&config);

    assert!(report.on_demand, "{report:?}");
    assert!(report.full_mesh.is_some(), "not all know all: {report:?}");
    assert!(report.newcomer.known_by_all.is_some(), "{report:?}");
    // A packet to a member never spoken to arrives, the newcomer's as
    // well as one between members at rest.
    assert!(report.first_packet.since_first_send.is_some(), "{report:?}");
    assert!(report.first_contact.is_some(), "{report:?}");
    assert!(report.revocation.is_some(), "{report:?}");
    assert_eq!(report.false_evictions, 0, "members removed while alive");
    // Far fewer sessions than members: the bootstrap member, four gossip
    // partners, and the members that joined through it for member 0.
    assert!(
        report.sessions_per_member < 12.0,
        "{} sessions per member",
        report.sessions_per_member
    );

    // Every member still lists every other (the revoked one aside), and
    // the session opened for the first contact closes once idle.
    let count = sim.members.len();
    let with_sessions = |sim: &Sim| {
        (0..count)
            .flat_map(|a| (0..count).map(move |b| (a, b)))
            .filter(|(a, b)| a != b && sim.in_session(*a, *b))
            .count()
    };
    let busy = with_sessions(&sim);
    sim.run_for(Duration::from_secs(20));
    assert!(with_sessions(&sim) < busy, "no idle session closed");
    let closed: u64 = sim
        .members
        .iter()
        .filter_map(|m| m.node.mesh())
        .map(|mesh| mesh.counters().sessions_idle_closed)
        .sum();
    assert!(closed > 0);
}

#[test]
fn a_packet_between_members_that_never_spoke_opens_a_session_that_closes_when_idle() {
    let mut sim = Sim::new(on_demand_config(17));
    sim.start_member(None);
    for _ in 1..24 {
        sim.run_for(Duration::from_millis(20));
        sim.start_member(Some(0));
    }
    // Long enough for the sessions of the small mesh to close.
    sim.run_for(Duration::from_secs(30));
    let (a, b) = (1..24)
        .flat_map(|a| (1..24).map(move |b| (a, b)))
        .find(|(a, b)| a != b && sim.knows(*a, *b) && !sim.in_session(*a, *b))
        .expect("a pair that never spoke");
    sim.send_packet(a, b);
    sim.run_for(Duration::from_secs(2));
    let source = sim.members[a].identity.overlay;
    assert!(
        sim.members[b]
            .received
            .iter()
            .any(|(from, _)| *from == source),
        "the first packet arrived"
    );
    assert!(sim.in_session(a, b) && sim.in_session(b, a));
    sim.run_for(Duration::from_secs(20));
    assert!(
        !sim.in_session(a, b) && !sim.in_session(b, a),
        "idle, closed"
    );
    assert!(sim.knows(a, b) && sim.knows(b, a), "still members");
}
