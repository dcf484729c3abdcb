//! The fake-TCP carrier: WireGuard datagrams one per TCP-shaped segment,
//! sent and received on a raw socket, with a handshake and sequence
//! numbers that a firewall tracking TCP accepts, and none of TCP's
//! retransmission, ordering or windows. A lost segment is a lost datagram,
//! as over UDP, so the tunnel's own TCP sees the path as it is and no
//! second retransmission timer fights its own (the TCP-in-TCP meltdown).
//!
//! ```text
//! send: datagram to D ─ a flow whose far end is D ─ TCP header (PSH|ACK,
//!       next sequence number) ─ sendmsg(header, datagram) on the raw socket
//! receive: raw socket (a socket filter passes only segments to our ports)
//!       ─ parse and check (segment.rs) ─ SYN: SYN-ACK, no state; ACK of our
//!       SYN-ACK: new flow; data: the datagram, packed like a GRO receive
//!       (packing.rs), from the flow's far end ─ the UDP receive pipeline
//! ```
//!
//! Ports: the listening side uses its `FallbackPort`; the connecting side
//! one port of its own for every flow. The kernel's TCP stack sees our
//! segments too, and finding no connection would answer each with a
//! reset, which a stateful firewall on the way takes as the end of the
//! connection. So each port is held by a real listening TCP socket whose
//! socket filter drops everything: the kernel finds it, runs the filter
//! before any TCP processing, and stays silent (no SYN-ACK, no reset),
//! while the raw socket, which gets its copy first, does the talking.
//! No firewall rule is needed, and no other program gets the ports.
//!
//! Needs `CAP_NET_RAW` (the raw socket) and IPv4 (a peer reached over
//! IPv6 stays on UDP). Flows that break (a reset), fail to open, or
//! (accepted) fall silent for `ACCEPTED_SILENCE_LIMIT` are closed and
//! reported as events; malformed segments and those with a bad checksum
//! are counted and dropped.

pub mod flow;
pub mod segment;

use std::collections::VecDeque;
use std::hash::BuildHasher;
use std::io::{self, IoSlice, IoSliceMut, Read};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::time::Instant;

use quinn_udp::RecvMeta;
use socket2::{Domain, Protocol, SockAddr, SockFilter, Socket, Type};

use self::flow::{Flow, FlowState, Received, syn_ack};
use self::segment::{ACK, FIN, RST, SYN, SYN_OPTIONS, SegmentHeader, parse_ipv4, write_header};
use super::framing::FAKE_TCP_ANSWER;
use super::packing::Packer;
use super::problem::starts_with_preamble;
use super::{ACCEPTED_SILENCE_LIMIT, MAX_CARRIERS};

/// What became of a flow, for the worker to tell the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEvent {
    Connected(SocketAddr),
    Accepted(SocketAddr),
    Closed(SocketAddr),
    /// Our SYN was answered with a reset: nothing listens there. The flow
    /// is gone.
    Refused(SocketAddr),
    /// The flow carried a TCP carrier's preamble: the far end uses the
    /// other carrier. The flow is closed (a `Closed` event follows).
    OtherCarrier(SocketAddr),
}

struct Entry {
    /// The far end: the address the node sees the flow as.
    remote: SocketAddrV4,
    /// Our address on the flow (the checksum covers it).
    local: Ipv4Addr,
    flow: Flow,
    accepted: bool,
    heard: bool,
    silent_since: Instant,
}

/// Counters of the fake-TCP carrier's receive side.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FakeTcpCounters {
    /// Segments refused: malformed, bad checksum, or for no flow.
    pub refused_segments: u64,
}

pub struct FakeTcp {
    socket: Socket,
    listen_port: Option<u16>,
    client_port: u16,
    /// Listening, filtered to accept nothing: they hold our ports and keep
    /// the kernel quiet on them (see the module notes).
    _reservations: Vec<Socket>,
    flows: Vec<Option<Entry>>,
    len: usize,
    /// Keys the SYN-ACK sequence numbers (SYN cookies): an accepted flow
    /// exists only once its ACK proves the SYN-ACK arrived, so spoofed
    /// SYNs cost no state.
    cookies: std::collections::hash_map::RandomState,
    events: VecDeque<FlowEvent>,
    scratch: Vec<u8>,
    counters: FakeTcpCounters,
}

impl FakeTcp {
    /// Opens the raw socket, listening on `listen_port` if given.
    pub fn open(listen_port: Option<u16>, fwmark: u32) -> io::Result<Self> {
        let mut reservations = Vec::new();
        let reserve = |port: u16| -> io::Result<(Socket, u16)> {
            let socket = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            // Filtered before it listens: no segment ever reaches it.
            socket.attach_filter(&[SockFilter::new(RET_K, 0, 0, 0)])?;
            socket.bind(&SockAddr::from(SocketAddrV4::new(
                Ipv4Addr::UNSPECIFIED,
                port,
            )))?;
            socket.listen(1)?;
            let port = socket
                .local_addr()?
                .as_socket()
                .map_or(port, |address| address.port());
            Ok((socket, port))
        };
        if let Some(port) = listen_port {
            reservations.push(reserve(port)?.0);
        }
        let (client, client_port) = reserve(0)?;
        reservations.push(client);
        let socket = Socket::new(Domain::IPV4, Type::RAW, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        if fwmark != 0 {
            socket.set_mark(fwmark)?;
        }
        // Larger tunnel MTUs fragment, as the UDP socket's datagrams do.
        fjord_sys::socket::set_int_option(
            socket_fd(&socket),
            libc::IPPROTO_IP,
            libc::IP_MTU_DISCOVER,
            libc::IP_PMTUDISC_DONT,
        )?;
        for buffer in [
            fjord_sys::socket::SocketBuffer::Send,
            fjord_sys::socket::SocketBuffer::Receive,
        ] {
            let _ = fjord_sys::socket::force_buffer_size(socket_fd(&socket), buffer, 8 << 20);
        }
        socket.attach_filter(&port_filter(
            listen_port.unwrap_or(client_port),
            client_port,
        ))?;
        let mut fake = Self {
            socket,
            listen_port,
            client_port,
            _reservations: reservations,
            flows: Vec::new(),
            len: 0,
            cookies: std::collections::hash_map::RandomState::new(),
            events: VecDeque::new(),
            scratch: vec![0; 65_536],
            counters: FakeTcpCounters::default(),
        };
        // Segments queued before the filter was attached are anyone's.
        while (&fake.socket).read(&mut fake.scratch).is_ok() {}
        Ok(fake)
    }

    /// Our ports (listening, connecting).
    pub fn ports(&self) -> Vec<u16> {
        self.listen_port
            .into_iter()
            .chain(std::iter::once(self.client_port))
            .collect()
    }

    pub fn fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn counters(&self) -> FakeTcpCounters {
        self.counters
    }

    pub fn poll_event(&mut self) -> Option<FlowEvent> {
        self.events.pop_front()
    }

    /// Whether a flow goes to `remote`.
    pub fn carries(&self, remote: SocketAddr) -> bool {
        self.position(remote).is_some()
    }

    /// Whether the flow to `remote` was opened by the far end; `None`
    /// without a flow there.
    pub fn accepted(&self, remote: SocketAddr) -> Option<bool> {
        let slot = self.position(remote)?;
        self.flows[slot].as_ref().map(|entry| entry.accepted)
    }

    fn position(&self, remote: SocketAddr) -> Option<usize> {
        let SocketAddr::V4(remote) = remote else {
            return None;
        };
        self.flows.iter().position(|entry| {
            entry.as_ref().is_some_and(|entry| {
                entry.remote == remote && entry.flow.state != FlowState::Closed
            })
        })
    }

    /// Starts a flow to `remote` (its SYN leaves now).
    pub fn connect(&mut self, now: Instant, remote: SocketAddr, fwmark: u32) -> io::Result<()> {
        let SocketAddr::V4(remote) = remote else {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "the fake-TCP carrier is IPv4 only",
            ));
        };
        if self.position(remote.into()).is_some() {
            return Ok(());
        }
        // A closed flow that lingers there would take the new one's segments.
        for entry in &mut self.flows {
            if entry.as_ref().is_some_and(|entry| entry.remote == remote) {
                *entry = None;
                self.len -= 1;
            }
        }
        let local = route_source(remote, fwmark)?;
        let (flow, syn) = Flow::connect(now, self.client_port, remote.port(), random_u32());
        self.insert(Entry {
            remote,
            local,
            flow,
            accepted: false,
            heard: false,
            silent_since: now,
        })?;
        self.send_segment(remote, local, &syn, &SYN_OPTIONS, &[]);
        Ok(())
    }

    fn insert(&mut self, entry: Entry) -> io::Result<()> {
        if self.len >= MAX_CARRIERS {
            return Err(io::Error::other("too many carrier flows"));
        }
        self.len += 1;
        match self.flows.iter().position(Option::is_none) {
            Some(slot) => self.flows[slot] = Some(entry),
            None => self.flows.push(Some(entry)),
        }
        Ok(())
    }

    /// Closes the flow to `remote`, telling the peer with a FIN.
    pub fn close(&mut self, remote: SocketAddr) -> bool {
        let Some(slot) = self.position(remote) else {
            return false;
        };
        if let Some(mut entry) = self.flows[slot].take() {
            self.len -= 1;
            let fin = entry.flow.close();
            self.send_segment(entry.remote, entry.local, &fin, &[], &[]);
        }
        true
    }

    /// Sends `datagrams` on the flow to `destination`, one segment each;
    /// (sent, dropped), or `None` if no flow goes there.
    pub fn send<'a>(
        &mut self,
        destination: SocketAddr,
        datagrams: impl Iterator<Item = &'a [u8]>,
    ) -> Option<(u64, u64)> {
        let slot = self.position(destination)?;
        let (mut sent, mut dropped) = (0, 0);
        for datagram in datagrams {
            let entry = self.flows[slot].as_mut()?;
            let (remote, local) = (entry.remote, entry.local);
            match entry.flow.data(datagram.len()) {
                Some(header) if self.send_segment(remote, local, &header, &[], datagram) => {
                    sent += 1;
                }
                _ => dropped += 1,
            }
        }
        Some((sent, dropped))
    }

    /// One segment; whether the kernel took it (a full socket drops it,
    /// as a full UDP path would).
    fn send_segment(
        &self,
        remote: SocketAddrV4,
        local: Ipv4Addr,
        header: &SegmentHeader,
        options: &[u8],
        payload: &[u8],
    ) -> bool {
        let mut bytes = [0u8; 60];
        let Some(len) = write_header(&mut bytes, header, options, payload, local, *remote.ip())
        else {
            return false;
        };
        let to = SockAddr::from(SocketAddrV4::new(*remote.ip(), 0));
        let pieces = [IoSlice::new(&bytes[..len]), IoSlice::new(payload)];
        match self.socket.send_to_vectored(&pieces, &to) {
            Ok(_) => true,
            Err(error) => {
                tracing::trace!(%error, %remote, "fake-TCP send failed");
                false
            }
        }
    }

    /// Receives segments, handles the handshakes among them, and packs the
    /// datagrams into `buffers` like a GRO receive. `WouldBlock` once
    /// nothing more waits and no datagram came.
    pub fn recv(
        &mut self,
        now: Instant,
        buffers: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let mut packer = Packer::new(buffers.len().min(meta.len()));
        let mut scratch = std::mem::take(&mut self.scratch);
        while packer.has_room() {
            let len = match (&self.socket).read(&mut scratch) {
                Ok(len) => len,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    self.scratch = scratch;
                    return Err(error);
                }
            };
            let Ok(segment) = parse_ipv4(&scratch[..len]) else {
                self.counters.refused_segments += 1;
                continue;
            };
            let remote = SocketAddrV4::new(segment.source, segment.header.source_port);
            if let Some(source) = self.take(now, remote, &segment)
                && !segment.payload.is_empty()
            {
                // Room was checked before the read: a datagram always fits.
                packer.push(buffers, meta, source, segment.payload);
            }
        }
        self.scratch = scratch;
        match packer.finish(meta) {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            messages => Ok(messages),
        }
    }

    /// Handles one segment from `remote`; the source to report its payload
    /// under, if the payload is a datagram.
    fn take(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        segment: &segment::ReceivedSegment<'_>,
    ) -> Option<super::packing::Source> {
        let header = &segment.header;
        let slot = self.flows.iter().position(|entry| {
            entry.as_ref().is_some_and(|entry| {
                entry.remote == remote && entry.flow.local_port == header.destination_port
            })
        });
        let Some(slot) = slot else {
            return self.take_unknown(now, remote, segment);
        };
        let entry = self.flows[slot].as_mut()?;
        if header.flags & (SYN | ACK) == SYN && entry.accepted {
            if header.sequence != entry.flow.peer_initial {
                // The peer starts over (it restarted): this flow is gone.
                self.forget_flow(slot, remote);
            }
            // A new SYN, or ours repeated after its flow opened: answered
            // alike, statelessly.
            return self.take_unknown(now, remote, segment);
        }
        entry.heard = true;
        let mut reply = None;
        let received = entry
            .flow
            .receive(header, segment.payload.len(), &mut reply);
        let local = entry.local;
        if let Some(reply) = reply {
            self.send_segment(remote, local, &reply, &[], &[]);
        }
        match received {
            Received::Datagram if starts_with_preamble(segment.payload) => {
                // A TCP carrier's first bytes: the far end speaks the
                // other carrier, and nothing it sends is a datagram. The
                // flow is closed but lingers (`LINGER`), so the frames
                // that follow are swallowed instead of opening a new one.
                // Our answer tells the far end the same, even when none
                // of our datagrams reached it before its preamble came.
                self.events
                    .push_back(FlowEvent::OtherCarrier(remote.into()));
                if let Some(entry) = self.flows[slot].as_mut() {
                    let answer = entry.flow.data(FAKE_TCP_ANSWER.len());
                    let fin = entry.flow.close();
                    if let Some(answer) = answer {
                        self.send_segment(remote, local, &answer, &[], &FAKE_TCP_ANSWER);
                    }
                    self.send_segment(remote, local, &fin, &[], &[]);
                }
                self.events.push_back(FlowEvent::Closed(remote.into()));
                None
            }
            Received::Datagram => Some((remote.into(), Some(local.into()))),
            Received::Established => {
                self.events.push_back(FlowEvent::Connected(remote.into()));
                None
            }
            Received::Closed => {
                self.forget_flow(slot, remote);
                None
            }
            Received::Refused => {
                self.flows[slot] = None;
                self.len -= 1;
                self.events.push_back(FlowEvent::Refused(remote.into()));
                None
            }
            Received::Nothing => None,
        }
    }

    /// Forgets the flow in `slot`, which ended on the far side (or went
    /// silent), and tells the worker.
    fn forget_flow(&mut self, slot: usize, remote: SocketAddrV4) {
        self.flows[slot] = None;
        self.len -= 1;
        self.events.push_back(FlowEvent::Closed(remote.into()));
    }

    /// A segment for no flow: a SYN to our listening port is answered
    /// (statelessly); the ACK that answers our SYN-ACK, or data carrying
    /// it, opens an accepted flow. Anything else is refused.
    fn take_unknown(
        &mut self,
        now: Instant,
        remote: SocketAddrV4,
        segment: &segment::ReceivedSegment<'_>,
    ) -> Option<super::packing::Source> {
        let header = &segment.header;
        if Some(header.destination_port) != self.listen_port || header.flags & RST != 0 {
            self.counters.refused_segments += 1;
            return None;
        }
        let cookie = self.cookie(remote);
        if header.flags & (SYN | ACK) == SYN {
            let answer = syn_ack(header, cookie);
            self.send_segment(remote, segment.destination, &answer, &SYN_OPTIONS, &[]);
            return None;
        }
        // The handshake's last ACK, or (that ACK lost) data: until we send
        // data ourselves, everything the peer sends acknowledges our
        // SYN-ACK, whose sequence number the cookie gives.
        let peer_initial = header.sequence.wrapping_sub(1);
        let proves_handshake = header.flags & (SYN | ACK | FIN) == ACK
            && header.acknowledgement == cookie.wrapping_add(1);
        if !proves_handshake {
            self.counters.refused_segments += 1;
            return None;
        }
        let flow = Flow::accepted(header.destination_port, remote.port(), cookie, peer_initial);
        let entry = Entry {
            remote,
            local: segment.destination,
            flow,
            accepted: true,
            heard: true,
            silent_since: now,
        };
        if self.insert(entry).is_err() {
            self.counters.refused_segments += 1;
            return None;
        }
        self.events.push_back(FlowEvent::Accepted(remote.into()));
        // Data that completed the handshake goes through the flow now.
        self.take(now, remote, segment)
    }

    /// Our first sequence number toward `remote`: only the one we sent a
    /// SYN-ACK to can acknowledge it.
    fn cookie(&self, remote: SocketAddrV4) -> u32 {
        // Truncation keeps the low 32 bits, random enough for a sequence number.
        self.cookies.hash_one(remote) as u32
    }

    /// Sends SYNs that are due again, closes accepted flows that went
    /// silent, and forgets closed ones that lingered. Call about once a
    /// second.
    pub fn tick(&mut self, now: Instant) {
        let mut syns = Vec::new();
        for slot in 0..self.flows.len() {
            let Some(entry) = self.flows[slot].as_mut() else {
                continue;
            };
            if let Some(syn) = entry.flow.syn_due(now) {
                syns.push((entry.remote, entry.local, syn));
            }
            if std::mem::take(&mut entry.heard) {
                entry.silent_since = now;
            }
            let silent = now.saturating_duration_since(entry.silent_since);
            if entry.flow.state == FlowState::Closed && silent >= LINGER {
                self.flows[slot] = None;
                self.len -= 1;
            } else if entry.accepted && silent >= ACCEPTED_SILENCE_LIMIT {
                let remote = entry.remote;
                self.forget_flow(slot, remote);
            }
        }
        for (remote, local, syn) in syns {
            self.send_segment(remote, local, &syn, &SYN_OPTIONS, &[]);
        }
    }
}

/// A socket filter (classic BPF, run by the kernel on each packet the raw
/// socket would receive, starting at the IPv4 header) that passes only
/// TCP segments to `first` or `second`: without it the socket would copy
/// every TCP packet of the host, the tunnel's own included.
fn port_filter(first: u16, second: u16) -> [SockFilter; 6] {
    const LDX_MSH: u16 = 0x01 | 0x10 | 0xa0; // X = 4 * (packet[k] & 0xf)
    const LDH_IND: u16 = 0x08 | 0x40; // A = u16 at packet[X + k]
    const JEQ_K: u16 = 0x05 | 0x10; // if A == k
    [
        SockFilter::new(LDX_MSH, 0, 0, 0),
        SockFilter::new(LDH_IND, 0, 0, 2),
        SockFilter::new(JEQ_K, 1, 0, u32::from(first)),
        SockFilter::new(JEQ_K, 0, 1, u32::from(second)),
        SockFilter::new(RET_K, 0, 0, u32::from(u16::MAX)),
        SockFilter::new(RET_K, 0, 0, 0),
    ]
}

/// How long a flow closed because the far end speaks the other carrier
/// stays, swallowing what that end still sends.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

/// Classic BPF "return k": pass k bytes of the packet (0: drop it).
const RET_K: u16 = 0x06;

/// Our address toward `remote`, as the routing table (and `fwmark`)
/// picks it: a UDP socket connected there (nothing is sent) knows it.
fn route_source(remote: SocketAddrV4, fwmark: u32) -> io::Result<Ipv4Addr> {
    let probe = UdpSocket::bind((Ipv4Addr::UNSPECIFIED, 0))?;
    if fwmark != 0 {
        socket2::SockRef::from(&probe).set_mark(fwmark)?;
    }
    probe.connect(remote)?;
    match probe.local_addr()? {
        SocketAddr::V4(local) => Ok(*local.ip()),
        SocketAddr::V6(_) => Err(io::ErrorKind::AddrNotAvailable.into()),
    }
}

fn random_u32() -> u32 {
    let mut bytes = [0u8; 4];
    // A predictable first sequence number only makes the flow easier to
    // spoof resets into; WireGuard authenticates everything it carries.
    let _ = getrandom::fill(&mut bytes);
    u32::from_ne_bytes(bytes)
}

fn socket_fd(socket: &Socket) -> std::os::fd::BorrowedFd<'_> {
    use std::os::fd::AsFd;
    socket.as_fd()
}

#[cfg(test)]
mod tests;
