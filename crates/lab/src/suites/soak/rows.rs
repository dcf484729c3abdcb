//! The soak's rows, from what it saw ([`Record`]): memory per tenth as
//! the run goes, then its growth, the transfers, restarts, rekeys and the
//! counter balance at the end. See the module above for what each means.

use std::time::{Duration, Instant};

use super::counters::Balance;
use super::load::{Outcome, Transfer};
use super::memory::{Sampler, growth_percent, peak};
use super::{CHECKPOINTS, Group, Plan, Record, STREAMS};
use crate::measure::Row;
use crate::results::{Bulk, Extra, Flood, Measurement, Memory, Ping, Soak};
use crate::systems::wireguard::End;

const SUITE: &str = "soak";
const MIB: f64 = 1_048_576.0;

fn minutes(duration: Duration) -> f64 {
    // Two decimals: a short run's tenths are seconds apart.
    (duration.as_secs_f64() / 60.0 * 100.0).round() / 100.0
}

fn since(at: Instant, record: &Record) -> f64 {
    minutes(at.saturating_duration_since(record.start))
}

/// Transfers that ended in `[from, to)`.
fn ended_between(record: &Record, from: Instant, to: Instant) -> impl Iterator<Item = &Transfer> {
    record
        .transfers
        .iter()
        .filter(move |transfer| transfer.ended >= from && transfer.ended < to)
}

/// Bits per second carried by the transfers that ended in `[from, to)`.
fn carried(record: &Record, from: Instant, to: Instant) -> f64 {
    let bits: f64 = ended_between(record, from, to)
        .map(|transfer| transfer.bytes as f64 * 8.0)
        .sum();
    bits / to.saturating_duration_since(from).as_secs_f64().max(1e-9)
}

/// The soak so far, as the rows read it.
pub struct Soaked<'a> {
    pub name: &'a str,
    pub plan: &'a Plan,
    /// The groups of processes whose memory is sampled.
    pub groups: &'a [Group],
    pub sampler: &'a Sampler,
    pub record: &'a Record,
}

impl Soaked<'_> {
    /// The rows of the tenth that just ended (the last checkpoint), one per
    /// group.
    pub fn tenth(&self) -> Vec<Measurement> {
        let count = self.record.checkpoints.len();
        let Some(&to) = self.record.checkpoints.last() else {
            return Vec::new();
        };
        let from = count.checked_sub(2).map_or(self.record.start, |previous| {
            self.record.checkpoints[previous]
        });
        let minute = minutes(self.plan.duration / CHECKPOINTS * count as u32);
        let rate = carried(self.record, from, to);
        let verified =
            ended_between(self.record, from, to).all(|t| t.outcome != Outcome::DigestMismatch);
        self.groups
            .iter()
            .enumerate()
            .map(|(index, group)| {
                let sizes = self.sampler.between(index, from, to);
                let row = Row::new(SUITE, "rss_under_load", self.name, "bytes")
                    .param("minute", minute)
                    .param("side", group.label)
                    .param("streams", STREAMS);
                let extra = Extra {
                    bulk: Some(Bulk {
                        verified: Some(verified),
                        ..Bulk::default()
                    }),
                    memory: Some(Memory {
                        peak_bytes: Some(peak(&sizes)),
                        bits_per_sec: Some(rate),
                        ..Memory::default()
                    }),
                    ..Extra::default()
                };
                let failure = sizes
                    .is_empty()
                    .then(|| "no resident size read in this tenth".to_string());
                let mut measurement = row.concluded(sizes, extra, failure);
                let restarted: Vec<String> = self
                    .record
                    .restarts
                    .iter()
                    .filter(|restart| {
                        group.restarted && restart.stopped >= from && restart.stopped < to
                    })
                    .map(|restart| format!("{:.1} min", since(restart.stopped, self.record)))
                    .collect();
                if measurement.note.is_none() && !restarted.is_empty() {
                    measurement.note = Some(format!("restarted at {}", restarted.join(", ")));
                }
                measurement
            })
            .collect()
    }

    /// The rows at the end of the soak.
    pub fn summary(&self) -> Vec<Measurement> {
        let mut rows: Vec<Measurement> = self
            .groups
            .iter()
            .enumerate()
            .map(|(index, group)| {
                growth(
                    self.name,
                    self.plan,
                    index,
                    group,
                    self.sampler,
                    self.record,
                )
            })
            .collect();
        rows.push(transfers(self.name, self.plan, self.record));
        if self.record.ledger.is_some() {
            rows.push(restarts(self.name, self.record));
        }
        if let Some(row) = rekeys(self.name, self.plan, self.record) {
            rows.push(row);
        }
        if let Some(ledger) = &self.record.ledger {
            for sender in [End::Left, End::Right] {
                let balance = ledger.balance(sender, self.record.start);
                let went_back = ledger.went_back(sender, self.record.start);
                let receiver = match sender {
                    End::Left => End::Right,
                    End::Right => End::Left,
                };
                let drops = match ledger.drops(receiver) {
                    None => format!("the {} side keeps no drop counters", receiver.name()),
                    Some(drops) if drops.is_empty() => {
                        format!("the {} side dropped nothing", receiver.name())
                    }
                    Some(drops) => format!(
                        "the {} side's drops since it first started: {}",
                        receiver.name(),
                        drops
                            .iter()
                            .map(|(reason, count)| format!("{reason} {count}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                };
                rows.push(balance_row(
                    self.name,
                    sender,
                    &balance,
                    &went_back,
                    &drops,
                    self.record,
                ));
            }
        }
        rows
    }
}

/// The memory figures of a row of this suite.
fn memory_of(row: &Measurement) -> Option<&Memory> {
    row.extra.memory.as_ref()
}

/// The progress line of a checkpoint, from its rows and the record.
pub fn checkpoint_line(name: &str, rows: &[Measurement], record: &Record, plan: &Plan) -> String {
    let minute = minutes(plan.duration / CHECKPOINTS * record.checkpoints.len() as u32);
    let memory: Vec<String> = rows
        .iter()
        .map(|row| {
            let side = row
                .params
                .get("side")
                .and_then(|v| v.as_str())
                .unwrap_or("?");
            format!(
                "{side} {:.1} MiB (peak {:.1})",
                row.median / MIB,
                memory_of(row).and_then(|m| m.peak_bytes).unwrap_or(0.0) / MIB
            )
        })
        .collect();
    let rate = rows
        .first()
        .and_then(|row| memory_of(row)?.bits_per_sec)
        .unwrap_or(0.0);
    let tally = Tally::of(&record.transfers, record);
    let mut line = format!(
        "{name}: soak: {minute} of {} min: {}; {:.2} Gbit/s; {} transfers, {} digest mismatches, {} failed",
        minutes(plan.duration),
        memory.join(", "),
        rate / 1e9,
        tally.transfers,
        tally.mismatches,
        tally.failed.len()
    );
    if let Some(ledger) = &record.ledger {
        let handshakes = ledger
            .handshakes()
            .map_or_else(|| "n/a".to_string(), |count| count.to_string());
        let checked: Vec<String> = [End::Left, End::Right]
            .map(|sender| {
                let balance = ledger.balance(sender, record.start);
                format!(
                    "{} {}/{}",
                    direction(sender),
                    balance.intervals - balance.unexplained.len() as u64,
                    balance.intervals
                )
            })
            .to_vec();
        line.push_str(&format!(
            "; {} restarts; {handshakes} handshakes; counters balanced: {}",
            record.restarts.len(),
            checked.join(", ")
        ));
    }
    line
}

fn direction(sender: End) -> &'static str {
    match sender {
        End::Left => "left → right",
        End::Right => "right → left",
    }
}

/// The transfers, sorted by how they ended.
struct Tally<'a> {
    transfers: u64,
    mismatches: u64,
    /// Each failure, and whether it straddled a restart.
    failed: Vec<(&'a Transfer, bool)>,
    bytes: u64,
}

impl<'a> Tally<'a> {
    fn of(transfers: &'a [Transfer], record: &Record) -> Self {
        let straddled = |transfer: &Transfer| {
            record.restarts.iter().any(|restart| {
                transfer.started <= restart.settled && transfer.ended >= restart.stopped
            })
        };
        Self {
            transfers: transfers.len() as u64,
            mismatches: transfers
                .iter()
                .filter(|t| t.outcome == Outcome::DigestMismatch)
                .count() as u64,
            failed: transfers
                .iter()
                .filter(|t| matches!(t.outcome, Outcome::Failed(_)))
                .map(|t| (t, straddled(t)))
                .collect(),
            bytes: transfers.iter().map(|t| t.bytes).sum(),
        }
    }
}

fn ran_for(record: &Record) -> Duration {
    record.checkpoints.last().map_or(Duration::ZERO, |end| {
        end.saturating_duration_since(record.start)
    })
}

/// Growth of `group` from the peak of its first minute (from its latest
/// start, for the restarted side) to the peak of the last tenth.
fn growth(
    name: &str,
    plan: &Plan,
    index: usize,
    group: &Group,
    sampler: &Sampler,
    record: &Record,
) -> Measurement {
    let row = Row::new(SUITE, "rss_growth", name, "percent")
        .param("minutes", minutes(plan.duration))
        .param("side", group.label)
        .param("streams", STREAMS);
    let Some(&end) = record.checkpoints.last() else {
        return row.failed("the soak ended before its first checkpoint");
    };
    let latest_restart = record
        .restarts
        .iter()
        .rev()
        .find(|restart| restart.back.is_ok())
        .filter(|_| group.restarted);
    let born = latest_restart.map_or(record.start, |restart| restart.stopped);
    let warmed = born + plan.warm_up;
    let last_tenth = end
        .checked_sub(plan.duration / CHECKPOINTS)
        .unwrap_or(record.start);
    let first = peak(&sampler.between(index, born, warmed));
    let last = peak(&sampler.between(index, last_tenth.max(warmed), end));
    let Some(percent) = growth_percent(first, last).filter(|_| last > 0.0) else {
        return row.failed(format!(
            "no resident size read in its first {:.0} s or after them",
            plan.warm_up.as_secs_f64()
        ));
    };
    let extra = Extra {
        bulk: Some(Bulk {
            verified: Some(Tally::of(&record.transfers, record).mismatches == 0),
            ..Bulk::default()
        }),
        memory: Some(Memory {
            peak_bytes: Some(peak(&sampler.between(index, warmed, end))),
            bits_per_sec: Some(carried(record, record.start, end)),
            first_peak_bytes: Some(first),
            last_peak_bytes: Some(last),
        }),
        ..Extra::default()
    };
    let mut measurement = row.concluded(vec![percent], extra, record.broken.clone());
    if let Some(restart) = latest_restart
        && measurement.note.is_none()
    {
        measurement.note = Some(format!(
            "from its restart at {:.1} min",
            since(restart.stopped, record)
        ));
    }
    measurement
}

fn transfers(name: &str, plan: &Plan, record: &Record) -> Measurement {
    let tally = Tally::of(&record.transfers, record);
    let row = Row::new(SUITE, "soak_transfers", name, "transfers")
        .param("minutes", minutes(plan.duration))
        .param("streams", STREAMS);
    let extra = Extra {
        bulk: Some(Bulk {
            bytes: Some(tally.bytes),
            verified: Some(tally.mismatches == 0 && tally.transfers > 0),
            ..Bulk::default()
        }),
        memory: Some(Memory {
            bits_per_sec: Some(carried(
                record,
                record.start,
                record.start + ran_for(record),
            )),
            ..Memory::default()
        }),
        soak: Some(Soak {
            transfers: Some(tally.transfers),
            digest_mismatches: Some(tally.mismatches),
            failed_transfers: Some(tally.failed.len() as u64),
            ..Soak::default()
        }),
        ..Extra::default()
    };
    let describe = |(transfer, straddled): &(&Transfer, bool)| {
        let why = match &transfer.outcome {
            Outcome::Failed(why) => why.as_str(),
            _ => "",
        };
        let place = if *straddled {
            "straddled a restart"
        } else {
            "no restart meanwhile"
        };
        format!(
            "{:.1}–{:.1} min ({place}): {why}",
            since(transfer.started, record),
            since(transfer.ended, record)
        )
    };
    let unexplained: Vec<String> = tally
        .failed
        .iter()
        .filter(|(_, straddled)| !straddled)
        .map(describe)
        .collect();
    let mut problems = Vec::new();
    if tally.mismatches > 0 {
        problems.push(format!("{} digest mismatches", tally.mismatches));
    }
    if tally.transfers == 0 {
        problems.push("no transfer ran".to_string());
    }
    if !unexplained.is_empty() {
        problems.push(format!(
            "{} failed without a restart: {}",
            unexplained.len(),
            unexplained.join("; ")
        ));
    }
    problems.extend(record.broken.clone());
    let failure = (!problems.is_empty()).then(|| problems.join("; "));
    let mut measurement = row.concluded(vec![tally.transfers as f64], extra, failure);
    if measurement.note.is_none() && !tally.failed.is_empty() {
        let failures: Vec<String> = tally.failed.iter().map(describe).collect();
        measurement.note = Some(format!(
            "{} failed and were followed by the next transfer: {}",
            failures.len(),
            failures.join("; ")
        ));
    }
    measurement
}

fn restarts(name: &str, record: &Record) -> Measurement {
    let row = Row::new(SUITE, "soak_restarts", name, "s").param("side", "right");
    let back: Vec<f64> = record
        .restarts
        .iter()
        .filter_map(|restart| restart.back.as_ref().ok())
        .map(Duration::as_secs_f64)
        .collect();
    let extra = Extra {
        ping: back.iter().copied().reduce(f64::max).map(|max| Ping {
            max: Some(max),
            ..Ping::default()
        }),
        soak: Some(Soak {
            restarts: Some(record.restarts.len() as u64),
            ..Soak::default()
        }),
        ..Extra::default()
    };
    let failure = record
        .restarts
        .iter()
        .find_map(|restart| restart.back.as_ref().err().cloned())
        .or_else(|| {
            record
                .restarts
                .is_empty()
                .then(|| "no restart came due".to_string())
        });
    let mut measurement = row.concluded(back, extra, failure);
    if measurement.note.is_none() {
        let under_load = record.restarts.iter().filter(|r| r.under_load).count();
        measurement.note = Some(format!(
            "{under_load} of {} restarts stopped the side while a transfer was under way",
            record.restarts.len()
        ));
    }
    measurement
}

/// Rekeys: handshakes less one per restart; only where both sides count
/// the initiations they computed.
fn rekeys(name: &str, plan: &Plan, record: &Record) -> Option<Measurement> {
    let handshakes = record.ledger.as_ref()?.handshakes()?;
    let rekey_every = record.rekey_every?;
    let restarts = record.restarts.iter().filter(|r| r.back.is_ok()).count() as u64;
    let rekeys = handshakes.saturating_sub(restarts);
    let row = Row::new(SUITE, "soak_rekeys", name, "rekeys")
        .param(
            "rekey_every_secs",
            (rekey_every.as_secs_f64() * 100.0).round() / 100.0,
        )
        .param("minutes", minutes(plan.duration));
    let extra = Extra {
        soak: Some(Soak {
            restarts: Some(restarts),
            ..Soak::default()
        }),
        flood: Some(Flood {
            initiations_computed: Some(handshakes),
            ..Flood::default()
        }),
        ..Extra::default()
    };
    let mut measurement = row.concluded(vec![rekeys as f64], extra, None);
    // A restart starts the sessions anew, and their rekey clock with them.
    let mut lives = vec![record.start];
    lives.extend(
        record
            .restarts
            .iter()
            .filter(|restart| restart.back.is_ok())
            .map(|restart| restart.stopped),
    );
    lives.push(record.start + ran_for(record));
    let expected: f64 = lives
        .windows(2)
        .map(|life| {
            let length = life[1].saturating_duration_since(life[0]);
            (length.as_secs_f64() / rekey_every.as_secs_f64()).floor()
        })
        .sum();
    measurement.note = Some(format!(
        "{handshakes} handshakes by the two sides' counts of initiations computed, less one per restart; about {expected:.0} expected at one every {:.1} s of a session's life, which each restart starts anew",
        rekey_every.as_secs_f64()
    ));
    Some(measurement)
}

fn balance_row(
    name: &str,
    sender: End,
    balance: &Balance,
    went_back: &[String],
    drops: &str,
    record: &Record,
) -> Measurement {
    let row =
        Row::new(SUITE, "counter_balance", name, "bytes").param("direction", direction(sender));
    let extra = Extra {
        soak: Some(Soak {
            sent_bytes: Some(balance.sent_bytes),
            received_bytes: Some(balance.received_bytes),
            dropped_datagrams: Some(balance.lost_datagrams),
            intervals: Some(balance.intervals),
            unexplained_intervals: Some(balance.unexplained.len() as u64),
            ..Soak::default()
        }),
        ..Extra::default()
    };
    let mut problems = Vec::new();
    if balance.intervals == 0 {
        problems.push("no interval between two settled readings".to_string());
    }
    if !balance.unexplained.is_empty() {
        problems.push(format!(
            "not explained by drops: {}",
            balance.unexplained.join("; ")
        ));
    }
    if !went_back.is_empty() {
        problems.push(format!(
            "the {} side's counters went down: {}",
            sender.name(),
            went_back.join("; ")
        ));
    }
    let failure = (!problems.is_empty()).then(|| problems.join("; "));
    let missing = balance.sent_bytes as f64 - balance.received_bytes as f64;
    let mut measurement = row.concluded(vec![missing], extra, failure);
    let mut notes = vec![
        drops.to_string(),
        format!(
            "{} intervals not checked ({:.1} s: across a restart, or a reading that did not settle)",
            balance.unchecked_intervals,
            balance.unchecked.as_secs_f64()
        ),
    ];
    notes.extend(
        record
            .reading_errors
            .iter()
            .map(|error| format!("reading failed at {error}")),
    );
    measurement.add_note(notes.join("; "));
    measurement
}
