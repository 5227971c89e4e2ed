//! Reading a log back, rotated files included, oldest row first (for `guardctl events` and
//! `guardctl show`). Reading does not check hashes: that is [`verify()`](super::verify())'s job.

use std::{
    collections::VecDeque,
    fs::File,
    io::{BufRead as _, BufReader},
    path::{Path, PathBuf},
};

use serde_json::{Map, Value};

use super::{chain::Reason, files, verify::VerifyError};

/// Rows of a log in order. An unreadable or unparsable row is yielded as an error and reading
/// goes on with the next; an unfinished last line of the active file (a write in progress) is
/// skipped.
pub struct Rows {
    pending: VecDeque<PathBuf>,
    current: Option<(PathBuf, BufReader<File>, u64)>,
    buf: Vec<u8>,
}

/// Opens the log whose active file is `base` for reading. The set of files is taken now: a
/// rotation while reading may hide the rows written after this call.
pub fn read_rows(base: &Path) -> Result<Rows, VerifyError> {
    let segments = files::segments(base).map_err(|e| VerifyError {
        file: base.to_owned(),
        line: 0,
        seq: None,
        reason: Reason::Io(e),
    })?;
    Ok(Rows {
        pending: segments.into_iter().map(|s| s.path).collect(),
        current: None,
        buf: Vec::new(),
    })
}

/// [`read_rows`] of the newest `files` files of the log only (the active one and the rotated
/// ones before it), for what only recent rows can tell.
pub fn read_recent(base: &Path, files: usize) -> Result<Rows, VerifyError> {
    let mut rows = read_rows(base)?;
    let skip = rows.pending.len().saturating_sub(files);
    rows.pending.drain(..skip);
    Ok(rows)
}

impl Iterator for Rows {
    type Item = Result<Map<String, Value>, VerifyError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let Some((path, reader, line)) = &mut self.current else {
                let path = self.pending.pop_front()?;
                match File::open(&path) {
                    Ok(f) => self.current = Some((path, BufReader::new(f), 0)),
                    Err(e) => return Some(Err(error(&path, 0, Reason::Io(e)))),
                }
                continue;
            };
            self.buf.clear();
            match reader.read_until(b'\n', &mut self.buf) {
                Ok(0) => {
                    self.current = None;
                    continue;
                }
                Ok(_) => {}
                Err(e) => {
                    let err = error(path, *line + 1, Reason::Io(e));
                    self.current = None;
                    return Some(Err(err));
                }
            }
            *line += 1;
            let Some(text) = self.buf.strip_suffix(b"\n") else {
                if self.pending.is_empty() {
                    // The active file's unfinished last line: not a row yet.
                    self.current = None;
                    continue;
                }
                return Some(Err(error(path, *line, Reason::Torn)));
            };
            return Some(
                serde_json::from_slice(text)
                    .map_err(|e| error(path, *line, Reason::Unparsable(e.to_string()))),
            );
        }
    }
}

fn error(path: &Path, line: u64, reason: Reason) -> VerifyError {
    VerifyError {
        file: path.to_owned(),
        line,
        seq: None,
        reason,
    }
}
