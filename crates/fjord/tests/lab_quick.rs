//! The README's main command, end to end: `fjord lab quick` builds its
//! hosts, measures bare and fjord, writes the reports, and leaves nothing
//! behind.

use std::process::Command;

use fjord_lab::report::load_record;
use fjord_lab::results::{MeasurementStatus, SystemStatus};

const FJORD: &str = env!("CARGO_BIN_EXE_fjord");

#[test]
fn quick_lab_reports_bare_and_fjord() {
    let out = std::env::temp_dir().join(format!("fjord-lab-quick-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let run = Command::new(FJORD)
        .args(["lab", "quick", "--out", out.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(
        run.status.success(),
        "fjord lab quick failed:\n{stdout}\n{stderr}"
    );
    println!("{stdout}");

    let record = load_record(&out).unwrap();
    for system in ["bare", "fjord"] {
        let outcome = record.systems.iter().find(|s| s.name == system).unwrap();
        assert_eq!(outcome.status, SystemStatus::Ran, "{outcome:?}");
        let rows: Vec<_> = record
            .measurements
            .iter()
            .filter(|m| m.system == system)
            .collect();
        for test in ["tcp_bulk", "rfc2544_throughput", "rtt"] {
            let row = rows
                .iter()
                .find(|m| m.test == test)
                .unwrap_or_else(|| panic!("{system} has no {test} row"));
            assert_eq!(row.status, MeasurementStatus::Ok, "{row:?}");
            assert!(row.median > 0.0, "{system} {test} is zero: {row:?}");
        }
        let tcp = rows.iter().find(|m| m.test == "tcp_bulk").unwrap();
        assert_eq!(tcp.extra.verified(), Some(true), "{tcp:?}");
    }
    let fjord_tcp = record
        .measurements
        .iter()
        .find(|m| m.system == "fjord" && m.test == "tcp_bulk")
        .unwrap();
    assert!(fjord_tcp.ratio_to_bare.is_some_and(|r| r > 0.0));
    for file in ["results.json", "report.md", "report.html"] {
        assert!(out.join(file).is_file(), "{file} missing");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg"), "the HTML report has no chart");

    // Teardown: no namespace of the lab process (named fj<its pid>-…) is left.
    let listing = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    let leftovers: Vec<&str> = listing
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| {
            name.strip_prefix("fj")
                .and_then(|rest| rest.split('-').next())
                .and_then(|pid| pid.parse::<u32>().ok())
                .is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    assert!(
        leftovers.is_empty(),
        "namespaces left behind: {leftovers:?}"
    );
    let _ = std::fs::remove_dir_all(&out);
}

/// Ctrl-C during a suite ends the run before the suite's next step, and
/// what was measured is still written.
#[test]
fn interrupted_run_stops_at_the_next_step_and_keeps_its_rows() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let out = std::env::temp_dir().join(format!("fjord-lab-stop-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let mut child = Command::new(FJORD)
        .args([
            "lab",
            "run",
            "--suite",
            "latency",
            "--systems",
            "bare,fjord",
        ])
        .args(["--out", out.to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let first_step = line.contains("bare: latency:");
        seen.push(line);
        if first_step {
            fjord_sys::process::send_signal(child.id(), libc::SIGINT).unwrap();
            break;
        }
    }
    seen.extend(lines.map_while(Result::ok));
    let status = child.wait().unwrap();
    let log = seen.join("\n");
    assert!(!status.success(), "an interrupted run must say so:\n{log}");
    assert!(log.contains("interrupted"), "{log}");

    let record = load_record(&out).unwrap();
    let rtt_rows = |system: &str| {
        record
            .measurements
            .iter()
            .filter(|m| m.system == system && m.test == "rtt")
            .count()
    };
    assert_eq!(rtt_rows("bare"), 1, "only the step under way ends:\n{log}");
    assert_eq!(rtt_rows("fjord"), 0, "{log}");
    let _ = std::fs::remove_dir_all(&out);
}
