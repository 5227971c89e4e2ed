//! A workspace's own policy, `.guard/policy.toml` (issue 33): it may only tighten. A real
//! guardd with two workspaces of one developer (`nobody`), called through guard-exec from each:
//! what the project file removes or narrows holds in its workspace and not in the other, an
//! edit is in force from the next call on, and a file that would widen blocks every call of
//! its workspace, naming its file, line and key, as `guardctl policy check --workspace` does.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Output,
};

use serde_json::Value;

use super::support::{self, Guardd, NOBODY, TempDir, output};

/// The shell of the base policy; `WRITE` is its write effect's list.
const SHELL: &str = r#"
[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{command}"]
cwd = "{cwd}"
run_as = "owner"
timeout = 30
env = { PATH = "/usr/bin:/bin" }
[tools.shell.args.command]
type = "string"
[tools.shell.effects]
read = ["{workspace}", "/usr", "/etc", "/dev/null"]
write = [WRITE]
exec = ["/usr/bin"]
on_divergence = "deny"
"#;

/// Two workspaces of `nobody` under one root, and a guardd whose policy declares them.
struct Setup {
    _root: TempDir,
    a: PathBuf,
    b: PathBuf,
    guardd: Guardd,
}

fn setup() -> Setup {
    let root = TempDir::new("guard-project");
    let projects = std::fs::canonicalize(&root.0)
        .expect("real path")
        .join("projects");
    let (a, b) = (projects.join("a"), projects.join("b"));
    for ws in [&a, &b] {
        std::fs::create_dir_all(ws.join("allowed")).expect("mkdir");
        for p in [ws.clone(), ws.join("allowed")] {
            std::os::unix::fs::chown(&p, Some(NOBODY), Some(NOBODY)).expect("chown");
        }
    }
    std::fs::create_dir(a.join(".guard")).expect("mkdir .guard");
    let policy = format!(
        r#"
[workspaces]
roots = ["{}/*"]
[settings]
clients = [{NOBODY}]
[tools.hello]
tier = "low"
command = ["/bin/echo", "hello"]
{}"#,
        projects.display(),
        SHELL.replace("WRITE", r#""{workspace}", "/dev/null""#)
    );
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    Setup {
        _root: root,
        a,
        b,
        guardd,
    }
}

impl Setup {
    /// `tool` with `args` (JSON) through guard-exec, as the workspaces' owner, from `dir`.
    fn call(&self, dir: &Path, tool: &str, args: &str) -> Output {
        let mut c = self.guardd.exec(tool, &["--args", args]);
        c.current_dir(dir).uid(NOBODY).gid(NOBODY);
        output(c)
    }

    fn shell(&self, dir: &Path, command: &str) -> Output {
        let args = serde_json::json!({ "command": command }).to_string();
        self.call(dir, "shell", &args)
    }

    /// Writes workspace a's project policy (as root: the owner's file, written by the owner's
    /// editor, in a test); its path.
    fn project(&self, text: &str) -> PathBuf {
        let path = self.a.join(".guard/policy.toml");
        std::fs::write(&path, text).expect("write the project policy");
        path
    }

    /// The last decision row of `tool`.
    fn decision(&self, tool: &str) -> Value {
        self.guardd
            .audit_rows()
            .into_iter()
            .rev()
            .find(|r| r["kind"] == "decision" && r["tool"] == tool)
            .expect("a decision row")
    }

    /// `guardctl policy check --workspace dir` against guardd's policy file.
    fn check(&self, dir: &Path) -> Output {
        let mut c = std::process::Command::new(support::bin("guardctl"));
        c.args(["policy", "check"])
            .arg(self.guardd.dir.join("policy.toml"))
            .arg("--workspace")
            .arg(dir);
        output(c)
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_project_policy_removes_and_narrows_in_its_workspace_only_and_an_edit_applies_next_call() {
    if !support::privileged("a_project_policy_removes_and_narrows_in_its_workspace_only") {
        return;
    }
    let s = setup();
    // Removed in a: blocked there, by the project policy, which the row names.
    let path = s.project("[tools]\nremove = [\"hello\"]\n");
    let out = s.call(&s.a, "hello", "{}");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        text(&out.stderr).contains("removed in this workspace"),
        "{out:?}"
    );
    let row = s.decision("hello");
    assert_eq!(row["decision"]["check_name"], "project_policy", "{row}");
    let named = &row["decision"]["metadata"]["project_policy"];
    assert_eq!(named["path"], path.display().to_string(), "{row}");
    let sha = sha256sum(&path);
    assert_eq!(named["sha256"], sha, "{row}");
    // ...and not in b, nor anything else in a.
    let out = s.call(&s.b, "hello", "{}");
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "hello\n".into()),
        "{out:?}"
    );
    assert!(s.decision("hello")["decision"]["metadata"]["project_policy"].is_null());
    let out = s.shell(&s.a, "echo base > out.txt && cat out.txt");
    assert_eq!(text(&out.stdout), "base\n", "{out:?}");
    // The call cannot rewrite its own workspace's project policy, which it may otherwise write.
    let out = s.shell(&s.a, "echo '[tools]' > .guard/policy.toml");
    assert_ne!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&path).expect("read"),
        "[tools]\nremove = [\"hello\"]\n"
    );

    // Edited, guardd not restarted: the shell's writes narrowed to allowed/, hello back.
    let narrowed = SHELL.replace("WRITE", r#""{workspace}/allowed", "/dev/null""#);
    s.project(&narrowed);
    let out = s.call(&s.a, "hello", "{}");
    assert_eq!(out.status.code(), Some(0), "the edit is in force: {out:?}");
    let out = s.shell(
        &s.a,
        "echo x > out2.txt; echo y > allowed/in.txt; cat allowed/in.txt",
    );
    assert_eq!(text(&out.stdout), "y\n", "{out:?}");
    assert!(
        !s.a.join("out2.txt").exists(),
        "written outside the narrowed write: {out:?}"
    );
    assert_eq!(
        s.decision("shell")["decision"]["metadata"]["project_policy"]["path"],
        path.display().to_string()
    );
    // The same call in b, which has no project policy: the base policy's write.
    let out = s.shell(
        &s.b,
        "echo x > out2.txt; echo y > allowed/in.txt; cat allowed/in.txt",
    );
    assert_eq!(text(&out.stdout), "y\n", "{out:?}");
    assert!(s.b.join("out2.txt").exists(), "the base allows it: {out:?}");
}

#[test]
fn a_widening_project_policy_blocks_its_workspace_naming_file_line_and_key() {
    if !support::privileged("a_widening_project_policy_blocks_its_workspace") {
        return;
    }
    let s = setup();
    // Line 1 adds a tool, and the shell restated would write the whole host.
    let wider = SHELL.replace("WRITE", r#""/""#);
    let path = s.project(&format!("[tools.new]\n\ntier = \"low\"\n{wider}"));
    for (tool, args) in [("hello", "{}"), ("shell", r#"{"command": "true"}"#)] {
        let out = s.call(&s.a, tool, args);
        assert_eq!(out.status.code(), Some(126), "{tool}: {out:?}");
        let said = text(&out.stderr);
        let at = format!("{}:1:8: tools.new", path.display());
        assert!(said.contains(&at), "{tool}: {said}");
        assert!(said.contains("tools.shell.effects.write"), "{tool}: {said}");
        let row = s.decision(tool);
        assert_eq!(row["decision"]["check_name"], "project_policy", "{row}");
        assert_eq!(row["decision"]["decision"], "block", "{row}");
        assert!(
            row["decision"]["reason"]
                .as_str()
                .unwrap_or_default()
                .contains(&at),
            "{row}"
        );
    }
    // The other workspace is not its.
    let out = s.call(&s.b, "hello", "{}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // guardctl says the same, and fails.
    let out = s.check(&s.a.join("allowed"));
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains(&format!("{}:1:8: tools.new", path.display())),
        "{said}"
    );
    assert!(
        said.contains("every call in this workspace is blocked"),
        "{said}"
    );

    // Fixed: the next call runs, and guardctl shows the merged policy.
    s.project("[tools]\nremove = [\"shell\"]\n");
    let out = s.call(&s.a, "hello", "{}");
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let out = s.check(&s.a);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let said = text(&out.stdout);
    assert!(said.contains(&format!("+ {}", path.display())), "{said}");
    assert!(said.contains("removed:  shell"), "{said}");
    assert!(said.contains("tools:    hello\n"), "{said}");
    let out = s.check(&s.b);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("has no project policy"),
        "{out:?}"
    );
}

/// `sha256:` and the hex SHA-256 of the file at `path` (by coreutils' sha256sum), as guardd
/// names a project policy.
fn sha256sum(path: &Path) -> String {
    let mut c = std::process::Command::new("sha256sum");
    c.arg(path);
    let out = output(c);
    let said = text(&out.stdout);
    format!(
        "sha256:{}",
        said.split_whitespace().next().unwrap_or_default()
    )
}

/// A project's path is compared where the kernel takes it (issue 49): `within = ["<ws>/link"]`,
/// `link` pointing out of the workspace, passed as text and was then compiled to where it
/// points, and the project's tool read outside the workspace, row `allow`.
#[test]
fn a_project_path_through_a_symlink_out_of_the_workspace_widens_and_is_refused() {
    if !support::privileged("a_project_path_through_a_symlink_out_of_the_workspace") {
        return;
    }
    let root = TempDir::new("guard-project");
    let ws = std::fs::canonicalize(&root.0).expect("real").join("ws");
    std::fs::create_dir_all(ws.join(".guard")).expect("mkdir");
    std::fs::create_dir_all(ws.join("docs")).expect("mkdir");
    std::fs::write(ws.join("docs/readme"), "inside\n").expect("write");
    std::os::unix::fs::symlink("/etc", ws.join("link")).expect("symlink");
    for p in [&ws, &ws.join("docs"), &ws.join("docs/readme")] {
        std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).expect("chown");
    }
    let cat = |within: &str| {
        format!(
            r#"
[tools.cat]
tier = "low"
command = ["/bin/cat", "{{file}}"]
[tools.cat.args.file]
type = "path"
base = "{{cwd}}"
within = [{within}]
[tools.cat.effects]
read = ["{{file}}"]
"#
        )
    };
    let policy = format!(
        "[workspaces]\nroots = [\"{}\"]\n[settings]\nclients = [{NOBODY}]\n{}",
        ws.display(),
        cat(r#""{workspace}""#)
    );
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    let call = |file: &str| {
        let mut c = guardd.exec("cat", &[&format!("file={file}")]);
        c.current_dir(&ws).uid(NOBODY).gid(NOBODY);
        output(c)
    };
    // The control: a project file narrowing to a real directory of the workspace loads.
    let project = ws.join(".guard/policy.toml");
    std::fs::write(&project, cat(&format!("\"{}/docs\"", ws.display()))).expect("write");
    let out = call("docs/readme");
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "inside\n".into()),
        "{out:?}"
    );
    // Through the link: the file widens, and every call of the workspace is blocked.
    std::fs::write(&project, cat(&format!("\"{}/link\"", ws.display()))).expect("write");
    let out = call("link/hostname");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(out.stdout.is_empty(), "read outside the workspace: {out:?}");
    let said = text(&out.stderr);
    assert!(said.contains("tools.cat.args.file.within"), "{said}");
    assert_eq!(
        call("docs/readme").status.code(),
        Some(126),
        "a widening project file blocks its workspace"
    );
}
