//! Refusals said out loud: a member that refuses the certificate in a
//! Hello answers with [`Control::Refused`], and a node that is answered so
//! hands the news to its driver ([`Mesh::poll_refusal`]).
//!
//! ```text
//! refused node R ──handshake──▶ member M      (succeeds: R knows M's key)
//! R ──Hello(cert R)──▶ M      M refuses it (another network, expired, ...)
//! M ──Refused(reason)──▶ R    at most once a minute per key
//! R: poll_refusal() -> Refusal { by: M, reason }   the driver logs it
//! ```
//!
//! Without the answer R sees only a completed handshake and looks healthy
//! while no member takes it in. The answer goes through the session the
//! handshake opened (M holds R as a provisional peer until R's
//! verification deadline), so it is as authentic as any control message.
//!
//! R greets again after every handshake; M answers the first Hello of a
//! minute and stays silent on the rest, so a refused node costs one small
//! message a minute. M remembers whom it answered only for that minute,
//! and at most [`MAX_ANSWERED_KEYS`] of them: past that, a new key goes
//! unanswered rather than growing the table (a stranger cycling through
//! keys is the only way to get there, and it needs no explanation).
//!
//! R takes a refusal only from a member or a bootstrap member: M greets
//! R back while R is unverified, and R, trusting another network, refuses
//! M in turn; that answer tells M nothing it should act on, so M drops it
//! (as from any non-member). R keeps at most [`MAX_PENDING_REFUSALS`] for a driver that
//! has not drained them.

use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use super::{Mesh, MeshDrop};
use crate::cert::CertError;
use crate::control::{Control, RefusalReason};

/// Shortest time between two refusal notices to one key.
pub const REFUSAL_NOTICE_INTERVAL: Duration = Duration::from_secs(60);

/// Most keys remembered as answered within the last interval.
pub const MAX_ANSWERED_KEYS: usize = 1024;

/// Most received refusals held for the driver.
pub const MAX_PENDING_REFUSALS: usize = 64;

/// A member refused our certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The refusing member's key.
    pub by: PublicKey,
    pub reason: RefusalReason,
}

impl Mesh {
    /// We refused `key`'s Hello for `error`: tell it, unless we told it
    /// within the last [`REFUSAL_NOTICE_INTERVAL`].
    pub(super) fn answer_refusal(&mut self, now: Instant, key: PublicKey, error: CertError) {
        // A Hello from our own key is someone else holding it, or a loop;
        // no peer of ours has that key, so there is no one to tell.
        if key == self.own_key() {
            return;
        }
        let recent =
            |answered: &Instant| now.saturating_duration_since(*answered) < REFUSAL_NOTICE_INTERVAL;
        if self.refusals_answered.get(&key).is_some_and(recent) {
            return;
        }
        if !self.refusals_answered.contains_key(&key)
            && self.refusals_answered.len() >= MAX_ANSWERED_KEYS
        {
            self.refusals_answered
                .retain(|_, answered| recent(answered));
            if self.refusals_answered.len() >= MAX_ANSWERED_KEYS {
                return;
            }
        }
        self.refusals_answered.insert(key, now);
        let reason = RefusalReason::from(error);
        self.send(key, &Control::Refused { reason });
    }

    /// `key` refused the certificate in our Hello.
    pub(super) fn handle_refused(
        &mut self,
        key: PublicKey,
        reason: RefusalReason,
    ) -> Result<(), MeshDrop> {
        // Only a member's word (or a bootstrap member's, the one we are
        // trying to join through) is news: a stranger we greeted back
        // while it was unverified refuses us too, by its own network.
        if !self.members.contains_key(&key) && !self.bootstrap.contains(&key) {
            return Err(MeshDrop::NotAMember);
        }
        if self.refusals.len() < MAX_PENDING_REFUSALS {
            self.refusals.push_back(Refusal { by: key, reason });
        }
        Ok(())
    }

    /// A member's refusal of our certificate, for the driver to tell its
    /// operator (the mesh itself logs nothing).
    pub fn poll_refusal(&mut self) -> Option<Refusal> {
        self.refusals.pop_front()
    }
}
