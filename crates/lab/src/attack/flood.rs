//! The flood generator: one thread in the attacker's namespace writes
//! [`SpoofedInitiations`] frames in batches onto its link through a
//! packet socket (straight to the driver: no routing, no qdisc, no
//! source-address check), as fast as it can or at a set rate, and counts
//! what the link took.
//!
//! A paced flood sends small batches at their due times (the schedule is
//! kept from the start, so a late batch is made up by the next ones, never
//! by a burst larger than one batch); an unpaced one sends full batches
//! back to back, which on a shared machine takes a whole core.

use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fjord_sys::mmsg::{self, SendRefusal};
use fjord_sys::packet::PacketSocket;

use super::frames::{FloodTarget, INITIATION_FRAME_LEN, SpoofedInitiations};
use crate::netns::Namespace;

/// Frames per send when unpaced.
const FULL_BATCH: usize = 64;
/// Longest pause between two paced batches: the batch size follows the
/// rate so that a batch goes out at least this often.
const PACED_INTERVAL: Duration = Duration::from_millis(1);
/// How long to wait for a link that refused a batch (a full queue).
const REFUSED_WAIT: Duration = Duration::from_millis(1);

/// How fast to flood.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FloodRate {
    /// As fast as one thread can write frames.
    Unpaced,
    PerSecond(u32),
}

impl std::fmt::Display for FloodRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FloodRate::Unpaced => write!(f, "max"),
            FloodRate::PerSecond(rate) => write!(f, "{rate}/s"),
        }
    }
}

/// What a finished flood sent.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloodReport {
    /// Frames the link took.
    pub sent: u64,
    pub elapsed: Duration,
}

impl FloodReport {
    pub fn per_second(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.sent as f64 / secs
        } else {
            0.0
        }
    }
}

/// A flood under way; dropping it stops it.
pub struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    started: Instant,
    thread: Option<JoinHandle<io::Result<()>>>,
}

impl Flood {
    /// Starts flooding `target` from `link` in `attacker`. Returns once the
    /// packet socket is open, so a link that does not exist is an error
    /// here rather than a flood that never sends.
    pub fn start(
        attacker: &Namespace,
        link: &str,
        target: FloodTarget,
        rate: FloodRate,
    ) -> io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (opened_tx, opened_rx) = std::sync::mpsc::channel();
        let link = link.to_string();
        let seed = random_seed()?;
        let thread = {
            let (stop, sent) = (stop.clone(), sent.clone());
            attacker.spawn_thread(move || {
                let opened = PacketSocket::bind(&link).and_then(|socket| {
                    socket.set_qdisc_bypass(true)?;
                    Ok(socket)
                });
                let socket = match opened {
                    Ok(socket) => {
                        let _ = opened_tx.send(Ok(()));
                        socket
                    }
                    Err(error) => {
                        let _ = opened_tx.send(Err(io::Error::new(
                            error.kind(),
                            format!("opening a packet socket on {link}: {error}"),
                        )));
                        return Ok(());
                    }
                };
                let frames = SpoofedInitiations::new(target, seed);
                send_frames(&socket, frames, rate, &stop, &sent)
            })?
        };
        let flood = Self {
            stop,
            sent,
            started: Instant::now(),
            thread: Some(thread),
        };
        match opened_rx.recv() {
            Ok(Ok(())) => Ok(flood),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(io::Error::other("the flood thread ended before it started")),
        }
    }

    /// Frames sent so far.
    pub fn sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Stops the flood; what it sent, or why it stopped early.
    pub fn stop(mut self) -> io::Result<FloodReport> {
        self.finish()
    }

    fn finish(&mut self) -> io::Result<FloodReport> {
        self.stop.store(true, Ordering::Relaxed);
        let elapsed = self.started.elapsed();
        let ended = match self.thread.take().map(JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(io::Error::other("the flood thread panicked")),
            None => Ok(()),
        };
        ended.map(|()| FloodReport {
            sent: self.sent(),
            elapsed,
        })
    }
}

impl Drop for Flood {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}

fn random_seed() -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    getrandom::fill(&mut bytes).map_err(|error| io::Error::other(error.to_string()))?;
    Ok(u64::from_le_bytes(bytes))
}

/// Frames per batch: full batches unpaced, else what the rate sends in
/// [`PACED_INTERVAL`] (at least one).
fn batch_size(rate: FloodRate) -> usize {
    match rate {
        FloodRate::Unpaced => FULL_BATCH,
        FloodRate::PerSecond(per_second) => {
            let per_interval = f64::from(per_second) * PACED_INTERVAL.as_secs_f64();
            (per_interval.ceil() as usize).clamp(1, FULL_BATCH)
        }
    }
}

/// When the frame after `sent` frames is due, counted from `start`.
fn due(start: Instant, sent: u64, per_second: u32) -> Instant {
    start + Duration::from_secs_f64(sent as f64 / f64::from(per_second.max(1)))
}

fn send_frames(
    socket: &PacketSocket,
    mut frames: SpoofedInitiations,
    rate: FloodRate,
    stop: &AtomicBool,
    sent: &AtomicU64,
) -> io::Result<()> {
    let batch = batch_size(rate);
    let mut slots = vec![[0u8; INITIATION_FRAME_LEN]; batch];
    // Slots before `unsent` hold frames the link has not taken yet.
    let mut unsent = 0;
    let mut total: u64 = 0;
    let start = Instant::now();
    while !stop.load(Ordering::Relaxed) {
        if let FloodRate::PerSecond(per_second) = rate
            && let Some(wait) = due(start, total, per_second).checked_duration_since(Instant::now())
        {
            std::thread::sleep(wait);
        }
        for slot in &mut slots[unsent..] {
            frames.write_next(slot);
        }
        let taken = match mmsg::send_batch(socket.as_fd(), slots.iter().map(|slot| &slot[..])) {
            Ok(taken) => taken,
            Err(error) => match mmsg::send_refusal(&error) {
                Some(SendRefusal::BufferFull | SendRefusal::Dropped) => {
                    fjord_sys::poll::wait_writable(socket.as_fd(), REFUSED_WAIT);
                    0
                }
                None => return Err(error),
            },
        };
        // Frames not taken move to the front and go first next time.
        slots.rotate_left(taken);
        unsent = batch - taken;
        total += taken as u64;
        sent.store(total, Ordering::Relaxed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paced_batches_follow_the_rate() {
        assert_eq!(batch_size(FloodRate::Unpaced), FULL_BATCH);
        assert_eq!(batch_size(FloodRate::PerSecond(20_000)), 20);
        assert_eq!(batch_size(FloodRate::PerSecond(100)), 1);
        assert_eq!(batch_size(FloodRate::PerSecond(10_000_000)), FULL_BATCH);
        let start = Instant::now();
        assert_eq!(due(start, 20_000, 20_000), start + Duration::from_secs(1));
        assert_eq!(FloodRate::PerSecond(20_000).to_string(), "20000/s");
        assert_eq!(FloodRate::Unpaced.to_string(), "max");
    }
}
