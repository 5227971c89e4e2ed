//! The audit log: an append-only, hash-chained, durable JSON Lines record of every decision
//! and every finished call.
//!
//! Each row gets `seq` (continuous across rotations), `ts` (RFC 3339 UTC), `prev` (the hash
//! of the row before, zeros for the first) and `hash` (SHA-256 of its canonical form, see
//! [`chain`]). [`AuditLog::append`] returns only once the row is on disk (written and
//! fdatasync'ed); concurrent rows share one sync (group commit, in `writer.rs`). At open, a
//! row a crash left half written is cut ([`recover`]). [`verify()`] checks a whole log,
//! [`read_rows`] reads it back. Any [`AuditError`] means the row is not recorded, and guardd
//! fails closed.

pub mod bound;
pub mod chain;
pub(crate) mod files;
pub mod read;
pub mod recover;
pub mod reserve;
pub mod row;
#[cfg(test)]
pub(crate) mod testdir;
pub use crate::call::ts;
pub mod verify;
mod writer;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock, atomic::Ordering},
    thread::JoinHandle,
};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::call::gate::{Gate, Opener};

pub use chain::{Reason, ZERO_HASH};
pub use read::{Rows, read_recent, read_rows};
pub use recover::{HOLD_WAIT, Recovery};
pub use row::{Finished, Interrupted, Launch, Record, Row};
pub use verify::{VerifyError, VerifySummary, verify};

/// Where guardd keeps its audit log unless configured otherwise.
pub const DEFAULT_PATH: &str = "/var/lib/guard/audit.jsonl";
/// Size past which the active file is rotated, unless configured otherwise.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 << 20;
/// Rows that may wait for the writer before `append` itself waits (backpressure).
const QUEUE: usize = 4096;

/// Errors of the audit log. Any of them means the row is not recorded: guardd fails closed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("audit log {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("audit log {path} is damaged at its end ({reason}); run `guardctl audit verify`")]
    Damaged { path: PathBuf, reason: Reason },
    /// The row could not be written or synced (full disk, I/O error). Later appends try again.
    #[error("audit log unavailable: {0}")]
    Unavailable(String),
    #[error("audit log is in use by another process (lock {0} is held)")]
    Locked(PathBuf),
    #[error("field `{0}` of an audit row is set by the log, not by the caller")]
    Reserved(&'static str),
    #[error("the audit writer has stopped")]
    Closed,
}

/// Where the log lives and when it rotates.
#[derive(Debug, Clone)]
pub struct Options {
    pub path: PathBuf,
    /// The active file is rotated once it reaches this size.
    pub rotate_bytes: u64,
    /// Bytes kept free beside the log for the rows of running calls (`reserve`).
    pub reserve_bytes: u64,
    /// Rotated files kept (at least 1); older ones are removed, and a chained `pruned` row
    /// says which rows went. `None`: all are kept.
    pub keep_rotated: Option<u64>,
}

impl Default for Options {
    fn default() -> Self {
        Self::new(DEFAULT_PATH)
    }
}

impl Options {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            rotate_bytes: DEFAULT_ROTATE_BYTES,
            reserve_bytes: reserve::RESERVE_BYTES,
            keep_rotated: None,
        }
    }
}

/// A row on disk: its place in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
}

/// Counters since open.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Rows written and acknowledged.
    pub rows: u64,
    /// fdatasync calls made (one per batch).
    pub syncs: u64,
}

/// Is told of rows once they are durable: the lines of a batch as written (each ending in `\n`)
/// and each row's place in the chain, in order. It runs on the writer's thread, after the rows'
/// callers have their answers, so it must not block: a tap hands the rows on, or drops them.
pub type Tap = Box<dyn Fn(&[u8], &[Appended]) + Send + Sync>;

/// Where guardds before the reserve moved into the log kept it.
fn legacy_reserve(log: &Path) -> PathBuf {
    let mut name = log.as_os_str().to_owned();
    name.push(".reserve");
    PathBuf::from(name)
}

/// The handle to an open log. Share it with `Arc`; dropping it lets the writer finish what is
/// queued and closes the file.
pub struct AuditLog {
    tx: Option<mpsc::Sender<writer::Request>>,
    reserve: Arc<reserve::Reserve>,
    thread: Option<JoinHandle<()>>,
    counters: Arc<writer::Counters>,
    recovery: Recovery,
    path: PathBuf,
    tap: Arc<OnceLock<Tap>>,
}

impl AuditLog {
    /// Opens the log (creating it and its directory if needed), recovers its tail and starts
    /// the writer thread.
    pub fn open(options: Options) -> Result<Self, AuditError> {
        let start = recover::open(&options.path)?;
        // A rotation's next file that a crash left unused; and the reserve file beside the
        // log, where older guardds kept the room that is now in the log's own file.
        for leftover in [files::next(&options.path), legacy_reserve(&options.path)] {
            let _ = std::fs::remove_file(leftover);
        }
        let reserve = Arc::new(reserve::Reserve::new(options.reserve_bytes));
        reserve.adopt(&start.file, start.len, start.len);
        if let Err(nix::Error::EOPNOTSUPP) = reserve.try_top_up() {
            // No room could ever be kept: every call would be refused, or its rows lost.
            return Err(AuditError::Io {
                path: options.path.clone(),
                source: std::io::Error::other(
                    "its file system cannot allocate room ahead of a file (fallocate \
                     FALLOC_FL_KEEP_SIZE), where guard keeps the room for running calls' rows: \
                     put the log on ext4, xfs, btrfs or tmpfs",
                ),
            });
        }
        let counters = Arc::new(writer::Counters::default());
        let tap = Arc::new(OnceLock::new());
        let writer = writer::Writer {
            base: options.path.clone(),
            file: Some(start.file),
            len: start.len,
            _lock: start.lock,
            dirty: false,
            failing: false,
            next_seq: start.recovery.last_seq.map_or(0, |s| s + 1),
            last_hash: start.recovery.last_hash.clone(),
            next_rotation: start.next_rotation,
            rotate_bytes: options.rotate_bytes,
            keep_rotated: options.keep_rotated.map(|k| k.max(1)),
            counters: counters.clone(),
            reserve: reserve.clone(),
            reserve_bytes: options.reserve_bytes,
            tap: Arc::clone(&tap),
        };
        let (tx, rx) = mpsc::channel(QUEUE);
        let thread = std::thread::Builder::new()
            .name("guard-audit".into())
            .spawn(move || {
                // A decision row is queued by the worker preparing the call's launch: woken
                // with a short slice, the writer took that worker's CPU at once for 40-60 µs
                // (the row's sealing, its write and the start of its sync), on the launch's
                // path. As a batch thread it runs on the other CPU if that is idle, else once
                // the worker sleeps (at the latest in the clone, whose child confines itself
                // meanwhile and waits at the gate for the sync).
                crate::sandbox::batch_policy("audit writer");
                writer.run(rx)
            })
            .map_err(|e| AuditError::Io {
                path: options.path.clone(),
                source: e,
            })?;
        Ok(Self {
            tx: Some(tx),
            reserve,
            thread: Some(thread),
            counters,
            recovery: start.recovery,
            path: options.path,
            tap,
        })
    }

    /// Sets the tap told of every row made durable from now on (the OTLP export); `false`
    /// when one is set already, which stays.
    pub fn tap(&self, tap: Tap) -> bool {
        self.tap.set(tap).is_ok()
    }

    /// Whether new calls may be admitted: the room for running calls' rows is whole, or could
    /// be made whole now.
    pub fn admits(&self) -> bool {
        self.reserve.admits()
    }

    /// Appends `row` and returns once it is written and fdatasync'ed. If the future is dropped
    /// after the row was queued, the row is still written.
    pub async fn append(&self, row: Map<String, Value>) -> Result<Appended, AuditError> {
        self.queue(row, None).await?.written().await
    }

    /// Appends a typed row: see [`append`](Self::append).
    pub async fn record(&self, row: &Row) -> Result<Appended, AuditError> {
        self.queue(map_of(row)?, None).await?.written().await
    }

    /// Queues a typed row and returns at once: the row is durable when [`Durable::written`]
    /// says so, and what depends on it (a call's start) waits for that, while what does not (its
    /// preparation) goes on meanwhile; or at the [`Gate`] the writer opens once the row is on
    /// disk, and shuts when it could not be (a call's process, which cannot await).
    pub async fn submit(&self, row: &Row) -> Result<(Durable, Gate), AuditError> {
        let (gate, opener) = crate::call::gate::new();
        Ok((self.queue(map_of(row)?, Some(opener)).await?, gate))
    }

    async fn queue(
        &self,
        row: Map<String, Value>,
        opener: Option<Opener>,
    ) -> Result<Durable, AuditError> {
        check_reserved(&row)?;
        let (ack, done) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or(AuditError::Closed)?;
        tx.send(writer::Request { row, ack, opener })
            .await
            .map_err(|_| AuditError::Closed)?;
        Ok(Durable(done))
    }

    /// [`append`](Self::append) for threads outside an async runtime. Panics if called from
    /// within one (tokio forbids blocking there).
    pub fn append_blocking(&self, row: Map<String, Value>) -> Result<Appended, AuditError> {
        check_reserved(&row)?;
        let (ack, done) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or(AuditError::Closed)?;
        let opener = None;
        tx.blocking_send(writer::Request { row, ack, opener })
            .map_err(|_| AuditError::Closed)?;
        done.blocking_recv().map_err(|_| AuditError::Closed)?
    }

    /// What recovery found when the log was opened.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }

    /// The active file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn stats(&self) -> Stats {
        Stats {
            rows: self.counters.rows.load(Ordering::Relaxed),
            syncs: self.counters.syncs.load(Ordering::Relaxed),
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        // Closing the channel ends the writer once it has drained the queue.
        drop(self.tx.take());
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("audit writer thread panicked");
        }
    }
}

/// A row queued for the log, not yet known to be on disk.
#[must_use = "a queued row is durable only once `written` returns Ok"]
#[derive(Debug)]
pub struct Durable(oneshot::Receiver<Result<Appended, AuditError>>);

impl Durable {
    /// Returns once the row is written and fdatasync'ed (or could not be).
    pub async fn written(self) -> Result<Appended, AuditError> {
        self.0.await.map_err(|_| AuditError::Closed)?
    }
}

/// `row` as the map the writer seals.
fn map_of(row: &Row) -> Result<Map<String, Value>, AuditError> {
    row.to_map()
        .map_err(|e| AuditError::Unavailable(format!("serialising the row: {e}")))
}

fn check_reserved(row: &Map<String, Value>) -> Result<(), AuditError> {
    match chain::RESERVED.iter().find(|k| row.contains_key(**k)) {
        Some(k) => Err(AuditError::Reserved(k)),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::json;

    use super::{testdir::TestDir, *};

    pub(super) fn row(i: u64) -> Map<String, Value> {
        let v = json!({"kind": "decision", "call_id": format!("c{i}"), "tool": "ls", "args": ["-l", i]});
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
        let log =
            Arc::new(AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open"));
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
}
