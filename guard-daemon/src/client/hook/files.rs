//! Claude Code's own file tools (Read, Write, Edit, Glob, Grep...), decided by the policy.
//!
//! These run inside Claude Code, with its user's rights, not as a confined call: guard cannot
//! hold them to a landlock ruleset, only decide whether each may happen. The rule is the one a
//! confined call meets: a path the policy's shell tool may read here (its read or write
//! effects, in the caller's workspace) may be read, a path it may write may be written, and a
//! file the shell tool's user could not open for that is refused too. Anything else is denied
//! with the reason. Paths are compared as the hook resolves them, symlinks followed, since
//! Claude Code follows them; what changes between the answer and Claude Code's open (a link
//! swapped by a call still running in the background) is not seen (the book's `agents/claude-code.md`).

use std::{
    os::unix::fs::MetadataExt as _,
    path::{Component, Path, PathBuf},
};

use serde_json::{Map, Value};

use super::{Answer, Guardd, Options, Permission, PreToolUse};
use crate::{
    call::{decision::Decision, plan::LaunchPlan},
    policy::{args::normalize, glob_match},
    sandbox::protected,
};

/// What a file tool does with the path it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

impl Access {
    fn verb(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::Write => "write",
        }
    }
}

/// Claude Code's tools that open files themselves: the input field that names the path, and
/// what the tool does with it. A tool whose path field is absent works in `cwd`.
const FILE_TOOLS: &[(&str, &str, Access)] = &[
    ("Read", "file_path", Access::Read),
    ("Write", "file_path", Access::Write),
    ("Edit", "file_path", Access::Write),
    ("MultiEdit", "file_path", Access::Write),
    ("NotebookEdit", "notebook_path", Access::Write),
    ("NotebookRead", "notebook_path", Access::Read),
    ("Glob", "path", Access::Read),
    ("Grep", "path", Access::Read),
    ("LS", "path", Access::Read),
];

/// The answer for `input` when its tool is one of Claude Code's file tools; `None` otherwise.
pub(super) fn answer(
    input: &PreToolUse,
    opts: &Options,
    guardd: &mut impl Guardd,
) -> Option<Answer> {
    let &(tool, field, access) = FILE_TOOLS.iter().find(|t| t.0 == input.tool_name)?;
    let answer = match decide(input, opts, guardd, field, access) {
        Ok(reason) if opts.ask.iter().any(|g| glob_match(g, tool)) => Answer::new(
            Permission::Ask,
            format!("{reason}; the hook's --ask wants a human"),
        ),
        Ok(reason) => Answer::new(Permission::Allow, reason),
        Err(reason) => Answer::deny(reason),
    };
    Some(answer)
}

/// Why the file tool may go ahead, or why not.
fn decide(
    input: &PreToolUse,
    opts: &Options,
    guardd: &mut impl Guardd,
    field: &str,
    access: Access,
) -> Result<String, String> {
    let name = &input.tool_name;
    let cwd = input
        .cwd
        .as_deref()
        .map(Path::new)
        .filter(|c| c.is_absolute())
        .ok_or_else(|| format!("guard: {name} without an absolute cwd from Claude Code"))?;
    let target = target(&input.tool_input, field, cwd, name == "Glob")
        .map_err(|why| format!("guard: {name}: {why}"))?;
    let mut args = Map::new();
    args.insert("command".into(), Value::String(":".into()));
    let shell = &opts.shell_tool;
    let checked = guardd
        .check(shell, &args, Some(cwd))
        .map_err(|e| format!("guard: {e}; nothing runs without guardd"))?;
    let plan = match (checked.decision.decision, checked.plan) {
        (Decision::Allow, Some(plan)) => plan,
        _ => {
            return Err(format!(
                "guard: the policy's `{shell}` tool may not run in {}, so {name} may not \
                 either",
                cwd.display()
            ));
        }
    };
    let real = resolve_strict(&target).map_err(|why| format!("guard: {name}: {why}"))?;
    let roots = roots(&plan, access);
    if !roots.iter().any(|r| real.starts_with(r)) {
        let list: Vec<String> = roots.iter().map(|r| r.display().to_string()).collect();
        return Err(format!(
            "guard: {} is outside what the policy's `{shell}` tool may {} here ({})",
            real.display(),
            access.verb(),
            list.join(", ")
        ));
    }
    // The names a confined call's mount view keeps read-only, wherever a repository or project
    // sits: one list for the shell and for Claude Code's own writes.
    let names = plan.effects.protected.as_deref();
    if access == Access::Write
        && let Some(n) = [&real, &target]
            .iter()
            .find_map(|p| protected::named(p, names))
    {
        return Err(format!(
            "guard: {} is a protected name ({n}): git, direnv or an agent run or follow it \
             later with your rights, so no call changes it; change it yourself if you mean to",
            real.display()
        ));
    }
    // And what a repository's own config hands git's hooks, config or commands to
    // (`core.hooksPath = .githooks`), as the mount view keeps it.
    if access == Access::Write
        && let Some(n) = [&real, &target].iter().find_map(|p| protected::handed(p))
    {
        return Err(format!(
            "guard: {} is what a repository's config hands git's hooks, config or commands \
             to ({n}): git runs or reads it later with your rights, so no call changes it; \
             change it yourself if you mean to",
            real.display()
        ));
    }
    if let Some(user) = &plan.confinement.run_as {
        permitted(user, &real, access).map_err(|why| format!("guard: {why}"))?;
    }
    Ok(format!(
        "guard: {} is within what the policy's `{shell}` tool may {} here",
        real.display(),
        access.verb()
    ))
}

/// The absolute path the tool would open: its path field (relative to `cwd`), else `cwd`;
/// for Glob (`glob`), the directory its pattern starts from.
fn target(
    input: &Map<String, Value>,
    field: &str,
    cwd: &Path,
    glob: bool,
) -> Result<PathBuf, String> {
    let named = match input.get(field) {
        None | Some(Value::Null) if field == "path" => None,
        // `~` is no directory here; a tool that expands it would read the home.
        Some(Value::String(p)) if p.starts_with('~') => {
            return Err(format!("`{field}` starts with ~: give the path itself"));
        }
        Some(Value::String(p)) if !p.is_empty() => Some(PathBuf::from(p)),
        _ => return Err(format!("no `{field}` string")),
    };
    let mut at = normalize(&cwd.join(named.unwrap_or_default()));
    if let Some(pattern) = input.get("pattern").and_then(Value::as_str)
        && glob
    {
        // Glob's pattern is a path below `path` (or absolute): the part before its first
        // wildcard is where it looks. (Grep's pattern is a regex.)
        if Path::new(pattern)
            .components()
            .any(|c| c == Component::ParentDir)
        {
            return Err("a pattern that climbs out with ..".into());
        }
        // `{/etc,src}/**`: each alternative is a path of its own, which the fixed part before
        // the brace does not show.
        if pattern.starts_with('~') || braces(pattern).any(|alt| alt.contains(['/', '~'])) {
            return Err("a pattern whose alternatives are paths, or starts with ~".into());
        }
        let fixed: PathBuf = Path::new(pattern)
            .components()
            .take_while(|c| {
                !c.as_os_str()
                    .to_string_lossy()
                    .contains(['*', '?', '[', '{'])
            })
            .collect();
        at = normalize(&at.join(fixed));
    }
    Ok(at)
}

/// The text inside each `{...}` of a glob pattern.
fn braces(pattern: &str) -> impl Iterator<Item = &str> {
    pattern
        .split('{')
        .skip(1)
        .map(|rest| rest.split('}').next().unwrap_or(rest))
}

/// `p` with every symlink of it resolved (the rest, which does not exist, as written), or why
/// not: a symlink whose target does not exist would be followed by the tool that writes
/// through it, to wherever it points, and a component the hook cannot look at may hide one.
fn resolve_strict(p: &Path) -> Result<PathBuf, String> {
    let p = normalize(p);
    let mut prefix = p.as_path();
    loop {
        match std::fs::canonicalize(prefix) {
            Ok(real) => {
                let rest = p.strip_prefix(prefix).unwrap_or(Path::new(""));
                return Ok(if rest.as_os_str().is_empty() {
                    real
                } else {
                    real.join(rest)
                });
            }
            Err(_) => match std::fs::symlink_metadata(prefix) {
                Ok(_) => {
                    return Err(format!(
                        "{} is a symlink to nothing that exists, or cannot be followed",
                        prefix.display()
                    ));
                }
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(format!("{}: {e}", prefix.display()));
                }
                Err(_) => match prefix.parent() {
                    Some(parent) => prefix = parent,
                    None => return Ok(p.clone()),
                },
            },
        }
    }
}

/// The roots a path must lie beneath: a tool that writes a path may read it too.
fn roots(plan: &LaunchPlan, access: Access) -> Vec<PathBuf> {
    let writes = plan.effects.write.iter();
    match access {
        Access::Write => writes.map(|r| resolve(r)).collect(),
        Access::Read => plan
            .effects
            .read
            .iter()
            .chain(writes)
            .map(|r| resolve(r))
            .collect(),
    }
}

/// `p` with the symlinks of its longest existing prefix resolved, the rest as written (a
/// file Write creates does not exist yet).
fn resolve(p: &Path) -> PathBuf {
    crate::policy::args::resolve(&normalize(p))
}

/// Whether `user`, as a confined call runs (its uid and primary group, no others), could open
/// `path` for `access`: a file that exists by its mode, a new one by its directory's. The
/// hook's own user may have rights the call's does not (Claude Code as root, say).
fn permitted(user: &str, path: &Path, access: Access) -> Result<(), String> {
    let Some(u) = nix::unistd::User::from_name(user).ok().flatten() else {
        return Err(format!("the shell tool's user {user} does not exist"));
    };
    let (uid, gid) = (u.uid.as_raw(), u.gid.as_raw());
    if uid == 0 {
        return Ok(());
    }
    let (meta, want) = match (std::fs::metadata(path), access) {
        (Ok(m), Access::Read) => (m, 0o4),
        (Ok(m), Access::Write) => (m, 0o2),
        // Nothing to read: Claude Code finds no file, as the call would.
        (Err(_), Access::Read) => return Ok(()),
        // A file still to be made: write and search on the nearest directory that exists
        // (Write makes the ones missing between, as `write_file` does).
        (Err(_), Access::Write) => match path
            .ancestors()
            .skip(1)
            .find_map(|a| std::fs::metadata(a).ok())
        {
            Some(m) if m.is_dir() => (m, 0o3),
            _ => return Err(format!("{} has no directory to be made in", path.display())),
        },
    };
    let mode = meta.mode();
    let bits = if meta.uid() == uid {
        mode >> 6
    } else if meta.gid() == gid {
        mode >> 3
    } else {
        mode
    };
    if bits & want == want {
        Ok(())
    } else {
        Err(format!(
            "{} is not {}able by {user}, the user the policy's shell tool runs as",
            path.display(),
            if want == 0o4 { "read" } else { "writ" }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_to_nothing_is_refused_and_one_to_something_is_followed() {
        let dir = std::env::temp_dir().join(format!("guard-hook-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("ws")).expect("mkdir");
        let dir = std::fs::canonicalize(&dir).expect("real");
        std::os::unix::fs::symlink(dir.join("home/.bashrc"), dir.join("ws/TODO.md"))
            .expect("symlink");
        std::os::unix::fs::symlink(dir.join("ws"), dir.join("alias")).expect("symlink");
        assert!(resolve_strict(&dir.join("ws/TODO.md")).is_err(), "dangling");
        assert_eq!(
            resolve_strict(&dir.join("alias/new.md")),
            Ok(dir.join("ws/new.md"))
        );
        assert_eq!(resolve_strict(&dir.join("ws/a/b")), Ok(dir.join("ws/a/b")));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("object")
    }

    #[test]
    fn the_target_is_the_path_field_or_the_cwd_or_where_a_glob_starts() {
        let cwd = Path::new("/w/p");
        let t = |v: Value, field| target(&obj(v), field, cwd, field == "path");
        assert_eq!(
            t(serde_json::json!({"file_path": "a/../b.rs"}), "file_path"),
            Ok("/w/p/b.rs".into())
        );
        assert_eq!(
            t(serde_json::json!({"file_path": "/etc/shadow"}), "file_path"),
            Ok("/etc/shadow".into())
        );
        assert!(t(serde_json::json!({}), "file_path").is_err());
        assert_eq!(
            t(serde_json::json!({"pattern": "**/*.rs"}), "path"),
            Ok("/w/p".into())
        );
        assert_eq!(
            t(serde_json::json!({"pattern": "/etc/ssh/*"}), "path"),
            Ok("/etc/ssh".into())
        );
        assert_eq!(
            t(
                serde_json::json!({"pattern": "src/**", "path": "/w/q"}),
                "path"
            ),
            Ok("/w/q/src".into())
        );
        assert!(t(serde_json::json!({"pattern": "../../etc/*"}), "path").is_err());
        // `~` and brace alternatives with paths are refused, not taken from the cwd.
        assert!(
            t(
                serde_json::json!({"file_path": "~/.ssh/id_ed25519"}),
                "file_path"
            )
            .is_err()
        );
        assert!(t(serde_json::json!({"pattern": "{/etc,src}/**"}), "path").is_err());
        assert!(t(serde_json::json!({"pattern": "~/**"}), "path").is_err());
        assert_eq!(
            t(serde_json::json!({"pattern": "src/*.{rs,toml}"}), "path"),
            Ok("/w/p/src".into())
        );
        // Grep's pattern is a regex, not a path.
        let grep = obj(serde_json::json!({"pattern": "/etc"}));
        assert_eq!(target(&grep, "path", cwd, false), Ok("/w/p".into()));
    }
}
