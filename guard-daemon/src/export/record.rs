//! Rows and events as OTLP log records (the official protobuf types of `opentelemetry-proto`),
//! and the resource they come from.
//!
//! A record's body is the row's line exactly as the log wrote it (so its hash can be checked
//! from the body alone: see the book's `operating/fleet.md`), or the event as `guardctl events --json` prints
//! it. Its attributes name what a store filters on: `guard.kind`, `guard.call_id`, `guard.tool`,
//! `guard.decision`, and for a row its place in the chain (`guard.row_seq`, `guard.row_hash`,
//! `guard.row_prev`). Rows are in the scope `guard.audit`, events in `guard.events`.

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest,
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value::Value as Any},
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber},
    resource::v1::Resource,
};
use prost::Message as _;
use serde_json::{Map, Value};

use super::Item;
use crate::{
    audit::Appended,
    bus::{Event, What},
};

/// The scope of the audit log's records.
pub(super) const AUDIT_SCOPE: &str = "guard.audit";
/// The scope of the event bus's records.
pub(super) const EVENTS_SCOPE: &str = "guard.events";
/// guardd's version (the library and the binaries are one package).
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// This host's name (of guardd's UTS namespace), empty when it cannot be read.
pub(super) fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_default()
}

/// The resource every record comes from: this host's guardd.
pub(super) fn resource(host: &str) -> Resource {
    Resource {
        attributes: vec![
            string("host.name", host),
            string("service.name", "guardd"),
            string("service.version", VERSION),
        ],
        ..Default::default()
    }
}

fn string(key: &str, value: &str) -> KeyValue {
    attribute(key, Any::StringValue(value.to_owned()))
}

fn attribute(key: &str, value: Any) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// Records waiting to be sent together, with the size their bodies add up to.
#[derive(Default)]
pub(super) struct Batch {
    audit: Vec<LogRecord>,
    events: Vec<LogRecord>,
    bytes: usize,
}

impl Batch {
    /// Adds the records of `item`.
    pub(super) fn add(&mut self, item: Item) {
        match item {
            Item::Rows { lines, rows, at } => {
                self.bytes += lines.len();
                // Each row's line ends in `\n`, in the order of `rows`.
                for (line, appended) in lines.split(|&b| b == b'\n').zip(&rows) {
                    self.audit.push(row(line, appended, at));
                }
            }
            Item::Event { event, at } => {
                let record = event_record(&event, at);
                self.bytes += body_len(&record);
                self.events.push(record);
            }
        }
    }

    /// Records in the batch.
    pub(super) fn len(&self) -> usize {
        self.audit.len() + self.events.len()
    }

    /// Bytes of the records' bodies.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// The batch as an OTLP/HTTP request body (protobuf).
    pub(super) fn encode(self, resource: &Resource) -> Vec<u8> {
        let scope = |name: &str, log_records| ScopeLogs {
            scope: Some(InstrumentationScope {
                name: name.to_owned(),
                version: VERSION.to_owned(),
                ..Default::default()
            }),
            log_records,
            ..Default::default()
        };
        let scope_logs = [(AUDIT_SCOPE, self.audit), (EVENTS_SCOPE, self.events)]
            .into_iter()
            .filter(|(_, records)| !records.is_empty())
            .map(|(name, records)| scope(name, records))
            .collect();
        ExportLogsServiceRequest {
            resource_logs: vec![ResourceLogs {
                resource: Some(resource.clone()),
                scope_logs,
                ..Default::default()
            }],
        }
        .encode_to_vec()
    }
}

fn body_len(record: &LogRecord) -> usize {
    match record.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(Any::StringValue(s)) => s.len(),
        _ => 0,
    }
}

/// A record of `kind` at `at` (ns), with `body` and the attributes every record has.
fn record(kind: &str, fields: Fields<'_>, body: String, at: u64) -> LogRecord {
    let mut attributes = vec![string("guard.kind", kind)];
    let named = [
        ("guard.call_id", fields.call_id),
        ("guard.tool", fields.tool),
        ("guard.decision", fields.decision),
    ];
    for (key, value) in named {
        if let Some(v) = value {
            attributes.push(string(key, v));
        }
    }
    // A block, a divergence or a kill is what an operator looks for first.
    let warn = matches!(kind, "divergence" | "kill") || fields.decision == Some("block");
    let (severity, text) = if warn {
        (SeverityNumber::Warn, "WARN")
    } else {
        (SeverityNumber::Info, "INFO")
    };
    LogRecord {
        time_unix_nano: at,
        observed_time_unix_nano: at,
        severity_number: severity as i32,
        severity_text: text.to_owned(),
        body: Some(AnyValue {
            value: Some(Any::StringValue(body)),
        }),
        attributes,
        ..Default::default()
    }
}

/// The attributes a row or an event may have.
#[derive(Default)]
struct Fields<'a> {
    call_id: Option<&'a str>,
    tool: Option<&'a str>,
    decision: Option<&'a str>,
}

/// The record of one row: its line as written, and its place in the chain.
fn row(line: &[u8], appended: &Appended, at: u64) -> LogRecord {
    // guardd wrote the line, as canonical JSON: it reads back.
    let parsed: Map<String, Value> = serde_json::from_slice(line).unwrap_or_default();
    let text = |key: &str| parsed.get(key).and_then(Value::as_str);
    let decision = match parsed.get("decision") {
        // A `held` row's decision, or a `decision` row's (within its decision row).
        Some(Value::String(d)) => Some(d.as_str()),
        Some(Value::Object(d)) => d.get("decision").and_then(Value::as_str),
        _ => None,
    };
    let fields = Fields {
        call_id: text("call_id"),
        tool: text("tool"),
        decision,
    };
    let body = String::from_utf8_lossy(line).into_owned();
    let mut record = record(text("kind").unwrap_or_default(), fields, body, at);
    let seq = i64::try_from(appended.seq).unwrap_or(i64::MAX);
    record.attributes.extend([
        attribute("guard.row_seq", Any::IntValue(seq)),
        string("guard.row_hash", &appended.hash),
        string("guard.row_prev", text("prev").unwrap_or_default()),
    ]);
    record
}

/// The record of one event of the bus.
fn event_record(event: &Event, at: u64) -> LogRecord {
    let decision = match &event.what {
        What::Decision { decision, .. } | What::Held { decision, .. } => Some(decision.to_string()),
        _ => None,
    };
    let fields = Fields {
        call_id: event.call_id.as_deref(),
        tool: event.tool.as_deref(),
        decision: decision.as_deref(),
    };
    // An event is plain data: it serialises.
    let body = serde_json::to_string(event).unwrap_or_default();
    record(event.kind(), fields, body, at)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
    use prost::Message as _;
    use serde_json::json;

    use super::*;
    use crate::{audit::chain, call::decision::Decision};

    fn attrs(record: &LogRecord) -> Vec<(String, String)> {
        record
            .attributes
            .iter()
            .map(|kv| {
                let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                    Some(Any::StringValue(s)) => s.clone(),
                    Some(Any::IntValue(i)) => i.to_string(),
                    other => format!("{other:?}"),
                };
                (kv.key.clone(), v)
            })
            .collect()
    }

    fn has(record: &LogRecord, key: &str, value: &str) -> bool {
        attrs(record).contains(&(key.to_owned(), value.to_owned()))
    }

    #[test]
    fn rows_and_events_read_back_with_their_chain_and_attributes() {
        let row = json!({"kind": "decision", "call_id": "c1", "tool": "ls",
                         "decision": {"decision": "block", "reason": "r"}});
        let Value::Object(row) = row else {
            unreachable!("an object")
        };
        let first = chain::seal(row, 7, "T".into(), chain::ZERO_HASH);
        let second = chain::seal(Map::new(), 8, "T".into(), &first.hash);
        let mut lines = first.line.clone();
        lines.extend_from_slice(&second.line);
        let rows = vec![
            Appended {
                seq: 7,
                hash: first.hash.clone(),
            },
            Appended {
                seq: 8,
                hash: second.hash.clone(),
            },
        ];
        let mut batch = Batch::default();
        batch.add(Item::Rows { lines, rows, at: 5 });
        let event = Event::of(
            Some("c2"),
            Some("cat"),
            What::Decision {
                decision: Decision::Allow,
                reason: "ok".into(),
                uid: 0,
                agent: None,
                would_block: None,
            },
        );
        batch.add(Item::Event {
            event: Arc::new(event.clone()),
            at: 6,
        });
        assert_eq!(batch.len(), 3);
        let body = batch.encode(&resource("h1"));
        let request = ExportLogsServiceRequest::decode(body.as_slice()).expect("decodes");
        let logs = &request.resource_logs[0];
        let resource = logs.resource.as_ref().expect("resource");
        let r = LogRecord {
            attributes: resource.attributes.clone(),
            ..Default::default()
        };
        assert!(has(&r, "host.name", "h1") && has(&r, "service.name", "guardd"));
        assert!(has(&r, "service.version", VERSION));
        let scopes: Vec<_> = logs.scope_logs.iter().collect();
        let name = |i: usize| scopes[i].scope.as_ref().map(|s| s.name.clone());
        assert_eq!(
            (name(0), name(1)),
            (Some(AUDIT_SCOPE.into()), Some(EVENTS_SCOPE.into()))
        );
        let (a, b) = (&scopes[0].log_records[0], &scopes[0].log_records[1]);
        assert!(has(a, "guard.kind", "decision") && has(a, "guard.decision", "block"));
        assert!(has(a, "guard.call_id", "c1") && has(a, "guard.tool", "ls"));
        assert!(has(a, "guard.row_seq", "7") && has(a, "guard.row_hash", &first.hash));
        assert!(has(a, "guard.row_prev", chain::ZERO_HASH));
        assert_eq!(a.severity_number, SeverityNumber::Warn as i32);
        assert_eq!(a.time_unix_nano, 5);
        // The body is the line as written: it checks against its hash.
        let Some(Any::StringValue(text)) = a.body.as_ref().and_then(|b| b.value.clone()) else {
            panic!("a string body")
        };
        assert_eq!(format!("{text}\n").as_bytes(), first.line.as_slice());
        let (link, _) = chain::check_line(text.as_bytes()).expect("the body checks");
        assert_eq!(link.hash, first.hash);
        assert!(has(b, "guard.row_seq", "8") && has(b, "guard.row_prev", &first.hash));
        let e = &scopes[1].log_records[0];
        assert!(has(e, "guard.kind", "decision") && has(e, "guard.decision", "allow"));
        assert!(has(e, "guard.call_id", "c2") && has(e, "guard.tool", "cat"));
        assert!(!attrs(e).iter().any(|(k, _)| k == "guard.row_seq"));
        assert_eq!(e.severity_number, SeverityNumber::Info as i32);
        let Some(Any::StringValue(text)) = e.body.as_ref().and_then(|b| b.value.clone()) else {
            panic!("a string body")
        };
        assert_eq!(
            serde_json::from_str::<Event>(&text).expect("an event"),
            event
        );
    }
}
