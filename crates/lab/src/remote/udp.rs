//! RFC 2544 trials between two hosts: the controller's part of
//! [`crate::traffic::udp::ends`]. Per trial the receiving host's worker
//! listens (`udp-sink`), the sending host's worker offers (`udp-source`),
//! and this relays their lines: the sink's `warm` to the source, `sent`
//! to the sink once the source reported. The search itself
//! ([`ThroughputSearch`](crate::traffic::rfc2544::ThroughputSearch)) is
//! the namespaces' own, run through [`HostTrials`].

use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::process::{Child, ChildStdin};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::host::RemoteHost;
use super::quick::{decode, refused, stop_local};
use super::ssh::RemoteError;
use super::worker::READY;
use crate::traffic::rfc2544::TrialRunner;
use crate::traffic::udp::{
    Offer, ReceiverReport, SenderReport, Trial, TrialReport, ends, next_stream,
};

/// How long a sink may take to listen.
const READY_TIMEOUT: Duration = Duration::from_secs(15);
/// Past the trial's own time (offer, warm-up, drain), how long the lab
/// waits for both reports.
const TRIAL_GRACE: Duration = Duration::from_secs(30);

/// A search's trials from `sender` to `destination` on `receiver`.
pub struct HostTrials<'a> {
    pub sender: &'a RemoteHost,
    pub receiver: &'a RemoteHost,
    pub destination: SocketAddr,
}

/// A line (or the end) of one worker's output.
enum Said {
    Sink(String),
    Source(String),
    SinkEnded,
    SourceEnded,
}

/// Reads `output`'s lines into `said` as `line(text)` on a thread of
/// their own, then `end`.
fn forward(
    output: impl Read + Send + 'static,
    said: mpsc::Sender<Said>,
    line: fn(String) -> Said,
    end: Said,
) {
    std::thread::spawn(move || {
        for text in BufReader::new(output).lines() {
            let Ok(text) = text else { break };
            if said.send(line(text)).is_err() {
                return;
            }
        }
        let _ = said.send(end);
    });
}

/// What the two workers of a trial reported, as far as they got.
#[derive(Default)]
struct Reports {
    sent: Option<Result<SenderReport, String>>,
    received: Option<Result<ReceiverReport, String>>,
    sink_ended: bool,
    source_ended: bool,
}

/// Relays the sink's `warm` to the source and, once the source reported,
/// `sent` to the sink, until both reported, one ended without its report
/// (it failed, or its host is gone: its status and stderr say which) or
/// `deadline` passed.
fn relay(
    said: &mpsc::Receiver<Said>,
    sink_input: &mut Option<ChildStdin>,
    source_input: &mut Option<ChildStdin>,
    deadline: Instant,
) -> Reports {
    let mut reports = Reports::default();
    while reports.received.is_none() || reports.sent.is_none() {
        let left = deadline.saturating_duration_since(Instant::now());
        match said.recv_timeout(left) {
            Ok(Said::Sink(line)) if line == ends::WARM => tell(source_input, ends::WARM),
            Ok(Said::Sink(line)) => reports.received = Some(decode(&line)),
            Ok(Said::Source(line)) => {
                reports.sent = Some(decode(&line));
                tell(sink_input, ends::SENT);
            }
            Ok(Said::SinkEnded) => reports.sink_ended = true,
            Ok(Said::SourceEnded) => reports.source_ended = true,
            Err(_) => break,
        }
        if (reports.sink_ended && reports.received.is_none())
            || (reports.source_ended && reports.sent.is_none())
        {
            break;
        }
    }
    reports
}

/// Writes `line` to a worker's stdin; a worker already gone says why
/// through its own end.
fn tell(stdin: &mut Option<ChildStdin>, line: &str) {
    if let Some(input) = stdin {
        let _ = writeln!(input, "{line}").and_then(|()| input.flush());
    }
}

impl TrialRunner for HostTrials<'_> {
    type Error = RemoteError;

    fn run_trial(&self, trial: &Trial) -> Result<TrialReport, RemoteError> {
        let (sender, receiver) = (self.sender, self.receiver);
        let offer = ends::offer_text(&trial.offer).ok_or_else(|| {
            refused(
                sender,
                "udp-source",
                "bursts do not run across hosts".into(),
            )
        })?;
        let [frame_size] = trial.frames.as_slice() else {
            return Err(refused(
                sender,
                "udp-source",
                "only one frame size per trial runs across hosts".into(),
            ));
        };
        let (frame_size, stream) = (frame_size.to_string(), next_stream().to_string());
        let drain_ms = trial.drain.as_millis().to_string();
        let destination = self.destination.to_string();
        let trial_words = [
            "--offer",
            &offer,
            "--frame-size",
            &frame_size,
            "--stream",
            &stream,
            "--drain-ms",
            &drain_ms,
        ];
        let worker = |host: &RemoteHost, job: &'static str, address_flag: &'static str| {
            let mut words = vec![host.binary(), "lab", "worker", job, address_flag];
            words.push(&destination);
            words.extend(trial_words);
            host.stream(job, &words)
        };

        let (said_tx, said) = mpsc::channel();
        let mut sink = worker(receiver, "udp-sink", "--listen")?;
        let mut sink_input = sink.stdin.take();
        if let Some(output) = sink.stdout.take() {
            forward(output, said_tx.clone(), Said::Sink, Said::SinkEnded);
        }
        let ready = said.recv_timeout(READY_TIMEOUT);
        if !matches!(&ready, Ok(Said::Sink(line)) if line == READY) {
            drop(sink_input);
            return Err(ended(receiver, "udp-sink", sink, "ended without listening"));
        }
        let mut source = match worker(sender, "udp-source", "--to") {
            Ok(source) => source,
            Err(error) => {
                stop_local(sink);
                return Err(error);
            }
        };
        let mut source_input = source.stdin.take();
        if let Some(output) = source.stdout.take() {
            forward(output, said_tx, Said::Source, Said::SourceEnded);
        }

        let own_time = trial.offer.nominal_duration() + trial.warmup_timeout + trial.drain;
        let deadline = Instant::now() + own_time + TRIAL_GRACE;
        let reports = relay(&said, &mut sink_input, &mut source_input, deadline);
        drop((sink_input, source_input));
        let Reports {
            sent,
            received,
            sink_ended,
            source_ended,
        } = reports;
        match (sent, received) {
            (Some(Ok(sent)), Some(Ok(received))) => {
                sender
                    .connection()
                    .finish("udp-source", source.wait_with_output())?;
                receiver
                    .connection()
                    .finish("udp-sink", sink.wait_with_output())?;
                let target_frames_per_sec = match trial.offer {
                    Offer::Rate { frames_per_sec, .. } => Some(frames_per_sec),
                    _ => None,
                };
                Ok(TrialReport {
                    frames: trial.frames.clone(),
                    target_frames_per_sec,
                    sender: sent,
                    receiver: received,
                })
            }
            (sent, received) => {
                // The side that failed first explains the other's end.
                let source_failed = !matches!(sent, Some(Ok(_)));
                let why = match (sent, received) {
                    (Some(Err(why)), _) | (_, Some(Err(why))) => why,
                    _ => {
                        format!("no report in time (the trial's {own_time:?} and {TRIAL_GRACE:?})")
                    }
                };
                if source_failed && (source_ended || !sink_ended) {
                    stop_local(sink);
                    Err(ended(sender, "udp-source", source, &why))
                } else {
                    stop_local(source);
                    Err(ended(receiver, "udp-sink", sink, &why))
                }
            }
        }
    }
}

/// The error of worker `job` on `host` that failed: lost if its ssh
/// failed, else what it said (stopped first if it still runs, since a
/// session this run ends is not a lost host).
fn ended(host: &RemoteHost, job: &str, mut child: Child, detail: &str) -> RemoteError {
    if child.try_wait().ok().flatten().is_none() {
        stop_local(child);
        return refused(host, job, detail.to_string());
    }
    match host.connection().finish(job, child.wait_with_output()) {
        Err(error) => error,
        Ok(_) => refused(host, job, detail.to_string()),
    }
}
