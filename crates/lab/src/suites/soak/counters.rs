//! Counters of both sides of the soak's WireGuard tunnel, read at quiet
//! moments, and what they must agree on.
//!
//! A reading asks each side for its peer's byte counters (`get=1`: bytes
//! of authenticated datagrams sent to and received from the peer,
//! handshake messages included), for fjord's own counters where it keeps
//! them (`get=fjord`: drops by reason, handshakes computed, failed UDP
//! sends), and reads the kernel's drops at the side's full UDP socket.
//! The suite holds the load first, and a reading is *settled* once two of
//! them [`SETTLE_GAP`] apart agree: then nothing was in flight between
//! the two sides' numbers.
//!
//! Between two settled readings in the same life of both sides, for each
//! direction: the receiver never counts more bytes than the sender, and
//! the difference is at most what the receiver refused (drops of
//! received datagrams, by reason), its kernel dropped at a full socket,
//! and the sender failed to send, each at most one datagram of
//! [`MAX_DATAGRAM_BYTES`]. Across a restart nothing can be checked: what
//! the stopped side counted after the last reading died with it. Within
//! one life of a side, every counter only grows.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use fjord_proto::DropReason;
use fjord_proto::wire::TRANSPORT_MIN_LEN;

use crate::attack::udp_socket_drops;
use crate::systems::wireguard::{DEFAULT_MTU, End, LISTEN_PORT, Pair};

/// The largest datagram of the soak's tunnel: a full-MTU packet with the
/// transport header and tag.
pub const MAX_DATAGRAM_BYTES: u64 = (TRANSPORT_MIN_LEN + DEFAULT_MTU as usize) as u64;
/// How far apart two readings must agree to settle.
const SETTLE_GAP: Duration = Duration::from_millis(100);
const SETTLE_ATTEMPTS: usize = 20;
/// fjord's count of handshake initiations it computed (as responder).
const HANDSHAKES_COMPUTED: &str = "handshake_initiations_computed";
const UDP_SEND_ERRORS: &str = "udp_send_errors";

/// One side's counters at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SideCounters {
    /// Bytes of authenticated datagrams sent to the peer.
    pub tx_bytes: u64,
    /// Bytes of authenticated datagrams received from the peer.
    pub rx_bytes: u64,
    /// fjord's own counters by name (`drop_unknown_receiver_index`,
    /// `handshake_initiations_computed`, `tx_packets`, …); `None` for an
    /// implementation that keeps none.
    pub own: Option<BTreeMap<String, u64>>,
    /// Datagrams its kernel dropped at its full UDP socket.
    pub socket_drops: u64,
}

impl SideCounters {
    fn own(&self, name: &str) -> u64 {
        self.own
            .as_ref()
            .and_then(|own| own.get(name).copied())
            .unwrap_or(0)
    }

    /// Received datagrams it refused, all reasons (0 where it keeps no
    /// drop counters).
    fn refused(&self) -> u64 {
        DropReason::ALL
            .iter()
            .filter(|reason| reason.refuses_received())
            .map(|reason| self.own(&format!("drop_{}", reason.name())))
            .sum()
    }

    /// Every counter by name, to compare readings.
    fn all(&self) -> BTreeMap<String, u64> {
        let mut all = self.own.clone().unwrap_or_default();
        all.insert("tx_bytes".into(), self.tx_bytes);
        all.insert("rx_bytes".into(), self.rx_bytes);
        all.insert("socket_drops".into(), self.socket_drops);
        all
    }
}

/// Both sides' counters at one moment.
#[derive(Debug, Clone)]
pub struct Reading {
    pub at: Instant,
    /// Left, then right.
    pub sides: [SideCounters; 2],
    /// Which life of each side this is (0 before its first restart).
    pub lives: [u32; 2],
    pub settled: bool,
}

fn index(end: End) -> usize {
    match end {
        End::Left => 0,
        End::Right => 1,
    }
}

/// Reads one side of `pair`.
fn read_side(pair: &Pair<'_>, end: End) -> Result<SideCounters, String> {
    let interface = pair.interface(end)?;
    let (tx_bytes, rx_bytes) = peer_bytes(&interface.query("get=1")?)?;
    let own = own_counters(&interface.query("get=fjord")?);
    let socket_drops = udp_socket_drops(pair.namespace(end), LISTEN_PORT)
        .map_err(|error| format!("reading socket drops: {error}"))?;
    Ok(SideCounters {
        tx_bytes,
        rx_bytes,
        own,
        socket_drops,
    })
}

/// Reads both sides until two readings agree (the caller holds the load).
pub fn read_quiet(pair: &Pair<'_>, lives: [u32; 2]) -> Result<Reading, String> {
    let read = || Ok::<_, String>([read_side(pair, End::Left)?, read_side(pair, End::Right)?]);
    let mut last = read()?;
    for _ in 0..SETTLE_ATTEMPTS {
        std::thread::sleep(SETTLE_GAP);
        let next = read()?;
        let settled = next == last;
        last = next;
        if settled {
            break;
        }
    }
    let settled = read()? == last;
    Ok(Reading {
        at: Instant::now(),
        sides: last,
        lives,
        settled,
    })
}

/// Whether a control-protocol reply ended with `errno=0`.
fn succeeded(reply: &str) -> bool {
    reply.lines().any(|line| line == "errno=0")
}

/// The byte counters of a `get=1` reply, summed over its peers (the soak's
/// sides have one each).
fn peer_bytes(reply: &str) -> Result<(u64, u64), String> {
    if !succeeded(reply) {
        return Err(format!("get=1 failed: {}", reply.trim()));
    }
    let (mut tx, mut rx) = (0, 0);
    for line in reply.lines() {
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let slot = match key {
            "tx_bytes" => &mut tx,
            "rx_bytes" => &mut rx,
            _ => continue,
        };
        *slot += value
            .parse::<u64>()
            .map_err(|_| format!("get=1: malformed counter {line:?}"))?;
    }
    Ok((tx, rx))
}

/// The numeric counters of a `get=fjord` reply; `None` if the
/// implementation does not answer it (not fjord).
fn own_counters(reply: &str) -> Option<BTreeMap<String, u64>> {
    succeeded(reply).then(|| {
        reply
            .lines()
            .filter(|line| !line.starts_with("errno="))
            .filter_map(|line| {
                let (key, value) = line.split_once('=')?;
                Some((key.to_string(), value.parse().ok()?))
            })
            .collect()
    })
}

/// How one direction's counters agreed over the checked intervals.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Balance {
    pub sent_bytes: u64,
    pub received_bytes: u64,
    /// Datagrams the receiver refused or its kernel dropped, and sends
    /// that failed: what may explain a difference.
    pub lost_datagrams: u64,
    /// Intervals checked.
    pub intervals: u64,
    /// What the drops do not explain, interval by interval.
    pub unexplained: Vec<String>,
    /// Intervals not checked (across a restart, or a reading that did
    /// not settle), and their time.
    pub unchecked_intervals: u64,
    pub unchecked: Duration,
}

/// Every reading of a soak, in order.
#[derive(Debug, Default)]
pub struct Ledger {
    pub readings: Vec<Reading>,
}

impl Ledger {
    /// The counters of bytes from `sender` to the other side, interval by
    /// interval; minutes in the descriptions count from `start`.
    pub fn balance(&self, sender: End, start: Instant) -> Balance {
        let (from, to) = (index(sender), 1 - index(sender));
        let mut balance = Balance::default();
        for pair in self.readings.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if before.lives != after.lives || !before.settled || !after.settled {
                balance.unchecked_intervals += 1;
                balance.unchecked += after.at.saturating_duration_since(before.at);
                continue;
            }
            let delta = |side: usize, value: fn(&SideCounters) -> u64| {
                value(&after.sides[side]).wrapping_sub(value(&before.sides[side]))
            };
            let sent = delta(from, |c| c.tx_bytes);
            let received = delta(to, |c| c.rx_bytes);
            let lost = delta(to, SideCounters::refused)
                + delta(to, |c| c.socket_drops)
                + delta(from, |c| c.own(UDP_SEND_ERRORS));
            balance.intervals += 1;
            balance.sent_bytes += sent;
            balance.received_bytes += received;
            balance.lost_datagrams += lost;
            let explained = received <= sent && sent - received <= lost * MAX_DATAGRAM_BYTES;
            if !explained {
                balance.unexplained.push(format!(
                    "{:.1}–{:.1} min: sent {sent} bytes, received {received}, {lost} datagrams dropped",
                    minutes(before.at, start),
                    minutes(after.at, start),
                ));
            }
        }
        balance
    }

    /// Counters of `end` that went down within one of its lives.
    pub fn went_back(&self, end: End, start: Instant) -> Vec<String> {
        let side = index(end);
        let mut found = Vec::new();
        for pair in self.readings.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            if before.lives[side] != after.lives[side] {
                continue;
            }
            let earlier = before.sides[side].all();
            for (name, value) in after.sides[side].all() {
                let was = earlier.get(&name).copied().unwrap_or(0);
                if value < was {
                    found.push(format!(
                        "{name} {was} → {value} at {:.1} min",
                        minutes(after.at, start)
                    ));
                }
            }
        }
        found
    }

    /// Drops by reason at `end` since it first started, every life summed
    /// as last read; `None` where it keeps no drop counters.
    pub fn drops(&self, end: End) -> Option<BTreeMap<String, u64>> {
        let side = index(end);
        let mut total = BTreeMap::new();
        for (position, reading) in self.readings.iter().enumerate() {
            let last_of_life = self
                .readings
                .get(position + 1)
                .is_none_or(|next| next.lives[side] != reading.lives[side]);
            if !last_of_life {
                continue;
            }
            for (name, count) in reading.sides[side].own.as_ref()? {
                if let Some(reason) = name.strip_prefix("drop_")
                    && *count > 0
                {
                    *total.entry(reason.to_string()).or_default() += count;
                }
            }
        }
        Some(total)
    }

    /// Handshakes over the soak by the responders' own counts (initiations
    /// computed, both sides, every life); `None` unless both keep them.
    pub fn handshakes(&self) -> Option<u64> {
        let mut total = 0;
        for pair in self.readings.windows(2) {
            let (before, after) = (&pair[0], &pair[1]);
            for side in 0..2 {
                let count = |reading: &Reading| {
                    reading.sides[side]
                        .own
                        .as_ref()
                        .map(|own| own.get(HANDSHAKES_COMPUTED).copied().unwrap_or(0))
                };
                let now = count(after)?;
                // A new life counts from zero.
                let then = if before.lives[side] == after.lives[side] {
                    count(before)?
                } else {
                    0
                };
                total += now.saturating_sub(then);
            }
        }
        Some(total)
    }
}

fn minutes(at: Instant, start: Instant) -> f64 {
    at.saturating_duration_since(start).as_secs_f64() / 60.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(tx_bytes: u64, rx_bytes: u64, drops: &[(&str, u64)]) -> SideCounters {
        SideCounters {
            tx_bytes,
            rx_bytes,
            own: Some(
                drops
                    .iter()
                    .map(|(name, count)| (name.to_string(), *count))
                    .collect(),
            ),
            socket_drops: 0,
        }
    }

    fn reading(start: Instant, secs: u64, sides: [SideCounters; 2], lives: [u32; 2]) -> Reading {
        Reading {
            at: start + Duration::from_secs(secs),
            sides,
            lives,
            settled: true,
        }
    }

    #[test]
    fn reads_peer_bytes_and_own_counters() {
        let get = "private_key=00\nlisten_port=51820\npublic_key=11\ntx_bytes=532\nrx_bytes=440\nerrno=0\n";
        assert_eq!(peer_bytes(get), Ok((532, 440)));
        assert!(peer_bytes("errno=1\n").is_err());
        let fjord = "datapath_mtu=1420\ndrop_replayed_counter=3\nhandshake_initiations_computed=7\n\
                     member=x y\nerrno=0\n";
        let own = own_counters(fjord).unwrap();
        assert_eq!(own.get("drop_replayed_counter"), Some(&3));
        assert_eq!(own.get(HANDSHAKES_COMPUTED), Some(&7));
        assert_eq!(own_counters("errno=22\n"), None);
    }

    #[test]
    fn a_difference_needs_drops_to_explain_it() {
        let start = Instant::now();
        let mut ledger = Ledger::default();
        ledger.readings.push(reading(
            start,
            0,
            [side(1000, 0, &[]), side(0, 1000, &[])],
            [0; 2],
        ));
        // 2,000 bytes sent, 1,500 received, one datagram replayed: fine.
        ledger.readings.push(reading(
            start,
            60,
            [
                side(3000, 0, &[]),
                side(0, 2500, &[("drop_replayed_counter", 1)]),
            ],
            [0; 2],
        ));
        // 3,000 more sent, none received, no drop: unexplained.
        ledger.readings.push(reading(
            start,
            120,
            [
                side(6000, 0, &[]),
                side(0, 2500, &[("drop_replayed_counter", 1)]),
            ],
            [0; 2],
        ));
        let balance = ledger.balance(End::Left, start);
        assert_eq!(balance.intervals, 2);
        assert_eq!((balance.sent_bytes, balance.received_bytes), (5000, 1500));
        assert_eq!(balance.lost_datagrams, 1);
        assert_eq!(balance.unexplained.len(), 1, "{:?}", balance.unexplained);
        assert!(balance.unexplained[0].starts_with("1.0–2.0 min"));
    }

    #[test]
    fn restarts_are_not_checked_and_count_handshakes_from_zero() {
        let start = Instant::now();
        let handshakes = |n| [(HANDSHAKES_COMPUTED, n)];
        let mut ledger = Ledger::default();
        for (secs, left, right, life) in [
            (0, 10, 4, 0),
            (60, 12, 6, 0),
            // The right side restarted: its counters start again.
            (90, 13, 1, 1),
            (150, 15, 2, 1),
        ] {
            let right_bytes = if life == 0 {
                secs * 100
            } else {
                (secs - 90) * 100 + 50
            };
            ledger.readings.push(reading(
                start,
                secs,
                [
                    side(secs * 100, secs * 100, &handshakes(left)),
                    side(right_bytes, right_bytes, &handshakes(right)),
                ],
                [0, life],
            ));
        }
        assert_eq!(ledger.handshakes(), Some(2 + 2 + 1 + 1 + 2 + 1));
        let balance = ledger.balance(End::Right, start);
        assert!(balance.unexplained.is_empty(), "{:?}", balance.unexplained);
        assert_eq!(balance.intervals, 2);
        assert_eq!(balance.unchecked_intervals, 1);
        assert_eq!(balance.unchecked, Duration::from_secs(30));
        // The right side's counters fell only across its restart.
        assert!(ledger.went_back(End::Right, start).is_empty());
        assert!(ledger.went_back(End::Left, start).is_empty());
    }

    #[test]
    fn drops_sum_the_last_reading_of_every_life() {
        let start = Instant::now();
        let mut ledger = Ledger::default();
        for (secs, drops, life) in [(0, 1, 0), (60, 6, 0), (90, 2, 1)] {
            let right = side(0, 0, &[("drop_unknown_receiver_index", drops)]);
            ledger
                .readings
                .push(reading(start, secs, [side(0, 0, &[]), right], [0, life]));
        }
        let expected = BTreeMap::from([("unknown_receiver_index".to_string(), 8)]);
        assert_eq!(ledger.drops(End::Right), Some(expected));
        assert_eq!(ledger.drops(End::Left), Some(BTreeMap::new()));
    }

    #[test]
    fn a_counter_going_back_within_a_life_is_found() {
        let start = Instant::now();
        let mut ledger = Ledger::default();
        ledger.readings.push(reading(
            start,
            0,
            [side(10, 10, &[]), side(10, 10, &[])],
            [0; 2],
        ));
        ledger.readings.push(reading(
            start,
            60,
            [side(5, 10, &[]), side(10, 10, &[])],
            [0; 2],
        ));
        let back = ledger.went_back(End::Left, start);
        assert_eq!(back, ["tx_bytes 10 → 5 at 1.0 min"]);
    }
}
