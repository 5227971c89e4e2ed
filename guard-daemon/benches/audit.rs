//! Audit log append cost: one appender alone (latency: one write + one fdatasync) and 64
//! concurrent appenders (throughput: group commit shares each sync).
//!
//! `cargo bench -p guard-daemon --bench audit`. The log goes to `$GUARD_BENCH_DIR` or the temp
//! directory: put it on the file system guardd will use, since fdatasync dominates.

use std::{
    path::PathBuf,
    sync::{Arc, OnceLock},
};

use divan::{Bencher, counter::ItemsCount};
use guard::audit::{AuditLog, Options};
use serde_json::{Map, Value, json};

fn main() {
    divan::main();
    let _ = std::fs::remove_dir_all(dir());
}

fn dir() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base =
            std::env::var_os("GUARD_BENCH_DIR").map_or_else(std::env::temp_dir, PathBuf::from);
        let dir = base.join(format!("guard-audit-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("bench dir");
        dir
    })
}

fn open(name: &str) -> AuditLog {
    let path = dir().join(name);
    let _ = std::fs::remove_file(&path);
    AuditLog::open(Options::new(path)).expect("open audit log")
}

/// A decision row of typical size (~350 bytes on disk).
fn row() -> Map<String, Value> {
    let v = json!({
        "kind": "decision",
        "call_id": "01J9Z6Q8W4K3M2N1P0R9S8T7V6",
        "peer": {"pid": 4242, "uid": 1000, "gid": 1000},
        "tool": "bash",
        "args": ["-c", "cargo test --workspace"],
        "decision": {"verdict": "allow", "rule": "dev-tools", "tier": "low"},
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!("literal object"),
    }
}

#[divan::bench]
fn append_alone(bencher: Bencher) {
    let log = open("alone.jsonl");
    bencher.bench_local(|| log.append_blocking(row()).expect("append"));
}

#[divan::bench]
fn append_64_concurrent(bencher: Bencher) {
    let log = Arc::new(open("concurrent.jsonl"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("runtime");
    bencher.counter(ItemsCount::new(64usize)).bench_local(|| {
        rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for _ in 0..64 {
                let log = log.clone();
                set.spawn(async move { log.append(row()).await.expect("append") });
            }
            while let Some(r) = set.join_next().await {
                r.expect("task");
            }
        })
    });
    let stats = log.stats();
    eprintln!(
        "64 concurrent: {} rows in {} syncs",
        stats.rows, stats.syncs
    );
}

/// CPU cost of one row without I/O: canonical form, SHA-256 and the line.
#[divan::bench]
fn seal_only(bencher: Bencher) {
    let prev = guard::audit::ZERO_HASH;
    bencher.with_inputs(row).bench_local_values(|r| {
        guard::audit::chain::seal(r, 7, "2025-01-01T00:00:00.000000Z".into(), prev)
    });
}
