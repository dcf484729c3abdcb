//! How [`Node`] drives the UDP fallback (`crate::fallback`): device events
//! in, peer changes and carrier connections out.
//!
//! ```text
//! Event::HandshakeInitiated ─▶ Fallback::handle_initiated
//! Event::HandshakeCompleted ─▶ Fallback::handle_handshake
//! Event::EndpointChanged  ─▶ Fallback::handle_endpoint
//! handle_carrier (from the driver's sockets) ─▶ Fallback::handle_carrier
//! FallbackAction::Connect / Disconnect / GiveUp ─▶ poll_event:
//!                            NodeEvent::Carrier (the driver opens or
//!                            closes the TCP connection)
//! FallbackAction::UseCarrier ─▶ endpoint := carrier, initiation over it
//! FallbackAction::ProbeUdp   ─▶ Device::initiate_toward(UDP endpoint)
//! FallbackAction::UseUdp     ─▶ endpoint := UDP endpoint
//! ```
//!
//! Nothing here runs for a node whose peers have no fallback port: the
//! driver is created by the first [`Node::set_peer_fallback`]. Device
//! events pass through on their way to `poll_event` (or to the mesh,
//! which hands them on), so the fallback sees each exactly once. What the
//! fallback does is stamped with the `now` of the call that runs its pump.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::time::Instant;

use fjord_proto::{Event, PeerId};

use super::Node;
use crate::fallback::{CarrierEvent, Fallback, FallbackAction, FallbackCounters, PathState};

/// What the driver must do with a carrier connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CarrierCommand {
    /// Connect to this address (a peer's fallback port); report how it
    /// went with [`Node::handle_carrier`].
    Open(SocketAddr),
    /// Close the connection to this address.
    Close(SocketAddr),
    /// Close the attempt to this address: it went unanswered.
    GiveUp(SocketAddr),
}

pub(super) struct FallbackDriver {
    fallback: Fallback,
    /// Carrier commands waiting for `poll_event`.
    commands: VecDeque<CarrierCommand>,
    /// The fallback port of mesh members: they are fjord, and are assumed
    /// to listen where this node does.
    member_port: Option<u16>,
}

impl Node {
    /// Falls back to TCP `fallback_port` at `id`'s address when UDP to it
    /// fails (only for a peer known to run fjord); `None` turns it off.
    pub fn set_peer_fallback(&mut self, now: Instant, id: PeerId, fallback_port: Option<u16>) {
        self.fallback_driver().fallback.configure(id, fallback_port);
        self.pump_fallback(now);
    }

    /// Mesh members (all fjord) fall back to `port` when UDP to them
    /// fails: set when this node listens for the carrier there itself.
    pub fn set_member_fallback_port(&mut self, port: Option<u16>) {
        self.fallback_driver().member_port = port;
    }

    /// `id`'s fallback port, if it falls back.
    pub fn peer_fallback(&self, id: PeerId) -> Option<u16> {
        self.fallback.as_ref()?.fallback.fallback_port(id)
    }

    /// Where `id`'s datagrams go, if it falls back at all.
    pub fn fallback_state(&self, id: PeerId) -> Option<PathState> {
        self.fallback.as_ref()?.fallback.state(id)
    }

    pub fn fallback_counters(&self) -> FallbackCounters {
        self.fallback
            .as_ref()
            .map(|driver| driver.fallback.counters())
            .unwrap_or_default()
    }

    /// What happened to a carrier connection.
    pub fn handle_carrier(&mut self, now: Instant, event: CarrierEvent) {
        self.fallback_driver().fallback.handle_carrier(now, event);
        self.pump_fallback(now);
    }

    /// The fallback's part of `poll_event`: a carrier connection to open
    /// or close (the caller has run the pump).
    pub(super) fn poll_carrier(&mut self) -> Option<CarrierCommand> {
        self.fallback.as_mut()?.commands.pop_front()
    }

    fn fallback_driver(&mut self) -> &mut FallbackDriver {
        self.fallback.get_or_insert_with(|| {
            Box::new(FallbackDriver {
                fallback: Fallback::new(),
                commands: VecDeque::new(),
                member_port: None,
            })
        })
    }

    pub(super) fn fallback_deadline(&self) -> Option<Instant> {
        self.fallback.as_ref()?.fallback.poll_timeout()
    }

    pub(super) fn fallback_timeout(&mut self, now: Instant) {
        let Some(driver) = self.fallback.as_mut() else {
            return;
        };
        if driver
            .fallback
            .poll_timeout()
            .is_some_and(|deadline| deadline <= now)
        {
            driver.fallback.handle_timeout(now);
        }
        self.pump_fallback(now);
    }

    /// A mesh member was admitted as `id`: it falls back like a
    /// configured peer when this node listens for the carrier.
    pub(super) fn fallback_member_admitted(&mut self, id: PeerId) {
        if let Some(driver) = self.fallback.as_mut()
            && let Some(port) = driver.member_port
            && driver.fallback.fallback_port(id).is_none()
        {
            driver.fallback.configure(id, Some(port));
        }
    }

    pub(super) fn fallback_forget(&mut self, id: PeerId) {
        if let Some(driver) = self.fallback.as_mut() {
            driver.fallback.forget(id);
        }
    }

    /// Shows a device event to the fallback (the mesh's pump calls this
    /// for the events it takes).
    pub(super) fn fallback_observe(&mut self, now: Instant, event: &Event) {
        let Some(driver) = self.fallback.as_mut() else {
            return;
        };
        match *event {
            Event::HandshakeInitiated { peer, endpoint, at } => {
                driver.fallback.handle_initiated(at, peer, endpoint);
            }
            Event::HandshakeCompleted { peer, .. } => driver.fallback.handle_handshake(peer),
            Event::EndpointChanged { peer, endpoint } => {
                driver.fallback.handle_endpoint(now, peer, endpoint);
            }
            _ => {}
        }
    }

    /// Takes device events (unless the mesh does), then applies what the
    /// fallback decided, stamped `now`.
    pub(super) fn pump_fallback(&mut self, now: Instant) {
        if self.fallback.is_none() {
            return;
        }
        if self.mesh.is_none() {
            while let Some(event) = self.device.poll_event() {
                self.fallback_observe(now, &event);
                self.seen_events.push_back(event);
            }
        }
        while let Some(driver) = self.fallback.as_mut()
            && let Some(action) = driver.fallback.poll_action()
        {
            match action {
                FallbackAction::Connect { carrier, .. } => {
                    driver.commands.push_back(CarrierCommand::Open(carrier));
                }
                FallbackAction::Disconnect { carrier } => {
                    driver.commands.push_back(CarrierCommand::Close(carrier));
                }
                FallbackAction::GiveUp { carrier } => {
                    driver.commands.push_back(CarrierCommand::GiveUp(carrier));
                }
                FallbackAction::UseCarrier { peer, carrier } => {
                    self.device.set_peer_endpoint(peer, carrier);
                    self.device.initiate_toward(peer, now, &[carrier]);
                }
                FallbackAction::ProbeUdp { peer, udp, carrier } => {
                    // With a session the endpoint stays on the carrier and
                    // only an answer over UDP moves it; without one,
                    // `initiate_toward` points the peer at UDP, so it is
                    // put back: data keeps going where it gets through.
                    let had_session = self.device.peer_has_session(peer);
                    self.device.initiate_toward(peer, now, &[udp]);
                    if !had_session {
                        self.device.set_peer_endpoint(peer, carrier);
                    }
                }
                FallbackAction::UseUdp { peer, udp } => {
                    self.device.set_peer_endpoint(peer, udp);
                }
            }
        }
    }
}
