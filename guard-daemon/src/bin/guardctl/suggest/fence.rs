//! What `policy suggest` never proposes, whatever the calls used: a `read`, `write` or `exec`
//! path is the file or directory a call opened, and a directory grants all beneath it, so one
//! `ls /home` would otherwise propose every home. Never the root, a top-level directory as a
//! whole (`/etc`, `/proc`, `/sys`, `/dev`, `/boot`, `/run`, `/var`, `/home`, `/root`...), a
//! home as a whole, guard's own places (its state, configuration and runtime directory, the
//! audit log's and the socket's directories) or what holds them, a process's own place in
//! `/proc` (a rule would name guardd's), nor a protected name; nor a path that is not plain
//! (relative, `.`, `..`, an empty component), that shows other than it reads, or that resolves
//! to any of these. Each refusal says why, for the suggestion's comments.

use std::path::{Component, Path, PathBuf};

use guard::sandbox::protected::NAMES;

use crate::term::hidden;

/// The directories whose entries are homes.
const HOMES: [&str; 2] = ["/home", "/Users"];

/// guard's own places, wherever guardd was told to keep its log and socket.
const GUARD: [(&str, &str); 3] = [
    ("/var/lib/guard", "guard's state"),
    ("/etc/guard", "guard's configuration"),
    ("/run/guard", "guardd's runtime directory"),
];

/// The places no suggestion names, or holds.
pub struct Fence {
    own: Vec<(PathBuf, String)>,
}

impl Fence {
    /// The fence of a host whose guardd writes `audit` and listens on `socket`.
    pub fn new(audit: &Path, socket: &Path) -> Self {
        let mut own: Vec<(PathBuf, String)> = GUARD
            .iter()
            .map(|(dir, what)| (PathBuf::from(dir), (*what).to_owned()))
            .collect();
        for (file, what) in [
            (audit, "the audit log's directory"),
            (socket, "guardd's socket directory"),
        ] {
            if let Some(dir) = directory_of(file) {
                own.push((dir, what.to_owned()));
            }
        }
        Self { own }
    }

    /// Why `path` may not be proposed; `None` when it may.
    pub fn refuses(&self, path: &str) -> Option<String> {
        if path.chars().any(hidden) {
            return Some("it holds characters that do not show as themselves".to_owned());
        }
        let p = Path::new(path);
        if !p.is_absolute() {
            return Some("not an absolute path".to_owned());
        }
        if !plain(path) {
            return Some("not a plain path (`.`, `..` or an empty component)".to_owned());
        }
        if let Some(why) = self.place(p) {
            return Some(why);
        }
        // A name that leads elsewhere (a symlink a call made, /proc/self/root) grants where it
        // leads: landlock opens the path the policy names.
        let real = std::fs::canonicalize(p).ok()?;
        if real == p {
            return None;
        }
        let why = self.place(&real)?;
        Some(format!("it resolves to {}: {why}", real.display()))
    }

    /// Why the plain absolute path `p` names too much; `None` when it does not.
    fn place(&self, p: &Path) -> Option<String> {
        let depth = p.components().count() - 1;
        let parent = p.parent().and_then(Path::to_str).unwrap_or_default();
        if depth == 0 {
            return Some("the whole file system".to_owned());
        }
        if HOMES.iter().any(|h| p == Path::new(h)) {
            return Some("every home".to_owned());
        }
        if p == Path::new("/root") || (depth == 2 && HOMES.contains(&parent)) {
            return Some("a home, as a whole".to_owned());
        }
        if depth == 1 {
            return Some("a top-level directory, as a whole".to_owned());
        }
        // What /proc/self, /proc/thread-self and /proc/PID name depends on who looks: a rule
        // is opened by guardd, so it would name guardd's (its root, its cwd, its descriptors).
        let mut parts = p.components().skip(1).map(|c| c.as_os_str().to_str());
        if parts.next() == Some(Some("proc"))
            && parts.next().flatten().is_some_and(|c| {
                c == "self" || c == "thread-self" || c.bytes().all(|b| b.is_ascii_digit())
            })
        {
            return Some("a process's own place: a rule would name guardd's".to_owned());
        }
        for (dir, what) in &self.own {
            if p.starts_with(dir) {
                return Some(format!("{what} ({})", dir.display()));
            }
            if dir.starts_with(p) {
                return Some(format!("it holds {what} ({})", dir.display()));
            }
        }
        let text = p.to_str().unwrap_or_default();
        let name = NAMES
            .iter()
            .find(|n| text.contains(&format!("/{n}/")) || text.ends_with(&format!("/{n}")))?;
        Some(format!(
            "a protected name ({name}): what programs outside guard run"
        ))
    }
}

/// Whether `path` is written without `.`, `..`, an empty component or a trailing `/`: as
/// written, it is what it names.
fn plain(path: &str) -> bool {
    let p = Path::new(path);
    let rebuilt: PathBuf = p.components().collect();
    rebuilt.as_os_str() == p.as_os_str()
        && !p
            .components()
            .any(|c| matches!(c, Component::CurDir | Component::ParentDir))
}

/// The absolute directory that holds `file`, where it can be told.
fn directory_of(file: &Path) -> Option<PathBuf> {
    let parent = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::canonicalize(parent)
        .ok()
        .or_else(|| parent.is_absolute().then(|| parent.to_path_buf()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new(
            Path::new("/srv/guard-log/audit.jsonl"),
            Path::new("/run/guard-dev/guard.sock"),
        )
    }

    #[test]
    fn no_suggestion_names_the_root_a_top_directory_a_home_or_guards_own() {
        let f = fence();
        for (path, why) in [
            ("/", "the whole file system"),
            ("/home", "every home"),
            ("/Users", "every home"),
            ("/root", "a home, as a whole"),
            ("/home/ann", "a home, as a whole"),
            ("/etc", "a top-level directory, as a whole"),
            ("/proc", "a top-level directory, as a whole"),
            ("/sys", "a top-level directory, as a whole"),
            ("/dev", "a top-level directory, as a whole"),
            ("/boot", "a top-level directory, as a whole"),
            ("/run", "a top-level directory, as a whole"),
            ("/var", "a top-level directory, as a whole"),
            ("/var/lib", "it holds guard's state (/var/lib/guard)"),
            (
                "/var/lib/guard/audit.jsonl",
                "guard's state (/var/lib/guard)",
            ),
            ("/etc/guard", "guard's configuration (/etc/guard)"),
            (
                "/srv/guard-log",
                "the audit log's directory (/srv/guard-log)",
            ),
            (
                "/run/guard-dev/x",
                "guardd's socket directory (/run/guard-dev)",
            ),
            ("/proc/self/root", "a process's own place"),
            ("/proc/1/cwd", "a process's own place"),
            ("/proc/thread-self/fd/3", "a process's own place"),
            (
                "/srv/ws/.git/hooks/pre-commit",
                "a protected name (.git/hooks)",
            ),
            ("/srv/ws/.claude", "a protected name (.claude)"),
            ("relative/path", "not an absolute path"),
            ("/srv/ws/../../etc", "not a plain path"),
            ("/srv//ws", "not a plain path"),
            ("/srv/ws/", "not a plain path"),
            ("/srv/ws/./x", "not a plain path"),
            ("/srv/ws/\u{202e}txt.exe", "it holds characters"),
            ("/srv/ws/a\u{9b}b", "it holds characters"),
        ] {
            let refused = f.refuses(path);
            assert!(
                refused.as_deref().is_some_and(|r| r.starts_with(why)),
                "{path}: {refused:?}, not {why}"
            );
        }
        for path in [
            "/etc/hostname",
            "/home/ann/src/x.rs",
            "/usr/bin/true",
            "/dev/null",
            "/proc/filesystems",
            "/srv/ws/src",
        ] {
            assert_eq!(f.refuses(path), None, "{path}");
        }
    }

    #[test]
    fn a_name_is_judged_where_it_leads() {
        let dir = std::env::temp_dir().join(format!("guardctl-fence-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        let link = dir.join("all");
        std::os::unix::fs::symlink("/", &link).expect("symlink");
        let refused = fence().refuses(link.to_str().expect("utf-8"));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(
            refused.as_deref(),
            Some("it resolves to /: the whole file system")
        );
    }
}
