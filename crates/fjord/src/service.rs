//! `fjord up` as a systemd service (`packaging/fjord@.service`,
//! `Type=notify`, `WatchdogSec=`): readiness and watchdog pings on
//! `$NOTIFY_SOCKET`. Without that variable nothing here runs.
//!
//! ```text
//! main thread: interface, addresses, routes, --user → spawn(control) → worker.run()
//! this thread: one control call, answered by the worker only after its
//!              first turn (the initiations due at start have been sent)
//!                  → READY=1
//!              every WatchdogSec/2: a control call → WATCHDOG=1
//! main thread, when the worker stops → STOPPING=1
//! ```
//!
//! The watchdog is answered from here, through the worker's control handle,
//! rather than from the worker's once-a-second housekeeping: the net crate
//! stays free of systemd, and a control call is answered only by a worker
//! loop that still turns (the same path `wg` and `fjord show` take, run
//! after every turn even under a flood). A worker that hangs never answers,
//! this thread blocks in the call, the pings stop and systemd restarts the
//! service; a worker that stops makes the call fail and the thread ends.

use std::time::Duration;

use fjord_net::ControlHandle;
use sd_notify::NotifyState;

/// The watchdog is pinged twice per `WatchdogSec`, as sd_watchdog_enabled(3)
/// advises, so one late ping does not trip it.
const PINGS_PER_PERIOD: u32 = 2;

/// Starts the notifying thread if systemd (or a test) set `$NOTIFY_SOCKET`.
/// Call it after root is given up and before the worker runs.
pub fn spawn(control: ControlHandle, interface: String, peers: usize) -> std::io::Result<()> {
    if std::env::var_os("NOTIFY_SOCKET").is_none() {
        return Ok(());
    }
    let watchdog = sd_notify::watchdog_enabled();
    std::thread::Builder::new()
        .name("sd-notify".into())
        .spawn(move || run(&control, &interface, peers, watchdog))?;
    Ok(())
}

fn run(control: &ControlHandle, interface: &str, peers: usize, watchdog: Option<Duration>) {
    if control.call(|_| ()).is_err() {
        return;
    }
    let status = format!("{interface} is up with {peers} peers");
    send(&[NotifyState::Ready, NotifyState::Status(&status)]);
    let Some(period) = watchdog else { return };
    let interval = period / PINGS_PER_PERIOD;
    tracing::debug!(?interval, "answering systemd's watchdog");
    loop {
        std::thread::sleep(interval);
        if control.call(|_| ()).is_err() {
            return;
        }
        send(&[NotifyState::Watchdog]);
    }
}

/// Tells systemd the service is stopping (before the interface goes down).
pub fn stopping() {
    send(&[NotifyState::Stopping]);
}

fn send(state: &[NotifyState<'_>]) {
    if let Err(error) = sd_notify::notify(state) {
        tracing::warn!(%error, "cannot notify systemd ($NOTIFY_SOCKET)");
    }
}
