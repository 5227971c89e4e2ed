//! A project policy only tightens: what it may say is merged and decides calls of its
//! workspace; each kind of widening is a load error at its line and key; the file is read
//! safely and again when it changes.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use super::{CHECK, ProjectError, Projects};
use crate::{
    call::{decision::Decision, intent::Intent},
    policy::Policy,
};

/// A directory of workspaces (`ROOT/*`), removed on drop.
struct Root(PathBuf);

impl Root {
    fn new() -> Self {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("guard-project-{}-{n}", std::process::id()));
        std::fs::create_dir_all(dir.join("ws/.guard")).expect("mkdir");
        std::fs::create_dir_all(dir.join("other")).expect("mkdir");
        Self(std::fs::canonicalize(&dir).expect("real path"))
    }
    fn ws(&self) -> PathBuf {
        self.0.join("ws")
    }
    fn write(&self, text: &str) -> PathBuf {
        let path = self.ws().join(".guard/policy.toml");
        std::fs::write(&path, text).expect("write the project policy");
        path
    }
    fn base(&self) -> Policy {
        let text = BASE.replace("ROOT", &self.0.display().to_string());
        Policy::parse(Path::new("base.toml"), &text).expect("the base policy")
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const BASE: &str = r#"
[workspaces]
roots = ["ROOT/*"]
[settings]
max_allowed_tier = "high"
[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{command}"]
cwd = "{cwd}"
timeout = 30
[tools.shell.args.command]
type = "string"
max_len = 1000
[tools.shell.effects]
read = ["{workspace}", "/usr"]
write = ["{workspace}"]
exec = ["/usr/bin", "/bin"]
connect = ["example.com:443"]
[tools.cat]
tier = "low"
command = ["/bin/cat", "{file}"]
[tools.cat.args.file]
type = "path"
base = "{cwd}"
within = ["{workspace}"]
[tools.cat.effects]
read = ["{file}"]
[tools.mail]
tier = "high"
irreversible = true
[tools.mail.args.to]
type = "string"
[[rules]]
id = "no-mail-to-evil"
tools = ["mail"]
arg = "to"
regex = ".*@evil"
action = "block"
"#;

/// The base's shell restated, with `effects` as its effects table's body.
fn shell(effects: &str) -> String {
    format!(
        r#"
[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{{command}}"]
cwd = "{{cwd}}"
timeout = 30
[tools.shell.args.command]
type = "string"
max_len = 1000
[tools.shell.effects]
{effects}
"#
    )
}

fn call(tool: &str, args: serde_json::Value, cwd: &Path) -> Intent {
    let mut intent = Intent::new(tool, args.as_object().cloned().unwrap_or_default());
    intent.cwd = Some(cwd.to_owned());
    intent
}

#[test]
fn a_project_policy_that_tightens_decides_its_workspace_s_calls() {
    let root = Root::new();
    let path = root.write(&format!(
        r#"
[settings]
max_allowed_tier = "medium"

[tools]
remove = ["mail"]
{}
[[tools.shell.examples]]
args = {{ command = "ls" }}
cwd = "{ws}"
expect = "allow"

[[rules]]
id = "no-env-files"
tools = ["cat"]
arg = "file"
regex = '.*\.env'
action = "block"
"#,
        shell(r#"write = ["{workspace}/out"]"#),
        ws = root.ws().display(),
    ));
    let base = root.base();
    let merged = base
        .with_project_of(&root.ws().join(".guard"))
        .expect("merged");
    let merged = merged.expect("a project policy");
    let info = merged.project().expect("named");
    assert_eq!(info.path, path);
    assert_eq!(info.removed, ["mail"]);
    assert_eq!(info.restated, ["shell"]);
    assert!(info.sha256.starts_with("sha256:"), "{}", info.sha256);
    assert_ne!(merged.version(), base.version());
    // The removed tool: blocked here, by the project policy, named on the row.
    let mail = call("mail", serde_json::json!({ "to": "a@b" }), &root.ws());
    let v = merged.decide(&mail);
    assert_eq!(
        (v.row.decision, v.row.check_name.as_str()),
        (Decision::Block, CHECK)
    );
    assert!(
        v.row.reason.contains(".guard/policy.toml"),
        "{}",
        v.row.reason
    );
    let named = v.row.metadata.project_policy.expect("named on the row");
    assert_eq!((named.path, named.sha256), (path, info.sha256.clone()));
    assert_eq!(base.decide(&mail).row.decision, Decision::Escalate);
    // The narrowed write.
    let ls = call("shell", serde_json::json!({ "command": "ls" }), &root.ws());
    let plan = merged.decide(&ls).plan.expect("allowed");
    assert_eq!(plan.effects.write, [root.ws().join("out")]);
    let plan = base.decide(&ls).plan.expect("allowed");
    assert_eq!(plan.effects.write, [root.ws()]);
    // The added rule, and the base's ceiling lowered.
    let env = call("cat", serde_json::json!({ "file": ".env" }), &root.ws());
    assert_eq!(merged.decide(&env).row.check_name, "rule:no-env-files");
    assert_eq!(base.decide(&env).row.decision, Decision::Allow);
    assert_eq!(
        merged.settings().max_allowed_tier,
        crate::call::decision::RiskTier::Medium
    );
}

/// The first error of the project policy `text`, merged with the base.
fn refused(text: &str) -> String {
    let root = Root::new();
    let path = root.write(text);
    match root.base().with_project_of(&root.ws()) {
        Err(ProjectError::Invalid(errors)) => {
            let e = errors.iter().next().expect("an error");
            assert_eq!(e.file, path, "{errors}");
            format!("{}:{}", e.key, e.position.map_or(0, |p| p.0))
        }
        Err(other) => panic!("not a policy error: {other}"),
        Ok(_) => panic!("merged:\n{text}"),
    }
}

#[test]
fn each_kind_of_widening_is_an_error_at_its_line_and_key() {
    let cases: Vec<(String, &str)> = vec![
        ("\n[tools.new]\ntier = \"low\"\n".into(), "tools.new:2"),
        (shell(r#"write = ["/"]"#), "tools.shell.effects.write:11"),
        (shell(r#"write = ["{workspace}/../x"]"#), "tools.shell.effects.write:11"),
        (shell(r#"read = ["/etc"]"#), "tools.shell.effects.read:11"),
        (shell(r#"exec = ["/"]"#), "tools.shell.effects.exec:11"),
        (shell(r#"connect = ["evil.com:443"]"#), "tools.shell.effects.connect:11"),
        (shell("unix = true"), "tools.shell.effects.unix:2"),
        (shell("on_divergence = \"deny\""), "tools.shell.effects.on_divergence:2"),
        (shell("").replace("timeout = 30", "timeout = 31"), "tools.shell.timeout:6"),
        (shell("").replace("timeout = 30\n", ""), "tools.shell.timeout:2"),
        (shell("").replace("\"medium\"", "\"low\""), "tools.shell.tier:3"),
        (shell("").replace("\"-c\"", "\"-ec\""), "tools.shell.command:4"),
        (shell("").replace("max_len = 1000", "max_len = 1001"), "tools.shell.args.command.max_len:9"),
        (shell("").replace("cwd = \"{cwd}\"", "cwd = \"/\""), "tools.shell.cwd:5"),
        (shell("").replace("timeout = 30", "timeout = 30\nenv = { LD_PRELOAD = \"/x\" }"), "tools.shell.env:7"),
        (shell("").replace("timeout = 30", "timeout = 30\ntmp = true"), "tools.shell.tmp:2"),
        (shell("").replace("timeout = 30", "timeout = 30\nenforce = \"shadow\""), "tools.shell.enforce:7"),
        ("[settings]\nenforce = \"shadow\"\n".into(), "settings.enforce:2"),
        // The base names no limit: the default one (256) is its limit.
        (shell("").replace("timeout = 30", "timeout = 30\n[tools.shell.limits]\npids = 100000"), "tools.shell.limits.pids:8"),
        (shell("").replace("[tools.shell.effects]", "[tools.shell.args.extra]\ntype = \"string\"\n[tools.shell.effects]"), "tools.shell.args.extra:10"),
        (
            "[tools.cat]\ntier = \"low\"\ncommand = [\"/bin/cat\", \"{file}\"]\n[tools.cat.args.file]\ntype = \"path\"\nbase = \"{cwd}\"\nwithin = [\"/\"]\n".into(),
            "tools.cat.args.file.within:7",
        ),
        ("[tools.mail]\ntier = \"high\"\n[tools.mail.args.to]\ntype = \"string\"\n".into(), "tools.mail.irreversible:1"),
        ("[settings]\nmax_allowed_tier = \"critical\"\n".into(), "settings.max_allowed_tier:2"),
        ("[settings]\nallow_unregistered = true\n".into(), "settings.allow_unregistered:2"),
        ("[settings]\ndisclose_reasons = true\n".into(), "settings.disclose_reasons:2"),
        ("[settings]\nclients = [0]\n".into(), "settings.clients:2"),
        ("[agents.a]\nuids = [0]\n".into(), "agents:1"),
        ("[workspaces]\nroots = [\"/\"]\n".into(), "workspaces:1"),
        ("[judges.j]\ncommand = [\"/bin/true\"]\n".into(), "judges:1"),
        ("[approvals]\nallow_self = true\n".into(), "approvals:1"),
        ("[[approvers]]\ntools = [\"mail\"]\napprover = \"auto\"\n".into(), "approvers[0].approver:3"),
        // A human's answer could approve what the base's approvers refuse unasked.
        ("[[approvers]]\ntools = [\"mail\"]\napprover = \"human\"\n".into(), "approvers[0].approver:3"),
        ("[tools]\nremove = [\"nosuch\"]\n".into(), "tools.remove:2"),
        ("[[rules]]\nid = \"r\"\ntools = [\"cat\"]\naction = \"allow\"\n".into(), "rules[0].action:4"),
    ];
    for (text, want) in cases {
        assert_eq!(refused(&text), want, "\n{text}");
    }
}

#[test]
fn narrower_restatements_and_refusing_additions_are_accepted() {
    let root = Root::new();
    for text in [
        shell(r#"read = ["{cwd}"]
write = ["{cwd}/out", "{workspace}/target"]
exec = ["/usr/bin/git"]
connect = ["example.com:443"]"#),
        shell("").replace("tier = \"medium\"", "tier = \"high\"\nirreversible = true"),
        shell("").replace("timeout = 30", "timeout = 5\nsyscalls = [\"read\"]"),
        "[tools]\nremove = [\"mail\", \"cat\"]\n".into(),
        "[settings]\nmax_allowed_tier = \"low\"\nescalation_threshold = \"low\"\nallow_unregistered = false\n".into(),
        "[[approvers]]\ntools = [\"mail\"]\napprover = \"auto\"\ndecision = \"reject\"\n".into(),
        "[[rules]]\nid = \"dlp\"\ntools = [\"*\"]\ndetect = [\"aws_access_key\"]\naction = \"quarantine\"\n".into(),
    ] {
        root.write(&text);
        let merged = root.base().with_project_of(&root.ws());
        assert!(matches!(merged, Ok(Some(_))), "{text}\n{:?}", merged.err().map(|e| e.to_string()));
    }
}

#[test]
fn the_file_is_read_only_where_it_lies_in_the_workspace() {
    use std::os::unix::fs::symlink;
    let root = Root::new();
    let base = root.base();
    let file = root.ws().join(".guard/policy.toml");
    let outside = root.0.join("other/policy.toml");
    std::fs::write(&outside, "[tools]\nremove = [\"mail\"]\n").expect("write");
    let why = |base: &Policy| match base.with_project_of(&root.ws()) {
        Err(ProjectError::File(why)) => why,
        other => panic!("read: {:?}", other.map(|p| p.is_some())),
    };
    symlink(&outside, &file).expect("symlink");
    assert!(why(&base).contains("is a symlink"), "{}", why(&base));
    std::fs::remove_file(&file).expect("rm");
    std::fs::remove_dir(root.ws().join(".guard")).expect("rmdir");
    symlink(root.0.join("other"), root.ws().join(".guard")).expect("symlink");
    assert!(why(&base).contains(".guard is a symlink"), "{}", why(&base));
    std::fs::remove_file(root.ws().join(".guard")).expect("rm");
    std::fs::create_dir(root.ws().join(".guard")).expect("mkdir");
    nix::unistd::mkfifo(&file, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    assert!(why(&base).contains("not a regular file"), "{}", why(&base));
    std::fs::remove_file(&file).expect("rm");
    let big = format!("# {}\n", "x".repeat(super::MAX_BYTES as usize));
    std::fs::write(&file, big).expect("write");
    assert!(why(&base).contains("bytes"), "{}", why(&base));
    std::fs::remove_file(&file).expect("rm");
    assert!(matches!(base.with_project_of(&root.ws()), Ok(None)));
    assert!(matches!(
        base.with_project_of(&root.0.join("other")),
        Ok(None)
    ));
    assert!(matches!(
        base.with_project_of(&root.0),
        Err(ProjectError::Place(_))
    ));
}

#[test]
fn the_cache_reads_the_file_again_when_it_changes_and_a_refused_one_blocks_everything() {
    let root = Root::new();
    let base = Arc::new(root.base());
    let projects = Projects::default();
    let mut cat = call("cat", serde_json::json!({ "file": "x" }), &root.ws());
    cat.caller = Some(0);
    // No project policy: the base.
    assert!(Arc::ptr_eq(&projects.for_call(&base, &cat), &base));
    root.write("[tools]\nremove = [\"cat\"]\n");
    let first = projects.for_call(&base, &cat);
    assert_eq!(first.decide(&cat).row.check_name, CHECK);
    assert!(
        Arc::ptr_eq(&first, &projects.for_call(&base, &cat)),
        "cached"
    );
    // Another workspace, and a call no one makes, are not its.
    let mut elsewhere = cat.clone();
    elsewhere.cwd = Some(root.0.join("other"));
    assert!(Arc::ptr_eq(&projects.for_call(&base, &elsewhere), &base));
    let mut dry = cat.clone();
    dry.caller = None;
    assert!(Arc::ptr_eq(&projects.for_call(&base, &dry), &base));
    // Edited to widen (the same size, so only the times and the text tell): every call of
    // the workspace is blocked, naming the file, line and key.
    let path = root.write("[tools]\nremove = [\"cax\"]\n");
    let barred = projects.for_call(&base, &cat);
    assert!(!Arc::ptr_eq(&first, &barred), "read again");
    let mut shell = call("shell", serde_json::json!({ "command": "ls" }), &root.ws());
    shell.caller = Some(0);
    let v = barred.decide(&shell);
    assert_eq!(
        (v.row.decision, v.row.check_name.as_str()),
        (Decision::Block, CHECK)
    );
    let at = format!("{}:2:", path.display());
    assert!(v.row.reason.contains(&at), "{}", v.row.reason);
    assert!(v.row.reason.contains("tools.remove"), "{}", v.row.reason);
    assert!(v.row.metadata.project_policy.is_some());
    // Fixed: in force on the next call; removed: the base again.
    root.write("[tools]\nremove = [\"mail\"]\n");
    let fixed = projects.for_call(&base, &shell);
    assert_eq!(fixed.decide(&shell).row.decision, Decision::Allow);
    std::fs::remove_file(&path).expect("rm");
    assert!(Arc::ptr_eq(&projects.for_call(&base, &shell), &base));
}

#[test]
fn the_docs_project_policy_merges_with_the_default_policy() {
    let docs = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/book/src/policy/project.md"
    );
    let docs = std::fs::read_to_string(docs).expect("the book's project policy page");
    let start = docs
        .find("# /srv/agent/workspace/.guard/policy.toml")
        .expect("the docs' project policy");
    let block = &docs[start..];
    let block = &block[..block.find("```").expect("its end")];
    let default = concat!(env!("CARGO_MANIFEST_DIR"), "/../policies/default.toml");
    let default = std::fs::read_to_string(default).expect("the default policy");
    let root = Root::new();
    let ws = root.ws().display().to_string();
    let base = Policy::parse(
        Path::new("default.toml"),
        &default.replace("/srv/agent/workspace", &ws),
    )
    .expect("the default policy");
    root.write(block);
    let merged = base.with_project_of(&root.ws()).expect("merged");
    let merged = merged.expect("a project policy");
    let info = merged.project().expect("named");
    assert_eq!(info.removed, ["fetch_url", "send_email"]);
    assert_eq!(info.restated, ["write_file"]);
    let write = |path: &str| {
        let args = serde_json::json!({ "path": path, "content": "x" });
        merged.decide(&call("write_file", args, &root.ws())).row
    };
    assert_eq!(write("src/main.rs").decision, Decision::Allow);
    assert_eq!(write("README.md").decision, Decision::Block);
    assert_eq!(write("src/Cargo.lock").check_name, "rule:no-lockfile-edits");
}

#[test]
fn a_removal_may_not_drop_a_rule_that_also_decides_unregistered_tools() {
    let root = Root::new();
    let text = BASE
        .replace("ROOT", &root.0.display().to_string())
        .replace("max_allowed_tier = \"high\"", "allow_unregistered = true");
    let base = Policy::parse(Path::new("base.toml"), &text).expect("the base policy");
    root.write("[tools]\nremove = [\"mail\"]\n");
    let err = base
        .with_project_of(&root.ws())
        .expect_err("drops no-mail-to-evil");
    assert!(err.to_string().contains("tools.remove"), "{err}");
    assert!(err.to_string().contains("no-mail-to-evil"), "{err}");
    root.write("[settings]\nallow_unregistered = false\n[tools]\nremove = [\"mail\"]\n");
    let merged = base.with_project_of(&root.ws()).expect("merged");
    let merged = merged.expect("a project policy");
    let other = call("other", serde_json::json!({}), &root.ws());
    assert_eq!(base.decide(&other).row.decision, Decision::Allow);
    assert_eq!(merged.decide(&other).row.decision, Decision::Block);
}
