//! The log's own: appends, group commit, the lock, reserved fields, reopening and rotation.

use std::sync::Arc;

use serde_json::json;

use super::{testdir::TestDir, *};

pub(super) fn row(i: u64) -> Map<String, Value> {
    let v =
        json!({"kind": "decision", "call_id": format!("c{i}"), "tool": "ls", "args": ["-l", i]});
    match v {
        Value::Object(m) => m,
        _ => unreachable!("literal object"),
    }
}

#[test]
fn lone_append_costs_one_sync() {
    let dir = TestDir::new("lone");
    let log = AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open");
    assert_eq!(log.recovery().last_seq, None);
    let a = log.append_blocking(row(0)).expect("append");
    assert_eq!(a.seq, 0);
    assert_eq!(log.stats(), Stats { rows: 1, syncs: 1 });
    let b = log.append_blocking(row(1)).expect("append");
    assert_eq!(b.seq, 1);
    assert_eq!(log.stats(), Stats { rows: 2, syncs: 2 });
    let summary = verify(log.path()).expect("verify");
    assert_eq!((summary.rows, summary.last_hash), (2, b.hash));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_appends_share_syncs() {
    let dir = TestDir::new("group");
    let log = Arc::new(AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open"));
    let tasks: Vec<_> = (0..64)
        .map(|t| {
            let log = log.clone();
            tokio::spawn(async move {
                for i in 0..16 {
                    log.append(row(t * 100 + i)).await.expect("append");
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.expect("task");
    }
    let stats = log.stats();
    assert_eq!(stats.rows, 1024);
    assert!(stats.syncs < stats.rows, "no group commit: {stats:?}");
    assert_eq!(verify(log.path()).expect("verify").rows, 1024);
}

#[test]
fn a_tap_is_told_of_each_durable_row_as_written() {
    let dir = TestDir::new("tap");
    let log = AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open");
    let seen = Arc::new(std::sync::Mutex::new((Vec::new(), Vec::new())));
    let told = Arc::clone(&seen);
    assert!(log.tap(Box::new(move |lines, rows| {
        let mut told = told.lock().expect("lock");
        told.0.extend_from_slice(lines);
        told.1.extend_from_slice(rows);
    })));
    assert!(!log.tap(Box::new(|_, _| {})), "a second tap is refused");
    let appended = vec![
        log.append_blocking(row(0)).expect("append"),
        log.append_blocking(row(1)).expect("append"),
    ];
    // The tap runs after the rows' answers: closing the log waits for the writer's end.
    let path = log.path().to_owned();
    drop(log);
    let (lines, rows) = seen.lock().expect("lock").clone();
    assert_eq!(rows, appended);
    assert_eq!(lines, std::fs::read(path).expect("read"));
}

#[test]
fn a_second_writer_is_refused_until_the_first_closes() {
    let dir = TestDir::new("lock");
    let path = dir.path().join("audit.jsonl");
    let first = AuditLog::open(Options::new(&path)).expect("open");
    assert!(matches!(
        AuditLog::open(Options::new(&path)),
        Err(AuditError::Locked(_))
    ));
    drop(first);
    AuditLog::open(Options::new(&path)).expect("open after close");
}

#[test]
fn reserved_fields_are_refused() {
    let dir = TestDir::new("reserved");
    let log = AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open");
    for field in chain::RESERVED {
        let mut r = row(0);
        r.insert(field.into(), json!(1));
        assert!(matches!(log.append_blocking(r), Err(AuditError::Reserved(f)) if f == field));
    }
    assert_eq!(log.stats().rows, 0);
}

#[test]
fn reopen_continues_the_chain() {
    let dir = TestDir::new("reopen");
    let path = dir.path().join("audit.jsonl");
    let last = {
        let log = AuditLog::open(Options::new(&path)).expect("open");
        let mut last = None;
        for i in 0..3 {
            last = Some(log.append_blocking(row(i)).expect("append"));
        }
        last.expect("rows")
    };
    let log = AuditLog::open(Options::new(&path)).expect("reopen");
    assert_eq!(
        log.recovery(),
        &Recovery {
            truncated_bytes: 0,
            last_seq: Some(2),
            last_hash: last.hash
        }
    );
    assert_eq!(log.append_blocking(row(3)).expect("append").seq, 3);
    assert_eq!(verify(&path).expect("verify").rows, 4);
}

#[test]
fn rotation_keeps_the_chain_and_numbering() {
    let dir = TestDir::new("rotate");
    let path = dir.path().join("audit.jsonl");
    let options = Options {
        path: path.clone(),
        rotate_bytes: 1000,
        ..Options::new("")
    };
    {
        let log = AuditLog::open(options.clone()).expect("open");
        for i in 0..40 {
            log.append_blocking(row(i)).expect("append");
        }
    }
    let before = files::segments(&path).expect("list");
    assert!(before.len() >= 4, "expected rotations, got {before:?}");
    let log = AuditLog::open(options).expect("reopen");
    for i in 40..80 {
        log.append_blocking(row(i)).expect("append");
    }
    drop(log);
    let segments = files::segments(&path).expect("list");
    let numbers: Vec<_> = segments.iter().filter_map(|s| s.number).collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    let summary = verify(&path).expect("verify");
    assert_eq!((summary.rows, summary.files), (80, segments.len()));
    let seqs: Vec<u64> = read_rows(&path)
        .expect("read")
        .map(|r| r.expect("row")["seq"].as_u64().expect("seq"))
        .collect();
    assert_eq!(seqs, (0..80).collect::<Vec<_>>());
    // Every file but the active one passed the threshold before it was rotated.
    for s in &segments[..segments.len() - 1] {
        assert!(std::fs::metadata(&s.path).expect("stat").len() >= 1000);
    }
}
