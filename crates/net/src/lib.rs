//! fjord's Linux I/O: the TUN device, the UDP socket, and the event loop
//! that drives the sans-I/O core. The only crate with `unsafe`.

pub mod sys;
