//! Reading the TUN device into slots of the caller's area.
//!
//! With offload, a read is a virtio-net header and either one packet or a
//! super-packet. A lone packet (every packet of a ping, a flood of small
//! datagrams) is read straight into its slot: `readv` puts the header in
//! the slot's headroom and the packet at `offset`, and only what overflows
//! the slot goes on into `scratch`. Only a super-packet does, and is cut
//! from there into as many slots as it has segments.
//!
//! tun-rs's `recv_multiple` read every packet into `scratch` and copied it
//! into its slot, and its caller had to hand it a slot for each of the
//! batch's 128 packets: at one packet a read, those slices and their
//! checks were most of the instructions of a read (callgrind: 2,700 of
//! the 13,300 a ping took on one tunnel end).

use std::io::{self, IoSliceMut};

use tun_rs::{VIRTIO_NET_HDR_LEN, VirtioNetHdr, checksum};

use super::{IDEAL_BATCH_SIZE, TunReadError};

const VIRTIO_NET_HDR_F_NEEDS_CSUM: u8 = 1;
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_TCPV4: u8 = 1;
const VIRTIO_NET_HDR_GSO_TCPV6: u8 = 4;
const VIRTIO_NET_HDR_GSO_UDP_L4: u8 = 5;
/// Set beside a TCP GSO type when the segments carry ECN's CWR.
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

/// Where one read lands: slot `i` is `area[i * stride..][..stride]`, its
/// packet at `offset` in it.
pub struct Slots<'a> {
    pub area: &'a mut [u8],
    pub stride: usize,
    pub offset: usize,
}

impl Slots<'_> {
    fn count(&self) -> usize {
        self.area.len().checked_div(self.stride).unwrap_or(0)
    }

    /// Bytes a packet may take in a slot.
    fn room(&self) -> usize {
        self.stride.saturating_sub(self.offset)
    }
}

/// One read with offload on: see the module documentation. `recv` is the
/// device's `readv`.
pub fn read_offloaded(
    recv: impl FnOnce(&mut [IoSliceMut<'_>]) -> io::Result<usize>,
    scratch: &mut [u8],
    slots: Slots<'_>,
    sizes: &mut [usize],
) -> Result<usize, TunReadError> {
    if slots.count() == 0 || sizes.is_empty() || slots.offset > slots.stride {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "no slot to read into").into());
    }
    let Some(header_at) = slots.offset.checked_sub(VIRTIO_NET_HDR_LEN) else {
        // No headroom for the header: every read goes through `scratch`.
        let read = recv(&mut [IoSliceMut::new(scratch)])?;
        return place(&mut scratch[..read], slots, sizes);
    };
    let in_slot = slots.stride - header_at;
    // A slot as large as the largest read (the 64 KiB slots taken when the
    // MTU grew unseen) leaves nothing to overflow: the second piece is
    // empty. Refusing such a slot, as this once did, made every read fail
    // before its system call, and the worker spun on a TUN it never read.
    let overflow_at = in_slot.min(scratch.len());
    let overflow = &mut scratch[overflow_at..];
    let first = &mut slots.area[header_at..slots.stride];
    let read = recv(&mut [IoSliceMut::new(first), IoSliceMut::new(overflow)])?;
    if read <= in_slot {
        if let Some(len) = lone_in_place(&mut first[..read])? {
            sizes[0] = len;
            return Ok(1);
        }
        let Some(whole) = scratch.get_mut(..read) else {
            return Err(invalid("super-packet longer than the scratch buffer"));
        };
        whole.copy_from_slice(&first[..read]);
    } else {
        // A super-packet (or a packet longer than the MTU we know): its
        // start is still in the slot.
        scratch[..in_slot].copy_from_slice(first);
    }
    place(&mut scratch[..read], slots, sizes)
}

/// A read that is one packet, completed where it lies: its length, or
/// `None` for a super-packet.
fn lone_in_place(read: &mut [u8]) -> Result<Option<usize>, TunReadError> {
    let (header, packet) = split_header(read)?;
    if header.gso_type != VIRTIO_NET_HDR_GSO_NONE {
        return Ok(None);
    }
    finish_lone(&header, packet).map(Some)
}

/// Completes a lone packet's checksum if the kernel left it to us; its
/// length.
fn finish_lone(header: &VirtioNetHdr, packet: &mut [u8]) -> Result<usize, TunReadError> {
    if header.flags & VIRTIO_NET_HDR_F_NEEDS_CSUM != 0 {
        complete_checksum(packet, header.csum_start, header.csum_offset)?;
    }
    Ok(packet.len())
}

/// Places a whole read (header and packet) held in one buffer: a lone
/// packet into the first slot, a super-packet cut into as many slots as
/// it needs.
fn place(read: &mut [u8], slots: Slots<'_>, sizes: &mut [usize]) -> Result<usize, TunReadError> {
    let room = slots.room();
    let (header, packet) = split_header(read)?;
    if header.gso_type == VIRTIO_NET_HDR_GSO_NONE {
        if packet.len() > room {
            return Err(TunReadError::PacketTooLong {
                len: packet.len(),
                room,
            });
        }
        sizes[0] = finish_lone(&header, packet)?;
        slots.area[slots.offset..][..packet.len()].copy_from_slice(packet);
        return Ok(1);
    }
    let header = with_parsed_header_len(header, packet)?;
    let is_v6 = match packet.first().map(|byte| byte >> 4) {
        Some(4) => false,
        Some(6) => true,
        _ => return Err(invalid("super-packet is neither IPv4 nor IPv6")),
    };
    let count = slots.count().min(sizes.len()).min(IDEAL_BATCH_SIZE);
    let mut chunks = slots.area.chunks_exact_mut(slots.stride);
    let mut out: [&mut [u8]; IDEAL_BATCH_SIZE] =
        std::array::from_fn(|_| chunks.next().unwrap_or_default());
    tun_rs::gso_split(
        packet,
        header,
        &mut out[..count],
        &mut sizes[..count],
        slots.offset,
        is_v6,
    )
    .map_err(TunReadError::Io)
}

fn split_header(read: &mut [u8]) -> Result<(VirtioNetHdr, &mut [u8]), TunReadError> {
    if read.len() <= VIRTIO_NET_HDR_LEN {
        return Err(invalid("TUN read no longer than its virtio-net header"));
    }
    let (header, packet) = read.split_at_mut(VIRTIO_NET_HDR_LEN);
    Ok((VirtioNetHdr::decode(header)?, packet))
}

/// The header length of a super-packet from its transport header: the
/// kernel's `hdr_len` can be the whole first packet on a forwarding path
/// (as wireguard-go and tun-rs found), so `csum_start` (the IP header's
/// length) plus the TCP or UDP header's length is what counts.
fn with_parsed_header_len(
    mut header: VirtioNetHdr,
    packet: &[u8],
) -> Result<VirtioNetHdr, TunReadError> {
    let ip_len = usize::from(header.csum_start);
    let transport_len = match header.gso_type & !VIRTIO_NET_HDR_GSO_ECN {
        VIRTIO_NET_HDR_GSO_UDP_L4 => 8,
        VIRTIO_NET_HDR_GSO_TCPV4 | VIRTIO_NET_HDR_GSO_TCPV6 => {
            let data_offset = *packet
                .get(ip_len + 12)
                .ok_or_else(|| invalid("super-packet shorter than its TCP header"))?;
            let len = usize::from(data_offset >> 4) * 4;
            if !(20..=60).contains(&len) {
                return Err(invalid("TCP header length out of range in a super-packet"));
            }
            len
        }
        _ => return Err(invalid("unknown GSO type in a TUN read")),
    };
    let header_len = ip_len + transport_len;
    let checksum_end = ip_len + usize::from(header.csum_offset) + 2;
    if header_len > packet.len() || checksum_end > packet.len() {
        return Err(invalid("super-packet shorter than its headers"));
    }
    header.hdr_len = u16::try_from(header_len).map_err(|_| invalid("header length overflow"))?;
    Ok(header)
}

/// Writes the transport checksum the kernel left to us (`CHECKSUM_PARTIAL`:
/// the field holds the pseudo-header sum, the rest is ours to add).
fn complete_checksum(packet: &mut [u8], start: u16, offset: u16) -> Result<(), TunReadError> {
    let start = usize::from(start);
    let at = start + usize::from(offset);
    if at + 2 > packet.len() {
        return Err(invalid("checksum field beyond the packet"));
    }
    let initial = u16::from_be_bytes([packet[at], packet[at + 1]]);
    packet[at..at + 2].fill(0);
    let sum = !checksum(&packet[start..], u64::from(initial));
    packet[at..at + 2].copy_from_slice(&sum.to_be_bytes());
    Ok(())
}

fn invalid(what: &'static str) -> TunReadError {
    TunReadError::Io(io::Error::new(io::ErrorKind::InvalidData, what))
}

#[cfg(test)]
mod tests;
