//! One merged policy per workspace, kept until its project file or the base policy changes.
//!
//! Each call costs a `canonicalize` of its working directory (which deciding does anyway) and
//! one `lstat` of `.guard/policy.toml`, compared with the [`Stamp`] of the text last merged:
//! no inotify, nothing to miss, and an edit is in force from the next call on. Only a changed
//! file is read and merged again (a few milliseconds, once per change).

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
};

use super::{
    file::{self, Stamp},
    merge,
};
use crate::{call::intent::Intent, policy::Policy};

/// How many workspaces are kept; past it the cache starts over (each is merged again on its
/// next call), so callers naming ever new directories cannot grow guardd without bound.
const MAX_WORKSPACES: usize = 4096;

/// A workspace's merged policy and what it was made from.
struct Entry {
    /// The version of the base policy it was merged with (a reload makes it stale).
    base: String,
    /// The project file as merged; `None` when it could not even be looked at.
    stamp: Option<Stamp>,
    /// The SHA-256 of the text merged (empty when none was read).
    sha256: String,
    /// Whether the stamp alone may be trusted: the file was last changed long enough before
    /// it was read that a later change shows in its times (see [`Stamp::settled`]).
    settled: bool,
    policy: Arc<Policy>,
}

/// The merged policies of the workspaces calls came from.
#[derive(Default)]
pub struct Projects {
    entries: Mutex<HashMap<PathBuf, Entry>>,
}

impl Projects {
    /// The policy `intent` is decided under: `base`, or `base` merged with the project policy
    /// of the workspace its caller is in (blocking every call there when that is refused). A
    /// call no one makes (no caller), or from no workspace, gets `base`.
    pub fn for_call(&self, base: &Arc<Policy>, intent: &Intent) -> Arc<Policy> {
        if intent.caller.is_none() || base.settings().workspaces.is_empty() {
            return Arc::clone(base);
        }
        let ws = intent
            .cwd
            .as_deref()
            // A relative one would be taken from guardd's own directory (`Place::of` refuses it).
            .filter(|cwd| cwd.is_absolute())
            .and_then(|cwd| std::fs::canonicalize(cwd).ok())
            .and_then(|real| base.workspace_of(&real));
        match ws {
            Some(ws) => self.of_workspace(base, &ws),
            None => Arc::clone(base),
        }
    }

    /// The policy of workspace `ws` (a real path) under `base`.
    pub fn of_workspace(&self, base: &Arc<Policy>, ws: &Path) -> Arc<Policy> {
        let now = match file::stamp(ws) {
            Ok(None) => {
                self.lock().remove(ws);
                return Arc::clone(base);
            }
            Ok(Some(s)) => Some(s),
            Err(_) => None,
        };
        let cached = self.lock().get(ws).and_then(|e| {
            let same = e.base == base.version() && e.stamp.is_some() && e.stamp == now;
            same.then(|| (e.settled, e.sha256.clone(), Arc::clone(&e.policy)))
        });
        if let Some((true, _, policy)) = cached {
            return policy;
        }
        // Unsettled (changed within a clock tick of its last read, where an edit of the same
        // size may keep every time and the inode): read again, merged again only if the
        // text differs. Git's index handles its "racily clean" files the same way.
        let read = file::read(ws);
        if let (Some((_, sha256, policy)), Ok(Some(f))) = (&cached, &read)
            && f.sha256 == *sha256
        {
            if let Some(e) = self.lock().get_mut(ws) {
                e.settled = f.stamp.settled();
            }
            return Arc::clone(policy);
        }
        let entry = load(base, ws, now, read);
        let policy = Arc::clone(&entry.policy);
        let mut entries = self.lock();
        if entries.len() >= MAX_WORKSPACES {
            entries.clear();
        }
        entries.insert(ws.to_owned(), entry);
        policy
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PathBuf, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Merges the project policy of `ws` as `read`, into the entry to keep (`looked`, the
/// `lstat`'s stamp, stands for a file that could not be read).
fn load(
    base: &Arc<Policy>,
    ws: &Path,
    looked: Option<Stamp>,
    read: Result<Option<file::ProjectFile>, String>,
) -> Entry {
    let path = ws.join(file::RELATIVE);
    let entry = |stamp: Option<Stamp>, sha256: &str, policy| Entry {
        base: base.version().to_owned(),
        settled: stamp.is_some_and(|s| s.settled()),
        stamp,
        sha256: sha256.to_owned(),
        policy,
    };
    match read {
        Ok(Some(f)) => match merge::merged(base, ws, &f) {
            Ok(p) => entry(Some(f.stamp), &f.sha256, Arc::new(p)),
            Err(errors) => {
                let why = super::ProjectError::Invalid(errors).summary();
                tracing::warn!(project = %f.path.display(), "project policy refused: {why}");
                let barred = base.barred(&f.path, &f.sha256, why);
                entry(Some(f.stamp), &f.sha256, Arc::new(barred))
            }
        },
        // Gone between the look and the read: the base's, and no stamp, so looked at again.
        Ok(None) => entry(None, "", Arc::clone(base)),
        Err(why) => {
            tracing::warn!(project = %path.display(), "project policy refused: {why}");
            entry(looked, "", Arc::new(base.barred(&path, "", why)))
        }
    }
}
