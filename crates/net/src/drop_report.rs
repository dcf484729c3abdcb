//! Log lines about refused datagrams, at most one per [`REPORT_INTERVAL`].
//!
//! Every refused datagram is counted by reason (`fjord show`), never
//! logged by itself: a flood of junk would otherwise become a flood of log
//! lines. The worker asks [`DropReport::due`] on its housekeeping tick;
//! the first refusals are reported at once, later ones wait for the
//! interval and arrive summed in one line. The line is a warning when a
//! reason a healthy peer never causes (junk, forgeries, replayed
//! handshakes, misconfiguration) is among them, and a debug line when only
//! everyday ones are (a restarted peer's old session, reordering).
//!
//! One refusal has a line of its own, once per peer: a peer in the other
//! mode ([`log_mode_mismatch`]), since its every packet is refused for a
//! reason the counters alone do not explain.
//!
//! The other way round, a member refusing this node's certificate gets a
//! warning too ([`log_refusal`]): the handshake with it succeeded, so
//! nothing else in our own log says that no member takes us in.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use fjord_mesh::{PeerSends, RefusalReason};
use fjord_proto::{DropCounters, PublicKey};

/// Says why a peer's traffic is refused (and counted as `mode_mismatch`):
/// it runs in the other mode than this interface. The node reports each
/// peer once.
pub fn log_mode_mismatch(peer: Option<&PublicKey>, sends: PeerSends) {
    let peer = peer.map(PublicKey::to_base64).unwrap_or_default();
    match sends {
        PeerSends::IpPackets => tracing::warn!(
            %peer,
            "peer sends IP packets, but this interface is a switch (Mode = switch): every peer of a switch must be fjord in switch mode, not plain WireGuard or fjord in router mode; dropping its packets and leaving it out of floods"
        ),
        PeerSends::Frames => tracing::warn!(
            %peer,
            "peer sends Ethernet frames (it is fjord in switch mode), but this interface is a router: set the same Mode on both ends; dropping its frames"
        ),
    }
}

/// Says that `member` (its name if known, else its key) refused this
/// node's certificate, why, and what to change; `unlogged` refusals by it
/// came since the last such line. The worker keeps these to one a minute
/// per member.
pub fn log_refusal(member: &str, reason: RefusalReason, unlogged: u64) {
    let advice = match reason {
        RefusalReason::OtherNetwork => {
            "the member trusts another network: check Network = in [Mesh] on both sides, or sign this node's certificate with fjord network sign and that network's key"
        }
        RefusalReason::Expired => {
            "sign a new one with fjord network sign, put it in place of the Certificate file and run fjord reload"
        }
        RefusalReason::NotYetValid => {
            "it was issued after the member's clock: check the clocks of both hosts"
        }
        RefusalReason::Revoked => {
            "this node was revoked: only a certificate signed after the revocation lets it back in"
        }
        RefusalReason::NotListed => {
            "the member's [Mesh] Member lines do not list this node's key with these addresses"
        }
        RefusalReason::WrongNode => {
            "the certificate names another public key: sign one for this interface's key with fjord network sign"
        }
        RefusalReason::Other(_) => "a newer member's reason: see its log",
    };
    if unlogged == 0 {
        tracing::warn!("member {member} refused our certificate: {reason} ({advice})");
    } else {
        tracing::warn!(
            "member {member} refused our certificate: {reason} ({advice}; {unlogged} more refusals by it since the last such line)"
        );
    }
}

/// Shortest time between two lines.
pub const REPORT_INTERVAL: Duration = Duration::from_secs(60);

/// One line's worth of refusals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusals {
    /// Datagrams refused since the last line.
    pub total: u64,
    /// `12 unknown_message_type, 3 authentication_failed`.
    pub by_reason: String,
    /// Whether a reason a healthy peer never causes is among them.
    pub suspicious: bool,
}

/// Remembers what was reported, and when.
#[derive(Debug)]
pub struct DropReport {
    reported: DropCounters,
    next_line: Instant,
}

impl DropReport {
    /// Nothing reported yet; refusals already counted in `counters` are
    /// not news.
    pub fn new(now: Instant, counters: &DropCounters) -> Self {
        Self {
            reported: counters.clone(),
            next_line: now,
        }
    }

    /// The refusals to log now, if any arrived since the last line and the
    /// interval has passed; they then count as reported.
    pub fn due(&mut self, now: Instant, counters: &DropCounters) -> Option<Refusals> {
        if now < self.next_line {
            return None;
        }
        let refusals = summarize(&counters.since(&self.reported))?;
        self.reported = counters.clone();
        self.next_line = now + REPORT_INTERVAL;
        Some(refusals)
    }
}

/// The received-datagram refusals among `delta`, largest first.
fn summarize(delta: &DropCounters) -> Option<Refusals> {
    let mut refused: Vec<_> = delta
        .nonzero()
        .filter(|(reason, _)| reason.refuses_received())
        .collect();
    if refused.is_empty() {
        return None;
    }
    refused.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.name().cmp(b.0.name())));
    let mut by_reason = String::new();
    for (index, (reason, count)) in refused.iter().enumerate() {
        let separator = if index == 0 { "" } else { ", " };
        let _ = write!(by_reason, "{separator}{count} {}", reason.name());
    }
    Some(Refusals {
        total: refused.iter().map(|(_, count)| count).sum(),
        by_reason,
        suspicious: refused.iter().any(|(reason, _)| reason.is_suspicious()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use fjord_proto::DropReason;

    fn counted(reasons: &[(DropReason, u64)]) -> DropCounters {
        let mut counters = DropCounters::default();
        for &(reason, n) in reasons {
            for _ in 0..n {
                counters.count(reason);
            }
        }
        counters
    }

    #[test]
    fn a_flood_is_one_line_per_interval() {
        let start = Instant::now();
        let mut report = DropReport::new(start, &DropCounters::default());
        let mut counters = DropCounters::default();
        let mut lines = Vec::new();
        // A junk datagram every millisecond for three and a half minutes,
        // looked at once a second.
        for second in 0..210u64 {
            for _ in 0..1000 {
                counters.count(DropReason::UnknownMessageType);
            }
            let now = start + Duration::from_secs(second);
            lines.extend(report.due(now, &counters));
        }
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0].by_reason, "1000 unknown_message_type");
        assert_eq!(lines[1].total, 60_000);
        assert!(lines.iter().all(|line| line.suspicious));
    }

    #[test]
    fn lines_name_each_received_reason_largest_first() {
        let start = Instant::now();
        let mut report = DropReport::new(start, &DropCounters::default());
        let counters = counted(&[
            (DropReason::ReplayedCounter, 2),
            (DropReason::AuthenticationFailed, 5),
            (DropReason::NoRoute, 7),
        ]);
        let line = report.due(start, &counters).expect("a line");
        assert_eq!(
            line.by_reason,
            "5 authentication_failed, 2 replayed_counter"
        );
        assert_eq!(line.total, 7);
        assert!(line.suspicious);
        // Nothing new: nothing to say, even once the interval has passed.
        assert_eq!(report.due(start + REPORT_INTERVAL, &counters), None);
    }

    #[test]
    fn everyday_refusals_are_not_suspicious_and_old_counts_are_not_news() {
        let start = Instant::now();
        let old = counted(&[(DropReason::MalformedMessage, 3)]);
        let mut report = DropReport::new(start, &old);
        let mut counters = old.clone();
        counters.add(&counted(&[(DropReason::UnknownReceiverIndex, 4)]));
        let line = report.due(start, &counters).expect("a line");
        assert_eq!(line.by_reason, "4 unknown_receiver_index");
        assert!(!line.suspicious);
    }
}
