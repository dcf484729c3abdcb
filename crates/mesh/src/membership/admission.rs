//! Who becomes a member, and with what record: a Hello from the member
//! itself (answered with our own, the list for a joiner and our
//! revocation digest, and announced to the members we meet directly), or
//! a record in another member's gossip. Either way the certificate is
//! checked against the network key (or the member list) and the
//! revocations first.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use fjord_proto::PublicKey;

use super::{
    CHANGED_GOSSIP_DELAY, Member, Mesh, MeshAction, MeshDrop, Trust, observe_endpoint, traversal,
};
use crate::cert::{CertError, Certificate};
use crate::control::{MAX_ENDPOINTS, MemberRecord};

impl Mesh {
    pub(super) fn handle_hello(
        &mut self,
        now: Instant,
        key: PublicKey,
        from: SocketAddr,
        certificate: Certificate,
        wants_members: bool,
        mut host_addresses: Vec<SocketAddr>,
    ) -> Result<(), MeshDrop> {
        host_addresses.truncate(MAX_ENDPOINTS);
        let accepted = if certificate.node_key != key || key == self.own_key() {
            Err(CertError::WrongNode)
        } else {
            self.accept(now, &certificate)
        };
        let certificate = match accepted {
            Ok(certificate) => certificate,
            Err(error) => {
                self.answer_refusal(now, key, error);
                if error == CertError::Revoked {
                    self.refuse_revoked(now, key);
                }
                return Err(error.into());
            }
        };
        self.unverified.remove(&key);
        self.departed.remove(&key);
        let is_new = !self.members.contains_key(&key);
        let relayed = self.relayed_from(&key, from);
        let observed: &[SocketAddr] = if relayed { &[] } else { &[from] };
        self.upsert(certificate, observed, &host_addresses, now);
        let mut first_contact = false;
        if let Some(member) = self.members.get_mut(&key) {
            first_contact = !member.direct;
            member.direct = true;
            if !relayed {
                observe_endpoint(&mut member.endpoints, from);
            }
            // Its own word beats anyone's gossip about it.
            member.host_addresses = host_addresses;
        }
        // Measure the path at once rather than at the next ping round.
        if first_contact {
            self.ping(now, key);
        }
        if !relayed {
            self.traversal_done(key);
        }
        if !self.greeted.contains(&key) {
            self.greet(key);
        }
        // Only a joining node asks for the list, so a join costs one list,
        // not one from every member that greets the newcomer.
        if wants_members {
            self.joined_through_us.insert(key);
            let everyone: Vec<PublicKey> = self.members.keys().copied().collect();
            self.send_members(key, everyone.iter().filter(|k| **k != key));
            // A joiner that predates revocation digests gets them this way.
            self.send_revocations(key);
        }
        // Each side of a greeting says what revocations it holds, so a
        // member started with one (which flooded to nobody) hands it to
        // everyone it meets, and a restarted one catches up.
        self.send_revocation_digest(key);
        // The same for the policy: a member that joins later, or comes
        // back, fetches it from the first member it meets.
        self.send_policy_digest(key);
        if is_new {
            let direct: Vec<PublicKey> = self
                .members
                .iter()
                .filter(|(k, m)| m.direct && **k != key)
                .map(|(k, _)| *k)
                .collect();
            for peer in direct {
                self.send_members(peer, std::iter::once(&key));
            }
        }
        Ok(())
    }

    /// A member as another member describes it.
    pub(super) fn learn(&mut self, now: Instant, record: MemberRecord) {
        let key = record.certificate.node_key;
        if key == self.own_key() {
            return;
        }
        // Lists repeat what we know: a certificate identical to the one
        // held was verified already and costs no signature check.
        let known = self
            .members
            .get(&key)
            .is_some_and(|member| member.certificate == record.certificate);
        let certificate = if known {
            record.certificate
        } else {
            match self.accept(now, &record.certificate) {
                Ok(certificate) => certificate,
                Err(_) => return,
            }
        };
        let heard = now
            .checked_sub(Duration::from_secs(u64::from(record.heard_secs_ago)))
            .unwrap_or(now);
        if self.departed.get(&key).is_some_and(|left| heard <= *left) {
            return;
        }
        if now.saturating_duration_since(heard) >= self.config.member_timeout {
            return;
        }
        self.upsert(
            certificate,
            &record.endpoints,
            &record.host_addresses,
            heard,
        );
    }

    fn upsert(
        &mut self,
        certificate: Certificate,
        endpoints: &[SocketAddr],
        host_addresses: &[SocketAddr],
        heard: Instant,
    ) {
        let key = certificate.node_key;
        match self.members.get_mut(&key) {
            Some(member) => {
                member.last_heard = member.last_heard.max(heard);
                for endpoint in endpoints {
                    merge_endpoint(&mut member.endpoints, *endpoint);
                }
                if member.host_addresses.is_empty() {
                    member.host_addresses =
                        host_addresses.iter().take(MAX_ENDPOINTS).copied().collect();
                }
                if certificate.issued_at > member.certificate.issued_at {
                    let readdress = certificate.addresses != member.certificate.addresses
                        || certificate.routes != member.certificate.routes;
                    member.certificate = certificate;
                    if readdress {
                        let endpoint = member.endpoints.first().copied();
                        // Re-borrowed: routed_prefixes needs all of self.
                        let addresses = self.routed_prefixes(&key, &self.members[&key].certificate);
                        self.actions.push_back(MeshAction::Admit {
                            key,
                            addresses,
                            endpoint,
                        });
                        self.routes_changed();
                    }
                }
            }
            None => {
                let endpoints: Vec<SocketAddr> =
                    endpoints.iter().take(MAX_ENDPOINTS).copied().collect();
                self.actions.push_back(MeshAction::Admit {
                    key,
                    addresses: self.routed_prefixes(&key, &certificate),
                    endpoint: endpoints.first().copied(),
                });
                self.routes_changed();
                self.counters.members_learned += 1;
                // While the membership changes, gossip sooner: a member
                // that missed an announcement (it was not yet in session
                // with the announcer) hears of the newcomer within about
                // a second instead of a full interval.
                self.next_gossip = self.next_gossip.min(self.last_input + CHANGED_GOSSIP_DELAY);
                // A member learned from gossip is met through a rendezvous
                // (see `traversal.rs`), not greeted blindly: an unasked
                // packet at its NAT would spoil the NAT's mapping for it.
                self.members.insert(
                    key,
                    Member {
                        certificate,
                        endpoints,
                        host_addresses: host_addresses
                            .iter()
                            .take(MAX_ENDPOINTS)
                            .copied()
                            .collect(),
                        last_heard: heard,
                        direct: false,
                        rtt: None,
                        ping_in_flight: None,
                        traversal: traversal::Traversal::default(),
                    },
                );
            }
        }
        // A new member, or a new certificate that may expire sooner.
        self.reschedule(key);
        // It may be the exit node we chose, or no longer offer to be one.
        self.refresh_exit();
    }

    /// The record to keep for a member presenting `certificate`: the
    /// certificate itself once verified, or the member list's own entry
    /// for its key when it names the same addresses.
    pub(super) fn accept(
        &self,
        now: Instant,
        certificate: &Certificate,
    ) -> Result<Certificate, CertError> {
        let network = match &self.config.trust {
            Trust::Network(network) => network,
            Trust::Members(listed) => {
                return listed
                    .iter()
                    .find(|member| {
                        member.node_key == certificate.node_key
                            && member.addresses == certificate.addresses
                    })
                    .cloned()
                    .ok_or(CertError::NotListed);
            }
        };
        certificate.verify(network, self.unix_secs(now))?;
        if self
            .revocations
            .get(&certificate.node_key)
            .is_some_and(|revocation| revocation.covers(certificate))
        {
            return Err(CertError::Revoked);
        }
        Ok(certificate.clone())
    }
}

/// A gossiped endpoint goes last, if there is room.
fn merge_endpoint(endpoints: &mut Vec<SocketAddr>, endpoint: SocketAddr) {
    if !endpoints.contains(&endpoint) && endpoints.len() < MAX_ENDPOINTS {
        endpoints.push(endpoint);
    }
}
