//! One UDP socket: the interface's dual-stack socket, or a socket of its
//! own for one remote endpoint (`steering.rs`), with batched receive
//! (`recvmmsg`, GRO) and segmented send (GSO) through quinn-udp. Which
//! socket a datagram leaves through is `egress.rs`'s answer, not this
//! file's: a socket knows nothing of the others.
//!
//! Addresses are kept canonical inside fjord (an IPv4 peer is a
//! `SocketAddr::V4`, never a v4-mapped IPv6 address); this module maps
//! them at the socket boundary.

use std::io::{self, IoSliceMut};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV6};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use fjord_sys::mmsg::GsoMessage;
use fjord_sys::socket::{SocketBuffer, force_buffer_size, set_int_option};
use quinn_udp::{RecvMeta, Transmit, UdpSockRef, UdpSocketState};
use socket2::{Domain, Protocol, Socket, Type};

pub use quinn_udp::BATCH_SIZE as RECV_BATCH;

/// Socket buffer size asked for in both directions (root may exceed rmem_max).
const SOCKET_BUFFER_BYTES: usize = 8 << 20;
/// Largest datagram sent as a GSO segment where the route's MTU is not
/// known (the interface's unconnected socket): one that fits a 1500-byte
/// path behind IPv6 and UDP headers. The kernel refuses GSO segments
/// larger than the route's MTU, so bigger datagrams go one per send and
/// may fragment.
pub(crate) const DEFAULT_GSO_SEGMENT: usize = 1500 - 40 - 8;

#[derive(Debug, thiserror::Error)]
pub enum UdpError {
    #[error("UDP port {port} is already in use")]
    PortInUse { port: u16 },
    #[error("could not open UDP socket on port {port} ({what}): {source}")]
    Setup {
        port: u16,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

pub struct UdpSocket {
    socket: std::net::UdpSocket,
    state: UdpSocketState,
    port: u16,
    /// Set once a GSO send was refused (`EIO`: no segmentation on the
    /// path); from then on every datagram goes alone.
    gso_refused: AtomicBool,
    /// Largest datagram sent as a GSO segment through this socket: the
    /// connected route's MTU less headers, else one that fits a 1,500-byte
    /// path (see [`UdpSocket::gso_segment_limit`]).
    gso_segment_limit: AtomicUsize,
    /// The remote endpoint and our bound address of a connected socket
    /// ([`UdpSocket::connected`]).
    connection: Option<(SocketAddr, Option<IpAddr>)>,
    family: Family,
}

/// What a socket carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Family {
    /// IPv6 and, v4-mapped, IPv4: the interface's socket, and a connected
    /// socket to an IPv6 endpoint.
    DualStack,
    /// IPv4 alone: a connected socket to an IPv4 endpoint. On a
    /// dual-stack socket the kernel sends to a v4-mapped destination as
    /// if unconnected (`udpv6_sendmsg` hands `udp_sendmsg` the address),
    /// so every send would look up its route again (`perf`: a route
    /// lookup per message with its source check); an IPv4 socket sends on
    /// the route it cached at connect.
    Ipv4,
}

impl Family {
    fn is_dual_stack(self) -> bool {
        self == Self::DualStack
    }

    /// Whether a socket of this family has options at `level`: an IPv4
    /// socket has none at `IPPROTO_IPV6`.
    fn has_level(self, level: libc::c_int) -> bool {
        level != libc::IPPROTO_IPV6 || self.is_dual_stack()
    }

    /// `address` as a socket of this family takes it.
    fn socket_address(self, address: SocketAddr) -> SocketAddr {
        match self {
            Self::DualStack => mapped(address),
            Self::Ipv4 => address,
        }
    }
}

impl UdpSocket {
    /// Binds `[::]:port` (0 = any free port), accepting IPv4 and IPv6.
    /// `fwmark` marks outgoing packets for policy routing (0 = none).
    pub fn bind(port: u16, fwmark: u32) -> Result<Self, UdpError> {
        let socket = open(port, fwmark, Family::DualStack)?;
        // Bound first without SO_REUSEPORT, so that a port another socket
        // holds is refused as in use, whatever that socket allows.
        socket
            .bind(&SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)).into())
            .map_err(|source| bind_error(port, source))?;
        // Then open to our own connected sockets ([`UdpSocket::connected`]);
        // a later socket without the option (another fjord) is still refused.
        socket
            .set_reuse_port(true)
            .map_err(|source| UdpError::Setup {
                port,
                what: "port reuse",
                source,
            })?;
        Self::from_bound(socket, port, Family::DualStack)
    }

    /// Makes `uid`'s the socket, for a process that gives up root after
    /// binding: the kernel lets a socket join a port's `SO_REUSEPORT`
    /// group only if its owner created the sockets already there, so
    /// without this the connected sockets opened after the drop
    /// ([`UdpSocket::connected`]) are refused and a flood reaches the
    /// peers' datagrams again. Other users are still refused the port.
    pub fn hand_to(&self, uid: u32, gid: u32) -> io::Result<()> {
        std::os::unix::fs::fchown(&self.socket, Some(uid), Some(gid))
    }

    /// A socket on our `port` connected to `remote`: the kernel delivers
    /// every datagram from `remote` to it (a connected socket matches
    /// before the unconnected one), so whatever fills the interface's
    /// socket, `remote`'s datagrams wait in a queue of their own. `local`
    /// is our address that `remote` sends to (`None`: the route's choice
    /// of source). Needs the interface's socket bound by
    /// [`UdpSocket::bind`] to `port`.
    pub fn connected(
        port: u16,
        remote: SocketAddr,
        local: Option<IpAddr>,
        fwmark: u32,
    ) -> Result<Self, UdpError> {
        let setup =
            |what: &'static str| move |source: io::Error| UdpError::Setup { port, what, source };
        let family = match (remote, local) {
            (SocketAddr::V4(_), None | Some(IpAddr::V4(_))) => Family::Ipv4,
            _ => Family::DualStack,
        };
        let socket = open(port, fwmark, family)?;
        socket.set_reuse_port(true).map_err(setup("port reuse"))?;
        let bound_local = local;
        let local = local.unwrap_or(match family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Family::DualStack => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        });
        socket
            .bind(&family.socket_address(SocketAddr::new(local, port)).into())
            .map_err(|source| bind_error(port, source))?;
        // Until this connect, the socket shares the port's datagrams with
        // the interface's socket; what it got meanwhile is received from
        // it like anything else. (An IPv4 socket joins no port group with
        // the dual-stack one, which the kernel adds behind it: for
        // `remote`'s datagrams it finds this one first, and the connected
        // match outscores the other.)
        socket
            .connect(&family.socket_address(remote).into())
            .map_err(setup("connect"))?;
        let mut transport = Self::from_bound(socket, port, family)?;
        transport.connection = Some((remote, bound_local));
        if bound_local.is_some() {
            // What arrives here arrived at the bound address (recv fills
            // it in): the packet-info control message would only repeat it,
            // for IPv4-mapped and IPv6 senders alike.
            turn_off_control_messages(
                transport.socket.as_fd(),
                family,
                &[
                    (libc::IPPROTO_IP, libc::IP_PKTINFO, "IPv4 packet info"),
                    (
                        libc::IPPROTO_IPV6,
                        libc::IPV6_RECVPKTINFO,
                        "IPv6 packet info",
                    ),
                ],
            );
        }
        // A larger route MTU (a jumbo-frame underlay under a large tunnel
        // MTU) lets larger datagrams go as GSO segments; one send of
        // 1,452-byte segments is the most a route of unknown MTU takes.
        let headers = if remote.is_ipv4() { 20 + 8 } else { 40 + 8 };
        if let Ok(mtu) = fjord_sys::socket::path_mtu(transport.socket.as_fd()) {
            let limit = mtu.saturating_sub(headers).max(DEFAULT_GSO_SEGMENT);
            transport.gso_segment_limit.store(limit, Ordering::Relaxed);
        }
        Ok(transport)
    }

    /// Offloads, buffers and fragmentation of a bound socket.
    fn from_bound(socket: Socket, port: u16, family: Family) -> Result<Self, UdpError> {
        let setup =
            |what: &'static str| move |source: io::Error| UdpError::Setup { port, what, source };
        let socket: std::net::UdpSocket = socket.into();
        let state =
            UdpSocketState::new(UdpSockRef::from(&socket)).map_err(setup("offload probe"))?;
        for (what, result) in [
            (
                "send buffer",
                state.set_send_buffer_size(UdpSockRef::from(&socket), SOCKET_BUFFER_BYTES),
            ),
            (
                "receive buffer",
                state.set_recv_buffer_size(UdpSockRef::from(&socket), SOCKET_BUFFER_BYTES),
            ),
        ] {
            if let Err(error) = result {
                tracing::debug!(%error, what, "could not enlarge socket buffer");
            }
        }
        force_buffer_sizes(&socket);
        allow_fragmentation(&socket, family).map_err(setup("allow fragmentation"))?;
        // quinn-udp asks for a receive timestamp and the traffic class of
        // every datagram; fjord reads neither, and each costs a control
        // message per receive (about 0.15 us of a recvmsg here for the
        // timestamp) and, while any socket wants timestamps, a clock read
        // for every packet the host receives.
        turn_off_control_messages(
            socket.as_fd(),
            family,
            &[
                (libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, "receive timestamps"),
                (libc::IPPROTO_IP, libc::IP_RECVTOS, "IPv4 type of service"),
                (
                    libc::IPPROTO_IPV6,
                    libc::IPV6_RECVTCLASS,
                    "IPv6 traffic class",
                ),
            ],
        );
        let port = socket.local_addr().map_err(setup("local address"))?.port();
        Ok(Self {
            socket,
            state,
            port,
            gso_refused: AtomicBool::new(false),
            gso_segment_limit: AtomicUsize::new(DEFAULT_GSO_SEGMENT),
            connection: None,
            family,
        })
    }

    /// Whether a datagram waits to be read (an unreadable count, as from
    /// a socket already gone, says no).
    pub(crate) fn has_datagrams_waiting(&self) -> bool {
        fjord_sys::socket::receive_queue_bytes(self.socket.as_fd()).is_ok_and(|bytes| bytes > 0)
    }

    /// Whether this is a socket of [`UdpSocket::connected`] (a port
    /// prediction socket, steered too, is not: its own port is the point).
    pub(crate) fn is_connected(&self) -> bool {
        self.connection.is_some()
    }

    /// The local address a connected socket is bound to (`None`: the
    /// route's choice, or not a connected socket).
    pub(crate) fn bound_local(&self) -> Option<IpAddr> {
        self.connection.and_then(|(_, local)| local)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Changes the firewall mark on outgoing packets (0 = none).
    pub fn set_mark(&self, fwmark: u32) -> io::Result<()> {
        socket2::SockRef::from(&self.socket).set_mark(fwmark)
    }

    /// How many segments one GSO send may carry (1 = no GSO).
    pub fn max_gso_segments(&self) -> usize {
        if self.gso_refused.load(Ordering::Relaxed) {
            1
        } else {
            self.state.max_gso_segments()
        }
    }

    /// Whether the socket takes IPv6 and v4-mapped addresses (every one
    /// but a connected socket to an IPv4 endpoint).
    pub(crate) fn is_dual_stack(&self) -> bool {
        self.family.is_dual_stack()
    }

    /// Whether this is a connected socket that sends `messages` as they
    /// ask without being told where to and from: each goes to its
    /// connected endpoint, from its bound address or the route's choice
    /// where that is also the socket's.
    pub(crate) fn sends_connected(&self, messages: &[GsoMessage<'_>]) -> bool {
        self.connection.is_some_and(|(remote, local)| {
            messages.iter().all(|message| {
                message.destination == remote
                    && (message.source.is_none() || message.source == local)
            })
        })
    }

    /// Largest datagram that may leave this socket as a GSO segment.
    pub(crate) fn gso_segment_limit(&self) -> usize {
        self.gso_segment_limit.load(Ordering::Relaxed)
    }

    /// The route took a smaller MTU than this socket learned at connect
    /// (the kernel refused a segment as too large): back to segments
    /// that fit any 1,500-byte path.
    pub(crate) fn shrink_gso_segments(&self) {
        self.gso_segment_limit
            .store(DEFAULT_GSO_SEGMENT, Ordering::Relaxed);
    }

    /// Turns GSO off for good after the kernel refused a segmented send
    /// (logged once).
    pub(crate) fn refuse_gso(&self, error: &io::Error) {
        if !self.gso_refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(%error, "UDP segmentation offload refused; sending datagrams one by one");
        }
    }

    /// How many datagrams one GRO receive may coalesce (1 = no GRO).
    pub fn gro_segments(&self) -> usize {
        self.state.gro_segments()
    }

    /// Receives up to `buffers.len()` messages; each may hold several
    /// datagrams of `meta[i].stride` bytes (GRO). Sources and the local
    /// addresses they arrived at (`dst_ip`, from the packet-info control
    /// message quinn-udp turns on, or a connected socket's bound address)
    /// are canonical.
    pub fn recv(&self, buffers: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> io::Result<usize> {
        let count = self
            .state
            .recv(UdpSockRef::from(&self.socket), buffers, meta)?;
        let bound_local = self.bound_local();
        for m in &mut meta[..count] {
            m.addr = canonical(m.addr);
            m.dst_ip = bound_local.or(m.dst_ip.map(canonical_ip));
        }
        Ok(count)
    }

    /// Sends one datagram to `destination` from our address `source`
    /// (`None`: the route's choice), through this socket whatever else
    /// steers or carries `destination` (`Egress::send` decides that).
    pub fn send(
        &self,
        destination: SocketAddr,
        source: Option<IpAddr>,
        datagram: &[u8],
    ) -> io::Result<()> {
        let transmit = Transmit {
            destination: self.family.socket_address(destination),
            ecn: None,
            contents: datagram,
            segment_size: None,
            src_ip: source,
        };
        self.state
            .try_send(UdpSockRef::from(&self.socket), &transmit)
    }
}

impl UdpSocket {
    /// Where the next waiting datagram comes from, leaving it waiting.
    pub(crate) fn peek_source(&self) -> io::Result<SocketAddr> {
        let mut first = [0u8; 1];
        let (_, from) = self.socket.peek_from(&mut first)?;
        Ok(canonical(from))
    }

    /// Drops the next waiting datagram.
    pub(crate) fn discard(&self) -> io::Result<()> {
        let mut first = [0u8; 1];
        self.socket.recv_from(&mut first).map(drop)
    }
}

impl AsRawFd for UdpSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }
}

impl UdpSocket {
    /// Sets the TTL (IPv4) and hop limit (IPv6) of what the socket sends
    /// next; `None` restores the system default.
    pub fn set_ttl(&self, ttl: Option<u8>) -> io::Result<()> {
        // -1 is the kernel's "use the route's default" for both options.
        let value = ttl.map_or(-1, libc::c_int::from);
        set_int_options(
            self.as_fd(),
            self.family,
            &[
                (libc::IPPROTO_IP, libc::IP_TTL, value),
                (libc::IPPROTO_IPV6, libc::IPV6_UNICAST_HOPS, value),
            ],
        )
    }
}

impl UdpSocket {
    /// Whether what the socket sends next may be fragmented: `false` for
    /// path MTU probes (Don't Fragment on IPv4, no fragmentation on
    /// IPv6; `PMTUDISC_PROBE` also ignores the kernel's cached path MTU,
    /// which must not decide a probe's fate), `true` restores the
    /// socket's normal mode (see [`allow_fragmentation`]).
    pub fn set_fragmentation(&self, allowed: bool) -> io::Result<()> {
        if allowed {
            return allow_fragmentation(&self.socket, self.family);
        }
        set_int_options(
            self.as_fd(),
            self.family,
            &[
                (
                    libc::IPPROTO_IP,
                    libc::IP_MTU_DISCOVER,
                    libc::IP_PMTUDISC_PROBE,
                ),
                (
                    libc::IPPROTO_IPV6,
                    libc::IPV6_MTU_DISCOVER,
                    libc::IPV6_PMTUDISC_PROBE,
                ),
            ],
        )
    }
}

impl AsFd for UdpSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// A UDP socket of `family`, marked with `fwmark` (0 = none), not bound.
fn open(port: u16, fwmark: u32, family: Family) -> Result<Socket, UdpError> {
    let setup =
        |what: &'static str| move |source: io::Error| UdpError::Setup { port, what, source };
    let domain = match family {
        Family::DualStack => Domain::IPV6,
        Family::Ipv4 => Domain::IPV4,
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP)).map_err(setup("socket"))?;
    if family.is_dual_stack() {
        socket.set_only_v6(false).map_err(setup("dual stack"))?;
    }
    if fwmark != 0 {
        socket.set_mark(fwmark).map_err(setup("fwmark"))?;
    }
    Ok(socket)
}

fn bind_error(port: u16, source: io::Error) -> UdpError {
    if source.kind() == io::ErrorKind::AddrInUse {
        UdpError::PortInUse { port }
    } else {
        UdpError::Setup {
            port,
            what: "bind",
            source,
        }
    }
}

/// Turns off receive control messages (`level`, `option`, what it is)
/// that quinn-udp asked for and fjord does not read: each costs every
/// `recvmsg` its bytes. A socket that refuses keeps them.
fn turn_off_control_messages(
    fd: BorrowedFd<'_>,
    family: Family,
    options: &[(libc::c_int, libc::c_int, &str)],
) {
    for &(level, option, what) in options {
        if !family.has_level(level) {
            continue;
        }
        if let Err(error) = set_int_option(fd, level, option, 0) {
            tracing::debug!(%error, what, "could not turn a receive control message off");
        }
    }
}

/// As root, SO_*BUFFORCE lifts the sysctl cap so bursts of 64 GSO segments
/// from a fast TUN are not dropped by a small default buffer.
fn force_buffer_sizes(socket: &std::net::UdpSocket) {
    for buffer in [SocketBuffer::Send, SocketBuffer::Receive] {
        if let Err(error) = force_buffer_size(socket.as_fd(), buffer, SOCKET_BUFFER_BYTES) {
            tracing::debug!(%error, ?buffer, "could not force the socket buffer size");
        }
    }
}

/// quinn-udp sets DF (`IP_PMTUDISC_PROBE`); a tunnel with an inner MTU
/// larger than the path (a 34 KB MTU over Ethernet) needs its datagrams
/// fragmented instead, as kernel WireGuard lets them be. Data to mesh
/// members keeps this mode too: their packets are already cut to the
/// probed path MTU (`fjord_mesh::pmtu`), and if a path shrinks before the
/// next confirmation, fragments still arrive where DF would black-hole.
/// Plain WireGuard peers keep exactly this behaviour. Only probes leave
/// with DF ([`UdpSocket::set_fragmentation`]).
fn allow_fragmentation(socket: &std::net::UdpSocket, family: Family) -> io::Result<()> {
    set_int_options(
        socket.as_fd(),
        family,
        &[
            (
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DONT,
            ),
            (
                libc::IPPROTO_IPV6,
                libc::IPV6_MTU_DISCOVER,
                libc::IPV6_PMTUDISC_DONT,
            ),
        ],
    )
}

/// Sets each (`level`, `option`, `value`) that a socket of `family` has,
/// in order; the first failure is returned.
fn set_int_options(
    fd: BorrowedFd<'_>,
    family: Family,
    options: &[(libc::c_int, libc::c_int, libc::c_int)],
) -> io::Result<()> {
    for &(level, option, value) in options {
        if family.has_level(level) {
            set_int_option(fd, level, option, value)?;
        }
    }
    Ok(())
}

/// IPv4 datagrams arrive at v4-mapped IPv6 addresses on a dual-stack
/// socket.
pub fn canonical_ip(address: IpAddr) -> IpAddr {
    match address {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(address, IpAddr::V4),
        IpAddr::V4(_) => address,
    }
}

/// A source address we no longer have (removed since the peer's datagram
/// arrived at it): the kernel refuses the send with `EINVAL`. The caller
/// sends again without it, and the peer's next datagram says which
/// address to use now.
pub fn is_stale_source(error: &io::Error, source: Option<IpAddr>) -> bool {
    source.is_some() && error.raw_os_error() == Some(libc::EINVAL)
}

/// IPv4 peers arrive as v4-mapped IPv6 on a dual-stack socket.
pub fn canonical(address: SocketAddr) -> SocketAddr {
    match address {
        SocketAddr::V6(v6) => match v6.ip().to_ipv4_mapped() {
            Some(v4) => SocketAddr::from((v4, v6.port())),
            None => address,
        },
        SocketAddr::V4(_) => address,
    }
}

pub(crate) fn mapped(address: SocketAddr) -> SocketAddr {
    match address {
        SocketAddr::V4(v4) => {
            SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
        }
        SocketAddr::V6(_) => address,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_round_trips() {
        let v4: SocketAddr = "198.18.0.1:51820".parse().unwrap();
        assert!(matches!(mapped(v4), SocketAddr::V6(_)));
        assert_eq!(canonical(mapped(v4)), v4);
        let v6: SocketAddr = "[fd00::1]:1".parse().unwrap();
        assert_eq!(canonical(v6), v6);
    }

    #[test]
    fn loopback_datagrams_arrive_from_a_canonical_address() {
        let a = UdpSocket::bind(0, 0).unwrap();
        let b = UdpSocket::bind(0, 0).unwrap();
        let to_b: SocketAddr = format!("127.0.0.1:{}", b.port()).parse().unwrap();
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        for datagram in payload.chunks(1200) {
            a.send(to_b, None, datagram).unwrap();
        }
        let mut storage = vec![0u8; 65536];
        let mut meta = [RecvMeta::default(); 1];
        let mut received = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while received.len() < payload.len() && std::time::Instant::now() < deadline {
            let mut slices = [IoSliceMut::new(&mut storage)];
            match b.recv(&mut slices, &mut meta) {
                Ok(n) => {
                    for m in &meta[..n] {
                        assert_eq!(m.addr.port(), a.port());
                        assert!(m.addr.is_ipv4());
                        received.extend_from_slice(&storage[..m.len]);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(received, payload);
    }

    /// The local address a datagram arrived at is reported, canonical, so
    /// the reply can leave from it.
    #[test]
    fn datagrams_report_the_local_address_they_arrived_at() {
        let a = UdpSocket::bind(0, 0).unwrap();
        let b = UdpSocket::bind(0, 0).unwrap();
        let to_b = SocketAddr::from(([127, 0, 0, 5], b.port()));
        a.send(to_b, Some(IpAddr::from([127, 0, 0, 6])), b"hello")
            .unwrap();
        let mut storage = vec![0u8; 65536];
        let mut meta = [RecvMeta::default(); 1];
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        loop {
            let mut slices = [IoSliceMut::new(&mut storage)];
            match b.recv(&mut slices, &mut meta) {
                Ok(_) => break,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(std::time::Instant::now() < deadline, "nothing arrived");
                    std::thread::yield_now();
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(meta[0].dst_ip, Some(IpAddr::from([127, 0, 0, 5])));
        assert_eq!(meta[0].addr, SocketAddr::from(([127, 0, 0, 6], a.port())));
    }

    /// Everything waiting on `socket` within a short while: (source, bytes).
    fn receive_waiting(socket: &UdpSocket) -> Vec<(SocketAddr, Vec<u8>)> {
        arrivals(socket)
            .into_iter()
            .map(|(from, _, bytes)| (from, bytes))
            .collect()
    }

    /// What waits on `socket`: source, the local address it arrived at,
    /// and the datagram.
    fn arrivals(socket: &UdpSocket) -> Vec<(SocketAddr, Option<IpAddr>, Vec<u8>)> {
        let mut storage = vec![0u8; 65536];
        let mut meta = [RecvMeta::default(); 1];
        let mut received = Vec::new();
        let deadline = std::time::Instant::now() + std::time::Duration::from_millis(300);
        while std::time::Instant::now() < deadline {
            let mut slices = [IoSliceMut::new(&mut storage)];
            match socket.recv(&mut slices, &mut meta) {
                Ok(_) => {
                    let m = meta[0];
                    let stride = if m.stride == 0 { m.len } else { m.stride };
                    for datagram in storage[..m.len].chunks(stride) {
                        received.push((m.addr, m.dst_ip, datagram.to_vec()));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::yield_now(),
                Err(e) => panic!("{e}"),
            }
        }
        received
    }

    /// A socket connected to one peer on the interface's port gets all of
    /// that peer's datagrams and nothing else; the interface's socket
    /// keeps the rest; the connected socket's replies leave from the
    /// interface's port; and another socket on the port is still refused.
    #[test]
    fn a_connected_socket_takes_exactly_its_peers_datagrams() {
        let interface = UdpSocket::bind(0, 0).unwrap();
        let port = interface.port();
        let peer = UdpSocket::bind(0, 0).unwrap();
        let stranger = UdpSocket::bind(0, 0).unwrap();
        let peer_address = SocketAddr::from(([127, 0, 0, 1], peer.port()));
        let connected = UdpSocket::connected(port, peer_address, None, 0).unwrap();
        assert_eq!(connected.port(), port);
        assert!(matches!(
            UdpSocket::bind(port, 0),
            Err(UdpError::PortInUse { .. })
        ));

        let to = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..50 {
            peer.send(to, None, b"peer").unwrap();
            stranger.send(to, None, b"stranger").unwrap();
        }
        let on_connected = receive_waiting(&connected);
        let on_interface = receive_waiting(&interface);
        assert_eq!(on_connected.len(), 50);
        assert!(
            on_connected
                .iter()
                .all(|(from, bytes)| *from == peer_address && bytes == b"peer")
        );
        assert_eq!(on_interface.len(), 50);
        assert!(on_interface.iter().all(|(_, bytes)| bytes == b"stranger"));

        connected.send(peer_address, None, b"back").unwrap();
        let back = receive_waiting(&peer);
        assert_eq!(back, [(to, b"back".to_vec())]);
    }

    /// To an IPv4 endpoint the connected socket is an IPv4 one, so that
    /// its sends use the route cached at connect; the options fjord sets
    /// on every socket still apply to it. To an IPv6 endpoint it stays
    /// dual-stack.
    #[test]
    fn a_connected_socket_has_its_endpoints_family() {
        let interface = UdpSocket::bind(0, 0).unwrap();
        let peer = UdpSocket::bind(0, 0).unwrap();
        let v4 = SocketAddr::from(([127, 0, 0, 1], peer.port()));
        let connected = UdpSocket::connected(interface.port(), v4, None, 0).unwrap();
        assert!(!connected.is_dual_stack());
        assert!(connected.socket.local_addr().unwrap().is_ipv4());
        connected.set_ttl(Some(3)).unwrap();
        connected.set_fragmentation(false).unwrap();
        connected.set_fragmentation(true).unwrap();
        connected.set_ttl(None).unwrap();
        connected.send(v4, None, b"v4").unwrap();
        let to = SocketAddr::from(([127, 0, 0, 1], interface.port()));
        assert_eq!(receive_waiting(&peer), [(to, b"v4".to_vec())]);

        let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, peer.port()));
        let connected = UdpSocket::connected(interface.port(), v6, None, 0).unwrap();
        assert!(connected.is_dual_stack());
        connected.send(v6, None, b"v6").unwrap();
        let to = SocketAddr::from((Ipv6Addr::LOCALHOST, interface.port()));
        assert_eq!(receive_waiting(&peer), [(to, b"v6".to_vec())]);
    }

    /// A connected socket sends GSO segments as large as its route takes
    /// (loopback: the 65,535 bytes of an IP packet less the IPv4 and UDP
    /// headers); others stay at what a 1,500-byte path takes.
    #[test]
    fn gso_segments_follow_the_connected_route_mtu() {
        let interface = UdpSocket::bind(0, 0).unwrap();
        let peer = UdpSocket::bind(0, 0).unwrap();
        let peer_address = SocketAddr::from(([127, 0, 0, 1], peer.port()));
        assert_eq!(interface.gso_segment_limit(), DEFAULT_GSO_SEGMENT);
        let connected = UdpSocket::connected(interface.port(), peer_address, None, 0).unwrap();
        assert_eq!(connected.gso_segment_limit(), 65_535 - 28);
        connected.shrink_gso_segments();
        assert_eq!(connected.gso_segment_limit(), DEFAULT_GSO_SEGMENT);
    }

    /// Bound to the address the peer sends to, a connected socket takes
    /// only what arrives there: a host with several addresses keeps
    /// answering each peer from the one it uses.
    #[test]
    fn a_connected_socket_takes_what_arrives_at_its_local_address() {
        let interface = UdpSocket::bind(0, 0).unwrap();
        let port = interface.port();
        let peer = UdpSocket::bind(0, 0).unwrap();
        let peer_address = SocketAddr::from(([127, 0, 0, 1], peer.port()));
        let second = IpAddr::from([127, 0, 0, 5]);
        let connected = UdpSocket::connected(port, peer_address, Some(second), 0).unwrap();
        peer.send(SocketAddr::new(second, port), None, b"to the second")
            .unwrap();
        peer.send(
            SocketAddr::from(([127, 0, 0, 1], port)),
            None,
            b"to the first",
        )
        .unwrap();
        let on_connected = arrivals(&connected);
        let on_interface = receive_waiting(&interface);
        assert_eq!(
            on_connected,
            [(peer_address, Some(second), b"to the second".to_vec())]
        );
        assert_eq!(on_interface, [(peer_address, b"to the first".to_vec())]);
        connected.send(peer_address, None, b"back").unwrap();
        assert_eq!(
            receive_waiting(&peer),
            [(SocketAddr::new(second, port), b"back".to_vec())]
        );
    }

    #[test]
    fn port_in_use_is_reported() {
        let a = UdpSocket::bind(0, 0).unwrap();
        assert!(matches!(
            UdpSocket::bind(a.port(), 0),
            Err(UdpError::PortInUse { .. })
        ));
    }
}
