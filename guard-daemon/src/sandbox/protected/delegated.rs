//! What a repository's own config hands to files in its worktree, which git then runs or
//! reads with the developer's rights: the hooks directory (`core.hooksPath = .githooks`), the
//! configs it includes (`include.path`, `includeIf.*.path`, and theirs in turn, each relative
//! to the file that names it, up to git's own depth of 10), and the programs its commands run
//! (`core.fsmonitor = ./tools/fsm.sh`, `alias.x = !scripts/x`, a diff or merge driver, a
//! credential helper...). Each is kept as the config itself is (`protected`): the config is
//! read-only to a call, so a call cannot add a key, but it could rewrite what an existing key
//! points at. Read from `.git/config` and `.git/config.worktree` with git's own syntax
//! ([`gitconfig`]); each file found beneath the repository without following a link out of
//! it, a regular file only, read without blocking, its first MiB only.

use std::{
    collections::VecDeque,
    os::unix::{ffi::OsStrExt as _, fs::OpenOptionsExt as _, io::AsRawFd as _},
    path::Path,
};

use super::{super::landlock::Writable, gitconfig};

/// Git's own bound on includes within includes (`MAX_INCLUDE_DEPTH`).
pub const MAX_DEPTH: usize = 10;

/// Most config files read for one repository.
const MAX_FILES: usize = 64;

/// Most bytes read of one config file.
const MAX_SIZE: u64 = 1 << 20;

/// The configs git reads from a repository's own directory.
const CONFIGS: [&str; 2] = [".git/config", ".git/config.worktree"];

/// Whether a key's subsection is absent, present, or either.
#[derive(Clone, Copy, Debug)]
enum Sub {
    No,
    Any,
    Maybe,
}

/// The keys whose value git runs as a command or a program's path (`*`: any key). Where a
/// word of the value names a path in the worktree, git runs (or an interpreter reads) a file a
/// call may otherwise write.
const COMMANDS: &[(&str, Sub, &str)] = &[
    ("core", Sub::No, "fsmonitor"),
    ("core", Sub::No, "sshcommand"),
    ("core", Sub::No, "pager"),
    ("core", Sub::No, "editor"),
    ("core", Sub::No, "askpass"),
    ("core", Sub::No, "gitproxy"),
    ("core", Sub::No, "alternaterefscommand"),
    ("sequence", Sub::No, "editor"),
    ("pager", Sub::No, "*"),
    ("interactive", Sub::No, "difffilter"),
    ("diff", Sub::No, "external"),
    ("diff", Sub::Any, "textconv"),
    ("diff", Sub::Any, "command"),
    ("filter", Sub::Any, "clean"),
    ("filter", Sub::Any, "smudge"),
    ("filter", Sub::Any, "process"),
    ("merge", Sub::Any, "driver"),
    ("difftool", Sub::Any, "cmd"),
    ("difftool", Sub::Any, "path"),
    ("mergetool", Sub::Any, "cmd"),
    ("mergetool", Sub::Any, "path"),
    ("credential", Sub::Maybe, "helper"),
    ("gpg", Sub::Maybe, "program"),
    ("gpg", Sub::Any, "defaultkeycommand"),
    ("uploadpack", Sub::No, "packobjectshook"),
    ("receive", Sub::No, "procreceivehook"),
    ("remote", Sub::Any, "uploadpack"),
    ("remote", Sub::Any, "receivepack"),
    ("hook", Sub::Any, "command"),
    ("trailer", Sub::Any, "command"),
    ("trailer", Sub::Any, "cmd"),
    ("tar", Sub::Any, "command"),
    ("browser", Sub::Any, "cmd"),
    ("browser", Sub::Any, "path"),
    ("man", Sub::Any, "cmd"),
    ("man", Sub::Any, "path"),
    ("guitool", Sub::Any, "cmd"),
    ("instaweb", Sub::No, "httpd"),
    ("imap", Sub::No, "tunnel"),
    ("sendemail", Sub::Maybe, "sendmailcmd"),
    ("sendemail", Sub::Maybe, "smtpserver"),
    ("sendemail", Sub::Maybe, "tocmd"),
    ("sendemail", Sub::Maybe, "cccmd"),
];

/// The keys whose value is a command only when it starts with `!`.
const BANG_COMMANDS: &[(&str, Sub, &str)] = &[
    ("alias", Sub::Maybe, "*"),
    ("submodule", Sub::Any, "update"),
];

/// What a repository's config hands to its worktree, each a path relative to the repository's
/// top (a protected name beneath it).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Delegated {
    /// Each `core.hooksPath`: a directory of hooks.
    pub hooks: Vec<String>,
    /// Each config included, at every depth.
    pub includes: Vec<String>,
    /// Each program a command-valued key names.
    pub commands: Vec<String>,
}

impl Delegated {
    /// All of them, each once.
    pub fn names(self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for name in self
            .hooks
            .into_iter()
            .chain(self.includes)
            .chain(self.commands)
        {
            if !out.contains(&name) {
                out.push(name);
            }
        }
        out
    }
}

/// What the repository whose top is `root` hands to its worktree, from its own configs
/// ([`CONFIGS`]); `read` gives the text of a file by its name (relative to `root`, or
/// absolute), or nothing.
#[cfg(test)]
pub fn of(root: &Path, read: impl Fn(&str) -> Option<String>) -> Delegated {
    of_configs(root, &CONFIGS.map(str::to_owned), read)
}

/// [`of`] from the configs `configs` (a linked worktree's are its main repository's).
fn of_configs(root: &Path, configs: &[String], read: impl Fn(&str) -> Option<String>) -> Delegated {
    let mut out = Delegated::default();
    let mut queue: VecDeque<(String, usize)> = configs.iter().map(|c| (c.clone(), 0)).collect();
    let mut seen: Vec<String> = Vec::new();
    // Breadth first: a file is read at the least depth it is included at.
    while let Some((name, depth)) = queue.pop_front() {
        if seen.contains(&name) || seen.len() >= MAX_FILES {
            continue;
        }
        seen.push(name.clone());
        let Some(text) = read(&name) else {
            continue;
        };
        let dir = name.rsplit_once('/').map_or("", |(dir, _)| dir);
        for e in gitconfig::parse(&text).entries {
            let Some(value) = e.value.as_deref() else {
                continue;
            };
            let section = (e.section.as_str(), e.subsection.is_some(), e.key.as_str());
            match section {
                ("core", false, "hookspath") => out.hooks.extend(inside(root, "", value)),
                ("include", false, "path") | ("includeif", true, "path") => {
                    // An include is taken from the directory of the file that names it.
                    if let Some(included) = inside(root, dir, value) {
                        if depth < MAX_DEPTH {
                            queue.push_back((included.clone(), depth + 1));
                        }
                        out.includes.push(included);
                    }
                }
                _ if runs(&e, value) => {
                    // Git runs commands from the top of the worktree. A word without a `/` is
                    // a path only as a file there (`sh fsm.sh`), not a program on the PATH.
                    let named = words(value)
                        .into_iter()
                        .filter(|w| w.contains('/') || read(w).is_some())
                        .filter_map(|w| inside(root, "", &w));
                    out.commands.extend(named);
                }
                _ => {}
            }
        }
    }
    out
}

/// Whether git runs `value` of `e` as a command.
fn runs(e: &gitconfig::Entry, value: &str) -> bool {
    let matches = |&(section, sub, key): &(&str, Sub, &str)| {
        let sub = match sub {
            Sub::No => e.subsection.is_none(),
            Sub::Any => e.subsection.is_some(),
            Sub::Maybe => true,
        };
        e.section == section && sub && (key == "*" || e.key == key)
    };
    COMMANDS.iter().any(matches) || (value.starts_with('!') && BANG_COMMANDS.iter().any(matches))
}

/// The words of the command `value` that may name a path, as a shell splits them: quotes and
/// `\` taken away, `;`, `&`, `|`, `(`, `)`, `<`, `>` and backquotes between words, `--option=`
/// and `NAME=` before a path dropped; what a variable or a command's output starts a word with
/// (`$(git rev-parse --show-toplevel)/x`, `$PWD/x`, `${GIT_DIR}/../x`) taken for the top of the
/// worktree (`x`, `../x`); an option or a URL is none.
fn words(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut chars = value.strip_prefix('!').unwrap_or(value).chars();
    let mut quote: Option<char> = None;
    let mut ended = |word: &mut String| {
        let w = std::mem::take(word);
        let w = match w.split_once('=') {
            Some((before, path))
                if before.starts_with('-')
                    || before
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                path.to_owned()
            }
            _ => w,
        };
        // After the last expansion, its first `/`: what follows is the path beneath it.
        let w = match w.rfind('$') {
            Some(at) => match w[at..].find('/') {
                Some(slash) => w[at + slash + 1..].to_owned(),
                None => String::new(),
            },
            None => w,
        };
        if !w.is_empty() && !w.contains('\0') && !w.contains("://") && !w.starts_with('-') {
            out.push(w);
        }
    };
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some('"'), '\\') | (None, '\\') => word.extend(chars.next()),
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => quote = Some(c),
            (None, c) if c.is_whitespace() || ";&|()<>`".contains(c) => ended(&mut word),
            (None, c) => word.push(c),
        }
    }
    ended(&mut word);
    out
}

/// `value` (relative to `dir` beneath `root`, or absolute) as a protected name beneath
/// `root`, `..` applied; outside `root`, its absolute path (a hooks directory shared by the
/// workspace's projects: kept where a call may write it, `protected::keep_path`). `None`
/// through `~` or `%(prefix)` (outside every workspace), or with nothing left. Git's
/// `:(optional)` before a path is taken away.
fn inside(root: &Path, dir: &str, value: &str) -> Option<String> {
    let value = value.strip_prefix(":(optional)").unwrap_or(value);
    if value.is_empty() || value.starts_with(['~', '%']) || value.contains('\0') {
        return None;
    }
    let path = crate::sandbox::resolve::normalize(&root.join(dir).join(value));
    match path.strip_prefix(root) {
        Ok(rel) => {
            let name = rel.to_str()?.to_owned();
            (!name.is_empty() && super::invalid(&name).is_none()).then_some(name)
        }
        Err(_) => path.to_str().map(str::to_owned),
    }
}

/// What the repository at `w` hands to its worktree (`of`), read beneath it; for a linked
/// worktree or a submodule (`.git` a file), from the git directory it names and that one's
/// common directory. Each a name beneath `w`, or an absolute path outside it.
pub fn names(w: &Writable) -> Vec<String> {
    let root = Path::new(std::ffi::OsStr::from_bytes(w.path.as_bytes()));
    let read_at = |name: &str| match name.starts_with('/') {
        true => read_outside(Path::new(name)),
        false => read(w, root, name),
    };
    let configs = match git_dir(root, read(w, root, ".git")) {
        Some(dirs) => dirs,
        None => CONFIGS.map(str::to_owned).to_vec(),
    };
    of_configs(root, &configs, read_at).names()
}

/// The configs of the git directory a `.git` file (`text`) names for the worktree at `root`:
/// its common directory's `config` and its own `config.worktree`.
fn git_dir(root: &Path, text: Option<String>) -> Option<Vec<String>> {
    let text = text?;
    let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
    let dir = crate::sandbox::resolve::normalize(&root.join(named));
    let common = match read_outside(&dir.join("commondir")) {
        Some(c) => crate::sandbox::resolve::normalize(&dir.join(c.trim())),
        None => dir.clone(),
    };
    let shown = |p: std::path::PathBuf| p.to_str().map(str::to_owned);
    Some(
        [
            shown(common.join("config")),
            shown(dir.join("config.worktree")),
        ]
        .into_iter()
        .flatten()
        .collect(),
    )
}

/// The text of the regular file at the absolute `path` (a linked worktree's configs, in its
/// main repository): its last component not followed, read without blocking and bounded.
fn read_outside(path: &Path) -> Option<String> {
    read_bounded(path, libc::O_NOFOLLOW)
}

/// The text of the regular file at `path`, opened with `flags` and without blocking (a call
/// may have left a FIFO), its first [`MAX_SIZE`] bytes.
fn read_bounded(path: &Path, flags: libc::c_int) -> Option<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | flags)
        .open(path)
        .ok()?;
    file.metadata().ok().filter(std::fs::Metadata::is_file)?;
    let mut bytes = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, MAX_SIZE), &mut bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// What the repository whose top is the directory `top` hands to its worktree, for a check
/// outside a call (Claude Code's own writes, `client::hook`).
pub fn names_at(top: &Path) -> Vec<String> {
    use nix::fcntl::OFlag;
    let flags = OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let Ok(pin) = nix::fcntl::open(top, flags, nix::sys::stat::Mode::empty()) else {
        return Vec::new();
    };
    let Ok(st) = nix::sys::stat::fstat(&pin) else {
        return Vec::new();
    };
    let Ok(path) = std::ffi::CString::new(top.as_os_str().as_bytes()) else {
        return Vec::new();
    };
    let w = Writable {
        path,
        dev: st.st_dev,
        ino: st.st_ino,
        access: ::landlock::BitFlags::EMPTY,
        pin,
    };
    names(&w)
}

/// What `path` is, or lies beneath, of what the config of a repository above it hands to its
/// worktree, within it or elsewhere (a linked worktree's and a submodule's too): Claude Code's
/// own writes are held to these as to the protected names (`client::hook`).
pub fn handed(path: &Path) -> Option<String> {
    for top in path.ancestors().skip(1) {
        if std::fs::symlink_metadata(top.join(".git")).is_err() {
            continue;
        }
        let Ok(rel) = path.strip_prefix(top) else {
            continue;
        };
        let at = |n: &String| match n.starts_with('/') {
            true => path.starts_with(n),
            false => rel.starts_with(n),
        };
        if let Some(name) = names_at(top).into_iter().find(at) {
            return Some(name);
        }
    }
    None
}

/// The text of `name` beneath `w` (shown as `root`): found without following a link on the
/// way, and a link itself followed only to a file beneath `w`; a regular file only, read
/// without blocking (a call may have left a FIFO) and bounded.
fn read(w: &Writable, root: &Path, name: &str) -> Option<String> {
    let (mut place, link) = super::beneath(w, name).ok()?;
    if link {
        let target = std::fs::canonicalize(root.join(name)).ok()?;
        let rel = target.strip_prefix(root).ok()?.to_str()?;
        place = match super::beneath(w, rel).ok()? {
            (place, false) => place,
            _ => return None,
        };
    }
    // A FIFO is not opened at all: opening one for reading is itself a change a writer sees.
    let regular = nix::sys::stat::fstat(&place.pin)
        .is_ok_and(|st| st.st_mode & libc::S_IFMT == libc::S_IFREG);
    if !regular {
        return None;
    }
    let path = format!("/proc/self/fd/{}", place.pin.as_raw_fd());
    read_bounded(Path::new(&path), 0)
}

#[cfg(test)]
mod tests;
