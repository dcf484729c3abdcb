//! How a policy reaches a member that lacks it: the holder announces its
//! digest, and the member pulls the signed text in chunks, verifies it
//! against the network key and offers it (`policy.rs`).
//!
//! ```text
//! holder ──PolicyDigest(id, len)──▶ member        (id: version and hash)
//!        member holds an older id (or none), and fetches nothing else:
//! member ──PolicyRequest(id, first, ≤32)──▶ holder
//! holder ──PolicyChunk(id, i, n, bytes) × ≤32──▶ member
//!        ... the next request once those are in, until all n are ...
//! member: hash, signature, version checked ─▶ offer_policy ─▶ its own
//!         digest to every member in session (the spread goes on)
//! ```
//!
//! When digests go out: at once to every member in session when a policy
//! comes into force (given locally or fetched), on every accepted Hello
//! (so a member that joins later, or restarts, fetches it from the first
//! member it meets), and at every periodic check (`revocation_check_interval`, which
//! repairs whatever was lost). A holder that hears an older digest
//! answers with its own, so a member that missed a version learns of it
//! from whichever side speaks first.
//!
//! Pulling rather than pushing keeps memory and bursts bounded: a member
//! fetches one policy at a time, from one member (at most
//! `MAX_POLICY_BYTES` of text held for it), asks for at most
//! `MAX_REQUESTED_CHUNKS` at once and asks for the next ones only when
//! those are in. A chunk that is not of the transfer in progress (another
//! sender, another id, a count or length that does not fit) is dropped
//! and counted. Losses are repaired by asking again: with no new chunk
//! for [`POLICY_RETRY_INTERVAL`], the request is repeated from the first
//! missing chunk; after [`POLICY_TRANSFER_RETRIES`] repeats the transfer
//! is given up (counted), and the next digest, at the latest the holder's
//! next check, starts it again. A stalled transfer moves to the next
//! member that offers the same policy, keeping the chunks it has.
//!
//! What arrives is trusted only after its checks: the hash of the whole
//! must be the one the digest named, the signature must be the network
//! key's, the text must parse, at the version the digest named. A text
//! that fails is refused and counted, and the policy in force stays; one
//! whose signature or content fails is remembered (the last
//! [`REMEMBERED_REFUSED_POLICIES`]) and not fetched again.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use super::{Mesh, PolicyOffer, Trust};
use crate::control::{Control, MAX_REQUESTED_CHUNKS, POLICY_CHUNK_BYTES, PolicyId, chunk_count};
use crate::policy::SignedPolicy;

/// How long a transfer waits for a chunk it asked for before asking again.
pub const POLICY_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Requests repeated without a new chunk before a transfer is given up.
pub const POLICY_TRANSFER_RETRIES: u8 = 4;
/// Refused policies remembered, so a member offering one again does not
/// make us fetch and check it again.
pub const REMEMBERED_REFUSED_POLICIES: usize = 8;

/// One policy being fetched from one member.
pub(super) struct Transfer {
    from: PublicKey,
    id: PolicyId,
    /// The text so far: `len` bytes from the digest, filled chunk by chunk.
    text: Vec<u8>,
    received: Vec<bool>,
    missing: usize,
    /// The end (exclusive) of the chunks asked for last.
    asked_until: usize,
    /// When to ask again if no new chunk came.
    retry_at: Instant,
    retries: u8,
}

/// What a chunk did to a transfer.
enum Stored {
    New,
    Duplicate,
    /// Its count or length is not the transfer's.
    Misfit,
}

impl Transfer {
    fn new(now: Instant, from: PublicKey, id: PolicyId, len: usize) -> Self {
        let count = chunk_count(len);
        Self {
            from,
            id,
            text: vec![0; len],
            received: vec![false; count],
            missing: count,
            asked_until: 0,
            retry_at: now + POLICY_RETRY_INTERVAL,
            retries: 0,
        }
    }

    pub(super) fn id(&self) -> PolicyId {
        self.id
    }

    fn first_missing(&self) -> Option<usize> {
        self.received.iter().position(|received| !received)
    }

    /// The next range to ask for, from the first missing chunk; `None`
    /// when every chunk is in.
    fn next_request(&mut self, now: Instant) -> Option<(u16, u16)> {
        let first = self.first_missing()?;
        let end = (first + MAX_REQUESTED_CHUNKS).min(self.received.len());
        self.asked_until = end;
        self.retry_at = now + POLICY_RETRY_INTERVAL;
        // Both below MAX_POLICY_CHUNKS (1,024): the text is at most
        // MAX_POLICY_BYTES, checked when the digest was decoded.
        Some((first as u16, (end - first) as u16))
    }

    /// Whether every chunk asked for last is in.
    fn asked_for_are_in(&self) -> bool {
        self.first_missing()
            .is_none_or(|first| first >= self.asked_until)
    }

    fn store(&mut self, index: u16, count: u16, bytes: &[u8]) -> Stored {
        let index = usize::from(index);
        if usize::from(count) != self.received.len() {
            return Stored::Misfit;
        }
        let start = index * POLICY_CHUNK_BYTES;
        let end = (start + POLICY_CHUNK_BYTES).min(self.text.len());
        // The decoder bounds index below count, so `start` is in the text.
        let Some(slot) = self.text.get_mut(start..end) else {
            return Stored::Misfit;
        };
        if slot.len() != bytes.len() {
            return Stored::Misfit;
        }
        if self.received[index] {
            return Stored::Duplicate;
        }
        slot.copy_from_slice(bytes);
        self.received[index] = true;
        self.missing -= 1;
        Stored::New
    }
}

impl Mesh {
    /// `from` holds policy `id` of `len` bytes: fetch it if it ranks
    /// above ours, tell `from` of ours if ours ranks above.
    pub(super) fn handle_policy_digest(
        &mut self,
        now: Instant,
        from: PublicKey,
        id: PolicyId,
        len: u32,
    ) {
        if !matches!(self.config.trust, Trust::Network(_)) {
            return;
        }
        match self.policy.as_ref().map(|held| held.id) {
            Some(held) if held == id => return,
            Some(held) if held > id => return self.send_policy_digest(from),
            _ => {}
        }
        if self.refused_policies.contains(&id) {
            return;
        }
        if let Some(transfer) = &mut self.policy_transfer {
            if transfer.id > id {
                return;
            }
            if transfer.id == id {
                if transfer.retries > 0 && transfer.from != from {
                    transfer.from = from;
                    transfer.retries = 0;
                    self.request_policy_chunks(now);
                }
                return;
            }
        }
        self.policy_transfer = Some(Transfer::new(now, from, id, len as usize));
        self.request_policy_chunks(now);
    }

    fn request_policy_chunks(&mut self, now: Instant) {
        let Some(transfer) = &mut self.policy_transfer else {
            return;
        };
        let Some((first, count)) = transfer.next_request(now) else {
            return;
        };
        let (to, id) = (transfer.from, transfer.id);
        self.send(to, &Control::PolicyRequest { id, first, count });
    }

    /// `from` asks for chunks of policy `id`: sent if we hold it; if we
    /// hold another, `from` is told which.
    pub(super) fn handle_policy_request(
        &mut self,
        from: PublicKey,
        id: PolicyId,
        first: u16,
        count: u16,
    ) {
        let Some(held) = self.policy.as_ref().filter(|held| held.id == id) else {
            return self.send_policy_digest(from);
        };
        let text = held.signed.text();
        let total = chunk_count(text.len());
        let first = usize::from(first);
        let end = (first + usize::from(count)).min(total);
        let chunks: Vec<Control> = (first..end)
            .map(|index| {
                let start = index * POLICY_CHUNK_BYTES;
                let stop = (start + POLICY_CHUNK_BYTES).min(text.len());
                Control::PolicyChunk {
                    id,
                    // Below MAX_POLICY_CHUNKS: the text was verified.
                    index: index as u16,
                    count: total as u16,
                    bytes: text[start..stop].to_vec(),
                }
            })
            .collect();
        for chunk in &chunks {
            self.send(from, chunk);
        }
    }

    /// A chunk of a policy: stored if it belongs to the transfer in
    /// progress; the text is checked once every chunk is in.
    pub(super) fn handle_policy_chunk(
        &mut self,
        now: Instant,
        from: PublicKey,
        id: PolicyId,
        index: u16,
        count: u16,
        bytes: &[u8],
    ) {
        let Some(transfer) = self
            .policy_transfer
            .as_mut()
            .filter(|transfer| transfer.from == from && transfer.id == id)
        else {
            self.counters.policy_chunks_dropped += 1;
            return;
        };
        match transfer.store(index, count, bytes) {
            Stored::Misfit => {
                self.counters.policy_chunks_dropped += 1;
                return;
            }
            Stored::Duplicate => return,
            Stored::New => {
                transfer.retry_at = now + POLICY_RETRY_INTERVAL;
                transfer.retries = 0;
            }
        }
        if transfer.missing == 0 {
            if let Some(transfer) = self.policy_transfer.take() {
                self.finish_policy_transfer(transfer);
            }
        } else if transfer.asked_for_are_in() {
            self.request_policy_chunks(now);
        }
    }

    /// Every chunk is in: check the whole, then offer it.
    fn finish_policy_transfer(&mut self, transfer: Transfer) {
        let Trust::Network(network) = &self.config.trust else {
            return;
        };
        let Transfer { id, text, .. } = transfer;
        if PolicyId::of(id.version, &text) != id {
            // Garbled by its sender: another member may send it whole.
            self.counters.policies_refused += 1;
            return;
        }
        match SignedPolicy::verify(&text, network) {
            Ok(signed) if signed.policy.version() == id.version => {
                if let PolicyOffer::Applied { .. } = self.offer_policy(signed) {
                    self.counters.policies_learned += 1;
                }
            }
            _ => {
                self.counters.policies_refused += 1;
                if self.refused_policies.len() == REMEMBERED_REFUSED_POLICIES {
                    self.refused_policies.pop_front();
                }
                self.refused_policies.push_back(id);
            }
        }
    }

    /// Asks again for what did not come, or gives the transfer up.
    pub(super) fn handle_policy_timeout(&mut self, now: Instant) {
        let Some(transfer) = &mut self.policy_transfer else {
            return;
        };
        if now < transfer.retry_at {
            return;
        }
        if transfer.retries >= POLICY_TRANSFER_RETRIES {
            self.policy_transfer = None;
            self.counters.policy_transfers_failed += 1;
            return;
        }
        transfer.retries += 1;
        self.request_policy_chunks(now);
    }

    /// When a transfer in progress asks again if nothing comes.
    pub(super) fn policy_deadline(&self) -> Option<Instant> {
        self.policy_transfer
            .as_ref()
            .map(|transfer| transfer.retry_at)
    }
}

/// The refused policies a mesh remembers (oldest first).
pub(super) type RefusedPolicies = VecDeque<PolicyId>;
