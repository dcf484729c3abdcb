//! The lab's reports, rendered from the run record alone.
//!
//! A run ends with [`write_reports`]: `results.json` (the record, pretty
//! printed, raw numbers), `report.md` and `report.html` (tables shaped like
//! the reference studies, numbers for humans, every figure beside its ratio
//! to bare) in one directory; and [`terminal_summary`] for the console.
//! [`load_record`] reads a directory back so its reports can be redrawn.
//!
//! Flow: record → [`tables::sections`] (group by suite and test, rows by
//! varying parameters, columns by system) → text tables and charts → one
//! renderer per output. Rendering is deterministic: the same record gives
//! byte-identical files.

mod axis;
mod charts;
mod format;
mod hosts;
mod html;
mod markdown;
pub mod merge;
mod sections;
mod soak;
mod svg;
mod tables;
mod terminal;

#[cfg(test)]
mod merge_tests;
#[cfg(test)]
mod tests;

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use crate::results::{RunRecord, SCHEMA_VERSION};

/// The record's file name inside a results directory.
pub const RESULTS_FILE: &str = "results.json";
pub const MARKDOWN_FILE: &str = "report.md";
pub const HTML_FILE: &str = "report.html";

/// How to read every table, shared by the Markdown and HTML reports.
fn reading_guide() -> &'static str {
    "Every figure is the median of its trials. In brackets: its ratio to bare, the same \
     link without a tunnel, measured in the same run (for times, above 1× means slower). \
     On shared machines absolute numbers are noise; compare the ratios. \
     \"> N (limit)\" marks a trial that hit its time limit."
}

/// What the cells of a run of several rounds (`--rounds`) are, shared by
/// the Markdown and HTML reports.
fn rounds_guide(rounds: u32) -> String {
    format!(
        "rounds: {rounds}, interleaved (every system once per round); each cell is \
         the median of the rounds' figures, [low–high] their range"
    )
}

/// A write that failed, naming the file; the `io::Error` is its source.
#[derive(Debug)]
struct WriteFailed {
    path: PathBuf,
    source: io::Error,
}

impl fmt::Display for WriteFailed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "writing {}: {}", self.path.display(), self.source)
    }
}

impl std::error::Error for WriteFailed {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

fn write_file(path: PathBuf, contents: &str) -> io::Result<()> {
    fs::write(&path, contents)
        .map_err(|source| io::Error::new(source.kind(), WriteFailed { path, source }))
}

/// Writes `results.json`, `report.md` and `report.html` into `dir`,
/// creating it if needed.
pub fn write_reports(record: &RunRecord, dir: &Path) -> io::Result<()> {
    fs::create_dir_all(dir).map_err(|source| {
        io::Error::new(
            source.kind(),
            WriteFailed {
                path: dir.to_path_buf(),
                source,
            },
        )
    })?;
    let mut json = serde_json::to_string_pretty(record).map_err(io::Error::other)?;
    json.push('\n');
    write_file(dir.join(RESULTS_FILE), &json)?;
    write_file(dir.join(MARKDOWN_FILE), &markdown::render(record))?;
    write_file(dir.join(HTML_FILE), &html::render(record))?;
    Ok(())
}

/// The compact plain-text table for the end of a run (at most 100
/// columns wide).
pub fn terminal_summary(record: &RunRecord) -> String {
    terminal::render(record)
}

/// `report.md` as a string.
pub fn markdown_report(record: &RunRecord) -> String {
    markdown::render(record)
}

/// `report.html` as a string.
pub fn html_report(record: &RunRecord) -> String {
    html::render(record)
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("no run record at {}: run the lab first, or point at its results directory", path.display())]
    Missing { path: PathBuf },
    #[error("reading {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{} is not a run record: {source}", path.display())]
    Malformed {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
    #[error("{} has no schema_version: not a fjord lab run record", path.display())]
    NoSchemaVersion { path: PathBuf },
    #[error(
        "{} has schema version {found}, this fjord reads version {expected}: \
         redraw it with the fjord that wrote it, or run the lab again",
        path.display()
    )]
    SchemaVersion {
        path: PathBuf,
        found: u64,
        expected: u32,
    },
}

/// Reads the run record in `dir` (its `results.json`; `dir` may also be
/// the file itself). Checks the schema version before the shape, so an
/// older or newer record gets that error rather than a field error.
pub fn load_record(dir: &Path) -> Result<RunRecord, LoadError> {
    read_record(dir)?.into_record()
}

/// A `results.json` read as JSON whose schema version is known, its shape
/// not yet checked: a merge compares the runs' versions before either.
struct StoredRecord {
    path: PathBuf,
    schema_version: u64,
    value: serde_json::Value,
}

fn read_record(dir: &Path) -> Result<StoredRecord, LoadError> {
    let path = if dir.is_file() {
        dir.to_path_buf()
    } else {
        dir.join(RESULTS_FILE)
    };
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) if source.kind() == io::ErrorKind::NotFound => {
            return Err(LoadError::Missing { path });
        }
        Err(source) => return Err(LoadError::Read { path, source }),
    };
    let value: serde_json::Value = match serde_json::from_str(&text) {
        Ok(value) => value,
        Err(source) => return Err(LoadError::Malformed { path, source }),
    };
    let Some(schema_version) = value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64)
    else {
        return Err(LoadError::NoSchemaVersion { path });
    };
    Ok(StoredRecord {
        path,
        schema_version,
        value,
    })
}

impl StoredRecord {
    fn into_record(self) -> Result<RunRecord, LoadError> {
        let StoredRecord {
            path,
            schema_version,
            value,
        } = self;
        if schema_version != u64::from(SCHEMA_VERSION) {
            return Err(LoadError::SchemaVersion {
                path,
                found: schema_version,
                expected: SCHEMA_VERSION,
            });
        }
        serde_json::from_value(value).map_err(|source| LoadError::Malformed { path, source })
    }
}
