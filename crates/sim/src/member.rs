//! A member as `fjord up` builds one: its own X25519 key, a certificate
//! the network key signed (what `fjord network sign` writes), a
//! `Device` with a seeded random source, and a `Node` with the mesh
//! enabled, configured with one bootstrap member and nothing else.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fjord_mesh::{Bootstrap, Cidr, Mesh, MeshConfig, NetworkSecret, Node};
use fjord_proto::{Device, DeviceConfig, PrivateKey, PublicKey, Rng, WallClock};
use rand::rngs::Xoshiro256PlusPlus;
use rand::{Rng as _, SeedableRng};

use crate::network::{host_address, overlay_address};

/// The simulated wall clock's reading at the start, in Unix seconds.
pub const EPOCH_SECS: u64 = 1_800_000_000;

/// The tunnel MTU of every member.
pub const MTU: usize = 1420;

/// How long certificates stay valid: far past any simulated run.
const CERTIFICATE_DAYS: u64 = 30;

/// A device's random source, seeded per member: the same keys, indices
/// and nonces on every run of a seed.
struct SeededRng(Xoshiro256PlusPlus);

impl Rng for SeededRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        self.0.fill_bytes(dest);
    }
}

/// Everything of a member but its node.
#[derive(Debug, Clone, Copy)]
pub struct Identity {
    pub index: usize,
    pub key: PublicKey,
    pub host: SocketAddr,
    pub overlay: IpAddr,
}

/// Member `index`'s private key, derived from the run's seed.
pub(crate) fn private_key(seed: u64, index: usize) -> PrivateKey {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x6b65_7973 ^ ((index as u64) << 20));
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    PrivateKey::from_bytes(bytes)
}

/// The network's key pair, derived from the run's seed.
pub(crate) fn network_secret(seed: u64) -> NetworkSecret {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed ^ 0x006e_6574_776f_726b);
    let mut bytes = [0u8; 32];
    rng.fill_bytes(&mut bytes);
    NetworkSecret::from_seed(bytes)
}

pub(crate) fn wall_clock(start: Instant) -> WallClock {
    WallClock {
        base: start,
        base_since_epoch: Duration::from_secs(EPOCH_SECS),
    }
}

/// A new member's node, started at `now`, joining through `bootstrap`
/// (none for the first member).
pub(crate) fn start_node(
    seed: u64,
    sessions: crate::sim::Sessions,
    network: &NetworkSecret,
    index: usize,
    start: Instant,
    now: Instant,
    bootstrap: Option<&Identity>,
) -> (Identity, Node) {
    let private = private_key(seed, index);
    let key = private.public_key();
    let identity = Identity {
        index,
        key,
        host: host_address(index),
        overlay: overlay_address(index),
    };
    let clock = wall_clock(start);
    let device_rng = Xoshiro256PlusPlus::seed_from_u64(seed.wrapping_mul(31) ^ index as u64);
    let device = Device::new(
        DeviceConfig {
            private_key: Some(private),
            mtu: MTU,
        },
        Box::new(SeededRng(device_rng)),
        clock,
    );
    let certificate = network
        .sign(
            key,
            &format!("m{index}"),
            &[Cidr::host(identity.overlay)],
            EPOCH_SECS - 60,
            EPOCH_SECS + CERTIFICATE_DAYS * 86_400,
        )
        // A host prefix and a name of a few characters: always signable.
        .expect("a certificate for a host prefix");
    let mut config = MeshConfig::new(network.public_key(), certificate, MTU);
    config.host_addresses = vec![identity.host];
    config.eager_sessions = sessions.eager;
    config.idle_timeout = sessions.idle_timeout;
    config.bootstrap = bootstrap
        .map(|b| Bootstrap {
            key: b.key,
            endpoint: b.host,
        })
        .into_iter()
        .collect();
    let mesh_seed = seed.rotate_left(17) ^ index as u64;
    let mesh = Mesh::new(config, now, clock, mesh_seed);
    let mut node = Node::new(device);
    node.enable_mesh(now, mesh);
    (identity, node)
}
