//! A checked reader and a writer for fjord's own binary formats
//! (certificates, revocations, control messages). Integers are big-endian;
//! variable-length fields carry a length prefix. The reader never panics:
//! every read past the end is a [`DecodeError`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::cidr::Cidr;

/// Why bytes are not a well-formed fjord message or certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    #[error("truncated")]
    Truncated,
    #[error("trailing bytes after the message")]
    TrailingBytes,
    #[error("unknown format or version")]
    UnknownFormat,
    #[error("a field holds an invalid value")]
    InvalidField,
    #[error("a list is longer than allowed")]
    TooMany,
}

pub(crate) struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8]) -> Self {
        Self { rest: bytes }
    }

    pub fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        if self.rest.len() < len {
            return Err(DecodeError::Truncated);
        }
        let (head, tail) = self.rest.split_at(len);
        self.rest = tail;
        Ok(head)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array()?))
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    /// A byte string of at most `max` bytes after a one-byte length.
    pub fn short_bytes(&mut self, max: usize) -> Result<&'a [u8], DecodeError> {
        let len = usize::from(self.u8()?);
        if len > max {
            return Err(DecodeError::TooMany);
        }
        self.take(len)
    }

    /// A count of at most `max` list entries.
    pub fn count(&mut self, max: usize) -> Result<usize, DecodeError> {
        let count = usize::from(self.u8()?);
        if count > max {
            return Err(DecodeError::TooMany);
        }
        Ok(count)
    }

    pub fn ip(&mut self) -> Result<IpAddr, DecodeError> {
        match self.u8()? {
            4 => Ok(IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))),
            6 => Ok(IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))),
            _ => Err(DecodeError::InvalidField),
        }
    }

    pub fn socket_addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let ip = self.ip()?;
        Ok(SocketAddr::new(ip, self.u16()?))
    }

    pub fn cidr(&mut self) -> Result<Cidr, DecodeError> {
        let ip = self.ip()?;
        let prefix = self.u8()?;
        Cidr::new(ip, prefix).map_err(|_| DecodeError::InvalidField)
    }

    pub fn remaining(&self) -> &'a [u8] {
        self.rest
    }

    pub fn finish(self) -> Result<(), DecodeError> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes)
        }
    }
}

/// Appends fields in the format [`Reader`] reads.
#[derive(Default)]
pub(crate) struct Writer {
    pub bytes: Vec<u8>,
}

impl Writer {
    pub fn bytes(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    pub fn u8(&mut self, value: u8) {
        self.bytes.push(value);
    }

    pub fn u16(&mut self, value: u16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    pub fn u32(&mut self, value: u32) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    pub fn u64(&mut self, value: u64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    /// Callers bound `bytes` to 255 first (names are validated on creation).
    pub fn short_bytes(&mut self, bytes: &[u8]) {
        let len = bytes.len().min(usize::from(u8::MAX));
        self.u8(len as u8);
        self.bytes(&bytes[..len]);
    }

    pub fn ip(&mut self, ip: IpAddr) {
        match ip {
            IpAddr::V4(v4) => {
                self.u8(4);
                self.bytes(&v4.octets());
            }
            IpAddr::V6(v6) => {
                self.u8(6);
                self.bytes(&v6.octets());
            }
        }
    }

    pub fn socket_addr(&mut self, addr: SocketAddr) {
        self.ip(addr.ip());
        self.u16(addr.port());
    }

    pub fn cidr(&mut self, cidr: Cidr) {
        self.ip(cidr.address());
        self.u8(cidr.prefix_len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_read_past_the_end_is_truncated() {
        let mut writer = Writer::default();
        writer.socket_addr("198.18.0.1:51820".parse().unwrap());
        writer.cidr("fd00::/64".parse().unwrap());
        writer.u64(7);
        let full = writer.bytes;
        for cut in 0..full.len() {
            let mut reader = Reader::new(&full[..cut]);
            let result = reader
                .socket_addr()
                .and_then(|_| reader.cidr())
                .and_then(|_| reader.u64());
            assert_eq!(result, Err(DecodeError::Truncated), "cut at {cut}");
        }
        let mut reader = Reader::new(&full);
        assert_eq!(
            reader.socket_addr().unwrap(),
            "198.18.0.1:51820".parse().unwrap()
        );
        assert_eq!(reader.cidr().unwrap(), "fd00::/64".parse().unwrap());
        assert_eq!(reader.u64().unwrap(), 7);
        reader.finish().unwrap();
    }
}
