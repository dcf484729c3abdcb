//! The TUN device, with virtio-net offload when the kernel allows it.
//!
//! With offload on (`IFF_VNET_HDR` + `TUNSETOFFLOAD`), one read returns a
//! TCP (or UDP) super-packet of up to 64 KiB that tun-rs splits into
//! MTU-sized packets straight into our slots, and one write hands the
//! kernel several same-flow packets coalesced into one. Without offload,
//! each read and write carries one packet. The choice is made once at
//! start: if the kernel refuses offload, fjord logs it and runs without.

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use tun_rs::{DeviceBuilder, GROTable, SyncDevice};

pub use tun_rs::{IDEAL_BATCH_SIZE, VIRTIO_NET_HDR_LEN};

/// Largest read from the TUN device: a virtio header and a 64 KiB super-packet.
pub const MAX_SUPER_PACKET: usize = VIRTIO_NET_HDR_LEN + 65_535;

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

pub struct TunDevice {
    device: SyncDevice,
    name: String,
    offload: bool,
    gro_table: GROTable,
}

impl TunDevice {
    /// Creates interface `name` with `mtu`, trying offload first when asked.
    pub fn create(name: &str, mtu: u16, want_offload: bool) -> Result<Self, TunError> {
        let build = |offload: bool| {
            DeviceBuilder::new()
                .name(name)
                .mtu(mtu)
                .offload(offload)
                .tx_queue_len(1000)
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
        Ok(Self {
            device,
            name: name.to_string(),
            offload,
            gro_table: GROTable::default(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The interface's current MTU; fails once the interface has moved to
    /// another network namespace (the lookup is by name in ours).
    pub fn mtu(&self) -> io::Result<u16> {
        self.device.mtu()
    }

    /// Whether reads return super-packets and writes coalesce.
    pub fn offload(&self) -> bool {
        self.offload
    }

    /// Reads one (super-)packet and splits it into `slots`, each packet at
    /// `slots[i][offset..][..sizes[i]]`. Returns the number of packets.
    /// `scratch` holds the raw read and must be [`MAX_SUPER_PACKET`] long.
    pub fn read_packets(
        &self,
        scratch: &mut [u8],
        slots: &mut [&mut [u8]],
        sizes: &mut [usize],
        offset: usize,
    ) -> io::Result<usize> {
        self.device.recv_multiple(scratch, slots, sizes, offset)
    }

    /// Writes packets at `packets[i][offset..]` (offset ≥ [`VIRTIO_NET_HDR_LEN`]),
    /// coalescing same-flow packets when offload is on. The vectors may
    /// grow in place while coalescing, so give them spare capacity.
    pub fn write_packets(&mut self, packets: &mut [Vec<u8>], offset: usize) -> io::Result<usize> {
        self.device
            .send_multiple(&mut self.gro_table, packets, offset)
    }
}

impl AsRawFd for TunDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.device.as_raw_fd()
    }
}
