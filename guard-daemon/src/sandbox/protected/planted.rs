//! What a call made of the protected names that were not there when it started: found at
//! its end, and moved aside so that nothing outside guard follows them.

use std::{
    ffi::CString,
    os::{
        fd::{AsFd, AsRawFd as _, OwnedFd},
        unix::ffi::OsStrExt as _,
    },
    sync::Arc,
};

use nix::{errno::Errno, fcntl::OFlag, sys::stat::Mode};

use super::{super::landlock::Writable, discover};

/// The protected names that were not there when a call started, beneath its writable
/// directories: no mount can keep them from being made, so they are looked at again at the
/// call's end, and each one made is a divergence on its receipt (`Effect::Planted`).
#[derive(Debug, Default)]
pub struct Absent {
    /// Each name, with its writable directory (pinned, and as shown).
    /// The names of one directory, watched one after the other, share its descriptor.
    pub(super) names: Vec<(Arc<OwnedFd>, String, String)>,
    /// Each writable directory's repository index, whose new gitlinks' `.git`s are planted too.
    pub(super) indexes: Vec<(crate::sandbox::gitlinks::Index, String)>,
    /// What was beneath each writable directory, walked again at the end for names made in
    /// the directories below it (`discover`).
    pub(super) walks: Vec<discover::Walked>,
}

/// A protected name made during a call, and what became of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planted {
    /// The path it was made at.
    pub path: String,
    /// Where it was moved to, so that nothing looking for the name finds it; `Err` says why it
    /// could not be (it is then still there).
    pub moved_to: Result<String, String>,
}

impl Absent {
    /// Whether there is nothing to look at (no writable directory, or none with a name).
    pub fn is_empty(&self) -> bool {
        self.names.is_empty() && self.indexes.is_empty() && self.walks.is_empty()
    }

    /// Watches `name` beneath `w`.
    pub(super) fn watch(&mut self, w: &Writable, name: &str) {
        let root = w.path.to_string_lossy().into_owned();
        let dir = match self.names.last() {
            Some((dir, _, last)) if *last == root => Arc::clone(dir),
            _ => match w.pin.try_clone() {
                Ok(dir) => Arc::new(dir),
                Err(_) => return,
            },
        };
        self.names.push((dir, name.to_owned(), root));
    }

    /// [`Absent::made_and_moved`] off the runtime (the call's index is read too), and at once
    /// for a call that writes nowhere.
    pub async fn settle(self, tag: &str) -> Vec<Planted> {
        if self.is_empty() {
            return Vec::new();
        }
        let tag = tag.to_owned();
        tokio::task::spawn_blocking(move || self.made_and_moved(&tag))
            .await
            .unwrap_or_default()
    }

    /// Those made since, each moved aside in its directory (`NAME.guard-planted-TAG-RANDOM`): the
    /// call's processes are gone, and what it planted does not wait there for git, direnv or
    /// an agent to run it with the developer's rights.
    pub fn made_and_moved(&self, tag: &str) -> Vec<Planted> {
        let made = self.names.iter().filter(|(dir, name, _)| {
            let flags = nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW;
            if name == super::BARE_HEAD {
                return discover::is_bare(dir.as_fd());
            }
            nix::sys::stat::fstatat(dir.as_fd(), name.as_str(), flags).is_ok()
        });
        let mut out: Vec<Planted> = made
            .map(|(dir, name, root)| planted(dir, root, name.as_ref(), tag))
            .collect();
        for walked in &self.walks {
            let (made, cut) = walked.made();
            for (dir, shown, name) in made {
                out.push(planted(
                    &dir,
                    &shown,
                    std::ffi::OsStr::from_bytes(&name),
                    tag,
                ));
            }
            if cut {
                // Nothing can be said of what lies past: a divergence, and the next launch
                // there is refused until the directories are fewer.
                out.push(Planted {
                    path: walked.shown().to_owned(),
                    moved_to: Err(format!(
                        "the call left more than {} directories beneath it: past them, what \
                         it made was not looked at",
                        discover::MAX_DIRS
                    )),
                });
            }
        }
        for (index, root) in &self.indexes {
            match index.followed() {
                Ok(gits) => {
                    for git in gits {
                        out.push(planted(index.dir(), root, &git, tag));
                    }
                }
                Err(why) => out.push(Planted {
                    path: format!("{root}/.git/index"),
                    moved_to: Err(why.to_owned()),
                }),
            }
        }
        out
    }
}

/// `name` beneath `dir` (the writable directory `root`), made during a call, moved aside.
fn planted(dir: &OwnedFd, root: &str, name: &std::ffi::OsStr, tag: &str) -> Planted {
    let shown = |rel: &std::ffi::OsStr| format!("{root}/{}", rel.to_string_lossy());
    Planted {
        path: shown(name),
        moved_to: move_aside(dir, name, tag)
            .map(|new| shown(&new))
            .map_err(|e| e.desc().to_owned()),
    }
}

/// Renames `name` beneath `dir` to `NAME.guard-planted-TAG-RANDOM` beside itself, each directory on
/// the way opened without following a link (the call made them, and may have made them links
/// to anywhere root reaches); never over an existing file. Returns the new relative path.
fn move_aside(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    tag: &str,
) -> Result<std::ffi::OsString, Errno> {
    use std::ffi::OsStr;
    let bytes = name.as_bytes();
    let (parent, last) = match bytes.iter().rposition(|&b| b == b'/') {
        Some(i) => (Some(&bytes[..i]), &bytes[i + 1..]),
        None => (None, bytes),
    };
    let mut at: OwnedFd = dir.try_clone().map_err(|_| Errno::EMFILE)?;
    for part in parent.into_iter().flat_map(|p| p.split(|&b| b == b'/')) {
        let flags = OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
        at = nix::fcntl::openat(at.as_fd(), OsStr::from_bytes(part), flags, Mode::empty())?;
    }
    // A name no one can make first (a call that knew the next one's name could take it, so
    // that the move fails and the plant stays).
    let suffix = crate::call::random::hex(6);
    let mut new = last.to_vec();
    new.extend_from_slice(format!(".guard-planted-{tag}-{suffix}").as_bytes());
    let (from, to) = (
        CString::new(last).map_err(|_| Errno::EINVAL)?,
        CString::new(new.clone()).map_err(|_| Errno::EINVAL)?,
    );
    let fd = at.as_raw_fd();
    // SAFETY: two NUL-terminated names and a descriptor of ours; renameat2 has no wrapper in
    // every libc guard builds against (musl's guard-exec links this crate too).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_renameat2,
            fd,
            from.as_ptr(),
            fd,
            to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc != 0 {
        return Err(Errno::last());
    }
    let path = match parent {
        Some(p) => [p, b"/", &new].concat(),
        None => new,
    };
    Ok(std::os::unix::ffi::OsStringExt::from_vec(path))
}
