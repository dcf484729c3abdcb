use std::net::IpAddr;

use base64ct::{Base64, Encoding};

use super::*;
use crate::cert::NetworkSecret;

const EXAMPLE: &str = "\
# who may reach whom in network \"acme\"
version 7
allow from group ops to group db port 5432/tcp
allow from any to any proto icmp
allow from group web to 10.20.0.0/16 port 443/tcp
allow from member build-1 to group db port 8000-8100/udp
allow from fd00::/64 to 198.18.0.9 proto any   # a bare address is a host
";

fn parse(text: &str) -> Result<Policy, PolicyError> {
    Policy::parse(text.as_bytes())
}

fn groups(names: &[&str]) -> Vec<Group> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

fn party<'a>(address: &str, name: Option<&'a str>, groups: &'a [Group]) -> Party<'a> {
    Party {
        address: address.parse::<IpAddr>().unwrap(),
        name,
        groups,
    }
}

fn tcp(port: u16) -> Flow {
    Flow::Tcp {
        destination_port: port,
    }
}

fn udp(port: u16) -> Flow {
    Flow::Udp {
        destination_port: port,
    }
}

#[test]
fn the_example_parses_with_every_form() {
    let policy = parse(EXAMPLE).unwrap();
    assert_eq!(policy.version(), 7);
    assert_eq!(policy.rules().len(), 5);
    assert_eq!(
        policy.rules()[0],
        Rule {
            from: Selector::Group("ops".parse().unwrap()),
            to: Selector::Group("db".parse().unwrap()),
            traffic: Traffic::Ports {
                transport: Transport::Tcp,
                ports: PortRange::new(5432, 5432).unwrap(),
            },
        }
    );
    assert_eq!(policy.rules()[1].traffic, Traffic::Protocol(Protocol::Icmp));
    assert_eq!(
        policy.rules()[3].from,
        Selector::Member("build-1".to_string())
    );
    assert_eq!(
        policy.rules()[4].to,
        Selector::Prefix("198.18.0.9/32".parse().unwrap())
    );
    assert_eq!(policy.rule_line(RuleIndex(0)), Some(3));
    assert_eq!(policy.rule_line(RuleIndex(4)), Some(7));
}

#[test]
fn the_printed_form_parses_back_to_the_same_policy() {
    let policy = parse(EXAMPLE).unwrap();
    let printed = policy.to_string();
    assert!(
        printed.contains("allow from member build-1 to group db port 8000-8100/udp\n"),
        "{printed}"
    );
    let again = parse(&printed).unwrap();
    assert_eq!(again.version(), policy.version());
    assert_eq!(again.rules(), policy.rules());
}

#[test]
fn groups_members_and_prefixes_select_their_parties() {
    let policy = parse(EXAMPLE).unwrap();
    let (ops, db, web) = (
        groups(&["ops"]),
        groups(&["db", "backup"]),
        groups(&["web"]),
    );
    let admin = party("198.19.0.1", Some("admin-1"), &ops);
    let database = party("198.19.0.2", Some("db-1"), &db);
    let frontend = party("198.19.0.3", Some("web-1"), &web);
    let build = party("198.19.0.4", Some("build-1"), &[]);
    assert_eq!(
        policy.allows(&admin, &database, &tcp(5432)),
        Some(RuleIndex(0))
    );
    // Not the other way, nor another port, nor another transport.
    assert_eq!(policy.allows(&database, &admin, &tcp(5432)), None);
    assert_eq!(policy.allows(&admin, &database, &tcp(5433)), None);
    assert_eq!(policy.allows(&admin, &database, &udp(5432)), None);
    // A group rule needs the group: web is not ops.
    assert_eq!(policy.allows(&frontend, &database, &tcp(5432)), None);
    // A prefix matches any address in it, member or not.
    let outside = party("10.20.3.4", None, &[]);
    assert_eq!(
        policy.allows(&frontend, &outside, &tcp(443)),
        Some(RuleIndex(2))
    );
    assert_eq!(
        policy.allows(&frontend, &party("10.21.0.1", None, &[]), &tcp(443)),
        None
    );
    // A member rule matches the certificate's name.
    assert_eq!(
        policy.allows(&build, &database, &udp(8000)),
        Some(RuleIndex(3))
    );
    assert_eq!(
        policy.allows(&build, &database, &udp(8100)),
        Some(RuleIndex(3))
    );
    assert_eq!(policy.allows(&build, &database, &udp(8101)), None);
    assert_eq!(policy.allows(&build, &database, &udp(7999)), None);
    let impostor = party("198.19.0.4", Some("build-2"), &[]);
    assert_eq!(policy.allows(&impostor, &database, &udp(8000)), None);
    // IPv6 prefixes; `proto any` is every protocol.
    let v6 = party("fd00::7", None, &[]);
    let host = party("198.18.0.9", None, &[]);
    for flow in [tcp(1), udp(2), Flow::Other(47)] {
        assert_eq!(
            policy.allows(&v6, &host, &flow),
            Some(RuleIndex(4)),
            "{flow:?}"
        );
    }
    // ICMP: the earlier `any to any proto icmp` rule is the first match.
    assert_eq!(policy.allows(&v6, &host, &Flow::Icmp), Some(RuleIndex(1)));
    assert_eq!(
        policy.allows(&party("fd01::7", None, &[]), &host, &tcp(1)),
        None
    );
}

#[test]
fn icmp_is_allowed_everywhere_and_nothing_else_by_default() {
    let policy = parse(EXAMPLE).unwrap();
    let a = party("198.19.0.1", Some("a"), &[]);
    let b = party("fd00::2", Some("b"), &[]);
    assert_eq!(policy.allows(&a, &b, &Flow::Icmp), Some(RuleIndex(1)));
    for flow in [tcp(22), udp(53), Flow::Other(47)] {
        assert_eq!(policy.allows(&a, &b, &flow), None, "{flow:?}");
    }
    let empty = parse("version 1\n").unwrap();
    assert_eq!(empty.allows(&a, &b, &Flow::Icmp), None);
}

#[test]
fn protocol_rules_match_their_protocol_only() {
    let policy =
        parse("version 1\nallow from any to any proto udp\nallow from any to any proto tcp\n")
            .unwrap();
    let a = party("198.19.0.1", None, &[]);
    assert_eq!(policy.allows(&a, &a, &udp(1)), Some(RuleIndex(0)));
    assert_eq!(policy.allows(&a, &a, &tcp(1)), Some(RuleIndex(1)));
    assert_eq!(policy.allows(&a, &a, &Flow::Icmp), None);
}

#[test]
fn errors_name_their_line_and_problem() {
    let cases: &[(&str, &str)] = &[
        ("", "no `version N` line"),
        ("# only a comment\n", "no `version N` line"),
        (
            "version 1\nversion 2\n",
            "line 2: a second version line (the first is line 1)",
        ),
        ("version seven\n", "line 1: `seven` is not a version number"),
        ("version -1\n", "line 1: `-1` is not a version number"),
        ("version 18446744073709551616\n", "is not a version number"),
        (
            "version\n",
            "line 1: expected a version number, found the end of the line",
        ),
        (
            "version 1 2\n",
            "line 1: expected the end of the line, found `2`",
        ),
        (
            "version 1\ndeny from any to any proto any\n",
            "line 2: unknown statement `deny`",
        ),
        (
            "version 1\nallow to any\n",
            "line 2: expected from, found `to`",
        ),
        (
            "version 1\nallow from any\n",
            "line 2: expected to, found the end of the line",
        ),
        (
            "version 1\n\nallow from group Ops to any proto any\n",
            "line 3: group `Ops`: a group name is 1 to 31 characters",
        ),
        (
            "version 1\nallow from group\n",
            "line 2: expected a group name, found the end of the line",
        ),
        (
            "version 1\nallow from member a/b to any proto any\n",
            "line 2: member `a/b`",
        ),
        (
            "version 1\nallow from 10.0.0.0/33 to any proto any\n",
            "line 2: `10.0.0.0/33` is not `any`",
        ),
        (
            "version 1\nallow from anyone to any proto any\n",
            "line 2: `anyone` is not `any`",
        ),
        (
            "version 1\nallow from any to any\n",
            "line 2: expected `port` or `proto`, found the end",
        ),
        (
            "version 1\nallow from any to any port 22\n",
            "line 2: `22` is not a port",
        ),
        (
            "version 1\nallow from any to any port 22/sctp\n",
            "`22/sctp` is not a port",
        ),
        (
            "version 1\nallow from any to any port 9-8/tcp\n",
            "`9-8/tcp` is not a port",
        ),
        (
            "version 1\nallow from any to any port 65536/tcp\n",
            "`65536/tcp` is not a port",
        ),
        (
            "version 1\nallow from any to any proto gre\n",
            "line 2: `gre` is not a protocol",
        ),
        (
            "version 1\nallow from any to any proto any extra\n",
            "line 2: expected the end of the line, found `extra`",
        ),
    ];
    for (text, expected) in cases {
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains(expected), "{text:?}: {error}");
    }
    let error = Policy::parse(b"version 1\n\xff\n").unwrap_err();
    assert_eq!(error.to_string(), "line 2: not UTF-8 text");
    assert_eq!(
        error.in_file("policy.conf").to_string(),
        "policy.conf:2: not UTF-8 text"
    );
    assert_eq!(
        parse("").unwrap_err().in_file("policy.conf").to_string(),
        "policy.conf: no `version N` line"
    );
}

#[test]
fn oversized_input_is_refused() {
    let long_line = format!("version 1\n#{}\n", "x".repeat(MAX_POLICY_LINE_BYTES));
    assert_eq!(
        parse(&long_line).unwrap_err().to_string(),
        format!("line 2: the line is longer than {MAX_POLICY_LINE_BYTES} bytes")
    );
    let huge = "\n".repeat(MAX_POLICY_BYTES + 1);
    assert_eq!(parse(&huge).unwrap_err().problem, PolicyProblem::TooLarge);
    let mut many = String::from("version 1\n");
    for _ in 0..=MAX_POLICY_RULES {
        many.push_str("allow from any to any proto any\n");
    }
    let error = parse(&many).unwrap_err();
    assert_eq!(error.line, MAX_POLICY_RULES + 2);
    assert_eq!(error.problem, PolicyProblem::TooManyRules);
}

fn network(seed: u8) -> NetworkSecret {
    NetworkSecret::from_seed([seed; 32])
}

#[test]
fn a_signed_policy_verifies_and_stays_readable() {
    let secret = network(1);
    let signed = SignedPolicy::sign(EXAMPLE.as_bytes(), &secret).unwrap();
    let text = std::str::from_utf8(signed.text()).unwrap();
    assert!(text.starts_with(EXAMPLE), "{text}");
    let last = text.lines().last().unwrap();
    assert!(last.starts_with(SIGNATURE_PREFIX), "{last}");
    assert_eq!(text.lines().count(), EXAMPLE.lines().count() + 1);
    let verified = SignedPolicy::verify(signed.text(), &secret.public_key()).unwrap();
    assert_eq!(verified, signed);
    assert_eq!(verified.policy.version(), 7);
    // Signing again replaces the signature line instead of adding one.
    let again = SignedPolicy::sign(signed.text(), &secret).unwrap();
    assert_eq!(again.text(), signed.text());
    // Text without a final newline is signed with one.
    let bare = SignedPolicy::sign(b"version 3", &secret).unwrap();
    assert!(
        bare.text()
            .starts_with(b"version 3\n# fjord-policy-signature ")
    );
    SignedPolicy::verify(bare.text(), &secret.public_key()).unwrap();
}

#[test]
fn tampered_unsigned_or_foreign_policies_are_refused() {
    let secret = network(1);
    let public = secret.public_key();
    let signed = SignedPolicy::sign(EXAMPLE.as_bytes(), &secret).unwrap();
    let text = std::str::from_utf8(signed.text()).unwrap();
    let signature_line = EXAMPLE.lines().count() + 1;
    let problem = |text: &str| {
        let error = SignedPolicy::verify(text.as_bytes(), &public).unwrap_err();
        (error.line, error.problem)
    };
    let bad = |problem| PolicyProblem::Signature(problem);
    assert_eq!(
        problem(&text.replace("5432/tcp", "5433/tcp")),
        (signature_line, bad(SignatureProblem::BadSignature))
    );
    assert_eq!(
        problem(&text.replace("version 7", "version 8")),
        (signature_line, bad(SignatureProblem::BadSignature))
    );
    assert_eq!(
        problem(&format!("allow from any to any proto any\n{text}")),
        (signature_line + 1, bad(SignatureProblem::BadSignature))
    );
    assert_eq!(
        problem(EXAMPLE),
        (signature_line - 1, bad(SignatureProblem::Unsigned))
    );
    let foreign = SignedPolicy::sign(EXAMPLE.as_bytes(), &network(2)).unwrap();
    assert_eq!(
        problem(std::str::from_utf8(foreign.text()).unwrap()),
        (signature_line, bad(SignatureProblem::WrongNetwork))
    );
    // Another key's signature presented under this network's key.
    let (body, _) = text.rsplit_once(SIGNATURE_PREFIX).unwrap();
    let (_, foreign_signature) = std::str::from_utf8(foreign.text())
        .unwrap()
        .rsplit_once(SIGNATURE_PREFIX)
        .unwrap();
    let mut decoded = Base64::decode_vec(foreign_signature.trim()).unwrap();
    decoded[..32].copy_from_slice(public.as_bytes());
    let spliced = format!(
        "{body}{SIGNATURE_PREFIX}{}\n",
        Base64::encode_string(&decoded)
    );
    assert_eq!(
        problem(&spliced),
        (signature_line, bad(SignatureProblem::BadSignature))
    );
    assert_eq!(
        problem(&format!("{body}{SIGNATURE_PREFIX}not-base64\n")),
        (signature_line, bad(SignatureProblem::Malformed))
    );
    assert_eq!(
        problem(&format!("{body}{SIGNATURE_PREFIX}AAAA\n")),
        (signature_line, bad(SignatureProblem::Malformed))
    );
    // A signed text that does not parse (only the network could make
    // one) still says where.
    let broken = format!("{}allow nothing\n", EXAMPLE);
    assert!(SignedPolicy::sign(broken.as_bytes(), &secret).is_err());
}

/// Narrowing the scan to two parties' candidate rules never changes the
/// answer, for any two of a few identities, addresses and flows.
#[test]
fn candidates_answer_as_the_whole_policy_does() {
    let policy = parse(EXAMPLE).unwrap();
    let ops = groups(&["ops"]);
    let db = groups(&["db", "web"]);
    let none: Vec<Group> = Vec::new();
    let identities: [(Option<&str>, &[Group]); 4] = [
        (Some("build-1"), &none),
        (Some("alpha"), &ops),
        (Some("beta"), &db),
        (None, &none),
    ];
    let addresses = ["198.19.0.1", "10.20.3.4", "fd00::7", "198.18.0.9"];
    let flows = [tcp(5432), tcp(443), udp(8050), Flow::Icmp, Flow::Other(47)];
    for (from_name, from_groups) in identities {
        for (to_name, to_groups) in identities {
            let candidates = policy.candidates(
                &Named {
                    name: from_name,
                    groups: from_groups,
                },
                &Named {
                    name: to_name,
                    groups: to_groups,
                },
            );
            assert!(candidates.len() <= policy.rules().len());
            for from_address in addresses {
                for to_address in addresses {
                    let from = party(from_address, from_name, from_groups);
                    let to = party(to_address, to_name, to_groups);
                    for flow in &flows {
                        assert_eq!(
                            policy.allows_among(&candidates, &from, &to, flow),
                            policy.allows(&from, &to, flow),
                            "{from:?} → {to:?}, {flow:?}"
                        );
                    }
                }
            }
        }
    }
}
