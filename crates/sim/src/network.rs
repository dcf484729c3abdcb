//! The simulated underlay: where each member listens, how long a datagram
//! takes between two of them, which datagrams are lost, and what NATs and
//! partitions stand in the way. It decides a datagram's fate; the event
//! queue (`sim.rs`) carries it.
//!
//! ```text
//! sender's host address ─▶ partition? ─▶ sender's NAT (maps the source)
//!     ─▶ destination: a host address (reached unless it is behind a NAT)
//!                     or a NAT's public address (its filter decides)
//!     ─▶ loss (one seeded draw per datagram) ─▶ latency of the two members
//! ```
//!
//! Latency is per member, not per pair: each member has an access delay
//! drawn once, and a datagram between two members takes the sum of
//! theirs. That spreads round trips like a real mesh's (near and far
//! members) without a table that grows with the square of the size.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};

use crate::nat::Nat;

/// The port every member listens on.
pub const LISTEN_PORT: u16 = 51820;

/// Most members the address plan holds (a /17 of hosts, a /17 of NATs).
pub const MAX_MEMBERS: usize = 32_000;

/// Member `index`'s own address: 198.18.0.0/17, from .0.1 on.
pub fn host_address(index: usize) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(plan_address(0, index)), LISTEN_PORT)
}

/// The public address of the NAT in front of member `index`:
/// 198.18.128.0/17.
fn nat_address(index: usize) -> IpAddr {
    IpAddr::V4(plan_address(128, index))
}

/// Member `index`'s overlay address: 198.19.0.0/16, from .0.1 on.
pub fn overlay_address(index: usize) -> IpAddr {
    let [_, _, high, low] = plan_address(0, index).octets();
    IpAddr::V4(Ipv4Addr::new(198, 19, high, low))
}

fn plan_address(third_octet_base: u8, index: usize) -> Ipv4Addr {
    // From 1, so no member sits on a network's .0.0.
    let number = index + 1;
    assert!(number < MAX_MEMBERS, "the address plan holds {MAX_MEMBERS}");
    Ipv4Addr::new(
        198,
        18,
        third_octet_base + (number >> 8) as u8,
        (number & 0xff) as u8,
    )
}

/// The link between every pair of members.
#[derive(Debug, Clone)]
pub struct LinkConfig {
    /// Each member's access delay is drawn uniformly from this range; a
    /// datagram takes the sum of its two ends' (default 1–25 ms: one-way
    /// delays of 2–50 ms, a continent's spread).
    pub access_delay: (Duration, Duration),
    /// Probability that any one datagram is lost (default 0).
    pub loss: f64,
    /// Fraction of members behind a port-preserving NAT of their own
    /// (default 0: every member reachable at its own address).
    pub nat_fraction: f64,
}

impl Default for LinkConfig {
    fn default() -> Self {
        Self {
            access_delay: (Duration::from_millis(1), Duration::from_millis(25)),
            loss: 0.0,
            nat_fraction: 0.0,
        }
    }
}

/// Where a datagram goes: the member it reaches, the source it sees, and
/// when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub to: usize,
    pub from: SocketAddr,
    pub arrives: Instant,
}

/// Why a datagram does not arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lost {
    /// Drawn by the loss rate.
    Random,
    /// Between the two sides of a partition.
    Partitioned,
    /// Filtered by a NAT (unasked), or to a private address behind one.
    Nat,
    /// To an address no member holds.
    NoSuchAddress,
}

/// A set of members cut off from everyone else until `until`.
#[derive(Debug, Clone)]
pub struct Partition {
    pub side: Vec<bool>,
    pub until: Instant,
}

impl Partition {
    fn separates(&self, now: Instant, a: usize, b: usize) -> bool {
        now < self.until && self.inside(a) != self.inside(b)
    }

    fn inside(&self, member: usize) -> bool {
        self.side.get(member).copied().unwrap_or(false)
    }
}

pub struct Network {
    config: LinkConfig,
    /// Loss draws and the members' placement, in event order.
    rng: Xoshiro256PlusPlus,
    access_delay: Vec<Duration>,
    /// Per member, its NAT's index in `nats`.
    nat_of: Vec<Option<usize>>,
    nats: Vec<Nat>,
    /// Host addresses and NAT public addresses, to their owner.
    hosts: HashMap<IpAddr, usize>,
    nat_publics: HashMap<IpAddr, usize>,
    partitions: Vec<Partition>,
}

impl Network {
    pub fn new(config: LinkConfig, seed: u64) -> Self {
        Self {
            config,
            rng: Xoshiro256PlusPlus::seed_from_u64(seed),
            access_delay: Vec::new(),
            nat_of: Vec::new(),
            nats: Vec::new(),
            hosts: HashMap::new(),
            nat_publics: HashMap::new(),
            partitions: Vec::new(),
        }
    }

    /// Places member `index` (the next one): its access delay and, by the
    /// configured fraction, a NAT of its own. Whether it is behind one.
    pub fn place(&mut self, index: usize) -> bool {
        debug_assert_eq!(index, self.access_delay.len(), "members placed in order");
        let (low, high) = self.config.access_delay;
        let delay = if high > low {
            low + (high - low).mul_f64(self.rng.random::<f64>())
        } else {
            low
        };
        self.access_delay.push(delay);
        self.hosts.insert(host_address(index).ip(), index);
        let behind_nat =
            self.config.nat_fraction > 0.0 && self.rng.random_bool(self.config.nat_fraction);
        if behind_nat {
            let public = nat_address(index);
            self.nat_publics.insert(public, self.nats.len());
            self.nat_of.push(Some(self.nats.len()));
            self.nats.push(Nat::new(public, host_address(index)));
        } else {
            self.nat_of.push(None);
        }
        behind_nat
    }

    pub fn partition(&mut self, partition: Partition) {
        self.partitions.push(partition);
    }

    /// A punch (low TTL): it opens the sender's own NAT toward
    /// `destination` and dies before anyone else's.
    pub fn punch(&mut self, from: usize, destination: SocketAddr) {
        if let Some(nat) = self.nat_of[from] {
            self.nats[nat].outbound(destination);
        }
    }

    /// The fate of a datagram member `from` sends to `destination` at `now`.
    pub fn send(
        &mut self,
        now: Instant,
        from: usize,
        destination: SocketAddr,
    ) -> Result<Route, Lost> {
        let source = match self.nat_of[from] {
            Some(nat) => self.nats[nat].outbound(destination),
            None => host_address(from),
        };
        let to = if let Some(&to) = self.hosts.get(&destination.ip()) {
            // A private address behind a NAT: only the NAT's own host
            // holds it, and it does not send to itself.
            if self.nat_of[to].is_some() {
                return Err(Lost::Nat);
            }
            to
        } else if let Some(&nat) = self.nat_publics.get(&destination.ip()) {
            self.nats[nat]
                .inbound(source, destination)
                .and_then(|inside| self.hosts.get(&inside.ip()).copied())
                .ok_or(Lost::Nat)?
        } else {
            return Err(Lost::NoSuchAddress);
        };
        self.partitions.retain(|partition| now < partition.until);
        if self
            .partitions
            .iter()
            .any(|partition| partition.separates(now, from, to))
        {
            return Err(Lost::Partitioned);
        }
        if self.config.loss > 0.0 && self.rng.random_bool(self.config.loss) {
            return Err(Lost::Random);
        }
        Ok(Route {
            to,
            from: source,
            arrives: now + self.access_delay[from] + self.access_delay[to],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_members_are_distinct_and_in_the_benchmarking_range() {
        assert_eq!(host_address(0), "198.18.0.1:51820".parse().unwrap());
        assert_eq!(host_address(255), "198.18.1.0:51820".parse().unwrap());
        assert_eq!(nat_address(0), "198.18.128.1".parse::<IpAddr>().unwrap());
        assert_eq!(
            overlay_address(9_999),
            "198.19.39.16".parse::<IpAddr>().unwrap()
        );
    }

    #[test]
    fn a_partition_cuts_both_ways_until_it_heals() {
        let mut network = Network::new(LinkConfig::default(), 1);
        for index in 0..3 {
            network.place(index);
        }
        let now = Instant::now();
        network.partition(Partition {
            side: vec![true, false, false],
            until: now + Duration::from_secs(1),
        });
        assert_eq!(
            network.send(now, 0, host_address(1)),
            Err(Lost::Partitioned)
        );
        assert_eq!(
            network.send(now, 1, host_address(0)),
            Err(Lost::Partitioned)
        );
        assert!(network.send(now, 1, host_address(2)).is_ok());
        let healed = now + Duration::from_secs(1);
        let route = network.send(healed, 0, host_address(1)).unwrap();
        assert_eq!((route.to, route.from), (1, host_address(0)));
    }

    #[test]
    fn members_behind_nats_are_reached_only_from_where_they_sent() {
        let link = LinkConfig {
            nat_fraction: 1.0,
            ..LinkConfig::default()
        };
        let mut network = Network::new(link, 1);
        assert!(network.place(0) && network.place(1));
        let now = Instant::now();
        let public = |index| SocketAddr::new(nat_address(index), LISTEN_PORT);
        assert_eq!(network.send(now, 1, host_address(0)), Err(Lost::Nat));
        // Member 1's NAT now expects member 0's public endpoint; member
        // 0's does not expect anyone yet.
        assert_eq!(network.send(now, 1, public(0)), Err(Lost::Nat));
        let out = network.send(now, 0, public(1)).unwrap();
        assert_eq!((out.to, out.from), (1, public(0)), "port preserved");
        let back = network.send(now, 1, public(0)).unwrap();
        assert_eq!(back.to, 0);
    }
}
