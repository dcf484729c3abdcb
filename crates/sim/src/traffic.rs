//! What each member puts on the wire, by kind. The sender sees only the
//! WireGuard message type; what a transport message carried (a mesh
//! control message or a user's packet) is known once its receiver opened
//! it, so that split is counted at delivery, for the sender. A transport
//! message that is lost is counted as sent but as neither.

use std::ops::{AddAssign, Sub};

use fjord_proto::Received;
use fjord_proto::extension::{ExtensionKind, is_extension};
use fjord_proto::wire::{TRANSPORT_HEADER_LEN, TRANSPORT_MIN_LEN};

/// A WireGuard message's kind, from its first byte and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireKind {
    /// Initiation, response or cookie reply.
    Handshake,
    /// A transport message with nothing inside.
    Keepalive,
    /// A transport message with a payload: a mesh message or user data.
    Transport,
    /// A NAT punch (low TTL, never delivered) or anything else.
    Other,
}

impl WireKind {
    pub fn of(datagram: &[u8]) -> Self {
        match datagram.first() {
            Some(1..=3) => Self::Handshake,
            Some(4) if datagram.len() == TRANSPORT_MIN_LEN => Self::Keepalive,
            Some(4) => Self::Transport,
            _ => Self::Other,
        }
    }
}

/// Datagrams and UDP payload bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count {
    pub datagrams: u64,
    pub bytes: u64,
}

impl Count {
    fn add(&mut self, len: usize) {
        self.datagrams += 1;
        self.bytes += len as u64;
    }
}

impl AddAssign for Count {
    fn add_assign(&mut self, other: Self) {
        self.datagrams += other.datagrams;
        self.bytes += other.bytes;
    }
}

impl Sub for Count {
    type Output = Self;
    fn sub(self, other: Self) -> Self {
        Self {
            datagrams: self.datagrams - other.datagrams,
            bytes: self.bytes - other.bytes,
        }
    }
}

/// One member's traffic, as a sender.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Traffic {
    pub handshake: Count,
    pub keepalive: Count,
    pub transport: Count,
    pub other: Count,
    /// Transport messages its receiver handed to the mesh (or relayed).
    pub control: Count,
    /// Transport messages its receiver delivered as user packets.
    pub data: Count,
}

impl Traffic {
    pub(crate) fn sent(&mut self, kind: WireKind, len: usize) {
        match kind {
            WireKind::Handshake => self.handshake.add(len),
            WireKind::Keepalive => self.keepalive.add(len),
            WireKind::Transport => self.transport.add(len),
            WireKind::Other => self.other.add(len),
        }
    }

    /// A transport message of ours that the receiver opened as `outcome`.
    pub(crate) fn delivered(&mut self, kind: WireKind, len: usize, outcome: &Received) {
        if kind != WireKind::Transport {
            return;
        }
        match outcome {
            Received::Control | Received::Extension { .. } => self.control.add(len),
            Received::Data { .. } | Received::Decompressed { .. } | Received::Frame { .. } => {
                self.data.add(len)
            }
            Received::Keepalive { .. } | Received::Dropped(_) => {}
        }
    }

    /// Every datagram sent.
    pub fn total(&self) -> Count {
        let mut total = self.handshake;
        total += self.keepalive;
        total += self.transport;
        total += self.other;
        total
    }
}

impl AddAssign for Traffic {
    fn add_assign(&mut self, other: Self) {
        self.handshake += other.handshake;
        self.keepalive += other.keepalive;
        self.transport += other.transport;
        self.other += other.other;
        self.control += other.control;
        self.data += other.data;
    }
}

impl Sub for Traffic {
    type Output = Self;
    fn sub(self, other: Self) -> Self {
        Self {
            handshake: self.handshake - other.handshake,
            keepalive: self.keepalive - other.keepalive,
            transport: self.transport - other.transport,
            other: self.other - other.other,
            control: self.control - other.control,
            data: self.data - other.data,
        }
    }
}

/// Every member's control messages together, by fjord message kind:
/// what the control bytes are spent on. One table for the whole mesh,
/// so the simulator's own memory does not grow with it per member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlKinds {
    /// By kind code (`ExtensionKind::code`).
    by_code: Vec<Count>,
}

impl Default for ControlKinds {
    fn default() -> Self {
        Self {
            by_code: vec![Count::default(); 256],
        }
    }
}

impl ControlKinds {
    /// A transport message the receiver handled as control, opened in
    /// place: its plaintext (marker, kind, ...) follows the header. A
    /// relayed datagram stays sealed and is counted under no kind.
    pub(crate) fn delivered(&mut self, opened: &[u8], len: usize, outcome: &Received) {
        if !matches!(outcome, Received::Control | Received::Extension { .. }) {
            return;
        }
        let Some(plaintext) = opened.get(TRANSPORT_HEADER_LEN..) else {
            return;
        };
        if let (true, Some(&code)) = (is_extension(plaintext), plaintext.get(1)) {
            self.by_code[usize::from(code)].add(len);
        }
    }

    /// Each kind that was sent, with its count.
    pub fn kinds(&self) -> Vec<(ExtensionKind, Count)> {
        (0..=u8::MAX)
            .filter_map(|code| {
                let count = self.by_code[usize::from(code)];
                let kind = ExtensionKind::from_code(code)?;
                (count.datagrams > 0).then_some((kind, count))
            })
            .collect()
    }
}

impl Sub for &ControlKinds {
    type Output = ControlKinds;
    fn sub(self, other: Self) -> ControlKinds {
        ControlKinds {
            by_code: self
                .by_code
                .iter()
                .zip(&other.by_code)
                .map(|(a, b)| *a - *b)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_come_from_the_message_type_and_length() {
        assert_eq!(WireKind::of(&[1; 148]), WireKind::Handshake);
        assert_eq!(WireKind::of(&[4; TRANSPORT_MIN_LEN]), WireKind::Keepalive);
        assert_eq!(WireKind::of(&[4; 64]), WireKind::Transport);
        assert_eq!(WireKind::of(b"\x1ffjpunch"), WireKind::Other);
    }
}
