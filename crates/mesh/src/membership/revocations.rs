//! Revocations: how one member's revocation (read from its `Revocations`
//! file, or heard from another member) reaches every other member, and
//! what happens to the member it covers.
//!
//! # How a revocation spreads
//!
//! ```text
//! flood        new to us ──Revocations──▶ every member in session with us
//! greeting     Hello accepted ──RevocationDigest──▶ its sender
//! anti-entropy every revocation_check_interval ──RevocationDigest──▶
//!              every member in session with us
//! a digest that differs from ours ──Revocations (all ours)──▶ its sender
//! ```
//!
//! The flood is fast but reaches only members in session at that moment:
//! a revocation read from the file at start, before we met anyone, or one
//! learned while a member was away, floods to nobody (or not to it). The
//! digest on every accepted Hello covers the first case at once: each
//! side of a first meeting (and of every later session, e.g. after a
//! restart) tells the other what it holds, and gets what it lacks. The
//! periodic digest covers the rest with a fixed bound: a member in
//! session with one that holds a revocation learns it at its own next
//! check, so within 1.25 × `revocation_check_interval` (the jitter; 37.5 s
//! by default) plus a round trip, unless the messages are lost, and then
//! at the check after. The digest goes to every member in session, not
//! one at random as the member lists do, because only that gives this
//! bound whatever the size of the mesh; it costs one 24-byte message per
//! member and interval, a third of the pings' rate at the defaults.
//!
//! # The digest
//!
//! The count of revocations held and the first
//! [`REVOCATION_HASH_LEN`] bytes of BLAKE2s-256 over every
//! `(node key, revoked_at as u64 big-endian)`, sorted by key: we keep the
//! newest revocation per key, so two members that heard the same ones
//! hold the same pairs. A digest and not the list because the list only
//! grows (a revocation is kept for good, at 108 bytes each) while the
//! digest stays one small message whatever the count; the list (cut to
//! the MTU, at most [`MAX_BATCH_ENTRIES`] per message) travels only to a
//! member whose digest differs. The receiver cannot tell which side lacks
//! what, so it sends all of its own; each side's own check fetches what
//! that side lacks.
//!
//! A node that predates the digest drops it (an unknown kind, see
//! `control.rs`) and gets revocations as before: from the flood and, when
//! it joins, from its bootstrap member. It keeps the old limits; between
//! new nodes nothing depends on it.
//!
//! # The member it covers
//!
//! A member covered by a revocation is removed: its peer goes from the
//! driver's table with its sessions and routes (even a bootstrap member,
//! whose peer otherwise stays for rejoining), so nothing it sends is
//! accepted any more. If it handshakes again, the driver admits it
//! provisionally like any stranger; its Hello is refused as revoked (and
//! answered so, `refusals.rs`) and the peer removed at the next timeout,
//! without waiting for `verify_timeout`.

use std::time::Instant;

use fjord_proto::PublicKey;

use super::{Mesh, MeshAction, MeshDrop, Trust};
use crate::cert::{CertError, REVOCATION_LEN, Revocation};
use crate::control::{CONTROL_HEADER_LEN, Control, MAX_BATCH_ENTRIES, REVOCATION_HASH_LEN};

/// What a [`Control::RevocationDigest`] carries: see the module comment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct RevocationDigest {
    pub(super) count: u32,
    pub(super) hash: [u8; REVOCATION_HASH_LEN],
}

impl RevocationDigest {
    pub(super) fn of<'r>(revocations: impl Iterator<Item = &'r Revocation>) -> Self {
        use blake2::Digest;
        let mut pairs: Vec<([u8; 32], u64)> = revocations
            .map(|revocation| (*revocation.node_key.as_bytes(), revocation.revoked_at))
            .collect();
        pairs.sort_unstable();
        let mut hasher = blake2::Blake2s256::new();
        for (key, revoked_at) in &pairs {
            hasher.update(key);
            hasher.update(revoked_at.to_be_bytes());
        }
        let full = hasher.finalize();
        let mut hash = [0u8; REVOCATION_HASH_LEN];
        hash.copy_from_slice(&full[..REVOCATION_HASH_LEN]);
        Self {
            count: u32::try_from(pairs.len()).unwrap_or(u32::MAX),
            hash,
        }
    }
}

impl Mesh {
    pub(super) fn learn_revocation(&mut self, revocation: Revocation) -> Result<(), MeshDrop> {
        // A member list has no network key to sign revocations with.
        let Trust::Network(network) = &self.config.trust else {
            return Err(CertError::BadSignature.into());
        };
        revocation.verify(network)?;
        let key = revocation.node_key;
        if self
            .revocations
            .get(&key)
            .is_some_and(|known| known.revoked_at >= revocation.revoked_at)
        {
            return Ok(());
        }
        self.counters.revocations_learned += 1;
        if self
            .members
            .get(&key)
            .is_some_and(|member| revocation.covers(&member.certificate))
        {
            self.remove_revoked(key);
        }
        self.revocations.insert(key, revocation.clone());
        self.revocation_digest = RevocationDigest::of(self.revocations.values());
        // A new revocation floods: every member forwards it once.
        let direct: Vec<PublicKey> = self.direct_members().collect();
        for peer in direct {
            self.send(peer, &Control::Revocations(vec![revocation.clone()]));
        }
        Ok(())
    }

    /// Adds a revocation given locally (`fjord network revoke` output in
    /// the configuration), and spreads it.
    pub fn revoke(&mut self, revocation: Revocation) -> Result<(), MeshDrop> {
        self.learn_revocation(revocation)
    }

    /// A member a revocation covers: it goes, peer and all, even when it
    /// is a bootstrap member (a revoked one is no way into the mesh).
    fn remove_revoked(&mut self, key: PublicKey) {
        let was_bootstrap = self.bootstrap.remove(&key);
        self.remove_member(key);
        if was_bootstrap {
            self.actions.push_back(MeshAction::Remove { key });
        }
    }

    /// A Hello refused because its certificate is revoked: a peer that
    /// is nothing but that (provisional) goes at the next timeout, `now`,
    /// rather than at its verification deadline. Not at once: the refusal
    /// notice queued for it (`refusals.rs`) still needs its session.
    pub(super) fn refuse_revoked(&mut self, now: Instant, key: PublicKey) {
        if self.members.contains_key(&key) || self.bootstrap.contains(&key) {
            return;
        }
        if let Some(deadline) = self.unverified.get_mut(&key) {
            *deadline = now;
            self.reschedule(key);
        }
    }

    /// Tells `to` what revocations we hold (after its Hello, and at every
    /// check). Only networks have revocations; a member list has none.
    pub(super) fn send_revocation_digest(&mut self, to: PublicKey) {
        if !matches!(self.config.trust, Trust::Network(_)) {
            return;
        }
        let RevocationDigest { count, hash } = self.revocation_digest;
        self.send(to, &Control::RevocationDigest { count, hash });
    }

    /// The periodic check: our digest to every member in session.
    pub(super) fn check_revocations(&mut self) {
        let direct: Vec<PublicKey> = self.direct_members().collect();
        for key in direct {
            self.send_revocation_digest(key);
        }
    }

    /// `from` holds revocations hashing to `digest`: if ours differ, it
    /// gets ours (it may lack some; what we lack, our own check fetches).
    pub(super) fn handle_revocation_digest(&mut self, from: PublicKey, digest: RevocationDigest) {
        if digest != self.revocation_digest {
            self.send_revocations(from);
        }
    }

    /// All our revocations to `to`, as many per message as fit.
    pub(super) fn send_revocations(&mut self, to: PublicKey) {
        if self.revocations.is_empty() {
            return;
        }
        let revocations: Vec<Revocation> = self.revocations.values().cloned().collect();
        for chunk in revocations.chunks(self.revocations_per_message()) {
            self.send(to, &Control::Revocations(chunk.to_vec()));
        }
    }

    fn revocations_per_message(&self) -> usize {
        let budget = self
            .config
            .max_message_bytes
            .saturating_sub(CONTROL_HEADER_LEN + 1);
        (budget / REVOCATION_LEN).clamp(1, MAX_BATCH_ENTRIES)
    }
}
