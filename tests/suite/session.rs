//! A coding agent's ordinary session, in a workspace its developer owns: the same recorded
//! commands (git status, diff, add, commit, mv and maintenance; sed -i; Python's rename-writes;
//! make; a test run; failing commands), one call each as an agent makes them, run directly as
//! the developer and then through guard-exec as the default policy's `shell` tool, in the same
//! directory of a fresh clone of this repository. Each exit code, stdout and stderr must be the
//! same, every file the session made the developer's, and what the call may not do (write or
//! read the developer's files outside the workspace) refused all the same.

use std::{
    os::unix::{fs::MetadataExt as _, process::CommandExt as _},
    path::Path,
    process::{Command, Output},
};

use super::support::{self, Guardd, NOBODY, TempDir, output};

/// Commits with fixed dates, so both runs make the same commits.
macro_rules! commit {
    ($msg:literal) => {
        concat!(
            "GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z ",
            "git commit -q -m '",
            $msg,
            "' && git log -1 --format='%H %s'"
        )
    };
}

/// The session: each command and the directory it runs in, relative to the repository.
const SESSION: &[(&str, &str)] = &[
    ("git status --short --branch", "."),
    ("git log -3 --format=%s", "."),
    ("git show --stat --format=%s HEAD | tail -1", "."),
    ("ls", "."),
    ("ls -a docs", "."),
    ("head -5 Cargo.toml", "."),
    ("sed -n '1,5p' README.md", "."),
    ("grep -rn 'fn main' --include=*.rs . | sort | head -5", "."),
    (
        "find . -name '*.toml' -not -path './.git/*' | sort | head",
        ".",
    ),
    ("wc -l README.md docs/book/src/policy/tools.md", "."),
    ("python3 -c 'import sys; print(sys.version_info[0])'", "."),
    ("echo hello > NOTES.md && cat NOTES.md", "."),
    (
        "sed -i 's/hello/hello, world/' NOTES.md && cat NOTES.md",
        ".",
    ),
    (
        "python3 -c \"import os; open('v.tmp', 'w').write('v2\\n'); os.replace('v.tmp', 'VERSION')\" && cat VERSION",
        ".",
    ),
    ("git status --short", "."),
    (
        "git diff --stat; git add NOTES.md VERSION && git status --short",
        ".",
    ),
    (commit!("add notes"), "."),
    ("git log -2 --format=%s", "."),
    (
        "mkdir -p scratch/sub && printf 'import unittest\\n\\nclass T(unittest.TestCase):\\n    def test_sum(self):\\n        self.assertEqual(sum([1, 2]), 3)\\n' > scratch/test_sum.py && ls scratch",
        ".",
    ),
    ("ls && pwd", "scratch"),
    ("python3 -m unittest -q test_sum 2>&1 | tail -1", "scratch"),
    (
        "printf 'all:\\n\\tpython3 -m py_compile test_sum.py && echo built\\n' > Makefile && make -s",
        "scratch",
    ),
    ("mv ../VERSION sub/ && ls sub", "scratch"),
    ("git mv NOTES.md docs/NOTES.md && git status --short", "."),
    (commit!("move notes"), "."),
    (
        "git -c gc.autoDetach=false maintenance run --task=gc --quiet; echo maintenance $?",
        ".",
    ),
    ("git checkout no-such-branch", "."),
    ("ls does-not-exist", "."),
    (
        "git branch feature && git switch -q feature && git branch --show-current",
        ".",
    ),
    ("git switch -q - && git branch --show-current", "."),
    ("git stash list | wc -l", "."),
    ("grep -c def scratch/test_sum.py", "."),
    ("python3 scratch/test_sum.py; echo exit $?", "."),
    ("rm -r scratch && git status --short", "."),
    (
        "git log --format=%s | head -3 && git rev-list --count HEAD",
        ".",
    ),
    ("stat -c %U docs/NOTES.md", "."),
    // What a workspace holds may run: a hook the project keeps (`.git/hooks` itself is
    // protected: the_files_programs_outside_guard_run_stay_read_only), a script, a build's.
    (
        "mkdir -p hooks && printf '#!/bin/sh\\necho hook ran >&2\\n' > hooks/pre-commit && chmod +x hooks/pre-commit && echo x >> NOTES2.md && git add NOTES2.md && GIT_AUTHOR_DATE=2026-01-01T00:00:00Z GIT_COMMITTER_DATE=2026-01-01T00:00:00Z git -c core.hooksPath=hooks commit -q -m hooked && git log -1 --format=%s",
        ".",
    ),
    (
        "printf '#!/bin/sh\\necho script ok\\n' > run.sh && chmod +x run.sh && ./run.sh",
        ".",
    ),
    (
        "printf 'int main(void) { return 7; }\\n' > t.c && cc -o t t.c && ./t; echo \"exit $?\"",
        ".",
    ),
    // bash, as Claude Code's own; a temporary file; a socket (its own network's), and the
    // command goes on.
    ("[[ -d .git ]] && echo \"bash ${BASH_VERSINFO[0]}\"", "."),
    (
        "f=$(mktemp) && echo data > \"$f\" && cat \"$f\" && rm \"$f\"",
        ".",
    ),
    (
        "python3 -c 'import socket; socket.socket(socket.AF_INET6)' 2>/dev/null; echo after",
        ".",
    ),
];

/// How a command is run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// As the developer, by a shell of its own, in the environment the policy gives the call.
    Direct,
    /// Through guard-exec, as the default policy's `shell` tool.
    Guard,
}

fn run(guardd: &Guardd, ws: &Path, via: Via, command: &str, dir: &Path) -> Output {
    let mut cmd = match via {
        Via::Direct => {
            let mut c = Command::new("/bin/bash");
            c.args(["-c", command])
                .env_clear()
                .env("PATH", "/usr/local/bin:/usr/bin:/bin")
                .env("LANG", "C.UTF-8")
                .env("HOME", ws);
            c
        }
        Via::Guard => {
            let args = serde_json::json!({ "command": command }).to_string();
            let mut c = Command::new(support::bin("guard-exec"));
            c.arg("--socket")
                .arg(&guardd.socket)
                .args(["--args", &args, "shell"]);
            c
        }
    };
    cmd.current_dir(dir).uid(NOBODY).gid(NOBODY);
    output(cmd)
}

/// A fresh clone of this repository at `ws`, the developer's (nobody's), with its identity.
fn clone_into(ws: &Path) {
    let _ = std::fs::remove_dir_all(ws);
    let source = support::workspace();
    let mut clone = Command::new("git");
    clone
        .args(["clone", "-q", "--no-hardlinks"])
        .arg(format!("file://{}", source.display()))
        .arg(ws);
    let out = output(clone);
    assert!(out.status.success(), "git clone: {out:?}");
    give_to_developer(ws);
    for (k, v) in [("user.name", "Dev"), ("user.email", "dev@example.com")] {
        let mut c = Command::new("git");
        c.arg("-C")
            .arg(ws)
            .args(["config", k, v])
            .uid(NOBODY)
            .gid(NOBODY);
        let out = output(c);
        assert!(out.status.success(), "git config: {out:?}");
    }
}

/// Gives `ws` and all in it to the developer (nobody), links not followed: a workspace is its
/// owner's.
fn give_to_developer(ws: &Path) {
    let chown = output({
        let mut c = Command::new("chown");
        c.args(["-hR", &format!("{NOBODY}:{NOBODY}")]).arg(ws);
        c
    });
    assert!(chown.status.success(), "{chown:?}");
}

/// guardd with the default policy's workspace at `ws`, its socket open to nobody's group.
fn guardd_in(ws: &Path) -> Guardd {
    Guardd::start_with(
        &support::default_policy_in(ws),
        &["--socket-group", "nogroup"],
    )
}

/// Each command's (exit code, stdout, stderr), run `via` in a fresh clone.
fn session(guardd: &Guardd, ws: &Path, via: Via) -> Vec<(Option<i32>, String, String)> {
    clone_into(ws);
    SESSION
        .iter()
        .map(|(command, dir)| {
            let out = run(guardd, ws, via, command, &ws.join(dir));
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            // guard-exec's own notices (an attempt refused) are the guard's, not the command's.
            let stderr: String = text(&out.stderr)
                .lines()
                .filter(|l| !l.starts_with("guard-exec: "))
                .map(|l| format!("{l}\n"))
                .collect();
            (out.status.code(), text(&out.stdout), stderr)
        })
        .collect()
}

#[test]
fn a_coding_session_runs_as_it_does_without_guard() {
    if !support::privileged("a_coding_session_runs_as_it_does_without_guard") {
        return;
    }
    let root = TempDir::new("guard-session");
    let projects = root.join("projects");
    std::fs::create_dir(&projects).expect("projects");
    let projects = std::fs::canonicalize(&projects).expect("real path");
    let ws = projects.join("guard");
    // The default policy, its workspaces where this test keeps them.
    let default = std::fs::read_to_string(support::workspace().join("policies/default.toml"))
        .expect("default policy");
    // Its workspace where this test keeps it (the examples' paths and directories too).
    let policy = default.replace("/srv/agent/workspace", &ws.display().to_string());
    assert_ne!(policy, default, "the default policy's roots moved");
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);

    let direct = session(&guardd, &ws, Via::Direct);
    let guarded = session(&guardd, &ws, Via::Guard);
    for (((command, dir), d), g) in SESSION.iter().zip(&direct).zip(&guarded) {
        assert_eq!(d, g, "`{command}` in {dir}: direct, then through guard");
    }
    // The session did what it says, and failed where it should.
    let codes: Vec<Option<i32>> = guarded.iter().map(|r| r.0).collect();
    assert_eq!(
        codes.iter().filter(|c| **c != Some(0)).count(),
        2,
        "{guarded:?}"
    );
    assert!(guarded[16].1.ends_with(" add notes\n"), "{guarded:?}");
    assert_eq!(guarded[35].1, "nobody\n");
    assert_eq!(guarded[36].2, "hook ran\n", "{guarded:?}");
    assert_eq!(guarded[38].1, "exit 7\n", "{guarded:?}");
    // Every file of the workspace is the developer's.
    let strangers = output({
        let mut c = Command::new("find");
        c.arg(&ws).args(["-not", "-user", &NOBODY.to_string()]);
        c
    });
    assert_eq!(
        String::from_utf8_lossy(&strangers.stdout),
        "",
        "{strangers:?}"
    );
    let rows = guardd.audit_rows();
    let finished = rows
        .iter()
        .filter(|r| r["kind"] == "finished" && r["tool"] == "shell")
        .count();
    assert_eq!(finished, SESSION.len(), "one call per command");
    // Nothing an ordinary session does is an attempt outside the policy, the socket the last
    // command asks for included (the shell connects nowhere: its network namespace is its own,
    // and its sockets reach only it): no receipt cries wolf.
    let diverged: Vec<&serde_json::Value> = rows
        .iter()
        .filter(|r| r["kind"] == "finished" && r["tool"] == "shell")
        .map(|r| &r["effects_observed"])
        .filter(|e| e["verdict"] != "conformed")
        .collect();
    let effects: Vec<&serde_json::Value> = diverged
        .iter()
        .flat_map(|e| e["divergences"].as_array().into_iter().flatten())
        .map(|d| &d["effect"])
        .collect();
    assert!(effects.is_empty(), "{diverged:#?}");

    // The call's own temporary directory: the developer's, private, and gone with the call.
    let tmp = run(
        &guardd,
        &ws,
        Via::Guard,
        "echo \"$TMPDIR\" && stat -c '%U %a' \"$TMPDIR\" && \
         while read -r l; do [[ $l == 'Max pending signals'* ]] && echo \"$l\"; done < /proc/self/limits",
        &ws,
    );
    let said = String::from_utf8_lossy(&tmp.stdout).into_owned();
    let mut lines = said.lines();
    let dir = lines.next().unwrap_or_default();
    assert!(dir.starts_with("/run/guard-tmp/call-"), "{tmp:?}");
    assert_eq!(lines.next(), Some("nobody 700"), "{tmp:?}");
    // Its queued signals are bounded: the developer's own budget is not the call's to fill.
    let pending = lines.next().unwrap_or_default();
    assert!(
        pending.split_whitespace().nth(3) == Some("4096"),
        "{pending:?}"
    );
    assert!(!Path::new(dir).exists(), "{dir} outlived its call");

    // The same user, but confined: the developer's files outside the workspace are out of
    // reach, where the developer's own shell reaches them.
    let home = root.join("home");
    std::fs::create_dir(&home).expect("home");
    let private = home.join("private.txt");
    std::fs::write(&private, "the developer's\n").expect("write");
    for p in [&home, &private] {
        std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let outside = home.join("dropped.txt");
    let reach = format!("cat {}; echo x > {}", private.display(), outside.display());
    let d = run(&guardd, &ws, Via::Direct, &reach, &ws);
    assert_eq!(
        String::from_utf8_lossy(&d.stdout),
        "the developer's\n",
        "{d:?}"
    );
    std::fs::remove_file(&outside).expect("the direct write");
    let g = run(&guardd, &ws, Via::Guard, &reach, &ws);
    assert_eq!(String::from_utf8_lossy(&g.stdout), "", "{g:?}");
    assert!(!outside.exists(), "a call wrote outside the workspace");
    assert_ne!(g.status.code(), Some(0), "{g:?}");
    assert_eq!(std::fs::metadata(&ws).expect("ws").uid(), NOBODY);
    // Nor their modes, which chmod by name (git's, in the workspace) would reach anywhere the
    // developer owns a file: outside what the call may change, its mount view is read-only.
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let chmod = format!("chmod 0666 {}", private.display());
    let g = run(&guardd, &ws, Via::Guard, &chmod, &ws);
    assert!(
        String::from_utf8_lossy(&g.stderr).contains("Read-only file system"),
        "{g:?}"
    );
    let mode = std::fs::metadata(&private)
        .expect("private")
        .permissions()
        .mode();
    assert_eq!(
        mode & 0o777,
        0o600,
        "a call changed the mode of a file outside its workspace"
    );
    let d = run(&guardd, &ws, Via::Direct, &chmod, &ws);
    assert!(d.status.success(), "the control: {d:?}");
}

/// Inside a workspace the call may write, what programs outside guard run or follow later with
/// the developer's rights stays as it is: git's hooks and config, Claude Code's settings,
/// direnv's `.envrc`. Written through, moved aside or removed, each fails; the developer's own
/// shell (the control) changes them; git still adds and commits.
#[test]
fn the_files_programs_outside_guard_run_stay_read_only_to_a_call_and_git_still_commits() {
    if !support::privileged("the_files_programs_outside_guard_run_stay_read_only") {
        return;
    }
    let root = TempDir::new("guard-protected");
    let ws = root.join("ws");
    clone_into(&ws);
    let made = [
        (".claude/settings.json", "{}\n"),
        (".envrc", "export A=1\n"),
        // A submodule's and a linked worktree's git files, as git makes them.
        (".git/modules/sub/config", "[core]\n"),
        (".git/worktrees/wt/commondir", "../..\n"),
    ];
    for (path, text) in made {
        let file = ws.join(path);
        std::fs::create_dir_all(file.parent().expect("dir")).expect("mkdir");
        std::fs::write(&file, text).expect("write");
    }
    give_to_developer(&ws);
    let default = std::fs::read_to_string(support::workspace().join("policies/default.toml"))
        .expect("default policy");
    let policy = default.replace("/srv/agent/workspace", &ws.display().to_string());
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    let attempts = [
        "printf '#!/bin/sh\\n' > .git/hooks/pre-commit",
        "echo '[core]' >> .git/config",
        "rm -rf .git/hooks",
        // Nor by moving git's directory aside for a copy with hooks of its own.
        "mv .git .git-old",
        "mv .claude .claude-old",
        "echo '{\"hooks\":1}' > .claude/settings.json",
        "echo 'curl evil' >> .envrc",
        "rm .envrc",
        // A submodule's and a linked worktree's git files run as the repository's own do.
        "echo '[core]' >> .git/modules/sub/config",
        "echo /tmp/evil > .git/worktrees/wt/commondir",
        "mv .git/modules/sub .git/modules/old",
    ];
    for attempt in attempts {
        let out = run(&guardd, &ws, Via::Guard, attempt, &ws);
        assert_ne!(
            out.status.code(),
            Some(0),
            "`{attempt}` through guard: {out:?}"
        );
    }
    assert!(!ws.join(".git/hooks/pre-commit").exists());
    assert!(ws.join(".git/hooks").is_dir() && ws.join(".claude/settings.json").exists());
    // Each write-open of them is on its call's receipt, as any write outside the effects is.
    let opens = guardd
        .audit_rows()
        .iter()
        .filter(|r| r["kind"] == "finished")
        .filter(|r| {
            let divergences = r["effects_observed"]["divergences"].as_array();
            divergences.is_some_and(|d| d.iter().any(|d| d["effect"] == "write_open"))
        })
        .count();
    assert_eq!(
        opens, 6,
        "the hook, git's config, Claude's settings, .envrc, the submodule's config, commondir"
    );
    let envrc = std::fs::read_to_string(ws.join(".envrc")).expect(".envrc");
    assert_eq!(envrc, "export A=1\n");
    // Git works as ever.
    let commit = "echo notes > NOTES.md && git add NOTES.md && GIT_AUTHOR_DATE=2026-01-01T00:00:00Z \
                  GIT_COMMITTER_DATE=2026-01-01T00:00:00Z git commit -q -m notes && git log -1 --format=%s";
    let out = run(&guardd, &ws, Via::Guard, commit, &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "notes\n");
    // Control: the developer's own shell may change them.
    let out = run(&guardd, &ws, Via::Direct, attempts[0], &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(ws.join(".git/hooks/pre-commit").exists());
    what_a_call_plants_is_moved_aside_and_git_runs_none_of_it(&guardd, &ws);
}

/// A protected name absent at a call's start can be made (no mount keeps it): at the call's
/// end it is moved aside (`NAME.guard-planted-ID`) and is a divergence on its receipt, so the
/// developer's git, direnv or agent never finds it. Here: `.git/commondir` redirecting git to
/// a directory whose config runs a program on `git status`, Claude Code's `.mcp.json`, and the
/// `HEAD` that, beside a `commondir` naming that directory, makes git take the workspace for a
/// bare repository once `.git` is unusable (a `HEAD` alone is a file: it is left).
fn what_a_call_plants_is_moved_aside_and_git_runs_none_of_it(guardd: &Guardd, ws: &Path) {
    let mark = ws.join("MARK");
    let plant = format!(
        "mkdir -p evil/objects evil/refs && \
         printf '[core]\\n\\tfsmonitor = \"touch {mark}\"\\n' > evil/config && \
         echo ../evil > .git/commondir && echo '{{}}' > .mcp.json && \
         printf 'ref: refs/heads/main\\n' > HEAD && echo evil > commondir",
        mark = mark.display()
    );
    let out = run(guardd, ws, Via::Guard, &plant, ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows = guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("a finished row");
    let call_id = last["call_id"].as_str().expect("call id");
    let divergences = last["effects_observed"]["divergences"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    for name in [".git/commondir", ".mcp.json", "HEAD"] {
        let d = divergences
            .iter()
            .find(|d| d["path"] == format!("{}/{name}", ws.display()))
            .unwrap_or_else(|| panic!("{name} planted: {last:#}"));
        assert_eq!(d["effect"], "planted", "{d}");
        // Beside it, under a name no call can guess and take first.
        let moved = d["moved_to"].as_str().unwrap_or_default();
        let prefix = format!("{}/{name}.guard-planted-{call_id}-", ws.display());
        assert!(
            moved.starts_with(&prefix) && moved.len() == prefix.len() + 12,
            "{d}"
        );
        assert!(Path::new(moved).exists(), "{moved}");
        assert!(!ws.join(name).exists(), "{name} is still there");
    }
    // The developer's git: its own repository, no program of the call's run.
    let out = run(
        guardd,
        ws,
        Via::Direct,
        "git status --short >/dev/null && git log -1 --format=%s",
        ws,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!mark.exists(), "git ran the call's fsmonitor");
}

/// `[workspaces] protected` replaces the list: a name it gives is kept read-only, one it leaves
/// out is not. And a workspace that is a linked worktree has a `.git` file naming its git
/// directory: a call cannot re-point it at one with hooks of its own.
#[test]
fn the_policy_names_what_is_protected_and_a_git_pointer_file_stays_as_it_is() {
    if !support::privileged("the_policy_names_what_is_protected") {
        return;
    }
    let root = TempDir::new("guard-protected-list");
    let main = root.join("main");
    clone_into(&main);
    let ws = root.join("wt");
    std::fs::create_dir(&ws).expect("mkdir wt");
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).expect("chown wt");
    let mut add = Command::new("git");
    add.arg("-C")
        .arg(&main)
        .args(["worktree", "add", "-q"])
        .arg(&ws);
    add.uid(NOBODY).gid(NOBODY);
    let out = output(add);
    assert!(out.status.success(), "git worktree add: {out:?}");
    std::fs::create_dir_all(ws.join("notes")).expect("mkdir");
    std::fs::write(ws.join("notes/keep.md"), "kept\n").expect("write");
    give_to_developer(&ws);
    let policy = support::default_policy_in(&ws).replacen(
        "[workspaces]\n",
        "[workspaces]\nprotected = [\"notes/keep.md\"]\n",
        1,
    );
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    let refused = [
        "echo changed > notes/keep.md",
        "echo 'gitdir: /tmp/evil' > .git",
        "rm .git",
    ];
    for attempt in refused {
        let out = run(&guardd, &ws, Via::Guard, attempt, &ws);
        assert_ne!(out.status.code(), Some(0), "`{attempt}`: {out:?}");
    }
    assert_eq!(
        std::fs::read_to_string(ws.join("notes/keep.md")).expect("keep.md"),
        "kept\n"
    );
    let pointer = std::fs::read_to_string(ws.join(".git")).expect(".git");
    assert!(
        pointer.starts_with("gitdir: ") && pointer.contains("worktrees"),
        "{pointer}"
    );
    // Left out of the list: .claude is the call's to write here. (git itself needs the main
    // repository's git directory, outside this workspace, which the call may not read.)
    let allowed =
        "mkdir -p .claude && echo '{}' > .claude/settings.json && cat .claude/settings.json";
    let out = run(&guardd, &ws, Via::Guard, allowed, &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "{}\n");
}

/// A protected name that is a symlink is kept at the link (neither removed nor pointed
/// elsewhere), and what it leads to inside the workspace is kept too: a project that keeps its
/// Claude settings in `config/claude` behind `.claude -> config/claude` gets them protected.
#[test]
fn a_protected_name_that_is_a_symlink_is_kept_at_the_link_and_where_it_leads() {
    if !support::privileged("a_protected_name_that_is_a_symlink_is_kept") {
        return;
    }
    let root = TempDir::new("guard-protected-link");
    let ws = root.join("ws");
    clone_into(&ws);
    std::fs::create_dir_all(ws.join("config/claude")).expect("mkdir");
    std::fs::write(ws.join("config/claude/settings.json"), "{}\n").expect("write");
    std::os::unix::fs::symlink("config/claude", ws.join(".claude")).expect("symlink");
    give_to_developer(&ws);
    let guardd = guardd_in(&ws);
    let refused = [
        "echo '{\"hooks\":1}' > .claude/settings.json",
        "echo '{\"hooks\":1}' > config/claude/settings.json",
        "rm .claude",
        "ln -sfn elsewhere .claude",
        "mv config/claude config/old",
        "mv config config-old",
    ];
    for attempt in refused {
        let out = run(&guardd, &ws, Via::Guard, attempt, &ws);
        assert_ne!(out.status.code(), Some(0), "`{attempt}`: {out:?}");
    }
    assert_eq!(
        std::fs::read_link(ws.join(".claude")).expect(".claude"),
        Path::new("config/claude")
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("config/claude/settings.json")).expect("settings"),
        "{}\n"
    );
    // The rest of config/ is the call's, as before.
    let out = run(&guardd, &ws, Via::Guard, "echo x > config/other.txt", &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

/// What the repository's own config hands git's hooks and config to inside the worktree
/// (`core.hooksPath`, `include.path`) is kept as the config is: an existing hook read-only, an
/// absent included config moved aside once the call made it, so the developer's git runs
/// neither.
#[test]
fn what_the_repositorys_config_points_into_the_worktree_is_kept_too() {
    if !support::privileged("what_the_repositorys_config_points_into_the_worktree") {
        return;
    }
    let root = TempDir::new("guard-protected-config");
    let ws = root.join("ws");
    clone_into(&ws);
    let git = |args: &[&str]| {
        let mut c = Command::new("git");
        c.arg("-C").arg(&ws).args(args).uid(NOBODY).gid(NOBODY);
        let out = output(c);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["config", "core.hooksPath", ".githooks"]);
    git(&["config", "include.path", "../.gitconfig"]);
    std::fs::create_dir_all(ws.join(".githooks")).expect("mkdir");
    std::fs::write(ws.join(".githooks/pre-commit"), "#!/bin/sh\nexit 0\n").expect("hook");
    give_to_developer(&ws);
    let guardd = guardd_in(&ws);
    let mark = ws.join("MARK");
    let hook = format!("echo 'touch {}' >> .githooks/pre-commit", mark.display());
    let out = run(&guardd, &ws, Via::Guard, &hook, &ws);
    assert_ne!(
        out.status.code(),
        Some(0),
        "the hook written through: {out:?}"
    );
    let include = format!(
        "printf '[core]\\n\\tfsmonitor = \"touch {}\"\\n' > .gitconfig",
        mark.display()
    );
    let out = run(&guardd, &ws, Via::Guard, &include, &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !ws.join(".gitconfig").exists(),
        "the included config was left in place"
    );
    let commit = "echo n >> README.md && git commit -qam n && git status --short";
    let out = run(&guardd, &ws, Via::Direct, commit, &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!mark.exists(), "git ran what the call planted");
}

/// A repository a call makes inside the workspace and adds to its index as a gitlink would run
/// its own config (here `core.fsmonitor`) from the developer's `git status` at the root: its
/// `.git`, born during the call, is moved aside at the call's end, and is on the receipt.
#[test]
fn a_repository_a_call_hides_behind_a_gitlink_is_moved_aside() {
    if !support::privileged("a_repository_a_call_hides_behind_a_gitlink") {
        return;
    }
    let root = TempDir::new("guard-gitlink");
    let ws = root.join("ws");
    clone_into(&ws);
    let guardd = guardd_in(&ws);
    let mark = ws.join("MARK");
    let plant = format!(
        "mkdir sub && cd sub && git init -q && git -c user.name=a -c user.email=a@b commit -q --allow-empty -m s && \
         sha=$(git rev-parse HEAD) && git config core.fsmonitor 'touch {}; false #' && \
         cd .. && git update-index --add --cacheinfo 160000,$sha,sub",
        mark.display()
    );
    let out = run(&guardd, &ws, Via::Guard, &plant, &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows = guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("a finished row");
    let divergences = last["effects_observed"]["divergences"].to_string();
    assert!(
        divergences.contains("planted") && divergences.contains("sub/.git"),
        "{last:#}"
    );
    assert!(
        !ws.join("sub/.git").exists(),
        "the nested repository is still there"
    );
    let out = run(&guardd, &ws, Via::Direct, "git status --short", &ws);
    assert!(
        !mark.exists(),
        "git ran the nested repository's fsmonitor: {out:?}"
    );
    // An index that is a FIFO holds up no one: the call ends, its receipt says the index was
    // unreadable, and guardd answers the next call.
    let out = run(
        &guardd,
        &ws,
        Via::Guard,
        "rm .git/index && mkfifo .git/index",
        &ws,
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let rows = guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("finished");
    assert!(last.to_string().contains("no regular file"), "{last:#}");
    let out = run(&guardd, &ws, Via::Guard, "true", &ws);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}
