//! One fake-TCP flow: the handshake a firewall expects to see, then
//! datagrams one per segment, with sequence and acknowledgement numbers
//! that move as a real connection's would. No retransmission, no window,
//! no ordering: a lost segment is a lost datagram, exactly as over UDP.
//!
//! ```text
//! ours:     SynSent ──SYN-ACK that acknowledges our SYN / send ACK──▶ Established
//!           (the SYN again every SYN_RETRY until the caller gives up)
//! accepted: a SYN is answered with a SYN-ACK and no state (its sequence
//!           number is a keyed hash of the SYN, like a SYN cookie); the ACK
//!           or first data that acknowledges it creates the flow, Established
//! either:   FIN ─▶ Closed (sent when we close); resets are ignored: the
//!           kernel's own TCP answers our segments with them, and a
//!           forged one must not cut the tunnel. One exception: a reset
//!           that acknowledges our SYN (only who saw the SYN knows its
//!           random sequence number) is the far host's kernel saying
//!           nothing listens there: SynSent ─▶ Closed, refused
//! ```
//!
//! Sans-I/O: inputs are received segments and `now`; outputs are segments
//! to send (headers with their flags, sequence and acknowledgement) and
//! what became of the flow.

use std::time::{Duration, Instant};

use super::segment::{ACK, FIN, PSH, RST, SYN, SegmentHeader};

/// How often a SYN that got no answer is sent again.
pub const SYN_RETRY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// Our SYN is out, last sent at the instant.
    SynSent(Instant),
    Established,
    Closed,
}

/// What a received segment did to the flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Nothing to report.
    Nothing,
    /// The handshake completed: the flow carries datagrams now.
    Established,
    /// The payload is a datagram for the tunnel.
    Datagram,
    /// The peer closed the flow.
    Closed,
    /// The far host refused our SYN (a reset acknowledging it): nothing
    /// listens at that port.
    Refused,
}

pub struct Flow {
    pub local_port: u16,
    pub remote_port: u16,
    pub state: FlowState,
    /// Sequence number of our next byte.
    send_next: u32,
    /// The peer's next sequence number as far as we have seen (the
    /// highest, holes or not: nothing is waited for).
    receive_next: u32,
    /// The peer's first sequence number, to tell its SYN repeated from a
    /// new one (the peer starting over).
    pub peer_initial: u32,
}

/// The SYN-ACK that answers `syn` with our first sequence number
/// `initial_sequence`.
pub fn syn_ack(syn: &SegmentHeader, initial_sequence: u32) -> SegmentHeader {
    SegmentHeader {
        source_port: syn.destination_port,
        destination_port: syn.source_port,
        sequence: initial_sequence,
        acknowledgement: syn.sequence.wrapping_add(1),
        flags: SYN | ACK,
    }
}

impl Flow {
    /// Our flow to `remote_port`, starting at `initial_sequence` (random);
    /// the SYN to send.
    pub fn connect(
        now: Instant,
        local_port: u16,
        remote_port: u16,
        initial_sequence: u32,
    ) -> (Self, SegmentHeader) {
        let flow = Self {
            local_port,
            remote_port,
            state: FlowState::SynSent(now),
            send_next: initial_sequence.wrapping_add(1),
            receive_next: 0,
            peer_initial: 0,
        };
        let syn = flow.header(SYN, initial_sequence, 0);
        (flow, syn)
    }

    /// A flow the peer opened: it sent a SYN with `peer_initial`, we
    /// answered with `initial_sequence`, and its ACK (or data) has come.
    pub fn accepted(
        local_port: u16,
        remote_port: u16,
        initial_sequence: u32,
        peer_initial: u32,
    ) -> Self {
        Self {
            local_port,
            remote_port,
            state: FlowState::Established,
            send_next: initial_sequence.wrapping_add(1),
            receive_next: peer_initial.wrapping_add(1),
            peer_initial,
        }
    }

    fn header(&self, flags: u8, sequence: u32, acknowledgement: u32) -> SegmentHeader {
        SegmentHeader {
            source_port: self.local_port,
            destination_port: self.remote_port,
            sequence,
            acknowledgement,
            flags,
        }
    }

    /// Takes a segment from the peer; `reply` receives a segment to send
    /// back, if one is due.
    pub fn receive(
        &mut self,
        header: &SegmentHeader,
        payload_len: usize,
        reply: &mut Option<SegmentHeader>,
    ) -> Received {
        if header.flags & RST != 0 {
            let refuses_our_syn = matches!(self.state, FlowState::SynSent(_))
                && header.flags & ACK != 0
                && header.acknowledgement == self.send_next;
            if refuses_our_syn {
                self.state = FlowState::Closed;
                return Received::Refused;
            }
            return Received::Nothing;
        }
        if header.flags & FIN != 0 {
            self.state = FlowState::Closed;
            return Received::Closed;
        }
        match self.state {
            FlowState::Closed => Received::Nothing,
            FlowState::SynSent(_) => {
                let answers_us = header.flags & (SYN | ACK) == SYN | ACK
                    && header.acknowledgement == self.send_next;
                if !answers_us {
                    return Received::Nothing;
                }
                self.peer_initial = header.sequence;
                self.receive_next = header.sequence.wrapping_add(1);
                self.state = FlowState::Established;
                *reply = Some(self.header(ACK, self.send_next, self.receive_next));
                Received::Established
            }
            FlowState::Established => {
                if header.flags & SYN != 0 {
                    // Our ACK was lost and the peer repeats its SYN-ACK:
                    // acknowledge it again.
                    if header.flags & ACK != 0 && header.sequence == self.peer_initial {
                        *reply = Some(self.header(ACK, self.send_next, self.receive_next));
                    }
                    return Received::Nothing;
                }
                if header.flags & ACK == 0 || payload_len == 0 {
                    return Received::Nothing;
                }
                let end = header.sequence.wrapping_add(payload_len as u32);
                // Sequence numbers compare modulo 2^32: later if within
                // half the space ahead.
                if end.wrapping_sub(self.receive_next) as i32 > 0 {
                    self.receive_next = end;
                }
                Received::Datagram
            }
        }
    }

    /// The header of a data segment carrying `payload_len` bytes; `None`
    /// unless established.
    pub fn data(&mut self, payload_len: usize) -> Option<SegmentHeader> {
        if self.state != FlowState::Established {
            return None;
        }
        let header = self.header(PSH | ACK, self.send_next, self.receive_next);
        self.send_next = self.send_next.wrapping_add(payload_len as u32);
        Some(header)
    }

    /// The SYN again, if one is due at `now` (our flow, unanswered).
    pub fn syn_due(&mut self, now: Instant) -> Option<SegmentHeader> {
        let FlowState::SynSent(sent) = self.state else {
            return None;
        };
        if now.saturating_duration_since(sent) < SYN_RETRY {
            return None;
        }
        self.state = FlowState::SynSent(now);
        Some(self.header(SYN, self.send_next.wrapping_sub(1), 0))
    }

    /// Closes the flow; the FIN to send, so the peer closes it too.
    pub fn close(&mut self) -> SegmentHeader {
        self.state = FlowState::Closed;
        self.header(FIN | ACK, self.send_next, self.receive_next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client flow and the server flow its handshake created.
    fn established(now: Instant) -> (Flow, Flow) {
        let (mut client, syn) = Flow::connect(now, 40_000, 443, 1_000);
        let answer = syn_ack(&syn, 9_000);
        assert_eq!(answer.acknowledgement, 1_001);
        let mut reply = None;
        assert_eq!(
            client.receive(&answer, 0, &mut reply),
            Received::Established
        );
        let ack = reply.take().expect("the handshake's last ACK");
        assert_eq!((ack.sequence, ack.acknowledgement), (1_001, 9_001));
        assert_eq!(ack.flags, ACK);
        let server = Flow::accepted(443, 40_000, 9_000, ack.sequence.wrapping_sub(1));
        (client, server)
    }

    #[test]
    fn the_handshake_and_data_move_sequence_numbers_as_tcp_does() {
        let now = Instant::now();
        let (mut client, mut server) = established(now);
        let first = client.data(100).unwrap();
        assert_eq!((first.sequence, first.flags), (1_001, PSH | ACK));
        let second = client.data(50).unwrap();
        assert_eq!(second.sequence, 1_101);
        let mut reply = None;
        // The first is lost: the second still arrives, and is acknowledged.
        assert_eq!(server.receive(&second, 50, &mut reply), Received::Datagram);
        let answer = server.data(10).unwrap();
        assert_eq!((answer.sequence, answer.acknowledgement), (9_001, 1_151));
        // The late first one is a datagram too; the acknowledgement stays.
        assert_eq!(server.receive(&first, 100, &mut reply), Received::Datagram);
        assert_eq!(server.data(10).unwrap().acknowledgement, 1_151);
        assert!(reply.is_none(), "data is never answered by itself");
    }

    #[test]
    fn a_lost_syn_or_ack_is_sent_again() {
        let now = Instant::now();
        let (mut client, syn) = Flow::connect(now, 40_000, 443, u32::MAX);
        assert_eq!(syn.sequence, u32::MAX);
        assert!(client.syn_due(now + SYN_RETRY / 2).is_none());
        let again = client.syn_due(now + SYN_RETRY).unwrap();
        assert_eq!(again, syn, "the same SYN (its sequence wraps past zero)");
        let answer = syn_ack(&again, 5);
        let mut reply = None;
        assert_eq!(
            client.receive(&answer, 0, &mut reply),
            Received::Established
        );
        // The ACK was lost, the SYN-ACK comes again: acknowledged again.
        let first_ack = reply.take();
        assert_eq!(client.receive(&answer, 0, &mut reply), Received::Nothing);
        assert_eq!(reply, first_ack);
        assert!(client.syn_due(now + SYN_RETRY * 5).is_none());
    }

    #[test]
    fn strangers_answers_and_resets_are_ignored_a_fin_closes() {
        let now = Instant::now();
        let (mut client, _) = Flow::connect(now, 40_000, 443, 1_000);
        let wrong = SegmentHeader {
            source_port: 443,
            destination_port: 40_000,
            sequence: 77,
            acknowledgement: 12_345,
            flags: SYN | ACK,
        };
        let mut reply = None;
        assert_eq!(client.receive(&wrong, 0, &mut reply), Received::Nothing);
        assert!(client.data(10).is_none(), "not established");
        let reset = SegmentHeader {
            flags: RST | ACK,
            ..wrong
        };
        assert_eq!(client.receive(&reset, 0, &mut reply), Received::Nothing);
        assert!(matches!(client.state, FlowState::SynSent(_)));
        // The far kernel's reset answers our SYN (acknowledges it): refused.
        let refusal = SegmentHeader {
            sequence: 0,
            acknowledgement: 1_001,
            ..reset
        };
        assert_eq!(client.receive(&refusal, 0, &mut reply), Received::Refused);
        assert_eq!(client.state, FlowState::Closed);
        let (mut client, mut server) = established(now);
        let fin = client.close();
        assert_eq!(client.state, FlowState::Closed);
        assert_eq!(server.receive(&reset, 0, &mut reply), Received::Nothing);
        assert_eq!(server.state, FlowState::Established);
        assert_eq!(server.receive(&fin, 0, &mut reply), Received::Closed);
        assert_eq!(server.state, FlowState::Closed);
        assert!(server.data(1).is_none());
    }
}
