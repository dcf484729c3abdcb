//! Secrets never reach the log. Two fjord sides with a preshared key log
//! at `trace` (everything fjord can log) through a whole session: start,
//! handshakes, pings and a transfer, rekeys every 480 ms
//! (`--test-rekey-divisor`), `fjord show` and `--json`, `get=1` on the
//! configuration socket (the reply `wg showconf` prints, private key
//! included), `set=1` requests that carry keys (one valid, one mangled and
//! refused, which fjord logs), and shutdown. Then every line of both logs
//! is searched for both private keys and the preshared key, in base64 and
//! in hex (either case).
//!
//! Needs root; without it, it skips with one line (fails under CI).

mod support;

use fjord_lab::systems::wireguard::{self, Initiator, generate_private_key};
use fjord_lab::topology::TwoHosts;
use fjord_lab::traffic;
use fjord_proto::PresharedKey;
use support::{
    Tunnel, fjord, handshakes_logged, left_overlay, log_lines, ready, reply_errno, right_overlay,
    show_json, show_text, uapi_request,
};

/// A rekey every 480 ms.
const REKEY_DIVISOR: u32 = 250;
const TRANSFER_BYTES: u64 = 8 * 1024 * 1024;
const SINK_PORT: u16 = 5401;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Each secret as it could appear in a log: base64, and hex in both cases.
fn spellings(name: &str, bytes: &[u8; 32], base64: &str) -> Vec<(String, String)> {
    let lower = hex(bytes);
    let upper = lower.to_uppercase();
    vec![
        (format!("{name} (base64)"), base64.to_string()),
        (format!("{name} (hex)"), lower),
        (format!("{name} (HEX)"), upper),
    ]
}

#[test]
fn no_key_reaches_the_trace_log() {
    let test = "no_key_reaches_the_trace_log";
    if !ready(test) {
        return;
    }
    let (mut left_side, mut right_side) = wireguard::point_to_point(Initiator::Both).expect("keys");
    // Random bytes for the preshared key, drawn the way private keys are.
    let preshared = PresharedKey::from_bytes(*generate_private_key().expect("key").to_bytes());
    left_side.peers[0].preshared_key = Some(preshared.clone());
    right_side.peers[0].preshared_key = Some(preshared.clone());
    let mut secrets = Vec::new();
    for (name, key) in [
        ("left private key", &left_side.private_key),
        ("right private key", &right_side.private_key),
    ] {
        secrets.extend(spellings(name, &key.to_bytes(), key.to_base64().as_str()));
    }
    secrets.extend(spellings(
        "preshared key",
        preshared.as_bytes(),
        preshared.to_base64().as_str(),
    ));

    let hosts = TwoHosts::direct().expect("build two hosts");
    let fjord = fjord()
        .with_threads(2)
        .with_rekey_divisor(REKEY_DIVISOR)
        .with_log_filter("trace");
    let mut tunnel =
        Tunnel::up_with_sides(test, fjord.clone(), fjord, hosts, (left_side, right_side));

    // Traffic through several rekeys.
    tunnel.verified_transfer(TRANSFER_BYTES, SINK_PORT);
    for _ in 0..10 {
        traffic::ping(&tunnel.hosts.left, right_overlay(), 2)
            .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
        traffic::ping(&tunnel.hosts.right, left_overlay(), 2)
            .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
        if handshakes_logged(&tunnel.left) + handshakes_logged(&tunnel.right) >= 8 {
            break;
        }
    }
    let rekeys = handshakes_logged(&tunnel.left) + handshakes_logged(&tunnel.right);
    eprintln!("{test}: {rekeys} handshakes logged");
    assert!(rekeys >= 4, "{}", tunnel.context("too few rekeys"));

    // What a user or wg asks over the configuration socket.
    for side in [&tunnel.left_side, &tunnel.right_side] {
        let ifname = &side.ifname;
        assert!(show_text(ifname).contains("preshared key: (hidden)"));
        let shown = show_json(ifname);
        assert_eq!(shown.endpoints.len(), 1);
        let config = uapi_request(ifname, "get=1\n\n");
        assert!(
            config.contains(&format!(
                "private_key={}",
                hex(side.private_key.to_bytes().as_ref())
            )),
            "get=1 gives the private key, as wg showconf needs"
        );
        assert_eq!(reply_errno(&uapi_request(ifname, "get=fjord\n\n")), 0);
        let peer = hex(side.peers[0].public_key.as_bytes());
        let set = format!(
            "set=1\npublic_key={peer}\npreshared_key={}\n\n",
            hex(preshared.as_bytes())
        );
        assert_eq!(reply_errno(&uapi_request(ifname, &set)), 0);
        // Mangled (no '='): refused, and the refusal is logged.
        let mangled = format!(
            "set=1\nprivate_key{}\n\n",
            hex(side.private_key.to_bytes().as_ref())
        );
        assert_eq!(reply_errno(&uapi_request(ifname, &mangled)), libc::EPROTO);
    }
    traffic::ping(&tunnel.hosts.left, right_overlay(), 2)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));

    for side in [&mut tunnel.left, &mut tunnel.right] {
        let status = side.stop().expect("the side was running");
        assert!(status.success(), "{} exited with {status}", side.ifname());
    }
    let mut lines_read = 0;
    for side in [&tunnel.left, &tunnel.right] {
        let lines = log_lines(side);
        assert!(
            lines.iter().any(|line| line.contains("DEBUG")),
            "{} did not log at trace level",
            side.ifname()
        );
        assert!(
            lines
                .iter()
                .any(|line| line.contains("refused a configuration change")),
            "{}: the mangled request was not logged",
            side.ifname()
        );
        for (number, line) in lines.iter().enumerate() {
            for (name, spelling) in &secrets {
                assert!(
                    !line.contains(spelling.as_str()),
                    "{} log line {}: the {name} is in it",
                    side.ifname(),
                    number + 1
                );
            }
        }
        lines_read += lines.len();
    }
    eprintln!("{test}: {lines_read} log lines hold none of the keys");
}
