//! One carrier connection: a non-blocking TCP stream with small queues,
//! datagrams framed into it (`framing.rs`) and read back out in batches
//! shaped like a GRO receive.
//!
//! Sending never queues beyond the kernel's small unsent queue
//! (`TCP_NOTSENT_LOWAT`): a write the kernel refuses drops the datagrams,
//! and the inner TCP sees loss, as it would on a congested UDP path. The
//! only bytes kept here are the preamble and the rest of a frame a short
//! write cut (a frame cannot be dropped halfway without breaking the
//! stream); while they wait, new datagrams are dropped.

use std::io::{self, IoSlice, IoSliceMut, Read, Write};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use quinn_udp::RecvMeta;
use socket2::{Domain, Protocol, SockRef, Socket, Type};

use super::framing::{FRAME_HEADER_LEN, FrameDecoder, PREAMBLE, frame_header};
use super::packing::Packer;
use super::problem::{CarrierKind, CarrierProblem, starts_like_fake_tcp};
use crate::udp::canonical;

/// Most unsent bytes the kernel may hold for a carrier before writes are
/// refused (and datagrams dropped): about a millisecond at 1 Gbit/s, so
/// a backed-up carrier delays what it carries by that much, not by a
/// socket buffer's worth of seconds. In flight (sent, not yet
/// acknowledged) the congestion window decides, as for any TCP.
pub const UNSENT_LIMIT_BYTES: u32 = 128 << 10;
/// A path that acknowledges nothing this long closes the connection.
const USER_TIMEOUT: Duration = Duration::from_secs(15);
/// Congestion control asked for: BBR paces by measured bandwidth and
/// round trip and does not read random loss as congestion, so the
/// carrier keeps its rate on a lossy path where CUBIC would collapse
/// (what makes TCP in TCP crawl). The system default when unavailable.
const CONGESTION_CONTROL: &[u8] = b"bbr";
/// The least retransmission timeout (Linux's default is 200 ms). A lost
/// segment stalls everything behind it until it is resent, and under
/// random loss a lost retransmission waits for the timeout: with the
/// default, each costs the tunnel 200 ms; the timeout is still at least
/// the smoothed round trip plus this. Measured in the lab's loss suite
/// (docs/design.md).
const RTO_MIN: Duration = Duration::from_millis(20);
/// `TCP_RTO_MIN_US` in linux/tcp.h.
const TCP_RTO_MIN_US: libc::c_int = 45;
/// Bytes read from the stream at once.
const RECEIVE_BUFFER_BYTES: usize = 256 << 10;
/// Datagrams per `writev` (two iovecs each, under IOV_MAX).
const WRITE_BATCH: usize = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    Connecting,
    Open,
    Closed,
}

/// What one send did with its datagrams.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SendOutcome {
    pub sent: u64,
    pub dropped: u64,
}

pub struct Connection {
    stream: mio::net::TcpStream,
    /// The far end, canonical: the address the node sees datagrams from.
    remote: SocketAddr,
    local: Option<IpAddr>,
    /// Opened by the peer (accepted) rather than by us.
    accepted: bool,
    state: LinkState,
    /// Bytes that must go out before any new frame (see the module notes).
    backlog: Vec<u8>,
    decoder: FrameDecoder,
    opened: Instant,
    /// Whether bytes arrived since the last [`Connection::silent_since`].
    heard: bool,
    silent_since: Instant,
    /// The stream began with a bare WireGuard message or fake TCP's
    /// answer instead of the preamble: the far end sends fake TCP.
    fake_tcp_seen: bool,
}

impl Connection {
    /// Starts connecting to `remote` (non-blocking); the worker learns the
    /// outcome when the socket becomes writable ([`Connection::finish_connect`]).
    pub fn connect(now: Instant, remote: SocketAddr, fwmark: u32) -> io::Result<Self> {
        let domain = match remote {
            SocketAddr::V4(_) => Domain::IPV4,
            SocketAddr::V6(_) => Domain::IPV6,
        };
        let socket = Socket::new(domain, Type::STREAM, Some(Protocol::TCP))?;
        socket.set_nonblocking(true)?;
        if fwmark != 0 {
            socket.set_mark(fwmark)?;
        }
        configure(&socket);
        match socket.connect(&remote.into()) {
            Ok(()) => {}
            Err(error) if error.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(error) => return Err(error),
        }
        let stream = mio::net::TcpStream::from_std(socket.into());
        Ok(Self::new(now, stream, remote, false, LinkState::Connecting))
    }

    /// A connection a peer opened to our listener.
    pub fn accepted(
        now: Instant,
        stream: mio::net::TcpStream,
        remote: SocketAddr,
        fwmark: u32,
    ) -> Self {
        let socket = SockRef::from(&stream);
        if fwmark != 0
            && let Err(error) = socket.set_mark(fwmark)
        {
            tracing::debug!(%error, "cannot mark an accepted carrier connection");
        }
        configure(&socket);
        let mut connection = Self::new(now, stream, canonical(remote), true, LinkState::Open);
        connection.start();
        connection
    }

    fn new(
        now: Instant,
        stream: mio::net::TcpStream,
        remote: SocketAddr,
        accepted: bool,
        state: LinkState,
    ) -> Self {
        Self {
            stream,
            remote,
            local: None,
            accepted,
            state,
            backlog: Vec::with_capacity(PREAMBLE.len() + FRAME_HEADER_LEN + 65_535),
            decoder: FrameDecoder::new(RECEIVE_BUFFER_BYTES),
            opened: now,
            heard: false,
            silent_since: now,
            fake_tcp_seen: false,
        }
    }

    pub fn remote(&self) -> SocketAddr {
        self.remote
    }

    pub fn is_accepted(&self) -> bool {
        self.accepted
    }

    pub fn state(&self) -> LinkState {
        self.state
    }

    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// Whether the far side has sent its preamble (it speaks the carrier).
    pub fn introduced(&self) -> bool {
        self.decoder.introduced()
    }

    /// Whether the connection opened (ours: it connected; accepted: always).
    pub fn was_open(&self) -> bool {
        self.local.is_some()
    }

    /// What the connection showed about the far end's settings, for a
    /// connection that is closing: a fake-TCP sender on our listener, or
    /// (ours) a far end that opened but never spoke the carrier.
    pub fn problem(&self) -> Option<CarrierProblem> {
        let remote = self.remote;
        if self.accepted {
            return self.fake_tcp_seen.then_some(CarrierProblem::OtherCarrier {
                remote,
                ours: CarrierKind::Tcp,
            });
        }
        (self.was_open() && !self.introduced()).then_some(CarrierProblem::NotIntroduced { remote })
    }

    /// The connection became writable while connecting: `Ok(true)` once it
    /// is open (the preamble is on its way), `Ok(false)` if it is still
    /// connecting, the error if it failed.
    pub fn finish_connect(&mut self) -> io::Result<bool> {
        if self.state != LinkState::Connecting {
            return Ok(self.state == LinkState::Open);
        }
        if let Some(error) = self.stream.take_error()? {
            self.state = LinkState::Closed;
            return Err(error);
        }
        match self.stream.peer_addr() {
            Ok(_) => {}
            Err(error) if error.kind() == io::ErrorKind::NotConnected => return Ok(false),
            Err(error) => {
                self.state = LinkState::Closed;
                return Err(error);
            }
        }
        self.state = LinkState::Open;
        self.start();
        Ok(true)
    }

    fn start(&mut self) {
        self.local = self
            .stream
            .local_addr()
            .ok()
            .map(|local| canonical(local).ip());
        self.backlog.extend_from_slice(&PREAMBLE);
        self.flush();
    }

    /// Writes what waits in the backlog; whether it is empty now.
    pub fn flush(&mut self) -> bool {
        while !self.backlog.is_empty() && self.state == LinkState::Open {
            match (&self.stream).write(&self.backlog) {
                Ok(written) => {
                    self.backlog.drain(..written);
                }
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return false,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => {
                    tracing::debug!(%error, remote = %self.remote, "carrier write failed");
                    self.state = LinkState::Closed;
                }
            }
        }
        self.backlog.is_empty()
    }

    /// Frames `datagrams` into the stream, dropping what the stream cannot
    /// take now (see the module notes).
    pub fn send<'a>(&mut self, datagrams: impl Iterator<Item = &'a [u8]>) -> SendOutcome {
        let mut outcome = SendOutcome::default();
        let mut datagrams = datagrams.peekable();
        if self.state != LinkState::Open || !self.flush() {
            outcome.dropped = datagrams.count() as u64;
            return outcome;
        }
        let mut batch: [&[u8]; WRITE_BATCH] = [&[]; WRITE_BATCH];
        let mut headers = [[0u8; FRAME_HEADER_LEN]; WRITE_BATCH];
        while datagrams.peek().is_some() {
            let mut count = 0;
            for datagram in datagrams.by_ref() {
                let Some(header) = frame_header(datagram.len()) else {
                    outcome.dropped += 1;
                    continue;
                };
                batch[count] = datagram;
                headers[count] = header;
                count += 1;
                if count == WRITE_BATCH {
                    break;
                }
            }
            let frames = &batch[..count];
            let taken = self.write_frames(frames, &headers[..count]);
            outcome.sent += taken as u64;
            if taken < count {
                outcome.dropped += (count - taken) as u64 + datagrams.count() as u64;
                break;
            }
        }
        outcome
    }

    /// One `writev` of `frames`; how many frames it took (a frame cut by a
    /// short write counts: its rest waits in the backlog).
    fn write_frames(&mut self, frames: &[&[u8]], headers: &[[u8; FRAME_HEADER_LEN]]) -> usize {
        let mut slices = [IoSlice::new(&[]); 2 * WRITE_BATCH];
        for (index, (frame, header)) in frames.iter().zip(headers).enumerate() {
            slices[2 * index] = IoSlice::new(header);
            slices[2 * index + 1] = IoSlice::new(frame);
        }
        let written = loop {
            match (&self.stream).write_vectored(&slices[..2 * frames.len()]) {
                Ok(written) => break written,
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return 0,
                Err(error) => {
                    tracing::debug!(%error, remote = %self.remote, "carrier write failed");
                    self.state = LinkState::Closed;
                    return 0;
                }
            }
        };
        let mut left = written;
        for (index, (frame, header)) in frames.iter().zip(headers).enumerate() {
            let frame_len = FRAME_HEADER_LEN + frame.len();
            if left >= frame_len {
                left -= frame_len;
                continue;
            }
            if left == 0 {
                return index;
            }
            // Cut inside this frame: its rest must follow before anything else.
            if left < FRAME_HEADER_LEN {
                self.backlog.extend_from_slice(&header[left..]);
                self.backlog.extend_from_slice(frame);
            } else {
                self.backlog
                    .extend_from_slice(&frame[left - FRAME_HEADER_LEN..]);
            }
            return index + 1;
        }
        frames.len()
    }

    /// Receives framed datagrams into `buffers`, shaped like a GRO receive
    /// (`packing.rs`). `WouldBlock` once the stream has nothing more; a
    /// closed or broken stream, or a stranger's, reads as `WouldBlock` too
    /// and leaves the state `Closed`.
    pub fn recv(
        &mut self,
        buffers: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> io::Result<usize> {
        let source = (self.remote, self.local);
        let mut packer = Packer::new(buffers.len().min(meta.len()));
        'read: loop {
            loop {
                let frame = match self.decoder.next_frame() {
                    Ok(Some(frame)) => frame,
                    Ok(None) => break,
                    Err(error) => {
                        tracing::debug!(%error, remote = %self.remote, "closing a carrier connection");
                        self.fake_tcp_seen = starts_like_fake_tcp(self.decoder.waiting());
                        self.state = LinkState::Closed;
                        break;
                    }
                };
                if !packer.push(buffers, meta, source, frame) {
                    // Full: this frame comes again with the next call.
                    let len = frame.len();
                    self.decoder.unread(len);
                    break 'read;
                }
            }
            if self.state != LinkState::Open {
                break;
            }
            let space = self.decoder.space();
            match (&self.stream).read(space) {
                Ok(0) => {
                    self.state = LinkState::Closed;
                    break;
                }
                Ok(count) => {
                    self.heard = true;
                    self.decoder.filled(count);
                }
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => break,
                Err(error) => {
                    tracing::debug!(%error, remote = %self.remote, "carrier read failed");
                    self.state = LinkState::Closed;
                    break;
                }
            }
        }
        match packer.finish(meta) {
            0 => Err(io::ErrorKind::WouldBlock.into()),
            messages => Ok(messages),
        }
    }

    /// When the far side last went silent: `now` if it was heard since the
    /// previous call, so calls at a steady pace measure silence.
    pub fn silent_since(&mut self, now: Instant) -> Instant {
        if std::mem::take(&mut self.heard) {
            self.silent_since = now;
        }
        self.silent_since
    }
}

impl AsRawFd for Connection {
    fn as_raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

impl AsFd for Connection {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.stream.as_fd()
    }
}

/// Options every carrier socket gets; one that the system refuses only
/// costs what it would have bought, so failures are logged, not fatal.
fn configure(socket: &Socket) {
    let results = [
        ("TCP_NODELAY", socket.set_tcp_nodelay(true)),
        (
            "TCP_NOTSENT_LOWAT",
            socket.set_tcp_notsent_lowat(UNSENT_LIMIT_BYTES),
        ),
        (
            "TCP_USER_TIMEOUT",
            socket.set_tcp_user_timeout(Some(USER_TIMEOUT)),
        ),
        (
            "TCP_CONGESTION",
            socket.set_tcp_congestion(CONGESTION_CONTROL),
        ),
    ];
    for (option, result) in results {
        if let Err(error) = result {
            tracing::debug!(%error, option, "carrier socket option refused");
        }
    }
    // The options from recent kernels, by number (libc does not name
    // them yet); an older kernel refuses them and keeps its defaults.
    if let Err(error) = fjord_sys::socket::set_int_option(
        socket.as_fd(),
        libc::IPPROTO_TCP,
        TCP_RTO_MIN_US,
        RTO_MIN.as_micros() as libc::c_int,
    ) {
        tracing::debug!(%error, option = "TCP_RTO_MIN_US", "carrier socket option refused");
    }
}
