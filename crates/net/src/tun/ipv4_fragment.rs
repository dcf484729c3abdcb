//! The IPv4 fragment fields (RFC 791) that both sides of fjord's fragment
//! handling read and write: the receiving side joins fragments
//! (`coalesce`), the sending side re-cuts them (`fragment_balance`).

use tun_rs::checksum;

/// An IPv4 header without options, the only kind either side touches.
pub const HEADER_LEN: usize = 20;
pub const MORE_FRAGMENTS: u16 = 0x2000;
const OFFSET_UNITS: u16 = 0x1fff;
/// The reserved bit and Don't Fragment: kept when a header is rewritten.
const FLAGS: u16 = 0xc000;

/// What RFC 791 matches fragments by: identification, protocol and the
/// two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DatagramKey([u8; 11]);

/// The fragment fields of an IPv4 packet that is one.
#[derive(Debug, Clone, Copy)]
pub struct Fragment {
    pub key: DatagramKey,
    /// Where this fragment's data begins in the datagram's data.
    pub offset: usize,
    pub more: bool,
    /// Bytes after the IP header.
    pub data_len: usize,
    /// The reserved and Don't Fragment bits.
    flags: u16,
}

impl Fragment {
    /// The fragment in `packet`, if it is an IPv4 fragment either side
    /// handles: no IP options, a total length that matches, and data a
    /// multiple of 8 bytes in all but the last (as RFC 791 requires).
    pub fn parse(packet: &[u8]) -> Option<Fragment> {
        let header = packet.get(..HEADER_LEN)?;
        if header[0] != 0x45
            || usize::from(u16::from_be_bytes([header[2], header[3]])) != packet.len()
        {
            return None;
        }
        let field = u16::from_be_bytes([header[6], header[7]]);
        let offset = usize::from(field & OFFSET_UNITS) * 8;
        let more = field & MORE_FRAGMENTS != 0;
        let data_len = packet.len() - HEADER_LEN;
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
            flags: field & FLAGS,
        })
    }

    /// The first fragment of a datagram with more to follow, and no other
    /// flag set.
    pub fn is_first_of_several(&self) -> bool {
        self.more && self.offset == 0 && self.flags == 0
    }
}

/// Sets an IPv4 header's total length and whole fragment field, and its
/// checksum.
pub fn set_header(header: &mut [u8], total_len: usize, fragment_field: u16) {
    header[2..4].copy_from_slice(&(total_len as u16).to_be_bytes());
    header[6..8].copy_from_slice(&fragment_field.to_be_bytes());
    header[10..12].copy_from_slice(&[0, 0]);
    let header_checksum = !checksum(&header[..HEADER_LEN], 0);
    header[10..12].copy_from_slice(&header_checksum.to_be_bytes());
}

/// Makes an IPv4 header that of a whole datagram of `total_len` bytes: no
/// more fragments, offset 0, Don't Fragment and the reserved bit kept.
pub fn set_whole_header(header: &mut [u8], total_len: usize) {
    let flags = u16::from_be_bytes([header[6], header[7]]) & FLAGS;
    set_header(header, total_len, flags);
}
