//! Sessions an approver terminated: every later call of such a session is blocked until an
//! admin clears it. Kept on disk beside the audit log, so a restart of guardd does not end the
//! block. A session's name is the caller's to choose, so a session is its name under the uid
//! that used it: one uid naming another's session cannot have that session terminated.

use std::{
    collections::BTreeMap,
    fs,
    io::{self, Write as _},
    os::unix::fs::OpenOptionsExt as _,
    path::{Path, PathBuf},
    sync::Mutex,
};

use serde::{Deserialize, Serialize};

/// A terminated session.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Terminated {
    pub session: String,
    /// The uid whose session it is (none in a file from before uids were kept: then the
    /// name is blocked for every uid).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<u32>,
    /// The call whose approver terminated it.
    pub call_id: String,
    /// Who: `judge:NAME`, `command`, `auto`.
    pub by: String,
    /// RFC 3339, UTC.
    pub since: String,
}

/// A terminated session's name, and its uid.
type Key = (String, Option<u32>);

/// The terminated sessions.
#[derive(Debug, Default)]
pub struct Sessions {
    path: Option<PathBuf>,
    map: Mutex<BTreeMap<Key, Terminated>>,
}

impl Sessions {
    /// The sessions kept at `<audit>.sessions`; a file that cannot be read stops the start
    /// (forgetting the block would unblock the sessions silently).
    pub fn beside(audit: &Path) -> io::Result<Self> {
        let mut name = audit.as_os_str().to_owned();
        name.push(".sessions");
        let path = PathBuf::from(name);
        let map = match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice::<Vec<Terminated>>(&bytes)
                .map_err(|e| io::Error::other(format!("{}: {e}", path.display())))?
                .into_iter()
                .map(|t| ((t.session.clone(), t.uid), t))
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => BTreeMap::new(),
            Err(e) => return Err(e),
        };
        Ok(Self {
            path: Some(path),
            map: Mutex::new(map),
        })
    }

    /// A terminated session named `session`, of any uid, if there is one.
    pub fn get(&self, session: &str) -> Option<Terminated> {
        self.lock().values().find(|t| t.session == session).cloned()
    }

    /// Whether `uid`'s session `session` is terminated: the block, if it is.
    pub fn blocks(&self, uid: u32, session: &str) -> Option<Terminated> {
        let map = self.lock();
        let name = session.to_owned();
        map.get(&(name.clone(), Some(uid)))
            .or_else(|| map.get(&(name, None)))
            .cloned()
    }

    /// The block of `session` for every uid (an agent's: `agent:NAME`), if there is one; a
    /// session some caller named is its uid's alone, and never this.
    pub fn blocks_everyone(&self, session: &str) -> Option<Terminated> {
        self.lock().get(&(session.to_owned(), None)).cloned()
    }

    /// Every terminated session.
    pub fn list(&self) -> Vec<Terminated> {
        self.lock().values().cloned().collect()
    }

    /// Blocks a session, durably.
    pub fn terminate(&self, t: Terminated) -> io::Result<()> {
        let mut map = self.lock();
        map.insert((t.session.clone(), t.uid), t);
        self.save(&map)
    }

    /// Unblocks every session named `session`; false when none was blocked.
    pub fn clear(&self, session: &str) -> io::Result<bool> {
        let mut map = self.lock();
        let before = map.len();
        map.retain(|(name, _), _| name != session);
        if map.len() == before {
            return Ok(false);
        }
        self.save(&map).map(|()| true)
    }

    fn save(&self, map: &BTreeMap<Key, Terminated>) -> io::Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let list: Vec<&Terminated> = map.values().collect();
        let text = serde_json::to_vec_pretty(&list).map_err(io::Error::other)?;
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        // Made afresh, never followed: whatever is at the temporary name (a symlink planted
        // to have root write elsewhere) is replaced, not written through.
        match fs::remove_file(&tmp) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&text)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        crate::audit::files::sync_dir(path.parent().unwrap_or(Path::new(".")))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, Terminated>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}
