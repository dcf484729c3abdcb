//! A trial's two ends apart, for the lab across hosts: the receiver (the
//! sink) in the lab's worker on one host, the sender (the source) in the
//! worker on the other. Same frames, pacing, warm-up and counting as
//! [`Trial::run`]; what its two threads share in one process crosses
//! through the controller instead, one line each way:
//!
//! ```text
//!   sink (receiver)           controller               source (sender)
//!   binds ─────── ready ───────▶ starts the source ─────▶ warm-up frames
//!   sees one ──── warm ────────▶ ──────── warm ─────────▶ offers the trial
//!   counts        ◀──────────── ◀─────── report ───────── finishes
//!   drains  ◀──── sent ───────── (the source's report)
//!   ──────────── report ───────▶
//! ```
//!
//! The drain starts when `sent` arrives, a little after the source
//! finished, so it errs long, never short. The two ends run on two
//! clocks: the sink measures no latency (its report has none) and
//! drains for the trial's fixed time alone.

use std::io::{self, BufRead};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::time::Duration;

use fjord_sys::thread::monotonic_nanos;

use super::receiver::{self, Listen};
use super::{Offer, ReceiverReport, SenderReport, Shared, Trial, io_error, join, sender};
use crate::traffic::TrafficError;
use crate::traffic::frame::IpVersion;

/// The sink saw a warm-up frame: the source may start (sink → source).
pub const WARM: &str = "warm";
/// The source finished offering: the sink drains, then reports.
pub const SENT: &str = "sent";

/// How often the sink looks whether a warm-up frame arrived.
const WARM_POLL: Duration = Duration::from_millis(1);

/// What a sink tells the controller as the trial goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SinkEvent {
    /// Bound and listening: the source may start.
    Ready,
    /// A warm-up frame arrived: the source may offer.
    Warm,
}

/// Receives `trial` (stream `stream`) on `bind`: tells `event` when it is
/// ready and when it saw a warm-up frame, and drains once `control`
/// reads [`SENT`] (its end, before that, aborts the trial).
pub fn sink(
    trial: &Trial,
    bind: SocketAddr,
    stream: u16,
    control: impl BufRead + Send + 'static,
    mut event: impl FnMut(SinkEvent) -> io::Result<()>,
) -> Result<ReceiverReport, TrafficError> {
    trial.validate(IpVersion::of(&bind))?;
    let shared = Arc::new(Shared::default());
    let listen = Listen {
        bind,
        frames: trial.frames.clone(),
        stream,
        drain: trial.drain,
        give_up_after: trial.give_up_after(),
        realtime_priority: trial.receiver_priority(),
        one_clock: false,
    };
    let (ready_tx, ready_rx) = mpsc::channel();
    let receiver = {
        let shared = shared.clone();
        std::thread::Builder::new()
            .name("udp-sink".into())
            .spawn(move || {
                let result = receiver::receive(&listen, &shared, ready_tx);
                if result.is_err() {
                    shared.abort.store(true, Ordering::Relaxed);
                }
                result
            })
            .map_err(|source| io_error("start the UDP receiver thread", source))?
    };
    if ready_rx.recv_timeout(Duration::from_secs(10)).is_err() {
        shared.abort.store(true, Ordering::Relaxed);
        return Err(join("UDP receiver", receiver).err().unwrap_or_else(|| {
            io_error("UDP receiver", io::Error::other("ended before binding"))
        }));
    }
    follow(control, shared.clone(), |shared, line| {
        if line == SENT {
            shared
                .sender_done_ns
                .store(monotonic_nanos().max(1), Ordering::Release);
            return true;
        }
        false
    })?;
    let told = event(SinkEvent::Ready).and_then(|()| {
        while !shared.warmed_up.load(Ordering::Acquire) {
            if receiver.is_finished() {
                return Ok(());
            }
            std::thread::sleep(WARM_POLL);
        }
        event(SinkEvent::Warm)
    });
    if let Err(source) = told {
        shared.abort.store(true, Ordering::Relaxed);
        let _ = join("UDP receiver", receiver);
        return Err(io_error("tell the controller", source));
    }
    join("UDP receiver", receiver)
}

/// Sends `trial` (stream `stream`) to `destination`, warming up until
/// `control` reads [`WARM`] (its end before that aborts; after it, the
/// trial runs its bounded course).
pub fn source(
    trial: &Trial,
    destination: SocketAddr,
    stream: u16,
    control: impl BufRead + Send + 'static,
) -> Result<SenderReport, TrafficError> {
    trial.validate(IpVersion::of(&destination))?;
    let shared = Arc::new(Shared::default());
    follow(control, shared.clone(), |shared, line| {
        let warm = line == WARM;
        if warm {
            shared.warmed_up.store(true, Ordering::Release);
        }
        warm
    })?;
    let result = sender::send(destination, None, trial, stream, &shared);
    result.map_err(|source| io_error("UDP sender", source))
}

/// Reads `control`'s lines on a thread of their own, handing each to
/// `handle` until it returns true; an end of input (or an error) before
/// that aborts the trial: the controller is gone.
fn follow(
    control: impl BufRead + Send + 'static,
    shared: Arc<Shared>,
    handle: impl Fn(&Shared, &str) -> bool + Send + 'static,
) -> Result<(), TrafficError> {
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || {
            for line in control.lines() {
                let Ok(line) = line else { break };
                if handle(&shared, line.trim()) {
                    return;
                }
            }
            shared.abort.store(true, Ordering::Relaxed);
        })
        .map(drop)
        .map_err(|source| io_error("start the control thread", source))
}

/// The `--offer` words of a worker for `offer`, read back by
/// [`parse_offer`]: `rate:FRAMES_PER_SEC:MILLISECONDS` or
/// `flood:MILLISECONDS` (bursts do not cross hosts).
pub fn offer_text(offer: &Offer) -> Option<String> {
    match *offer {
        Offer::Rate {
            frames_per_sec,
            duration,
        } => Some(format!("rate:{frames_per_sec}:{}", duration.as_millis())),
        Offer::Flood { duration } => Some(format!("flood:{}", duration.as_millis())),
        Offer::Burst { .. } => None,
    }
}

/// Reads [`offer_text`]'s words.
pub fn parse_offer(text: &str) -> Result<Offer, String> {
    let millis = |value: &str| {
        value
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| format!("{value:?} is not a number of milliseconds"))
    };
    let parts: Vec<&str> = text.split(':').collect();
    match parts.as_slice() {
        ["rate", rate, duration] => Ok(Offer::Rate {
            frames_per_sec: rate
                .parse()
                .map_err(|_| format!("{rate:?} is not a rate in frames/s"))?,
            duration: millis(duration)?,
        }),
        ["flood", duration] => Ok(Offer::Flood {
            duration: millis(duration)?,
        }),
        _ => Err(format!(
            "{text:?}: an offer is rate:FRAMES_PER_SEC:MS or flood:MS"
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufReader, Write};
    use std::net::UdpSocket;

    use super::*;
    use crate::traffic::frame::FrameSizes;

    #[test]
    fn offers_read_back_as_written() {
        for offer in [
            Offer::Rate {
                frames_per_sec: 12_345.5,
                duration: Duration::from_millis(1_000),
            },
            Offer::Flood {
                duration: Duration::from_secs(1),
            },
        ] {
            assert_eq!(parse_offer(&offer_text(&offer).unwrap()), Ok(offer));
        }
        assert_eq!(offer_text(&Offer::Burst { frames: 10 }), None);
        assert!(parse_offer("rate:fast:10").is_err());
        assert!(parse_offer("burst:10").is_err());
    }

    /// A pipe's read end as a line reader, and its write end.
    fn pipe() -> (BufReader<std::io::PipeReader>, std::io::PipeWriter) {
        let (reader, writer) = std::io::pipe().unwrap();
        (BufReader::new(reader), writer)
    }

    #[test]
    fn a_sink_and_a_source_apart_count_a_paced_trial_on_loopback() {
        let port = UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let destination = SocketAddr::from(([127, 0, 0, 1], port));
        let mut trial = Trial::rate(FrameSizes::fixed(64), 2_000.0, Duration::from_millis(200));
        trial.drain = Duration::from_millis(50);
        trial.realtime_priority = None;
        let (sink_control, mut to_sink) = pipe();
        let (source_control, mut to_source) = pipe();
        let (events_tx, events) = mpsc::channel();
        let sink = {
            let trial = trial.clone();
            std::thread::spawn(move || {
                sink(&trial, destination, 9, sink_control, |event| {
                    events_tx.send(event).map_err(io::Error::other)
                })
            })
        };
        assert_eq!(events.recv().unwrap(), SinkEvent::Ready);
        let source = std::thread::spawn(move || source(&trial, destination, 9, source_control));
        // The controller's part: relay `warm`, then say `sent`.
        assert_eq!(events.recv().unwrap(), SinkEvent::Warm);
        writeln!(to_source, "{WARM}").unwrap();
        let sent = source.join().unwrap().unwrap();
        writeln!(to_sink, "{SENT}").unwrap();
        let received = sink.join().unwrap().unwrap();
        assert_eq!(sent.scheduled, 400);
        assert_eq!(received.received, sent.sent);
        assert_eq!(received.latency.len(), 0, "two clocks: no latency");
    }

    #[test]
    fn a_source_whose_controller_is_gone_gives_up() {
        let destination = SocketAddr::from(([127, 0, 0, 1], 9));
        let trial = Trial::rate(FrameSizes::fixed(64), 100.0, Duration::from_millis(100));
        let (control, to_source) = pipe();
        drop(to_source);
        assert!(source(&trial, destination, 3, control).is_err());
    }
}
