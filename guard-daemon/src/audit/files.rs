//! The files of one log: the active `audit.jsonl` and its rotated predecessors
//! `audit.jsonl.1`, `audit.jsonl.2`, … (the smallest number is the oldest).

use std::{
    ffi::OsString,
    fs, io,
    path::{Path, PathBuf},
};

/// One file of a log, in chain order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    pub path: PathBuf,
    /// The rotation number; `None` for the active file.
    pub number: Option<u64>,
}

/// Path of rotated file `n` of the log at `base`.
pub fn rotated(base: &Path, n: u64) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(format!(".{n}"));
    PathBuf::from(name)
}

/// The next active file, made (with its room) before a rotation puts it in place: `base.next`,
/// which [`segments`] never lists.
pub fn next(base: &Path) -> PathBuf {
    let mut name = OsString::from(base.as_os_str());
    name.push(".next");
    PathBuf::from(name)
}

/// The files of the log at `base` in chain order: rotated ones by number, then the active one
/// if it exists. A missing directory is an error; a directory without the log is an empty list.
pub fn segments(base: &Path) -> io::Result<Vec<Segment>> {
    let dir = parent(base);
    let Some(stem) = base.file_name().and_then(|n| n.to_str()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "log path has no UTF-8 file name",
        ));
    };
    let prefix = format!("{stem}.");
    let mut out = Vec::new();
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        // Only `stem.N` with N all digits: leaves `audit.jsonl.tmp` and friends alone.
        let Some(n) = name.strip_prefix(&prefix) else {
            continue;
        };
        if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        if let Ok(n) = n.parse::<u64>() {
            out.push(Segment {
                path: entry.path(),
                number: Some(n),
            });
        }
    }
    out.sort_by_key(|s| s.number);
    if base.exists() {
        out.push(Segment {
            path: base.to_owned(),
            number: None,
        });
    }
    Ok(out)
}

/// The directory holding `base` (`.` for a bare file name).
pub fn parent(base: &Path) -> &Path {
    match base.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Makes the directory's entries (a rename, a new file) durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

/// Opens (creating if needed) the active file for reading and writing: owner-only, never
/// truncated, positioned by the caller.
pub fn open_active(base: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(base)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::testdir::TestDir;

    #[test]
    fn lists_rotated_by_number_then_active() {
        let dir = TestDir::new("segments");
        let base = dir.path().join("audit.jsonl");
        for name in [
            "audit.jsonl.10",
            "audit.jsonl.2",
            "audit.jsonl",
            "audit.jsonl.x",
            "other.1",
        ] {
            fs::write(dir.path().join(name), "").expect("write");
        }
        let got: Vec<_> = segments(&base)
            .expect("list")
            .into_iter()
            .map(|s| s.number)
            .collect();
        assert_eq!(got, [Some(2), Some(10), None]);
        assert_eq!(rotated(&base, 3), dir.path().join("audit.jsonl.3"));
    }
}
