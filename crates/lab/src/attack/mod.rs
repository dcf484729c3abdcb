//! Attacks on a tunnel's responder, for the `attack` suite and its tests.
//!
//! A handshake flood, piece by piece:
//!
//! - [`hosts`]: the lab's two hosts, and an attacker namespace on its own
//!   link to the right host (the responder), with the routes that send the
//!   responder's answers to spoofed sources back into the attacker, where
//!   they end.
//! - [`frames`]: spoofed handshake initiations with a valid mac1 for the
//!   responder's public key, from random addresses of 198.18.128.0/17, as
//!   whole Ethernet frames.
//! - [`flood`]: the generator, a thread in the attacker's namespace that
//!   writes those frames through a packet socket as fast as it can, or at
//!   a set rate, and counts them.
//! - [`replies`]: what came back (cookie replies, responses), counted in
//!   the attacker's namespace, and what the responder's kernel dropped
//!   unread.
//! - [`recovery`]: how soon a tunnel carries traffic again, by UDP echo.

pub mod flood;
pub mod frames;
pub mod hosts;
pub mod recovery;
pub mod replies;

pub use flood::{Flood, FloodRate, FloodReport};
pub use frames::{FloodTarget, SourcePrefix, SpoofedInitiations};
pub use hosts::AttackedHosts;
pub use recovery::{EchoService, time_to_echo};
pub use replies::{Replies, ReplyCounters, connected_udp_sockets, udp_socket_drops};
