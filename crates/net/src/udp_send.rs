//! Many UDP sends in one `sendmmsg`, each message a GSO run.
//!
//! A turn of TUN reads leaves runs of sealed datagrams for several peers or
//! of several lengths: a 1,500-byte packet through a 1,420-byte tunnel
//! leaves as two fragments of different lengths, a run of its own, so small
//! frames sent at a high rate would cost one system call per packet pair.
//! One call carries them all instead. Each message gathers its datagrams
//! from where they were sealed, an iovec apiece, so nothing is packed first.

use std::io::{self, IoSlice};
use std::mem;
use std::net::SocketAddr;
use std::os::fd::AsRawFd;

use crate::udp::{UdpTransport, mapped};

/// Most messages one [`send_messages`] call hands the kernel.
pub const SEND_BATCH: usize = 64;

/// One message: `pieces` joined and cut by the kernel into datagrams of
/// `segment_size` bytes (the last may be shorter), or one datagram when
/// `None`.
#[derive(Clone, Copy)]
pub struct GsoMessage<'a> {
    pub destination: SocketAddr,
    pub pieces: &'a [IoSlice<'a>],
    pub segment_size: Option<u16>,
}

impl GsoMessage<'_> {
    pub const EMPTY: GsoMessage<'static> = GsoMessage {
        destination: SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            0,
        )),
        pieces: &[],
        segment_size: None,
    };
}

/// Room for one `UDP_SEGMENT` control message, aligned as `cmsghdr` is.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct SegmentControl([u8; 32]);

/// Sends the first up to [`SEND_BATCH`] messages with one `sendmmsg` and
/// returns how many the kernel took. An error is the first message's; a
/// short count means the next one would have failed (send it again to
/// learn why).
pub fn send_messages(udp: &UdpTransport, messages: &[GsoMessage<'_>]) -> io::Result<usize> {
    let count = messages.len().min(SEND_BATCH);
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: mmsghdr and sockaddr_in6 are plain old data for which all
    // zero is valid (null pointers, zero lengths, unspecified address).
    let mut headers: [libc::mmsghdr; SEND_BATCH] = unsafe { mem::zeroed() };
    // SAFETY: as above.
    let mut addresses: [libc::sockaddr_in6; SEND_BATCH] = unsafe { mem::zeroed() };
    let mut controls = [SegmentControl([0; 32]); SEND_BATCH];
    for (index, message) in messages[..count].iter().enumerate() {
        addresses[index] = socket_address(message.destination);
        let header = &mut headers[index].msg_hdr;
        header.msg_name = (&raw mut addresses[index]).cast();
        header.msg_namelen = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
        // IoSlice is guaranteed to be ABI compatible with iovec on Unix.
        header.msg_iov = message.pieces.as_ptr().cast_mut().cast();
        header.msg_iovlen = message.pieces.len();
        if let Some(size) = message.segment_size {
            header.msg_control = controls[index].0.as_mut_ptr().cast();
            // SAFETY: CMSG_SPACE only computes a size.
            header.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
            // SAFETY: msg_control points at 32 aligned bytes that outlive
            // the call and msg_controllen (24) is within them, so the
            // first header and its two data bytes lie inside the buffer.
            unsafe {
                let control = libc::CMSG_FIRSTHDR(header);
                (*control).cmsg_level = libc::SOL_UDP;
                (*control).cmsg_type = libc::UDP_SEGMENT;
                (*control).cmsg_len = libc::CMSG_LEN(2) as usize;
                libc::CMSG_DATA(control).cast::<u16>().write_unaligned(size);
            }
        }
    }
    // SAFETY: the first `count` headers point at addresses and control
    // buffers on this frame and at iovecs and data borrowed from
    // `messages` for the call; sendmmsg only reads them (and writes each
    // header's msg_len).
    let rc = unsafe {
        libc::sendmmsg(
            udp.as_raw_fd(),
            headers.as_mut_ptr(),
            count as libc::c_uint,
            0,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(usize::try_from(rc).unwrap_or(0))
}

/// The socket is dual-stack IPv6: IPv4 peers are v4-mapped addresses.
fn socket_address(destination: SocketAddr) -> libc::sockaddr_in6 {
    let SocketAddr::V6(v6) = mapped(destination) else {
        unreachable!("mapped() returns IPv6 addresses");
    };
    // SAFETY: all-zero is a valid sockaddr_in6.
    let mut address: libc::sockaddr_in6 = unsafe { mem::zeroed() };
    address.sin6_family = libc::AF_INET6 as libc::sa_family_t;
    address.sin6_port = v6.port().to_be();
    address.sin6_flowinfo = v6.flowinfo().to_be();
    address.sin6_addr.s6_addr = v6.ip().octets();
    address.sin6_scope_id = v6.scope_id();
    address
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn_udp::RecvMeta;
    use std::io::IoSliceMut;

    /// Three messages in one call: a GSO run gathered from two pieces, a
    /// lone short datagram, and a run whose last datagram is shorter.
    #[test]
    fn messages_arrive_as_their_datagrams_in_order() {
        let a = UdpTransport::bind(0, 0).unwrap();
        let b = UdpTransport::bind(0, 0).unwrap();
        let to_b: SocketAddr = format!("127.0.0.1:{}", b.port()).parse().unwrap();
        let data: Vec<u8> = (0..4000u32).map(|i| (i % 251) as u8).collect();
        let first = [IoSlice::new(&data[..300]), IoSlice::new(&data[300..600])];
        let second = [IoSlice::new(&data[600..650])];
        let third = [IoSlice::new(&data[650..1000])];
        let messages = [
            GsoMessage {
                destination: to_b,
                pieces: &first,
                segment_size: Some(200),
            },
            GsoMessage {
                destination: to_b,
                pieces: &second,
                segment_size: None,
            },
            GsoMessage {
                destination: to_b,
                pieces: &third,
                segment_size: Some(150),
            },
        ];
        assert_eq!(send_messages(&a, &messages).unwrap(), 3);

        let expected: Vec<&[u8]> = [0..200, 200..400, 400..600, 600..650]
            .into_iter()
            .chain([650..800, 800..950, 950..1000])
            .map(|range| &data[range])
            .collect();
        let mut received: Vec<Vec<u8>> = Vec::new();
        let mut storage = vec![0u8; 65536];
        let mut meta = [RecvMeta::default(); 1];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while received.len() < expected.len() && std::time::Instant::now() < deadline {
            let mut slices = [IoSliceMut::new(&mut storage)];
            match b.recv(&mut slices, &mut meta) {
                Ok(_) => {
                    let m = meta[0];
                    let stride = if m.stride == 0 { m.len } else { m.stride };
                    received.extend(storage[..m.len].chunks(stride).map(<[u8]>::to_vec));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(received, expected);
    }
}
