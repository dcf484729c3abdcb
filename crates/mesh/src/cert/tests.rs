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
