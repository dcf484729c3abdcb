//! Report tests: golden files rendered from a committed fixture record
//! (`tests/data/report/`; `UPDATE_GOLDEN=1` rewrites them), the write/load
//! round trip, load errors, escaping, the offline guarantee of the HTML
//! and the terminal width.

use std::path::PathBuf;
use std::{env, fs, process};

use super::axis::Axis;
use super::charts::{self, Chart};
use super::sections::{self, TestKind};
use super::svg::LineChart;
use super::tables;
use super::*;
use crate::results::{Extra, Machine, Measurement, MeasurementStatus, SystemOutcome, SystemStatus};

fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/report")
}

fn fixture() -> RunRecord {
    load_record(&data_dir().join("fixture_results.json")).expect("fixture loads")
}

/// Compares `actual` with the golden file `name`, or rewrites the file
/// when `UPDATE_GOLDEN` is set.
pub(super) fn golden(name: &str, actual: &str) {
    golden_with(name, actual, &[]);
}

/// [`golden`] for a file that stands each placeholder of `substitutions`
/// (`{{STYLE}}`) for its text, which lives in the code only: the
/// comparison substitutes them back, a rewrite puts them in.
fn golden_with(name: &str, actual: &str, substitutions: &[(&str, &str)]) {
    let path = data_dir().join(name);
    if env::var_os("UPDATE_GOLDEN").is_some() {
        let mut stored = actual.to_string();
        for (placeholder, text) in substitutions {
            stored = stored.replacen(text, placeholder, 1);
        }
        fs::write(&path, stored).unwrap();
        return;
    }
    let mut expected = fs::read_to_string(&path).unwrap_or_else(|error| {
        panic!(
            "{}: {error}; create it with UPDATE_GOLDEN=1",
            path.display()
        )
    });
    for (placeholder, text) in substitutions {
        assert_eq!(
            expected.matches(placeholder).count(),
            1,
            "{name} holds {placeholder} once"
        );
        expected = expected.replacen(placeholder, text, 1);
    }
    if expected != actual {
        let line = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from its golden file at line {}:\nexpected: {:?}\nactual:   {:?}\n\
             If the change is intended: UPDATE_GOLDEN=1 cargo test -p fjord-lab --lib report",
            line + 1,
            expected.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Self {
        let path = env::temp_dir().join(format!("fjord-report-{}-{name}", process::id()));
        let _ = fs::remove_dir_all(&path);
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn measurement(
    system: &str,
    test: &str,
    params: &[(&str, serde_json::Value)],
    median: f64,
) -> Measurement {
    Measurement {
        suite: "quick".into(),
        test: test.into(),
        system: system.into(),
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect(),
        unit: "bit/s".into(),
        samples: vec![median],
        median,
        ratio_to_bare: None,
        status: MeasurementStatus::Ok,
        extra: Extra::default(),
        note: None,
    }
}

fn record(systems: &[&str], measurements: Vec<Measurement>) -> RunRecord {
    let mut record = RunRecord {
        schema_version: SCHEMA_VERSION,
        fjord_version: "test".into(),
        started_at: "2026-11-22T00:00:00Z".into(),
        duration_secs: 1.0,
        rounds: 1,
        machine: Machine {
            cpus: 2,
            kernel: "6.18.0".into(),
            cpu_model: "test cpu".into(),
        },
        suites: vec!["quick".into()],
        systems: systems
            .iter()
            .map(|name| SystemOutcome {
                name: name.to_string(),
                status: SystemStatus::Ran,
                reason: None,
                version: None,
            })
            .collect(),
        measurements,
        hosts: Vec::new(),
    };
    record.compute_ratios();
    record
}

#[test]
fn markdown_matches_golden() {
    golden("expected_report.md", &markdown_report(&fixture()));
}

/// The fixture with two values of each swept parameter (the first and
/// the last it records), so the golden page keeps every kind of table and
/// chart without repeating near-identical rows and charts for each value
/// between; the Markdown and chart goldens render the whole fixture.
fn small_fixture() -> RunRecord {
    let mut record = fixture();
    let mut values: std::collections::BTreeMap<(String, String, String), Vec<String>> =
        Default::default();
    for m in &record.measurements {
        for (key, value) in &m.params {
            let seen = values
                .entry((m.suite.clone(), m.test.clone(), key.clone()))
                .or_default();
            if !seen.contains(&value.to_string()) {
                seen.push(value.to_string());
            }
        }
    }
    let kept = |m: &Measurement| {
        m.params.iter().all(|(key, value)| {
            let seen = &values[&(m.suite.clone(), m.test.clone(), key.clone())];
            let value = value.to_string();
            seen.len() <= 2 || [seen.first(), seen.last()].contains(&Some(&value))
        })
    };
    record.measurements.retain(kept);
    record
}

#[test]
fn html_matches_golden() {
    golden_with(
        "expected_report.html",
        &html_report(&small_fixture()),
        &[("{{STYLE}}", html::STYLE)],
    );
}

#[test]
fn terminal_summary_matches_golden() {
    golden("expected_terminal.txt", &terminal_summary(&fixture()));
}

/// The charts of the first section of `suite`/`test` (and `direction`).
fn fixture_charts(suite: &str, test: &str, direction: Option<&str>) -> Vec<String> {
    let record = fixture();
    let order = sections::system_order(&record);
    let sections = sections::sections(&record);
    let section = sections
        .iter()
        .find(|s| {
            s.suite == suite
                && s.test == test
                && direction.is_none_or(|d| {
                    s.split
                        .iter()
                        .any(|(k, v)| *k == "direction" && v.as_str() == Some(d))
                })
        })
        .expect("section in fixture");
    charts::section_charts(section, &order)
        .iter()
        .map(Chart::to_svg)
        .collect()
}

#[test]
fn charts_match_golden() {
    let throughput = fixture_charts("throughput", "rfc2544_throughput", Some("right_to_left"));
    assert_eq!(throughput.len(), 1);
    golden("expected_chart_throughput.svg", &throughput[0]);
    let latency = fixture_charts("latency", "rtt", None);
    assert_eq!(latency.len(), 3, "one chart per payload");
    golden("expected_chart_latency.svg", &latency[0]);
    let loss = fixture_charts("loss", "transfer_time", None);
    golden("expected_chart_loss.svg", &loss[0]);
    let bulk = fixture_charts("quick", "tcp_bulk", None);
    golden("expected_chart_quick_tcp.svg", &bulk[0]);

    let cdf = LineChart::cdf(
        "RTT distribution",
        Axis::linear("ms"),
        vec![
            (
                "bare".into(),
                0,
                (1..=25).map(|i| 0.006 + i as f64 * 0.0002).collect(),
            ),
            (
                "fjord".into(),
                1,
                (1..=25).map(|i| 0.03 + (i * i) as f64 * 0.0001).collect(),
            ),
        ],
    );
    golden("expected_chart_cdf.svg", &cdf.to_svg());
}

#[test]
fn rendering_is_deterministic() {
    let record = fixture();
    assert_eq!(html_report(&record), html_report(&record));
    assert_eq!(markdown_report(&record), markdown_report(&record));
}

#[test]
fn html_is_self_contained() {
    let html = html_report(&fixture());
    for forbidden in [
        "http://", "https://", "<script", "src=", "@import", "url(", "<link",
    ] {
        assert!(
            !html.contains(forbidden),
            "report.html contains {forbidden:?}"
        );
    }
    assert!(html.starts_with("<!DOCTYPE html>"));
    assert!(html.ends_with("</html>\n"));
    assert_eq!(html.matches("<svg").count(), html.matches("</svg>").count());
    // Charts: two RFC 2544 sweeps and the quick one, four latency bar
    // charts, the loss sweep, TCP bulk bars (quick, bdp), IMIX bars.
    assert!(
        html.matches("<svg").count() >= 10,
        "{}",
        html.matches("<svg").count()
    );
}

#[test]
fn write_then_load_round_trips() {
    let scratch = Scratch::new("round-trip");
    let record = fixture();
    write_reports(&record, &scratch.0).unwrap();
    for file in [RESULTS_FILE, MARKDOWN_FILE, HTML_FILE] {
        assert!(scratch.0.join(file).is_file(), "{file} written");
    }
    let json = fs::read_to_string(scratch.0.join(RESULTS_FILE)).unwrap();
    assert!(json.contains("\n  \"schema_version\": 1"), "pretty printed");
    assert_eq!(load_record(&scratch.0).unwrap(), record);
}

#[test]
fn load_errors_say_what_is_wrong() {
    let scratch = Scratch::new("load-errors");
    let error = load_record(&scratch.0).unwrap_err();
    assert!(matches!(error, LoadError::Missing { .. }), "{error}");
    assert!(error.to_string().contains("results.json"), "{error}");

    fs::create_dir_all(&scratch.0).unwrap();
    let path = scratch.0.join(RESULTS_FILE);
    let mut value: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(data_dir().join("fixture_results.json")).unwrap())
            .unwrap();
    value["schema_version"] = serde_json::json!(2);
    value["measurements"] = serde_json::json!("changed shape");
    fs::write(&path, value.to_string()).unwrap();
    let error = load_record(&scratch.0).unwrap_err();
    assert!(
        matches!(
            error,
            LoadError::SchemaVersion {
                found: 2,
                expected: 1,
                ..
            }
        ),
        "{error}"
    );
    assert!(error.to_string().contains("schema version 2"), "{error}");

    fs::write(&path, "{\"measurements\": []}").unwrap();
    let error = load_record(&scratch.0).unwrap_err();
    assert!(
        matches!(error, LoadError::NoSchemaVersion { .. }),
        "{error}"
    );

    fs::write(&path, "{\"schema_version\": 1}").unwrap();
    let error = load_record(&scratch.0).unwrap_err();
    assert!(matches!(error, LoadError::Malformed { .. }), "{error}");

    fs::write(&path, "not json").unwrap();
    assert!(matches!(
        load_record(&scratch.0),
        Err(LoadError::Malformed { .. })
    ));
}

#[test]
fn record_text_is_escaped_everywhere() {
    let evil = "<img src=x onerror=alert(1)>|*x*";
    let mut bare = measurement("bare", "tcp_bulk", &[], 10e9);
    bare.note = Some("</td><script>bad()</script>".into());
    let mut tunnel = measurement(evil, "tcp_bulk", &[], 1e9);
    tunnel.note = Some("a | b".into());
    let record = record(&["bare", evil], vec![bare, tunnel]);

    let html = html_report(&record);
    assert!(!html.contains("<img"), "system name escaped in HTML");
    assert!(!html.contains("<script"), "note escaped in HTML");
    assert!(html.contains("&lt;img src=x onerror=alert(1)&gt;"));
    for chart in charts::section_charts(&sections::sections(&record)[0], &[]) {
        assert!(!chart.to_svg().contains("<img"));
    }

    let markdown = markdown_report(&record);
    assert!(!markdown.contains("<img") && !markdown.contains("<script"));
    assert!(markdown.contains("a \\| b"), "pipes cannot split a cell");

    let terminal = terminal_summary(&record);
    assert!(!terminal.contains('\u{1b}'));
}

#[test]
fn terminal_summary_fits_100_columns() {
    let fixture_summary = terminal_summary(&fixture());
    let names = [
        "bare",
        "fjord",
        "wireguard-go",
        "boringtun",
        "vpncloud",
        "openvpn",
        "ssh",
        "a-peer-with-a-very-long-name-indeed-it-goes-on",
        "tinc",
        "nebula",
        "zerotier",
        "tailscale",
    ];
    let measurements = names
        .iter()
        .enumerate()
        .map(|(index, name)| {
            measurement(
                name,
                "tcp_bulk",
                &[("streams", serde_json::json!(1))],
                1e9 / (index + 1) as f64,
            )
        })
        .collect();
    let many = terminal_summary(&record(&names, measurements));
    for summary in [&fixture_summary, &many] {
        for line in summary.lines() {
            assert!(
                line.chars().count() <= terminal::WIDTH,
                "too wide: {line:?}"
            );
        }
    }
    for name in ["tailscale", "zerotier", "bare"] {
        assert!(many.contains(name), "{name} missing:\n{many}");
    }
    assert!(fixture_summary.contains("skipped vpncloud: not installed"));
    assert!(fixture_summary.contains("failed ssh:"));
}

#[test]
fn sections_order_systems_and_rows() {
    let frames = |system: &str, size: i64| {
        let mut m = measurement(
            system,
            "rfc2544_throughput",
            &[
                ("frame_size", serde_json::json!(size)),
                ("direction", serde_json::json!("left_to_right")),
            ],
            1e5,
        );
        m.unit = "frames/s".into();
        m.extra.frame_rate.get_or_insert_default().link_bits_per_sec = Some(100e6);
        m
    };
    let record = record(
        &["openvpn", "fjord", "boringtun", "bare"],
        vec![
            frames("openvpn", 1518),
            frames("fjord", 64),
            frames("bare", 1518),
            frames("bare", 64),
            frames("boringtun", 512),
        ],
    );
    assert_eq!(
        sections::system_order(&record),
        ["bare", "fjord", "openvpn", "boringtun"]
    );
    let sections = sections::sections(&record);
    assert_eq!(sections.len(), 1, "one direction, one section");
    let section = &sections[0];
    assert_eq!(section.kind, TestKind::Rfc2544);
    assert_eq!(section.row_keys, ["frame_size"]);
    let sizes: Vec<f64> = section.rows.iter().filter_map(|r| r.x()).collect();
    assert_eq!(sizes, [64.0, 512.0, 1518.0], "numeric order");

    let table = &tables::section_tables(section)[0];
    assert_eq!(table.header[1], "theoretical max");
    // 100 Mbit/s Ethernet carries 148,810 frames/s of 64 bytes.
    assert_eq!(table.rows[0][1], "148,810 fps");
    assert!(
        table.caption.contains("link: 100.0 Mbit/s"),
        "{}",
        table.caption
    );
    // fjord at 64 bytes: 100 kfps is 51.2 Mbit/s, 67.2 % of the line rate.
    let fjord = table
        .header
        .iter()
        .position(|h| h == "fjord Mbit/s (% line)")
        .unwrap();
    assert_eq!(table.rows[0][fjord], "51.20 (67.2 %)");
}

#[test]
fn line_rates_match_the_reference_study() {
    assert_eq!(
        format::thousands(tables::line_rate_fps(100e6, 64.0)),
        "148,810"
    );
    assert_eq!(
        format::thousands(tables::line_rate_fps(10e9, 64.0)),
        "14,880,952"
    );
    assert_eq!(
        format::thousands(tables::line_rate_fps(10e9, 1518.0)),
        "812,744"
    );
}

#[test]
fn unknown_tests_get_the_generic_table() {
    let mut bare = measurement("bare", "new_test", &[("size", serde_json::json!(3))], 2.0);
    bare.unit = "widgets".into();
    let mut fjord = measurement("fjord", "new_test", &[("size", serde_json::json!(3))], 1.0);
    fjord.unit = "widgets".into();
    let mut other = measurement("fjord", "new_test", &[("size", serde_json::json!(1))], 4.0);
    other.unit = "widgets".into();
    let record = record(&["bare", "fjord"], vec![bare, fjord, other]);
    let sections = sections::sections(&record);
    let table = &tables::section_tables(&sections[0])[0];
    assert_eq!(table.title, "new_test");
    assert_eq!(table.header, ["size", "bare", "fjord"]);
    assert_eq!(table.rows[0], ["1", MISSING_CELL, "4.00 widgets"]);
    assert_eq!(table.rows[1], ["3", "2.00 widgets", "1.00 widgets (0.50×)"]);
    assert!(markdown_report(&record).contains("### new_test"));
}

const MISSING_CELL: &str = sections::MISSING;

#[test]
fn timed_out_and_failed_cells() {
    let record = fixture();
    let markdown = markdown_report(&record);
    assert!(markdown.contains("> 120.0 s (limit, > "), "timed-out cells");
    assert!(markdown.contains("| failed |") || markdown.contains(" failed |"));
    assert!(markdown.contains("receiver exited early"), "notes are kept");
    assert!(
        markdown
            .lines()
            .any(|line| line.contains("vpncloud") && line.contains("| skipped")),
        "systems section"
    );
}

#[test]
fn soak_rows_show_memory_by_minute_and_growth() {
    let mib = 1_048_576.0;
    let minute = |system: &str, at: f64, median: f64, peak: f64| {
        let mut m = measurement(
            system,
            "rss_under_load",
            &[
                ("minute", serde_json::json!(at)),
                ("streams", serde_json::json!(4)),
            ],
            median,
        );
        m.suite = "soak".into();
        m.unit = "bytes".into();
        let figures = m.extra.memory.get_or_insert_default();
        figures.peak_bytes = Some(peak);
        figures.bits_per_sec = Some(4.5e9);
        m
    };
    let mut growth = measurement(
        "fjord",
        "rss_growth",
        &[("minutes", serde_json::json!(10.0))],
        2.0,
    );
    growth.suite = "soak".into();
    growth.unit = "percent".into();
    let figures = growth.extra.memory.get_or_insert_default();
    figures.first_peak_bytes = Some(10.0 * mib);
    figures.last_peak_bytes = Some(10.2 * mib);
    let mut record = record(
        &["bare", "fjord"],
        vec![
            minute("fjord", 1.0, 9.5 * mib, 10.0 * mib),
            minute("fjord", 2.0, 9.6 * mib, 10.2 * mib),
            growth,
        ],
    );
    record.suites = vec!["soak".into()];
    let sections = sections::sections(&record);
    let memory = &tables::section_tables(&sections[0])[0];
    assert_eq!(memory.title, "Resident memory under load");
    // bare has no tunnel processes, so it gets no column.
    assert_eq!(memory.header, ["minute", "fjord"]);
    assert_eq!(
        memory.rows[1],
        ["2.0", "10.07 MB · peak 10.70 MB · 4.50 Gbit/s"]
    );
    let growth = &tables::section_tables(&sections[1])[0];
    assert_eq!(growth.title, "Resident memory growth");
    assert_eq!(growth.rows[0][1], "+2.0 % (10.49 MB → 10.70 MB)");
    assert_eq!(
        charts::section_charts(&sections[0], &["bare", "fjord"]).len(),
        1
    );
    assert!(
        markdown_report(&record)
            .contains("## Soak: memory, transfers and counters under sustained load")
    );
}

#[test]
fn soak_totals_and_counter_balance_read_as_counts() {
    let soak_row = |test: &str, params: &[(&str, serde_json::Value)], unit: &str, median: f64| {
        let mut m = measurement("fjord", test, params, median);
        m.suite = "soak".into();
        m.unit = unit.into();
        m
    };
    let mut transfers = soak_row("soak_transfers", &[], "transfers", 120.0);
    let figures = transfers.extra.soak.get_or_insert_default();
    figures.transfers = Some(120);
    figures.digest_mismatches = Some(0);
    figures.failed_transfers = Some(1);
    transfers.extra.memory.get_or_insert_default().bits_per_sec = Some(2.5e9);
    let mut rekeys = soak_row("soak_rekeys", &[], "rekeys", 118.0);
    let flood = rekeys.extra.flood.get_or_insert_default();
    flood.initiations_computed = Some(123);
    let balance = |direction: &str, sent: u64, received: u64| {
        let mut m = soak_row(
            "counter_balance",
            &[("direction", serde_json::json!(direction))],
            "bytes",
            (sent - received) as f64,
        );
        let figures = m.extra.soak.get_or_insert_default();
        figures.sent_bytes = Some(sent);
        figures.received_bytes = Some(received);
        figures.dropped_datagrams = Some(2);
        figures.intervals = Some(20);
        figures.unexplained_intervals = Some(0);
        m
    };
    let mut record = record(
        &["bare", "fjord"],
        vec![
            transfers,
            rekeys,
            balance("left → right", 5_000_000_000, 4_999_997_096),
            balance("right → left", 80_000_000, 80_000_000),
        ],
    );
    record.suites = vec!["soak".into()];
    let sections = sections::sections(&record);
    let table = |test: &str| {
        let section = sections.iter().find(|s| s.test == test).unwrap();
        tables::section_tables(section).remove(0)
    };
    let transfers = table("soak_transfers");
    assert_eq!(transfers.title, "Digest-checked transfers, back to back");
    assert_eq!(
        transfers.rows[0][1],
        "120 transfers · 0 digest mismatches · 1 failed · 2.50 Gbit/s"
    );
    assert_eq!(
        table("soak_rekeys").rows[0][1],
        "118 rekeys · 123 handshakes"
    );
    let counters = table("counter_balance");
    assert_eq!(counters.header, ["direction", "fjord"]);
    assert_eq!(counters.rows.len(), 2);
    assert!(
        counters.rows[0][1].ends_with("2 datagrams dropped · 20/20 intervals explained"),
        "{:?}",
        counters.rows[0]
    );
}

#[test]
fn flood_rows_show_the_ratio_to_no_flood_and_the_handshake_work() {
    let row = |system: &str, test: &str, flood: &str, unit: &str, median: f64| {
        let mut m = measurement(system, test, &[("flood", serde_json::json!(flood))], median);
        m.suite = "attack".into();
        m.unit = unit.into();
        m
    };
    let mut flooded = row("fjord", "flood_throughput", "20000/s", "bit/s", 1.9e9);
    flooded.extra.flood.get_or_insert_default().no_flood_ratio = Some(0.95);
    let mut fjord_work = row(
        "fjord",
        "flood_handshakes",
        "20000/s",
        "replies/s",
        19_990.0,
    );
    let mut drops = fjord_proto::DropCounters::default();
    drops.count_many(fjord_proto::DropReason::CookieRequired, 59_970);
    drops.count_many(fjord_proto::DropReason::InvalidMac1, 3);
    fjord_work.extra = Extra {
        flood: Some(crate::results::Flood {
            initiations_computed: Some(0),
            drops: Some(crate::results::Drops(drops)),
            socket_drops: Some(30),
            window_secs: Some(3.0),
            flood_sent_per_sec: Some(20_001.0),
            ..Default::default()
        }),
        ..Extra::default()
    };
    let mut go_work = row(
        "wireguard-go",
        "flood_handshakes",
        "20000/s",
        "replies/s",
        20_000.0,
    );
    let figures = go_work.extra.flood.get_or_insert_default();
    figures.window_secs = Some(3.0);
    figures.socket_drops = Some(0);
    let mut timed_out = row("wireguard-go", "restart_recovery", "max", "s", 30.0);
    timed_out.status = MeasurementStatus::TimedOut;
    let mut record = record(
        &["fjord", "wireguard-go"],
        vec![
            row("fjord", "flood_throughput", "none", "bit/s", 2e9),
            flooded,
            fjord_work,
            go_work,
            row("fjord", "flood_handshakes", "max", "replies/s", 60_000.0),
            row("fjord", "restart_recovery", "none", "s", 0.09),
            row("fjord", "restart_recovery", "max", "s", 0.12),
            row("wireguard-go", "restart_recovery", "none", "s", 0.1),
            timed_out,
        ],
    );
    record.suites = vec!["attack".into()];
    let sections = sections::sections(&record);
    assert!(sections.iter().all(|s| s.kind == TestKind::Flood));
    let tables: Vec<tables::Table> = sections.iter().flat_map(tables::section_tables).collect();

    let throughput = &tables[0];
    assert_eq!(throughput.header, ["flood", "fjord"]);
    assert_eq!(throughput.rows[0], ["none", "2.00 Gbit/s"]);
    assert_eq!(
        throughput.rows[1],
        ["20000/s", "1.90 Gbit/s (0.95× no flood)"]
    );

    let work = &tables[1];
    assert_eq!(
        work.rows[0],
        [
            "20000/s",
            "19,990/s cookie · 0/s DH · 10/s dropped unread (sent 20,001/s)",
            "20,000/s cookie · n/a DH · 0/s dropped unread (sent n/a)",
        ]
    );

    let refused = &tables[2];
    assert_eq!(
        refused.title,
        "Datagrams refused by the responder during the flood"
    );
    assert_eq!(refused.header, ["flood", "fjord", "wireguard-go"]);
    assert_eq!(
        refused.rows[0],
        [
            "20000/s",
            "cookie_required 19,990/s · invalid_mac1 1/s",
            "n/a"
        ]
    );
    assert_eq!(refused.rows[1][1], "n/a");

    let restart = &tables[3];
    assert_eq!(restart.header, ["flood", "fjord", "wireguard-go"]);
    assert_eq!(restart.rows[1], ["max", "0.120 s", "> 30.00 s (limit)"]);
    assert!(markdown_report(&record).contains("## Handshake flood on the responder"));
}

#[test]
fn peers_rows_show_the_ratio_to_one_peer_the_ceiling_and_memory_per_peer() {
    let row = |test: &str, peers: u64, unit: &str, median: f64| {
        let mut params = vec![("peers", serde_json::json!(peers))];
        if test == "peers_zero_loss" {
            params.push(("frame_size", serde_json::json!(64)));
        }
        let mut m = measurement("fjord", test, &params, median);
        m.suite = "peers".into();
        m.unit = unit.into();
        m
    };
    let trial = |received: u64| crate::results::TrialRecord {
        run: 0,
        offered_fps: 1.0,
        sent_fps: 1.0,
        offered: received,
        received,
        lost: 0,
        sender_max_lag_ms: 0.0,
        passed: true,
        discarded: false,
    };
    let mut one = row("peers_zero_loss", 1, "frames/s", 100_000.0);
    let figures = one.extra.peers.get_or_insert_default();
    figures.one_peer_ratio = Some(1.0);
    figures.emulator_ceiling_fps = Some(400_000.0);
    one.extra.cost.get_or_insert_default().cpu_seconds = Some(2.0);
    one.extra.frame_rate.get_or_insert_default().trials =
        Some(vec![trial(200_000), trial(200_000)]);
    let mut thousand = row("peers_zero_loss", 1000, "frames/s", 93_000.0);
    let figures = thousand.extra.peers.get_or_insert_default();
    figures.one_peer_ratio = Some(0.93);
    figures.emulator_ceiling_fps = Some(380_000.0);
    thousand.extra.cost.get_or_insert_default().cpu_seconds = Some(2.2);
    thousand.extra.frame_rate.get_or_insert_default().trials = Some(vec![trial(400_000)]);
    let mut memory = row("peers_memory", 1000, "bytes", 12.0 * 1048576.0);
    memory.extra.peers.get_or_insert_default().per_peer_bytes = Some(2048.0);
    let mut tcp_one = row("peers_tcp", 1, "bit/s", 2.0e9);
    let cost = tcp_one.extra.cost.get_or_insert_default();
    cost.cpu_seconds_per_gbit = Some(0.5);
    let mut tcp = row("peers_tcp", 100, "bit/s", 1.5e9);
    tcp.extra.cost.get_or_insert_default().cpu_seconds_per_gbit = Some(0.8);
    let figures = tcp.extra.peers.get_or_insert_default();
    figures.one_peer_ratio = Some(0.75);
    figures.emulator_cpu_seconds_per_gbit = Some(1.1);
    let mut record = record(
        &["fjord"],
        vec![
            one,
            thousand,
            row("peers_memory", 1, "bytes", 10.0 * 1048576.0),
            memory,
            tcp_one,
            tcp,
        ],
    );
    record.suites = vec!["peers".into()];
    let sections = sections::sections(&record);
    assert!(sections.iter().all(|s| s.kind == TestKind::Peers));
    let tables: Vec<tables::Table> = sections.iter().flat_map(tables::section_tables).collect();

    let rates = &tables[0];
    assert!(
        rates.caption.starts_with("frame size: 64 · "),
        "{}",
        rates.caption
    );
    assert_eq!(
        rates.header,
        [
            "peers",
            "fjord frames/s",
            "fjord CPU/frame",
            "fjord emulator alone"
        ]
    );
    assert_eq!(
        rates.rows[1],
        [
            "1000",
            "93.00 kfps (0.93× 1 peer)",
            "5.50 µs (1.10×)",
            "380,000 fps"
        ]
    );
    assert_eq!(rates.rows[0][2], "5.00 µs (1.00×)");
    assert_eq!(tables[1].rows[1][1], "12.58 MB · 2.05 kB/peer");
    assert_eq!(tables[2].rows[0][1], "2.00 Gbit/s · 0.500 s/Gbit (1.00×)");
    assert_eq!(
        tables[2].rows[1][1],
        "1.50 Gbit/s (0.75× 1 peer) · 0.800 s/Gbit (1.60×) (emulator 1.10)"
    );
    assert!(markdown_report(&record).contains("## Many peers of one responder"));
    let summary = terminal_summary(&record);
    assert!(summary.contains("0.93×1p"), "{summary}");
}

#[test]
fn terminal_shows_the_theoretical_goodput_and_each_share_of_it() {
    let goodput = |system: &str, content: &str, median: f64| {
        let mut m = measurement(
            system,
            "compressible_transfer",
            &[("content", serde_json::json!(content))],
            median,
        );
        let figures = m.extra.bulk.get_or_insert_default();
        figures.theoretical_goodput_bits_per_sec = Some(94.15e6);
        figures.efficiency = Some(median / 94.15e6);
        m
    };
    let record = record(
        &["bare", "fjord-compress"],
        vec![
            goodput("bare", "text", 90e6),
            goodput("fjord-compress", "text", 300e6),
            goodput("bare", "random", 90e6),
            goodput("fjord-compress", "random", 85e6),
        ],
    );
    let summary = terminal_summary(&record);
    assert!(
        summary.contains("%: of the theoretical goodput"),
        "{summary}"
    );
    let header = summary
        .lines()
        .find(|line| line.contains("theoretical") && line.contains("fjord-compress"))
        .unwrap_or_else(|| panic!("no header with the theoretical column:\n{summary}"));
    assert!(header.find("theoretical") < header.find("bare"), "{header}");
    let row = summary
        .lines()
        .find(|line| line.trim_start().starts_with("text"))
        .unwrap_or_else(|| panic!("no text row:\n{summary}"));
    assert!(row.contains("96%"), "bare's share: {row}");
    assert!(row.contains("319%"), "fjord-compress's share: {row}");
}

#[test]
fn mtu_rows_show_each_sides_cpu_and_the_best_ping_average() {
    let bulk = |system: &str, mtu: u16, median: f64| {
        let mut m = measurement(
            system,
            "tcp_bulk",
            &[
                ("mtu", serde_json::json!(mtu)),
                ("underlay_mtu", serde_json::json!(mtu + 98)),
            ],
            median,
        );
        m.suite = "mtu".into();
        if system != "bare" {
            let figures = m.extra.cost.get_or_insert_default();
            figures.cpu_left_percent = Some(45.0);
            figures.cpu_right_percent = Some(38.25);
        }
        m
    };
    let ping = |payload: u16, average: f64| {
        let mut m = measurement(
            "fjord",
            "ping_average",
            &[
                ("mtu", serde_json::json!(1400)),
                ("payload", serde_json::json!(payload)),
            ],
            average,
        );
        m.suite = "mtu".into();
        m.unit = "ms".into();
        m.extra.ping.get_or_insert_default().p50 = Some(average - 0.003);
        m
    };
    let mut record = record(
        &["bare", "vpncloud-tap"],
        vec![
            bulk("bare", 1400, 9e9),
            bulk("vpncloud-tap", 1400, 885e6),
            bulk("vpncloud-tap", 16384, 947e6),
            ping(50, 0.052),
            ping(500, 0.055),
        ],
    );
    record.suites = vec!["mtu".into()];
    let sections = sections::sections(&record);
    let bulk_tables = tables::section_tables(&sections[0]);
    assert_eq!(bulk_tables[0].header[..2], ["mtu", "underlay mtu"]);
    assert_eq!(bulk_tables[0].rows[1][..2], ["16384", "16482"]);
    let cost = &bulk_tables[1];
    assert!(cost.rows[0][3].contains("L 45.0 % · R 38.2 %"), "{cost:?}");
    assert!(cost.caption.contains("left (sending)"), "{}", cost.caption);
    let ping = &tables::section_tables(&sections[1])[0];
    assert_eq!(ping.header, ["payload (bytes)", "fjord avg", "fjord p50"]);
    assert_eq!(ping.rows[0][2], "0.049 ms");
    assert!(markdown_report(&record).contains("jumbo underlay"));
}

#[test]
fn a_run_of_rounds_shows_each_figures_range_and_says_what_the_cells_are() {
    let streams = [("streams", serde_json::json!(1))];
    let mut fjord = measurement("fjord", "tcp_bulk", &streams, 5.77e9);
    fjord.extra.rounds.get_or_insert_default().round_medians = Some(vec![5.14e9, 5.77e9, 6.58e9]);
    let mut bulk = record(
        &["bare", "fjord"],
        vec![measurement("bare", "tcp_bulk", &streams, 12.2e9), fjord],
    );
    bulk.rounds = 3;
    let markdown = markdown_report(&bulk);
    assert!(
        markdown.contains(r"5.77 Gbit/s (0.47×) \[5.14–6.58 Gbit/s\]"),
        "{markdown}"
    );
    assert!(markdown.contains("rounds: 3, interleaved"), "{markdown}");
    assert!(html_report(&bulk).contains("[5.14–6.58 Gbit/s]"));
    assert!(terminal_summary(&bulk).contains("median of 3 interleaved rounds"));
    // A latency row: the range follows the p50, which the rounds' figures
    // are, and not the p99.
    let mut rtt = measurement("fjord", "rtt", &[("payload", serde_json::json!(56))], 0.19);
    rtt.unit = "ms".into();
    rtt.extra.ping.get_or_insert_default().p99 = Some(0.29);
    rtt.extra.rounds.get_or_insert_default().round_medians = Some(vec![0.187, 0.19, 0.232]);
    let mut bare = measurement("bare", "rtt", &[("payload", serde_json::json!(56))], 0.044);
    bare.unit = "ms".into();
    bare.extra.ping.get_or_insert_default().p99 = Some(0.074);
    let mut latency = record(&["bare", "fjord"], vec![bare, rtt]);
    latency.rounds = 3;
    let markdown = markdown_report(&latency);
    assert_eq!(
        markdown.matches(r"\[0.187–0.232 ms\]").count(),
        1,
        "{markdown}"
    );
    // Back from results.json as written.
    let text = serde_json::to_string(&bulk).unwrap();
    let back: RunRecord = serde_json::from_str(&text).unwrap();
    assert_eq!(back.rounds, 3);
    assert_eq!(
        back.measurements[1].extra.rounds,
        bulk.measurements[1].extra.rounds
    );
}

#[test]
fn records_without_rounds_read_as_one_round() {
    let mut value = serde_json::to_value(record(&["bare"], Vec::new())).unwrap();
    assert!(value.get("rounds").is_none(), "one round is not written");
    value.as_object_mut().unwrap().remove("rounds");
    let back: RunRecord = serde_json::from_value(value).unwrap();
    assert_eq!(back.rounds, 1);
}
