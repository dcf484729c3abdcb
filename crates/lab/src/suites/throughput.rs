//! `throughput`: RFC 2544 zero-loss frame rates by frame size in both
//! directions, IMIX, and the receive rate under overload.

use std::net::SocketAddr;
use std::time::Duration;

use super::Context;
use crate::measure::{CpuCharge, Row, add_cpu, charged};
use crate::results::Measurement;
use crate::traffic::frame::{ETHERNET_FRAMING_BYTES, FrameSizes};
use crate::traffic::imix::Imix;
use crate::traffic::rfc2544::{ThroughputResult, ThroughputSearch, overload_receive_rate};
use crate::traffic::udp::UdpPath;
use crate::traffic::udp_measurements::{
    imix_measurement, overload_measurement, throughput_measurement,
};

/// RFC 2544's Ethernet frame sizes.
pub const FRAME_SIZES: [usize; 7] = [64, 128, 256, 512, 1024, 1280, 1518];
const OVERLOAD_SIZES: [usize; 2] = [64, 1518];
const UDP_PORT: u16 = 6001;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    LeftToRight,
    RightToLeft,
}

impl Direction {
    pub fn name(self) -> &'static str {
        match self {
            Direction::LeftToRight => "left_to_right",
            Direction::RightToLeft => "right_to_left",
        }
    }
}

pub fn steps(_quick: bool) -> u64 {
    (FRAME_SIZES.len() * 2 + Imix::builtin().len() + OVERLOAD_SIZES.len()) as u64
}

fn path<'a>(context: &'a Context<'_>, direction: Direction) -> UdpPath<'a> {
    let hosts = context.hosts;
    match direction {
        Direction::LeftToRight => UdpPath::new(
            &hosts.left,
            &hosts.right,
            SocketAddr::new(context.system.right_address(), UDP_PORT),
        ),
        Direction::RightToLeft => UdpPath::new(
            &hosts.right,
            &hosts.left,
            SocketAddr::new(context.system.left_address(), UDP_PORT),
        ),
    }
}

/// Trades precision for time: 1 s trials, 2 % resolution, at most 12
/// trials (quick runs).
pub(crate) fn overview(search: &mut ThroughputSearch) {
    search.trial_duration = Duration::from_secs(1);
    search.resolution = 0.02;
    search.max_iterations = 12;
}

/// Why a frame size's rate falls for a tunnel: its IP packet does not
/// fit the tunnel's MTU, so every frame crosses as fragments (two or more
/// packets of protocol work, and a reassembly).
fn fragmentation_note(frame_size: usize, tunnel_mtu: u16) -> Option<String> {
    let packet = frame_size.checked_sub(ETHERNET_FRAMING_BYTES)?;
    (packet > usize::from(tunnel_mtu)).then(|| {
        format!("its {packet}-byte IP packets exceed the tunnel MTU of {tunnel_mtu}: every frame crosses fragmented")
    })
}

/// The zero-loss rate for one frame size; `overview` as [`overview`].
pub fn rfc2544(
    context: &Context<'_>,
    frame_size: usize,
    direction: Direction,
    overview: bool,
) -> Measurement {
    let frames = FrameSizes::fixed(frame_size);
    let mut search = if context.quick || overview {
        ThroughputSearch::quick(frames)
    } else {
        ThroughputSearch::full(frames)
    };
    if overview {
        self::overview(&mut search);
    }
    let (result, charge) = charged(context.system, || search.run(&path(context, direction)));
    let charge = context.has_processes().then_some(charge);
    zero_loss_row(
        context.system_name,
        frame_size,
        direction,
        result.map_err(|error| error.to_string()),
        context.system.mtu(),
        charge,
    )
}

/// The row of one frame size's zero-loss search (between namespaces or
/// hosts), with the CPU the tunnel's processes spent over the whole
/// search (`None`: it has none) per bit received in its trials — the
/// upper-bound probe's traffic is not counted, so this errs high.
pub(crate) fn zero_loss_row(
    system: &str,
    frame_size: usize,
    direction: Direction,
    result: Result<ThroughputResult, String>,
    tunnel_mtu: u16,
    charge: Option<CpuCharge>,
) -> Measurement {
    match result {
        Ok(result) => {
            let received: u64 = result.trials.iter().map(|trial| trial.received).sum();
            let bits = received as f64 * frame_size as f64 * 8.0;
            let mut measurement = throughput_measurement(system, direction.name(), &[result]);
            if let Some(note) = fragmentation_note(frame_size, tunnel_mtu) {
                measurement.add_note(note);
            }
            if let Some(charge) = charge {
                add_cpu(&mut measurement.extra, &[charge], bits, true);
            }
            measurement
        }
        Err(error) => Row::new("throughput", "rfc2544_throughput", system, "frames/s")
            .param("frame_size", frame_size)
            .param("direction", direction.name())
            .failed(error),
    }
}

pub fn run(context: &mut Context<'_>) -> Vec<Measurement> {
    let mut rows = Vec::new();
    let system = context.system_name;
    for direction in [Direction::LeftToRight, Direction::RightToLeft] {
        for frame_size in FRAME_SIZES {
            if context.progress.stopping() {
                return rows;
            }
            context.progress.step(&format!(
                "{system}: throughput: RFC 2544, {frame_size}-byte frames, {}",
                direction.name()
            ));
            rows.push(rfc2544(context, frame_size, direction, context.quick));
            context.progress.done();
        }
    }
    for mix in Imix::builtin() {
        if context.progress.stopping() {
            return rows;
        }
        context
            .progress
            .step(&format!("{system}: throughput: IMIX {}", mix.name.clone()));
        let mut search = mix.throughput_search(!context.quick);
        if context.quick {
            overview(&mut search);
        }
        let row = match search.run(&path(context, Direction::LeftToRight)) {
            Ok(result) => imix_measurement(system, &[result]),
            Err(error) => Row::new("throughput", "imix", system, "frames/s")
                .param("mix", mix.name.clone())
                .failed(error.to_string()),
        };
        rows.push(row);
        context.progress.done();
    }
    for frame_size in OVERLOAD_SIZES {
        if context.progress.stopping() {
            return rows;
        }
        context.progress.step(&format!(
            "{system}: throughput: receive rate under overload, {frame_size}-byte frames"
        ));
        let duration = Duration::from_secs(if context.quick { 2 } else { 10 });
        let frames = FrameSizes::fixed(frame_size);
        let link = crate::traffic::rfc2544::NOMINAL_LINK_BITS_PER_SEC;
        let row = match overload_receive_rate(
            &path(context, Direction::LeftToRight),
            frames,
            duration,
            link,
        ) {
            Ok(result) => overload_measurement(system, Direction::LeftToRight.name(), &[result]),
            Err(error) => Row::new("throughput", "overload_receive_rate", system, "frames/s")
                .param("frame_size", frame_size)
                .param("direction", Direction::LeftToRight.name())
                .failed(error.to_string()),
        };
        rows.push(row);
        context.progress.done();
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_above_the_tunnel_mtu_are_said_to_cross_fragmented() {
        assert_eq!(
            fragmentation_note(1518, 1420).as_deref(),
            Some(
                "its 1500-byte IP packets exceed the tunnel MTU of 1420: every frame crosses fragmented"
            )
        );
        assert_eq!(fragmentation_note(1518, 1500), None);
        assert_eq!(fragmentation_note(1280, 1420), None);
    }
}
