//! Fuzz target body for switch mode (`fjord_mesh::switch`): the frame
//! message reader and the MAC table fed frames from the local port and
//! from peers that the fuzzer picks, with time passing and peers removed.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use fjord_mesh::switch::{
    self, FRAME_HEADER_LEN, Forward, MacAddress, MacTable, Port, SwitchConfig,
};

use crate::proto_targets::Input;

/// A small table, so the fuzzer reaches a full one.
const CAPACITY: usize = 16;
const AGING: Duration = Duration::from_secs(300);
/// Operations per input, so each run stays fast.
const MAX_OPERATIONS: usize = 512;

/// The first byte picks how the rest is read: as one frame message
/// (`frame_range` on arbitrary bytes: a frame it finds lies inside the
/// input and its header writes back the same), or as operations on a
/// [`MacTable`]:
///
/// | op % 4 | action |
/// |---|---|
/// | 0 | a frame from the local port (u8 length, then bytes) |
/// | 1 | a frame from one of four peers (u8 peer, u8 length, bytes) |
/// | 2 | time passes (u16 seconds) |
/// | 3 | a peer is removed |
///
/// After each: the table holds at most its capacity; a unicast goes to a
/// peer that has a frame accepted since it was last removed, and to the
/// port the table says the destination is behind; a frame from a peer
/// with a source the local port owns is refused. Must never panic.
pub fn switch_frames(data: &[u8]) {
    let mut input = Input(data);
    if input.u8() & 1 == 0 {
        check_frame_message(input.0);
        return;
    }
    let start = Instant::now();
    let mut now = start;
    let mut table: MacTable<u8> = MacTable::new(SwitchConfig {
        aging: AGING,
        capacity: CAPACITY,
    });
    let mut live_peers: HashSet<u8> = HashSet::new();
    for _ in 0..MAX_OPERATIONS {
        let Some(op) = input.byte() else { break };
        match op % 4 {
            0 => {
                let len = usize::from(input.u8());
                let frame = input.bytes(len);
                if let Forward::Unicast(peer) = table.from_local(now, frame) {
                    assert!(live_peers.contains(&peer), "unicast to removed peer {peer}");
                    let destination = destination(frame);
                    assert_eq!(table.lookup(now, destination), Some(Port::Peer(peer)));
                }
            }
            1 => {
                let peer = input.u8() % 4;
                let len = usize::from(input.u8());
                let frame = input.bytes(len);
                let local_source =
                    frame.len() >= 12 && table.lookup(now, source(frame)) == Some(Port::Local);
                let accepted = table.from_peer(now, peer, frame).is_ok();
                assert!(!(accepted && local_source), "a peer took a local address");
                if accepted {
                    live_peers.insert(peer);
                }
            }
            2 => now += Duration::from_secs(u64::from(input.u16())),
            _ => {
                let peer = input.u8() % 4;
                table.forget_peer(peer);
                live_peers.remove(&peer);
            }
        }
        assert!(table.len() <= CAPACITY);
    }
}

fn check_frame_message(bytes: &[u8]) {
    let Some(range) = switch::frame_range(bytes) else {
        return;
    };
    assert!(switch::is_frame_message(bytes));
    assert_eq!(
        fjord_proto::extension::recipient_of(bytes),
        Some(fjord_proto::extension::Recipient::Switch)
    );
    assert_eq!(range.start, FRAME_HEADER_LEN);
    assert!(range.end <= bytes.len());
    let mut header = [0u8; FRAME_HEADER_LEN];
    assert!(switch::write_frame_header(&mut header, range.len()));
    assert_eq!(header[..], bytes[..FRAME_HEADER_LEN]);
}

fn address(bytes: &[u8]) -> MacAddress {
    let mut address = [0u8; 6];
    address.copy_from_slice(&bytes[..6]);
    MacAddress(address)
}

/// The destination of a frame the table accepted (so at least a header).
fn destination(frame: &[u8]) -> MacAddress {
    address(frame)
}

fn source(frame: &[u8]) -> MacAddress {
    address(&frame[6..])
}
