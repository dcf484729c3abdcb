//! The node's events, each to its effect; drained after its datagrams
//! (`Worker::after_io`).
//!
//! ```text
//! Node::poll_event(now) ─▶ Device(event)    ─▶ the log; a proven endpoint gets
//!                                              a socket of its own (steer.rs)
//!                       ─▶ ModeMismatch     ─▶ one line per peer
//!                       ─▶ Refused          ─▶ one warning per member a minute
//!                       ─▶ PredictPorts     ─▶ prediction sockets (port_prediction.rs)
//!                       ─▶ Carrier(command) ─▶ carriers opened or closed (carriers.rs)
//!                       ─▶ TunPacket        ─▶ an ICMP "too big" reply into the TUN
//! ```

use std::time::Instant;

use fjord_mesh::NodeEvent;
use fjord_proto::Event;

use super::Worker;

impl Worker {
    /// Does what one of the node's events asks.
    pub(super) fn handle_node_event(&mut self, now: Instant, event: NodeEvent) {
        match event {
            NodeEvent::Device(event) => {
                self.log_event(now, &event);
                if let Some(endpoint) = self.proven_endpoint(&event) {
                    self.connect_endpoint(endpoint);
                }
            }
            NodeEvent::ModeMismatch(mismatch) => {
                let key = self.node.device().peer_public_key(mismatch.peer);
                crate::drop_report::log_mode_mismatch(key, mismatch.sends);
            }
            NodeEvent::Refused(refusal) => self.log_refusal(now, refusal),
            NodeEvent::PredictPorts(toward) => self.start_prediction(now, &toward),
            NodeEvent::Carrier(command) => self.run_carrier_command(now, command),
            NodeEvent::TunPacket(reply) => self.write_too_big_reply(&reply),
        }
    }

    /// An ICMP "fragmentation needed" / "packet too big" reply for an
    /// inner sender whose packet did not fit a member's path.
    fn write_too_big_reply(&mut self, reply: &[u8]) {
        let Some(out) = self.control_buffer.get_mut(..reply.len()) else {
            return;
        };
        out.copy_from_slice(reply);
        self.tun.queue_write(&self.control_buffer, 0..reply.len());
        match self.tun.flush_writes(&mut self.control_buffer) {
            Ok(outcome) => self.stats.tun_write_errors += outcome.lost as u64,
            Err(error) => tracing::debug!(%error, "writing an ICMP reply to the TUN failed"),
        }
    }

    fn log_refusal(&mut self, now: Instant, refusal: fjord_mesh::Refusal) {
        let Some(unlogged) = self.refusal_log.note(refusal.by, now) else {
            tracing::debug!(member = %refusal.by, reason = %refusal.reason, "member refused our certificate again");
            return;
        };
        // A bootstrap member that refuses us never told us its name.
        let member = self
            .node
            .members()
            .into_iter()
            .find(|(member, _)| member.key == refusal.by)
            .map_or_else(|| refusal.by.to_base64(), |(member, _)| member.name);
        crate::drop_report::log_refusal(&member, refusal.reason, unlogged);
    }

    fn log_event(&mut self, now: Instant, event: &Event) {
        let key = |peer| {
            self.node
                .device()
                .peer_status(peer)
                .map(|status| status.public_key.to_base64())
                .unwrap_or_default()
        };
        match event {
            Event::HandshakeCompleted { peer, initiator } => {
                let peer = key(*peer);
                tracing::info!(%peer, initiator, "handshake completed");
                self.unanswered_log.answered(&peer);
            }
            Event::HandshakeAbandoned { peer } => {
                let peer = key(*peer);
                if self.unanswered_log.abandoned(peer.clone()) {
                    tracing::warn!(%peer, "no handshake response for 90 s; dropped queued packets (further rounds without an answer from this peer are logged at debug level until it answers)");
                } else {
                    tracing::debug!(%peer, "no handshake response for 90 s again; dropped queued packets");
                }
            }
            Event::HandshakeInitiated { peer, endpoint, .. } => {
                tracing::trace!(peer = %key(*peer), ?endpoint, "handshake initiation sent");
            }
            Event::EndpointChanged { peer, endpoint } => match self.endpoint_log.note(*peer, now) {
                Some(0) => {
                    tracing::info!(peer = %key(*peer), %endpoint, "peer endpoint changed");
                }
                Some(unlogged) => tracing::info!(
                    peer = %key(*peer),
                    %endpoint,
                    "peer endpoint changed ({unlogged} more times since the last such line, logged only at debug level: a roaming peer, or copies of its datagrams sent from elsewhere)"
                ),
                None => {
                    tracing::debug!(peer = %key(*peer), %endpoint, "peer endpoint changed");
                }
            },
            Event::LocalAddressChanged { peer } => {
                tracing::debug!(peer = %key(*peer), "peer reaches us at another of our addresses");
            }
            Event::KeysErased { peer } => {
                tracing::debug!(peer = %key(*peer), "session keys erased after inactivity");
            }
            Event::UnknownPeerAdmitted { public_key, .. } => {
                tracing::debug!(peer = %public_key, "unconfigured peer handshaked; waiting for its certificate");
            }
        }
    }
}
