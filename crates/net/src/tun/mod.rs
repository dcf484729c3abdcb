//! The TUN device, with virtio-net offload when the kernel allows it; or,
//! for an interface in switch mode, a TAP device, which reads and writes
//! Ethernet frames through the same calls.
//!
//! With offload on (`IFF_VNET_HDR` + `TUNSETOFFLOAD`), one read returns a
//! packet straight into its slot, or a TCP (or UDP) super-packet of up to
//! 64 KiB that tun-rs's `gso_split` cuts into MTU-sized packets in our
//! slots ([`read`]), and one write hands the
//! kernel several same-flow packets merged into one ([`coalesce`], a
//! `writev` straight from the receive buffer). Without offload, each read
//! and write carries one packet. The choice is made once at start: if the
//! kernel refuses offload, fjord logs it and runs without. A TAP device
//! runs without offload: the kernel would hand over Ethernet super-frames,
//! which tun-rs's splitting (made for IP packets at the start of the
//! buffer) cannot cut, so every read and write carries one frame.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

pub mod coalesce;
pub mod fragment_balance;
mod ipv4_fragment;
pub mod read;

use std::io::IoSlice;
use std::ops::Range;

use tun_rs::{DeviceBuilder, Layer, SyncDevice};

use coalesce::{Coalescer, MAX_PIECES};

pub use tun_rs::{IDEAL_BATCH_SIZE, VIRTIO_NET_HDR_LEN};

/// Largest read from the TUN device: a virtio header and a 64 KiB super-packet.
pub const MAX_SUPER_PACKET: usize = VIRTIO_NET_HDR_LEN + 65_535;

/// The kernel's queue of packets for fjord to read: what a burst can
/// outrun while the worker is not on a CPU. At 1,000, a 1,518-byte frame
/// rate of 60,000/s (two fragments each) lost 0.6 to 2.2 % of its frames
/// in this queue on a two-vCPU machine that also ran both applications
/// and the other tunnel end; at 4,000, none up to 80,000/s. A TCP sender
/// keeps far less than this in flight (TCP small queues), so only traffic
/// that outruns fjord's CPU ever fills it.
const TX_QUEUE_PACKETS: u32 = 4096;

#[derive(Debug, thiserror::Error)]
pub enum TunError {
    #[error("could not create TUN interface {name}: {source}")]
    Create {
        name: String,
        #[source]
        source: io::Error,
    },
    #[error("could not configure TUN interface {name} ({what}): {source}")]
    Configure {
        name: String,
        what: &'static str,
        #[source]
        source: io::Error,
    },
}

/// Why [`TunDevice::read_packets`] returned no packets.
#[derive(Debug, thiserror::Error)]
pub enum TunReadError {
    /// One packet longer than the slots it was read for: the interface's
    /// MTU grew where fjord cannot see it. The packet is lost; the next
    /// read works with larger slots.
    #[error("TUN packet of {len} bytes does not fit a {room}-byte slot")]
    PacketTooLong { len: usize, room: usize },
    #[error(transparent)]
    Io(#[from] io::Error),
}

/// What the device carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    /// IP packets (layer 3): a TUN device.
    Tun,
    /// Ethernet frames (layer 2): a TAP device, for switch mode, with
    /// this MAC address.
    Tap { mac_address: [u8; 6] },
}

pub struct TunDevice {
    device: SyncDevice,
    name: String,
    /// Asks the interface's MTU once a second in one system call
    /// ([`Self::mtu`]); `None` if no socket could be opened.
    control: Option<socket2::Socket>,
    offload: bool,
    pending: Coalescer,
}

impl TunDevice {
    /// Creates interface `name` of `kind` with `mtu`, trying offload first
    /// when asked (never for a TAP device; see the module documentation).
    pub fn create(
        name: &str,
        kind: DeviceKind,
        mtu: u16,
        want_offload: bool,
    ) -> Result<Self, TunError> {
        let want_offload = want_offload && kind == DeviceKind::Tun;
        let build = |offload: bool| {
            let builder = DeviceBuilder::new().name(name);
            let builder = match kind {
                DeviceKind::Tun => builder.layer(Layer::L3),
                DeviceKind::Tap { mac_address } => builder.layer(Layer::L2).mac_addr(mac_address),
            };
            builder
                .mtu(mtu)
                .offload(offload)
                .tx_queue_len(TX_QUEUE_PACKETS)
                .build_sync()
        };
        let (device, offload) = match build(want_offload) {
            Ok(device) => (device, want_offload),
            Err(error) if want_offload => {
                tracing::warn!(%error, interface = name, "TUN offload refused; running without it");
                let device = build(false).map_err(|source| TunError::Create {
                    name: name.to_string(),
                    source,
                })?;
                (device, false)
            }
            Err(source) => {
                return Err(TunError::Create {
                    name: name.to_string(),
                    source,
                });
            }
        };
        device
            .set_nonblocking(true)
            .map_err(|source| TunError::Configure {
                name: name.to_string(),
                what: "non-blocking mode",
                source,
            })?;
        let control = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::DGRAM, None)
            .inspect_err(|error| tracing::debug!(%error, "no socket for MTU lookups; tun-rs opens one per look"))
            .ok();
        Ok(Self {
            name: name.to_string(),
            control,
            offload,
            pending: Coalescer::new(offload, offload && device.udp_gso()),
            device,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's current MTU; fails once the interface has moved to
    /// another network namespace (the lookup is by name in ours). An
    /// interface renamed since it was created is looked up by tun-rs,
    /// which asks the device for its name first.
    pub fn mtu(&self) -> io::Result<u16> {
        let by_name = self.control.as_ref().map(|control| {
            fjord_sys::socket::interface_mtu(control.as_fd(), &self.name)
                .and_then(|mtu| u16::try_from(mtu).map_err(|_| io::ErrorKind::InvalidData.into()))
        });
        match by_name {
            Some(Ok(mtu)) => Ok(mtu),
            _ => self.device.mtu(),
        }
    }

    /// Whether reads return super-packets and writes coalesce.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Reads one (super-)packet into `slots`: packet `i` at
    /// `slots.area[i * slots.stride + slots.offset..][..sizes[i]]`. Returns
    /// the number of packets (none for a super-packet without payload).
    /// `scratch` takes what overflows the first slot (a super-packet) and
    /// must be [`MAX_SUPER_PACKET`] long.
    pub fn read_packets(
        &self,
        scratch: &mut [u8],
        slots: read::Slots<'_>,
        sizes: &mut [usize],
    ) -> Result<usize, TunReadError> {
        if self.offload {
            return read::read_offloaded(
                |buffers| self.device.recv_vectored(buffers),
                scratch,
                slots,
                sizes,
            );
        }
        let room = slots
            .area
            .get_mut(slots.offset..slots.stride)
            .filter(|_| !sizes.is_empty())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no slot to read into"))?;
        sizes[0] = self.device.recv(room)?;
        Ok(1)
    }

    /// Queues the packet at `buffer[range]` for the next
    /// [`TunDevice::flush_writes`]; `buffer` must not change until then.
    pub fn queue_write(&mut self, buffer: &[u8], range: Range<usize>) {
        self.pending.push(buffer, range);
    }

    /// Whether another packet can be queued before a flush.
    pub fn has_write_room(&self) -> bool {
        self.pending.has_room()
    }

    /// Writes the queued packets, merged where the kernel allows. Returns
    /// how many packets were written and how many were lost to write
    /// errors; fails only when the device is gone.
    pub fn flush_writes(&mut self, buffer: &mut [u8]) -> io::Result<FlushOutcome> {
        let mut outcome = FlushOutcome::default();
        self.pending.finish(buffer);
        let mut refused = None;
        let mut gone = None;
        for write in self.pending.writes() {
            let header = IoSlice::new(if self.offload { &write.header } else { &[] });
            let result = if write.payloads.is_empty() {
                // One packet: filling the array for a whole group below
                // cost more than the rest of the write's user-space work.
                self.writev(&[header, IoSlice::new(&buffer[write.first])])
            } else {
                let mut slices = [IoSlice::new(&[]); MAX_PIECES + 1];
                slices[0] = header;
                let mut count = 1;
                for range in std::iter::once(write.first).chain(write.payloads) {
                    slices[count] = IoSlice::new(&buffer[range]);
                    count += 1;
                }
                self.writev(&slices[..count])
            };
            outcome.writes += 1;
            match result {
                Ok(()) => outcome.written += write.packets,
                Err(error) if is_device_gone(&error) => {
                    gone = Some(error);
                    break;
                }
                Err(error) => {
                    outcome.lost += write.packets;
                    if write.packets > 1 && error.raw_os_error() == Some(libc::EINVAL) {
                        refused = Some((write.is_udp_gso, error));
                    } else {
                        tracing::trace!(%error, "TUN write failed");
                    }
                }
            }
        }
        self.pending.clear();
        if let Some(error) = gone {
            return Err(error);
        }
        if let Some((udp, error)) = refused {
            // Probed by use: a kernel that refuses merged writes refuses
            // them every time, so stop merging for good.
            if udp {
                tracing::warn!(%error, interface = %self.name, "kernel refused a UDP GSO write to TUN; no longer merging UDP");
                self.pending.disable_udp();
            } else {
                tracing::warn!(%error, interface = %self.name, "kernel refused a TCP GSO write to TUN; no longer merging");
                self.pending = Coalescer::new(false, false);
            }
        }
        Ok(outcome)
    }

    fn writev(&self, slices: &[IoSlice<'_>]) -> io::Result<()> {
        loop {
            match self.device.send_vectored(slices) {
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                result => return result.map(drop),
            }
        }
    }
}

/// What one [`TunDevice::flush_writes`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FlushOutcome {
    /// Packets the kernel took.
    pub written: usize,
    /// Packets lost to failed writes.
    pub lost: usize,
    /// Write calls made.
    pub writes: usize,
}

/// The interface was deleted under us (`ip link del`).
pub fn is_device_gone(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::EBADFD) | Some(libc::ENODEV)
    )
}

impl AsRawFd for TunDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.device.as_raw_fd()
    }
}

/// For waiting on the device with `fjord_sys::poll` (the lab's peer
/// emulator does).
impl AsFd for TunDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.device.as_fd()
    }
}
