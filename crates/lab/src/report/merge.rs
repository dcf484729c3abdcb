//! Several runs in one report (`fjord lab report A B C --out DIR`): runs
//! on other hosts or other days side by side, so "site A to site B, fjord
//! against WireGuard against IPsec" is one page.
//!
//! Flow: every run's `results.json` is read and their schema versions
//! compared before any is parsed; each run gets a label ([`run_label`]);
//! each of its systems becomes the column `system (label)`, or
//! `system (label left→right)` for a run across hosts ([`column_name`]);
//! the runs' suites and measurements are joined. A
//! table is the union of the runs' tables: a run's columns appear in the
//! tables it measured, and a row it lacks reads "–". Every figure keeps its
//! ratio to the bare of its own run, the one measured on the same link at
//! the same time; bare's own cells carry none, as in a run's report.
//!
//! The merge is written as `merged.json` ([`MergedRecord`]) beside the
//! merged `report.md` and `report.html` (which [`load_merged`] reads
//! back to draw them again); the runs' own directories are never written
//! to.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::sections::{REFERENCE, system_order};
use super::tables::Table;
use super::{
    HTML_FILE, LoadError, MARKDOWN_FILE, RESULTS_FILE, StoredRecord, format, html, markdown,
    read_record, write_file,
};
use crate::results::{Machine, Measurement, RunRecord, SCHEMA_VERSION, SystemOutcome};

/// The merge's record inside the output directory.
pub const MERGED_FILE: &str = "merged.json";

/// A run to merge: its directory (or its `results.json`), and the label
/// the command line gave it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct RunToMerge {
    pub dir: PathBuf,
    pub label: Option<String>,
}

/// `merged.json`: the runs merged, the columns they became, and the joined
/// tables. `systems` and `measurements` are the runs' own, each named by
/// its column (`fjord (site-a)`) instead of its system.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MergedRecord {
    /// The schema version every merged run has.
    pub schema_version: u32,
    /// In the order given.
    pub runs: Vec<MergedRun>,
    /// In report order: by system (bare, fjord, the others), then by run.
    pub columns: Vec<MergedColumn>,
    /// Every run's suites, in order of first appearance.
    pub suites: Vec<String>,
    pub systems: Vec<SystemOutcome>,
    pub measurements: Vec<Measurement>,
}

/// What a merged run's own record says of it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MergedRun {
    pub label: String,
    /// The run's directory (or `results.json`) as given.
    pub dir: String,
    pub fjord_version: String,
    /// RFC 3339 UTC start time.
    pub started_at: String,
    pub duration_secs: f64,
    pub rounds: u32,
    pub machine: Machine,
    pub suites: Vec<String>,
    /// `left→right`: the hosts a run across hosts measured between
    /// (`None`: namespaces on one machine).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosts: Option<String>,
}

/// One column of the merged tables: a system of one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MergedColumn {
    /// Its heading, and the `system` of its rows in `measurements`.
    pub name: String,
    pub system: String,
    /// The run's label.
    pub run: String,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(
        "{} has schema version {first_version} but {} has {other_version}: runs of \
         different schema versions cannot be merged; redraw the older with the fjord \
         that wrote it, or run it again",
        first.display(),
        other.display()
    )]
    SchemaVersionsDiffer {
        first: PathBuf,
        first_version: u64,
        other: PathBuf,
        other_version: u64,
    },
    #[error(
        "{} and {} are both labelled {label:?}: give one another label (DIR=label or --label)",
        first.display(),
        second.display()
    )]
    DuplicateLabel {
        label: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error("the label of {} is empty", dir.display())]
    EmptyLabel { dir: PathBuf },
    #[error(
        "{} holds a run's own results.json: the merged report goes to a directory of its \
         own (--out), so no run's results are overwritten",
        out.display()
    )]
    OutHoldsARun { out: PathBuf },
}

/// A command line's runs that could not be labelled.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LabelError {
    #[error("{count} labels for {runs} runs: give at most one --label per run, in order")]
    TooManyLabels { count: usize, runs: usize },
    #[error("{} has two labels, {given:?} and --label {flag:?}: give one", dir.display())]
    TwoLabels {
        dir: PathBuf,
        given: String,
        flag: String,
    },
}

/// The runs of `fjord lab report A B=label …` and its `--label`s: an
/// argument naming an existing path is a run as it stands; otherwise
/// `DIR=label` labels the run in `DIR` (split at the last `=`, so a label
/// holds none). `--label`s label the runs in order.
pub fn runs_to_merge(args: &[PathBuf], labels: &[String]) -> Result<Vec<RunToMerge>, LabelError> {
    if labels.len() > args.len() {
        return Err(LabelError::TooManyLabels {
            count: labels.len(),
            runs: args.len(),
        });
    }
    args.iter()
        .enumerate()
        .map(|(index, arg)| {
            let given = match arg.to_str().and_then(|text| text.rsplit_once('=')) {
                Some((dir, label)) if !arg.exists() => Some((PathBuf::from(dir), label)),
                _ => None,
            };
            let flag = labels.get(index);
            match (given, flag) {
                (Some((dir, given)), Some(flag)) => Err(LabelError::TwoLabels {
                    dir,
                    given: given.to_string(),
                    flag: flag.clone(),
                }),
                (Some((dir, given)), None) => Ok(RunToMerge {
                    dir,
                    label: Some(given.to_string()),
                }),
                (None, flag) => Ok(RunToMerge {
                    dir: arg.clone(),
                    label: flag.cloned(),
                }),
            }
        })
        .collect()
}

/// The label of a run: the one given, else the name of its directory
/// (the directory holding it, for a `results.json` given as a file).
pub fn run_label(given: Option<&str>, dir: &Path) -> String {
    if let Some(label) = given {
        return label.to_string();
    }
    let dir = if dir.is_file() {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    // `.` and `..` have no name of their own; their full path does.
    let named = dir
        .file_name()
        .map(PathBuf::from)
        .or_else(|| fs::canonicalize(dir).ok()?.file_name().map(PathBuf::from));
    named
        .unwrap_or_else(|| dir.to_path_buf())
        .display()
        .to_string()
}

/// What a column of `run` is called after the system: its label, and
/// for a run across hosts the pair it measured between (`run1 a→b`), so
/// one page holds "site A to site B" beside "site A to site C".
fn column_label(run: &MergedRun) -> String {
    match &run.hosts {
        Some(pair) => format!("{} {pair}", run.label),
        None => run.label.clone(),
    }
}

/// The heading of `system`'s column of `run`: `fjord (site-a)`, or
/// `fjord (run1 a→b)` across hosts.
pub fn column_name(system: &str, run: &MergedRun) -> String {
    format!("{system} ({})", column_label(run))
}

/// `left→right` of a run across hosts, by the hosts' inventory names.
fn host_pair(record: &RunRecord) -> Option<String> {
    let named = |role: &str| {
        record
            .hosts
            .iter()
            .find(|host| host.role == role)
            .map(|host| host.name.as_str())
    };
    Some(format!("{}→{}", named("left")?, named("right")?))
}

/// Reads the merge written into `dir` (its `merged.json`), to draw its
/// reports again; `None` if `dir` holds no merge.
pub fn load_merged(dir: &Path) -> Result<Option<MergedRecord>, LoadError> {
    let path = dir.join(MERGED_FILE);
    let text = match fs::read_to_string(&path) {
        Ok(text) => text,
        Err(source) if source.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LoadError::Read { path, source }),
    };
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|source| LoadError::Malformed {
            path: path.clone(),
            source,
        })?;
    let found = value
        .get("schema_version")
        .and_then(serde_json::Value::as_u64);
    match found {
        None => Err(LoadError::NoSchemaVersion { path }),
        Some(found) if found != u64::from(SCHEMA_VERSION) => Err(LoadError::SchemaVersion {
            path,
            found,
            expected: SCHEMA_VERSION,
        }),
        Some(_) => serde_json::from_value(value)
            .map(Some)
            .map_err(|source| LoadError::Malformed { path, source }),
    }
}

/// Reads and joins `runs`, in the order given. Schema versions are
/// compared before any record is parsed, so a mix gets that error rather
/// than a field error.
pub fn merge(runs: &[RunToMerge]) -> Result<MergedRecord, MergeError> {
    let stored: Vec<StoredRecord> = runs
        .iter()
        .map(|run| read_record(&run.dir))
        .collect::<Result<_, _>>()?;
    if let Some(first) = stored.first()
        && let Some(other) = stored
            .iter()
            .find(|s| s.schema_version != first.schema_version)
    {
        return Err(MergeError::SchemaVersionsDiffer {
            first: first.path.clone(),
            first_version: first.schema_version,
            other: other.path.clone(),
            other_version: other.schema_version,
        });
    }
    let mut records: Vec<(MergedRun, RunRecord)> = Vec::new();
    for (run, stored) in runs.iter().zip(stored) {
        let label = run_label(run.label.as_deref(), &run.dir);
        if label.trim().is_empty() {
            return Err(MergeError::EmptyLabel {
                dir: run.dir.clone(),
            });
        }
        if let Some(earlier) = records.iter().position(|(merged, _)| merged.label == label) {
            return Err(MergeError::DuplicateLabel {
                label,
                first: runs[earlier].dir.clone(),
                second: run.dir.clone(),
            });
        }
        let record = stored.into_record()?;
        let merged = MergedRun {
            label,
            dir: run.dir.display().to_string(),
            fjord_version: record.fjord_version.clone(),
            started_at: record.started_at.clone(),
            duration_secs: record.duration_secs,
            rounds: record.rounds,
            machine: record.machine.clone(),
            suites: record.suites.clone(),
            hosts: host_pair(&record),
        };
        records.push((merged, record));
    }
    Ok(join(records))
}

/// One record of the runs' tables, each system renamed to its column.
fn join(records: Vec<(MergedRun, RunRecord)>) -> MergedRecord {
    // Systems across runs: bare, fjord, then the others as the runs order
    // them; a system's columns sit side by side, run after run.
    let mut systems: Vec<&str> = Vec::new();
    for (_, record) in &records {
        for system in system_order(record) {
            if !systems.contains(&system) {
                systems.push(system);
            }
        }
    }
    systems.sort_by_key(|system| match *system {
        REFERENCE => 0,
        "fjord" => 1,
        _ => 2,
    });
    let mut columns = Vec::new();
    let mut outcomes = Vec::new();
    for system in &systems {
        for (run, record) in &records {
            if !system_order(record).contains(system) {
                continue;
            }
            let name = column_name(system, run);
            if let Some(outcome) = record.systems.iter().find(|s| s.name == *system) {
                outcomes.push(SystemOutcome {
                    name: name.clone(),
                    ..outcome.clone()
                });
            }
            columns.push(MergedColumn {
                name,
                system: system.to_string(),
                run: run.label.clone(),
            });
        }
    }
    let mut suites: Vec<String> = Vec::new();
    let mut measurements = Vec::new();
    for (run, record) in &records {
        for suite in &record.suites {
            if !suites.contains(suite) {
                suites.push(suite.clone());
            }
        }
        for m in &record.measurements {
            let mut m = m.clone();
            if m.system == REFERENCE {
                // Bare's cells carry no ratio; in a run's own report the
                // renderer knows bare by its name, here by this.
                m.ratio_to_bare = None;
            }
            m.system = column_name(&m.system, run);
            measurements.push(m);
        }
    }
    let schema_version = records.first().map_or(0, |(_, r)| r.schema_version);
    MergedRecord {
        schema_version,
        runs: records.into_iter().map(|(run, _)| run).collect(),
        columns,
        suites,
        systems: outcomes,
        measurements,
    }
}

impl MergedRecord {
    /// The column `column` is compared with: the bare of its own run.
    pub fn reference_of(&self, column: &str) -> Option<String> {
        let run = &self.columns.iter().find(|c| c.name == column)?.run;
        self.columns
            .iter()
            .find(|c| c.run == *run && c.system == REFERENCE)
            .map(|c| c.name.clone())
    }

    /// The joined tables as one run record, for the renderers' tables and
    /// charts, which read only its suites, systems and measurements; the
    /// runs' own metadata is in [`runs_table`].
    pub(super) fn tables_record(&self) -> RunRecord {
        let first = self.runs.first();
        RunRecord {
            schema_version: self.schema_version,
            fjord_version: first.map(|r| r.fjord_version.clone()).unwrap_or_default(),
            started_at: first.map(|r| r.started_at.clone()).unwrap_or_default(),
            duration_secs: self.runs.iter().map(|r| r.duration_secs).sum(),
            rounds: self.runs.iter().map(|r| r.rounds).max().unwrap_or(1),
            machine: first.map_or_else(
                || Machine {
                    cpus: 0,
                    kernel: String::new(),
                    cpu_model: String::new(),
                },
                |r| r.machine.clone(),
            ),
            suites: self.suites.clone(),
            systems: self.systems.clone(),
            measurements: self.measurements.clone(),
            hosts: Vec::new(),
        }
    }
}

/// The "Runs" table: each run's label, directory, fjord, start, length,
/// rounds, machine and suites.
pub(super) fn runs_table(merged: &MergedRecord) -> Table {
    let rows = merged
        .runs
        .iter()
        .map(|run| {
            let machine = &run.machine;
            vec![
                run.label.clone(),
                run.hosts.clone().unwrap_or_else(|| "namespaces".into()),
                run.dir.clone(),
                run.fjord_version.clone(),
                run.started_at.clone(),
                format::quantity(run.duration_secs, "s"),
                run.rounds.to_string(),
                format!(
                    "{} CPUs · {} · Linux {}",
                    machine.cpus, machine.cpu_model, machine.kernel
                ),
                run.suites.join(", "),
            ]
        })
        .collect();
    Table {
        title: "Runs".to_string(),
        caption: String::new(),
        header: [
            "run",
            "between",
            "directory",
            "fjord",
            "started",
            "duration",
            "rounds",
            "machine",
            "suites",
        ]
        .map(String::from)
        .to_vec(),
        label_columns: 9,
        rows,
        notes: Vec::new(),
    }
}

/// How to read a merged report's columns, shared by Markdown and HTML.
pub(super) fn merge_guide(merged: &MergedRecord) -> String {
    let labels: Vec<&str> = merged.runs.iter().map(|r| r.label.as_str()).collect();
    format!(
        "{} runs merged ({}). Every column is \"system (run)\", with the pair of hosts \
         for a run across hosts (\"run1 a→b\"); a figure's ratio is to \
         the bare of its own run, measured on the same link at the same time, so compare \
         runs by their ratios. A table shows the runs that measured it; \"–\": the run \
         lacks that row.",
        merged.runs.len(),
        labels.join(", ")
    )
}

/// Writes `merged.json`, `report.md` and `report.html` into `out`,
/// creating it if needed; refuses a directory holding a run's own
/// `results.json`.
pub fn write_merged_reports(merged: &MergedRecord, out: &Path) -> Result<(), WriteMergedError> {
    if out.join(RESULTS_FILE).exists() {
        return Err(MergeError::OutHoldsARun {
            out: out.to_path_buf(),
        }
        .into());
    }
    fs::create_dir_all(out).map_err(|source| {
        io::Error::new(
            source.kind(),
            super::WriteFailed {
                path: out.to_path_buf(),
                source,
            },
        )
    })?;
    let mut json = serde_json::to_string_pretty(merged).map_err(io::Error::other)?;
    json.push('\n');
    write_file(out.join(MERGED_FILE), &json)?;
    write_file(out.join(MARKDOWN_FILE), &markdown::render_merged(merged))?;
    write_file(out.join(HTML_FILE), &html::render_merged(merged))?;
    Ok(())
}

/// Why the merged reports were not written.
#[derive(Debug, thiserror::Error)]
pub enum WriteMergedError {
    #[error(transparent)]
    Refused(#[from] MergeError),
    #[error(transparent)]
    Io(#[from] io::Error),
}
