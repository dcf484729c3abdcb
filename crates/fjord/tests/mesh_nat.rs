//! Mesh members behind real Linux NATs (nftables masquerade in
//! namespaces, a router between the sites) find each other from one
//! bootstrap member: two port-preserving NATs meet directly through a
//! rendezvous and carry a digest-checked transfer through the punched
//! hole; a member behind a symmetric NAT, which no punch reaches, is
//! relayed by the public member and carries a transfer too.
//!
//! Needs root and nft; without root the test skips with one line (fails
//! under CI).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_lab::nat::{NatInternet, NatKind};
use fjord_lab::netns::{Namespace, Process};
use fjord_lab::systems::{self, WorkDir};
use fjord_lab::traffic::BulkTransfer;
use fjord_mesh::{Cidr, NetworkSecret};
use fjord_proto::PrivateKey;

const PORT: u16 = 51820;
const TRANSFER_BYTES: u64 = 8 << 20;

fn fjord() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fjord"))
}

fn random_key() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("randomness");
    bytes
}

fn overlay(index: usize) -> Ipv4Addr {
    Ipv4Addr::new(198, 19, 0, index as u8 + 1)
}

struct Member {
    interface: String,
    name: String,
    _process: Process,
}

/// Writes node `index`'s key, certificate and config into `dir` and
/// starts `fjord up` in `host`.
fn start_member(
    dir: &Path,
    host: &Namespace,
    index: usize,
    secret: &NetworkSecret,
    bootstrap: Option<(String, Ipv4Addr)>,
) -> (Member, String) {
    let private = PrivateKey::from_bytes(random_key());
    let public = private.public_key().to_base64();
    let name = format!("node{index}");
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let certificate = secret
        .sign(
            private.public_key(),
            &name,
            &[Cidr::host(IpAddr::V4(overlay(index)))],
            now - 60,
            now + 3600,
        )
        .expect("certificate");
    let cert_path = dir.join(format!("{name}.cert"));
    std::fs::write(&cert_path, certificate.to_base64() + "\n").unwrap();
    let interface = format!("fn{}m{index}", std::process::id() % 100_000);
    let mut config = format!(
        "[Interface]\nPrivateKey = {}\nListenPort = {PORT}\nAddress = {}/24\n\n[Mesh]\nNetwork = {}\nCertificate = {}\n",
        private.to_base64().as_str(),
        overlay(index),
        secret.public_key(),
        cert_path.display(),
    );
    if let Some((key, address)) = bootstrap {
        config.push_str(&format!("Bootstrap = {key}@{address}:{PORT}\n"));
    }
    let config_path = dir.join(format!("{interface}.conf"));
    std::fs::write(&config_path, config).unwrap();
    std::fs::set_permissions(&config_path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let log = std::fs::File::create(dir.join(format!("{interface}.log"))).unwrap();
    let mut command = host.command(fjord());
    command
        .arg("up")
        .arg(&config_path)
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    let process = host.spawn(&mut command).expect("fjord up");
    (
        Member {
            interface,
            name,
            _process: process,
        },
        public,
    )
}

/// Names of the members `interface` lists with a session on `path`
/// (`direct`, or `relay <name>`).
fn members_on_path(host: &Namespace, interface: &str, path: &str) -> Vec<String> {
    let Ok(text) = host.exec(fjord().to_str().unwrap(), &["show", interface, "--json"]) else {
        return Vec::new();
    };
    let Ok(value) = serde_json::from_str::<serde_json::Value>(&text) else {
        return Vec::new();
    };
    value[0]["members"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|member| member["path"] == path)
        .filter_map(|member| member["name"].as_str().map(str::to_string))
        .collect()
}

fn direct_members(host: &Namespace, interface: &str) -> Vec<String> {
    members_on_path(host, interface, "direct")
}

/// How long until `a` and `b` list each other as direct, polled.
fn time_until_direct(
    internet: &NatInternet,
    members: &[Member],
    a: usize,
    b: usize,
    started: Instant,
    limit: Duration,
) -> Option<Duration> {
    while started.elapsed() < limit {
        let a_sees_b = direct_members(&internet.sites[a].host, &members[a].interface)
            .contains(&members[b].name);
        let b_sees_a = direct_members(&internet.sites[b].host, &members[b].interface)
            .contains(&members[a].name);
        if a_sees_b && b_sees_a {
            return Some(started.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

#[test]
fn members_behind_nats_meet_through_a_rendezvous() {
    if !fjord_lab::netns::is_root() {
        let why = "needs root (network namespaces, nftables)";
        assert!(!systems::missing_is_failure(), "{why} (CI=true)");
        eprintln!("skipping: {why}");
        return;
    }
    let kinds = [
        NatKind::Public,
        NatKind::PortPreserving,
        NatKind::PortPreserving,
        NatKind::Symmetric,
    ];
    let internet = NatInternet::build(&kinds).expect("namespaces and NATs");
    let workdir = WorkDir::create("mesh-nat").expect("work directory");
    let secret = NetworkSecret::from_seed(random_key());
    let secret_dir = workdir.path();

    let started = Instant::now();
    let (first, first_key) = start_member(secret_dir, &internet.sites[0].host, 0, &secret, None);
    let bootstrap = Some((first_key, internet.sites[0].address));
    let mut members = vec![first];
    for (index, site) in internet.sites.iter().enumerate().skip(1) {
        let (member, _) = start_member(secret_dir, &site.host, index, &secret, bootstrap.clone());
        members.push(member);
    }

    for (index, kind) in kinds.iter().enumerate().skip(1) {
        let took = time_until_direct(
            &internet,
            &members,
            0,
            index,
            started,
            Duration::from_secs(20),
        );
        assert!(
            took.is_some(),
            "{} member never reached the public one; logs in {}",
            kind.name(),
            workdir.path().display()
        );
    }
    let took = time_until_direct(&internet, &members, 1, 2, started, Duration::from_secs(20))
        .unwrap_or_else(|| {
            panic!(
                "two port-preserving NATs never met directly; logs in {}",
                workdir.path().display()
            )
        });
    eprintln!("port-preserving <-> port-preserving: direct {took:.2?} after start");

    let report = BulkTransfer::new(TRANSFER_BYTES)
        .timeout(Duration::from_secs(60))
        .run(
            &internet.sites[1].host,
            &internet.sites[2].host,
            SocketAddr::new(IpAddr::V4(overlay(2)), 5201),
        )
        .expect("transfer through the punched hole");
    assert!(report.verified, "{report}");
    assert_eq!(report.bytes, TRANSFER_BYTES);

    // A symmetric NAT maps each destination to a new port that no member
    // can see, so the member behind it gives up the direct path to the
    // port-preserving members after its attempts and is relayed by the
    // public member, end to end encrypted.
    let relayed = format!("relay {}", members[0].name);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !members_on_path(&internet.sites[3].host, &members[3].interface, &relayed)
        .contains(&members[1].name)
    {
        assert!(
            Instant::now() < deadline,
            "the symmetric member never reached a port-preserving one through the relay; logs in {}",
            workdir.path().display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    eprintln!(
        "symmetric <-> port-preserving: relayed {:.2?} after start",
        started.elapsed()
    );
    let report = BulkTransfer::new(TRANSFER_BYTES / 2)
        .timeout(Duration::from_secs(60))
        .run(
            &internet.sites[3].host,
            &internet.sites[1].host,
            SocketAddr::new(IpAddr::V4(overlay(1)), 5202),
        )
        .expect("transfer through the relay");
    assert!(report.verified, "{report}");
    assert!(
        direct_members(&internet.sites[3].host, &members[3].interface).contains(&members[0].name),
        "the symmetric member lost the public member"
    );
    drop(members);
    drop(workdir);
}
