//! One `recvmmsg`/`sendmmsg` per batch, in caller-owned buffers.
//!
//! [`recv_batch`] and [`send_batch`] move up to [`MAX_BATCH`] messages on
//! any datagram socket: the lab's UDP generators and its link emulator's
//! packet sockets use them. [`send_gso_messages`] is the tunnel's send: each
//! message gathered from several pieces and cut by the kernel into
//! datagrams (UDP GSO).

use std::io::{self, IoSlice};
use std::mem::{self, MaybeUninit};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::check;

/// Most messages one [`recv_batch`], [`send_batch`] or
/// [`send_gso_messages`] call moves; callers may pass more, the rest wait
/// for the next call.
pub const MAX_BATCH: usize = 256;

/// Control-message space per received message: room for one
/// `SCM_TIMESTAMPNS` (a `timespec`) with its header, 8-byte aligned.
const CONTROL_WORDS: usize = 8;

/// What [`recv_batch`] learned about one received message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Received {
    /// The message's full length, even when its buffer was shorter.
    pub len: usize,
    /// The buffer was shorter than the message; only its prefix arrived.
    pub truncated: bool,
    /// Kernel arrival time, when timestamps are enabled
    /// ([`crate::socket::enable_receive_timestamps`]).
    pub timestamp: Option<SystemTime>,
}

/// Receives up to `min(buffers, received.len(), MAX_BATCH)` messages with
/// one `recvmmsg`, message `i` into the `i`-th buffer, its length and
/// timestamp into `received[i]`. Waits for the first message only as the
/// socket does (its read timeout applies), then takes only what is already
/// queued. `WouldBlock` when a non-blocking socket has nothing waiting.
pub fn recv_batch<'a, I>(
    fd: BorrowedFd<'_>,
    buffers: I,
    received: &mut [Received],
) -> io::Result<usize>
where
    I: IntoIterator<Item = &'a mut [u8]>,
{
    // Only the entries in use are written, so a batch costs what it holds.
    let mut iovecs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut headers = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut controls = [const { MaybeUninit::<[u64; CONTROL_WORDS]>::uninit() }; MAX_BATCH];
    let limit = received.len().min(MAX_BATCH);
    let mut count = 0;
    for (buffer, ((iovec, header), control)) in buffers
        .into_iter()
        .zip(
            iovecs
                .iter_mut()
                .zip(headers.iter_mut())
                .zip(controls.iter_mut()),
        )
        .take(limit)
    {
        let iovec = iovec.write(libc::iovec {
            iov_base: buffer.as_mut_ptr().cast(),
            iov_len: buffer.len(),
        });
        let mut message = empty_message();
        message.msg_hdr.msg_iov = iovec;
        message.msg_hdr.msg_iovlen = 1;
        message.msg_hdr.msg_control = control.as_mut_ptr().cast();
        message.msg_hdr.msg_controllen = mem::size_of::<[u64; CONTROL_WORDS]>();
        header.write(message);
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: the first `count` headers are initialised and point at iovecs
    // and control words on this stack frame and at buffers borrowed for 'a,
    // all alive and unaliased during the call; the kernel writes only within
    // their lengths. A null timeout leaves waiting to the socket.
    let rc = unsafe {
        libc::recvmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr().cast(),
            count as libc::c_uint,
            libc::MSG_TRUNC | libc::MSG_WAITFORONE,
            std::ptr::null_mut(),
        )
    };
    let done = usize::try_from(check(rc)?).unwrap_or(0).min(count);
    for (header, slot) in headers[..done].iter().zip(received.iter_mut()) {
        // SAFETY: the first `count` headers were written above.
        let header = unsafe { header.assume_init_ref() };
        *slot = Received {
            len: header.msg_len as usize,
            truncated: header.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            timestamp: timestamp_of(&header.msg_hdr),
        };
    }
    Ok(done)
}

/// An `mmsghdr` with no name, data or control messages.
fn empty_message() -> libc::mmsghdr {
    // SAFETY: mmsghdr is plain old data for which all-zero is valid (null
    // pointers, zero lengths).
    unsafe { mem::zeroed() }
}

/// The `SCM_TIMESTAMPNS` control message of a received message, if any.
fn timestamp_of(message: &libc::msghdr) -> Option<SystemTime> {
    // SAFETY: `message` was filled by recvmmsg; its control pointer and the
    // length the kernel wrote back delimit valid control messages, which the
    // CMSG macros walk without leaving that range.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(message);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_TIMESTAMPNS {
                let mut time = MaybeUninit::<libc::timespec>::uninit();
                std::ptr::copy_nonoverlapping(
                    libc::CMSG_DATA(cmsg),
                    time.as_mut_ptr().cast::<u8>(),
                    mem::size_of::<libc::timespec>(),
                );
                let time = time.assume_init();
                let secs = u64::try_from(time.tv_sec).ok()?;
                let nanos = u32::try_from(time.tv_nsec).ok()?;
                return Some(UNIX_EPOCH + Duration::new(secs, nanos));
            }
            cmsg = libc::CMSG_NXTHDR(message, cmsg);
        }
    }
    None
}

/// Sends up to [`MAX_BATCH`] datagrams with one `sendmmsg` on a connected
/// socket (or a bound packet socket); returns how many the kernel took. An
/// error means the first one failed; a short count means the next one would
/// have (call again to learn why).
pub fn send_batch<'a, I>(fd: BorrowedFd<'_>, datagrams: I) -> io::Result<usize>
where
    I: IntoIterator<Item = &'a [u8]>,
{
    let mut iovecs = [const { MaybeUninit::<libc::iovec>::uninit() }; MAX_BATCH];
    let mut headers = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut count = 0;
    for (datagram, (iovec, header)) in datagrams
        .into_iter()
        .zip(iovecs.iter_mut().zip(headers.iter_mut()))
    {
        let iovec = iovec.write(libc::iovec {
            iov_base: datagram.as_ptr().cast_mut().cast(),
            iov_len: datagram.len(),
        });
        let mut message = empty_message();
        message.msg_hdr.msg_iov = iovec;
        message.msg_hdr.msg_iovlen = 1;
        header.write(message);
        count += 1;
    }
    if count == 0 {
        return Ok(0);
    }
    // SAFETY: the first `count` headers are initialised and point at iovecs
    // on this stack frame and at datagrams borrowed for 'a; sendmmsg only
    // reads them (and writes each header's msg_len).
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr().cast(),
            count as libc::c_uint,
            0,
        )
    };
    Ok(usize::try_from(check(rc)?).unwrap_or(0))
}

/// Why a send failed while the socket stays usable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendRefusal {
    /// The socket's send buffer is full (`EAGAIN`): wait or give up.
    BufferFull,
    /// The stack dropped this one datagram: a full queue below the socket
    /// (`ENOBUFS`), or an earlier datagram's ICMP error reported on this
    /// send (`ECONNREFUSED`, `EHOSTUNREACH`, `ENETUNREACH`).
    Dropped,
}

/// Classifies a send error; `None` for errors that mean the socket (or
/// the caller) is wrong.
pub fn send_refusal(error: &io::Error) -> Option<SendRefusal> {
    match error.raw_os_error() {
        Some(libc::EAGAIN) => Some(SendRefusal::BufferFull),
        Some(libc::ENOBUFS | libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH) => {
            Some(SendRefusal::Dropped)
        }
        _ => None,
    }
}

/// One message for [`send_gso_messages`]: `pieces` joined and cut by the
/// kernel into datagrams of `segment_size` bytes (the last may be
/// shorter), or one datagram when `None`; sent from our address `source`
/// (`None`: the route's choice).
#[derive(Clone, Copy)]
pub struct GsoMessage<'a> {
    pub destination: SocketAddr,
    pub source: Option<IpAddr>,
    pub pieces: &'a [IoSlice<'a>],
    pub segment_size: Option<u16>,
}

impl GsoMessage<'_> {
    pub const EMPTY: GsoMessage<'static> = GsoMessage {
        destination: SocketAddr::V4(std::net::SocketAddrV4::new(
            std::net::Ipv4Addr::UNSPECIFIED,
            0,
        )),
        source: None,
        pieces: &[],
        segment_size: None,
    };
}

/// Room for a `UDP_SEGMENT` and an `IPV6_PKTINFO` control message (24 and
/// 40 bytes with their headers), aligned as `cmsghdr` is.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct MessageControl([u8; 64]);

/// Sends the first up to [`MAX_BATCH`] messages with one `sendmmsg` on a
/// dual-stack IPv6 UDP socket (IPv4 destinations go as v4-mapped
/// addresses) and returns how many the kernel took. An error is the first
/// message's; a short count means the next one would have failed (send it
/// again to learn why).
pub fn send_gso_messages(fd: BorrowedFd<'_>, messages: &[GsoMessage<'_>]) -> io::Result<usize> {
    send_gso(fd, messages, Addressing::PerMessage)
}

/// [`send_gso_messages`] on a socket connected to every message's
/// destination and bound to every message's source: the messages carry
/// neither, so the kernel sends on the route the socket cached at
/// connect instead of looking one up for each message (about a
/// microsecond a send on this machine kind, the same as the rest of a
/// small datagram's send). A dual-stack socket connected to a v4-mapped
/// address gets none of this: the kernel passes such sends on as
/// addressed ones, so IPv4 endpoints need an IPv4 socket.
pub fn send_gso_messages_connected(
    fd: BorrowedFd<'_>,
    messages: &[GsoMessage<'_>],
) -> io::Result<usize> {
    send_gso(fd, messages, Addressing::Connected)
}

#[derive(Clone, Copy, PartialEq)]
enum Addressing {
    PerMessage,
    Connected,
}

fn send_gso(
    fd: BorrowedFd<'_>,
    messages: &[GsoMessage<'_>],
    addressing: Addressing,
) -> io::Result<usize> {
    let count = messages.len().min(MAX_BATCH);
    if count == 0 {
        return Ok(0);
    }
    let mut headers = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; MAX_BATCH];
    let mut addresses = [const { MaybeUninit::<libc::sockaddr_in6>::uninit() }; MAX_BATCH];
    let mut controls = [const { MaybeUninit::<MessageControl>::uninit() }; MAX_BATCH];
    for (message, ((slot, address), control)) in messages[..count].iter().zip(
        headers
            .iter_mut()
            .zip(addresses.iter_mut())
            .zip(controls.iter_mut()),
    ) {
        let mut gso = empty_message();
        let header = &mut gso.msg_hdr;
        let source = match addressing {
            Addressing::PerMessage => {
                header.msg_name =
                    std::ptr::from_mut(address.write(socket_address(message.destination))).cast();
                header.msg_namelen = mem::size_of::<libc::sockaddr_in6>() as libc::socklen_t;
                message.source
            }
            Addressing::Connected => None,
        };
        // IoSlice is guaranteed to be ABI compatible with iovec on Unix.
        header.msg_iov = message.pieces.as_ptr().cast_mut().cast();
        header.msg_iovlen = message.pieces.len();
        if message.segment_size.is_some() || source.is_some() {
            let control = control.write(MessageControl([0; 64]));
            header.msg_control = control.0.as_mut_ptr().cast();
            header.msg_controllen = write_controls(control, message.segment_size, source);
        }
        slot.write(gso);
    }
    // SAFETY: the first `count` headers are initialised and point at
    // addresses and control buffers on this frame and at iovecs and data
    // borrowed from `messages` for the call; sendmmsg only reads them (and
    // writes each header's msg_len).
    let rc = unsafe {
        libc::sendmmsg(
            fd.as_raw_fd(),
            headers.as_mut_ptr().cast(),
            count as libc::c_uint,
            0,
        )
    };
    Ok(usize::try_from(check(rc)?).unwrap_or(0))
}

/// Writes the control messages of one send into `control` and returns
/// their length: the GSO segment size, and the source address as
/// `IP_PKTINFO` (IPv4, also on a dual-stack socket sending to a v4-mapped
/// address) or `IPV6_PKTINFO`.
fn write_controls(
    control: &mut MessageControl,
    segment_size: Option<u16>,
    source: Option<IpAddr>,
) -> usize {
    let mut length = 0;
    let mut push = |level: libc::c_int, kind: libc::c_int, data: &[u8]| {
        // SAFETY: CMSG_SPACE and CMSG_LEN only compute sizes.
        let (space, cmsg_len) = unsafe {
            (
                libc::CMSG_SPACE(data.len() as u32) as usize,
                libc::CMSG_LEN(data.len() as u32) as usize,
            )
        };
        // The largest pair (24 + 40 bytes) fills the 64 exactly.
        let Some(room) = control.0.get_mut(length..length + space) else {
            return;
        };
        let header = libc::cmsghdr {
            cmsg_len,
            cmsg_level: level,
            cmsg_type: kind,
        };
        let header_len = mem::size_of::<libc::cmsghdr>();
        // SAFETY: cmsghdr is plain old data; its bytes are read once.
        let header_bytes = unsafe {
            std::slice::from_raw_parts(std::ptr::from_ref(&header).cast::<u8>(), header_len)
        };
        room[..header_len].copy_from_slice(header_bytes);
        // CMSG_DATA is the header rounded up to the 8-byte alignment,
        // which is the header's own size on Linux.
        room[header_len..header_len + data.len()].copy_from_slice(data);
        length += space;
    };
    if let Some(size) = segment_size {
        push(libc::SOL_UDP, libc::UDP_SEGMENT, &size.to_ne_bytes());
    }
    match source {
        Some(IpAddr::V4(v4)) => {
            let info = libc::in_pktinfo {
                ipi_ifindex: 0,
                ipi_spec_dst: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.octets()),
                },
                ipi_addr: libc::in_addr { s_addr: 0 },
            };
            push(
                libc::IPPROTO_IP,
                libc::IP_PKTINFO,
                pod_bytes(&info).as_slice(),
            );
        }
        Some(IpAddr::V6(v6)) => {
            let info = libc::in6_pktinfo {
                ipi6_addr: libc::in6_addr {
                    s6_addr: v6.octets(),
                },
                ipi6_ifindex: 0,
            };
            push(
                libc::IPPROTO_IPV6,
                libc::IPV6_PKTINFO,
                pod_bytes(&info).as_slice(),
            );
        }
        None => {}
    }
    length
}

/// The bytes of a plain-old-data control message payload (at most 20).
struct PodBytes {
    bytes: [u8; 20],
    len: usize,
}

impl PodBytes {
    fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

fn pod_bytes<T: Copy>(value: &T) -> PodBytes {
    let mut bytes = [0u8; 20];
    let len = mem::size_of::<T>().min(bytes.len());
    // SAFETY: `value` is a live plain-old-data value (no padding in the
    // pktinfo structs) and at most `len` of its bytes are copied into a
    // buffer at least that long.
    unsafe {
        std::ptr::copy_nonoverlapping(
            std::ptr::from_ref(value).cast::<u8>(),
            bytes.as_mut_ptr(),
            len,
        );
    }
    PodBytes { bytes, len }
}

/// `destination` as an IPv6 socket address; IPv4 as v4-mapped.
fn socket_address(destination: SocketAddr) -> libc::sockaddr_in6 {
    let v6 = match destination {
        SocketAddr::V6(v6) => v6,
        SocketAddr::V4(v4) => {
            std::net::SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0)
        }
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
mod tests;
