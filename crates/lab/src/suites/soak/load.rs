//! The soak's load: digest-checked TCP transfers of [`STREAMS`] streams
//! left → right, back to back, on a thread of their own, so that the
//! suite can restart a side while one is under way.
//!
//! The suite holds the load to read counters at a quiet moment: `hold`
//! lets the transfer under way finish and starts no new one until
//! `release`. A transfer that fails is recorded with why, and the next
//! one starts a second later: that is its retry. Each transfer uses a port of
//! its own (rotating through [`PORTS`]), so a new sink never waits for an
//! old connection's port.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::netns::Namespace;
use crate::traffic::BulkTransfer;

pub const STREAMS: usize = 4;
/// Generous on a shared 2-core machine at full load: a restart's outage,
/// TCP's backed-off retransmits and a busy debug build fit well within.
const TRANSFER_LIMIT: Duration = Duration::from_secs(240);
const TRANSFER_STALL: Duration = Duration::from_secs(120);
const PORTS: u16 = 90;
/// The pause after a failed transfer before its retry: while a side is
/// down its address is gone, and a sink that cannot bind fails at once.
const RETRY_PAUSE: Duration = Duration::from_secs(1);
const FIRST_PORT: u16 = 5501;

/// How one transfer ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every stream arrived whole with the digest it was sent with.
    Verified,
    /// It completed, but what arrived is not what was sent.
    DigestMismatch,
    /// It did not complete: why.
    Failed(String),
}

/// One transfer, from the first connect to the last byte (or failure).
#[derive(Debug, Clone)]
pub struct Transfer {
    pub started: Instant,
    pub ended: Instant,
    /// Payload bytes received.
    pub bytes: u64,
    pub outcome: Outcome,
}

#[derive(Default)]
struct State {
    hold: bool,
    running: bool,
    stop: bool,
    transfers: Vec<Transfer>,
}

pub struct Load {
    state: Mutex<State>,
    changed: Condvar,
}

impl Load {
    /// A load that is held: nothing runs before [`Load::release`].
    pub fn held() -> Self {
        Self {
            state: Mutex::new(State {
                hold: true,
                ..State::default()
            }),
            changed: Condvar::new(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A transfer never panics while holding the lock; recover anyway.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs transfers of `bytes` from `left` to `sink` in `right` until
    /// [`Load::stop`]; run it on a thread of its own.
    pub fn run(&self, left: &Namespace, right: &Namespace, sink: IpAddr, bytes: u64) {
        let transfer = BulkTransfer::new(bytes)
            .streams(STREAMS)
            .timeout(TRANSFER_LIMIT)
            .stall_timeout(TRANSFER_STALL);
        let mut round: u16 = 0;
        loop {
            {
                let mut state = self.state();
                while state.hold && !state.stop {
                    state = self
                        .changed
                        .wait(state)
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                }
                if state.stop {
                    return;
                }
                state.running = true;
            }
            let port = FIRST_PORT + round % PORTS;
            round = round.wrapping_add(1);
            let started = Instant::now();
            let result = transfer.run(left, right, SocketAddr::new(sink, port));
            let record = Transfer {
                started,
                ended: Instant::now(),
                bytes: result.as_ref().map_or(0, |report| report.bytes),
                outcome: match result {
                    Ok(report) if report.verified => Outcome::Verified,
                    Ok(_) => Outcome::DigestMismatch,
                    Err(error) => Outcome::Failed(error.to_string()),
                },
            };
            if matches!(record.outcome, Outcome::Failed(_)) {
                std::thread::sleep(RETRY_PAUSE);
            }
            let mut state = self.state();
            state.running = false;
            state.transfers.push(record);
            self.changed.notify_all();
        }
    }

    /// Starts no new transfer and waits for the one under way to end.
    pub fn hold(&self) {
        let mut state = self.state();
        state.hold = true;
        while state.running {
            state = self
                .changed
                .wait(state)
                .unwrap_or_else(|poisoned| poisoned.into_inner());
        }
    }

    pub fn release(&self) {
        self.state().hold = false;
        self.changed.notify_all();
    }

    /// Ends the load after the transfer under way.
    pub fn stop(&self) {
        self.state().stop = true;
        self.changed.notify_all();
    }

    /// Whether a transfer is under way.
    pub fn running(&self) -> bool {
        self.state().running
    }

    /// The transfers so far.
    pub fn transfers(&self) -> Vec<Transfer> {
        self.state().transfers.clone()
    }
}
