//! `guardd --metrics-listen` (issue 34, part 3): a real guardd's `/metrics`, scraped over HTTP and
//! read by the Prometheus org's own OpenMetrics parser (`prometheus_client`, in setup's venv),
//! after calls that were allowed, blocked and diverged.

use std::{net::TcpListener, process::Command};

use serde_json::Value;

use super::support::{self, Guardd, output};

/// Scrapes `http://ADDR/metrics` and prints each sample as JSON: name, labels, value.
const SCRAPE: &str = r#"
import json, sys, urllib.request
from prometheus_client.openmetrics.parser import text_string_to_metric_families
text = urllib.request.urlopen(f"http://{sys.argv[1]}/metrics", timeout=10).read().decode()
for family in text_string_to_metric_families(text):
    for s in family.samples:
        print(json.dumps({"name": s.name, "labels": s.labels, "value": s.value}))
"#;

#[test]
fn metrics_count_decisions_divergences_and_launches_for_a_real_scraper() {
    if !support::privileged("metrics_count_decisions_divergences_and_launches_for_a_real_scraper") {
        return;
    }
    let Some(python) = support::python("metrics") else {
        return;
    };
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let addr = format!("127.0.0.1:{port}");
    let s = super::escape::Setup::new();
    // touch may be read, not run: its exec is a divergence.
    let effects = "read = [\"/usr/bin\"]\nexec = [\"/usr/bin/true\"]\non_divergence = \"deny\"";
    let guardd = Guardd::start_with(&s.policy(effects, ""), &["--metrics-listen", &addr]);
    // Allowed twice, blocked once (no such tool: counted as `(unregistered)`, as every tool the
    // policy does not name), diverged once (an exec it was not given).
    for _ in 0..2 {
        let out = super::escape::call(&guardd, &["ids"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let blocked = output(guardd.exec("no_such_tool", &[]));
    assert_eq!(blocked.status.code(), Some(126), "{blocked:?}");
    let diverged = super::escape::call(&guardd, &["exec", "/usr/bin/touch", "/nonexistent/x"]);
    assert_ne!(diverged.status.code(), Some(0), "{diverged:?}");

    let out = output({
        let mut c = Command::new(&python);
        c.args(["-c", SCRAPE, &addr]);
        c
    });
    assert!(out.status.success(), "the scrape: {out:?}");
    let samples: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let value = |name: &str, want: &[(&str, &str)]| -> f64 {
        samples
            .iter()
            .filter(|s| s["name"] == name)
            .filter(|s| want.iter().all(|(k, v)| s["labels"][k] == *v))
            .filter_map(|s| s["value"].as_f64())
            .sum()
    };
    assert_eq!(
        value(
            "guard_calls_total",
            &[("tool", "tt"), ("decision", "allow")]
        ),
        3.0,
        "{samples:#?}"
    );
    assert_eq!(
        value(
            "guard_calls_total",
            &[("tool", "(unregistered)"), ("decision", "block")]
        ),
        1.0
    );
    assert!(
        value(
            "guard_divergences_total",
            &[("tool", "tt"), ("effect", "exec")]
        ) >= 1.0,
        "{samples:#?}"
    );
    // Three launches timed, none running now, the log's size and the policy in force.
    assert_eq!(
        value("guard_launch_seconds_count", &[]),
        3.0,
        "{samples:#?}"
    );
    assert_eq!(value("guard_calls_running", &[]), 0.0);
    assert!(value("guard_audit_bytes", &[]) > 0.0);
    let policy = samples
        .iter()
        .find(|s| s["name"] == "guard_policy_info")
        .expect("guard_policy_info");
    let sha = policy["labels"]["sha256"].as_str().unwrap_or_default();
    assert_eq!(sha.len(), 64, "{policy}");
    // Anything but /metrics is not found.
    let other = output({
        let mut c = Command::new(&python);
        let get = "import sys, urllib.request, urllib.error\n\
                   try: urllib.request.urlopen(f'http://{sys.argv[1]}/other', timeout=10)\n\
                   except urllib.error.HTTPError as e: print(e.code)";
        c.args(["-c", get, &addr]);
        c
    });
    assert_eq!(String::from_utf8_lossy(&other.stdout).trim(), "404");
}
