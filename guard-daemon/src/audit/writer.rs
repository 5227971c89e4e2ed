//! The writer thread and its group commit.
//!
//! One thread owns the file. It blocks for the first queued row, then takes whatever else is
//! already queued (up to a bound), writes the batch with one `pwrite`, calls `fdatasync` once
//! and acknowledges every row of the batch. It never waits for more rows to arrive: a lone row
//! is synced at once, and batches form only from rows that queued up while the previous sync
//! ran. So the cost of a sync is shared exactly when there is contention, and latency is never
//! traded for throughput.
//!
//! Rows are written into blocks allocated ahead past the file's end (see `reserve`), topped up
//! after each batch. A failed write or sync (ENOSPC, EIO) fails the whole batch: the file is cut
//! back to the end of the last synced batch so no partial row stays behind, the batch's rows are
//! answered with `Unavailable`, and their sequence numbers are reused by the next batch, which
//! tries again.

use std::{
    fs::{self, File},
    io,
    os::unix::fs::FileExt as _,
    path::PathBuf,
    sync::{
        Arc, OnceLock,
        atomic::{AtomicU64, Ordering},
    },
};

use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot};

use super::{Appended, AuditError, Tap, chain, files, reserve::Reserve, share::Shares, ts};
use crate::call::gate::Opener;

/// Most rows in one batch: bounds the latency of the batch's last row.
const MAX_BATCH_ROWS: usize = 1024;
/// Most bytes in one batch (a batch may pass it by one row).
const MAX_BATCH_BYTES: usize = 4 << 20;

pub(super) struct Request {
    pub row: Map<String, Value>,
    /// The uid whose share the row counts in (`share`), when it is a caller's.
    pub by: Option<u32>,
    pub ack: oneshot::Sender<Result<Appended, AuditError>>,
    /// Opened with the ack once the row is durable (a call's start waits at its gate).
    pub opener: Option<Opener>,
}

/// A sealed row's answers: its ack, what it was appended as, and its gate's opener.
type Ack = (
    oneshot::Sender<Result<Appended, AuditError>>,
    Appended,
    Option<Opener>,
);

/// Counters shared with the `AuditLog` handle.
#[derive(Default)]
pub(super) struct Counters {
    pub rows: AtomicU64,
    pub syncs: AtomicU64,
}

pub(super) struct Writer {
    pub base: PathBuf,
    /// `None` after a rotation whose new file could not be created yet.
    pub file: Option<File>,
    /// End of the last synced batch: every byte before it belongs to an acknowledged row.
    pub len: u64,
    /// The file may hold bytes past `len` that could not be cut after a failure.
    pub dirty: bool,
    /// The log's lock, released when the writer ends.
    pub _lock: nix::fcntl::Flock<File>,
    /// The last batch failed: log the next failure quietly and the recovery loudly, so a full
    /// disk gives one warning rather than one per call.
    pub failing: bool,
    pub next_seq: u64,
    pub last_hash: String,
    pub next_rotation: u64,
    pub rotate_bytes: u64,
    /// Rotated files kept (at least 1), or all.
    pub keep_rotated: Option<u64>,
    /// How long a rotated file is kept whatever `keep_rotated` says.
    pub keep_rotated_for: std::time::Duration,
    pub counters: Arc<Counters>,
    /// Room kept for running calls' rows, past the active file's end.
    pub reserve: Arc<Reserve>,
    /// The room each active file keeps.
    pub reserve_bytes: u64,
    /// What each uid's calls wrote, counted once their rows are durable.
    pub shares: Arc<Shares>,
    /// Told of each batch once it is durable (`AuditLog::tap`).
    pub tap: Arc<OnceLock<Tap>>,
}

impl Writer {
    pub fn run(mut self, mut rx: mpsc::Receiver<Request>) {
        let mut buf = Vec::new();
        let mut acks = Vec::new();
        // The uid and bytes of each caller's row in the batch.
        let mut spent: Vec<(u32, usize)> = Vec::new();
        while let Some(first) = rx.blocking_recv() {
            let (seq0, hash0) = (self.next_seq, self.last_hash.clone());
            buf.clear();
            spent.clear();
            self.seal(first, &mut buf, &mut acks, &mut spent);
            while acks.len() < MAX_BATCH_ROWS && buf.len() < MAX_BATCH_BYTES {
                match rx.try_recv() {
                    Ok(req) => self.seal(req, &mut buf, &mut acks, &mut spent),
                    Err(_) => break,
                }
            }
            match self.write(&buf) {
                Ok(()) => {
                    self.counters
                        .rows
                        .fetch_add(acks.len() as u64, Ordering::Relaxed);
                    if self.failing {
                        self.failing = false;
                        tracing::info!(path = %self.base.display(), "audit log: writable again");
                    }
                    // Before the acks: a caller's next call is admitted on what this one wrote.
                    for &(uid, bytes) in &spent {
                        self.shares.wrote(uid, bytes);
                    }
                    let tapped: Option<Vec<Appended>> = self
                        .tap
                        .get()
                        .map(|_| acks.iter().map(|(_, a, _)| a.clone()).collect());
                    for (ack, appended, opener) in acks.drain(..) {
                        if let Some(opener) = opener {
                            opener.open();
                        }
                        // A caller that went away still had its row written; nothing to tell.
                        let _ = ack.send(Ok(appended));
                    }
                    if let (Some(tap), Some(rows)) = (self.tap.get(), tapped) {
                        tap(&buf, &rows);
                    }
                    // After the acks: no row waits for the allocation.
                    self.reserve.wrote(self.len);
                    if self.len >= self.rotate_bytes {
                        self.rotate();
                    }
                }
                Err(reason) => {
                    if self.failing {
                        tracing::debug!(rows = acks.len(), %reason, "audit log: batch not written");
                    } else {
                        tracing::warn!(path = %self.base.display(), %reason, "audit log: batch not written; failing appends until it can write again");
                        self.failing = true;
                    }
                    (self.next_seq, self.last_hash) = (seq0, hash0);
                    // Each opener dropped unopened shuts its gate.
                    for (ack, _, _) in acks.drain(..) {
                        let _ = ack.send(Err(AuditError::Unavailable(reason.clone())));
                    }
                }
            }
        }
    }

    fn seal(
        &mut self,
        req: Request,
        buf: &mut Vec<u8>,
        acks: &mut Vec<Ack>,
        spent: &mut Vec<(u32, usize)>,
    ) {
        let seq = self.next_seq;
        let sealed = chain::seal(req.row, seq, ts::now(), &self.last_hash);
        buf.extend_from_slice(&sealed.line);
        if let Some(uid) = req.by {
            spent.push((uid, sealed.line.len()));
        }
        self.next_seq += 1;
        self.last_hash.clone_from(&sealed.hash);
        acks.push((
            req.ack,
            Appended {
                seq,
                hash: sealed.hash,
            },
            req.opener,
        ));
    }

    /// Writes and syncs one batch at the end of the good part of the file, or cuts the file
    /// back and says why not.
    fn write(&mut self, buf: &[u8]) -> Result<(), String> {
        let path = self.base.display().to_string();
        self.file().map_err(|e| format!("open {path}: {e}"))?;
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| format!("{path} is not open"))?;
        if self.dirty {
            file.set_len(self.len)
                .map_err(|e| format!("truncate {path}: {e}"))?;
            self.dirty = false;
        }
        let result = file
            .write_all_at(buf, self.len)
            .map_err(|e| format!("write {path}: {e}"));
        let result = result.and_then(|()| {
            self.counters.syncs.fetch_add(1, Ordering::Relaxed);
            file.sync_data()
                .map_err(|e| format!("fdatasync {path}: {e}"))
        });
        match result {
            Ok(()) => {
                self.len += buf.len() as u64;
                Ok(())
            }
            Err(reason) => {
                // The failed batch is dropped whole rather than its sync retried: after a failed
                // fsync the kernel may have marked its pages clean, so a retry proves nothing.
                if let Err(e) = file.set_len(self.len) {
                    tracing::warn!(path = %path, error = %e, "audit log: cannot cut a failed batch; will retry");
                    self.dirty = true;
                } else {
                    self.reserve.cut(self.len);
                }
                Err(reason)
            }
        }
    }

    /// The active file, created (and its directory entry synced) if a rotation left none.
    fn file(&mut self) -> io::Result<&File> {
        if self.file.is_none() {
            let file = files::open_active(&self.base)?;
            // Rows go to the new file only once its name (and the rename before it) is durable,
            // or a crash could keep synced rows under a name recovery never finds.
            files::sync_dir(files::parent(&self.base))?;
            self.len = file.metadata()?.len();
            self.reserve.adopt(&file, self.len, self.len);
            self.file = Some(file);
        }
        self.file
            .as_ref()
            .ok_or_else(|| io::Error::other("file vanished"))
    }

    /// Renames the full active file to the next `audit.jsonl.N` and starts a new one. The
    /// chain needs nothing special: the writer's `last_hash` is the new file's first `prev`.
    /// The new file is made, with its room allocated, before the full one gives its room back:
    /// on a full file system the rotation waits (the rows go on into the full one's room)
    /// rather than leave the next rows no room at all.
    fn rotate(&mut self) {
        let to = files::rotated(&self.base, self.next_rotation);
        if to.exists() {
            // Someone put a file there; never overwrite rows.
            tracing::warn!(path = %to.display(), "audit log: rotation target exists; skipping its number");
            self.next_rotation += 1;
            return;
        }
        let next = files::next(&self.base);
        let room = Reserve::new(self.reserve_bytes);
        let prepared = files::open_active(&next).and_then(|f| {
            room.adopt(&f, 0, 0);
            if room.room() == 0 {
                return Err(io::Error::other("no room for its reserve"));
            }
            Ok(f)
        });
        let new = match prepared {
            Ok(f) => f,
            Err(e) => {
                let _ = fs::remove_file(&next);
                tracing::warn!(path = %self.base.display(), error = %e, "audit log: rotation postponed: the next file cannot get its room");
                return;
            }
        };
        if let Err(e) = fs::rename(&self.base, &to) {
            tracing::warn!(path = %self.base.display(), error = %e, "audit log: rotation failed; will retry");
            return;
        }
        if let Err(e) = fs::rename(&next, &self.base) {
            tracing::warn!(path = %self.base.display(), error = %e, "audit log: the next file is not in place; will make one");
        }
        self.next_rotation += 1;
        if let Some(old) = self.file.take() {
            Reserve::give_back(&old, self.len, self.reserve.allocated());
        }
        self.len = 0;
        match files::sync_dir(files::parent(&self.base)) {
            Ok(()) => {
                self.reserve.adopt(&new, 0, room.allocated());
                self.file = Some(new);
            }
            Err(e) => {
                tracing::warn!(path = %self.base.display(), error = %e, "audit log: new file after rotation not ready; will retry");
            }
        }
        tracing::info!(rotated = %to.display(), "audit log rotated");
        self.prune();
    }

    /// Removes the oldest rotated files beyond `keep_rotated` that were last written longer
    /// than `keep_rotated_for` ago. First a `pruned` row, chained like any other, names the
    /// last row that goes (the row before the first one kept), so that `verify` can tell
    /// retention from a file removed by hand; then the files go.
    fn prune(&mut self) {
        let Some(keep) = self.keep_rotated else {
            return;
        };
        let Ok(segments) = files::segments(&self.base) else {
            return;
        };
        let rotated: Vec<&files::Segment> =
            segments.iter().filter(|s| s.number.is_some()).collect();
        let Some(excess) = rotated.len().checked_sub(keep as usize) else {
            return;
        };
        // Oldest first: the first file too young to go keeps every newer one.
        let old = |s: &&&files::Segment| {
            fs::metadata(&s.path)
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= self.keep_rotated_for)
        };
        let excess = rotated[..excess].iter().take_while(old).count();
        if excess == 0 {
            return;
        }
        let Some((seq, hash)) = first_link(&rotated[excess].path) else {
            tracing::warn!(path = %rotated[excess].path.display(), "audit log: cannot read the first row kept; pruning nothing");
            return;
        };
        let gone: Vec<String> = rotated[..excess]
            .iter()
            .map(|s| s.path.display().to_string())
            .collect();
        let pruned = super::Row::Pruned {
            through_seq: seq.saturating_sub(1),
            through_hash: hash,
            files: gone.clone(),
        };
        let Ok(row) = pruned.to_map() else {
            return;
        };
        let sealed = chain::seal(row, self.next_seq, ts::now(), &self.last_hash);
        if let Err(reason) = self.write(&sealed.line) {
            tracing::warn!(%reason, "audit log: the pruned row could not be written; pruning nothing");
            return;
        }
        if let Some(tap) = self.tap.get() {
            let seq = self.next_seq;
            tap(
                &sealed.line,
                &[Appended {
                    seq,
                    hash: sealed.hash.clone(),
                }],
            );
        }
        self.next_seq += 1;
        self.last_hash = sealed.hash;
        for path in gone {
            if let Err(e) = fs::remove_file(&path) {
                tracing::warn!(path, error = %e, "audit log: removing a pruned file");
            }
        }
    }
}

/// (seq, prev) of the first row of `path`.
fn first_link(path: &std::path::Path) -> Option<(u64, String)> {
    use std::io::BufRead as _;
    let mut line = Vec::new();
    std::io::BufReader::new(File::open(path).ok()?)
        .read_until(b'\n', &mut line)
        .ok()?;
    let (link, _) = chain::check_line(line.strip_suffix(b"\n")?).ok()?;
    Some((link.seq, link.prev))
}

#[cfg(test)]
mod tests {
    use crate::audit::{AuditLog, Options, testdir::TestDir};

    #[test]
    fn the_writer_is_a_batch_thread() {
        let dir = TestDir::new("batch");
        let log = AuditLog::open(Options::new(dir.path().join("audit.jsonl"))).expect("open");
        // Written: this log's writer has set its policy (it does so first).
        log.append_blocking(crate::audit::tests::row(0))
            .expect("append");
        // The writers of this test process (tests run side by side); one just started may not
        // have set its policy yet, this log's has.
        let policies = crate::sandbox::thread_policies("guard-audit");
        assert!(
            policies.contains(&libc::SCHED_BATCH),
            "the writers' policies: {policies:?}"
        );
    }
}
