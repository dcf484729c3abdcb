//! One turn of a driver's loop over the membership state machine with 1,
//! 1,000 and 10,000 members: ask for the next deadline and run the
//! timers, once with nothing due (`idle/<members>`) and once with one
//! deadline due (`one_due/<members>`: a peer that handshaked without a
//! certificate runs out of time to show one).
//!
//! Issue 46's target: the turn costs the same at 10,000 members as at
//! one (member deadlines live in a timer queue, not in a scan over all
//! members). Compare the `<members>` lines of one group within one run.
//!
//! The members are learned from one bootstrap member's gossip, so each
//! has a NAT traversal under way with its own deadline; the mesh is run
//! for two simulated minutes before measuring, so those deadlines are
//! spread as in a long-running node.

use std::hint::black_box;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use fjord_mesh::control::{Control, MemberRecord};
use fjord_mesh::{Bootstrap, Certificate, Cidr, Mesh, MeshConfig, NetworkSecret, Trust};
use fjord_proto::{PrivateKey, PublicKey, WallClock};

const MEMBER_COUNTS: [usize; 3] = [1, 1_000, 10_000];
const EPOCH_SECS: u64 = 1_800_000_000;
/// Members per gossip message, well under the MTU.
const RECORDS_PER_MESSAGE: usize = 4;
/// A key that is never a member.
const STRANGER: u16 = 65_000;

fn key(index: u16) -> PublicKey {
    // Not in the first byte: X25519 clears its low bits.
    let mut bytes = [0u8; 32];
    bytes[1..3].copy_from_slice(&index.to_be_bytes());
    bytes[31] = 0x55;
    PrivateKey::from_bytes(bytes).public_key()
}

fn address(index: u16) -> SocketAddr {
    SocketAddr::from(([198, 18, (index >> 8) as u8, index as u8], 51820))
}

fn certificate(secret: &NetworkSecret, index: u16) -> Certificate {
    let inner = Cidr::host(IpAddr::from([198, 19, (index >> 8) as u8, index as u8]));
    secret
        .sign(
            key(index),
            &format!("node-{index}"),
            &[inner],
            EPOCH_SECS - 10,
            EPOCH_SECS + 86_400,
        )
        .expect("valid certificate")
}

fn drain(mesh: &mut Mesh) {
    while mesh.poll_action().is_some() {}
    while mesh.poll_message().is_some() {}
}

/// Node 0's mesh with `members` members (node 1, its bootstrap, and the
/// others it gossiped), and an instant at which nothing is due yet.
fn mesh_with(members: usize) -> (Mesh, Instant) {
    let secret = NetworkSecret::from_seed([3; 32]);
    let base = Instant::now();
    let wall_clock = WallClock {
        base,
        base_since_epoch: Duration::from_secs(EPOCH_SECS),
    };
    let mut config = MeshConfig::new(
        Trust::Network(secret.public_key()),
        certificate(&secret, 0),
        1420,
    );
    config.bootstrap = vec![Bootstrap {
        key: key(1),
        endpoint: address(1),
    }];
    // Periodic rounds do work in proportion to the members by nature;
    // keep them out of the measured turns.
    config.ping_interval = Duration::from_secs(3_600);
    config.gossip_interval = Duration::from_secs(3_600);
    config.revocation_check_interval = Duration::from_secs(3_600);
    config.member_timeout = Duration::from_secs(3_600);
    config.verify_timeout = Duration::from_nanos(1);
    let mut mesh = Mesh::new(config, base, wall_clock, 7);
    let hello = Control::Hello {
        certificate: Box::new(certificate(&secret, 1)),
        wants_members: false,
        host_addresses: Vec::new(),
    };
    mesh.handle_control(base, key(1), address(1), &hello.encode())
        .expect("bootstrap member accepted");
    let others: Vec<u16> = (2..=members as u16).collect();
    for chunk in others.chunks(RECORDS_PER_MESSAGE) {
        let records = chunk
            .iter()
            .map(|&index| MemberRecord {
                certificate: certificate(&secret, index),
                endpoints: vec![address(index)],
                host_addresses: Vec::new(),
                heard_secs_ago: 0,
            })
            .collect();
        mesh.handle_control(
            base,
            key(1),
            address(1),
            &Control::Members(records).encode(),
        )
        .expect("gossip accepted");
        drain(&mut mesh);
    }
    let settled = base + Duration::from_secs(120);
    while let Some(deadline) = mesh.poll_timeout().filter(|d| *d <= settled) {
        mesh.handle_timeout(deadline);
        drain(&mut mesh);
    }
    assert_eq!(mesh.members().count(), members, "members after settling");
    let next = mesh.poll_timeout().expect("traversals are under way");
    (mesh, next - Duration::from_nanos(10))
}

fn turns(c: &mut Criterion) {
    let mut group = c.benchmark_group("mesh_timers");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));
    for members in MEMBER_COUNTS {
        let (mut mesh, quiet) = mesh_with(members);
        group.bench_function(format!("idle/{members}"), |b| {
            b.iter(|| {
                black_box(mesh.poll_timeout());
                mesh.handle_timeout(black_box(quiet));
                drain(&mut mesh);
            })
        });
        let stranger = key(STRANGER);
        group.bench_function(format!("one_due/{members}"), |b| {
            b.iter(|| {
                // Its Hello deadline is one nanosecond later: due below.
                mesh.handle_unverified(quiet, stranger);
                black_box(mesh.poll_timeout());
                mesh.handle_timeout(black_box(quiet + Duration::from_nanos(1)));
                let mut removed = false;
                while let Some(action) = mesh.poll_action() {
                    removed |= matches!(action, fjord_mesh::MeshAction::Remove { .. });
                }
                while mesh.poll_message().is_some() {}
                assert!(removed, "the stranger's deadline fired");
            })
        });
    }
    group.finish();
}

criterion_group!(benches, turns);
criterion_main!(benches);
