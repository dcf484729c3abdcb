use super::*;

/// A peer id for slot `index`, as a device hands them out.
fn peer(index: u8) -> PeerId {
    crate::test_support::peer_ids(index + 1)[usize::from(index)]
}

/// A path that carries datagrams up to `mtu` bytes, probed through
/// `table`; `lose` may drop probes by id on top of that.
struct Network {
    table: PathMtuTable,
    now: Instant,
    mtu: usize,
    family: Family,
    lose: Box<dyn FnMut(u32) -> bool>,
    limits: Vec<Option<usize>>,
}

impl Network {
    fn new(family: Family, tunnel_mtu: usize, path_mtu: usize) -> Self {
        Self {
            table: PathMtuTable::new(tunnel_mtu),
            now: Instant::now(),
            mtu: path_mtu,
            family,
            lose: Box::new(|_| false),
            limits: Vec::new(),
        }
    }

    /// Delivers the probes waiting (acks come back at once) and notes
    /// limit changes.
    fn exchange(&mut self) -> usize {
        let mut sent = 0;
        while let Some(probe) = self.table.poll_probe() {
            sent += 1;
            let fits = probe.plaintext_bytes + self.family.overhead() <= self.mtu;
            if fits && !(self.lose)(probe.id) {
                self.table.handle_ack(self.now, probe.peer, probe.id);
            }
        }
        while let Some((_, limit)) = self.table.poll_change() {
            self.limits.push(limit);
        }
        sent
    }

    /// Runs timers and exchanges for `duration` of simulated time.
    fn run_for(&mut self, duration: Duration) {
        let end = self.now + duration;
        loop {
            self.exchange();
            let Some(next) = self.table.poll_timeout() else {
                break;
            };
            if next > end {
                break;
            }
            self.now = self.now.max(next);
            self.table.handle_timeout(self.now);
        }
        self.now = end;
    }
}

#[test]
fn a_1280_byte_ipv4_path_settles_at_1276_within_a_few_seconds() {
    let mut net = Network::new(Family::V4, 1420, 1280);
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1276));
    assert_eq!(net.limits, vec![Some(1216)], "one change: 1276 - 60");
    // Settled in a few rounds of at most 8 probes: the counter says how many.
    assert!(
        net.table.counters().probes_sent <= 24,
        "{:?}",
        net.table.counters()
    );
}

#[test]
fn a_full_path_settles_at_the_ceiling_in_one_round() {
    let mut net = Network::new(Family::V4, 1420, 1500);
    net.table.track(net.now, peer(0), Family::V4);
    net.table.handle_timeout(net.now);
    net.exchange();
    assert_eq!(
        net.table.path_mtu(peer(0)),
        Some(1480),
        "20 + 8 + 32 + 1420"
    );
    assert_eq!(net.limits, vec![Some(1420)]);
}

#[test]
fn ipv6_paths_count_a_40_byte_header() {
    let mut net = Network::new(Family::V6, 1420, 1280);
    net.table.track(net.now, peer(0), Family::V6);
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1280));
    assert_eq!(net.limits, vec![Some(1200)]);
}

#[test]
fn sizes_between_probe_sizes_are_found() {
    for path_mtu in [1300, 1333, 1400, 1459, 1479] {
        let mut net = Network::new(Family::V4, 1420, path_mtu);
        net.table.track(net.now, peer(0), Family::V4);
        net.run_for(Duration::from_secs(6));
        let found = net.table.path_mtu(peer(0)).expect("settled");
        assert!(found <= path_mtu, "{found} > {path_mtu}");
        assert!(found + 16 > path_mtu, "{found} for {path_mtu}");
        assert_eq!((found - 60) % 16, 0);
    }
}

#[test]
fn one_lost_copy_of_a_probe_does_not_lower_the_result() {
    let mut net = Network::new(Family::V4, 1420, 1500);
    let mut seen = 0;
    // The first copy of every size is lost.
    net.lose = Box::new(move |_| {
        seen += 1;
        seen % 2 == 1
    });
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(3));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1480));
}

#[test]
fn a_path_that_shrinks_is_noticed_at_the_next_confirmation() {
    let mut net = Network::new(Family::V4, 1420, 1500);
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1480));
    net.mtu = 1350;
    net.run_for(CONFIRM_INTERVAL + Duration::from_secs(5));
    let found = net.table.path_mtu(peer(0)).unwrap();
    assert!((1335..=1350).contains(&found), "{found}");
    assert_eq!(net.table.counters().black_holes, 1);
    // Straight to the base on the black hole, then up to what fits.
    assert_eq!(net.limits, vec![Some(1420), Some(1216), Some(found - 60)]);
}

#[test]
fn a_path_that_grows_back_is_raised_at_the_next_confirmation() {
    let mut net = Network::new(Family::V4, 1420, 1280);
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(5));
    net.mtu = 1500;
    net.run_for(CONFIRM_INTERVAL);
    assert_eq!(net.table.path_mtu(peer(0)), Some(1480));
}

#[test]
fn a_silent_member_gets_no_limit_and_few_probes() {
    let mut net = Network::new(Family::V4, 1420, 1500);
    net.lose = Box::new(|_| true);
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(60));
    assert_eq!(net.table.path_mtu(peer(0)), None);
    assert!(net.limits.is_empty());
    // Three rounds, a pause, three more: never a probe storm.
    assert!(
        net.table.counters().probes_sent <= 2 * 3 * 8,
        "{:?}",
        net.table.counters()
    );
}

#[test]
fn a_new_endpoint_is_searched_again_and_a_forgotten_peer_is_not_probed() {
    let mut net = Network::new(Family::V4, 1420, 1280);
    net.table.track(net.now, peer(0), Family::V4);
    net.table.track(net.now, peer(1), Family::V4);
    net.run_for(Duration::from_secs(5));
    net.mtu = 1500;
    net.table.path_changed(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1480));
    assert_eq!(net.table.path_mtu(peer(1)), Some(1276), "not confirmed yet");
    net.table.forget(peer(0));
    net.table.forget(peer(1));
    let before = net.table.counters().probes_sent;
    net.run_for(CONFIRM_INTERVAL * 3);
    assert_eq!(net.table.counters().probes_sent, before);
    assert!(!net.table.is_tracked(peer(0)));
}

#[test]
fn a_changed_tunnel_mtu_moves_the_ceiling() {
    let mut net = Network::new(Family::V4, 1420, 9000);
    net.table.track(net.now, peer(0), Family::V4);
    net.run_for(Duration::from_secs(2));
    assert_eq!(net.table.path_mtu(peer(0)), Some(1480));
    net.table.set_tunnel_mtu(net.now, 8000);
    net.run_for(Duration::from_secs(5));
    assert_eq!(net.table.path_mtu(peer(0)), Some(8060));
}

#[test]
fn spread_keeps_both_ends() {
    assert_eq!(spread(&[1, 2, 3], 4), vec![1, 2, 3]);
    let picked = spread(&(0..15).collect::<Vec<_>>(), 4);
    assert_eq!(picked.first(), Some(&0));
    assert_eq!(picked.last(), Some(&14));
    assert_eq!(picked.len(), 4);
}
