//! Endpoints given as DNS names are looked up again when their peer goes
//! silent, as wg-quick's `reresolve-dns.sh` does: a server that moved to
//! a new address (a dynamic-DNS home router) is found again without a
//! restart.
//!
//! ```text
//! every CHECK_INTERVAL, on this thread (never the worker's):
//!     for each peer whose Endpoint (or Bootstrap) is a name:
//!         ask the worker for its latest handshake and endpoint
//!         silent (no handshake for SILENT_AFTER, or never) and its lookup due?
//!             getaddrinfo (may block for seconds: only this thread waits)
//!             a new address: the worker points the peer there and
//!             sends an initiation at once
//! ```
//!
//! A silent peer is looked up again after 5 s, then 10, 20 and every 30 s
//! (its first retries find a fresh record quickly; a peer that stays away
//! costs a lookup per 30 s); a handshake resets the delay.

use std::net::SocketAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_net::ControlHandle;
use fjord_proto::PublicKey;

use crate::config::{Resolve, SystemResolver};

/// How often the silent peers are checked.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);
/// A peer with no handshake for this long is silent: a session lives at
/// most 180 s and is renewed after 120 s, so a working peer handshakes at
/// least every 2 minutes while traffic flows (wg-quick's script uses the
/// same 135 s).
const SILENT_AFTER: Duration = Duration::from_secs(135);
const FIRST_DELAY: Duration = Duration::from_secs(5);
const MAX_DELAY: Duration = Duration::from_secs(30);

/// A peer whose endpoint was written as a name.
#[derive(Debug, Clone)]
pub struct NamedEndpoint {
    pub public_key: PublicKey,
    pub host: String,
    pub port: u16,
}

struct Watched {
    endpoint: NamedEndpoint,
    next_lookup: Instant,
    delay: Duration,
}

/// Starts the re-resolving thread if any endpoint is a name; it ends when
/// the worker stops.
pub fn spawn(control: ControlHandle, endpoints: Vec<NamedEndpoint>) -> std::io::Result<()> {
    if endpoints.is_empty() {
        return Ok(());
    }
    let start = Instant::now();
    let watched = endpoints
        .into_iter()
        .map(|endpoint| Watched {
            endpoint,
            next_lookup: start + FIRST_DELAY,
            delay: FIRST_DELAY,
        })
        .collect();
    std::thread::Builder::new()
        .name("reresolve".into())
        .spawn(move || run(&control, watched, &SystemResolver))?;
    Ok(())
}

fn run(control: &ControlHandle, mut watched: Vec<Watched>, resolver: &dyn Resolve) {
    loop {
        std::thread::sleep(CHECK_INTERVAL);
        for peer in &mut watched {
            let key = peer.endpoint.public_key;
            let Ok(state) = control.call(move |context| {
                let device = context.node.device();
                let status = device.peer_status(device.peer_id(&key)?)?;
                Some((status.stats.last_handshake, status.endpoint))
            }) else {
                return;
            };
            // A peer not (or no longer) configured, e.g. removed by `wg set`.
            let Some((last_handshake, current)) = state else {
                continue;
            };
            let now = Instant::now();
            if !is_silent(last_handshake) {
                peer.delay = FIRST_DELAY;
                peer.next_lookup = now + FIRST_DELAY;
                continue;
            }
            if now < peer.next_lookup {
                continue;
            }
            peer.next_lookup = now + peer.delay;
            peer.delay = (peer.delay * 2).min(MAX_DELAY);
            let NamedEndpoint { host, port, .. } = &peer.endpoint;
            let address = match resolver.resolve(host, *port) {
                Ok(address) => address,
                Err(error) => {
                    tracing::debug!(%error, host, "re-resolving a silent peer's endpoint failed");
                    continue;
                }
            };
            if current == Some(address) {
                continue;
            }
            tracing::info!(peer = %key, host, %address, "silent peer's endpoint name now resolves elsewhere; moving it");
            if move_peer(control, key, address).is_err() {
                return;
            }
        }
    }
}

fn is_silent(last_handshake: Option<Duration>) -> bool {
    let Some(last) = last_handshake else {
        return true;
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    now.saturating_sub(last) >= SILENT_AFTER
}

fn move_peer(
    control: &ControlHandle,
    key: PublicKey,
    address: SocketAddr,
) -> Result<(), fjord_net::WorkerStopped> {
    control.call(move |context| {
        let now = context.now;
        let device = context.node.device_mut();
        // An initiation leaves there at once, even if one just left for
        // the old address (this thread bounds how often).
        if let Some(id) = device.peer_id(&key) {
            device.set_peer_endpoint(id, address);
            device.initiate_toward(id, now, &[address]);
        }
    })
}
