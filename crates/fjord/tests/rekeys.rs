//! Rekeys and restarts through a real fjord↔fjord tunnel between two
//! namespaces:
//!
//! - rekeying 250 times as often (every 480 ms, `--test-rekey-divisor`),
//!   pings every millisecond across thirty rekeys all come back;
//! - a side killed and started again (new ephemeral keys, no sessions)
//!   answers the other side's continuous pings again soon after it is up:
//!   the figure is printed, the test asserts only that it comes back.
//!
//! Needs root; without it each test skips with one line (fails under CI).

mod support;

use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use fjord_lab::netns::{self, Namespace};
use fjord_lab::systems;
use fjord_lab::systems::wireguard::Implementation;
use fjord_lab::traffic::{self, PingSummary};
use support::{Tunnel, fjord, handshakes_logged, left_overlay, ready, right_overlay, show_json};

/// The rekey cycle this many times faster: a rekey every 480 ms.
const REKEY_DIVISOR: u32 = 250;
const REKEY_AFTER: Duration = Duration::from_millis(120_000 / REKEY_DIVISOR as u64);
const REKEYS: u32 = 30;

/// `ping -q` from `namespace` every `interval` (needs root below 0.2 s).
fn ping_quietly(
    namespace: &Namespace,
    destination: std::net::IpAddr,
    count: u32,
    interval: Duration,
) -> (PingSummary, String) {
    let output = namespace
        .command("ping")
        .args(["-n", "-q", "-W", "1", "-c", &count.to_string(), "-i"])
        .arg(format!("{:.3}", interval.as_secs_f64()))
        .arg(destination.to_string())
        .stdin(Stdio::null())
        .output()
        .expect("run ping");
    let text = String::from_utf8_lossy(&output.stdout).into_owned()
        + &String::from_utf8_lossy(&output.stderr);
    let summary =
        traffic::parse_ping(&text).unwrap_or_else(|| panic!("no ping summary in: {text}"));
    (summary, text)
}

#[test]
fn pings_every_millisecond_survive_thirty_rekeys() {
    let test = "pings_every_millisecond_survive_thirty_rekeys";
    if !ready(test) {
        return;
    }
    let tunnel = Tunnel::up(test, fjord().with_rekey_divisor(REKEY_DIVISOR));
    let before = (
        handshakes_logged(&tunnel.left),
        handshakes_logged(&tunnel.right),
    );
    // Enough pings for thirty rekeys and one more, even if ping keeps the
    // pace exactly; on a busy machine it takes longer and sees more.
    let count = (REKEY_AFTER.as_millis() as u32) * (REKEYS + 1);
    let started = Instant::now();
    let (summary, output) = ping_quietly(
        &tunnel.hosts.left,
        right_overlay(),
        count,
        Duration::from_millis(1),
    );
    let took = started.elapsed();
    let handshakes = (
        handshakes_logged(&tunnel.left) - before.0,
        handshakes_logged(&tunnel.right) - before.1,
    );
    let drops = [&tunnel.left_side, &tunnel.right_side].map(|side| show_json(&side.ifname).drops);
    let round_trips = output
        .lines()
        .find(|line| line.starts_with("rtt"))
        .unwrap_or("rtt: none");
    eprintln!(
        "{test}: {} pings sent, {} answered in {took:.1?} ({round_trips}); handshakes completed meanwhile: left {}, right {}; drops: left {:?}, right {:?}",
        summary.transmitted, summary.received, handshakes.0, handshakes.1, drops[0], drops[1]
    );
    assert!(
        handshakes.0.min(handshakes.1) >= REKEYS as usize,
        "{}",
        tunnel.context(&format!("only {handshakes:?} rekeys during {took:?}"))
    );
    assert_eq!(
        summary.received,
        summary.transmitted,
        "{}",
        tunnel.context(&format!("pings lost across rekeys: {output}"))
    );
}

/// Reply times (`ping -D`) of a running `ping` whose output is read when
/// it ends.
fn reply_times(output: &str) -> Vec<f64> {
    output
        .lines()
        .filter(|line| line.contains("bytes from"))
        .filter_map(|line| {
            let stamp = line.strip_prefix('[')?.split(']').next()?;
            stamp.parse().ok()
        })
        .collect()
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

#[test]
fn restarted_side_answers_continuous_pings_again() {
    let test = "restarted_side_answers_continuous_pings_again";
    if !ready(test) {
        return;
    }
    let mut tunnel = Tunnel::up(test, fjord());
    // The survivor (left) pings the side that will restart every 10 ms
    // throughout: the direction WireGuard repairs only after 15 s of
    // unanswered data, unless the restarted side speaks first.
    let pinging_for = Duration::from_secs(8);
    let ping = tunnel
        .hosts
        .left
        .command("ping")
        .args(["-n", "-D", "-i", "0.01", "-W", "1", "-w"])
        .arg(pinging_for.as_secs().to_string())
        .arg(right_overlay().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start ping");
    std::thread::sleep(Duration::from_secs(1));

    let status = tunnel.right.kill().expect("the right side was running");
    let killed_at = unix_now();
    netns::wait_until(
        Duration::from_secs(2),
        "the killed side's interface to vanish",
        || !systems::link_exists(&tunnel.hosts.right, &tunnel.right_side.ifname),
    )
    .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
    eprintln!("{test}: right side killed ({status})");

    let starting_at = unix_now();
    tunnel.right = tunnel
        .fjord
        .start(
            &tunnel.hosts.right,
            &tunnel.right_side,
            tunnel.workdir.path(),
        )
        .unwrap_or_else(|error| panic!("restart right fjord: {error}"));
    let up_at = unix_now();

    let output = ping.wait_with_output().expect("ping ends at its deadline");
    let output = String::from_utf8_lossy(&output.stdout);
    let replies = reply_times(&output);
    let first_back = replies.iter().copied().find(|&at| at > killed_at);
    let Some(first_back) = first_back else {
        panic!(
            "{}",
            tunnel.context(&format!(
                "no ping answered within {pinging_for:?} after the restart:\n{output}"
            ))
        );
    };
    eprintln!(
        "{test}: restarted fjord up {:.3} s after its start; first reply {:.3} s after it was up ({:.3} s after the kill)",
        up_at - starting_at,
        first_back - up_at,
        first_back - killed_at
    );
    // And the other way, from the restarted side.
    traffic::ping(&tunnel.hosts.right, left_overlay(), 3)
        .unwrap_or_else(|error| panic!("{}", tunnel.context(&error.to_string())));
}
