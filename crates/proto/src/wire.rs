//! WireGuard wire messages as checked views over received bytes.
//!
//! Every message starts with a little-endian `u32` type: 1 handshake
//! initiation, 2 handshake response, 3 cookie reply, 4 transport data. The
//! type's three upper bytes are reserved and must be zero, so a datagram is
//! classified exactly as wireguard-go classifies it. One exception is
//! fjord's own: transport data sealed with AES-256-GCM carries the cipher
//! in the type's second byte (type `0x104`), which every plain WireGuard
//! peer drops as an unknown type; fjord sends it only to a fjord peer that
//! agreed to it (see [`crate::negotiation`]).
//!
//! [`Message::parse`] checks the type and the length once; the view types
//! then expose fixed-size fields and cannot panic on any input.

use crate::aead::DataCipher;

/// Message type of a handshake initiation.
pub const MESSAGE_TYPE_HANDSHAKE_INITIATION: u32 = 1;
/// Message type of a handshake response.
pub const MESSAGE_TYPE_HANDSHAKE_RESPONSE: u32 = 2;
/// Message type of a cookie reply.
pub const MESSAGE_TYPE_COOKIE_REPLY: u32 = 3;
/// Message type of transport data (and keepalives).
pub const MESSAGE_TYPE_TRANSPORT_DATA: u32 = 4;
/// Message type of fjord's transport data sealed with AES-256-GCM: type 4
/// with the cipher id 1 in the second byte. Same layout otherwise.
pub const MESSAGE_TYPE_TRANSPORT_DATA_AES: u32 = 0x104;

/// Length of a handshake initiation.
pub const HANDSHAKE_INITIATION_LEN: usize = 148;
/// Length of a handshake response.
pub const HANDSHAKE_RESPONSE_LEN: usize = 92;
/// Length of a cookie reply.
pub const COOKIE_REPLY_LEN: usize = 64;
/// Length of the transport data header (type, receiver index, counter).
pub const TRANSPORT_HEADER_LEN: usize = 16;
/// Length of the Poly1305 tag that ends every transport data message.
pub const TRANSPORT_TAG_LEN: usize = 16;
/// Smallest transport message: header and tag around an empty (keepalive) payload.
pub const TRANSPORT_MIN_LEN: usize = TRANSPORT_HEADER_LEN + TRANSPORT_TAG_LEN;
/// Plaintext is padded with zeros to a multiple of this many bytes.
pub const PADDING_MULTIPLE: usize = 16;

pub(crate) mod initiation {
    pub const SENDER: usize = 4;
    pub const EPHEMERAL: usize = 8;
    pub const STATIC: usize = 40;
    pub const STATIC_LEN: usize = 32 + 16;
    pub const TIMESTAMP: usize = 88;
    pub const TIMESTAMP_LEN: usize = 12 + 16;
    pub const MAC1: usize = 116;
    pub const MAC2: usize = 132;
}

pub(crate) mod response {
    pub const SENDER: usize = 4;
    pub const RECEIVER: usize = 8;
    pub const EPHEMERAL: usize = 12;
    pub const EMPTY: usize = 44;
    pub const MAC1: usize = 60;
    pub const MAC2: usize = 76;
}

pub(crate) mod cookie_reply {
    pub const RECEIVER: usize = 4;
    pub const NONCE: usize = 8;
    pub const COOKIE: usize = 32;
}

pub(crate) mod transport {
    pub const RECEIVER: usize = 4;
    pub const COUNTER: usize = 8;
}

/// Why a datagram is not a WireGuard message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("datagram shorter than a message type")]
    TruncatedHeader,
    #[error("unknown message type {0:#x}")]
    UnknownType(u32),
    #[error("message type {message_type} needs {expected} bytes, got {actual}")]
    WrongLength {
        message_type: u32,
        expected: usize,
        actual: usize,
    },
}

/// A classified WireGuard message borrowing the datagram's bytes.
#[derive(Debug, Clone, Copy)]
pub enum Message<'a> {
    HandshakeInitiation(HandshakeInitiation<'a>),
    HandshakeResponse(HandshakeResponse<'a>),
    CookieReply(CookieReply<'a>),
    TransportData(TransportData<'a>),
}

impl<'a> Message<'a> {
    /// Classifies `datagram`; never panics.
    pub fn parse(datagram: &'a [u8]) -> Result<Self, ParseError> {
        let message_type = message_type(datagram).ok_or(ParseError::TruncatedHeader)?;
        let wrong_length = |expected: usize| ParseError::WrongLength {
            message_type,
            expected,
            actual: datagram.len(),
        };
        match message_type {
            MESSAGE_TYPE_HANDSHAKE_INITIATION => {
                let bytes = datagram
                    .try_into()
                    .map_err(|_| wrong_length(HANDSHAKE_INITIATION_LEN))?;
                Ok(Self::HandshakeInitiation(HandshakeInitiation(bytes)))
            }
            MESSAGE_TYPE_HANDSHAKE_RESPONSE => {
                let bytes = datagram
                    .try_into()
                    .map_err(|_| wrong_length(HANDSHAKE_RESPONSE_LEN))?;
                Ok(Self::HandshakeResponse(HandshakeResponse(bytes)))
            }
            MESSAGE_TYPE_COOKIE_REPLY => {
                let bytes = datagram
                    .try_into()
                    .map_err(|_| wrong_length(COOKIE_REPLY_LEN))?;
                Ok(Self::CookieReply(CookieReply(bytes)))
            }
            MESSAGE_TYPE_TRANSPORT_DATA | MESSAGE_TYPE_TRANSPORT_DATA_AES => {
                if datagram.len() < TRANSPORT_MIN_LEN {
                    return Err(wrong_length(TRANSPORT_MIN_LEN));
                }
                let header = datagram
                    .first_chunk::<TRANSPORT_HEADER_LEN>()
                    .ok_or(wrong_length(TRANSPORT_MIN_LEN))?;
                Ok(Self::TransportData(TransportData {
                    header,
                    len: datagram.len(),
                }))
            }
            other => Err(ParseError::UnknownType(other)),
        }
    }
}

/// The little-endian message type of `datagram`, if it has four bytes.
pub fn message_type(datagram: &[u8]) -> Option<u32> {
    let bytes = datagram.get(..4)?;
    Some(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
}

/// A fixed-size field of a fixed-size message. Offsets and lengths come
/// from the layout modules above and are checked by this module's tests
/// against every message length, so the slice is always in bounds.
fn field<const N: usize, const L: usize>(bytes: &[u8; L], offset: usize) -> &[u8; N] {
    let (_, rest) = bytes.split_at(offset);
    let (head, _) = rest.split_at(N);
    // Invariant: `head` has exactly N bytes by construction.
    head.try_into().expect("split_at(N) yields N bytes")
}

fn read_u32<const L: usize>(bytes: &[u8; L], offset: usize) -> u32 {
    u32::from_le_bytes(*field::<4, L>(bytes, offset))
}

/// A 148-byte handshake initiation.
#[derive(Debug, Clone, Copy)]
pub struct HandshakeInitiation<'a>(&'a [u8; HANDSHAKE_INITIATION_LEN]);

impl<'a> HandshakeInitiation<'a> {
    pub fn bytes(&self) -> &'a [u8; HANDSHAKE_INITIATION_LEN] {
        self.0
    }
    pub fn sender_index(&self) -> u32 {
        read_u32(self.0, initiation::SENDER)
    }
    pub fn ephemeral(&self) -> &'a [u8; 32] {
        field(self.0, initiation::EPHEMERAL)
    }
    pub fn encrypted_static(&self) -> &'a [u8; initiation::STATIC_LEN] {
        field(self.0, initiation::STATIC)
    }
    pub fn encrypted_timestamp(&self) -> &'a [u8; initiation::TIMESTAMP_LEN] {
        field(self.0, initiation::TIMESTAMP)
    }
    pub fn mac1(&self) -> &'a [u8; 16] {
        field(self.0, initiation::MAC1)
    }
    pub fn mac2(&self) -> &'a [u8; 16] {
        field(self.0, initiation::MAC2)
    }
}

/// A 92-byte handshake response.
#[derive(Debug, Clone, Copy)]
pub struct HandshakeResponse<'a>(&'a [u8; HANDSHAKE_RESPONSE_LEN]);

impl<'a> HandshakeResponse<'a> {
    pub fn bytes(&self) -> &'a [u8; HANDSHAKE_RESPONSE_LEN] {
        self.0
    }
    pub fn sender_index(&self) -> u32 {
        read_u32(self.0, response::SENDER)
    }
    pub fn receiver_index(&self) -> u32 {
        read_u32(self.0, response::RECEIVER)
    }
    pub fn ephemeral(&self) -> &'a [u8; 32] {
        field(self.0, response::EPHEMERAL)
    }
    pub fn encrypted_nothing(&self) -> &'a [u8; 16] {
        field(self.0, response::EMPTY)
    }
    pub fn mac1(&self) -> &'a [u8; 16] {
        field(self.0, response::MAC1)
    }
    pub fn mac2(&self) -> &'a [u8; 16] {
        field(self.0, response::MAC2)
    }
}

/// A 64-byte cookie reply.
#[derive(Debug, Clone, Copy)]
pub struct CookieReply<'a>(&'a [u8; COOKIE_REPLY_LEN]);

impl<'a> CookieReply<'a> {
    pub fn bytes(&self) -> &'a [u8; COOKIE_REPLY_LEN] {
        self.0
    }
    pub fn receiver_index(&self) -> u32 {
        read_u32(self.0, cookie_reply::RECEIVER)
    }
    pub fn nonce(&self) -> &'a [u8; 24] {
        field(self.0, cookie_reply::NONCE)
    }
    pub fn encrypted_cookie(&self) -> &'a [u8; 32] {
        field(self.0, cookie_reply::COOKIE)
    }
}

/// A transport data message: header, ciphertext, tag.
#[derive(Debug, Clone, Copy)]
pub struct TransportData<'a> {
    header: &'a [u8; TRANSPORT_HEADER_LEN],
    len: usize,
}

impl TransportData<'_> {
    pub fn receiver_index(&self) -> u32 {
        read_u32(self.header, transport::RECEIVER)
    }
    pub fn counter(&self) -> u64 {
        u64::from_le_bytes(*field::<8, TRANSPORT_HEADER_LEN>(
            self.header,
            transport::COUNTER,
        ))
    }
    /// Length of the encrypted payload including its tag.
    pub fn ciphertext_len(&self) -> usize {
        self.len - TRANSPORT_HEADER_LEN
    }
    /// The cipher the message says it was sealed with (its type).
    pub fn cipher(&self) -> DataCipher {
        if read_u32(self.header, 0) == MESSAGE_TYPE_TRANSPORT_DATA_AES {
            DataCipher::Aes256Gcm
        } else {
            DataCipher::ChaCha20Poly1305
        }
    }
}

/// Writes the transport header for `receiver_index` and `counter`, sealed
/// with `cipher`, into `header`.
pub fn write_transport_header(
    header: &mut [u8; TRANSPORT_HEADER_LEN],
    receiver_index: u32,
    counter: u64,
    cipher: DataCipher,
) {
    let message_type = match cipher {
        DataCipher::ChaCha20Poly1305 => MESSAGE_TYPE_TRANSPORT_DATA,
        DataCipher::Aes256Gcm => MESSAGE_TYPE_TRANSPORT_DATA_AES,
    };
    header[..4].copy_from_slice(&message_type.to_le_bytes());
    header[4..8].copy_from_slice(&receiver_index.to_le_bytes());
    header[8..16].copy_from_slice(&counter.to_le_bytes());
}

/// Plaintext length after WireGuard padding, never beyond `mtu` unless the
/// packet itself is already longer.
pub fn padded_len(payload_len: usize, mtu: usize) -> usize {
    let padded = payload_len.next_multiple_of(PADDING_MULTIPLE);
    if padded > mtu {
        payload_len.max(mtu)
    } else {
        padded
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_each_type_by_exact_length() {
        let mut init = [0u8; HANDSHAKE_INITIATION_LEN];
        init[0] = 1;
        init[4..8].copy_from_slice(&7u32.to_le_bytes());
        match Message::parse(&init).unwrap() {
            Message::HandshakeInitiation(view) => assert_eq!(view.sender_index(), 7),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            Message::parse(&init[..147]),
            Err(ParseError::WrongLength {
                expected: 148,
                actual: 147,
                ..
            })
        ));
        let mut data = [0u8; 40];
        data[0] = 4;
        data[8] = 9;
        match Message::parse(&data).unwrap() {
            Message::TransportData(view) => {
                assert_eq!(view.counter(), 9);
                assert_eq!(view.ciphertext_len(), 24);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn reserved_bytes_make_an_unknown_type() {
        let mut data = [0u8; 40];
        data[0] = 4;
        data[1] = 2;
        assert_eq!(
            Message::parse(&data).unwrap_err(),
            ParseError::UnknownType(0x204)
        );
        data[1] = 0;
        data[3] = 1;
        assert!(Message::parse(&data).is_err());
        assert_eq!(
            Message::parse(&[4, 0]).unwrap_err(),
            ParseError::TruncatedHeader
        );
    }

    #[test]
    fn the_data_type_carries_the_cipher() {
        let mut data = [0u8; 40];
        for cipher in [DataCipher::ChaCha20Poly1305, DataCipher::Aes256Gcm] {
            let header = data.first_chunk_mut().unwrap();
            write_transport_header(header, 5, 6, cipher);
            match Message::parse(&data).unwrap() {
                Message::TransportData(view) => {
                    assert_eq!(view.cipher(), cipher);
                    assert_eq!((view.receiver_index(), view.counter()), (5, 6));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(data[..4], [4, 1, 0, 0]);
    }

    #[test]
    fn padding_respects_mtu() {
        assert_eq!(padded_len(0, 1420), 0);
        assert_eq!(padded_len(1, 1420), 16);
        assert_eq!(padded_len(1419, 1420), 1420);
        assert_eq!(padded_len(1420, 1420), 1420);
        assert_eq!(padded_len(1500, 1420), 1500);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            if let Ok(message) = Message::parse(&bytes) {
                match message {
                    Message::HandshakeInitiation(m) => { m.sender_index(); m.mac2(); }
                    Message::HandshakeResponse(m) => { m.receiver_index(); m.mac2(); }
                    Message::CookieReply(m) => { m.encrypted_cookie(); }
                    Message::TransportData(m) => { m.counter(); }
                }
            }
        }
    }
}
