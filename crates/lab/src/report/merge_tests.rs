//! Merge tests: two copies of the report fixture merged under two labels
//! (`tests/data/report/expected_merged_report.md` is the golden Markdown;
//! `UPDATE_GOLDEN=1` rewrites it), and the errors a user can run into.

use std::path::{Path, PathBuf};
use std::{env, fs, process};

use super::merge::{
    LabelError, MERGED_FILE, MergeError, RunToMerge, WriteMergedError, load_merged, merge,
    runs_to_merge, write_merged_reports,
};
use super::{HTML_FILE, LoadError, MARKDOWN_FILE, RESULTS_FILE, markdown};

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/report/fixture_results.json")
}

/// A scratch directory holding runs, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = env::temp_dir().join(format!("fjord-merge-{}-{name}", process::id()));
        let _ = fs::remove_dir_all(&path);
        fs::create_dir_all(&path).unwrap();
        Scratch(path)
    }

    /// A run directory `name` holding a copy of the fixture record.
    fn run(&self, name: &str) -> PathBuf {
        let dir = self.0.join(name);
        fs::create_dir_all(&dir).unwrap();
        fs::copy(fixture_path(), dir.join(RESULTS_FILE)).unwrap();
        dir
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn labelled(dir: &Path, label: &str) -> RunToMerge {
    RunToMerge {
        dir: dir.to_path_buf(),
        label: Some(label.to_string()),
    }
}

#[test]
fn merged_columns_carry_both_labels_and_compare_with_their_own_bare() {
    let scratch = Scratch::new("columns");
    let (a, b) = (scratch.run("a"), scratch.run("b"));
    let merged = merge(&[labelled(&a, "site-a"), labelled(&b, "site-b")]).unwrap();
    let report = markdown::render_merged(&merged);
    let bulk = report
        .lines()
        .find(|line| line.starts_with("| parameters") && line.contains("fjord"))
        .expect("the TCP bulk table");
    for column in [
        "bare (site-a)",
        "bare (site-b)",
        "fjord (site-a)",
        "fjord (site-b)",
    ] {
        assert!(bulk.contains(column), "{column} in {bulk}");
    }
    // The fixture's fjord moved 3.08 Gbit/s, 0.33× bare, in both runs;
    // bare's own cells carry no ratio.
    let row = report
        .lines()
        .find(|line| line.starts_with("| direction: left_to_right, streams: 1"))
        .unwrap();
    assert_eq!(row.matches("3.08 Gbit/s (0.33×)").count(), 2, "{row}");
    assert!(!row.contains("9.31 Gbit/s ("), "{row}");
    // Latency's p50 and p99 are compared with the run's own bare.
    assert!(
        report.contains("fjord (site-b) p50"),
        "latency columns by run"
    );
    assert_eq!(
        merged.reference_of("fjord (site-b)").as_deref(),
        Some("bare (site-b)")
    );
}

#[test]
fn merged_markdown_matches_golden() {
    let scratch = Scratch::new("golden");
    let (a, b) = (scratch.run("a"), scratch.run("b"));
    let mut merged = merge(&[labelled(&a, "site-a"), labelled(&b, "site-b")]).unwrap();
    // The scratch directories' paths differ from run to run.
    merged.runs[0].dir = "runs/a".into();
    merged.runs[1].dir = "runs/b".into();
    super::tests::golden(
        "expected_merged_report.md",
        &markdown::render_merged(&merged),
    );
}

#[test]
fn merge_writes_its_own_files_and_never_into_a_run() {
    let scratch = Scratch::new("write");
    let (a, b) = (scratch.run("a"), scratch.run("b"));
    let merged = merge(&[
        RunToMerge {
            dir: a.clone(),
            label: None,
        },
        labelled(&b, "day-2"),
    ])
    .unwrap();
    let labels: Vec<&str> = merged.runs.iter().map(|r| r.label.as_str()).collect();
    assert_eq!(labels, ["a", "day-2"], "the directory's name by default");
    let out = scratch.0.join("merged");
    write_merged_reports(&merged, &out).unwrap();
    for file in [MERGED_FILE, MARKDOWN_FILE, HTML_FILE] {
        assert!(out.join(file).is_file(), "{file} written");
    }
    let html = fs::read_to_string(out.join(HTML_FILE)).unwrap();
    assert!(html.contains("<h2>Runs</h2>"));
    assert!(html.matches("<svg").count() >= 10, "charts drawn");
    assert!(html.contains(">fjord (day-2)</text>"), "charts name runs");

    let before = fs::read_to_string(a.join(RESULTS_FILE)).unwrap();
    let error = write_merged_reports(&merged, &a).unwrap_err();
    assert!(
        matches!(
            error,
            WriteMergedError::Refused(MergeError::OutHoldsARun { .. })
        ),
        "{error}"
    );
    assert_eq!(fs::read_to_string(a.join(RESULTS_FILE)).unwrap(), before);
    assert!(!a.join(MERGED_FILE).exists());
}

#[test]
fn a_run_across_hosts_is_labelled_by_its_pair_and_a_merge_draws_again() {
    let scratch = Scratch::new("pair");
    let (a, b) = (scratch.run("a"), scratch.run("b"));
    // b ran between two hosts, a and b of its inventory.
    let mut record: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(b.join(RESULTS_FILE)).unwrap()).unwrap();
    let host = |name: &str, role: &str| {
        serde_json::json!({
            "name": name, "role": role, "underlay": "198.18.0.1", "kernel": "6.1",
            "cpu_model": "x", "cores": 2, "nic": "eth0", "nic_driver": "veth",
            "nic_speed_mbps": null, "mtu": 1500, "systems": {}, "setup_secs": 1.0
        })
    };
    record["hosts"] = serde_json::json!([host("a", "left"), host("b", "right")]);
    fs::write(b.join(RESULTS_FILE), record.to_string()).unwrap();

    let merged = merge(&[labelled(&a, "ns"), labelled(&b, "run1")]).unwrap();
    let columns: Vec<&str> = merged.columns.iter().map(|c| c.name.as_str()).collect();
    assert!(columns.contains(&"fjord (run1 a→b)"), "{columns:?}");
    assert!(columns.contains(&"fjord (ns)"), "{columns:?}");
    let report = markdown::render_merged(&merged);
    assert!(report.contains("fjord (run1 a→b)"), "{report}");

    let out = scratch.0.join("merged");
    assert!(load_merged(&out).unwrap().is_none(), "no merge yet");
    write_merged_reports(&merged, &out).unwrap();
    fs::remove_file(out.join(MARKDOWN_FILE)).unwrap();
    let again = load_merged(&out).unwrap().expect("the merge written");
    assert_eq!(again, merged);
    write_merged_reports(&again, &out).unwrap();
    assert_eq!(fs::read_to_string(out.join(MARKDOWN_FILE)).unwrap(), report);
}

#[test]
fn merge_errors_name_the_runs() {
    let scratch = Scratch::new("errors");
    let (a, b) = (scratch.run("a"), scratch.run("b"));

    let error = merge(&[labelled(&a, "same"), labelled(&b, "same")]).unwrap_err();
    assert!(
        matches!(error, MergeError::DuplicateLabel { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("\"same\""), "{error}");

    let missing = scratch.0.join("nowhere");
    let error = merge(&[labelled(&a, "a"), labelled(&missing, "n")]).unwrap_err();
    assert!(
        matches!(error, MergeError::Load(LoadError::Missing { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("nowhere"), "{error}");

    let mut value: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(b.join(RESULTS_FILE)).unwrap()).unwrap();
    value["schema_version"] = serde_json::json!(2);
    fs::write(b.join(RESULTS_FILE), value.to_string()).unwrap();
    let error = merge(&[labelled(&a, "a"), labelled(&b, "b")]).unwrap_err();
    assert!(
        matches!(
            error,
            MergeError::SchemaVersionsDiffer {
                first_version: 1,
                other_version: 2,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("different schema versions"));

    fs::write(b.join(RESULTS_FILE), "{ corrupt").unwrap();
    let error = merge(&[labelled(&a, "a"), labelled(&b, "b")]).unwrap_err();
    assert!(
        matches!(error, MergeError::Load(LoadError::Malformed { .. })),
        "{error}"
    );
    assert!(error.to_string().contains("b/results.json"), "{error}");
}

#[test]
fn labels_come_from_dir_equals_label_or_label_flags() {
    let scratch = Scratch::new("labels");
    let a = scratch.run("a");
    let b_arg = PathBuf::from(format!("{}=day 2", scratch.run("b").display()));
    let runs = runs_to_merge(&[a.clone(), b_arg.clone()], &[]).unwrap();
    assert_eq!(runs[0].label, None);
    assert_eq!(runs[1].label.as_deref(), Some("day 2"));
    assert_eq!(runs[1].dir, scratch.0.join("b"));

    let runs = runs_to_merge(std::slice::from_ref(&a), &["site-a".into()]).unwrap();
    assert_eq!(runs[0].label.as_deref(), Some("site-a"));

    assert_eq!(
        runs_to_merge(&[a], &["x".into(), "y".into()]),
        Err(LabelError::TooManyLabels { count: 2, runs: 1 })
    );
    assert!(matches!(
        runs_to_merge(&[b_arg], &["flag".into()]),
        Err(LabelError::TwoLabels { .. })
    ));
}
