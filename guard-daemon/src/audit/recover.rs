//! Recovery at open: find where the chain ends and cut off a row a crash left half written.
//!
//! The writer acknowledges a row only after its batch is written and fdatasync'ed, so any
//! bytes past the last complete, parsable row belong to a batch nobody was told about: they
//! can be dropped without losing an acknowledged row. Recovery reads only the tail (backwards,
//! in chunks), so opening a large log costs no more than opening a small one; `verify` is the
//! full check.

use std::{
    fs::{self, File, OpenOptions},
    os::unix::fs::{FileExt as _, OpenOptionsExt as _},
    path::{Path, PathBuf},
};

use nix::{
    errno::Errno,
    fcntl::{Flock, FlockArg},
};

use super::{
    AuditError,
    chain::{self, Link, Reason, ZERO_HASH},
    files,
};

/// What recovery found and did when the log was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovery {
    /// Bytes cut from the end of the active file: a torn or unparsable last row.
    pub truncated_bytes: u64,
    /// `seq` of the last row in the log; `None` for an empty log.
    pub last_seq: Option<u64>,
    /// `hash` of the last row, or the zero hash for an empty log.
    pub last_hash: String,
}

/// Where the writer starts.
pub(super) struct Start {
    /// Held for as long as the log is open: two writers would fork the chain.
    pub lock: Flock<File>,
    pub file: File,
    /// Length of the active file: every byte before it belongs to a complete row.
    pub len: u64,
    pub next_rotation: u64,
    pub recovery: Recovery,
}

/// Opens (creating if needed) the log at `base` and recovers its tail.
pub(super) fn open(base: &Path) -> Result<Start, AuditError> {
    let dir = files::parent(base);
    let io_at = |path: &Path| {
        let path = path.to_owned();
        move |source| AuditError::Io { path, source }
    };
    fs::create_dir_all(dir).map_err(io_at(dir))?;
    let lock = lock(base)?;
    let segments = files::segments(base).map_err(io_at(base))?;
    let next_rotation = segments.iter().filter_map(|s| s.number).max().unwrap_or(0) + 1;

    let existed = base.exists();
    let file = files::open_active(base).map_err(io_at(base))?;
    if !existed {
        files::sync_dir(dir).map_err(io_at(dir))?;
    }

    let len = file.metadata().map_err(io_at(base))?.len();
    let (good, last) = trim_tail(&file, len).map_err(|e| damaged(base, e))?;
    if good < len {
        file.set_len(good).map_err(io_at(base))?;
        file.sync_data().map_err(io_at(base))?;
        tracing::warn!(
            path = %base.display(),
            truncated_bytes = len - good,
            "audit log: cut a torn row left by a crash"
        );
    }

    // The row before the last one: in the active file, or the end of the newest rotated one.
    let rotated: Vec<PathBuf> = segments
        .iter()
        .rev()
        .filter(|s| s.number.is_some())
        .map(|s| s.path.clone())
        .collect();
    let last = match last {
        Some((start, link)) => {
            let before = if start > 0 {
                last_complete(&file, start)
                    .map_err(|e| damaged(base, e))?
                    .map(|(_, l)| l)
            } else {
                newest_rotated(&rotated)?
            };
            check_link(base, before.as_ref(), &link)?;
            Some(link)
        }
        None => newest_rotated(&rotated)?,
    };

    let recovery = Recovery {
        truncated_bytes: len - good,
        last_seq: last.as_ref().map(|l| l.seq),
        last_hash: last.map_or_else(|| ZERO_HASH.to_owned(), |l| l.hash),
    };
    Ok(Start {
        lock,
        file,
        len: good,
        next_rotation,
        recovery,
    })
}

/// How long a lock held by another process is waited for before giving up, the audit log's and
/// every other piece of guardd's state: a guardd killed a moment ago may leave children between
/// fork and exec that still hold its descriptors.
pub const HOLD_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// Takes `<base>.lock` exclusively, or fails if another process still holds it after
/// [`HOLD_WAIT`].
fn lock(base: &Path) -> Result<Flock<File>, AuditError> {
    let deadline = std::time::Instant::now() + HOLD_WAIT;
    loop {
        match try_lock(base) {
            Err(AuditError::Locked(_)) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

fn try_lock(base: &Path) -> Result<Flock<File>, AuditError> {
    let mut name = base.as_os_str().to_owned();
    name.push(".lock");
    let path = PathBuf::from(name);
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .map_err(|source| AuditError::Io {
            path: path.clone(),
            source,
        })?;
    match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        Ok(lock) => Ok(lock),
        Err((_, Errno::EWOULDBLOCK)) => Err(AuditError::Locked(path)),
        Err((_, errno)) => Err(AuditError::Io {
            path,
            source: errno.into(),
        }),
    }
}

/// The last row of the newest non-empty rotated file.
fn newest_rotated(newest_first: &[PathBuf]) -> Result<Option<Link>, AuditError> {
    for path in newest_first {
        let file = File::open(path).map_err(|source| AuditError::Io {
            path: path.clone(),
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| AuditError::Io {
                path: path.clone(),
                source,
            })?
            .len();
        if let Some(link) = last_complete(&file, len).map_err(|e| damaged(path, e))? {
            return Ok(Some(link.1));
        }
    }
    Ok(None)
}

fn check_link(path: &Path, before: Option<&Link>, last: &Link) -> Result<(), AuditError> {
    let (seq, prev) = before.map_or((0, ZERO_HASH), |b| (b.seq + 1, b.hash.as_str()));
    let reason = if last.seq != seq {
        Reason::Seq {
            expected: seq,
            found: last.seq,
        }
    } else if last.prev != prev {
        Reason::Prev {
            expected: prev.to_owned(),
            found: last.prev.clone(),
        }
    } else {
        return Ok(());
    };
    Err(AuditError::Damaged {
        path: path.to_owned(),
        reason,
    })
}

fn damaged(path: &Path, reason: Reason) -> AuditError {
    AuditError::Damaged {
        path: path.to_owned(),
        reason,
    }
}

/// Finds the end of the last good row of the active file: drops bytes after the last newline,
/// then complete lines that do not parse (a crash can leave zero-filled blocks). A line that
/// parses but fails its hash is not a crash artifact: that is reported, not cut.
fn trim_tail(file: &File, len: u64) -> Result<(u64, Option<(u64, Link)>), Reason> {
    let mut end = len;
    if end > 0 && read_exact_at(file, end - 1, 1)?[0] != b'\n' {
        end = line_start(file, end)?;
    }
    while end > 0 {
        let start = line_start(file, end - 1)?;
        let line = read_exact_at(file, start, (end - 1 - start) as usize)?;
        match chain::check_line(&line) {
            Ok((link, _)) => return Ok((end, Some((start, link)))),
            Err(Reason::Unparsable(_)) => end = start,
            Err(other) => return Err(other),
        }
    }
    Ok((0, None))
}

/// The last row of a file that must be complete (rotated, or the active file before its last
/// row), with the offset where it starts.
fn last_complete(file: &File, end: u64) -> Result<Option<(u64, Link)>, Reason> {
    if end == 0 {
        return Ok(None);
    }
    if read_exact_at(file, end - 1, 1)?[0] != b'\n' {
        return Err(Reason::Torn);
    }
    let start = line_start(file, end - 1)?;
    let line = read_exact_at(file, start, (end - 1 - start) as usize)?;
    Ok(Some((start, chain::check_line(&line)?.0)))
}

/// Offset just after the last `\n` before `pos`, or 0: where the line holding `pos - 1` starts.
fn line_start(file: &File, pos: u64) -> Result<u64, Reason> {
    const CHUNK: u64 = 64 * 1024;
    let mut hi = pos;
    while hi > 0 {
        let lo = hi.saturating_sub(CHUNK);
        let buf = read_exact_at(file, lo, (hi - lo) as usize)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            return Ok(lo + i as u64 + 1);
        }
        hi = lo;
    }
    Ok(0)
}

fn read_exact_at(file: &File, offset: u64, len: usize) -> Result<Vec<u8>, Reason> {
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, offset).map_err(Reason::Io)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;
    use crate::audit::{AuditLog, Options, testdir::TestDir, tests::row, verify};

    fn log_with(rows: u64, path: &Path) -> String {
        let log = AuditLog::open(Options::new(path)).expect("open");
        let mut last = String::new();
        for i in 0..rows {
            last = log.append_blocking(row(i)).expect("append").hash;
        }
        last
    }

    fn append_raw(path: &Path, bytes: &[u8]) {
        let mut f = OpenOptions::new().append(true).open(path).expect("open");
        f.write_all(bytes).expect("write");
    }

    #[test]
    fn torn_tail_is_cut_and_the_chain_goes_on() {
        let dir = TestDir::new("torn");
        let path = dir.path().join("audit.jsonl");
        let last = log_with(3, &path);
        let torn = br#"{"call_id":"c3","kind":"deci"#;
        append_raw(&path, torn);
        let log = AuditLog::open(Options::new(&path)).expect("reopen");
        assert_eq!(
            log.recovery(),
            &Recovery {
                truncated_bytes: torn.len() as u64,
                last_seq: Some(2),
                last_hash: last
            }
        );
        assert_eq!(log.append_blocking(row(3)).expect("append").seq, 3);
        assert_eq!(verify(&path).expect("verify").rows, 4);
    }

    #[test]
    fn zero_filled_lines_are_cut() {
        let dir = TestDir::new("zeros");
        let path = dir.path().join("audit.jsonl");
        log_with(2, &path);
        append_raw(&path, b"\0\0\0\0\n\0\0\n\0\0\0");
        let log = AuditLog::open(Options::new(&path)).expect("reopen");
        assert_eq!(log.recovery().truncated_bytes, 11);
        assert_eq!(log.recovery().last_seq, Some(1));
    }

    #[test]
    fn a_tampered_last_row_is_not_cut_but_refused() {
        let dir = TestDir::new("tampered");
        let path = dir.path().join("audit.jsonl");
        log_with(2, &path);
        let text = fs::read_to_string(&path)
            .expect("read")
            .replace("\"c1\"", "\"cX\"");
        fs::write(&path, &text).expect("write");
        match AuditLog::open(Options::new(&path)) {
            Err(AuditError::Damaged {
                reason: Reason::Hash { .. },
                ..
            }) => {}
            other => panic!(
                "expected Damaged, got {:?}",
                other.map(|l| l.recovery().clone())
            ),
        }
        assert_eq!(
            fs::read_to_string(&path).expect("read"),
            text,
            "recovery changed the file"
        );
    }

    #[test]
    fn empty_active_file_continues_from_the_newest_rotated() {
        let dir = TestDir::new("after-rotate");
        let path = dir.path().join("audit.jsonl");
        let last = log_with(3, &path);
        fs::rename(&path, files::rotated(&path, 1)).expect("rename");
        let log = AuditLog::open(Options::new(&path)).expect("reopen");
        assert_eq!(log.recovery().last_seq, Some(2));
        assert_eq!(log.recovery().last_hash, last);
        log.append_blocking(row(3)).expect("append");
        drop(log);
        let summary = verify(&path).expect("verify");
        assert_eq!((summary.rows, summary.files), (4, 2));
    }
}
