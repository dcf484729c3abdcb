use super::*;

use proptest::prelude::*;

const AGING: Duration = Duration::from_secs(300);

fn table(capacity: usize) -> MacTable<u32> {
    MacTable::new(SwitchConfig {
        aging: AGING,
        capacity,
    })
}

fn mac(last: u8) -> MacAddress {
    MacAddress([0x02, 0, 0, 0, 0, last])
}

fn frame(destination: MacAddress, source: MacAddress) -> Vec<u8> {
    let mut frame = Vec::with_capacity(60);
    frame.extend_from_slice(&destination.0);
    frame.extend_from_slice(&source.0);
    frame.extend_from_slice(&[0x08, 0x00]);
    frame.resize(60, 0);
    frame
}

#[test]
fn unknown_destinations_flood_until_learned_behind_a_peer() {
    let start = Instant::now();
    let mut table = table(16);
    let (local, far) = (mac(1), mac(2));
    assert_eq!(table.from_local(start, &frame(far, local)), Forward::Flood);
    assert_eq!(table.lookup(start, local), Some(Port::Local));
    assert_eq!(table.from_peer(start, 7, &frame(local, far)), Ok(()));
    assert_eq!(
        table.from_local(start, &frame(far, local)),
        Forward::Unicast(7)
    );
    assert_eq!(table.counters().learned, 2);
}

#[test]
fn broadcast_and_multicast_always_flood() {
    let start = Instant::now();
    let mut table = table(16);
    let ipv6_all_nodes = MacAddress([0x33, 0x33, 0, 0, 0, 1]);
    for destination in [MacAddress::BROADCAST, ipv6_all_nodes] {
        assert_eq!(
            table.from_local(start, &frame(destination, mac(1))),
            Forward::Flood
        );
    }
}

#[test]
fn entries_age_out_unless_refreshed() {
    let start = Instant::now();
    let mut table = table(16);
    let (local, quiet, chatty) = (mac(1), mac(2), mac(3));
    table.from_peer(start, 1, &frame(local, quiet)).unwrap();
    table.from_peer(start, 2, &frame(local, chatty)).unwrap();
    let later = start + AGING / 2;
    table.from_peer(later, 2, &frame(local, chatty)).unwrap();
    let expired = start + AGING;
    assert_eq!(table.lookup(expired, quiet), None);
    assert_eq!(
        table.from_local(expired, &frame(quiet, local)),
        Forward::Flood
    );
    assert_eq!(
        table.from_local(expired, &frame(chatty, local)),
        Forward::Unicast(2)
    );
    assert_eq!(table.lookup(later + AGING, chatty), None);
}

#[test]
fn an_address_moves_to_the_peer_it_was_last_seen_behind() {
    let start = Instant::now();
    let mut table = table(16);
    let (local, roaming) = (mac(1), mac(2));
    table.from_peer(start, 1, &frame(local, roaming)).unwrap();
    table.from_peer(start, 2, &frame(local, roaming)).unwrap();
    assert_eq!(
        table.from_local(start, &frame(roaming, local)),
        Forward::Unicast(2)
    );
    assert_eq!(table.counters().moved, 1);
}

#[test]
fn peers_cannot_take_the_local_ports_addresses_while_they_live() {
    let start = Instant::now();
    let mut table = table(16);
    let (local, far) = (mac(1), mac(2));
    table.from_local(start, &frame(far, local));
    assert_eq!(
        table.from_peer(start, 3, &frame(far, local)),
        Err(FrameDrop::LocalSource)
    );
    assert_eq!(table.lookup(start, local), Some(Port::Local));
    // Once the local host has been quiet for the aging time, it may have
    // moved behind a peer.
    let later = start + AGING;
    assert_eq!(table.from_peer(later, 3, &frame(far, local)), Ok(()));
    assert_eq!(table.lookup(later, local), Some(Port::Peer(3)));
    // The local port takes it back at once.
    table.from_local(later, &frame(far, local));
    assert_eq!(table.lookup(later, local), Some(Port::Local));
}

#[test]
fn a_frame_to_the_local_port_never_goes_back_out() {
    let start = Instant::now();
    let mut table = table(16);
    table.from_local(start, &frame(mac(2), mac(1)));
    assert_eq!(
        table.from_local(start, &frame(mac(1), mac(2))),
        Forward::Drop(FrameDrop::LocalDestination)
    );
}

#[test]
fn bad_sources_and_short_frames_are_refused() {
    let start = Instant::now();
    let mut table = table(16);
    for source in [MacAddress::BROADCAST, MacAddress([0x01, 0, 0x5e, 0, 0, 1])] {
        assert_eq!(
            table.from_local(start, &frame(mac(2), source)),
            Forward::Drop(FrameDrop::InvalidSource)
        );
        assert_eq!(
            table.from_peer(start, 1, &frame(mac(2), source)),
            Err(FrameDrop::InvalidSource)
        );
    }
    assert_eq!(
        table.from_peer(start, 1, &frame(mac(2), MacAddress([0; 6]))),
        Err(FrameDrop::InvalidSource)
    );
    let short = &frame(mac(2), mac(3))[..ETHERNET_HEADER_LEN - 1];
    assert_eq!(
        table.from_local(start, short),
        Forward::Drop(FrameDrop::Truncated)
    );
    assert_eq!(table.from_peer(start, 1, short), Err(FrameDrop::Truncated));
    assert!(table.is_empty());
}

#[test]
fn a_full_table_keeps_what_it_learned_and_floods_the_rest() {
    let start = Instant::now();
    let mut table = table(4);
    for host in 1..=4 {
        table
            .from_peer(start, 1, &frame(mac(100), mac(host)))
            .unwrap();
    }
    // A spray of new sources: delivered, not learned, nothing evicted.
    for host in 5..=50 {
        assert_eq!(
            table.from_peer(start, 2, &frame(mac(100), mac(host))),
            Ok(())
        );
    }
    assert_eq!(table.len(), 4);
    assert_eq!(table.counters().not_learned_full, 46);
    assert_eq!(table.lookup(start, mac(1)), Some(Port::Peer(1)));
    assert_eq!(table.lookup(start, mac(5)), None);
    // Once they age out, new addresses get their room.
    let later = start + AGING;
    table
        .from_peer(later, 2, &frame(mac(100), mac(60)))
        .unwrap();
    assert_eq!(table.lookup(later, mac(60)), Some(Port::Peer(2)));
    assert_eq!(table.len(), 1, "the sweep dropped the aged entries");
}

#[test]
fn forgetting_a_peer_forgets_what_is_behind_it() {
    let start = Instant::now();
    let mut table = table(16);
    table.from_peer(start, 1, &frame(mac(100), mac(1))).unwrap();
    table.from_peer(start, 2, &frame(mac(100), mac(2))).unwrap();
    table.forget_peer(1);
    assert_eq!(table.lookup(start, mac(1)), None);
    assert_eq!(table.lookup(start, mac(2)), Some(Port::Peer(2)));
    assert_eq!(table.records.len(), table.len());
    table.clear();
    assert!(table.is_empty() && table.records.is_empty());
}

#[test]
fn frame_messages_carry_their_length_past_the_padding() {
    let frame = frame(MacAddress::BROADCAST, mac(1));
    let mut message = vec![0; FRAME_HEADER_LEN];
    assert!(write_frame_header(&mut message, frame.len()));
    message.extend_from_slice(&frame);
    message.resize(message.len().next_multiple_of(16) + 16, 0);
    assert!(is_frame_message(&message));
    let range = frame_range(&message).unwrap();
    assert_eq!(&message[range], &frame[..]);

    assert_eq!(frame_range(&message[..FRAME_HEADER_LEN + 10]), None);
    assert_eq!(frame_range(&message[..3]), None);
    let ping = crate::control::Control::Ping { nonce: 1 }.encode();
    assert!(!is_frame_message(&ping) && frame_range(&ping).is_none());
    assert!(!is_frame_message(&[0x45, 0, 0, 20]));
    assert!(!write_frame_header(&mut [0; 3], 10));
    assert!(!write_frame_header(&mut [0; 4], 70_000));
    assert!(
        crate::control::Control::decode(&message).is_err(),
        "a frame is never taken for control"
    );
}

#[test]
fn a_node_address_is_local_unicast_and_follows_its_key() {
    let key = |seed: u8| fjord_proto::PrivateKey::from_bytes([seed; 32]).public_key();
    for seed in 0..=255 {
        let address = MacAddress::for_node(&key(seed));
        assert!(address.is_valid_source(), "{address}");
        assert_eq!(address.0[0] & 0x02, 0x02, "locally administered");
    }
    assert_eq!(MacAddress::for_node(&key(1)), MacAddress::for_node(&key(1)));
    assert_ne!(MacAddress::for_node(&key(1)), MacAddress::for_node(&key(2)));
}

#[test]
fn addresses_print_as_colon_hex() {
    assert_eq!(mac(0xab).to_string(), "02:00:00:00:00:ab");
}

/// A table without bounds or sweeps, by the rules read literally.
#[derive(Default)]
struct NaiveTable {
    entries: Vec<(MacAddress, Port<u32>, Instant)>,
}

impl NaiveTable {
    fn lookup(&self, now: Instant, address: MacAddress) -> Option<Port<u32>> {
        self.entries
            .iter()
            .find(|(a, _, seen)| *a == address && now.duration_since(*seen) < AGING)
            .map(|(_, port, _)| *port)
    }

    fn learn(&mut self, now: Instant, address: MacAddress, port: Port<u32>) -> bool {
        if port != Port::Local && self.lookup(now, address) == Some(Port::Local) {
            return false;
        }
        self.entries.retain(|(a, _, _)| *a != address);
        self.entries.push((address, port, now));
        true
    }
}

proptest! {
    /// Frames from the local port and three peers among five addresses,
    /// with time passing: the table decides as the naive one does.
    #[test]
    fn matches_a_naive_table(
        steps in prop::collection::vec((0u8..4, 0u8..6, 0u8..6, 0u64..200), 1..200)
    ) {
        let start = Instant::now();
        let mut now = start;
        let mut table = table(1024);
        let mut naive = NaiveTable::default();
        for (from, destination, source, advance_secs) in steps {
            now += Duration::from_secs(advance_secs);
            // Address 0 is the broadcast address.
            let address = |n: u8| if n == 0 { MacAddress::BROADCAST } else { mac(n) };
            let (destination, source) = (address(destination), address(source));
            let frame = frame(destination, source);
            if from == 0 {
                let expected = if !source.is_valid_source() {
                    Forward::Drop(FrameDrop::InvalidSource)
                } else {
                    naive.learn(now, source, Port::Local);
                    match (destination.is_group(), naive.lookup(now, destination)) {
                        (true, _) | (false, None) => Forward::Flood,
                        (false, Some(Port::Peer(peer))) => Forward::Unicast(peer),
                        (false, Some(Port::Local)) => Forward::Drop(FrameDrop::LocalDestination),
                    }
                };
                prop_assert_eq!(table.from_local(now, &frame), expected);
            } else {
                let peer = u32::from(from);
                let expected = if !source.is_valid_source() {
                    Err(FrameDrop::InvalidSource)
                } else if naive.learn(now, source, Port::Peer(peer)) {
                    Ok(())
                } else {
                    Err(FrameDrop::LocalSource)
                };
                prop_assert_eq!(table.from_peer(now, peer, &frame), expected);
            }
            for n in 1..6 {
                prop_assert_eq!(table.lookup(now, mac(n)), naive.lookup(now, mac(n)));
            }
            prop_assert_eq!(table.records.len(), table.len());
        }
    }

    /// Whatever arrives, the table never holds more than its capacity and
    /// keeps one record per entry.
    #[test]
    fn stays_within_its_capacity(
        steps in prop::collection::vec((0u8..3, any::<u8>(), 0u64..100), 1..300)
    ) {
        let start = Instant::now();
        let mut now = start;
        let mut table = table(8);
        for (from, source, advance_secs) in steps {
            now += Duration::from_secs(advance_secs);
            let frame = frame(MacAddress::BROADCAST, mac(source));
            if from == 0 {
                table.from_local(now, &frame);
            } else {
                let _ = table.from_peer(now, u32::from(from), &frame);
            }
            if source % 17 == 0 {
                table.forget_peer(u32::from(from));
            }
            prop_assert!(table.len() <= 8);
            prop_assert_eq!(table.records.len(), table.len());
        }
    }
}
