//! Fuzz bodies for `fjord-net`'s pure parts.

use fjord_net::tun::coalesce::Coalescer;

/// The TUN write coalescer over arbitrary packets (a peer decides what it
/// sends us, so every header is hostile). Input: one flag byte (bit 0:
/// merge UDP), then packets as a little-endian `u16` length and the bytes.
/// Every packet must leave in exactly one write.
pub fn tun_coalesce(data: &[u8]) {
    let Some((&flags, mut rest)) = data.split_first() else {
        return;
    };
    let mut buffer = Vec::with_capacity(data.len());
    let mut ranges = Vec::new();
    while rest.len() >= 2 {
        let len = usize::from(u16::from_le_bytes([rest[0], rest[1]])).min(rest.len() - 2);
        ranges.push(buffer.len()..buffer.len() + len);
        buffer.extend_from_slice(&rest[2..2 + len]);
        rest = &rest[2 + len..];
    }
    let mut coalescer = Coalescer::new(true, flags & 1 != 0);
    for range in &ranges {
        if !coalescer.has_room() {
            break;
        }
        coalescer.push(&buffer, range.clone());
    }
    coalescer.finish(&mut buffer);
    let mut carried = 0;
    for write in coalescer.writes() {
        let payload_bytes: usize = write.payloads.map(|range| range.len()).sum();
        assert!(write.first.len() + payload_bytes <= 65_535 || write.packets == 1);
        carried += write.packets;
    }
    assert_eq!(
        carried,
        ranges.len().min(fjord_net::tun::coalesce::BATCH_PACKETS)
    );
}
