//! IPv4 fragments joined within one receive batch, so that a datagram
//! larger than the tunnel's MTU reaches the kernel as one packet (and a
//! run of them as one UDP super-packet) instead of as fragments that the
//! kernel takes one write each and then queues, matches and joins itself.
//!
//! Only the plain case is taken: the fragments of one datagram in order,
//! each starting where the one before ended, no IP options, the whole
//! datagram inside the batch. Anything else (a gap, an overlap, a
//! duplicate, fragments out of order, a datagram not finished when the
//! batch is written) leaves every fragment of that datagram as it came,
//! for the kernel to reassemble as it always has. Nothing is kept from one
//! batch to the next: no timeout to run, and no memory for a peer to fill.

pub(super) const IPV4_HEADER_LEN: usize = 20;
/// Datagrams being joined at once; the oldest is given up for a newer one.
pub(super) const PENDING_DATAGRAMS: usize = 8;

const MORE_FRAGMENTS: u16 = 0x2000;
const OFFSET_UNITS: u16 = 0x1fff;
const PROTO_UDP: u8 = 17;

/// What RFC 791 matches fragments by: identification, protocol and the
/// two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DatagramKey([u8; 11]);

/// The fragment fields of an IPv4 packet that is one.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fragment {
    pub key: DatagramKey,
    /// Where this fragment's data begins in the datagram's data.
    pub offset: usize,
    pub more: bool,
    /// Bytes after the IP header.
    pub data_len: usize,
}

impl Fragment {
    /// The fragment in `packet`, if it is an IPv4 fragment this module
    /// joins: no IP options, a total length that matches, and data a
    /// multiple of 8 bytes in all but the last (as RFC 791 requires).
    pub fn parse(packet: &[u8]) -> Option<Fragment> {
        let header = packet.get(..IPV4_HEADER_LEN)?;
        if header[0] != 0x45
            || usize::from(u16::from_be_bytes([header[2], header[3]])) != packet.len()
        {
            return None;
        }
        let field = u16::from_be_bytes([header[6], header[7]]);
        let offset = usize::from(field & OFFSET_UNITS) * 8;
        let more = field & MORE_FRAGMENTS != 0;
        let data_len = packet.len() - IPV4_HEADER_LEN;
        if !more && offset == 0 || more && (data_len == 0 || !data_len.is_multiple_of(8)) {
            return None;
        }
        let mut key = [0; 11];
        key[..2].copy_from_slice(&header[4..6]);
        key[2] = header[9];
        key[3..].copy_from_slice(&header[12..20]);
        Some(Fragment {
            key: DatagramKey(key),
            offset,
            more,
            data_len,
        })
    }
}

/// A datagram whose first fragments have come in this batch.
#[derive(Debug, Clone, Copy)]
pub(super) struct Pending {
    pub key: DatagramKey,
    /// Its placeholder among the coalescer's groups, which holds the
    /// fragments so far.
    pub group: usize,
    /// Data bytes so far: where the next fragment must begin.
    pub next_offset: usize,
}

/// Payload bytes of the UDP datagram whose first fragment is `first` and
/// whose IPv4 total length, joined, is `total_len`; `None` if it is no
/// UDP datagram that could merge (another protocol, a UDP length that
/// disagrees, no payload).
pub(super) fn udp_payload_len(first: &[u8], total_len: usize) -> Option<usize> {
    if first.get(9) != Some(&PROTO_UDP) {
        return None;
    }
    let udp = first.get(IPV4_HEADER_LEN..IPV4_HEADER_LEN + 8)?;
    let length = usize::from(u16::from_be_bytes([udp[4], udp[5]]));
    (length == total_len - IPV4_HEADER_LEN && length > 8).then(|| length - 8)
}

/// Makes the first fragment's IPv4 header the header of the whole
/// datagram: its total length, no fragment fields, the header checksum.
pub(super) fn finish_header(first: &mut [u8], total_len: usize) {
    first[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
    clear_fragment_fields(first);
    first[10..12].copy_from_slice(&[0, 0]);
    let header_checksum = !tun_rs::checksum(&first[..IPV4_HEADER_LEN], 0);
    first[10..12].copy_from_slice(&header_checksum.to_be_bytes());
}

/// Clears "more fragments" and the offset; keeps DF and the reserved bit.
pub(super) fn clear_fragment_fields(header: &mut [u8]) {
    header[6] &= 0xc0;
    header[7] = 0;
}
