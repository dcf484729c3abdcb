use super::*;
use fjord_proto::PrivateKey;

fn network(seed: u8) -> NetworkSecret {
    NetworkSecret::from_seed([seed; 32])
}

fn node_key(seed: u8) -> PublicKey {
    PrivateKey::from_bytes([seed; 32]).public_key()
}

fn certificate(secret: &NetworkSecret) -> Certificate {
    let addresses = [
        "198.19.0.1/32".parse().unwrap(),
        "fd00::1/128".parse().unwrap(),
    ];
    secret
        .sign(node_key(9), "node-1", &addresses, 1_000, 2_000)
        .unwrap()
}

#[test]
fn a_signed_certificate_round_trips_and_verifies() {
    let secret = network(1);
    let certificate = certificate(&secret);
    let text = certificate.to_base64();
    let parsed: Certificate = text.parse().unwrap();
    assert_eq!(parsed, certificate);
    parsed.verify(&secret.public_key(), 1_500).unwrap();
}

#[test]
fn verification_refuses_what_it_should() {
    let secret = network(1);
    let certificate = certificate(&secret);
    let public = secret.public_key();
    assert_eq!(certificate.verify(&public, 2_000), Err(CertError::Expired));
    assert_eq!(
        certificate.verify(&public, 1_000 - CLOCK_SKEW_SECS - 1),
        Err(CertError::NotYetValid)
    );
    assert_eq!(
        certificate.verify(&network(2).public_key(), 1_500),
        Err(CertError::WrongNetwork)
    );
    let mut forged = certificate.clone();
    forged.addresses = vec!["198.19.0.2/32".parse().unwrap()];
    assert_eq!(forged.verify(&public, 1_500), Err(CertError::BadSignature));
    let mut other_network = certificate.clone();
    other_network.network = network(2).public_key();
    assert_eq!(
        other_network.verify(&network(2).public_key(), 1_500),
        Err(CertError::BadSignature)
    );
}

/// No single flipped bit of `bytes` parses to a certificate that verifies.
fn assert_every_flipped_bit_refused(secret: &NetworkSecret, bytes: &[u8]) {
    for bit in 0..bytes.len() * 8 {
        let mut flipped = bytes.to_vec();
        flipped[bit / 8] ^= 1 << (bit % 8);
        if let Ok(parsed) = Certificate::decode(&flipped) {
            assert!(
                parsed.verify(&secret.public_key(), 1_500).is_err(),
                "bit {bit}"
            );
        }
    }
}

#[test]
fn every_flipped_bit_is_refused() {
    let secret = network(1);
    assert_every_flipped_bit_refused(&secret, &certificate(&secret).encode());
}

#[test]
fn revocation_covers_older_certificates_only() {
    let secret = network(1);
    let certificate = certificate(&secret);
    let revocation = secret.revoke(certificate.node_key, 1_000);
    let parsed: Revocation = revocation.to_base64().parse().unwrap();
    parsed.verify(&secret.public_key()).unwrap();
    assert!(parsed.covers(&certificate));
    let renewed = secret
        .sign(node_key(9), "node-1", &certificate.addresses, 1_001, 3_000)
        .unwrap();
    assert!(!parsed.covers(&renewed));
    assert_eq!(revocation.encode().len(), REVOCATION_LEN);
}

#[test]
fn bad_issue_requests_are_refused() {
    let secret = network(1);
    let one = ["198.19.0.1/32".parse().unwrap()];
    assert_eq!(
        secret.sign(node_key(9), "", &one, 1, 2),
        Err(IssueError::InvalidName)
    );
    assert_eq!(
        secret.sign(node_key(9), "has space", &one, 1, 2),
        Err(IssueError::InvalidName)
    );
    assert_eq!(
        secret.sign(node_key(9), "a", &[], 1, 2),
        Err(IssueError::AddressCount)
    );
    assert_eq!(
        secret.sign(node_key(9), "a", &one, 2, 2),
        Err(IssueError::EmptyValidity)
    );
}

#[test]
fn keys_round_trip_as_text() {
    let secret = network(7);
    let again = NetworkSecret::from_base64(&secret.to_base64()).unwrap();
    assert_eq!(again.public_key(), secret.public_key());
    let public: NetworkPublicKey = secret.public_key().to_string().parse().unwrap();
    assert_eq!(public, secret.public_key());
    assert_eq!(
        "short".parse::<NetworkPublicKey>(),
        Err(TextError::WrongKeyLength)
    );
    assert!(format!("{secret:?}").starts_with("NetworkSecret(public "));
}

fn groups(names: &[&str]) -> Vec<Group> {
    names.iter().map(|name| name.parse().unwrap()).collect()
}

#[test]
fn a_certificate_without_groups_keeps_version_1() {
    let secret = network(1);
    let bytes = certificate(&secret).encode();
    assert_eq!(&bytes[..4], b"FJC\x01");
    // Version 1's layout: magic, two keys, two times, name, prefixes
    // (type, 4 or 16 bytes, length), signature.
    assert_eq!(
        bytes.len(),
        4 + 32 + 32 + 8 + 8 + 1 + 6 + 1 + (1 + 4 + 1) + (1 + 16 + 1) + 64
    );
}

#[test]
fn groups_round_trip_in_version_2_and_are_signed() {
    let secret = network(1);
    let addresses = ["198.19.0.1/32".parse().unwrap()];
    let certificate = secret
        .sign_with_groups(
            node_key(9),
            "db-1",
            &addresses,
            &groups(&["ops", "db"]),
            1_000,
            2_000,
        )
        .unwrap();
    let bytes = certificate.encode();
    assert_eq!(&bytes[..4], b"FJC\x02");
    let parsed: Certificate = certificate.to_base64().parse().unwrap();
    assert_eq!(parsed, certificate);
    assert_eq!(parsed.groups, groups(&["ops", "db"]));
    parsed.verify(&secret.public_key(), 1_500).unwrap();
    let mut forged = parsed.clone();
    forged.groups = groups(&["ops", "admin"]);
    assert_eq!(
        forged.verify(&secret.public_key(), 1_500),
        Err(CertError::BadSignature)
    );
    let mut dropped = parsed;
    dropped.groups.clear();
    assert_eq!(
        dropped.verify(&secret.public_key(), 1_500),
        Err(CertError::BadSignature)
    );
    assert_every_flipped_bit_refused(&secret, &bytes);
}

#[test]
fn version_2_without_groups_or_with_bad_ones_is_refused() {
    let secret = network(1);
    let mut bytes = certificate(&secret).encode();
    bytes[3] = 2;
    let signature_at = bytes.len() - SIGNATURE_LEN;
    let mut empty = bytes.clone();
    empty.insert(signature_at, 0);
    assert_eq!(Certificate::decode(&empty), Err(DecodeError::InvalidField));
    for bad in [&b"Ops"[..], b"1x", b""] {
        let mut named = bytes.clone();
        let mut list = vec![1, bad.len() as u8];
        list.extend_from_slice(bad);
        named.splice(signature_at..signature_at, list);
        assert_eq!(Certificate::decode(&named), Err(DecodeError::InvalidField));
    }
    let mut twice = bytes.clone();
    twice.splice(signature_at..signature_at, [2, 1, b'a', 1, b'a']);
    assert_eq!(Certificate::decode(&twice), Err(DecodeError::InvalidField));
    let mut too_many = bytes;
    too_many.insert(signature_at, MAX_GROUPS as u8 + 1);
    assert_eq!(Certificate::decode(&too_many), Err(DecodeError::TooMany));
}

#[test]
fn group_bounds_are_enforced_when_signing() {
    let secret = network(1);
    let one = ["198.19.0.1/32".parse().unwrap()];
    let seventeen: Vec<Group> = (0..=MAX_GROUPS)
        .map(|n| format!("g{n}").parse().unwrap())
        .collect();
    assert_eq!(
        secret.sign_with_groups(node_key(9), "a", &one, &seventeen, 1, 2),
        Err(IssueError::TooManyGroups)
    );
    secret
        .sign_with_groups(node_key(9), "a", &one, &seventeen[..MAX_GROUPS], 1, 2)
        .unwrap();
    assert_eq!(
        secret.sign_with_groups(node_key(9), "a", &one, &groups(&["db", "db"]), 1, 2),
        Err(IssueError::DuplicateGroup("db".parse().unwrap()))
    );
    let listed =
        Certificate::listed_with_groups(node_key(9), "a", &one, &groups(&["web"])).unwrap();
    assert_eq!(Certificate::decode(&listed.encode()), Ok(listed));
}

fn routes(texts: &[&str]) -> Vec<Cidr> {
    texts.iter().map(|text| text.parse().unwrap()).collect()
}

fn routing_certificate(secret: &NetworkSecret, groups: &[Group], routes: &[Cidr]) -> Certificate {
    let addresses = ["198.19.0.1/32".parse().unwrap()];
    let grant = Grant {
        name: "gw-1",
        addresses: &addresses,
        groups,
        routes,
    };
    secret.issue(node_key(9), &grant, 1_000, 2_000).unwrap()
}

#[test]
fn routes_round_trip_in_version_3_and_are_signed() {
    let secret = network(1);
    let lan = routes(&["198.18.200.0/24", "0.0.0.0/0", "fd00:1::/64"]);
    for groups in [vec![], groups(&["ops"])] {
        let certificate = routing_certificate(&secret, &groups, &lan);
        let bytes = certificate.encode();
        assert_eq!(&bytes[..4], b"FJC\x03");
        let parsed: Certificate = certificate.to_base64().parse().unwrap();
        assert_eq!(parsed, certificate);
        assert_eq!(
            (parsed.groups.clone(), parsed.routes.clone()),
            (groups, lan.clone())
        );
        parsed.verify(&secret.public_key(), 1_500).unwrap();
        let mut widened = parsed.clone();
        widened.routes.push("198.18.0.0/16".parse().unwrap());
        assert_eq!(
            widened.verify(&secret.public_key(), 1_500),
            Err(CertError::BadSignature)
        );
        let mut dropped = parsed;
        dropped.routes.clear();
        assert_eq!(
            dropped.verify(&secret.public_key(), 1_500),
            Err(CertError::BadSignature)
        );
        assert_every_flipped_bit_refused(&secret, &bytes);
    }
}

#[test]
fn older_formats_still_decode_and_are_still_written() {
    let secret = network(1);
    // Written before routes existed: version 1 and 2 bytes, unchanged.
    let plain = certificate(&secret);
    let in_groups = routing_certificate(&secret, &groups(&["ops"]), &[]);
    assert_eq!(&plain.encode()[..4], b"FJC\x01");
    assert_eq!(&in_groups.encode()[..4], b"FJC\x02");
    for old in [plain, in_groups] {
        let parsed = Certificate::decode(&old.encode()).unwrap();
        assert!(parsed.routes.is_empty());
        parsed.verify(&secret.public_key(), 1_500).unwrap();
    }
}

#[test]
fn signing_clears_host_bits_and_repeats_of_routes() {
    let secret = network(1);
    let certificate = routing_certificate(
        &secret,
        &[],
        &routes(&["198.18.200.7/24", "198.18.200.0/24", "::1/0"]),
    );
    assert_eq!(certificate.routes, routes(&["198.18.200.0/24", "::/0"]));
    let seventeen: Vec<Cidr> = (0..=MAX_CERTIFICATE_ROUTES)
        .map(|n| format!("198.18.{n}.0/24").parse().unwrap())
        .collect();
    let one = ["198.19.0.1/32".parse().unwrap()];
    let grant = Grant {
        name: "a",
        addresses: &one,
        routes: &seventeen,
        ..Grant::default()
    };
    assert_eq!(
        secret.issue(node_key(9), &grant, 1, 2),
        Err(IssueError::TooManyRoutes)
    );
}

#[test]
fn version_3_without_routes_or_with_bad_ones_is_refused() {
    let secret = network(1);
    let certificate = routing_certificate(&secret, &[], &routes(&["198.18.200.0/24"]));
    let bytes = certificate.encode();
    let signature_at = bytes.len() - SIGNATURE_LEN;
    // The route list: count 1, then type 4, four bytes, length 24.
    let list_at = signature_at - (1 + 1 + 4 + 1);
    assert_eq!(bytes[list_at], 1);
    let mut empty = bytes.clone();
    empty.splice(list_at..signature_at, [0]);
    assert_eq!(Certificate::decode(&empty), Err(DecodeError::InvalidField));
    let mut host_bits = bytes.clone();
    host_bits[signature_at - 2] = 7;
    assert_eq!(
        Certificate::decode(&host_bits),
        Err(DecodeError::InvalidField)
    );
    let mut twice = bytes.clone();
    let route = bytes[list_at + 1..signature_at].to_vec();
    twice[list_at] = 2;
    twice.splice(signature_at..signature_at, route);
    assert_eq!(Certificate::decode(&twice), Err(DecodeError::InvalidField));
}
