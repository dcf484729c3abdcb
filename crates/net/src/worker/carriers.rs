//! The worker's side of the fallback carriers (`crate::carrier`): it opens
//! and closes connections as the node asks, accepts them on the listener,
//! and tells the node what became of each. Their datagrams go through
//! the same receive pipeline as UDP's (`Worker::drain_from`).
//!
//! ```text
//! NodeEvent::Carrier  Open(remote)  ─▶ connect (non-blocking), watch it
//!                     Close(remote) ─▶ close it
//! writable while connecting ─▶ Node::handle_carrier(Connected | Failed)
//! listener readable          ─▶ accept, Node::handle_carrier(Accepted)
//! closed, broken or expired  ─▶ Node::handle_carrier(Closed)
//! fake TCP: flows opened, accepted, closed, refused (after reading its
//!     raw socket, and each second) ─▶ Node::handle_carrier
//! what shows a wrong setting (refused, unanswered, the other carrier's
//!     bytes, a far end that never introduced itself) ─▶ one warning per
//!     far end and kind an hour (`CarrierLog`), debug lines after it
//! ```

use std::io;
use std::time::Instant;

use fjord_mesh::CarrierCommand;
use fjord_mesh::fallback::CarrierEvent;
use mio::unix::SourceFd;
use mio::{Interest, Token};

use super::Worker;
use crate::carrier::{CarrierProblem, FlowEvent, Opening, Writable};

impl Worker {
    /// Accepts every waiting carrier connection; their slots, to be read
    /// at once (data may have come with them).
    pub(super) fn accept_carriers(&mut self) -> Vec<usize> {
        let now = Instant::now();
        let mut accepted = Vec::new();
        while let Some(result) = self.udp.carriers_mut().accept(now, self.fwmark) {
            match result {
                Ok((slot, remote)) => {
                    tracing::debug!(%remote, "accepted a carrier connection");
                    self.watch_carrier(slot);
                    self.node
                        .handle_carrier(now, CarrierEvent::Accepted(remote));
                    accepted.push(slot);
                }
                Err(error) => tracing::debug!(%error, "carrier listener"),
            }
        }
        accepted
    }

    /// A carrier connection can take writes: it finished connecting (or
    /// failed to), or what waited can go.
    pub(super) fn carrier_writable(&mut self, slot: usize) {
        let now = Instant::now();
        match self.udp.carriers().writable(slot) {
            Writable::Connected(remote) => {
                tracing::info!(%remote, "carrier connected; UDP to this peer is blocked");
                self.node
                    .handle_carrier(now, CarrierEvent::Connected(remote));
            }
            Writable::Failed(remote, error) => {
                let ours = self.udp.carriers().kind();
                if error == io::ErrorKind::ConnectionRefused {
                    self.carrier_problem(now, CarrierProblem::Refused { remote, ours });
                } else {
                    tracing::warn!(%remote, %error, "carrier connection failed");
                }
                self.close_carrier(slot, false);
                self.node.handle_carrier(now, CarrierEvent::Failed(remote));
            }
            Writable::Nothing => {}
        }
    }

    /// Closes the carrier in `slot`; `report` tells the node (which did
    /// not ask for it).
    pub(super) fn close_carrier(&mut self, slot: usize, report: bool) {
        if let Some(fd) = self.udp.carriers().fd(slot) {
            let _ = self.poll.registry().deregister(&mut SourceFd(&fd));
        }
        let Some((remote, problem)) = self.udp.carriers_mut().remove(slot) else {
            return;
        };
        tracing::debug!(%remote, "carrier connection closed");
        if let Some(problem) = problem {
            self.carrier_problem(Instant::now(), problem);
        }
        if report {
            self.node
                .handle_carrier(Instant::now(), CarrierEvent::Closed(remote));
        }
    }

    /// Opens or closes a carrier connection as the node asked.
    pub(super) fn run_carrier_command(&mut self, now: Instant, command: CarrierCommand) {
        match command {
            CarrierCommand::Open(remote) => {
                match self.udp.carriers_mut().connect(now, remote, self.fwmark) {
                    Ok(opening) => {
                        tracing::info!(%remote, "UDP unanswered; opening a carrier connection");
                        if let Opening::Stream(slot) = opening {
                            self.watch_carrier(slot);
                        }
                    }
                    Err(error) => {
                        let problem = CarrierProblem::CannotOpen {
                            remote,
                            ours: self.udp.carriers().kind(),
                            error: error.kind(),
                        };
                        self.carrier_problem(now, problem);
                        self.node.handle_carrier(now, CarrierEvent::Failed(remote));
                    }
                }
            }
            CarrierCommand::Close(remote) => {
                tracing::info!(%remote, "closing the carrier connection");
                if let Some(slot) = self.udp.carriers_mut().close(remote) {
                    self.close_carrier(slot, false);
                }
            }
            CarrierCommand::GiveUp(remote) => {
                let ours = self.udp.carriers().kind();
                self.carrier_problem(now, CarrierProblem::Unanswered { remote, ours });
                if let Some(slot) = self.udp.carriers_mut().close(remote) {
                    self.close_carrier(slot, false);
                }
            }
        }
    }

    /// Tells the node what became of fake-TCP flows.
    pub(super) fn report_flows(&mut self) {
        let now = Instant::now();
        while let Some(event) = self.udp.carriers().poll_fake_event() {
            let event = match event {
                FlowEvent::Connected(remote) => {
                    tracing::info!(%remote, "fake-TCP carrier connected; UDP to this peer is blocked");
                    CarrierEvent::Connected(remote)
                }
                FlowEvent::Accepted(remote) => {
                    tracing::debug!(%remote, "accepted a fake-TCP carrier flow");
                    CarrierEvent::Accepted(remote)
                }
                FlowEvent::Closed(remote) => {
                    tracing::debug!(%remote, "fake-TCP carrier flow closed");
                    CarrierEvent::Closed(remote)
                }
                FlowEvent::Refused(remote) => {
                    let ours = self.udp.carriers().kind();
                    self.carrier_problem(now, CarrierProblem::Refused { remote, ours });
                    CarrierEvent::Failed(remote)
                }
                FlowEvent::OtherCarrier(remote) => {
                    let ours = self.udp.carriers().kind();
                    self.carrier_problem(now, CarrierProblem::OtherCarrier { remote, ours });
                    continue;
                }
            };
            self.node.handle_carrier(now, event);
        }
    }

    /// Warns about `problem`, the first time in a while for its far end
    /// and kind; a debug line otherwise.
    fn carrier_problem(&mut self, now: Instant, problem: CarrierProblem) {
        let remote = problem.remote();
        if self.carrier_log.warns(&problem, now) {
            tracing::warn!(%remote, "{problem}");
        } else {
            tracing::debug!(%remote, "{problem}");
        }
    }

    fn watch_carrier(&mut self, slot: usize) {
        let Some(fd) = self.udp.carriers().fd(slot) else {
            return;
        };
        if let Err(error) = self.poll.registry().register(
            &mut SourceFd(&fd),
            Token(self.carrier_tokens.start + slot),
            Interest::READABLE | Interest::WRITABLE,
        ) {
            tracing::warn!(%error, "cannot watch a carrier connection");
        }
    }
}
