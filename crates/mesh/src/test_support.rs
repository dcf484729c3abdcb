//! What the unit tests share: a device as the driver would build it, with
//! a deterministic random source, and peers added to it (a `PeerId` can
//! only come from a device).

use std::time::{Duration, Instant};

use fjord_proto::{
    Device, DeviceConfig, PeerConfig, PeerId, PresharedKey, PrivateKey, Rng, WallClock,
};

/// Deterministic stand-in for the OS random source.
struct CountingRng(u8);

impl Rng for CountingRng {
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        for byte in dest {
            self.0 = self.0.wrapping_add(1);
            *byte = self.0;
        }
    }
}

/// A device with private key `[1; 32]` and the standard MTU.
pub(crate) fn device() -> Device {
    Device::new(
        DeviceConfig {
            private_key: Some(PrivateKey::from_bytes([1; 32])),
            mtu: 1420,
        },
        Box::new(CountingRng(0)),
        WallClock {
            base: Instant::now(),
            base_since_epoch: Duration::from_secs(1_800_000_000),
        },
    )
}

/// A peer whose private key is `[seed; 32]`, without an endpoint.
pub(crate) fn peer_config(seed: u8) -> PeerConfig {
    PeerConfig {
        public_key: PrivateKey::from_bytes([seed; 32]).public_key(),
        preshared_key: PresharedKey::zero(),
        endpoint: None,
        persistent_keepalive: None,
    }
}

/// `count` peer ids as a device hands them out.
pub(crate) fn peer_ids(count: u8) -> Vec<PeerId> {
    let mut device = device();
    (0..count)
        .map(|n| device.add_peer(peer_config(n + 2)).expect("distinct keys"))
        .collect()
}
