//! The full check of a log: every row's hash, every `prev` link (across files too), `seq`
//! continuity from 0, naming the first row that breaks. A log whose oldest rotated files were
//! removed by retention starts later: that is accepted only when a `pruned` row in the chain
//! names exactly the row before the first one left (its seq and hash), so removing files by
//! hand is still a break.

use std::{
    fmt,
    fs::File,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
};

use super::{
    chain::{self, Reason, ZERO_HASH},
    files,
};

/// A log that checked out.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct VerifySummary {
    pub rows: u64,
    pub files: usize,
    /// Hash of the last row (the zero hash for an empty log).
    pub last_hash: String,
    /// Bytes of an unfinished last line in the active file: a write in progress, or a crash
    /// that guardd cuts at its next start. Not part of the chain, so not an error.
    pub torn_bytes: u64,
}

/// The first row that breaks the chain, or could not be read. `line` is 1-based; it is 0 when
/// the error is not about a line (a file that cannot be opened).
#[derive(Debug, thiserror::Error)]
pub struct VerifyError {
    pub file: PathBuf,
    pub line: u64,
    pub seq: Option<u64>,
    #[source]
    pub reason: Reason,
}

impl VerifyError {
    /// True when the log could not be read, as opposed to read and found broken.
    pub fn is_io(&self) -> bool {
        matches!(self.reason, Reason::Io(_))
    }
}

impl fmt::Display for VerifyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let file = self.file.display();
        match (self.line, self.seq) {
            (0, _) => write!(f, "{file}: {}", self.reason),
            (line, Some(seq)) => write!(f, "{file}:{line} (seq {seq}): {}", self.reason),
            // The row is too damaged to read its seq.
            (line, None) => write!(f, "{file}:{line} (seq ?): {}", self.reason),
        }
    }
}

/// Checks the whole log whose active file is `base`, rotated files included, oldest first.
#[expect(
    clippy::too_many_lines,
    reason = "one pass over the chain, whose state (previous hash, next seq) every branch updates"
)]
pub fn verify(base: &Path) -> Result<VerifySummary, VerifyError> {
    let fail = |file: &Path, line, seq, reason| VerifyError {
        file: file.to_owned(),
        line,
        seq,
        reason,
    };
    let segments = files::segments(base).map_err(|e| fail(base, 0, None, Reason::Io(e)))?;
    if segments.is_empty() {
        let missing = std::io::Error::new(std::io::ErrorKind::NotFound, "no audit log here");
        return Err(fail(base, 0, None, Reason::Io(missing)));
    }
    let mut expected_seq = 0u64;
    let mut last_hash = ZERO_HASH.to_owned();
    let mut torn_bytes = 0;
    // (seq, hash) of the row before the first one here, when the log does not start at 0,
    // until a `pruned` row vouches for it; with where the first row is, for the report.
    let mut unvouched: Option<(u64, String, PathBuf)> = None;
    let mut first = true;
    let count = segments.len();
    for (i, segment) in segments.iter().enumerate() {
        let path = &segment.path;
        let file = File::open(path).map_err(|e| fail(path, 0, None, Reason::Io(e)))?;
        let mut reader = BufReader::new(file);
        let mut buf = Vec::new();
        let mut line_no = 0u64;
        loop {
            buf.clear();
            let n = reader
                .read_until(b'\n', &mut buf)
                .map_err(|e| fail(path, line_no + 1, None, Reason::Io(e)))?;
            if n == 0 {
                break;
            }
            line_no += 1;
            let Some(line) = buf.strip_suffix(b"\n") else {
                if i + 1 == count {
                    torn_bytes = n as u64;
                    break;
                }
                return Err(fail(path, line_no, None, Reason::Torn));
            };
            let (link, row) =
                chain::check_line(line).map_err(|r| fail(path, line_no, seq_of(line), r))?;
            if std::mem::take(&mut first) && link.seq > 0 {
                // Retention may have removed what came before; a `pruned` row must say so.
                expected_seq = link.seq;
                last_hash.clone_from(&link.prev);
                unvouched = Some((link.seq - 1, link.prev.clone(), path.clone()));
            }
            if row.get("kind").and_then(serde_json::Value::as_str) == Some("pruned")
                && let Some((seq, hash, _)) = &unvouched
                && row.get("through_seq").and_then(serde_json::Value::as_u64) == Some(*seq)
                && row.get("through_hash").and_then(serde_json::Value::as_str) == Some(hash)
            {
                unvouched = None;
            }
            let broken = if link.seq != expected_seq {
                Some(Reason::Seq {
                    expected: expected_seq,
                    found: link.seq,
                })
            } else if link.prev != last_hash {
                Some(Reason::Prev {
                    expected: last_hash.clone(),
                    found: link.prev.clone(),
                })
            } else {
                None
            };
            if let Some(reason) = broken {
                return Err(fail(path, line_no, Some(link.seq), reason));
            }
            expected_seq += 1;
            last_hash = link.hash;
        }
    }
    if let Some((seq, _, path)) = unvouched {
        let missing = format!("rows 0 to {seq} are gone and no `pruned` row accounts for them");
        return Err(fail(&path, 1, Some(seq + 1), Reason::Missing(missing)));
    }
    Ok(VerifySummary {
        rows: expected_seq,
        files: count,
        last_hash,
        torn_bytes,
    })
}

/// `seq` of a row that failed its check, if it can still be read, for the report.
fn seq_of(line: &[u8]) -> Option<u64> {
    let row: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(line).ok()?;
    row.get("seq")?.as_u64()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::audit::{AuditLog, Options, testdir::TestDir, tests::row};

    fn write_log(path: &Path, rows: u64, rotate_bytes: u64) {
        let log = AuditLog::open(Options {
            path: path.to_owned(),
            rotate_bytes,
            ..Options::new("")
        })
        .expect("open");
        for i in 0..rows {
            log.append_blocking(row(i)).expect("append");
        }
    }

    #[test]
    fn a_flipped_byte_names_its_line() {
        let dir = TestDir::new("flip");
        let path = dir.path().join("audit.jsonl");
        write_log(&path, 10, u64::MAX);
        let mut bytes = fs::read(&path).expect("read");
        // A byte in the middle of line 6 (1-based).
        let starts: Vec<usize> = std::iter::once(0)
            .chain(
                bytes
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| **b == b'\n')
                    .map(|(i, _)| i + 1),
            )
            .collect();
        let at = (starts[5] + starts[6]) / 2;
        bytes[at] ^= 0x04;
        fs::write(&path, &bytes).expect("write");
        let err = verify(&path).expect_err("must break");
        assert_eq!((err.line, err.file.as_path()), (6, path.as_path()), "{err}");
        assert!(!err.is_io());
    }

    #[test]
    fn a_missing_middle_file_breaks_the_next_one() {
        let dir = TestDir::new("gap");
        let path = dir.path().join("audit.jsonl");
        write_log(&path, 30, 600);
        assert!(files::rotated(&path, 3).exists());
        fs::remove_file(files::rotated(&path, 2)).expect("remove");
        let err = verify(&path).expect_err("must break");
        assert_eq!((&err.file, err.line), (&files::rotated(&path, 3), 1));
        assert!(matches!(err.reason, Reason::Seq { .. }), "{err}");
    }

    #[test]
    fn retention_is_vouched_for_by_a_pruned_row_and_removal_by_hand_is_not() {
        let dir = TestDir::new("keep");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(Options {
            path: path.clone(),
            rotate_bytes: 600,
            keep_rotated: Some(2),
            keep_rotated_for: std::time::Duration::ZERO,
            ..Options::new("")
        })
        .expect("open");
        for i in 0..40 {
            log.append_blocking(row(i)).expect("append");
        }
        drop(log);
        let rotated: Vec<_> = files::segments(&path)
            .expect("segments")
            .into_iter()
            .filter(|s| s.number.is_some())
            .collect();
        assert_eq!(rotated.len(), 2, "{rotated:?}");
        assert!(!files::rotated(&path, 1).exists(), "the oldest was pruned");
        let summary = verify(&path).expect("retention verifies");
        assert!(
            summary.rows > 40,
            "the data rows and the pruned rows: {summary:?}"
        );
        // The oldest file kept, removed by hand: no pruned row accounts for it.
        fs::remove_file(&rotated[0].path).expect("remove");
        let err = verify(&path).expect_err("a gap nobody vouched for");
        assert!(matches!(err.reason, Reason::Missing(_)), "{err}");
    }

    /// An outside pass's L1: with `keep_rotated` alone, a caller's flood of rows rotated an
    /// earlier call's out of the log. A file younger than `keep_rotated_for` stays.
    #[test]
    fn a_flood_does_not_prune_files_younger_than_their_keep() {
        let dir = TestDir::new("young");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(Options {
            path: path.clone(),
            rotate_bytes: 600,
            keep_rotated: Some(2),
            ..Options::new("")
        })
        .expect("open");
        for i in 0..40 {
            log.append_blocking(row(i)).expect("append");
        }
        drop(log);
        assert!(
            files::rotated(&path, 1).exists(),
            "the first file was pruned"
        );
        let rows: Vec<_> = crate::audit::read_rows(&path)
            .expect("read")
            .filter_map(Result::ok)
            .collect();
        assert!(rows.iter().all(|r| r["kind"] != "pruned"), "{rows:?}");
        assert_eq!(verify(&path).expect("verifies").rows, 40);
    }

    #[test]
    fn an_empty_directory_is_an_io_error() {
        let dir = TestDir::new("none");
        let err = verify(&dir.path().join("audit.jsonl")).expect_err("nothing there");
        assert!(err.is_io(), "{err}");
    }
}
