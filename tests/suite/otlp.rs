//! `guardd --otlp-endpoint` (issue 34, part 3): a real guardd exports its audit rows and events
//! to a collector over OTLP/HTTP. The collector is a small Python HTTP server decoding each
//! request with OpenTelemetry's own protobuf types (`opentelemetry-proto`, in setup's venv), not
//! with guard's code; the records it got are checked against the audit log's file, row by row.
//! And a collector that is down costs the calls nothing: they decide and run as before, and the
//! records that could not go are counted as dropped.

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader, Read as _, Write as _},
    net::{TcpListener, TcpStream},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::support::{self, Guardd, output};

/// An OTLP/HTTP collector of logs: prints its port, then one JSON line per log record received
/// (with the request's path, content type, resource and scope), and answers each request with
/// an empty `ExportLogsServiceResponse`.
const COLLECTOR: &str = r#"
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import (
    ExportLogsServiceRequest, ExportLogsServiceResponse)

def value(v):
    kind = v.WhichOneof("value")
    return getattr(v, kind) if kind else None

class Collector(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        request = ExportLogsServiceRequest()
        request.ParseFromString(body)
        for rl in request.resource_logs:
            resource = {a.key: value(a.value) for a in rl.resource.attributes}
            for sl in rl.scope_logs:
                for r in sl.log_records:
                    print(json.dumps({
                        "path": self.path,
                        "content_type": self.headers["Content-Type"],
                        "resource": resource,
                        "scope": sl.scope.name,
                        "attributes": {a.key: value(a.value) for a in r.attributes},
                        "body": value(r.body),
                        "severity": r.severity_number,
                        "time": r.time_unix_nano,
                    }), flush=True)
        reply = ExportLogsServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass

server = HTTPServer(("127.0.0.1", 0), Collector)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// The Python collector, killed on drop, and the records it printed so far.
struct Collector {
    child: Child,
    port: u16,
    records: Arc<Mutex<Vec<Value>>>,
}

impl Collector {
    fn start(python: &std::path::Path) -> Self {
        let mut child = Command::new(python)
            .args(["-u", "-c", COLLECTOR])
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the collector");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let port = lines
            .next()
            .and_then(Result::ok)
            .and_then(|l| l.trim().parse().ok())
            .expect("the collector's port");
        let records = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&records);
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                let record: Value = serde_json::from_str(&line).expect("a record as JSON");
                seen.lock().expect("lock").push(record);
            }
        });
        Self {
            child,
            port,
            records,
        }
    }

    fn records(&self) -> Vec<Value> {
        self.records.lock().expect("lock").clone()
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The audit log's lines as written.
fn audit_lines(guardd: &Guardd) -> Vec<String> {
    std::fs::read_to_string(&guardd.audit)
        .expect("the audit log")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Waits up to 20 s for `done` to hold.
fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "waited 20 s for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `guardctl status --json`.
fn status(guardd: &Guardd) -> Value {
    let out = output(guardd.ctl(&["status", "--json"]));
    assert!(out.status.success(), "{out:?}");
    serde_json::from_slice(&out.stdout).expect("status as JSON")
}

/// A policy with `tt`, which may run `ids`, and no other tool: `no_such_tool` is blocked.
fn policy(s: &super::escape::Setup) -> String {
    s.policy("read = [\"/usr/bin\"]\nexec = [\"/usr/bin/true\"]", "")
}

#[test]
fn every_audit_row_and_event_reaches_a_real_collector_with_its_place_in_the_chain() {
    let test = "every_audit_row_and_event_reaches_a_real_collector_with_its_place_in_the_chain";
    if !support::privileged(test) {
        return;
    }
    let Some(python) = support::python("otlp") else {
        return;
    };
    let collector = Collector::start(&python);
    let s = super::escape::Setup::new();
    // The collector's base URL: guardd posts to its /v1/logs.
    let url = format!("http://127.0.0.1:{}", collector.port);
    let guardd = Guardd::start_with(&policy(&s), &["--otlp-endpoint", &url]);
    let allowed = super::escape::call(&guardd, &["ids"]);
    assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
    let allowed_id = guardd.last_decision_id();
    let blocked = output(guardd.exec("no_such_tool", &[]));
    assert_eq!(blocked.status.code(), Some(126), "{blocked:?}");

    let lines = audit_lines(&guardd);
    let rows: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str(l).expect("a row"))
        .collect();
    assert!(
        rows.len() >= 3,
        "a decision and a finished row, a decision row: {rows:#?}"
    );
    let by_seq = |records: &[Value]| -> HashMap<u64, Value> {
        records
            .iter()
            .filter(|r| r["scope"] == "guard.audit")
            .filter_map(|r| Some((r["attributes"]["guard.row_seq"].as_u64()?, r.clone())))
            .collect()
    };
    wait_for("a record of every audit row", || {
        let got = by_seq(&collector.records());
        rows.iter()
            .all(|r| r["seq"].as_u64().is_some_and(|s| got.contains_key(&s)))
    });
    let records = collector.records();
    let exported = by_seq(&records);
    // Each row: its line as written, its kind, call, tool and decision, and its chain links.
    for (line, row) in lines.iter().zip(&rows) {
        let seq = row["seq"].as_u64().expect("seq");
        let r = &exported[&seq];
        let a = &r["attributes"];
        assert_eq!(r["body"], line.as_str(), "{r}");
        assert_eq!(a["guard.row_hash"], row["hash"], "{r}");
        assert_eq!(a["guard.row_prev"], row["prev"], "{r}");
        assert_eq!(a["guard.kind"], row["kind"], "{r}");
        for field in ["call_id", "tool"] {
            if let Some(v) = row.get(field) {
                assert_eq!(&a[format!("guard.{field}")], v, "{r}");
            }
        }
        if row["kind"] == "decision" {
            assert_eq!(a["guard.decision"], row["decision"]["decision"], "{r}");
        }
    }
    chain_checks(&python, &exported);
    let decision_of = |tool: &str| {
        rows.iter()
            .find(|r| r["kind"] == "decision" && r["tool"] == tool)
            .and_then(|r| exported.get(&r["seq"].as_u64()?))
            .map(|r| r["attributes"]["guard.decision"].clone())
    };
    assert_eq!(decision_of("tt"), Some(json!("allow")));
    assert_eq!(decision_of("no_such_tool"), Some(json!("block")));

    // The bus's events: the allowed call's decision, launch and exit; the blocked decision.
    wait_for("the calls' events", || {
        let records = collector.records();
        records.iter().any(|r| {
            r["scope"] == "guard.events"
                && r["attributes"]["guard.kind"] == "exit"
                && r["attributes"]["guard.call_id"] == allowed_id.as_str()
        })
    });
    let records = collector.records();
    let event = |kind: &str, key: &str, value: &str| {
        records
            .iter()
            .find(|r| {
                r["scope"] == "guard.events"
                    && r["attributes"]["guard.kind"] == kind
                    && r["attributes"][key] == value
            })
            .cloned()
    };
    for kind in ["decision", "launch", "exit"] {
        let e = event(kind, "guard.call_id", &allowed_id).unwrap_or_else(|| panic!("{kind}"));
        let body: Value = serde_json::from_str(e["body"].as_str().expect("body")).expect("JSON");
        assert_eq!(
            (body["kind"].as_str(), body["call_id"].as_str()),
            (Some(kind), Some(allowed_id.as_str()))
        );
        assert_eq!(e["attributes"]["guard.tool"], "tt", "{e}");
    }
    let block = event("decision", "guard.tool", "no_such_tool").expect("the blocked decision");
    assert_eq!(block["attributes"]["guard.decision"], "block", "{block}");

    // Every record: from this host's guardd, posted as protobuf to /v1/logs.
    let version = output({
        let mut c = Command::new(support::bin("guardd"));
        c.arg("--version");
        c
    });
    let version = String::from_utf8_lossy(&version.stdout);
    let version = version.split_whitespace().nth(1).expect("guardd's version");
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").expect("hostname");
    for r in &records {
        assert_eq!(r["path"], "/v1/logs", "{r}");
        assert_eq!(r["content_type"], "application/x-protobuf", "{r}");
        assert_eq!(r["resource"]["host.name"], host.trim(), "{r}");
        assert_eq!(r["resource"]["service.name"], "guardd", "{r}");
        assert_eq!(r["resource"]["service.version"], version, "{r}");
        assert!(r["time"].as_u64().is_some_and(|t| t > 0), "{r}");
    }
    // guardctl status counts what was sent, and nothing dropped.
    let export = &status(&guardd)["export"];
    assert_eq!(export["endpoint"], format!("{url}/v1/logs"), "{export}");
    assert!(
        export["sent"].as_u64() >= Some(records.len() as u64),
        "{export}"
    );
    assert_eq!(export["dropped"], 0, "{export}");
}

/// Runs the book's check (docs/book/src/operating/fleet.md) of a chain from its records on `records` (by seq): it says they
/// hold, and that one changed body breaks them.
fn chain_checks(python: &std::path::Path, records: &HashMap<u64, Value>) {
    let check = support::doc_block("docs/book/src/operating/fleet.md", "otlp-chain");
    let run = |input: String| {
        let mut child = Command::new(python)
            .args(["-c", &check])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("python");
        let mut stdin = child.stdin.take().expect("stdin");
        stdin.write_all(input.as_bytes()).expect("write");
        drop(stdin);
        child.wait_with_output().expect("wait")
    };
    let lines = |tamper: Option<u64>| -> String {
        records
            .iter()
            .map(|(seq, r)| {
                let a = &r["attributes"];
                let mut body = r["body"].as_str().expect("body").to_owned();
                if tamper == Some(*seq) {
                    body = body.replacen("\"kind\":\"", "\"kind\":\"x", 1);
                }
                let row = json!({"body": body, "seq": seq, "hash": a["guard.row_hash"],
                                 "prev": a["guard.row_prev"]});
                format!("{row}\n")
            })
            .collect()
    };
    let out = run(lines(None));
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        said.trim(),
        format!("ok: {} rows", records.len()),
        "{out:?}"
    );
    let first = records.keys().min().copied();
    let out = run(lines(first));
    assert!(
        !out.status.success(),
        "a changed body went unnoticed: {out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not hash"),
        "{out:?}"
    );
}

/// `GET /metrics` of a guardd, as text.
fn scrape(addr: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to /metrics");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: guardd\r\n\r\n")
        .expect("request");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read /metrics");
    text
}

/// The value of `name` (no labels) in metrics `text`.
fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

#[test]
fn a_collector_that_is_down_costs_the_calls_nothing_and_its_drops_are_counted() {
    if !support::privileged(
        "a_collector_that_is_down_costs_the_calls_nothing_and_its_drops_are_counted",
    ) {
        return;
    }
    // A port nothing listens on: every connect is refused.
    let free = |_| {
        let l = TcpListener::bind("127.0.0.1:0").expect("a free port");
        l.local_addr().expect("addr").port()
    };
    let (down, metrics) = (free(0), free(1));
    let url = format!("http://127.0.0.1:{down}/v1/logs");
    let addr = format!("127.0.0.1:{metrics}");
    let s = super::escape::Setup::new();
    let args = [
        "--otlp-endpoint",
        url.as_str(),
        "--metrics-listen",
        addr.as_str(),
    ];
    let guardd = Guardd::start_with(&policy(&s), &args);
    // Each call well within the 1.5 s of backoff a batch's retries take before it is dropped:
    // a call that waited for the export would take that long at least.
    let timed = |cmd: Command| {
        let start = Instant::now();
        let out = output(cmd);
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(1400),
            "a call took {took:?}: {out:?}"
        );
        out
    };
    for _ in 0..3 {
        let allowed = timed(guardd.exec("tt", &["a0=ids"]));
        assert_eq!(allowed.status.code(), Some(0), "{allowed:?}");
        let blocked = timed(guardd.exec("no_such_tool", &[]));
        assert_eq!(blocked.status.code(), Some(126), "{blocked:?}");
    }
    // Both calls were decided and recorded as ever.
    let rows = guardd.audit_rows();
    let decided = |d: &str| {
        rows.iter()
            .filter(|r| r["kind"] == "decision" && r["decision"]["decision"] == d)
            .count()
    };
    assert_eq!((decided("allow"), decided("block")), (3, 3), "{rows:#?}");
    wait_for("the records to be dropped, counted", || {
        status(&guardd)["export"]["dropped"].as_u64() >= Some(rows.len() as u64)
    });
    let export = &status(&guardd)["export"];
    assert_eq!(export["sent"], 0, "{export}");
    assert!(export["failed"].as_u64() > Some(1), "retried: {export}");
    let text = scrape(&addr);
    let dropped = metric(&text, "guard_export_dropped_total").expect(&text);
    assert!(dropped >= rows.len() as f64, "{text}");
    assert_eq!(
        metric(&text, "guard_export_sent_total"),
        Some(0.0),
        "{text}"
    );
    // guardctl status says so to a person too.
    let shown = output(guardd.ctl(&["status"]));
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains(&format!("export {url}")) && shown.contains(" dropped"),
        "{shown}"
    );
}

#[test]
fn an_endpoint_guardd_cannot_send_to_stops_the_start_naming_the_option() {
    let dir = support::TempDir::new("guard-otlp-config");
    let policy = dir.join("policy.toml");
    std::fs::write(
        &policy,
        "[tools.t]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n",
    )
    .expect("policy");
    let config = dir.join("guardd.toml");
    let check = |flags: &[&str]| {
        let mut c = Command::new(support::bin("guardd"));
        c.arg("--policy").arg(&policy).arg("--config").arg(&config);
        c.args(flags).arg("--check-config");
        let out = output(c);
        let said = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.code(),
            said + &String::from_utf8_lossy(&out.stderr),
        )
    };
    // From the file, named with its line and key; a flag overrides the file's.
    std::fs::write(&config, "otlp_endpoint = \"https://collector:4318\"\n").expect("config");
    let (code, said) = check(&[]);
    assert_eq!(code, Some(1), "{said}");
    assert!(
        said.contains("otlp_endpoint") && said.contains("https is not supported"),
        "{said}"
    );
    std::fs::write(&config, "otlp_endpoint = \"http://file:4318/v1/logs\"\n").expect("config");
    let (code, said) = check(&[]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("otlp_endpoint = \"http://file:4318/v1/logs\""),
        "{said}"
    );
    let (code, said) = check(&["--otlp-endpoint", "http://127.0.0.1:4318"]);
    assert_eq!(code, Some(0), "{said}");
    assert!(
        said.contains("otlp_endpoint = \"http://127.0.0.1:4318/v1/logs\""),
        "{said}"
    );
    // From the flag, named by clap.
    std::fs::write(&config, "").expect("config");
    let (code, said) = check(&["--otlp-endpoint", "http://collector:99999"]);
    assert_ne!(code, Some(0), "{said}");
    assert!(
        said.contains("--otlp-endpoint") && said.contains("port"),
        "{said}"
    );
    // Off when not given.
    let (code, said) = check(&[]);
    assert_eq!(code, Some(0), "{said}");
    assert!(!said.contains("otlp_endpoint"), "{said}");
}
