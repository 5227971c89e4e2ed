//! What a repository's own config hands to its worktree (finding M4): a hooks path written
//! with git's full syntax (a comment after it), one set in a config included from an included
//! one, and a script a command-valued key runs (`core.fsmonitor = ./tools/fsm.sh`) are kept as
//! the config is, through the default `shell` tool and through Claude Code's own Write. Each
//! attack beside its control: the developer's own hook and fsmonitor still run when the
//! developer uses git, and the project's other files are the call's.

use std::{
    path::PathBuf,
    process::{Command, Output},
};

use serde_json::json;

use super::{
    planted::{git, hook, shell},
    support::{self, Guardd, NOBODY, TempDir, output},
};

/// A workspace owned by the developer ([`NOBODY`]) with a repository `proj` beneath it whose
/// `.git/config` ends with `config`, the files `files` (path, text, executable) in it, and
/// guardd under the default policy on the workspace.
struct Setup {
    _root: TempDir,
    ws: PathBuf,
    proj: PathBuf,
    guardd: Guardd,
}

fn setup(config: &str, files: &[(&str, &str, bool)]) -> Setup {
    let root = TempDir::new("guard-gitconfig");
    let ws = std::fs::canonicalize(&root.0).expect("real").join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).expect("chown");
    let init = git(&ws, &["init", "-q", "proj"]);
    assert!(init.status.success(), "{init:?}");
    let proj = ws.join("proj");
    let mut text = std::fs::read_to_string(proj.join(".git/config")).expect("config");
    text.push_str(config);
    std::fs::write(proj.join(".git/config"), text).expect("config");
    for (path, body, exec) in files {
        let path = proj.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, body).expect("write");
        if *exec {
            let mode = std::os::unix::fs::PermissionsExt::from_mode(0o755);
            std::fs::set_permissions(&path, mode).expect("chmod");
        }
    }
    let mut chown = Command::new("chown");
    chown.args(["-R", "65534:65534"]).arg(&ws);
    assert!(output(chown).status.success(), "chown");
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
    /// The default `shell` tool through guard-exec, as the developer, from the project.
    fn shell(&self, command: &str) -> Output {
        shell(&self.guardd, &self.proj, command)
    }

    /// Whether the call `command` (which says `wrote` once done) went through.
    fn wrote(&self, command: &str) -> bool {
        let out = self.shell(&format!("{command} && echo wrote"));
        String::from_utf8_lossy(&out.stdout).contains("wrote")
    }

    fn read(&self, path: &str) -> String {
        std::fs::read_to_string(self.proj.join(path)).unwrap_or_default()
    }

    /// Claude Code's PreToolUse hook for a Write of `path` in the project: its decision.
    fn hook_write(&self, path: &str) -> String {
        let input = json!({"file_path": self.proj.join(path), "content": "x"});
        hook(&self.guardd, &self.proj, "Write", input)
    }
}

/// The developer's own hook: it says it ran, in the workspace.
const DEV_HOOK: &str = "#!/bin/sh\necho ran >> ../dev-hook\n";
/// What a call would plant: a hook that marks the workspace.
const PLANT: &str = "printf '#!/bin/sh\\ntouch ../PWNED\\n'";

/// (1) and (4): `core.hooksPath = .githooks ; team hooks`, a comment the old reader took for
/// part of the path. The call can neither rewrite the developer's hook nor add one, and the
/// developer's next commit runs the developer's hook only.
#[test]
fn a_hooks_path_with_a_comment_after_it_is_kept_and_a_commit_runs_no_plant() {
    if !support::privileged("a_hooks_path_with_a_comment_after_it_is_kept") {
        return;
    }
    let s = setup(
        "[core]\n\thooksPath = .githooks ; the team's hooks\n",
        &[(".githooks/pre-commit", DEV_HOOK, true)],
    );
    // The control: the project's own files are the call's.
    assert!(s.wrote("echo code > main.py"));
    let attacks = [
        "mv .githooks .old && mkdir .githooks".to_owned(),
        format!("{PLANT} > .githooks/pre-commit && chmod +x .githooks/pre-commit"),
        format!("{PLANT} > .githooks/post-commit && chmod +x .githooks/post-commit"),
    ];
    let wrote: Vec<&String> = attacks.iter().filter(|a| s.wrote(a)).collect();
    // The developer's next commit, first: what it runs is what matters.
    let add = git(&s.proj, &["add", "main.py"]);
    assert!(add.status.success(), "{add:?}");
    let commit = git(&s.proj, &["commit", "-qm", "one"]);
    assert!(commit.status.success(), "{commit:?}");
    assert!(!s.ws.join("PWNED").exists(), "a planted hook ran");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("dev-hook"))
            .ok()
            .as_deref(),
        Some("ran\n"),
        "git runs the hooks path's hook: the developer's"
    );
    assert!(wrote.is_empty(), "written through: {wrote:?}");
    assert_eq!(s.read(".githooks/pre-commit"), DEV_HOOK);
    assert!(!s.proj.join(".githooks/post-commit").exists());
}

/// (2): `.git/config` includes `../cfg/one`, which includes `two` (beside itself), which sets
/// `core.hooksPath = hooks`: the second config and the hooks are kept as the first is.
#[test]
fn a_hooks_path_set_in_an_include_of_an_include_is_kept() {
    if !support::privileged("a_hooks_path_set_in_an_include_of_an_include_is_kept") {
        return;
    }
    let s = setup(
        "[include]\n\tpath = ../cfg/one\n",
        &[
            ("cfg/one", "[include]\n\tpath = two\n", false),
            ("cfg/two", "[core]\n\thooksPath = hooks\n", false),
            ("hooks/pre-commit", DEV_HOOK, true),
        ],
    );
    assert!(s.wrote("echo x > cfg/notes"), "the control");
    let attacks = [
        format!("{PLANT} > hooks/pre-commit"),
        format!(
            "mkdir -p evil && {PLANT} > evil/pre-commit && chmod +x evil/pre-commit && \
             printf '[core]\\n\\thooksPath = evil\\n' > cfg/two"
        ),
        "printf '[core]\\n\\tfsmonitor = \"touch ../PWNED\"\\n' >> cfg/one".to_owned(),
    ];
    let wrote: Vec<&String> = attacks.iter().filter(|a| s.wrote(a)).collect();
    let commit = git(&s.proj, &["commit", "--allow-empty", "-qm", "one"]);
    assert!(commit.status.success(), "{commit:?}");
    assert!(!s.ws.join("PWNED").exists(), "a planted hook ran");
    assert_eq!(
        std::fs::read_to_string(s.ws.join("dev-hook"))
            .ok()
            .as_deref(),
        Some("ran\n")
    );
    assert!(wrote.is_empty(), "written through: {wrote:?}");
    assert_eq!(s.read("hooks/pre-commit"), DEV_HOOK);
    assert_eq!(s.read("cfg/two"), "[core]\n\thooksPath = hooks\n");
}

/// (3): `core.fsmonitor = ./tools/fsm.sh` runs a script of the worktree at each `git status`:
/// the call cannot change it, and one a `!` alias names that is not there yet is moved aside
/// once the call made it; the rest of `tools/` is the call's.
#[test]
fn a_script_a_command_valued_key_runs_is_kept() {
    if !support::privileged("a_script_a_command_valued_key_runs_is_kept") {
        return;
    }
    let fsm = "#!/bin/sh\necho ran >> ../dev-fsm\nexit 1\n";
    let s = setup(
        "[core]\n\tfsmonitor = ./tools/fsm.sh\n[alias]\n\tup = !scripts/up.sh\n",
        &[("tools/fsm.sh", fsm, true)],
    );
    assert!(s.wrote("echo x > tools/other.sh"), "the control");
    let attacks = [
        "echo 'touch ../PWNED' >> tools/fsm.sh",
        "rm tools/fsm.sh && printf '#!/bin/sh\\ntouch ../PWNED\\n' > tools/fsm.sh \
         && chmod +x tools/fsm.sh",
    ];
    let wrote: Vec<&&str> = attacks.iter().filter(|a| s.wrote(a)).collect();
    let plant = "mkdir -p scripts && printf '#!/bin/sh\\ntouch ../PWNED\\n' > scripts/up.sh \
                 && chmod +x scripts/up.sh";
    assert!(
        s.wrote(plant),
        "an absent name cannot be kept from being made"
    );
    // The developer's git, first: what it runs is what matters.
    let status = git(&s.proj, &["status", "--short"]);
    assert!(status.status.success(), "{status:?}");
    let _ = git(&s.proj, &["up"]);
    assert!(
        !s.ws.join("PWNED").exists(),
        "git ran what the call planted"
    );
    assert!(
        std::fs::read_to_string(s.ws.join("dev-fsm")).is_ok_and(|t| t.contains("ran")),
        "git runs the developer's fsmonitor"
    );
    assert!(wrote.is_empty(), "written through: {wrote:?}");
    assert_eq!(s.read("tools/fsm.sh"), fsm);
    assert!(
        !s.proj.join("scripts/up.sh").exists(),
        "the script the alias runs is moved aside at the call's end"
    );
}

/// (5): Claude Code's own Write is held to the same names: a hooks path's hook (with a
/// comment after the path), a script the fsmonitor runs, and a config included from an
/// included one; the project's other files may be written.
#[test]
fn claude_codes_own_writes_keep_off_what_the_config_hands_to_the_worktree() {
    if !support::privileged("claude_codes_own_writes_keep_off_what_the_config_hands") {
        return;
    }
    let s = setup(
        "[core]\n\thooksPath = \".githooks\" # the team's\n\tfsmonitor = ./tools/fsm.sh\n\
         [include]\n\tpath = ../cfg/one\n",
        &[
            (".githooks/pre-commit", DEV_HOOK, true),
            ("cfg/one", "[include]\n\tpath = two\n", false),
        ],
    );
    for path in [
        ".githooks/pre-commit",
        ".githooks/post-commit",
        "tools/fsm.sh",
        "cfg/two",
    ] {
        assert_eq!(s.hook_write(path), "deny", "{path}");
    }
    for path in ["main.py", "tools/other.sh", "cfg/three"] {
        assert_eq!(s.hook_write(path), "allow", "{path}");
    }
}

/// An outside pass's F1, F2, F3 and F5: a hooks path beside the project, in the workspace
/// (`../etc/hooks`), reached through a link of the developer's (`etc -> conf`); a script an
/// interpreter runs, named without a `/` (`sh fsm.sh`); and the same script in a linked
/// worktree, whose `.git` is a file and whose config is its main repository's. Each is kept as
/// the config is, the link too; the developer's git runs only the developer's.
#[test]
fn what_a_config_names_beside_the_project_through_a_link_or_a_worktree_is_kept() {
    if !support::privileged("what_a_config_names_beside_the_project_through_a_link") {
        return;
    }
    let fsm = "#!/bin/sh\necho ran >> ../dev-fsm\nexit 1\n";
    let s = setup(
        "[core]\n\thooksPath = ../etc/hooks\n\tfsmonitor = sh fsm.sh\n",
        &[
            ("../conf/hooks/pre-commit", DEV_HOOK, true),
            ("fsm.sh", fsm, false),
        ],
    );
    let link = s.ws.join("etc");
    std::os::unix::fs::symlink("conf", &link).expect("link");
    std::os::unix::fs::lchown(&link, Some(NOBODY), Some(NOBODY)).expect("lchown");
    for args in [
        &["add", "fsm.sh"][..],
        &["commit", "-qm", "fsm"],
        &["worktree", "add", "-q", "../wt"],
    ] {
        let out = git(&s.proj, args);
        assert!(out.status.success(), "{args:?}: {out:?}");
    }
    let wt = s.ws.join("wt");
    assert!(s.wrote("echo x > other.sh"), "the control");
    let attacks = [
        format!("{PLANT} > ../conf/hooks/pre-commit"),
        format!("{PLANT} > ../etc/hooks/post-commit && chmod +x ../etc/hooks/post-commit"),
        format!(
            "mkdir -p ../evil/hooks && {PLANT} > ../evil/hooks/pre-commit && \
             chmod +x ../evil/hooks/pre-commit && rm ../etc && ln -s evil ../etc"
        ),
        format!("{PLANT} > fsm.sh"),
    ];
    let wrote: Vec<&String> = attacks.iter().filter(|a| s.wrote(a)).collect();
    let in_wt = shell(&s.guardd, &wt, &format!("{PLANT} > fsm.sh && echo wrote"));
    // The developer's git, in the project and in the worktree.
    for dir in [&s.proj, &wt] {
        let status = git(dir, &["status", "--short"]);
        assert!(status.status.success(), "{status:?}");
        let commit = git(dir, &["commit", "--allow-empty", "-qm", "two"]);
        assert!(commit.status.success(), "{commit:?}");
    }
    assert!(!s.ws.join("PWNED").exists(), "git ran what a call planted");
    let ran = std::fs::read_to_string(s.ws.join("dev-hook")).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        3,
        "the developer's hook at each commit: {ran:?}"
    );
    assert!(
        std::fs::read_to_string(s.ws.join("dev-fsm")).is_ok_and(|t| t.contains("ran")),
        "git runs the developer's fsmonitor"
    );
    assert!(wrote.is_empty(), "written through: {wrote:?}");
    assert!(
        !String::from_utf8_lossy(&in_wt.stdout).contains("wrote"),
        "the worktree's script written: {in_wt:?}"
    );
    assert_eq!(s.read("fsm.sh"), fsm);
    assert_eq!(
        std::fs::read_to_string(wt.join("fsm.sh")).ok().as_deref(),
        Some(fsm)
    );
}
