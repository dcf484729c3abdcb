//! Spreading what a member knows: pings and member lists cut to the MTU
//! (revocations have their own module, `revocations.rs`).

use std::time::Instant;

use fjord_proto::PublicKey;

use super::Mesh;
use crate::control::{
    CONTROL_HEADER_LEN, Control, MAX_BATCH_ENTRIES, MemberRecord, member_record_len,
};

impl Mesh {
    pub(super) fn ping_all(&mut self, now: Instant) {
        // Only members that spoke to us: a ping to one we have not met
        // would leave as a blind handshake, which spoils its NAT's mapping
        // (traversal.rs meets those).
        let keys: Vec<PublicKey> = self.direct_members().collect();
        for key in keys {
            self.ping(now, key);
        }
        // Bootstrap members we have not met yet: a Hello brings the
        // session up and starts the exchange.
        let unmet: Vec<PublicKey> = self
            .bootstrap
            .iter()
            .filter(|key| !self.members.contains_key(*key))
            .copied()
            .collect();
        for key in unmet {
            self.greet(key);
        }
    }

    pub(super) fn ping(&mut self, now: Instant, key: PublicKey) {
        let nonce = self.next_random();
        let stale_after = self.config.ping_interval * 3;
        let Some(member) = self.members.get_mut(&key) else {
            return;
        };
        // A ping still unanswered stays the one measured, so a lost pong
        // does not turn into a huge RTT later.
        if member
            .ping_in_flight
            .is_none_or(|(_, sent)| now.saturating_duration_since(sent) > stale_after)
        {
            member.ping_in_flight = Some((nonce, now));
        }
        let nonce = member.ping_in_flight.map_or(nonce, |(n, _)| n);
        self.send(key, &Control::Ping { nonce });
    }

    pub(super) fn gossip_to_random_member(&mut self) {
        let direct: Vec<PublicKey> = self.direct_members().collect();
        if direct.is_empty() {
            return;
        }
        let pick = direct[(self.next_random() % direct.len() as u64) as usize];
        let everyone: Vec<PublicKey> = self.members.keys().copied().collect();
        self.send_members(pick, everyone.iter().filter(|k| **k != pick));
    }

    /// Sends the records of `keys` to `to`, as many per message as fit.
    pub(super) fn send_members<'k>(
        &mut self,
        to: PublicKey,
        keys: impl Iterator<Item = &'k PublicKey>,
    ) {
        let budget = self
            .config
            .max_message_bytes
            .saturating_sub(CONTROL_HEADER_LEN + 1);
        let mut batch = Vec::new();
        let mut batch_bytes = 0;
        for key in keys {
            let Some(record) = self.record(key) else {
                continue;
            };
            let len = member_record_len(&record);
            if !batch.is_empty() && (batch_bytes + len > budget || batch.len() == MAX_BATCH_ENTRIES)
            {
                self.send(to, &Control::Members(std::mem::take(&mut batch)));
                batch_bytes = 0;
            }
            batch_bytes += len;
            batch.push(record);
        }
        if !batch.is_empty() {
            self.send(to, &Control::Members(batch));
        }
    }

    fn record(&self, key: &PublicKey) -> Option<MemberRecord> {
        let member = self.members.get(key)?;
        let heard_secs_ago = self
            .last_input
            .saturating_duration_since(member.last_heard)
            .as_secs();
        Some(MemberRecord {
            certificate: member.certificate.clone(),
            endpoints: member.endpoints.clone(),
            host_addresses: member.host_addresses.clone(),
            heard_secs_ago: u32::try_from(heard_secs_ago).unwrap_or(u32::MAX),
        })
    }
}
