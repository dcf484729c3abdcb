//! Hand-written SVG charts for the offline HTML report: line charts (with
//! censored points for trials that hit their limit), CDFs (step lines) and
//! grouped bar charts, with "nice" axis ticks, a legend and escaped text.
//!
//! The output is deterministic (coordinates printed with one decimal, no
//! randomness, no clock) so it can be compared with golden files. Nothing
//! is styled inline: elements carry classes (`chart`, `axis`, `grid`,
//! `line`, `marker`, `censored`, `bar`, `reference` for a dashed limit
//! curve, `s0`…`s7` for the series colour)
//! and the page's CSS draws them. The `<svg>` has no `xmlns`, as inline SVG
//! in HTML needs none.

use std::fmt::Write;

use super::axis::{Axis, Mapping, Scale};

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 320.0;
const MARGIN_TOP: f64 = 36.0;
const MARGIN_LEFT: f64 = 64.0;
const MARGIN_BOTTOM: f64 = 48.0;
/// Estimated advance of one character of 12 px text; used to size the
/// legend and to decide whether a value label fits above a bar.
const CHAR_WIDTH: f64 = 7.0;
/// Colour classes cycle after this many series.
pub const SERIES_CLASSES: usize = 8;

/// Escapes text for XML and HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// One entry of a legend.
struct LegendEntry<'a> {
    name: &'a str,
    class: String,
    swatch: Swatch,
}

#[derive(Clone, Copy)]
enum Swatch {
    Line,
    Bar,
    Censored,
}

fn series_class(class: usize) -> String {
    format!("s{}", class % SERIES_CLASSES)
}

fn legend_width(entries: &[LegendEntry]) -> f64 {
    let longest = entries
        .iter()
        .map(|entry| entry.name.chars().count())
        .max()
        .unwrap_or(0);
    (longest as f64 * CHAR_WIDTH + 36.0).clamp(72.0, 200.0)
}

/// Opens the `<svg>` with its accessible title and chart title.
fn open(out: &mut String, title: &str) {
    // 14 px bold text: about 78 characters fit; the full title stays in
    // the tooltip and the accessible name.
    let shown: String = match title.chars().count() {
        count if count > 78 => title.chars().take(77).chain(['…']).collect(),
        _ => title.to_string(),
    };
    let title = escape(title);
    let _ = write!(
        out,
        "<svg class=\"chart\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" width=\"{WIDTH}\" \
         height=\"{HEIGHT}\" role=\"img\" aria-label=\"{title}\">\n<title>{title}</title>\n\
         <text class=\"title\" x=\"{x:.1}\" y=\"20\" text-anchor=\"middle\">{}</text>\n",
        escape(&shown),
        x = WIDTH / 2.0,
    );
}

fn draw_legend(out: &mut String, entries: &[LegendEntry], x: f64) {
    out.push_str("<g class=\"legend\">\n");
    for (index, entry) in entries.iter().enumerate() {
        let y = MARGIN_TOP + 8.0 + index as f64 * 18.0;
        let class = &entry.class;
        match entry.swatch {
            Swatch::Line => {
                let _ = writeln!(
                    out,
                    "<line class=\"line {class}\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/>",
                    x + 18.0
                );
            }
            Swatch::Bar => {
                let _ = writeln!(
                    out,
                    "<rect class=\"bar {class}\" x=\"{x:.1}\" y=\"{:.1}\" width=\"18\" height=\"10\"/>",
                    y - 5.0
                );
            }
            Swatch::Censored => {
                let _ = writeln!(out, "{}", triangle(x + 9.0, y, "censored"));
            }
        }
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 24.0,
            y + 4.0,
            escape(entry.name)
        );
    }
    out.push_str("</g>\n");
}

/// Axes, grid lines, tick labels and axis labels for a plot area.
fn draw_y_axis(out: &mut String, y: &Mapping, label: &str, left: f64, right: f64) {
    out.push_str("<g class=\"axis y\">\n");
    for index in 0..y.ticks.len() {
        let py = y.to_pixel(y.ticks[index]);
        let _ = writeln!(
            out,
            "<line class=\"grid\" x1=\"{left:.1}\" y1=\"{py:.1}\" x2=\"{right:.1}\" y2=\"{py:.1}\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 6.0,
            py + 4.0,
            escape(&y.tick_label(index))
        );
    }
    let bottom = y.pixels.0;
    let _ = writeln!(
        out,
        "<line class=\"frame\" x1=\"{left:.1}\" y1=\"{:.1}\" x2=\"{left:.1}\" y2=\"{bottom:.1}\"/>\n\
         <text class=\"label\" transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\">{}</text>\n</g>",
        y.pixels.1,
        (y.pixels.0 + y.pixels.1) / 2.0,
        escape(label)
    );
}

fn draw_x_label(out: &mut String, label: &str, left: f64, right: f64) {
    let _ = writeln!(
        out,
        "<text class=\"label\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
        (left + right) / 2.0,
        HEIGHT - 8.0,
        escape(label)
    );
}

/// An upward triangle: "at least this much" (the trial hit its limit).
fn triangle(x: f64, y: f64, class: &str) -> String {
    format!(
        "<path class=\"{class}\" d=\"M{:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z\"/>",
        x,
        y - 5.0,
        x + 5.0,
        y + 4.0,
        x - 5.0,
        y + 4.0
    )
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    pub x: f64,
    pub y: f64,
    /// The true value is at least `y` (e.g. a transfer that timed out).
    pub censored: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    /// Colour class index, stable per system across charts.
    pub class: usize,
    pub points: Vec<Point>,
    /// A reference curve (a theoretical limit): dashed, no markers.
    pub reference: bool,
}

impl Series {
    fn class_name(&self) -> String {
        if self.reference {
            "reference".to_string()
        } else {
            series_class(self.class)
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineStyle {
    /// Straight segments with a marker on each point.
    Markers,
    /// Steps (horizontal then vertical), no markers: for CDFs.
    Steps,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LineChart {
    pub title: String,
    pub x: Axis,
    pub y: Axis,
    pub series: Vec<Series>,
    pub style: LineStyle,
}

impl LineChart {
    /// An empirical CDF per series: x is the sample, y the fraction of
    /// samples at or below it.
    pub fn cdf(title: &str, x: Axis, series: Vec<(String, usize, Vec<f64>)>) -> Self {
        let series = series
            .into_iter()
            .map(|(name, class, mut samples)| {
                samples.retain(|s| s.is_finite());
                samples.sort_by(f64::total_cmp);
                let count = samples.len() as f64;
                let points = samples
                    .iter()
                    .enumerate()
                    .map(|(index, &x)| Point {
                        x,
                        y: (index + 1) as f64 / count,
                        censored: false,
                    })
                    .collect();
                Series {
                    name,
                    class,
                    points,
                    reference: false,
                }
            })
            .collect();
        LineChart {
            title: title.to_string(),
            x,
            y: Axis::linear("fraction of samples at or below"),
            series,
            style: LineStyle::Steps,
        }
    }

    pub fn to_svg(&self) -> String {
        let mut entries: Vec<LegendEntry> = self
            .series
            .iter()
            .map(|series| LegendEntry {
                name: &series.name,
                class: series.class_name(),
                swatch: Swatch::Line,
            })
            .collect();
        if self
            .series
            .iter()
            .flat_map(|s| &s.points)
            .any(|p| p.censored)
        {
            entries.push(LegendEntry {
                name: "limit hit (at least)",
                class: String::new(),
                swatch: Swatch::Censored,
            });
        }
        let right = WIDTH - legend_width(&entries) - 8.0;
        let xs: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.x)
            .collect();
        let ys: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| &s.points)
            .map(|p| p.y)
            .collect();
        let x = Mapping::fit(&self.x, &xs, false, (MARGIN_LEFT, right));
        let y = Mapping::fit(&self.y, &ys, true, (HEIGHT - MARGIN_BOTTOM, MARGIN_TOP));

        let mut out = String::new();
        open(&mut out, &self.title);
        draw_y_axis(&mut out, &y, &self.y.label, MARGIN_LEFT, right);
        out.push_str("<g class=\"axis x\">\n");
        let bottom = HEIGHT - MARGIN_BOTTOM;
        // Right edge of the last label drawn: a label that would overlap it
        // is left out (ticks at measured values can crowd: 64 and 128).
        let mut last_right = f64::NEG_INFINITY;
        for index in 0..x.ticks.len() {
            let px = x.to_pixel(x.ticks[index]);
            let _ = writeln!(
                out,
                "<line class=\"tick\" x1=\"{px:.1}\" y1=\"{bottom:.1}\" x2=\"{px:.1}\" y2=\"{:.1}\"/>",
                bottom + 4.0,
            );
            let label = x.tick_label(index);
            let half = label.chars().count() as f64 * CHAR_WIDTH / 2.0;
            if px - half < last_right + 6.0 {
                continue;
            }
            last_right = px + half;
            let _ = writeln!(
                out,
                "<text x=\"{px:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                bottom + 18.0,
                escape(&label)
            );
        }
        let _ = writeln!(
            out,
            "<line class=\"frame\" x1=\"{MARGIN_LEFT:.1}\" y1=\"{bottom:.1}\" x2=\"{right:.1}\" y2=\"{bottom:.1}\"/>\n</g>"
        );
        draw_x_label(&mut out, &self.x.label, MARGIN_LEFT, right);

        for series in &self.series {
            self.draw_series(&mut out, series, &x, &y);
        }
        draw_legend(&mut out, &entries, right + 12.0);
        out.push_str("</svg>\n");
        out
    }

    fn draw_series(&self, out: &mut String, series: &Series, x: &Mapping, y: &Mapping) {
        let mut points: Vec<Point> = series
            .points
            .iter()
            .copied()
            .filter(|p| {
                p.x.is_finite()
                    && p.y.is_finite()
                    && (x.scale == Scale::Linear || p.x > 0.0)
                    && (y.scale == Scale::Linear || p.y > 0.0)
            })
            .collect();
        points.sort_by(|a, b| a.x.total_cmp(&b.x));
        if points.is_empty() {
            return;
        }
        let class = series.class_name();
        let _ = writeln!(
            out,
            "<g class=\"series\"><title>{}</title>",
            escape(&series.name)
        );
        let mut path = String::new();
        let mut previous_y = y.to_pixel(0.0);
        for (index, point) in points.iter().enumerate() {
            let (px, py) = (x.to_pixel(point.x), y.to_pixel(point.y));
            match (self.style, index) {
                (LineStyle::Steps, 0) => {
                    let _ = write!(path, "M{px:.1},{previous_y:.1} L{px:.1},{py:.1}");
                }
                (LineStyle::Steps, _) => {
                    let _ = write!(path, " L{px:.1},{previous_y:.1} L{px:.1},{py:.1}");
                }
                (LineStyle::Markers, 0) => {
                    let _ = write!(path, "M{px:.1},{py:.1}");
                }
                (LineStyle::Markers, _) => {
                    let _ = write!(path, " L{px:.1},{py:.1}");
                }
            }
            previous_y = py;
        }
        let _ = writeln!(out, "<path class=\"line {class}\" d=\"{path}\"/>");
        if self.style == LineStyle::Markers && !series.reference {
            for point in &points {
                let (px, py) = (x.to_pixel(point.x), y.to_pixel(point.y));
                if point.censored {
                    let _ = writeln!(out, "{}", triangle(px, py, &format!("censored {class}")));
                } else {
                    let _ = writeln!(
                        out,
                        "<circle class=\"marker {class}\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"3\"/>"
                    );
                }
            }
        }
        out.push_str("</g>\n");
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Bar {
    pub value: f64,
    /// Printed above the bar when it fits, and as the bar's tooltip.
    pub label: String,
}

#[derive(Debug, Clone, PartialEq)]
pub struct BarSeries {
    pub name: String,
    pub class: usize,
    /// One per group; `None` leaves a gap.
    pub bars: Vec<Option<Bar>>,
}

/// Bars side by side within each group, one colour per series; linear
/// value axis from zero.
#[derive(Debug, Clone, PartialEq)]
pub struct BarChart {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<BarSeries>,
}

impl BarChart {
    pub fn to_svg(&self) -> String {
        let entries: Vec<LegendEntry> = self
            .series
            .iter()
            .map(|series| LegendEntry {
                name: &series.name,
                class: series_class(series.class),
                swatch: Swatch::Bar,
            })
            .collect();
        let right = WIDTH - legend_width(&entries) - 8.0;
        let values: Vec<f64> = self
            .series
            .iter()
            .flat_map(|s| s.bars.iter().flatten())
            .map(|bar| bar.value)
            .collect();
        let bottom = HEIGHT - MARGIN_BOTTOM;
        let y = Mapping::fit(&Axis::linear(""), &values, true, (bottom, MARGIN_TOP));

        let mut out = String::new();
        open(&mut out, &self.title);
        draw_y_axis(&mut out, &y, &self.y_label, MARGIN_LEFT, right);

        let group_width = (right - MARGIN_LEFT) / self.groups.len().max(1) as f64;
        let bar_width = group_width * 0.8 / self.series.len().max(1) as f64;
        out.push_str("<g class=\"axis x\">\n");
        for (index, group) in self.groups.iter().enumerate() {
            let _ = writeln!(
                out,
                "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                MARGIN_LEFT + group_width * (index as f64 + 0.5),
                bottom + 18.0,
                escape(group)
            );
        }
        let _ = writeln!(
            out,
            "<line class=\"frame\" x1=\"{MARGIN_LEFT:.1}\" y1=\"{bottom:.1}\" x2=\"{right:.1}\" y2=\"{bottom:.1}\"/>\n</g>"
        );
        let zero = y.to_pixel(0.0);
        for (series_index, series) in self.series.iter().enumerate() {
            let class = series_class(series.class);
            let _ = writeln!(out, "<g class=\"series\">");
            for (group_index, bar) in series.bars.iter().enumerate() {
                let Some(bar) = bar else { continue };
                if !bar.value.is_finite() || group_index >= self.groups.len() {
                    continue;
                }
                let left = MARGIN_LEFT
                    + group_width * (group_index as f64 + 0.1)
                    + bar_width * series_index as f64;
                let top = y.to_pixel(bar.value).min(zero);
                let height = (zero - y.to_pixel(bar.value)).abs();
                let tooltip = format!(
                    "{}, {}: {}",
                    series.name, self.groups[group_index], bar.label
                );
                let _ = writeln!(
                    out,
                    "<rect class=\"bar {class}\" x=\"{left:.1}\" y=\"{top:.1}\" width=\"{:.1}\" height=\"{height:.1}\"><title>{}</title></rect>",
                    bar_width - 1.0,
                    escape(&tooltip)
                );
                if bar.label.chars().count() as f64 * CHAR_WIDTH * 0.85 <= bar_width {
                    let _ = writeln!(
                        out,
                        "<text class=\"value\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                        left + bar_width / 2.0,
                        top - 4.0,
                        escape(&bar.label)
                    );
                }
            }
            out.push_str("</g>\n");
        }
        draw_legend(&mut out, &entries, right + 12.0);
        out.push_str("</svg>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_escaped() {
        assert_eq!(
            escape("<a & 'b' \"c\">"),
            "&lt;a &amp; &#39;b&#39; &quot;c&quot;&gt;"
        );
        let chart = BarChart {
            title: "t <&>".into(),
            y_label: "y".into(),
            groups: vec!["<g>".into()],
            series: vec![BarSeries {
                name: "<script>".into(),
                class: 9,
                bars: vec![Some(Bar {
                    value: 1.0,
                    label: "1 & 2".into(),
                })],
            }],
        };
        let svg = chart.to_svg();
        assert!(!svg.contains("<script>"), "{svg}");
        assert!(!svg.contains("<g>"), "{svg}");
        assert!(svg.contains("&lt;script&gt;"));
        assert!(svg.contains("class=\"bar s1\""), "classes cycle: {svg}");
    }

    #[test]
    fn empty_charts_still_render() {
        let chart = LineChart {
            title: "empty".into(),
            x: Axis::linear("x"),
            y: Axis::log("y"),
            series: vec![],
            style: LineStyle::Markers,
        };
        let svg = chart.to_svg();
        assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    }
}
