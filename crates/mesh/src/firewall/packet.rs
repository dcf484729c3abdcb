//! What the firewall reads of an IP packet: its protocol, addresses and
//! ports (the ICMP echo identifier standing in for a port), or, for an
//! ICMP error, the same of the packet it reports on. Never panics; what
//! it cannot read is [`Packet::Unreadable`] and is denied. A later
//! fragment has no ports: it names its datagram instead.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::policy::Flow;

pub const TCP: u8 = 6;
pub const UDP: u8 = 17;
pub const ICMP: u8 = 1;
pub const ICMPV6: u8 = 58;

/// A packet's five-tuple as it travels: from `source` to `destination`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tuple {
    pub protocol: u8,
    pub source: IpAddr,
    pub destination: IpAddr,
    /// TCP and UDP ports; for ICMP echo the identifier is both ports, so
    /// a request and its reply share a flow whichever way they go; 0 and
    /// 0 for every other protocol.
    pub source_port: u16,
    pub destination_port: u16,
}

impl Tuple {
    /// The flow as the policy sees it when this packet opens it.
    pub fn policy_flow(&self) -> Flow {
        match self.protocol {
            TCP => Flow::Tcp {
                destination_port: self.destination_port,
            },
            UDP => Flow::Udp {
                destination_port: self.destination_port,
            },
            ICMP | ICMPV6 => Flow::Icmp,
            other => Flow::Other(other),
        }
    }
}

/// The datagram a fragment belongs to: every fragment of one carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragmentKey {
    pub protocol: u8,
    pub source: IpAddr,
    pub destination: IpAddr,
    /// IPv4's identification, or the IPv6 fragment header's.
    pub identification: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Packet {
    /// A packet of a flow.
    Flow(Tuple),
    /// The first fragment of a datagram: it carries the ports, so it is
    /// judged as its flow's packet, and the datagram's later fragments
    /// follow its fate.
    FirstFragment { tuple: Tuple, datagram: FragmentKey },
    /// A later fragment: no transport header, so no ports; it passes when
    /// its datagram's first fragment did.
    LaterFragment(FragmentKey),
    /// An ICMP error (unreachable, too big, time exceeded, parameter
    /// problem) about the packet `about`, as that packet travelled: it
    /// passes when that packet's flow is tracked.
    IcmpError { error: Tuple, about: Tuple },
    /// Too short for its headers.
    Unreadable,
}

/// Where a packet stands in its datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fragment {
    Whole,
    /// Offset 0 with more to come; the identification.
    First(u32),
    /// A later offset; the identification.
    Later(u32),
}

/// The IP header's part the firewall reads.
struct Header<'a> {
    protocol: u8,
    source: IpAddr,
    destination: IpAddr,
    fragment: Fragment,
    /// What follows the IP headers: the transport header, for a whole
    /// packet or a first fragment.
    transport: &'a [u8],
}

impl Header<'_> {
    fn datagram(&self, identification: u32) -> FragmentKey {
        FragmentKey {
            protocol: self.protocol,
            source: self.source,
            destination: self.destination,
            identification,
        }
    }
}

/// The header bytes that name a whole TCP or UDP packet's flow, as they
/// travel: two packets with equal signatures read as equal
/// [`Packet::Flow`]s. Taken without parsing the header, so the firewall
/// passes the next packet of a bulk transfer on a compare; anything else
/// (options, extension headers, fragments, ICMP) has none and is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signature {
    /// Protocol; addresses (bytes 12..20); ports.
    V4(u8, [u8; 8], [u8; 4]),
    /// Next header; addresses (bytes 8..40); ports.
    V6(u8, [u8; 32], [u8; 4]),
}

/// `bytes`' [`Signature`], if it is a whole TCP or UDP packet with no
/// IPv4 options or IPv6 extension headers.
#[inline]
pub fn signature(bytes: &[u8]) -> Option<Signature> {
    let is_transport = |protocol| protocol == TCP || protocol == UDP;
    match bytes.first()? {
        // Version 4, a 20-byte header; neither more fragments nor an
        // offset.
        0x45 => {
            let header: &[u8; 24] = bytes.first_chunk()?;
            let whole = header[6] & 0x3f == 0 && header[7] == 0;
            if !whole || !is_transport(header[9]) {
                return None;
            }
            Some(Signature::V4(
                header[9],
                header[12..20].try_into().ok()?,
                header[20..24].try_into().ok()?,
            ))
        }
        first if first >> 4 == 6 => {
            let header: &[u8; 44] = bytes.first_chunk()?;
            if !is_transport(header[6]) {
                return None;
            }
            Some(Signature::V6(
                header[6],
                header[8..40].try_into().ok()?,
                header[40..44].try_into().ok()?,
            ))
        }
        _ => None,
    }
}

/// Reads the packet at the start of `bytes`.
#[inline]
pub fn read(bytes: &[u8]) -> Packet {
    let Some(header) = read_header(bytes) else {
        return Packet::Unreadable;
    };
    if let Fragment::Later(identification) = header.fragment {
        return Packet::LaterFragment(header.datagram(identification));
    }
    let Some(tuple) = read_tuple(&header) else {
        return Packet::Unreadable;
    };
    // ICMP inside IPv6, or ICMPv6 inside IPv4, is no ICMP any host
    // reads: a protocol number like another.
    let packet = match (tuple.protocol, tuple.source.is_ipv6()) {
        (ICMP, false) | (ICMPV6, true) => read_icmp(tuple, header.transport),
        _ => Packet::Flow(tuple),
    };
    match (packet, header.fragment) {
        (Packet::Flow(tuple), Fragment::First(identification)) => Packet::FirstFragment {
            tuple,
            datagram: header.datagram(identification),
        },
        (packet, _) => packet,
    }
}

#[inline]
fn read_header(bytes: &[u8]) -> Option<Header<'_>> {
    match bytes.first()? >> 4 {
        4 => read_ipv4(bytes),
        6 => read_ipv6(bytes),
        _ => None,
    }
}

/// The tuple of a whole packet or a first fragment. For ICMP the ports
/// are left 0 here; `read_icmp` fills them.
#[inline]
fn read_tuple(header: &Header<'_>) -> Option<Tuple> {
    let (source_port, destination_port) = match header.protocol {
        TCP | UDP => {
            let ports: &[u8; 4] = header.transport.first_chunk()?;
            (
                u16::from_be_bytes([ports[0], ports[1]]),
                u16::from_be_bytes([ports[2], ports[3]]),
            )
        }
        _ => (0, 0),
    };
    Some(Tuple {
        protocol: header.protocol,
        source: header.source,
        destination: header.destination,
        source_port,
        destination_port,
    })
}

/// IPv4's "more fragments" flag, in the flags-and-offset field.
const IPV4_MORE_FRAGMENTS: u16 = 0x2000;

fn read_ipv4(bytes: &[u8]) -> Option<Header<'_>> {
    let header: &[u8; 20] = bytes.first_chunk()?;
    let header_len = usize::from(header[0] & 0x0f) * 4;
    if header_len < 20 {
        return None;
    }
    let flags_and_offset = u16::from_be_bytes([header[6], header[7]]);
    let identification = u32::from(u16::from_be_bytes([header[4], header[5]]));
    let fragment = match (
        flags_and_offset & 0x1fff,
        flags_and_offset & IPV4_MORE_FRAGMENTS != 0,
    ) {
        (0, false) => Fragment::Whole,
        (0, true) => Fragment::First(identification),
        _ => Fragment::Later(identification),
    };
    let source = Ipv4Addr::new(header[12], header[13], header[14], header[15]);
    let destination = Ipv4Addr::new(header[16], header[17], header[18], header[19]);
    Some(Header {
        protocol: header[9],
        source: source.into(),
        destination: destination.into(),
        fragment,
        transport: bytes.get(header_len..)?,
    })
}

/// Most IPv6 extension headers walked before the transport header.
const MAX_EXTENSION_HEADERS: usize = 8;

fn read_ipv6(bytes: &[u8]) -> Option<Header<'_>> {
    let header: &[u8; 40] = bytes.first_chunk()?;
    let address = |at: usize| {
        let mut octets = [0u8; 16];
        octets.copy_from_slice(&header[at..at + 16]);
        IpAddr::V6(Ipv6Addr::from(octets))
    };
    let mut next = header[6];
    let mut rest = &bytes[40..];
    let mut fragment = Fragment::Whole;
    for _ in 0..MAX_EXTENSION_HEADERS {
        let length = match next {
            // Hop-by-hop, routing, destination options: 8-byte units after
            // the first 8.
            0 | 43 | 60 => (usize::from(*rest.get(1)?) + 1) * 8,
            44 => {
                let header: &[u8; 8] = rest.first_chunk()?;
                let offset_and_more = u16::from_be_bytes([header[2], header[3]]);
                let identification =
                    u32::from_be_bytes([header[4], header[5], header[6], header[7]]);
                fragment = match (offset_and_more & 0xfff8, offset_and_more & 1 != 0) {
                    (0, false) => Fragment::Whole,
                    (0, true) => Fragment::First(identification),
                    // Its next header names the datagram's transport,
                    // whose header is in the first fragment only.
                    _ => {
                        return Some(Header {
                            protocol: header[0],
                            source: address(8),
                            destination: address(24),
                            fragment: Fragment::Later(identification),
                            transport: &[],
                        });
                    }
                };
                8
            }
            // Authentication header: 4-byte units after the first 8.
            51 => (usize::from(*rest.get(1)?) + 2) * 4,
            protocol => {
                return Some(Header {
                    protocol,
                    source: address(8),
                    destination: address(24),
                    fragment,
                    transport: rest,
                });
            }
        };
        next = *rest.first()?;
        rest = rest.get(length..)?;
    }
    None
}

fn read_icmp(mut tuple: Tuple, icmp: &[u8]) -> Packet {
    let Some(&[kind, _code, _, _, id_high, id_low, _, _]) = icmp.first_chunk::<8>() else {
        return Packet::Unreadable;
    };
    let v6 = tuple.protocol == ICMPV6;
    let is_echo = if v6 {
        matches!(kind, 128 | 129)
    } else {
        matches!(kind, 0 | 8)
    };
    let is_error = if v6 {
        matches!(kind, 1..=4)
    } else {
        matches!(kind, 3 | 4 | 11 | 12)
    };
    if is_echo {
        let identifier = u16::from_be_bytes([id_high, id_low]);
        (tuple.source_port, tuple.destination_port) = (identifier, identifier);
    }
    if !is_error {
        return Packet::Flow(tuple);
    }
    // The reported packet's header and first 8 bytes follow; only its
    // tuple is read, and ICMP about ICMP is not followed further (an
    // error about an echo names the echo's identifier).
    let reported = read_header(&icmp[8..])
        .filter(|header| !matches!(header.fragment, Fragment::Later(_)))
        .and_then(|header| Some((read_tuple(&header)?, header.transport)));
    match reported {
        Some((mut about, inner)) if about.source.is_ipv6() == v6 => {
            if matches!(about.protocol, ICMP | ICMPV6)
                && let Some(&[_, _, _, _, high, low]) = inner.first_chunk::<6>()
            {
                let identifier = u16::from_be_bytes([high, low]);
                (about.source_port, about.destination_port) = (identifier, identifier);
            }
            Packet::IcmpError {
                error: tuple,
                about,
            }
        }
        _ => Packet::Unreadable,
    }
}
