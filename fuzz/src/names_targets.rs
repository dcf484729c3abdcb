//! Fuzz target body for the name server's request path
//! (`fjord_mesh::names`): arbitrary datagrams answered for a small,
//! fixed member view. Also replayed on stable by
//! `crates/mesh/tests/fuzz_corpus.rs`, which includes this file by path.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;

use fjord_mesh::names::{NamedMember, Names, PLAIN_UDP_LIMIT_BYTES};
use hickory_proto::op::{Message, MessageType};

/// Three members, one with both address families and one whose name is no
/// DNS label, under `mesh.test`.
fn names() -> &'static Names {
    static NAMES: OnceLock<Names> = OnceLock::new();
    NAMES.get_or_init(|| {
        // Invariant: a literal valid domain.
        let mut names = Names::new("mesh.test".parse().expect("a valid domain"));
        let member = |name: &str, addresses: &[IpAddr]| NamedMember {
            name: name.to_string(),
            addresses: addresses.to_vec(),
        };
        names.set_members(&[
            member(
                "alpha",
                &[
                    IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1)),
                    IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1)),
                ],
            ),
            member("beta", &[IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2))]),
            member("not a label", &[IpAddr::V4(Ipv4Addr::new(198, 19, 0, 3))]),
        ]);
        names
    })
}

/// `Names::answer` on arbitrary bytes: it never panics; an answer is a
/// response DNS message with the request's ID, within the request's size
/// limit (512 bytes, or its EDNS size); silence only for inputs shorter
/// than a header or that are responses themselves.
pub fn dns_request(data: &[u8]) {
    let mut response = Vec::new();
    if !names().answer(data, &mut response) {
        assert!(
            data.len() < 12 || data[2] & 0x80 != 0,
            "a query went unanswered"
        );
        return;
    }
    let reply = Message::from_vec(&response).expect("the answer decodes");
    assert_eq!(reply.metadata.message_type, MessageType::Response);
    assert_eq!(reply.metadata.id.to_be_bytes(), [data[0], data[1]]);
    let limit =
        Message::from_vec(data).map_or(PLAIN_UDP_LIMIT_BYTES, |request| request.max_payload());
    assert!(
        response.len() <= usize::from(limit),
        "{} bytes answered to a request allowing {limit}",
        response.len()
    );
}
