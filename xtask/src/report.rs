//! The bench's report (`target/bench/report.json`, written by `guard-bench`) as the Markdown
//! table of the book's performance page: each row with its baseline, ratio and goal, and one
//! line that says the commit and the host the numbers came from.

use std::fmt::Write as _;

use serde_json::Value;

/// The table and its provenance, as Markdown.
pub fn render(report: &Value) -> String {
    let host = &report["host"];
    let commit = report["commit"].as_str().unwrap_or("an unrecorded commit");
    let kernel = host["kernel"].as_str().unwrap_or("?");
    let cpus = host["cpus"].as_u64().unwrap_or(0);
    let model = host["cpu"]
        .as_str()
        .map_or(String::new(), |m| format!(", {m}"));
    let run = if report["quick"].as_bool() == Some(true) {
        "`cargo xtask bench --quick`"
    } else {
        "`cargo xtask bench`"
    };
    let goals = &report["goals"];
    let mut out = format!(
        "Measured by {run} at {commit} on a host of {cpus} CPUs (Linux {kernel}{model}): {} of \
         {} goals met. `cargo xtask docs` made this table from `target/bench/report.json`.\n\n\
         | row | guard | baseline | ratio | goal | met |\n|---|---|---|---|---|---|\n",
        goals["met"], goals["of"]
    );
    let rows = report["rows"].as_array().map_or(&[][..], Vec::as_slice);
    for row in rows {
        let unit = row["unit"].as_str().unwrap_or("");
        let baseline = match (row["baseline"].as_f64(), row["baseline_name"].as_str()) {
            (Some(v), Some(name)) => format!("{} ({name})", num(v, unit)),
            _ => String::new(),
        };
        let ratio = row["ratio"]
            .as_f64()
            .map_or(String::new(), |r| format!("{r:.2}x"));
        let met = match row["met"].as_bool() {
            _ if row["informational"].as_bool() == Some(true) => "info",
            Some(true) => "yes",
            Some(false) => "no",
            None => "no (no baseline)",
        };
        let cells = [
            cell(row["metric"].as_str().unwrap_or("?")),
            row["guard"]
                .as_f64()
                .map_or(String::new(), |v| num(v, unit)),
            cell(&baseline),
            ratio,
            cell(row["goal"].as_str().unwrap_or("")),
            met.to_owned(),
        ];
        let _ = writeln!(out, "| {} |", cells.join(" | "));
    }
    let notes: Vec<&Value> = rows
        .iter()
        .filter(|r| r["note"].as_str().is_some_and(|n| !n.is_empty()))
        .collect();
    if !notes.is_empty() {
        out.push('\n');
        for r in notes {
            let _ = writeln!(
                out,
                "- {}: {}",
                cell(r["metric"].as_str().unwrap_or("?")),
                r["note"].as_str().unwrap_or("")
            );
        }
    }
    for skipped in report["skipped"].as_array().map_or(&[][..], Vec::as_slice) {
        let _ = writeln!(out, "\nNot measured: {}", skipped.as_str().unwrap_or("?"));
    }
    out
}

/// A value with its unit, to about three significant digits (as `guard-bench` prints it).
fn num(v: f64, unit: &str) -> String {
    let digits = if v == 0.0 || v.abs() >= 100.0 {
        0
    } else if v.abs() >= 10.0 {
        1
    } else {
        2
    };
    if unit.is_empty() {
        format!("{v:.digits$}")
    } else {
        format!("{v:.digits$} {unit}")
    }
}

/// Text for a table cell: a `|` would end the cell.
fn cell(text: &str) -> String {
    text.replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_renders_with_its_commit_host_and_each_row() {
        let report = serde_json::json!({
            "quick": false,
            "commit": "abc1234",
            "host": {"cpus": 2, "kernel": "6.18.0", "cpu": "AMD EPYC"},
            "goals": {"met": 1, "of": 2},
            "rows": [
                {"metric": "check p50", "unit": "µs", "guard": 39.2, "baseline": 41.0,
                 "baseline_name": "echo server", "ratio": 0.956, "goal": "ratio <= 1.2",
                 "met": true, "informational": false, "note": ""},
                {"metric": "a | b", "unit": "ms", "guard": 2.25, "baseline": null,
                 "baseline_name": null, "ratio": null, "goal": "info", "met": null,
                 "informational": true, "note": "why"}
            ],
            "skipped": ["firejail: not installed"]
        });
        let text = render(&report);
        assert!(
            text.starts_with(
                "Measured by `cargo xtask bench` at abc1234 on a host of 2 CPUs (Linux 6.18.0, \
                 AMD EPYC): 1 of 2 goals met."
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "| check p50 | 39.2 µs | 41.0 µs (echo server) | 0.96x | ratio <= 1.2 | yes |"
            ),
            "{text}"
        );
        assert!(
            text.contains("| a \\| b | 2.25 ms |  |  | info | info |"),
            "{text}"
        );
        assert!(text.contains("- a \\| b: why"), "{text}");
        assert!(
            text.contains("Not measured: firejail: not installed"),
            "{text}"
        );
    }
}
