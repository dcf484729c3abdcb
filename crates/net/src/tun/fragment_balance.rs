//! A datagram that the sender's kernel cut into two IPv4 fragments for the
//! tunnel's MTU leaves as two halves of one sealed length instead.
//!
//! The kernel cuts a 1,500-byte datagram into a full-size fragment and a
//! short one. Sealed, they differ in length, and a GSO send carries equal
//! lengths only (a shorter one ends it): each datagram took a send of its
//! own, with the per-send work (an skb, the route, the peer's socket queue
//! and its wakeup) for every one. Cut at the middle instead (the first
//! half a multiple of 8 bytes, as RFC 791 wants of every fragment but the
//! last), both halves pad to the same 16-byte multiple, and a run of such
//! datagrams is a run of equal datagrams: one GSO send, each datagram's
//! two fragments still next to each other and in order, which the
//! receiving side joins again ([`super::coalesce`]). Any receiver takes them:
//! where a datagram is cut is the sender's choice.

use super::ipv4_fragment::{Fragment, HEADER_LEN, MORE_FRAGMENTS, set_header};

/// Whether `packet` is the first fragment of an IPv4 datagram (no IP
/// options) with more to follow: the one read worth holding back until
/// the next one is read.
pub fn is_first_of_several(packet: &[u8]) -> bool {
    Fragment::parse(packet).is_some_and(|fragment| fragment.is_first_of_several())
}

/// If `last[..last_len]` is the last fragment of the datagram whose first
/// fragment is `first[..first_len]`, moves the tail of the first one's
/// data to the front of the last one's so that the two carry halves,
/// rewrites both headers, and returns their new lengths. `None` (nothing
/// changed) if it is not that fragment or the halves would not be shorter.
/// `last` must be at least `first_len` long.
pub fn balance(
    first: &mut [u8],
    first_len: usize,
    last: &mut [u8],
    last_len: usize,
) -> Option<(usize, usize)> {
    let first_fragment = Fragment::parse(&first[..first_len])?;
    let last_fragment = Fragment::parse(last.get(..last_len)?)?;
    let (first_data, last_data) = (first_fragment.data_len, last_fragment.data_len);
    let same_datagram = first_fragment.is_first_of_several()
        && !last_fragment.more
        && last_fragment.offset == first_data
        && last_fragment.key == first_fragment.key;
    let total = first_data + last_data;
    let half = total.div_ceil(2).next_multiple_of(8);
    if !same_datagram || half >= first_data || last.len() < HEADER_LEN + total - half {
        return None;
    }
    let moved = first_data - half;
    last.copy_within(HEADER_LEN..last_len, HEADER_LEN + moved);
    last[HEADER_LEN..HEADER_LEN + moved].copy_from_slice(&first[HEADER_LEN + half..first_len]);
    let first_len = HEADER_LEN + half;
    let last_len = HEADER_LEN + total - half;
    set_header(first, first_len, MORE_FRAGMENTS);
    set_header(last, last_len, (half / 8) as u16);
    Some((first_len, last_len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tun_rs::checksum;

    /// A datagram of `data` bytes after its header, cut as the kernel cuts
    /// it for `mtu`: (first fragment, last fragment).
    fn cut(data: usize, mtu: usize, id: u16) -> (Vec<u8>, Vec<u8>) {
        let body: Vec<u8> = (0..data).map(|i| (i * 7 + usize::from(id)) as u8).collect();
        let first_data = (mtu - HEADER_LEN) / 8 * 8;
        let build = |chunk: &[u8], field: u16| {
            let mut packet = vec![0x45, 0, 0, 0, (id >> 8) as u8, id as u8, 0, 0, 64, 17, 0, 0];
            packet.extend_from_slice(&[198, 19, 0, 1, 198, 19, 0, 2]);
            packet.extend_from_slice(chunk);
            set_header(&mut packet, HEADER_LEN + chunk.len(), field);
            packet
        };
        (
            build(&body[..first_data], MORE_FRAGMENTS),
            build(&body[first_data..], (first_data / 8) as u16),
        )
    }

    /// The datagram's data as a receiver puts it together.
    fn joined(first: &[u8], last: &[u8]) -> Vec<u8> {
        assert_eq!(checksum(&first[..HEADER_LEN], 0), 0xffff);
        assert_eq!(checksum(&last[..HEADER_LEN], 0), 0xffff);
        let offset = Fragment::parse(last).expect("a last fragment").offset;
        assert_eq!(
            offset,
            first.len() - HEADER_LEN,
            "the last one starts where the first ends"
        );
        [&first[HEADER_LEN..], &last[HEADER_LEN..]].concat()
    }

    #[test]
    fn a_1500_byte_datagram_is_cut_into_halves_that_pad_alike() {
        let (first, last) = cut(1480, 1420, 9);
        assert_eq!((first.len(), last.len()), (1420, 100));
        let whole = joined(&first, &last);
        let (mut a, mut b) = (first.clone(), last.clone());
        b.resize(1420, 0);
        let (a_len, b_len) = balance(&mut a, 1420, &mut b, 100).expect("balanced");
        assert_eq!((a_len, b_len), (764, 756));
        assert_eq!(
            a_len.next_multiple_of(16),
            b_len.next_multiple_of(16),
            "one sealed length"
        );
        assert_eq!(joined(&a[..a_len], &b[..b_len]), whole);
        assert!(is_first_of_several(&a[..a_len]));
        assert!(!is_first_of_several(&b[..b_len]));
    }

    #[test]
    fn only_the_last_fragment_of_the_same_datagram_is_balanced() {
        let (first, last) = cut(1480, 1420, 9);
        let (_, other) = cut(1480, 1420, 10);
        let mut middle = last.clone();
        let more_to_follow = u16::from_be_bytes([last[6], last[7]]) | MORE_FRAGMENTS;
        set_header(&mut middle, last.len(), more_to_follow);
        let mut options = last.clone();
        options[0] = 0x46;
        for candidate in [other, middle, options, first.clone()] {
            let (mut a, mut b) = (first.clone(), candidate.clone());
            let len = b.len();
            b.resize(1420, 0);
            assert_eq!(balance(&mut a, 1420, &mut b, len), None);
            assert_eq!(a, first, "nothing changed");
        }
        // Already about even: nothing to move.
        let (first, last) = cut(1410, 720, 3);
        let (mut a, mut b) = (first.clone(), last.clone());
        let len = b.len();
        b.resize(720, 0);
        assert_eq!(balance(&mut a, first.len(), &mut b, len), None);
    }

    #[test]
    fn uneven_datagrams_still_join_to_the_same_bytes() {
        for data in [1401, 1402, 1409, 1480, 2000, 2776] {
            let (first, last) = cut(data, 1420, 1);
            let whole = joined(&first, &last);
            let (mut a, mut b) = (first.clone(), last.clone());
            let (first_len, last_len) = (a.len(), b.len());
            b.resize(1420, 0);
            if let Some((a_len, b_len)) = balance(&mut a, first_len, &mut b, last_len) {
                assert_eq!((a_len - HEADER_LEN) % 8, 0);
                assert!(b_len <= a_len);
                assert_eq!(joined(&a[..a_len], &b[..b_len]), whole, "{data} bytes");
            }
        }
    }
}
