//! Nothing planted for later (issue 49): the names git, direnv and an agent run or follow with
//! the developer's rights (`.git/hooks`, `.git/config`, `.claude`, `.envrc`...) are the
//! developer's in every project beneath the workspace root, the layout the book's Claude Code page
//! recommends, not at the root only: through the default `shell` tool, and through Claude
//! Code's own Write and Edit, one list. Each attack sits beside its control: the developer's
//! own hook still runs when the developer commits, and ordinary writes go through.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::{Value, json};

use super::support::{self, Guardd, NOBODY, TempDir, output};

/// The developer's workspace root (owned by [`NOBODY`], the developer here) with a project
/// beneath it, a git repository with a hook of the developer's own, and guardd under the
/// default policy on that root.
struct Setup {
    _root: TempDir,
    ws: PathBuf,
    proj: PathBuf,
    guardd: Guardd,
}

/// `git ARGS` in `dir` as the developer, directly (not through guard).
pub(super) fn git(dir: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("git");
    c.current_dir(dir)
        .args(args)
        .env("HOME", dir)
        .env("GIT_AUTHOR_NAME", "dev")
        .env("GIT_AUTHOR_EMAIL", "dev@example.com")
        .env("GIT_COMMITTER_NAME", "dev")
        .env("GIT_COMMITTER_EMAIL", "dev@example.com")
        .uid(NOBODY)
        .gid(NOBODY);
    output(c)
}

fn setup() -> Setup {
    let root = TempDir::new("guard-planted");
    let ws = std::fs::canonicalize(&root.0).expect("real").join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).expect("chown");
    let init = git(&ws, &["init", "-q", "proj"]);
    assert!(init.status.success(), "{init:?}");
    let proj = ws.join("proj");
    let hook = proj.join(".git/hooks/post-commit");
    std::fs::write(&hook, "#!/bin/sh\necho ran >> ../dev-hook\n").expect("hook");
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::os::unix::fs::chown(&hook, Some(NOBODY), Some(NOBODY)).expect("chown");
    // Who commits inside a call: the default shell's HOME is the workspace.
    let gitconfig = ws.join(".gitconfig");
    std::fs::write(
        &gitconfig,
        "[user]\n\tname = dev\n\temail = dev@example.com\n",
    )
    .expect("write");
    std::os::unix::fs::chown(&gitconfig, Some(NOBODY), Some(NOBODY)).expect("chown");
    let policy = support::default_policy_in(&ws);
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    Setup {
        _root: root,
        ws,
        proj,
        guardd,
    }
}

impl Setup {
    /// The default `shell` tool through guard-exec, as the developer, from `dir`.
    fn shell(&self, dir: &Path, command: &str) -> Output {
        shell(&self.guardd, dir, command)
    }

    /// Claude Code's PreToolUse hook for `tool` with `input`, from `cwd`: its decision.
    fn hook(&self, cwd: &Path, tool: &str, input: Value) -> String {
        hook(&self.guardd, cwd, tool, input)
    }
}

/// The default `shell` tool of `guardd` through guard-exec, as the developer, from `dir`.
pub(super) fn shell(guardd: &Guardd, dir: &Path, command: &str) -> Output {
    let mut c = guardd.exec("shell", &[&format!("command={command}")]);
    c.current_dir(dir).uid(NOBODY).gid(NOBODY);
    output(c)
}

/// Claude Code's PreToolUse hook for `tool` with `input`, from `cwd`, as the developer: the
/// decision `guardd` gave.
pub(super) fn hook(guardd: &Guardd, cwd: &Path, tool: &str, input: Value) -> String {
    let event = json!({
        "session_id": "s",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": cwd,
        "hook_event_name": "PreToolUse",
        "tool_name": tool,
        "tool_input": input,
    });
    let mut c = Command::new(support::bin("guard-exec"));
    c.args(["hook", "claude-code", "--socket"])
        .arg(&guardd.socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped());
    let mut child = c.spawn().expect("hook");
    std::io::Write::write_all(
        child.stdin.as_mut().expect("stdin"),
        event.to_string().as_bytes(),
    )
    .expect("event");
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("hook ran");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    answer["hookSpecificOutput"]["permissionDecision"]
        .as_str()
        .unwrap_or_else(|| panic!("{out:?}"))
        .to_owned()
}

#[test]
fn a_call_in_a_project_beneath_the_workspace_plants_nothing_the_developer_runs() {
    if !support::privileged("a_call_in_a_project_beneath_the_workspace_plants_nothing") {
        return;
    }
    let s = setup();
    let (ws, proj) = (&s.ws, &s.proj);
    // The control: an ordinary change, committed in the call, runs the developer's hook.
    let out = s.shell(
        proj,
        "echo code > main.py && git add main.py && git commit -qm one",
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(ws.join("dev-hook")).ok().as_deref(),
        Some("ran\n")
    );

    // What the finding's call did, from the project's directory, and a repository of its own.
    let attack = "echo 'touch ../PWNED' > .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; \
                  git config core.hooksPath evil; git config core.fsmonitor 'touch ../PWNED'; \
                  mkdir -p .claude && echo '{\"hooks\":1}' > .claude/settings.json; \
                  echo 'touch PWNED' > .envrc; \
                  git init -q lib && printf '#!/bin/sh\\ntouch ../../PWNED\\n' > lib/.git/hooks/pre-commit \
                  && chmod +x lib/.git/hooks/pre-commit; echo done";
    let out = s.shell(proj, attack);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("done"),
        "{out:?}"
    );

    // The developer's next commits, in the project and in the directory the call made its
    // repository in: only the developer's hook runs.
    let commit = git(proj, &["commit", "--allow-empty", "-qm", "two"]);
    assert!(commit.status.success(), "{commit:?}");
    let status = git(&proj.join("lib"), &["status", "--short"]);
    assert!(status.status.success(), "{status:?}");
    let commit = git(
        &proj.join("lib"),
        &["commit", "--allow-empty", "-qm", "three"],
    );
    assert!(commit.status.success(), "{commit:?}");
    assert!(
        !ws.join("PWNED").exists() && !proj.join("PWNED").exists(),
        "a planted hook ran"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("dev-hook")).ok().as_deref(),
        Some("ran\nran\nran\n"),
        "the developer's own hook runs each commit"
    );
    assert!(git(proj, &["config", "core.hooksPath"]).stdout.is_empty());
    assert!(git(proj, &["config", "core.fsmonitor"]).stdout.is_empty());
    assert!(!proj.join(".git/hooks/pre-commit").exists());
    assert!(!proj.join(".claude").exists() && !proj.join(".envrc").exists());
    assert!(
        !proj.join("lib/.git").exists(),
        "the call's repository stays in place"
    );

    // The receipt says what was moved aside.
    let finished: Vec<Value> = s
        .guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "finished")
        .collect();
    let last = finished.last().expect("a finished row").to_string();
    for made in [".claude", ".envrc", "lib/.git"] {
        assert!(
            last.contains(&format!("{}/{made}", proj.display())),
            "{made}: {last}"
        );
    }
}

#[test]
fn claude_codes_own_writes_keep_off_every_projects_protected_names() {
    if !support::privileged("claude_codes_own_writes_keep_off_every_projects_protected_names") {
        return;
    }
    let s = setup();
    let proj = &s.proj;
    let path = |p: &str| proj.join(p).display().to_string();
    for (tool, input) in [
        (
            "Write",
            json!({"file_path": path(".git/hooks/pre-commit"), "content": "x"}),
        ),
        (
            "Edit",
            json!({"file_path": path(".git/config"), "old_string": "a", "new_string": "b"}),
        ),
        (
            "MultiEdit",
            json!({"file_path": path(".claude/settings.json"), "edits": []}),
        ),
        (
            "Write",
            json!({"file_path": path(".envrc"), "content": "x"}),
        ),
        (
            "Write",
            json!({"file_path": path("sub/.git"), "content": "gitdir: /x"}),
        ),
        (
            "NotebookEdit",
            json!({"notebook_path": path(".vscode/n.ipynb"), "new_source": "x"}),
        ),
    ] {
        assert_eq!(s.hook(proj, tool, input.clone()), "deny", "{tool} {input}");
    }
    // The control: the project's own files, in a directory still to be made too.
    for file in ["main.py", "src/new/dir/mod.py"] {
        let input = json!({"file_path": path(file), "content": "x"});
        assert_eq!(s.hook(proj, "Write", input), "allow", "{file}");
    }
}

/// Issue 49, an outside pass: one call made 4,100 directories sorting before the projects,
/// and the next call's walk stopped before them and wrote a project's hook; another moved
/// the project into `node_modules` (not walked) and left a link at its name. Now the walk goes
/// a level at a time and reads past such decoys, a project and the directories above it cannot
/// be moved, and a workspace with more directories than a walk reads is refused, saying why.
#[test]
fn decoys_and_moves_do_not_take_a_project_out_of_the_walk() {
    if !support::privileged("decoys_and_moves_do_not_take_a_project_out_of_the_walk") {
        return;
    }
    let s = setup();
    let ws = &s.ws;
    let plant = "printf '#!/bin/sh\\ntouch ../../PWNED\\n' > proj/.git/hooks/pre-commit \
                 && chmod +x proj/.git/hooks/pre-commit && echo planted";
    let decoys = s.shell(
        ws,
        "mkdir aaa && cd aaa && for i in $(seq 1 4100); do mkdir d$i; done; echo made",
    );
    assert!(
        String::from_utf8_lossy(&decoys.stdout).contains("made"),
        "{decoys:?}"
    );
    let out = s.shell(ws, plant);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("planted"),
        "{out:?}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Read-only file system"),
        "{out:?}"
    );

    // The move, and a move of a directory holding it.
    let out = s.shell(
        ws,
        "mkdir -p node_modules org && mv proj node_modules/proj; echo moved-$?",
    );
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains("moved-1"), "{out:?}");
    assert!(ws.join("proj/.git/hooks").is_dir(), "the project stays");
    let commit = git(&s.proj, &["commit", "--allow-empty", "-qm", "after"]);
    assert!(commit.status.success(), "{commit:?}");
    assert!(!ws.join("PWNED").exists(), "a planted hook ran");

    // More directories than a walk reads: the next call is refused, saying why; the call
    // that made them is a divergence (what lies past was not looked at).
    let out = s.shell(
        ws,
        "mkdir -p zzz && cd zzz && for i in $(seq 1 100); do mkdir d$i && (cd d$i && \
         mkdir $(seq 1 130)); done; echo made",
    );
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("made"),
        "{out:?}"
    );
    let finished = s.guardd.audit_rows();
    let last = finished
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("finished")
        .to_string();
    assert!(last.contains("was not looked at"), "{last}");
    let out = s.shell(ws, "echo ran");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("ran"),
        "{out:?}"
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("directories beneath"), "{out:?}");
}
