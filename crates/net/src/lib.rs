//! fjord's Linux I/O: the TUN device, the UDP socket, and the worker that
//! drives the sans-I/O core. Its system calls go through `fjord-sys`, the
//! only crate with `unsafe`.

#![forbid(unsafe_code)]

mod busy_poll;
pub mod carrier;
pub mod carrier_log;
pub mod control;
pub mod crypto_stage;
mod datapath;
pub mod drop_report;
pub mod egress;
pub mod endpoint_log;
mod gso_batch;
pub mod host_addresses;
pub mod port_prediction;
mod relay_forward;
mod stall_watch;
pub mod stats;
pub mod steering;
mod time_share;
pub mod tun;
pub mod udp;
pub mod unanswered_log;
pub mod worker;

pub use control::{ControlContext, ControlHandle, Offloads, WorkerStopped};
pub use egress::Egress;
pub use stats::DataStats;
pub use tun::{DeviceKind, TunDevice};
pub use udp::UdpSocket;
pub use worker::{StopReason, Worker, WorkerError, default_threads};
