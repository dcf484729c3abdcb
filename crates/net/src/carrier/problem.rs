//! Why a carrier does not work, as the side that notices can tell, and
//! the setting that fixes it. The worker turns each into one warning per
//! far end (`crate::carrier_log`).
//!
//! What each side sees when the settings disagree:
//!
//! ```text
//! we connect, nothing listens there   TCP: connect refused; fake TCP: a reset
//!   (no FallbackPort on that side)     answering our SYN            → Refused
//! we connect, nothing answers         no SYN-ACK before the node
//!   (TCP dropped on the way, or        gives up (5 s)               → Unanswered
//!   that host gone)
//! fake TCP meets a TCP carrier        our flow (either end) gets fjord's TCP
//!                                      preamble as its payload      → OtherCarrier
//! a TCP carrier meets fake TCP        accepted: the stream starts with a bare
//!                                      WireGuard message, or with fake
//!                                      TCP's answer to our preamble → OtherCarrier
//!                                     ours: the far end accepts (fake TCP answers
//!                                      any SYN) but never sends the
//!                                      preamble                     → NotIntroduced
//! the carrier cannot start here       fake TCP without CAP_NET_RAW, or toward
//!                                      IPv6                         → CannotOpen
//! ```

use std::fmt;
use std::io;
use std::net::SocketAddr;

use super::framing::{FAKE_TCP_ANSWER, PREAMBLE};

/// The two carriers, as `FallbackCarrier` names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CarrierKind {
    FakeTcp,
    Tcp,
}

impl CarrierKind {
    /// The value of `FallbackCarrier`.
    pub fn name(self) -> &'static str {
        match self {
            CarrierKind::FakeTcp => "fake-tcp",
            CarrierKind::Tcp => "tcp",
        }
    }

    fn other(self) -> Self {
        match self {
            CarrierKind::FakeTcp => CarrierKind::Tcp,
            CarrierKind::Tcp => CarrierKind::FakeTcp,
        }
    }
}

impl fmt::Display for CarrierKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A carrier that did not work; `ours` is this node's `FallbackCarrier`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CarrierProblem {
    /// Our attempt was refused: nothing accepts carriers at that port.
    Refused {
        remote: SocketAddr,
        ours: CarrierKind,
    },
    /// Our attempt got no answer before the node gave up.
    Unanswered {
        remote: SocketAddr,
        ours: CarrierKind,
    },
    /// The far end speaks the other carrier (seen in what it sent).
    OtherCarrier {
        remote: SocketAddr,
        ours: CarrierKind,
    },
    /// Our TCP connection opened, but the far end never sent the
    /// carrier's preamble: not a TCP carrier (fake TCP answers any SYN).
    NotIntroduced { remote: SocketAddr },
    /// The carrier could not even start here.
    CannotOpen {
        remote: SocketAddr,
        ours: CarrierKind,
        error: io::ErrorKind,
    },
}

impl CarrierProblem {
    /// The far end the problem is about.
    pub fn remote(&self) -> SocketAddr {
        match *self {
            CarrierProblem::Refused { remote, .. }
            | CarrierProblem::Unanswered { remote, .. }
            | CarrierProblem::OtherCarrier { remote, .. }
            | CarrierProblem::NotIntroduced { remote }
            | CarrierProblem::CannotOpen { remote, .. } => remote,
        }
    }
}

impl fmt::Display for CarrierProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            CarrierProblem::Refused { remote, ours } => write!(
                f,
                "fallback carrier refused by {remote} ({ours}): nothing accepts carriers there; \
                 that node needs FallbackPort = {} in its [Interface], or this [Peer]'s \
                 FallbackPort is wrong",
                remote.port()
            ),
            CarrierProblem::Unanswered { remote, ours } => write!(
                f,
                "fallback carrier to {remote} ({ours}) unanswered: TCP to that port is blocked \
                 too, or that node has no FallbackPort = {} in its [Interface]",
                remote.port()
            ),
            CarrierProblem::OtherCarrier { remote, ours } => write!(
                f,
                "fallback carrier mismatch with {}: this node has FallbackCarrier = {ours}, \
                 that node FallbackCarrier = {}; set the same on both",
                remote.ip(),
                ours.other()
            ),
            CarrierProblem::NotIntroduced { remote } => write!(
                f,
                "fallback carrier to {remote} (tcp) connected, but the far end never answered as \
                 a tcp carrier: that node likely has FallbackCarrier = fake-tcp (set the same \
                 FallbackCarrier on both), or another program holds that port"
            ),
            CarrierProblem::CannotOpen {
                remote,
                ours,
                error,
            } => {
                write!(
                    f,
                    "cannot open a {ours} fallback carrier to {remote}: {error}"
                )?;
                match (ours, error) {
                    (CarrierKind::FakeTcp, io::ErrorKind::PermissionDenied) => f.write_str(
                        "; FallbackCarrier = fake-tcp needs CAP_NET_RAW, FallbackCarrier = tcp does not",
                    ),
                    (CarrierKind::FakeTcp, io::ErrorKind::Unsupported) => f.write_str(
                        "; FallbackCarrier = fake-tcp is IPv4 only, FallbackCarrier = tcp is not",
                    ),
                    _ => Ok(()),
                }
            }
        }
    }
}

/// Whether `bytes` open with a WireGuard message header (type 1 to 4,
/// three reserved zero bytes): what fake TCP puts in a stream, where a
/// TCP carrier puts its preamble.
pub fn starts_like_wireguard(bytes: &[u8]) -> bool {
    matches!(bytes, [1..=4, 0, 0, 0, ..])
}

/// Whether the first bytes of an accepted stream come from a fake-TCP
/// flow: a bare WireGuard message (it sent before our preamble reached
/// it) or its answer to our preamble.
pub fn starts_like_fake_tcp(bytes: &[u8]) -> bool {
    starts_like_wireguard(bytes) || bytes.starts_with(&FAKE_TCP_ANSWER)
}

/// Whether a fake-TCP payload is a TCP carrier's preamble.
pub fn starts_with_preamble(payload: &[u8]) -> bool {
    payload.starts_with(&PREAMBLE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_problem_names_the_setting_that_fixes_it() {
        let remote: SocketAddr = "198.19.0.2:443".parse().unwrap();
        let cases = [
            (
                CarrierProblem::Refused {
                    remote,
                    ours: CarrierKind::FakeTcp,
                },
                "FallbackPort = 443",
            ),
            (
                CarrierProblem::Unanswered {
                    remote,
                    ours: CarrierKind::Tcp,
                },
                "FallbackPort = 443",
            ),
            (
                CarrierProblem::OtherCarrier {
                    remote,
                    ours: CarrierKind::Tcp,
                },
                "this node has FallbackCarrier = tcp, that node FallbackCarrier = fake-tcp",
            ),
            (
                CarrierProblem::NotIntroduced { remote },
                "FallbackCarrier = fake-tcp",
            ),
            (
                CarrierProblem::CannotOpen {
                    remote,
                    ours: CarrierKind::FakeTcp,
                    error: io::ErrorKind::PermissionDenied,
                },
                "needs CAP_NET_RAW, FallbackCarrier = tcp does not",
            ),
        ];
        for (problem, named) in cases {
            let line = problem.to_string();
            assert!(line.contains(named), "{line}");
            assert_eq!(problem.remote(), remote);
        }
    }

    #[test]
    fn wireguard_messages_and_preambles_are_told_apart() {
        let initiation = [1, 0, 0, 0, 0x55, 0x66];
        assert!(starts_like_wireguard(&initiation));
        assert!(!starts_like_wireguard(&PREAMBLE));
        assert!(!starts_like_wireguard(b"\x16\x03\x01\x02\x00"));
        assert!(!starts_like_wireguard(&[5, 0, 0, 0]));
        assert!(!starts_like_wireguard(&[1, 0, 0]));
        assert!(starts_with_preamble(&PREAMBLE));
        assert!(!starts_with_preamble(&initiation));
    }
}
