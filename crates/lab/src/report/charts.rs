//! Which charts a section gets, built from its rows:
//!
//! - RFC 2544 and overload sweeps: frames/s against frame size, one line
//!   per system and the Ethernet line rate dashed (one chart per
//!   direction, as sections split by direction);
//! - round-trip time: p50/p99/p99.9 bars per system, one chart per payload,
//!   and a CDF of the samples when there are enough of them;
//! - transfer time against drop rate, one line per system, timed-out
//!   trials drawn as "at least" triangles; likewise latency and frame loss
//!   against offered load;
//! - TCP bulk, IMIX and figures by number of peers: one bar per system
//!   and row.
//!
//! Colours follow the system (its place in the report order), so fjord
//! has the same colour in every chart.

use super::axis::Axis;
use super::format;
use super::sections::{Row, Section, TestKind};
use super::svg::{Bar, BarChart, BarSeries, LineChart, LineStyle, Point, Series};
use super::tables;
use crate::results::{Measurement, MeasurementStatus, Statistic};

/// Positive values spanning this factor or more get a log axis.
const LOG_SPAN: f64 = 20.0;
/// Fewest samples per system worth a CDF.
const CDF_MIN_SAMPLES: usize = 20;

pub enum Chart {
    Line(LineChart),
    Bars(BarChart),
}

impl Chart {
    pub fn to_svg(&self) -> String {
        match self {
            Chart::Line(chart) => chart.to_svg(),
            Chart::Bars(chart) => chart.to_svg(),
        }
    }
}

/// The charts for `section`; `order` is the report's system order.
pub fn section_charts(section: &Section, order: &[&str]) -> Vec<Chart> {
    let class = |system: &str| order.iter().position(|s| *s == system).unwrap_or(0);
    match section.kind {
        TestKind::Rfc2544
        | TestKind::Overload
        | TestKind::TransferTime
        | TestKind::LatencyUnderLoad
        | TestKind::FrameLoss
        | TestKind::Memory => sweep_chart(section, &class)
            .map(Chart::Line)
            .into_iter()
            .collect(),
        TestKind::Rtt => latency_charts(section, &class),
        TestKind::TcpBulk | TestKind::Imix | TestKind::Peers | TestKind::PingAverage => {
            vec![Chart::Bars(bars_per_row(section, &class))]
        }
        TestKind::MemoryGrowth
        | TestKind::Mesh
        | TestKind::NatMatrix
        | TestKind::RelayCost
        | TestKind::PathMtu
        | TestKind::Flood
        | TestKind::SoakSummary
        | TestKind::CounterBalance
        | TestKind::Policy
        | TestKind::Other => Vec::new(),
    }
}

/// The section's title with its fixed parameters, as a chart stands alone:
/// `Latency under load, frame size: 64`.
fn chart_title(section: &Section) -> String {
    let fixed = section.fixed_text();
    if fixed.is_empty() {
        section.title()
    } else {
        format!("{}, {}", section.title(), fixed.join(", "))
    }
}

/// A linear axis, or a log one when positive values span [`LOG_SPAN`].
fn value_axis(label: &str, values: impl Iterator<Item = f64>) -> Axis {
    let positive: Vec<f64> = values.filter(|v| v.is_finite() && *v > 0.0).collect();
    let low = positive.iter().copied().fold(f64::INFINITY, f64::min);
    let high = positive.iter().copied().fold(0.0, f64::max);
    if !positive.is_empty() && high / low >= LOG_SPAN {
        Axis::log(&format!("{label} (log scale)"))
    } else {
        Axis::linear(label)
    }
}

/// The value drawn for a measurement: its median unless it failed.
fn drawn(m: &Measurement) -> Option<Point> {
    match m.status {
        MeasurementStatus::Failed => None,
        status => Some(Point {
            x: 0.0,
            y: m.median,
            censored: status == MeasurementStatus::TimedOut,
        }),
    }
}

/// One line per system over the row key (frame size, drop rate); needs
/// at least two numeric rows.
fn sweep_chart(section: &Section, class: &dyn Fn(&str) -> usize) -> Option<LineChart> {
    let xs: Vec<f64> = section.rows.iter().filter_map(Row::x).collect();
    if xs.len() < 2 {
        return None;
    }
    let mut series: Vec<Series> = section
        .systems
        .iter()
        .enumerate()
        .map(|(index, system)| Series {
            name: system.to_string(),
            class: class(system),
            points: section
                .rows
                .iter()
                .filter_map(|row| {
                    let point = drawn(row.cells[index]?)?;
                    Some(Point {
                        x: row.x()?,
                        ..point
                    })
                })
                .collect(),
            reference: false,
        })
        .filter(|series| !series.points.is_empty())
        .collect();
    // The Ethernet line rate, where the record gives the link speed.
    let line_rate: Vec<Point> = section
        .rows
        .iter()
        .filter_map(|row| {
            let fps = row
                .cells
                .iter()
                .flatten()
                .find_map(|m| tables::theoretical_fps(m))?;
            Some(Point {
                x: row.x()?,
                y: fps,
                censored: false,
            })
        })
        .collect();
    let frame_rates = matches!(section.kind, TestKind::Rfc2544 | TestKind::Overload);
    if frame_rates && line_rate.len() >= 2 {
        series.push(Series {
            name: "line rate".to_string(),
            class: 0,
            points: line_rate,
            reference: true,
        });
    }
    let x_label = format::param_heading(section.row_keys.first()?);
    let y_label = match section.kind {
        TestKind::TransferTime => format!("transfer time ({})", section.unit),
        TestKind::LatencyUnderLoad => format!("p50 latency ({})", section.unit),
        TestKind::FrameLoss => "frames lost (%)".to_string(),
        TestKind::Memory => "resident size (bytes)".to_string(),
        _ => section.unit.to_string(),
    };
    let y = value_axis(&y_label, series.iter().flat_map(|s| &s.points).map(|p| p.y));
    Some(LineChart {
        title: chart_title(section),
        x: Axis::linear(&x_label).with_ticks(xs),
        y,
        series,
        style: LineStyle::Markers,
    })
}

/// Per payload: bars of p50, p99 and p99.9 for each system; and a CDF of
/// the samples when every system has enough.
fn latency_charts(section: &Section, class: &dyn Fn(&str) -> usize) -> Vec<Chart> {
    const PERCENTILES: [(Statistic, &str); 3] = [
        (Statistic::P50, "p50"),
        (Statistic::P99, "p99"),
        (Statistic::P999, "p99.9"),
    ];
    let mut charts = Vec::new();
    for row in &section.rows {
        let label = section.row_text(row);
        let title = match label.is_empty() {
            true => chart_title(section),
            false => format!("{}, {label}", chart_title(section)),
        };
        let series: Vec<BarSeries> = section
            .systems
            .iter()
            .zip(&row.cells)
            .filter_map(|(system, cell)| {
                let m = cell.filter(|m| m.status == MeasurementStatus::Ok)?;
                let bars = PERCENTILES
                    .iter()
                    .map(|(statistic, _)| {
                        let value = tables::percentile(m, *statistic)?;
                        Some(Bar {
                            value,
                            label: format::quantity(value, &m.unit),
                        })
                    })
                    .collect();
                Some(BarSeries {
                    name: system.to_string(),
                    class: class(system),
                    bars,
                })
            })
            .collect();
        if series.is_empty() {
            continue;
        }
        charts.push(Chart::Bars(BarChart {
            title: title.clone(),
            y_label: section.unit.to_string(),
            groups: PERCENTILES
                .iter()
                .map(|(_, name)| name.to_string())
                .collect(),
            series,
        }));

        let samples: Vec<(String, usize, Vec<f64>)> = section
            .systems
            .iter()
            .zip(&row.cells)
            .filter_map(|(system, cell)| {
                let m = cell.filter(|m| m.status == MeasurementStatus::Ok)?;
                Some((system.to_string(), class(system), m.samples.clone()))
            })
            .collect();
        if !samples.is_empty() && samples.iter().all(|s| s.2.len() >= CDF_MIN_SAMPLES) {
            charts.push(Chart::Line(LineChart::cdf(
                &format!("{title}: distribution"),
                Axis::linear(section.unit),
                samples,
            )));
        }
    }
    charts
}

/// Groups are rows (or the fixed parameters for a single row), one bar
/// per system.
fn bars_per_row(section: &Section, class: &dyn Fn(&str) -> usize) -> BarChart {
    let groups: Vec<String> = section
        .rows
        .iter()
        .map(|row| match row.labels().join(", ") {
            label if label.is_empty() => section.fixed_text().join(", "),
            label => label,
        })
        .collect();
    let series = section
        .systems
        .iter()
        .enumerate()
        .map(|(index, system)| BarSeries {
            name: system.to_string(),
            class: class(system),
            bars: section
                .rows
                .iter()
                .map(|row| {
                    let m = row.cells[index].filter(|m| m.status == MeasurementStatus::Ok)?;
                    Some(Bar {
                        value: m.median,
                        label: format::quantity(m.median, &m.unit),
                    })
                })
                .collect(),
        })
        .collect();
    BarChart {
        title: section.title(),
        y_label: section.unit.to_string(),
        groups,
        series,
    }
}
