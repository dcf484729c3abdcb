//! `fjord [-f] IFACE`: the userspace-implementation convention of
//! wireguard-go, so `WG_QUICK_USERSPACE_IMPLEMENTATION=fjord wg-quick up
//! wg0` works. fjord creates the interface with no key and no peers,
//! serves the configuration protocol on `/var/run/wireguard/IFACE.sock`,
//! and goes to the background unless asked to stay (`-f`, or
//! `WG_PROCESS_FOREGROUND=1`). `wg` and `wg-quick` do the rest. The
//! process ends when the interface is deleted (`ip link del`,
//! `wg-quick down`) or on SIGINT/SIGTERM. With `FJORD_USER=NAME` (or
//! `--user NAME`) it runs as NAME once the interface exists, keeping only
//! `CAP_NET_ADMIN` (`privilege.rs`). `--metrics ADDR:PORT` serves the
//! Prometheus endpoint (`metrics/`).

use std::time::Instant;

use fjord_mesh::Node;
use fjord_net::{DeviceKind, Egress, StopReason, TunDevice, Worker};
use fjord_proto::Timing;
use fjord_sys::privilege::Account;
use fjord_sys::process::{Daemonized, daemonize};

use crate::config::{DEFAULT_MTU, InterfaceName, MetricsAddress};
use crate::uapi;
use crate::up::{DataOffer, UsageError, bind_metrics, new_device};

pub fn run_interface(
    name: &str,
    foreground: bool,
    threads: usize,
    timing: Timing,
    offer: DataOffer,
    user: Option<&Account>,
    metrics: Option<MetricsAddress>,
) -> anyhow::Result<()> {
    let name: InterfaceName = name
        .parse()
        .map_err(|error: crate::config::InterfaceNameError| UsageError(error.to_string()))?;
    let interface = name.as_str();
    let (listener, _socket_guard) =
        uapi::bind(interface).map_err(|error| UsageError(error.to_string()))?;
    let metrics_listener = bind_metrics(metrics)?;
    let udp = Egress::bind(0, 0)?;
    let mtu = DEFAULT_MTU.bytes();
    let tun = TunDevice::create(interface, DeviceKind::Tun, mtu, true)?;
    let device = new_device(None, mtu, timing, offer, Instant::now());
    if !foreground {
        eprintln!(
            "fjord: {interface} is up; running in the background (use -f to stay in the foreground)"
        );
        // SAFETY: no thread exists yet: the worker, its crypto threads and
        // the configuration server all start below, and nothing above
        // (logging, the sockets, the TUN device) starts one.
        if unsafe { daemonize() }? == Daemonized::Parent {
            // The socket file now belongs to the child.
            std::mem::forget(_socket_guard);
            return Ok(());
        }
    }
    // Everything that needs root is done (wg-quick configures addresses
    // and routes itself); no thread has started yet.
    if let Some(account) = user {
        crate::privilege::hand_over(&udp, account)?;
        crate::privilege::drop_to(account)?;
    }
    let (worker, control) = Worker::new(Node::new(device), tun, udp, 0)?;
    let worker = worker.with_threads(threads);
    if let Some(metrics_listener) = metrics_listener {
        crate::metrics::spawn(metrics_listener, control.clone())?;
    }
    std::thread::Builder::new()
        .name("uapi".into())
        .spawn(move || uapi::serve(listener, control, None))?;
    tracing::info!(interface, "interface created; waiting for configuration");
    match worker.run()? {
        StopReason::Signal => tracing::info!(interface, "stopping on signal"),
        StopReason::InterfaceDeleted => {
            tracing::info!(interface, "interface was deleted; stopping")
        }
    }
    Ok(())
}
