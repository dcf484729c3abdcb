//! Applies a parsed `set=1` request on the worker, in one step between
//! packet batches. The only part that can fail (binding a new listen port)
//! runs first, so a request either applies whole or not at all. Peers the
//! request does not name are not touched: their sessions keep running.

use fjord_net::ControlContext;
use fjord_net::udp::UdpError;
use fjord_proto::{PeerConfig, PresharedKey};

use super::set::{PeerChange, SetError, SetRequest};

pub fn apply(context: &mut ControlContext<'_>, request: SetRequest) -> Result<(), SetError> {
    if let Some(port) = request.listen_port {
        let old_port = context.listen_port();
        context.rebind(port).map_err(|error| match error {
            UdpError::PortInUse { .. } => SetError {
                errno: libc::EADDRINUSE,
                reason: error.to_string(),
            },
            other => SetError {
                errno: libc::EIO,
                reason: other.to_string(),
            },
        })?;
        if context.listen_port() != old_port {
            // Peers still send to the old port; an authenticated packet from
            // the new one moves their endpoint for us (wireguard-go does the same).
            let now = context.now;
            context.node.device_mut().keepalive_all_sessions(now);
        }
    }
    if let Some(fwmark) = request.fwmark {
        context.set_fwmark(fwmark).map_err(|error| SetError {
            errno: libc::EIO,
            reason: format!("fwmark: {error}"),
        })?;
    }
    if let Some(private_key) = request.private_key {
        context.node.device_mut().set_private_key(private_key);
    }
    if request.replace_peers {
        context.node.remove_all_peers();
    }
    for change in request.peers {
        apply_peer(context, change);
    }
    Ok(())
}

fn apply_peer(context: &mut ControlContext<'_>, change: PeerChange) {
    let now = context.now;
    let node = &mut *context.node;
    let existing = node.device().peer_id(&change.public_key);
    if change.remove {
        if let Some(id) = existing {
            node.remove_peer(id);
        }
        return;
    }
    let (id, keepalive_before) = match existing {
        Some(id) => {
            let before = node
                .device()
                .peer_status(id)
                .and_then(|s| s.persistent_keepalive);
            (id, before)
        }
        None if change.update_only => return,
        None => {
            let config = PeerConfig {
                public_key: change.public_key,
                preshared_key: PresharedKey::zero(),
                endpoint: None,
                persistent_keepalive: None,
            };
            // A peer with the interface's own key is ignored, as by wireguard-go.
            let Ok(id) = node.add_peer(config, &[]) else {
                return;
            };
            (id, None)
        }
    };
    let device = node.device_mut();
    if let Some(preshared_key) = change.preshared_key {
        device.set_peer_preshared_key(id, preshared_key);
    }
    if let Some(endpoint) = change.endpoint {
        device.set_peer_endpoint(id, endpoint);
    }
    if let Some(secs) = change.persistent_keepalive {
        let interval = (secs > 0).then(|| std::time::Duration::from_secs(u64::from(secs)));
        device.set_peer_persistent_keepalive(id, now, interval);
        if keepalive_before.is_none() && interval.is_some() {
            device.send_keepalive(id, now);
        }
    }
    if change.replace_allowed_ips {
        node.clear_allowed_ips(id);
    }
    for cidr in change.allowed_ips {
        node.add_allowed_ip(id, cidr);
    }
}
