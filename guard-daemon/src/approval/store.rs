//! The held calls on disk, beside the audit log: one file per call, written whole (a temporary
//! file, fsync, rename, fsync of the directory), so a restart of guardd finds every held call
//! as it was, neither lost nor answered. The directory is root's alone (0700, files 0600): a
//! record holds the call's arguments as sent.

use std::{
    fs,
    io::{self, Write as _},
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
};

use super::Record;

/// The largest record read: a call's arguments come in a frame of at most 1 MiB.
const MAX_RECORD: u64 = 16 << 20;

/// Whether `path` is a record as guardd writes them: a regular file of its own uid, of a
/// size it could have written; why not otherwise.
fn written_by_guardd(path: &Path) -> Result<(), String> {
    let meta = fs::symlink_metadata(path).map_err(|e| e.to_string())?;
    let me = nix::unistd::geteuid().as_raw();
    if !meta.file_type().is_file() {
        return Err("not a regular file".into());
    }
    if meta.uid() != me {
        return Err(format!("owned by uid {}, not guardd's", meta.uid()));
    }
    if meta.len() > MAX_RECORD {
        return Err(format!("{} bytes, more than a record holds", meta.len()));
    }
    Ok(())
}

/// A record as the store writes it.
pub fn encode(record: &Record) -> io::Result<Vec<u8>> {
    serde_json::to_vec_pretty(record).map_err(io::Error::other)
}

/// What [`Store::load`] found: the records, and the files that are no record (name, why).
pub type Loaded = (Vec<Record>, Vec<(String, String)>);

/// The directory of held calls.
#[derive(Debug)]
pub struct Store {
    dir: PathBuf,
}

impl Store {
    /// The store for the audit log at `audit`: `<audit>.pending/`, created if missing.
    /// A directory guardd did not make for itself (a symlink, another uid's) is refused: who
    /// can write a record there can have guardd run any call as approved.
    pub fn beside(audit: &Path) -> io::Result<Self> {
        let mut name = audit.as_os_str().to_owned();
        name.push(".pending");
        let dir = PathBuf::from(name);
        fs::create_dir_all(&dir)?;
        let meta = fs::symlink_metadata(&dir)?;
        let me = nix::unistd::geteuid().as_raw();
        if !meta.file_type().is_dir() || meta.uid() != me {
            return Err(io::Error::other(format!(
                "{} is not a directory of guardd's own (uid {me}): it is a {} of uid {}; \
                 move it away and start again",
                dir.display(),
                if meta.file_type().is_symlink() {
                    "symlink"
                } else if meta.file_type().is_dir() {
                    "directory"
                } else {
                    "file"
                },
                meta.uid()
            )));
        }
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))?;
        Ok(Self { dir })
    }

    /// Where the store is.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, call_id: &str) -> PathBuf {
        self.dir.join(format!("{call_id}.json"))
    }

    /// Writes a record durably, replacing the call's previous one.
    pub fn save(&self, record: &Record) -> io::Result<()> {
        self.write(&record.held.call_id, &encode(record)?)
    }

    /// Writes call `call_id`'s record, `text` ([`encode`]d), durably, replacing its previous one.
    pub fn write(&self, call_id: &str, text: &[u8]) -> io::Result<()> {
        let path = self.path(call_id);
        let tmp = self.dir.join(format!(".{call_id}.tmp"));
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(text)?;
        f.sync_all()?;
        fs::rename(&tmp, &path)?;
        crate::audit::files::sync_dir(&self.dir)
    }

    /// Removes a call's record, durably; a record already gone is no error.
    pub fn remove(&self, call_id: &str) -> io::Result<()> {
        match fs::remove_file(self.path(call_id)) {
            Ok(()) => crate::audit::files::sync_dir(&self.dir),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Moves a file that is no record (`name`, as [`Store::load`] gave it) aside, to
    /// `NAME.refused`, for an operator to look at: it is reported once, and never loaded again.
    pub fn set_aside(&self, name: &str) -> io::Result<()> {
        let from = self.dir.join(name);
        fs::rename(&from, self.dir.join(format!("{name}.refused")))?;
        crate::audit::files::sync_dir(&self.dir)
    }

    /// Every record, and the files that are no record (name, why): those never run.
    pub fn load(&self) -> io::Result<Loaded> {
        let mut records = Vec::new();
        let mut bad = Vec::new();
        for entry in fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if name.starts_with('.') || !name.ends_with(".json") {
                continue;
            }
            let read = written_by_guardd(&path)
                .and_then(|()| fs::read(&path).map_err(|e| e.to_string()))
                .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()));
            match read {
                Ok(r) if format!("{}.json", r.held.call_id) != name => {
                    bad.push((name, format!("holds call {}", r.held.call_id)));
                }
                Ok(r) if r.form.digest() != r.held.digest => {
                    bad.push((name, "does not match its digest".to_owned()));
                }
                Ok(r) if r.form.input.as_ref().is_some_and(|i| !i.intact()) => {
                    bad.push((name, "its input does not match its SHA-256".to_owned()));
                }
                Ok(r) => records.push(r),
                Err(e) => bad.push((name, e)),
            }
        }
        records.sort_by(|a, b| a.held.call_id.cmp(&b.held.call_id));
        Ok((records, bad))
    }
}
