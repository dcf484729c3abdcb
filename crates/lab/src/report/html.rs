//! `report.html`: one self-contained page, readable offline. No scripts,
//! fonts, images or links outside the page: the style sheet is inline,
//! charts are inline SVG drawn by `svg` and styled by that sheet (series
//! colours `s0`…`s7`, light and dark schemes). Every text from the record
//! is escaped.

use std::fmt::Write;

use super::charts;
use super::merge::{self, MergedRecord};
use super::sections::{self, ReferenceOf, bare_reference};
use super::svg::escape;
use super::tables::{self, Table};
use super::{format, reading_guide, rounds_guide};
use crate::results::RunRecord;

/// The inline style sheet (the golden report stands `{{STYLE}}` in its
/// place, so the sheet is written here only).
pub(super) const STYLE: &str = "\
:root { --fg: #1b1f24; --muted: #57606a; --bg: #ffffff; --line: #d0d7de; --stripe: #f6f8fa;
  --c0: #6e7781; --c1: #0969da; --c2: #cf222e; --c3: #1a7f37; --c4: #9a6700;
  --c5: #8250df; --c6: #bc4c00; --c7: #1b7c83; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6edf3; --muted: #9198a1; --bg: #0d1117; --line: #30363d; --stripe: #161b22;
    --c0: #9198a1; --c1: #4493f8; --c2: #f85149; --c3: #3fb950; --c4: #d29922;
    --c5: #ab7df8; --c6: #db6d28; --c7: #39c5cf; }
}
body { font: 15px/1.5 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  max-width: 72rem; margin: 0 auto; padding: 1rem 1.5rem 3rem; }
h1 { margin-bottom: 0.25rem; }
h2 { margin-top: 2.5rem; border-bottom: 1px solid var(--line); padding-bottom: 0.25rem; }
h3 { margin: 1.75rem 0 0.5rem; }
.meta { color: var(--muted); margin: 0; }
.guide { max-width: 48rem; }
nav ul { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 0.25rem 1.25rem; }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 0.9em; }
caption { text-align: left; color: var(--muted); padding-bottom: 0.4rem; caption-side: top; }
th, td { padding: 0.3rem 0.6rem; border-bottom: 1px solid var(--line); white-space: nowrap; }
th { text-align: left; vertical-align: bottom; }
td.num, th.num { text-align: right; }
tbody tr:nth-child(even) { background: var(--stripe); }
.notes { color: var(--muted); font-size: 0.9em; }
figure { margin: 1rem 0; }
svg.chart { max-width: 100%; height: auto; font: 12px system-ui, sans-serif; }
.chart text { fill: var(--fg); }
.chart .title { font-weight: 600; font-size: 14px; }
.chart .label, .chart .value { fill: var(--muted); }
.chart .value { font-size: 10px; }
.chart .grid { stroke: var(--line); stroke-width: 1; }
.chart .frame, .chart .tick { stroke: var(--muted); stroke-width: 1; }
.chart .s0 { stroke: var(--c0); fill: var(--c0); }
.chart .s1 { stroke: var(--c1); fill: var(--c1); }
.chart .s2 { stroke: var(--c2); fill: var(--c2); }
.chart .s3 { stroke: var(--c3); fill: var(--c3); }
.chart .s4 { stroke: var(--c4); fill: var(--c4); }
.chart .s5 { stroke: var(--c5); fill: var(--c5); }
.chart .s6 { stroke: var(--c6); fill: var(--c6); }
.chart .s7 { stroke: var(--c7); fill: var(--c7); }
.chart .line { fill: none; stroke-width: 2; }
.chart .reference { fill: none; stroke: var(--muted); stroke-width: 1.5; stroke-dasharray: 6 4; }
.chart .bar { stroke: none; }
.chart .censored { fill: var(--bg); stroke-width: 1.5; }
.chart .legend .censored { stroke: var(--fg); }
footer { margin-top: 3rem; color: var(--muted); font-size: 0.85em; }
";

/// An `id` made of lowercase letters, digits and dashes.
fn anchor(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .collect()
}

/// The document's head, up to and including `<body>`.
fn head(out: &mut String, title: &str) {
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{}</title>\n<style>\n{STYLE}</style>\n</head>\n<body>\n",
        escape(title)
    );
}

pub fn render(record: &RunRecord) -> String {
    let mut out = String::new();
    head(
        &mut out,
        &format!("fjord lab report, {}", record.started_at),
    );
    let machine = &record.machine;
    let _ = write!(
        out,
        "<header>\n<h1>fjord lab report</h1>\n\
         <p class=\"meta\">fjord {} · started {} · {} · {} CPUs · {} · Linux {}</p>\n\
         <p class=\"guide\">{}</p>\n{}</header>\n",
        escape(&record.fjord_version),
        escape(&record.started_at),
        format::quantity(record.duration_secs, "s"),
        machine.cpus,
        escape(&machine.cpu_model),
        escape(&machine.kernel),
        escape(reading_guide()),
        match record.rounds {
            1 => String::new(),
            rounds => format!("<p class=\"guide\">{}</p>\n", escape(&rounds_guide(rounds))),
        },
    );
    write_body(&mut out, record, &bare_reference, None, super::RESULTS_FILE);
    out
}

/// A merged report (`fjord lab report A B --out DIR`): the runs, then the
/// tables and charts of a run's report with a column (a series) per
/// system and run.
pub fn render_merged(merged: &MergedRecord) -> String {
    let mut out = String::new();
    let labels: Vec<&str> = merged.runs.iter().map(|r| r.label.as_str()).collect();
    head(
        &mut out,
        &format!("fjord lab report, runs {}", labels.join(", ")),
    );
    let _ = write!(
        out,
        "<header>\n<h1>fjord lab report, runs merged</h1>\n\
         <p class=\"guide\">{}</p>\n<p class=\"guide\">{}</p>\n</header>\n",
        escape(&merge::merge_guide(merged)),
        escape(reading_guide()),
    );
    let mut runs = String::from("<section id=\"runs\">\n<h2>Runs</h2>\n");
    write_table(&mut runs, &merge::runs_table(merged), false);
    runs.push_str("</section>\n");
    write_body(
        &mut out,
        &merged.tables_record(),
        &|column| merged.reference_of(column),
        Some(&runs),
        merge::MERGED_FILE,
    );
    out
}

/// The navigation, `before` (a merged report's runs) if any, the systems,
/// one section per suite with its charts and tables, and the end of the
/// document naming the file it was `rendered_from`.
fn write_body(
    out: &mut String,
    record: &RunRecord,
    reference_of: &ReferenceOf,
    before: Option<&str>,
    rendered_from: &str,
) {
    let suites = sections::suite_order(record);
    out.push_str("<nav>\n<ul>\n");
    if before.is_some() {
        out.push_str("<li><a href=\"#runs\">Runs</a></li>\n");
    }
    out.push_str("<li><a href=\"#systems\">Systems</a></li>\n");
    for suite in &suites {
        let _ = writeln!(
            out,
            "<li><a href=\"#suite-{}\">{}</a></li>",
            anchor(suite),
            escape(&sections::suite_title(suite))
        );
    }
    out.push_str("</ul>\n</nav>\n");
    out.push_str(before.unwrap_or_default());

    out.push_str("<section id=\"systems\">\n<h2>Systems</h2>\n");
    write_table(out, &tables::systems_table(record), false);
    out.push_str("</section>\n");
    if let Some(table) = super::hosts::hosts_table(record) {
        out.push_str("<section id=\"hosts\">\n<h2>Hosts</h2>\n");
        write_table(out, &table, false);
        out.push_str("</section>\n");
    }

    let order = sections::system_order(record);
    let sections = sections::sections_against(record, reference_of);
    for suite in suites {
        let _ = writeln!(
            out,
            "<section id=\"suite-{}\">\n<h2>{}</h2>",
            anchor(suite),
            escape(&sections::suite_title(suite))
        );
        if let Some(remark) = sections::suite_remark(suite) {
            let _ = writeln!(out, "<p>{}</p>", escape(remark));
        }
        for section in sections.iter().filter(|s| s.suite == suite) {
            let title = section.title();
            let _ = writeln!(out, "<h3>{}</h3>", escape(&title));
            for chart in charts::section_charts(section, &order) {
                let _ = write!(out, "<figure>\n{}</figure>\n", chart.to_svg());
            }
            for table in tables::section_tables(section) {
                write_table(out, &table, table.title != title);
            }
        }
        out.push_str("</section>\n");
    }
    let _ = write!(
        out,
        "<footer>Rendered from {rendered_from} (schema version {}) by fjord lab.</footer>\n\
         </body>\n</html>\n",
        record.schema_version
    );
}

fn write_table(out: &mut String, table: &Table, with_title: bool) {
    out.push_str("<div class=\"scroll\">\n<table>\n");
    if with_title || !table.caption.is_empty() {
        out.push_str("<caption>");
        if with_title {
            let _ = write!(out, "<strong>{}</strong>", escape(&table.title));
            if !table.caption.is_empty() {
                out.push_str("<br>");
            }
        }
        out.push_str(&escape(&table.caption));
        out.push_str("</caption>\n");
    }
    let class = |column: usize| {
        if column < table.label_columns {
            ""
        } else {
            " class=\"num\""
        }
    };
    out.push_str("<thead><tr>");
    for (column, cell) in table.header.iter().enumerate() {
        let _ = write!(out, "<th{}>{}</th>", class(column), escape(cell));
    }
    out.push_str("</tr></thead>\n<tbody>\n");
    for row in &table.rows {
        out.push_str("<tr>");
        for (column, cell) in row.iter().enumerate() {
            let _ = write!(out, "<td{}>{}</td>", class(column), escape(cell));
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</tbody>\n</table>\n</div>\n");
    if !table.notes.is_empty() {
        out.push_str("<ul class=\"notes\">\n");
        for note in &table.notes {
            let _ = writeln!(out, "<li>{}</li>", escape(note));
        }
        out.push_str("</ul>\n");
    }
}
