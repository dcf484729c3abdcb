use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use hickory_proto::op::{Edns, Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{DNSClass, Name, RData, RecordType};

use super::*;

const ALICE_V4: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 19, 0, 1));
const ALICE_V6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 1));
const BOB_V4: IpAddr = IpAddr::V4(Ipv4Addr::new(198, 19, 0, 2));

fn names() -> Names {
    let mut names = Names::new("Mesh.Example.".parse().expect("a valid domain"));
    names.set_members(&[
        NamedMember {
            name: "Alice".to_string(),
            addresses: vec![ALICE_V4, ALICE_V6],
        },
        NamedMember {
            name: "bob".to_string(),
            addresses: vec![BOB_V4],
        },
        NamedMember {
            name: "not a label".to_string(),
            addresses: vec![IpAddr::V4(Ipv4Addr::new(198, 19, 0, 3))],
        },
    ]);
    names
}

fn ask(names: &Names, request: &[u8]) -> Message {
    let mut response = Vec::new();
    assert!(names.answer(request, &mut response), "no answer");
    Message::from_vec(&response).expect("a response hickory can read")
}

fn ask_name(name: &str, query_type: RecordType) -> Message {
    ask(&names(), &query_bytes(7, name, query_type))
}

fn answer_data(reply: &Message) -> Vec<RData> {
    reply.answers.iter().map(|r| r.data.clone()).collect()
}

#[test]
fn a_and_aaaa_of_a_member_any_case_with_or_without_the_dot() {
    for name in ["alice.mesh.example", "ALICE.Mesh.Example."] {
        let reply = ask_name(name, RecordType::A);
        assert_eq!(reply.metadata.id, 7);
        assert_eq!(reply.metadata.message_type, MessageType::Response);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert!(reply.metadata.authoritative);
        assert!(reply.metadata.recursion_desired);
        assert!(!reply.metadata.recursion_available);
        assert_eq!(
            answer_data(&reply),
            vec![RData::A(A(Ipv4Addr::new(198, 19, 0, 1)))]
        );
        assert_eq!(reply.answers[0].ttl, TTL_SECS);
        assert_eq!(reply.queries.len(), 1);
    }
    let reply = ask_name("alice.mesh.example.", RecordType::AAAA);
    assert_eq!(
        answer_data(&reply),
        vec![RData::AAAA(AAAA(Ipv6Addr::new(
            0xfd00, 0, 0, 0, 0, 0, 0, 1
        )))]
    );
    assert_eq!(
        ask_name("alice.mesh.example.", RecordType::ANY)
            .answers
            .len(),
        2
    );
}

#[test]
fn a_type_the_member_lacks_is_no_error_without_answers() {
    for (name, query_type) in [
        ("bob.mesh.example.", RecordType::AAAA),
        ("bob.mesh.example.", RecordType::MX),
        ("mesh.example.", RecordType::A),
    ] {
        let reply = ask_name(name, query_type);
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::NoError,
            "{name}"
        );
        assert!(reply.answers.is_empty(), "{name}");
    }
}

#[test]
fn reverse_lookups_name_the_member() {
    let alice: Name = "alice.mesh.example.".parse().expect("a name");
    for address in [ALICE_V4, ALICE_V6] {
        let reverse = Name::from(address).to_ascii();
        let reply = ask_name(&reverse.to_uppercase(), RecordType::PTR);
        assert_eq!(reply.metadata.response_code, ResponseCode::NoError);
        assert_eq!(answer_data(&reply), vec![RData::PTR(PTR(alice.clone()))]);
        assert!(ask_name(&reverse, RecordType::A).answers.is_empty());
    }
}

#[test]
fn unknown_names_in_the_domain_are_nxdomain() {
    for name in [
        "carol.mesh.example.",
        "x.alice.mesh.example.",
        "not.mesh.example",
    ] {
        let reply = ask_name(name, RecordType::A);
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::NXDomain,
            "{name}"
        );
        assert!(reply.metadata.authoritative);
    }
}

#[test]
fn other_domains_addresses_and_classes_are_refused() {
    let stranger = Name::from(IpAddr::V4(Ipv4Addr::new(198, 19, 0, 9))).to_ascii();
    for name in [
        "example.com.",
        "alice.mesh.example.org.",
        "example.",
        &stranger,
    ] {
        let reply = ask_name(name, RecordType::A);
        assert_eq!(
            reply.metadata.response_code,
            ResponseCode::Refused,
            "{name}"
        );
        assert!(reply.answers.is_empty());
    }
    let mut request = Message::new(3, MessageType::Query, OpCode::Query);
    let mut query = Query::query(
        "alice.mesh.example.".parse().expect("a name"),
        RecordType::A,
    );
    query.set_query_class(DNSClass::CH);
    request.add_query(query);
    let reply = ask(&names(), &request.to_vec().expect("encodes"));
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn malformed_requests_get_formerr_or_nothing() {
    let names = names();
    let mut response = Vec::new();
    // Shorter than a header: silence.
    assert!(!names.answer(&[0x12, 0x34, 0x01], &mut response));
    assert!(response.is_empty());
    // A header that promises a question that is not there.
    let header = [0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    let reply = ask(&names, &header);
    assert_eq!(reply.metadata.id, 0x1234);
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
    // No question at all, or two.
    let empty = Message::new(5, MessageType::Query, OpCode::Query);
    let reply = ask(&names, &empty.to_vec().expect("encodes"));
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
    let mut two = Message::new(6, MessageType::Query, OpCode::Query);
    for name in ["alice.mesh.example.", "bob.mesh.example."] {
        two.add_query(Query::query(name.parse().expect("a name"), RecordType::A));
    }
    let reply = ask(&names, &two.to_vec().expect("encodes"));
    assert_eq!(reply.metadata.response_code, ResponseCode::FormErr);
}

#[test]
fn responses_and_other_opcodes_are_not_answered_as_queries() {
    let names = names();
    let mut request = query_bytes(9, "alice.mesh.example.", RecordType::A);
    request[2] |= 0x80; // QR: a response
    let mut response = Vec::new();
    assert!(!names.answer(&request, &mut response));
    let mut status = Message::new(9, MessageType::Query, OpCode::Status);
    status.add_query(Query::query(
        "alice.mesh.example.".parse().expect("a name"),
        RecordType::A,
    ));
    let reply = ask(&names, &status.to_vec().expect("encodes"));
    assert_eq!(reply.metadata.response_code, ResponseCode::NotImp);
}

/// A member with many addresses, asked over plain UDP, gets TC and no
/// answers; with an EDNS buffer large enough, all of them.
#[test]
fn responses_fit_the_request_limit() {
    let mut names = Names::new("m.".parse().expect("a valid domain"));
    let many: Vec<IpAddr> = (0..40u16)
        .map(|i| IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, i)))
        .collect();
    names.set_members(&[NamedMember {
        name: "wide".to_string(),
        addresses: many,
    }]);
    let plain = ask(&names, &query_bytes(1, "wide.m.", RecordType::AAAA));
    assert!(plain.metadata.truncation);
    assert!(plain.answers.is_empty());
    let mut response = Vec::new();
    assert!(names.answer(&query_bytes(1, "wide.m.", RecordType::AAAA), &mut response));
    assert!(response.len() <= usize::from(PLAIN_UDP_LIMIT_BYTES));

    let mut request =
        Message::from_vec(&query_bytes(2, "wide.m.", RecordType::AAAA)).expect("decodes");
    let mut edns = Edns::new();
    edns.set_max_payload(4096);
    request.set_edns(edns);
    assert!(names.answer(&request.to_vec().expect("encodes"), &mut response));
    let reply = Message::from_vec(&response).expect("decodes");
    assert!(!reply.metadata.truncation);
    assert_eq!(reply.answers.len(), 40);
    assert!(reply.edns.is_some());
}

#[test]
fn the_member_view_follows_membership() {
    let mut names = names();
    names.set_members(&[NamedMember {
        name: "bob".to_string(),
        addresses: vec![BOB_V4],
    }]);
    let reply = ask(
        &names,
        &query_bytes(1, "alice.mesh.example.", RecordType::A),
    );
    assert_eq!(reply.metadata.response_code, ResponseCode::NXDomain);
    let reverse = Name::from(ALICE_V4).to_ascii();
    let reply = ask(&names, &query_bytes(1, &reverse, RecordType::PTR));
    assert_eq!(reply.metadata.response_code, ResponseCode::Refused);
}

#[test]
fn domains_are_dns_names() {
    let domain: Domain = "Mesh.Example.".parse().expect("valid");
    assert_eq!(domain.to_string(), "mesh.example");
    assert_eq!(
        domain.qualify("Alice").as_deref(),
        Some("alice.mesh.example")
    );
    assert_eq!(domain.qualify("not a label"), None);
    assert_eq!(domain.qualify("a.b"), None);
    assert_eq!("".parse::<Domain>(), Err(DomainError::Root));
    assert_eq!(".".parse::<Domain>(), Err(DomainError::Root));
    assert_eq!("10.in-addr.arpa".parse::<Domain>(), Err(DomainError::Arpa));
    for bad in ["a..b", "-a.b", "a b", "a_b.c", &"x".repeat(64), "ü.example"] {
        assert_eq!(
            bad.parse::<Domain>(),
            Err(DomainError::NotADnsName),
            "{bad}"
        );
    }
}

#[test]
fn no_input_panics() {
    let names = names();
    let mut response = Vec::new();
    let seed = query_bytes(1, "alice.mesh.example.", RecordType::A);
    for cut in 0..seed.len() {
        names.answer(&seed[..cut], &mut response);
    }
    for byte in 0..seed.len() {
        for value in [0x00, 0x3f, 0xc0, 0xff] {
            let mut request = seed.clone();
            request[byte] = value;
            names.answer(&request, &mut response);
        }
    }
}

proptest::proptest! {
    /// Arbitrary bytes, and queries with arbitrary bytes spliced in: never
    /// a panic, and any answer to a spliced query decodes.
    #[test]
    fn arbitrary_requests_never_panic(
        bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..600),
        at in 0usize..40,
    ) {
        let names = names();
        let mut response = Vec::new();
        names.answer(&bytes, &mut response);
        let mut spliced = query_bytes(1, "alice.mesh.example.", RecordType::A);
        let at = at.min(spliced.len());
        spliced.splice(at..at, bytes.iter().copied().take(24));
        if names.answer(&spliced, &mut response) {
            let reply = Message::from_vec(&response);
            proptest::prop_assert!(reply.is_ok());
        }
    }
}
