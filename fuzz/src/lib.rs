//! The bodies of fjord's fuzz targets, as plain functions so that the
//! committed seeds can be replayed on stable (`cargo test` here, and
//! `crates/proto/tests/fuzz_corpus.rs` in the main workspace).

mod fjord_targets;
mod mesh_targets;
mod names_targets;
mod net_targets;
mod node_targets;
mod proto_targets;
#[cfg(test)]
mod replay;
mod switch_targets;

use std::str::FromStr;

use fjord_mesh::Cidr;

pub use fjord_targets::{config_parse, metrics_request, uapi_request};
pub use mesh_targets::{cert_parse, control_parse, firewall_packet, mesh_membership, policy_parse};
pub use names_targets::dns_request;
pub use net_targets::{carrier_frames, fake_tcp_segment, fragment_balance, tun_coalesce, tun_read};
pub use node_targets::node_session;
pub use proto_targets::{device_datagram, icmp_too_big, ip_header, wire_parse};
pub use switch_targets::switch_frames;

/// `Cidr::from_str` on arbitrary text; a success must print and parse back
/// to itself and contain its own address.
pub fn cidr_parse(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(cidr) = Cidr::from_str(text) else {
        return;
    };
    let printed = cidr.to_string();
    assert_eq!(
        Cidr::from_str(&printed).as_ref(),
        Ok(&cidr),
        "{text:?} printed as {printed:?}"
    );
    assert!(cidr.contains(&cidr.address()));
    let network = cidr.network();
    assert_eq!(network.prefix_len(), cidr.prefix_len());
    assert_eq!(network.network(), network);
    assert!(network.contains(&cidr.address()));
}

#[cfg(test)]
mod tests {
    use crate::replay::replay;

    #[test]
    fn seeds_replay_cleanly() {
        replay("wire_parse", super::wire_parse);
        replay("ip_header", super::ip_header);
        replay("icmp_too_big", super::icmp_too_big);
        replay("device_datagram", super::device_datagram);
        replay("cidr_parse", super::cidr_parse);
        replay("tun_coalesce", super::tun_coalesce);
        replay("fragment_balance", super::fragment_balance);
        replay("control_parse", super::control_parse);
        replay("cert_parse", super::cert_parse);
        replay("policy_parse", super::policy_parse);
        replay("firewall_packet", super::firewall_packet);
        replay("dns_request", super::dns_request);
        replay("mesh_membership", super::mesh_membership);
        replay("carrier_frames", super::carrier_frames);
        replay("fake_tcp_segment", super::fake_tcp_segment);
        replay("config_parse", super::config_parse);
        replay("uapi_request", super::uapi_request);
        replay("metrics_request", super::metrics_request);
        replay("node_session", super::node_session);
        replay("switch_frames", super::switch_frames);
    }
}
