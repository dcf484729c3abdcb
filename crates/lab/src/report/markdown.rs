//! `report.md`: the run's metadata, the systems and their outcome, then
//! one heading per suite with its tables. Columns are padded so the file
//! also reads well as plain text; text from the record is escaped so it
//! cannot break a table or inject markup.

use std::fmt::Write;

use super::merge::{self, MergedRecord};
use super::sections::{self, ReferenceOf, bare_reference};
use super::tables::{self, Table};
use super::{format, reading_guide, rounds_guide};
use crate::results::RunRecord;

/// Escapes what Markdown (GFM) would otherwise interpret inside a table
/// cell or a paragraph: backslash, pipe, emphasis, code, links and HTML.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '|' | '*' | '`' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '\n' | '\r' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

pub fn render(record: &RunRecord) -> String {
    let mut out = String::from("# fjord lab report\n\n");
    let machine = &record.machine;
    let _ = writeln!(out, "- fjord: {}", escape(&record.fjord_version));
    let _ = writeln!(
        out,
        "- started: {} · duration: {}",
        escape(&record.started_at),
        format::quantity(record.duration_secs, "s")
    );
    let _ = writeln!(
        out,
        "- machine: {} CPUs · {} · Linux {}",
        machine.cpus,
        escape(&machine.cpu_model),
        escape(&machine.kernel)
    );
    let _ = writeln!(out, "- suites: {}", escape(&record.suites.join(", ")));
    if record.rounds > 1 {
        let _ = writeln!(out, "- {}", rounds_guide(record.rounds));
    }
    let _ = writeln!(out, "\n{}\n", reading_guide());
    write_body(&mut out, record, &bare_reference);
    out
}

/// A merged report (`fjord lab report A B --out DIR`): the runs, then the
/// tables of a run's report with a column per system and run.
pub fn render_merged(merged: &MergedRecord) -> String {
    let mut out = String::from("# fjord lab report, runs merged\n\n");
    let _ = writeln!(out, "{}\n", escape(&merge::merge_guide(merged)));
    let _ = writeln!(out, "{}\n", reading_guide());
    out.push_str("## Runs\n\n");
    write_table(&mut out, &merge::runs_table(merged));
    write_body(&mut out, &merged.tables_record(), &|column| {
        merged.reference_of(column)
    });
    out
}

/// The systems, then one heading per suite with its tables.
fn write_body(out: &mut String, record: &RunRecord, reference_of: &ReferenceOf) {
    out.push_str("## Systems\n\n");
    write_table(out, &tables::systems_table(record));
    if let Some(table) = super::hosts::hosts_table(record) {
        out.push_str("## Hosts\n\n");
        write_table(out, &table);
    }

    let sections = sections::sections_against(record, reference_of);
    for suite in sections::suite_order(record) {
        let _ = writeln!(out, "## {}\n", escape(&sections::suite_title(suite)));
        if let Some(remark) = sections::suite_remark(suite) {
            let _ = writeln!(out, "{}\n", escape(remark));
        }
        for section in sections.iter().filter(|s| s.suite == suite) {
            for table in tables::section_tables(section) {
                let _ = writeln!(out, "### {}\n", escape(&table.title));
                if !table.caption.is_empty() {
                    let _ = writeln!(out, "{}\n", escape(&table.caption));
                }
                write_table(out, &table);
            }
        }
    }
}

/// A padded GFM table, then its notes as a list.
fn write_table(out: &mut String, table: &Table) {
    let header: Vec<String> = table.header.iter().map(|h| escape(h)).collect();
    let rows: Vec<Vec<String>> = table
        .rows
        .iter()
        .map(|row| row.iter().map(|cell| escape(cell)).collect())
        .collect();
    let widths: Vec<usize> = (0..header.len())
        .map(|column| {
            rows.iter()
                .filter_map(|row| row.get(column))
                .chain([&header[column]])
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
                .max(3)
        })
        .collect();
    let line = |cells: &[String], out: &mut String| {
        out.push('|');
        for (column, width) in widths.iter().enumerate() {
            let cell = cells.get(column).map_or("", String::as_str);
            let pad = width - cell.chars().count().min(*width);
            if column < table.label_columns {
                let _ = write!(out, " {cell}{} |", " ".repeat(pad));
            } else {
                let _ = write!(out, " {}{cell} |", " ".repeat(pad));
            }
        }
        out.push('\n');
    };
    line(&header, out);
    out.push('|');
    for (column, width) in widths.iter().enumerate() {
        if column < table.label_columns {
            let _ = write!(out, " {} |", "-".repeat(*width));
        } else {
            let _ = write!(out, " {}: |", "-".repeat(width - 1));
        }
    }
    out.push('\n');
    for row in &rows {
        line(row, out);
    }
    out.push('\n');
    for note in &table.notes {
        let _ = writeln!(out, "- {}", escape(note));
    }
    if !table.notes.is_empty() {
        out.push('\n');
    }
}
