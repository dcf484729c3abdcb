//! Cryptokey routing: a longest-prefix-match table from IP prefixes to
//! values (peers), one path-compressed binary trie per address family.
//!
//! Each node holds a masked prefix; a node without a value only exists to
//! fork two subtrees. Lookup walks at most one node per distinct prefix
//! length on the path, so it stays fast with 100,000+ entries; insertion
//! and removal keep the trie compact (no valueless node with fewer than
//! two children survives a removal).
//!
//! Host routes (/32 and /128: each mesh member's overlay address) are
//! also kept in a hash map, which lookup asks first: a host route is the
//! longest prefix there can be, so a hit ends the search. With a thousand
//! peers the trie walk missed the cache about three times a packet, the
//! map about once.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;

use crate::cidr::Cidr;

struct Node<T> {
    /// The prefix, host bits zero. IPv4 keys sit in the top 32 bits, so a
    /// prefix length means the same number of leading bits in both families.
    key: u128,
    len: u8,
    value: Option<T>,
    children: [Option<Box<Node<T>>>; 2],
}

impl<T> Node<T> {
    fn leaf(key: u128, len: u8, value: T) -> Box<Self> {
        Box::new(Self {
            key,
            len,
            value: Some(value),
            children: [None, None],
        })
    }
}

fn mask(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

/// The bit of `key` right after the first `position` bits.
fn bit_at(key: u128, position: u8) -> usize {
    ((key >> (127 - u32::from(position))) & 1) as usize
}

fn common_prefix_len(a: u128, b: u128, max: u8) -> u8 {
    ((a ^ b).leading_zeros() as u8).min(max)
}

fn to_key(address: &IpAddr) -> (u128, bool) {
    match address {
        IpAddr::V4(v4) => (u128::from(u32::from(*v4)) << 96, true),
        IpAddr::V6(v6) => (u128::from(*v6), false),
    }
}

fn from_key(key: u128, len: u8, is_v4: bool) -> Cidr {
    let address = if is_v4 {
        IpAddr::V4(std::net::Ipv4Addr::from((key >> 96) as u32))
    } else {
        IpAddr::V6(std::net::Ipv6Addr::from(key))
    };
    // Invariant: lengths stored in a family's trie never exceed its maximum.
    Cidr::new(address, len).unwrap_or_else(|_| Cidr::host(address))
}

/// One family's trie. Prefix lengths are in that family's bits.
struct Trie<T> {
    root: Option<Box<Node<T>>>,
    len: usize,
}

impl<T: Copy + PartialEq> Trie<T> {
    const fn new() -> Self {
        Self { root: None, len: 0 }
    }

    fn insert(&mut self, key: u128, len: u8, value: T) -> Option<T> {
        let key = key & mask(len);
        let mut slot = &mut self.root;
        loop {
            let Some(node) = slot else {
                *slot = Some(Node::leaf(key, len, value));
                self.len += 1;
                return None;
            };
            let common = common_prefix_len(node.key, key, node.len.min(len));
            if common == node.len && node.len == len {
                let old = node.value.replace(value);
                if old.is_none() {
                    self.len += 1;
                }
                return old;
            }
            if common == node.len {
                let bit = bit_at(key, node.len);
                slot = &mut slot.as_mut().expect("checked Some above").children[bit];
                continue;
            }
            // The new prefix is shorter than, or diverges from, this node:
            // put a new node (the prefix itself, or a fork) in its place.
            let old = slot.take().expect("checked Some above");
            let mut replacement = if common == len {
                Node::leaf(key, len, value)
            } else {
                let mut fork = Box::new(Node {
                    key: key & mask(common),
                    len: common,
                    value: None,
                    children: [None, None],
                });
                fork.children[bit_at(key, common)] = Some(Node::leaf(key, len, value));
                fork
            };
            let old_bit = bit_at(old.key, common);
            replacement.children[old_bit] = Some(old);
            *slot = Some(replacement);
            self.len += 1;
            return None;
        }
    }

    fn lookup(&self, address: u128) -> Option<T> {
        let mut best = None;
        let mut next = self.root.as_deref();
        while let Some(node) = next {
            if common_prefix_len(node.key, address, node.len) < node.len {
                break;
            }
            if node.value.is_some() {
                best = node.value;
            }
            if node.len == 128 {
                break;
            }
            next = node.children[bit_at(address, node.len)].as_deref();
        }
        best
    }

    fn remove(&mut self, key: u128, len: u8) -> Option<T> {
        let removed = remove_from(&mut self.root, key & mask(len), len);
        if removed.is_some() {
            self.len -= 1;
        }
        removed
    }

    fn for_each(&self, visit: &mut impl FnMut(u128, u8, T)) {
        let mut stack: Vec<&Node<T>> = self.root.as_deref().into_iter().collect();
        while let Some(node) = stack.pop() {
            if let Some(value) = node.value {
                visit(node.key, node.len, value);
            }
            // Push the 1-branch first so entries come out in address order.
            stack.extend(
                node.children
                    .iter()
                    .rev()
                    .filter_map(|child| child.as_deref()),
            );
        }
    }
}

/// Removes a valueless node with fewer than two children from `slot`.
fn compact<T>(slot: &mut Option<Box<Node<T>>>) {
    let Some(node) = slot else { return };
    if node.value.is_some() {
        return;
    }
    match (node.children[0].is_some(), node.children[1].is_some()) {
        (true, true) => {}
        (false, false) => *slot = None,
        _ => {
            let [zero, one] = std::mem::take(&mut node.children);
            *slot = zero.or(one);
        }
    }
}

fn remove_from<T>(slot: &mut Option<Box<Node<T>>>, key: u128, len: u8) -> Option<T> {
    let node = slot.as_mut()?;
    if common_prefix_len(node.key, key, node.len.min(len)) < node.len.min(len) || node.len > len {
        return None;
    }
    let removed = if node.len == len {
        node.value.take()
    } else {
        let bit = bit_at(key, node.len);
        remove_from(&mut node.children[bit], key, len)
    };
    compact(slot);
    removed
}

/// A multiplicative hash for addresses. Their bits are not secret, and
/// the table holds configured routes, not addresses a sender chooses, so
/// a lookup cannot be steered into long probe chains.
#[derive(Default)]
struct AddressHasher(u64);

impl Hasher for AddressHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(u64::from(byte));
        }
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }

    fn write_u64(&mut self, n: u64) {
        let mixed = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        // The table indexes by the low bits, and a product's low bits
        // depend only on the factors' low bits.
        self.0 = mixed ^ (mixed >> 29);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

type HostRoutes<T> = HashMap<u128, T, BuildHasherDefault<AddressHasher>>;

/// The routing table: IPv4 and IPv6 prefixes to values.
pub struct AllowedIps<T> {
    v4: Trie<T>,
    v6: Trie<T>,
    /// Every full-length prefix of `v4` (by trie key) and of `v6` again.
    v4_hosts: HostRoutes<T>,
    v6_hosts: HostRoutes<T>,
}

impl<T: Copy + PartialEq> Default for AllowedIps<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: Copy + PartialEq> AllowedIps<T> {
    pub fn new() -> Self {
        Self {
            v4: Trie::new(),
            v6: Trie::new(),
            v4_hosts: HostRoutes::default(),
            v6_hosts: HostRoutes::default(),
        }
    }

    /// The family's trie, and its host routes if `len` is its full length.
    fn family(&mut self, is_v4: bool, len: u8) -> (&mut Trie<T>, Option<&mut HostRoutes<T>>) {
        if is_v4 {
            (&mut self.v4, (len == 32).then_some(&mut self.v4_hosts))
        } else {
            (&mut self.v6, (len == 128).then_some(&mut self.v6_hosts))
        }
    }

    /// Routes `cidr` (host bits ignored) to `value`; returns the previous owner.
    pub fn insert(&mut self, cidr: Cidr, value: T) -> Option<T> {
        let (key, is_v4) = to_key(&cidr.address());
        let len = cidr.prefix_len();
        let (trie, hosts) = self.family(is_v4, len);
        if let Some(hosts) = hosts {
            hosts.insert(key, value);
        }
        trie.insert(key, len, value)
    }

    pub fn remove(&mut self, cidr: Cidr) -> Option<T> {
        let (key, is_v4) = to_key(&cidr.address());
        let len = cidr.prefix_len();
        let (trie, hosts) = self.family(is_v4, len);
        if let Some(hosts) = hosts {
            hosts.remove(&key);
        }
        trie.remove(key, len)
    }

    /// The value of the longest prefix containing `address`.
    pub fn lookup(&self, address: &IpAddr) -> Option<T> {
        let (key, is_v4) = to_key(address);
        let (trie, hosts) = if is_v4 {
            (&self.v4, &self.v4_hosts)
        } else {
            (&self.v6, &self.v6_hosts)
        };
        if hosts.is_empty() {
            return trie.lookup(key);
        }
        hosts.get(&key).copied().or_else(|| trie.lookup(key))
    }

    /// Visits every entry, IPv4 first, each family in address order.
    pub fn for_each(&self, mut visit: impl FnMut(Cidr, T)) {
        self.v4
            .for_each(&mut |key, len, value| visit(from_key(key, len, true), value));
        self.v6
            .for_each(&mut |key, len, value| visit(from_key(key, len, false), value));
    }

    pub fn len(&self) -> usize {
        self.v4.len + self.v6.len
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn longest_prefix_wins() {
        let mut table = AllowedIps::new();
        table.insert(cidr("0.0.0.0/0"), 1);
        table.insert(cidr("198.19.0.0/16"), 2);
        table.insert(cidr("198.19.5.0/24"), 3);
        table.insert(cidr("198.19.5.7/32"), 4);
        assert_eq!(table.lookup(&ip("10.0.0.1")), Some(1));
        assert_eq!(table.lookup(&ip("198.19.1.1")), Some(2));
        assert_eq!(table.lookup(&ip("198.19.5.1")), Some(3));
        assert_eq!(table.lookup(&ip("198.19.5.7")), Some(4));
        assert_eq!(table.lookup(&ip("fd00::1")), None);
        assert_eq!(table.len(), 4);
    }

    #[test]
    fn families_are_separate() {
        let mut table = AllowedIps::new();
        table.insert(cidr("::/0"), 6);
        assert_eq!(table.lookup(&ip("198.19.0.1")), None);
        assert_eq!(table.lookup(&ip("fd00::9")), Some(6));
        // ::ffff:198.19.0.1 is an IPv6 address and must not match IPv4 routes.
        let mut v4_only = AllowedIps::new();
        v4_only.insert(cidr("198.19.0.0/16"), 4);
        assert_eq!(v4_only.lookup(&ip("::ffff:198.19.0.1")), None);
    }

    #[test]
    fn host_routes_win_and_leave_cleanly() {
        let mut table = AllowedIps::new();
        table.insert(cidr("fd00::/64"), 1);
        table.insert(cidr("fd00::7/128"), 2);
        table.insert(cidr("198.19.0.0/24"), 3);
        table.insert(cidr("198.19.0.7/32"), 4);
        // The IPv4 host route's trie key is not an IPv6 host route.
        assert_eq!(table.lookup(&ip("::c613:7")), None);
        assert_eq!(table.lookup(&ip("fd00::7")), Some(2));
        assert_eq!(table.lookup(&ip("198.19.0.7")), Some(4));
        table.insert(cidr("198.19.0.7/32"), 5);
        assert_eq!(table.lookup(&ip("198.19.0.7")), Some(5));
        table.remove(cidr("fd00::7/128"));
        table.remove(cidr("198.19.0.7/32"));
        assert_eq!(table.lookup(&ip("fd00::7")), Some(1));
        assert_eq!(table.lookup(&ip("198.19.0.7")), Some(3));
        assert_eq!(table.len(), 2);
    }

    #[test]
    fn insert_replaces_and_remove_compacts() {
        let mut table = AllowedIps::new();
        assert_eq!(table.insert(cidr("198.19.0.0/24"), 1), None);
        assert_eq!(table.insert(cidr("198.19.0.9/24"), 2), Some(1));
        assert_eq!(table.len(), 1);
        table.insert(cidr("198.19.1.0/24"), 3);
        assert_eq!(table.remove(cidr("198.19.0.0/24")), Some(2));
        assert_eq!(table.remove(cidr("198.19.0.0/24")), None);
        assert_eq!(table.lookup(&ip("198.19.0.1")), None);
        assert_eq!(table.lookup(&ip("198.19.1.1")), Some(3));
        assert_eq!(prefixes_of(&table, 3), vec![cidr("198.19.1.0/24")]);
    }

    fn prefixes_of(table: &AllowedIps<u8>, value: u8) -> Vec<Cidr> {
        let mut out = Vec::new();
        table.for_each(|cidr, v| {
            if v == value {
                out.push(cidr);
            }
        });
        out
    }

    #[derive(Debug, Clone)]
    enum Op {
        Insert(u32, u8, u8),
        Remove(u32, u8),
        Lookup(u32),
    }

    fn op() -> impl Strategy<Value = Op> {
        // A narrow address space makes overlapping prefixes likely.
        let address = prop_oneof![
            any::<u32>(),
            (0u32..64).prop_map(|x| 0xC613_0000 | (x << 10))
        ];
        prop_oneof![
            (address.clone(), 0u8..=32, 0u8..4).prop_map(|(a, l, v)| Op::Insert(a, l, v)),
            (address.clone(), 0u8..=32).prop_map(|(a, l)| Op::Remove(a, l)),
            address.prop_map(Op::Lookup),
        ]
    }

    proptest! {
        /// Differential test against a linear scan over a list of prefixes.
        #[test]
        fn matches_linear_scan(ops in prop::collection::vec(op(), 1..200)) {
            let mut table = AllowedIps::new();
            let mut naive: Vec<(Cidr, u8)> = Vec::new();
            for op in ops {
                match op {
                    Op::Insert(a, l, v) => {
                        let c = Cidr::new(IpAddr::V4(a.into()), l).unwrap().network();
                        let previous = naive.iter().position(|(n, _)| *n == c).map(|i| naive.remove(i).1);
                        naive.push((c, v));
                        prop_assert_eq!(table.insert(c, v), previous);
                    }
                    Op::Remove(a, l) => {
                        let c = Cidr::new(IpAddr::V4(a.into()), l).unwrap().network();
                        let previous = naive.iter().position(|(n, _)| *n == c).map(|i| naive.remove(i).1);
                        prop_assert_eq!(table.remove(c), previous);
                    }
                    Op::Lookup(a) => {
                        let address = IpAddr::V4(a.into());
                        let expected = naive
                            .iter()
                            .filter(|(c, _)| c.contains(&address))
                            .max_by_key(|(c, _)| c.prefix_len())
                            .map(|(_, v)| *v);
                        prop_assert_eq!(table.lookup(&address), expected);
                    }
                }
                prop_assert_eq!(table.len(), naive.len());
            }
            let mut listed: Vec<Cidr> = (0..4).flat_map(|v| prefixes_of(&table, v)).collect();
            let mut expected: Vec<Cidr> = naive.iter().map(|(c, _)| *c).collect();
            listed.sort();
            expected.sort();
            prop_assert_eq!(listed, expected);
        }
    }
}
