//! The `peers` suite's TCP pairs, with the responder of [`TCP_PEERS`]
//! peers and the emulator in tunnel mode:
//!
//! ```text
//! for each pair:
//!   one:    TCP_FLOWS flows, right host → peer 0's overlay address
//!   spread: the same flows, flow i → peer i's overlay address
//! ```
//!
//! Both halves of a pair run back to back on the same responder, the same
//! sessions and the same flows: only how many peers carry them differs,
//! and whatever else the machine does meanwhile slows both alike. Each
//! transfer is digest-checked, and charged to both ends: the responder's
//! CPU time, and the emulator's control thread's (which carries the
//! peers' side, so its cost is no figure of the system).

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use super::{TCP_FLOWS, TCP_PEERS};
use crate::emulated_peers::{PeerEmulator, RENEW_AFTER, peer_overlay};
use crate::systems::cpu_time;
use crate::systems::wireguard::Interface;
use crate::topology::{RIGHT_OVERLAY, TwoHosts};
use crate::traffic::{BulkReport, BulkTransfer};

const FIRST_PORT: u16 = 5301;
const TRANSFER_LIMIT: Duration = Duration::from_secs(120);
const TRANSFER_STALL: Duration = Duration::from_secs(20);
const RENEW_TIMEOUT: Duration = Duration::from_secs(30);
/// Longer than the emulator's control thread takes to note its CPU time.
const CPU_NOTE_WAIT: Duration = Duration::from_millis(100);

/// Bytes of one transfer (all flows together).
pub(super) fn bytes(quick: bool) -> u64 {
    if quick { 256 << 20 } else { 1 << 30 }
}

/// Pairs of transfers.
pub(super) fn pairs(quick: bool) -> usize {
    if quick { 2 } else { 3 }
}

/// One TCP transfer and what it cost each end of the tunnel.
pub(super) struct TcpSample {
    pub transfer: Result<BulkReport, String>,
    pub responder_cpu: Duration,
    pub emulator_cpu: Duration,
}

impl TcpSample {
    fn failed(why: &str) -> Self {
        Self {
            transfer: Err(why.to_string()),
            responder_cpu: Duration::ZERO,
            emulator_cpu: Duration::ZERO,
        }
    }
}

/// The same flows through one peer, then spread over all.
pub(super) struct TcpPair {
    pub one: TcpSample,
    pub spread: TcpSample,
}

/// Every pair; and, if leaving tunnel mode failed, why (the pairs stand).
pub(super) fn run(
    emulator: &mut PeerEmulator<'_>,
    responder: &Interface,
    hosts: &TwoHosts,
    quick: bool,
) -> (Vec<TcpPair>, Option<String>) {
    let ready = emulator
        .open_tunnel(RIGHT_OVERLAY)
        .map_err(|error| format!("tunnel mode: {error}"))
        .and_then(|()| {
            emulator
                .renew(RENEW_AFTER, RENEW_TIMEOUT)
                .map_err(|error| format!("renewing sessions: {error}"))
        });
    let pairs = match ready {
        Ok(_) => {
            let one = [IpAddr::V4(peer_overlay(0))];
            let all: Vec<IpAddr> = (0..TCP_PEERS)
                .map(|index| IpAddr::V4(peer_overlay(index)))
                .collect();
            (0..pairs(quick))
                .map(|pair| {
                    let port = FIRST_PORT + 2 * pair as u16;
                    TcpPair {
                        one: transfer(emulator, responder, hosts, &one, port, quick),
                        spread: transfer(emulator, responder, hosts, &all, port + 1, quick),
                    }
                })
                .collect()
        }
        Err(why) => vec![TcpPair {
            one: TcpSample::failed(&why),
            spread: TcpSample::failed(&why),
        }],
    };
    let closed = emulator
        .close_tunnel()
        .err()
        .map(|error| format!("leaving tunnel mode: {error}"));
    (pairs, closed)
}

/// One transfer of [`TCP_FLOWS`] flows to `destinations` (in turn), to a
/// sink on the peers' host listening on `port` of every address.
fn transfer(
    emulator: &PeerEmulator<'_>,
    responder: &Interface,
    hosts: &TwoHosts,
    destinations: &[IpAddr],
    port: u16,
    quick: bool,
) -> TcpSample {
    let pids = responder.pids();
    let responder_before = cpu_time(&pids);
    let emulator_before = emulator.control_cpu_time();
    let transfer = BulkTransfer::new(bytes(quick))
        .streams(TCP_FLOWS)
        .destinations(destinations.to_vec())
        .timeout(TRANSFER_LIMIT)
        .stall_timeout(TRANSFER_STALL)
        .run(
            &hosts.right,
            &hosts.left,
            SocketAddr::from(([0, 0, 0, 0], port)),
        )
        .map_err(|error| error.to_string());
    std::thread::sleep(CPU_NOTE_WAIT);
    TcpSample {
        transfer,
        responder_cpu: cpu_time(&pids).saturating_sub(responder_before),
        emulator_cpu: emulator.control_cpu_time().saturating_sub(emulator_before),
    }
}
