//! What the target did with a flood, seen from outside it, so the same
//! figures exist for every implementation:
//!
//! - [`ReplyCounters`]: nftables counters in the attacker's namespace,
//!   where every answer to a spoofed source arrives (see `hosts.rs`), by
//!   WireGuard message type: cookie replies (3) and responses (2).
//!   Counting in the kernel costs the measured machine nothing noticeable,
//!   where a capture thread would compete with the tunnel for a core.
//! - [`udp_socket_drops`]: datagrams the target's kernel dropped because
//!   the daemon's UDP socket was full (`/proc/net/udp` and `udp6` inside
//!   its namespace), i.e. flood frames it never even read.

use crate::netns::{Namespace, NetnsError};

const TABLE: &str = "fjord_lab_attack_replies";
const COOKIE_REPLIES: &str = "cookie_replies";
const RESPONSES: &str = "responses";

/// Answers to spoofed sources, counted where they arrive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Replies {
    pub cookie_replies: u64,
    pub responses: u64,
}

impl Replies {
    /// What arrived between `earlier` and `self`.
    pub fn since(&self, earlier: &Replies) -> Replies {
        Replies {
            cookie_replies: self.cookie_replies.saturating_sub(earlier.cookie_replies),
            responses: self.responses.saturating_sub(earlier.responses),
        }
    }
}

/// The counting rules in one namespace; they go with the namespace.
pub struct ReplyCounters<'a> {
    namespace: &'a Namespace,
}

impl<'a> ReplyCounters<'a> {
    /// Counts WireGuard messages from UDP port `target_port` arriving in
    /// `namespace`.
    pub fn install(namespace: &'a Namespace, target_port: u16) -> Result<Self, NetnsError> {
        namespace.exec("nft", &["add", "table", "ip", TABLE])?;
        let chain = "{ type filter hook prerouting priority 0; policy accept; }";
        namespace.exec("nft", &["add", "chain", "ip", TABLE, "arriving", chain])?;
        let port = target_port.to_string();
        for (counter, message_type) in [(COOKIE_REPLIES, "3"), (RESPONSES, "2")] {
            namespace.exec("nft", &["add", "counter", "ip", TABLE, counter])?;
            // `@th,64,8` is the first byte after the UDP header: the low
            // byte of the little-endian message type.
            namespace.exec(
                "nft",
                &[
                    "add",
                    "rule",
                    "ip",
                    TABLE,
                    "arriving",
                    "udp",
                    "sport",
                    &port,
                    "@th,64,8",
                    message_type,
                    "counter",
                    "name",
                    counter,
                ],
            )?;
        }
        Ok(Self { namespace })
    }

    pub fn read(&self) -> Result<Replies, NetnsError> {
        Ok(Replies {
            cookie_replies: self.packets(COOKIE_REPLIES)?,
            responses: self.packets(RESPONSES)?,
        })
    }

    fn packets(&self, counter: &str) -> Result<u64, NetnsError> {
        let listed = self
            .namespace
            .exec("nft", &["list", "counter", "ip", TABLE, counter])?;
        parse_packets(&listed).ok_or_else(|| NetnsError::Failed {
            command: format!("nft list counter ip {TABLE} {counter}"),
            status: "ok".to_string(),
            stderr: format!("no packet count in: {}", listed.trim()),
        })
    }
}

/// The `packets N` of `nft list counter`'s output.
fn parse_packets(listed: &str) -> Option<u64> {
    let mut words = listed.split_whitespace();
    words.find(|word| *word == "packets")?;
    words.next()?.parse().ok()
}

/// Datagrams dropped at full receive buffers of the UDP sockets bound to
/// `port` in `namespace`, IPv4 and IPv6, since they were opened.
pub fn udp_socket_drops(namespace: &Namespace, port: u16) -> Result<u64, NetnsError> {
    let tables = namespace.exec("cat", &["/proc/net/udp", "/proc/net/udp6"])?;
    Ok(sum_drops(&tables, port))
}

/// UDP sockets bound to `port` in `namespace` and connected to one remote
/// endpoint (fjord's socket per peer, beside the listening socket).
pub fn connected_udp_sockets(namespace: &Namespace, port: u16) -> Result<usize, NetnsError> {
    let tables = namespace.exec("cat", &["/proc/net/udp", "/proc/net/udp6"])?;
    Ok(count_connected(&tables, port))
}

/// The fields of the socket lines of `/proc/net/udp` text whose local
/// port is `port`.
fn sockets_on_port(tables: &str, port: u16) -> impl Iterator<Item = Vec<&str>> {
    let local_port = format!(":{port:04X}");
    tables
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .filter(move |fields| {
            fields
                .get(1)
                .is_some_and(|local| local.ends_with(&local_port))
        })
}

/// Sums the last column (`drops`) of the socket lines of `/proc/net/udp`
/// text whose local port is `port`.
fn sum_drops(tables: &str, port: u16) -> u64 {
    sockets_on_port(tables, port)
        .filter_map(|fields| fields.last()?.parse::<u64>().ok())
        .sum()
}

/// Counts the socket lines on `port` in state `01` (established: a
/// connected UDP socket; an unconnected one is `07`).
fn count_connected(tables: &str, port: u16) -> usize {
    sockets_on_port(tables, port)
        .filter(|fields| fields.get(3) == Some(&"01"))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_nft_counters() {
        let listed =
            "table ip t {\n\tcounter cookie_replies {\n\t\tpackets 1234 bytes 99\n\t}\n}\n";
        assert_eq!(parse_packets(listed), Some(1234));
        assert_eq!(parse_packets("table ip t {}"), None);
    }

    #[test]
    fn sums_drops_of_the_port_only() {
        let tables = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            1: 00000000:CA6C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 17\n\
            2: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 5\n\
            sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            3: 00000000000000000000000000000000:CA6C 00000000000000000000000000000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 25\n";
        assert_eq!(sum_drops(tables, 51820), 42);
        assert_eq!(sum_drops(tables, 53), 5);
        assert_eq!(sum_drops(tables, 1), 0);
    }

    #[test]
    fn counts_connected_sockets_of_the_port_only() {
        let tables = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
            1: 00000000:CA6C 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 0\n\
            2: 0212C6C6:CA6C 0112C6C6:CA6C 01 00000000:00000000 00:00000000 00000000 65534        0 1 2 0000000000000000 0\n\
            3: 0212C6C6:0035 0112C6C6:CA6C 01 00000000:00000000 00:00000000 00000000     0        0 1 2 0000000000000000 0\n";
        assert_eq!(count_connected(tables, 51820), 1);
        assert_eq!(count_connected(tables, 53), 1);
        assert_eq!(count_connected(tables, 1), 0);
    }
}
