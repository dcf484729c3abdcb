//! Which carrier problems (`carrier::CarrierProblem`) get a warning: the
//! first of each kind about one far-end address, then none for
//! [`QUIET_INTERVAL`] (the repeats are debug lines).
//!
//! A wrong fallback setting fails the same way at every attempt, and the
//! node attempts again each time UDP goes unanswered (every 10 to 15 s)
//! for as long as the settings stay wrong: a warning per attempt would
//! bury the one line that says what to change. Keyed by address, not by
//! peer: the listening side of a mismatch cannot tell which peer sent the
//! bytes it could not read.

use std::collections::HashMap;
use std::mem::Discriminant;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::carrier::CarrierProblem;

/// Shortest time between two warnings of one kind about one address.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(3600);

/// Addresses remembered; past this, those warned about longest ago are
/// forgotten (their next problem warns again).
const REMEMBERED: usize = 1024;

type Key = (IpAddr, Discriminant<CarrierProblem>);

/// When each address last got a warning of each kind.
#[derive(Debug, Default)]
pub struct CarrierLog {
    warned: HashMap<Key, Instant>,
}

impl CarrierLog {
    /// `problem` happened at `now`: whether it gets a warning.
    pub fn warns(&mut self, problem: &CarrierProblem, now: Instant) -> bool {
        let key = (problem.remote().ip(), std::mem::discriminant(problem));
        if let Some(last) = self.warned.get(&key)
            && now.saturating_duration_since(*last) < QUIET_INTERVAL
        {
            return false;
        }
        if self.warned.len() >= REMEMBERED {
            self.warned
                .retain(|_, last| now.saturating_duration_since(*last) < QUIET_INTERVAL);
            if self.warned.len() >= REMEMBERED {
                self.warned.clear();
            }
        }
        self.warned.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::carrier::CarrierKind;

    #[test]
    fn one_warning_per_kind_and_address_per_interval() {
        let start = Instant::now();
        let remote = "198.19.0.2:443".parse().unwrap();
        let refused = CarrierProblem::Refused {
            remote,
            ours: CarrierKind::Tcp,
        };
        let mut log = CarrierLog::default();
        // An attempt every 15 s for ten minutes: one warning.
        let warnings = (0..40)
            .filter(|attempt| log.warns(&refused, start + Duration::from_secs(15 * attempt)))
            .count();
        assert_eq!(warnings, 1);
        // Another kind of problem, or another address, is news.
        let mismatch = CarrierProblem::OtherCarrier {
            remote,
            ours: CarrierKind::Tcp,
        };
        assert!(log.warns(&mismatch, start));
        let elsewhere = CarrierProblem::Refused {
            remote: "198.19.0.3:443".parse().unwrap(),
            ours: CarrierKind::Tcp,
        };
        assert!(log.warns(&elsewhere, start));
        // The same port from another source port is the same address.
        let again = CarrierProblem::OtherCarrier {
            remote: "198.19.0.2:40000".parse().unwrap(),
            ours: CarrierKind::Tcp,
        };
        assert!(!log.warns(&again, start));
        assert!(log.warns(&refused, start + QUIET_INTERVAL));
    }

    #[test]
    fn the_remembered_addresses_are_bounded() {
        let start = Instant::now();
        let mut log = CarrierLog::default();
        for host in 0..(3 * REMEMBERED as u32) {
            let remote = std::net::SocketAddr::from((std::net::Ipv4Addr::from(host), 443));
            assert!(log.warns(&CarrierProblem::NotIntroduced { remote }, start));
        }
        assert!(log.warned.len() <= REMEMBERED);
    }
}
