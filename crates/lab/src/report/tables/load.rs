//! Tables of the suites that load one responder: handshake floods
//! (attack) and many peers (peers), each figure beside the same system's
//! unloaded one rather than bare's.

use super::{Table, caption, grid, median_figure};
use crate::report::format;
use crate::report::sections::{MISSING, Row, Section};
use crate::results::{Measurement, MeasurementStatus};

/// Rows by flood. Throughput carries its ratio to the same system's
/// transfer without a flood; handshake work is per second of the
/// transfer, beside the rate the flood was sent at.
pub(super) fn flood_table(section: &Section, title: String) -> Table {
    let per_second = |count: Option<u64>, m: &Measurement| match (
        count,
        m.extra.flood.as_ref().and_then(|f| f.window_secs),
    ) {
        (Some(count), Some(secs)) if secs > 0.0 => {
            format!("{}/s", format::thousands(count as f64 / secs))
        }
        _ => "n/a".to_string(),
    };
    let cell = |row: &Row, index: usize, _: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        if m.status != MeasurementStatus::Ok {
            return median_figure(m);
        }
        match section.test {
            "flood_throughput" => match m.extra.flood.as_ref().and_then(|f| f.no_flood_ratio) {
                Some(ratio) => format!("{} ({} no flood)", median_figure(m), format::ratio(ratio)),
                None => median_figure(m),
            },
            "flood_handshakes" => {
                let sent = m
                    .extra
                    .flood
                    .as_ref()
                    .and_then(|f| f.flood_sent_per_sec)
                    .map_or_else(
                        || "n/a".to_string(),
                        |rate| format!("{}/s", format::thousands(rate)),
                    );
                format!(
                    "{}/s cookie · {} DH · {} dropped unread (sent {sent})",
                    format::thousands(m.median),
                    per_second(
                        m.extra.flood.as_ref().and_then(|f| f.initiations_computed),
                        m
                    ),
                    per_second(m.extra.flood.as_ref().and_then(|f| f.socket_drops), m),
                )
            }
            _ => median_figure(m),
        }
    };
    let remark = match section.test {
        "flood_throughput" => vec![
            "bare: the same flood at a UDP socket nobody reads while a bare transfer runs; \
             its ratio to no flood is what the machine itself keeps, the most a tunnel can"
                .to_string(),
        ],
        "flood_handshakes" => vec![
            "cookie = cookie replies to spoofed sources, counted where they arrived; \
             DH = initiations read with Diffie-Hellman work, by the responder's own count \
             (n/a: it keeps none); dropped unread = at the responder's full UDP socket"
                .to_string(),
        ],
        "restart_recovery" => vec![
            "from starting the restarted side (its daemon's start and configuration included) \
             to the first UDP echo through the tunnel"
                .to_string(),
        ],
        _ => Vec::new(),
    };
    grid(section, title, caption(section, &remark), &[], &[""], &cell)
}

/// Rows by number of peers. Each figure carries its ratio to the same
/// system's figure with one peer (the goal is 0.9 or better at 1,000);
/// frame rates also the peer emulator's own ceiling, memory the cost per
/// peer.
pub(super) fn peers_table(section: &Section, title: String) -> Table {
    let zero_loss = section.test == "peers_zero_loss";
    let one_peer = |m: &Measurement| match m.extra.peers.as_ref().and_then(|p| p.one_peer_ratio) {
        Some(ratio) if m.status == MeasurementStatus::Ok => {
            format!("{} ({} 1 peer)", median_figure(m), format::ratio(ratio))
        }
        _ => median_figure(m),
    };
    // The one-peer row, for ratios the record does not hold.
    let one_peer_row = section.rows.iter().find(|row| row.x() == Some(1.0));
    let cell = |row: &Row, index: usize, column: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        match (section.test, column) {
            ("peers_zero_loss", 1) => match cpu_micros_per_frame(m) {
                Some(micros) => {
                    let reference = one_peer_row
                        .and_then(|one| one.cells[index])
                        .and_then(cpu_micros_per_frame)
                        .filter(|reference| *reference > 0.0);
                    match reference {
                        Some(reference) => format!(
                            "{} µs ({})",
                            format::plain(micros),
                            format::ratio(micros / reference)
                        ),
                        None => format!("{} µs", format::plain(micros)),
                    }
                }
                None => MISSING.to_string(),
            },
            ("peers_zero_loss", 2) => m
                .extra
                .peers
                .as_ref()
                .and_then(|p| p.emulator_ceiling_fps)
                .map_or_else(
                    || MISSING.to_string(),
                    |fps| format!("{} fps", format::thousands(fps)),
                ),
            ("peers_memory", _) => match m.extra.peers.as_ref().and_then(|p| p.per_peer_bytes) {
                Some(bytes) if m.status == MeasurementStatus::Ok => format!(
                    "{} · {}/peer",
                    median_figure(m),
                    format::quantity(bytes, "bytes")
                ),
                _ => median_figure(m),
            },
            ("peers_tcp", _) => {
                let mut text = one_peer(m);
                if let Some(responder) = m.extra.cost.as_ref().and_then(|c| c.cpu_seconds_per_gbit)
                {
                    text.push_str(&format!(" · {} s/Gbit", format::plain(responder)));
                    let reference = one_peer_row
                        .and_then(|one| one.cells[index])
                        .and_then(|one| {
                            one.extra.cost.as_ref().and_then(|c| c.cpu_seconds_per_gbit)
                        })
                        .filter(|reference| *reference > 0.0);
                    if let Some(reference) = reference {
                        text.push_str(&format!(" ({})", format::ratio(responder / reference)));
                    }
                }
                if let Some(emulator) = m
                    .extra
                    .peers
                    .as_ref()
                    .and_then(|p| p.emulator_cpu_seconds_per_gbit)
                {
                    text.push_str(&format!(" (emulator {})", format::plain(emulator)));
                }
                text
            }
            _ => one_peer(m),
        }
    };
    let remark = match section.test {
        "peers_zero_loss" => vec![
            "(× 1 peer) = the figure over the same system's with one peer, same run; goal: \
             0.9× or better at 1,000 peers · the frames form the same 1,000 flows at every \
             peer count · CPU/frame = the responder's CPU time over the whole search per \
             frame received in its trials (which a busy machine moves far less than a rate; \
             in brackets against one peer) · emulator alone = frames the peer emulator seals \
             and sends per second of its own CPU time (same frames, same peers, into a \
             sink): the generator's ceiling on one core"
                .to_string(),
        ],
        "peers_memory" => vec![
            "the responder's resident size after the frame-rate searches · per peer: \
             (that − with one peer) ÷ (peers − 1)"
                .to_string(),
        ],
        _ => vec![
            "the responder has 100 peers; each pair of transfers sends the same flows through \
             one of them (peers: 1), then spread over all, back to back · (× 1 peer) = the \
             median of the pairs' ratios · s/Gbit = the responder's CPU time per Gbit carried, \
             in brackets against one peer (which a busy machine moves far less than a rate; \
             emulator: the peer emulator's, no figure of the system)"
                .to_string(),
        ],
    };
    let columns: &[&str] = if zero_loss {
        &["frames/s", "CPU/frame", "emulator alone"]
    } else {
        &[""]
    };
    grid(
        section,
        title,
        caption(section, &remark),
        &[],
        columns,
        &cell,
    )
}

/// A search's CPU time (of the system's processes) per frame received
/// in its trials, in µs.
fn cpu_micros_per_frame(m: &Measurement) -> Option<f64> {
    let cpu = m.extra.cost.as_ref()?.cpu_seconds?;
    let received: u64 = m
        .extra
        .frame_rate
        .as_ref()?
        .trials
        .as_ref()?
        .iter()
        .map(|t| t.received)
        .sum();
    (received > 0 && m.status == MeasurementStatus::Ok).then(|| cpu / received as f64 * 1e6)
}

/// Beside the handshake work: what each responder refused during the
/// flooded transfers, by reason, per second, by its own count (`n/a`
/// where it keeps none); only when some system keeps one.
pub(super) fn drops_table(section: &Section) -> Option<Table> {
    let cells = || {
        section
            .rows
            .iter()
            .flat_map(|row| row.cells.iter().flatten())
    };
    if section.test != "flood_handshakes"
        || !cells().any(|m| m.extra.flood.as_ref().is_some_and(|f| f.drops.is_some()))
    {
        return None;
    }
    let cell = |row: &Row, index: usize, _: usize| {
        let Some(m) = row.cells[index] else {
            return MISSING.to_string();
        };
        let flood = m.extra.flood.as_ref();
        let (Some(drops), Some(secs)) = (
            flood.and_then(|f| f.drops.as_ref()),
            flood.and_then(|f| f.window_secs),
        ) else {
            return "n/a".to_string();
        };
        let mut counted: Vec<_> = drops.0.nonzero().collect();
        if counted.is_empty() || secs <= 0.0 {
            return "none".to_string();
        }
        counted.sort_by_key(|&(_, count)| std::cmp::Reverse(count));
        counted
            .iter()
            .map(|(reason, count)| {
                format!(
                    "{} {}/s",
                    reason.name(),
                    format::thousands(*count as f64 / secs)
                )
            })
            .collect::<Vec<_>>()
            .join(" · ")
    };
    let remark = ["by reason, as `fjord show` names them, per second of the flooded                    transfers, by the responder's own count (n/a: it keeps none)"
        .to_string()];
    Some(grid(
        section,
        "Datagrams refused by the responder during the flood".to_string(),
        caption(section, &remark),
        &[],
        &[""],
        &cell,
    ))
}
