//! Just enough of IPv4 and IPv6 headers to route a packet and to strip the
//! padding from a decrypted one: version, total length, addresses.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

const IPV4_MIN_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;

/// Why bytes are not a routable IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum IpError {
    #[error("packet shorter than its IP header")]
    Truncated,
    #[error("IP version {0} is neither 4 nor 6")]
    UnknownVersion(u8),
    #[error("IP total length {claimed} exceeds the {available} bytes received")]
    LengthMismatch { claimed: usize, available: usize },
}

/// Addresses and true length of an IP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpHeader {
    pub source: IpAddr,
    pub destination: IpAddr,
    /// The packet's length from its header; bytes behind it are padding.
    pub total_len: usize,
}

impl IpHeader {
    /// Reads the header of the packet at the start of `bytes`; never panics.
    /// Inline: on the data path the caller keeps the fields in registers;
    /// called, the result went through memory and its address was read
    /// back wider than it was written, a store-forwarding stall a packet.
    #[inline]
    pub fn parse(bytes: &[u8]) -> Result<Self, IpError> {
        let first = *bytes.first().ok_or(IpError::Truncated)?;
        let header = match first >> 4 {
            4 => {
                let h: &[u8; IPV4_MIN_HEADER_LEN] =
                    bytes.first_chunk().ok_or(IpError::Truncated)?;
                let total_len = usize::from(u16::from_be_bytes([h[2], h[3]]));
                if total_len < IPV4_MIN_HEADER_LEN {
                    return Err(IpError::Truncated);
                }
                Self {
                    source: IpAddr::V4(Ipv4Addr::new(h[12], h[13], h[14], h[15])),
                    destination: IpAddr::V4(Ipv4Addr::new(h[16], h[17], h[18], h[19])),
                    total_len,
                }
            }
            6 => {
                let h: &[u8; IPV6_HEADER_LEN] = bytes.first_chunk().ok_or(IpError::Truncated)?;
                let payload_len = usize::from(u16::from_be_bytes([h[4], h[5]]));
                let address = |at: usize| {
                    let mut octets = [0u8; 16];
                    octets.copy_from_slice(&h[at..at + 16]);
                    IpAddr::V6(Ipv6Addr::from(octets))
                };
                Self {
                    source: address(8),
                    destination: address(24),
                    total_len: IPV6_HEADER_LEN + payload_len,
                }
            }
            version => return Err(IpError::UnknownVersion(version)),
        };
        if header.total_len > bytes.len() {
            return Err(IpError::LengthMismatch {
                claimed: header.total_len,
                available: bytes.len(),
            });
        }
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(total_len: u16) -> Vec<u8> {
        let mut p = vec![0u8; usize::from(total_len)];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&total_len.to_be_bytes());
        p[12..16].copy_from_slice(&[198, 19, 0, 1]);
        p[16..20].copy_from_slice(&[198, 19, 0, 2]);
        p
    }

    #[test]
    fn reads_ipv4_and_ignores_padding() {
        let mut p = ipv4(28);
        p.extend_from_slice(&[0; 4]);
        let h = IpHeader::parse(&p).unwrap();
        assert_eq!(h.total_len, 28);
        assert_eq!(h.source, "198.19.0.1".parse::<IpAddr>().unwrap());
        assert_eq!(h.destination, "198.19.0.2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn reads_ipv6() {
        let mut p = vec![0u8; 48];
        p[0] = 0x60;
        p[4..6].copy_from_slice(&8u16.to_be_bytes());
        p[8] = 0xfd;
        p[39] = 2;
        let h = IpHeader::parse(&p).unwrap();
        assert_eq!(h.total_len, 48);
        assert_eq!(h.source, "fd00::".parse::<IpAddr>().unwrap());
        assert_eq!(h.destination, "::2".parse::<IpAddr>().unwrap());
    }

    #[test]
    fn refuses_lies_and_garbage() {
        let mut p = ipv4(28);
        p[2..4].copy_from_slice(&100u16.to_be_bytes());
        assert!(matches!(
            IpHeader::parse(&p),
            Err(IpError::LengthMismatch { .. })
        ));
        assert_eq!(IpHeader::parse(&[0x45; 10]), Err(IpError::Truncated));
        assert_eq!(
            IpHeader::parse(&[0x15; 40]),
            Err(IpError::UnknownVersion(1))
        );
        assert_eq!(IpHeader::parse(&[]), Err(IpError::Truncated));
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..80)) {
            let _ = IpHeader::parse(&bytes);
        }
    }
}
