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
pub mod share;
#[cfg(test)]
pub(crate) mod testdir;
pub use crate::call::ts;
pub mod verify;
mod writer;

use std::{
    path::{Path, PathBuf},
    sync::{Arc, OnceLock, atomic::Ordering},
    thread::JoinHandle,
    time::Duration,
};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use crate::call::gate::{Gate, Opener};

pub use chain::{Reason, ZERO_HASH};
pub use read::{Rows, read_recent, read_rows};
pub use recover::{HOLD_WAIT, Recovery};
pub use row::{Finished, Interrupted, Launch, Record, Row};
pub use share::Refusal;
pub use verify::{VerifyError, VerifySummary, verify};

/// Where guardd keeps its audit log unless configured otherwise.
pub const DEFAULT_PATH: &str = "/var/lib/guard/audit.jsonl";
/// Size past which the active file is rotated, unless configured otherwise.
pub const DEFAULT_ROTATE_BYTES: u64 = 64 << 20;
/// How long a rotated file is kept under `keep_rotated`, unless configured otherwise: a week.
pub const DEFAULT_KEEP_ROTATED_FOR: Duration = Duration::from_secs(7 * 24 * 3600);
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
    /// A rotated file is removed only once its last row is this old: a caller that floods the
    /// log cannot push the evidence of an earlier call out of it (the disk fills instead, and
    /// callers are refused for want of room, see [`reserve`]).
    pub keep_rotated_for: Duration,
    /// Bytes of rows a uid's calls may write a minute before its new calls are refused
    /// ([`share`]); 0: no limit.
    pub bytes_per_uid: u64,
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
            keep_rotated_for: DEFAULT_KEEP_ROTATED_FOR,
            bytes_per_uid: share::BYTES_PER_UID,
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
    /// What each uid's calls wrote lately.
    shares: Arc<share::Shares>,
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
        let shares = Arc::new(share::Shares::new(options.bytes_per_uid));
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
            keep_rotated_for: options.keep_rotated_for,
            counters: counters.clone(),
            reserve: reserve.clone(),
            reserve_bytes: options.reserve_bytes,
            shares: Arc::clone(&shares),
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
            shares,
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
    /// be made whole now (root's and admins' calls may be admitted besides: see [`share`]).
    pub fn admits(&self) -> bool {
        self.reserve.admits(false)
    }

    /// Appends `row` and returns once it is written and fdatasync'ed. If the future is dropped
    /// after the row was queued, the row is still written.
    pub async fn append(&self, row: Map<String, Value>) -> Result<Appended, AuditError> {
        self.queue(row, None, None).await?.written().await
    }

    /// Appends a typed row: see [`append`](Self::append).
    pub async fn record(&self, row: &Row) -> Result<Appended, AuditError> {
        (self.queue(map_of(row)?, row.caller(), None).await?)
            .written()
            .await
    }

    /// Queues a typed row and returns at once: the row is durable when [`Durable::written`]
    /// says so, and what depends on it (a call's start) waits for that, while what does not (its
    /// preparation) goes on meanwhile; or at the [`Gate`] the writer opens once the row is on
    /// disk, and shuts when it could not be (a call's process, which cannot await).
    pub async fn submit(&self, row: &Row) -> Result<(Durable, Gate), AuditError> {
        let (gate, opener) = crate::call::gate::new();
        let by = row.caller();
        Ok((self.queue(map_of(row)?, by, Some(opener)).await?, gate))
    }

    /// Queues `row`, counted in the share of uid `by` when it is a caller's.
    async fn queue(
        &self,
        row: Map<String, Value>,
        by: Option<u32>,
        opener: Option<Opener>,
    ) -> Result<Durable, AuditError> {
        check_reserved(&row)?;
        let (ack, done) = oneshot::channel();
        let tx = self.tx.as_ref().ok_or(AuditError::Closed)?;
        tx.send(writer::Request {
            row,
            by,
            ack,
            opener,
        })
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
        let (by, opener) = (None, None);
        tx.blocking_send(writer::Request {
            row,
            by,
            ack,
            opener,
        })
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
mod tests;
