//! `Cidr`: an address with a prefix length, as written in `Address` and
//! `AllowedIPs` (`198.19.0.1/24`, `fd00::/64`, or a bare address meaning a
//! host route).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CidrParseError {
    #[error("'{0}' is not an IP address")]
    InvalidAddress(String),
    #[error("'{0}' is not a prefix length")]
    InvalidPrefixLength(String),
    #[error("prefix length {len} is longer than {max} for this address family")]
    PrefixTooLong { len: u8, max: u8 },
}

/// An address and a prefix length. The address keeps its host bits (an
/// interface `Address` needs them); [`Cidr::network`] masks them off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Cidr {
    address: IpAddr,
    prefix_len: u8,
}

impl Cidr {
    pub fn new(address: IpAddr, prefix_len: u8) -> Result<Self, CidrParseError> {
        let max = max_prefix_len(&address);
        if prefix_len > max {
            return Err(CidrParseError::PrefixTooLong {
                len: prefix_len,
                max,
            });
        }
        Ok(Self {
            address,
            prefix_len,
        })
    }

    /// The host route for `address` (/32 or /128).
    pub fn host(address: IpAddr) -> Self {
        Self {
            prefix_len: max_prefix_len(&address),
            address,
        }
    }

    pub fn address(&self) -> IpAddr {
        self.address
    }

    pub fn prefix_len(&self) -> u8 {
        self.prefix_len
    }

    pub fn is_ipv4(&self) -> bool {
        self.address.is_ipv4()
    }

    /// The same prefix with host bits cleared.
    pub fn network(&self) -> Self {
        let address = match self.address {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4) & mask32(self.prefix_len);
                IpAddr::V4(Ipv4Addr::from(bits))
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6) & mask128(self.prefix_len);
                IpAddr::V6(Ipv6Addr::from(bits))
            }
        };
        Self {
            address,
            prefix_len: self.prefix_len,
        }
    }

    pub fn contains(&self, address: &IpAddr) -> bool {
        match (self.address, address) {
            (IpAddr::V4(net), IpAddr::V4(a)) => {
                let mask = mask32(self.prefix_len);
                u32::from(net) & mask == u32::from(*a) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(a)) => {
                let mask = mask128(self.prefix_len);
                u128::from(net) & mask == u128::from(*a) & mask
            }
            _ => false,
        }
    }
}

fn max_prefix_len(address: &IpAddr) -> u8 {
    if address.is_ipv4() { 32 } else { 128 }
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

impl FromStr for Cidr {
    type Err = CidrParseError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        let (address_text, len_text) = match text.split_once('/') {
            Some((address, len)) => (address, Some(len)),
            None => (text, None),
        };
        let address: IpAddr = address_text
            .parse()
            .map_err(|_| CidrParseError::InvalidAddress(address_text.to_string()))?;
        let prefix_len = match len_text {
            Some(len) => {
                if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
                    return Err(CidrParseError::InvalidPrefixLength(len.to_string()));
                }
                len.parse::<u8>()
                    .map_err(|_| CidrParseError::InvalidPrefixLength(len.to_string()))?
            }
            None => max_prefix_len(&address),
        };
        Self::new(address, prefix_len)
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.address, self.prefix_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        let cidr: Cidr = "198.19.0.1/24".parse().unwrap();
        assert_eq!(cidr.to_string(), "198.19.0.1/24");
        assert_eq!(cidr.network().to_string(), "198.19.0.0/24");
        assert_eq!(
            "fd00::1".parse::<Cidr>().unwrap().to_string(),
            "fd00::1/128"
        );
        assert_eq!(
            "0.0.0.0/0".parse::<Cidr>().unwrap().network().prefix_len(),
            0
        );
    }

    #[test]
    fn refuses_bad_input() {
        assert!(matches!(
            "198.19.0.1/33".parse::<Cidr>(),
            Err(CidrParseError::PrefixTooLong { .. })
        ));
        assert!(matches!(
            "fd00::/129".parse::<Cidr>(),
            Err(CidrParseError::PrefixTooLong { .. })
        ));
        assert!(matches!(
            "198.19.0/24".parse::<Cidr>(),
            Err(CidrParseError::InvalidAddress(_))
        ));
        assert!(matches!(
            "198.19.0.0/+4".parse::<Cidr>(),
            Err(CidrParseError::InvalidPrefixLength(_))
        ));
        assert!(matches!(
            "198.19.0.0/".parse::<Cidr>(),
            Err(CidrParseError::InvalidPrefixLength(_))
        ));
    }

    #[test]
    fn containment() {
        let net: Cidr = "198.19.0.0/16".parse().unwrap();
        assert!(net.contains(&"198.19.200.1".parse().unwrap()));
        assert!(!net.contains(&"198.18.0.1".parse().unwrap()));
        assert!(!net.contains(&"fd00::1".parse().unwrap()));
        let all: Cidr = "::/0".parse().unwrap();
        assert!(all.contains(&"fd00::1".parse().unwrap()));
    }
}
