//! inspect_ai's approval policies files: the one of its documentation loads and means what it
//! says, each entry guard cannot use is an error at its line, and a JSON or YAML file in a
//! policy directory that nothing names is refused rather than skipped.

use std::path::PathBuf;

use crate::policy::{
    Policy,
    helpers::{ApproverKind, Choices, Outcome},
};

/// A directory of this test's own, removed with it.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("guard-approvals-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        Self(dir)
    }

    fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, text).expect("write");
        path
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A policy whose approvers come from `file` (named `approval_policies`).
fn policy(file: &str) -> String {
    format!(
        r#"
[settings]
approval_policies = "{file}"

[tools.bash]
tier = "high"
command = ["/bin/echo", "{{cmd}}"]
[tools.bash.args.cmd]
type = "string"

[tools.web_browser_click]
tier = "high"
command = ["/bin/true"]

[tools.python]
tier = "high"
command = ["/bin/true"]
"#
    )
}

fn errors(dir: &Dir, file: &str, text: &str) -> Vec<String> {
    dir.write(file, text);
    let p = dir.write("policy.toml", &policy(file));
    match Policy::load(&p) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    }
}

#[test]
fn the_file_of_inspect_ais_documentation_loads_as_its_approvers() {
    let dir = Dir::new("docs");
    // inspect_ai's documentation's example, with a human who may not terminate.
    let yaml = "approvers:\n  - name: human\n    tools: [\"web_browser_click\", \"bash\"]\n    \
                choices: [approve, reject]\n\n  - name: auto\n    tools: \"*\"\n";
    dir.write("approval.yaml", yaml);
    let p = dir.write("policy.toml", &policy("approval.yaml"));
    let loaded = Policy::load(&p).expect("loads");
    let bash = loaded.approvers_of("bash");
    assert_eq!(bash.len(), 2, "{bash:?}");
    let human = Choices {
        approve: true,
        terminate: false,
    };
    assert_eq!(bash[0].kind, ApproverKind::Human(human));
    assert_eq!(bash[1].kind, ApproverKind::Auto(Outcome::Approve));
    let python = loaded.approvers_of("python");
    assert_eq!(python.len(), 1);
    assert_eq!(python[0].kind, ApproverKind::Auto(Outcome::Approve));

    // The same in JSON; a human without choices has inspect_ai's default ones.
    let json = r#"{"approvers": [{"name": "human", "tools": "bash"},
                   {"name": "auto", "tools": ["python"], "decision": "reject"}]}"#;
    dir.write("approval.json", json);
    let p = dir.write("policy.toml", &policy("approval.json"));
    std::fs::remove_file(dir.0.join("approval.yaml")).expect("rm");
    let loaded = Policy::load(&p).expect("loads");
    let human = ApproverKind::Human(Choices::default());
    assert_eq!(loaded.approvers_of("bash")[0].kind, human);
    let python = &loaded.approvers_of("python")[0].kind;
    assert_eq!(python, &ApproverKind::Auto(Outcome::Reject));
}

#[test]
fn what_guard_cannot_use_is_an_error_at_its_line() {
    let dir = Dir::new("errors");
    let cases = [
        // An approver of inspect_ai's Python registry, with its own arguments.
        (
            "approvers:\n  - name: auto\n    tools: python\n  - name: bash_allowlist\n    tools: bash\n    allowed_commands: [ls]\n",
            "approval.yaml:4:",
            "approver 'bash_allowlist' is none guard runs",
        ),
        // A choice guard's admin has no answer for.
        (
            "approvers:\n  - name: human\n    tools: bash\n    choices: [approve, modify]\n",
            "approval.yaml:4:",
            "no choice 'modify'",
        ),
        // A key inspect_ai's human or auto does not take.
        (
            "approvers:\n  - name: auto\n    tools: bash\n    decison: reject\n",
            "approval.yaml:4:",
            "'decison' is no argument of guard's 'auto' approver",
        ),
        // A glob that matches no tool, and an auto decision that is none.
        (
            "approvers:\n  - name: auto\n    tools: [bash, \"nothing*\"]\n    decision: maybe\n",
            "approval.yaml:3:",
            "glob 'nothing*' matches no tool",
        ),
        ("approvers: [\n", "approval.yaml:", "approvers"),
        // No tool at all, and a timeout on an approver that runs nothing.
        (
            "approvers:\n  - name: auto\n    tools: []\n",
            "approval.yaml:2:",
            "at least one tool",
        ),
        (
            "approvers:\n  - name: human\n    tools: bash\n    timeout: -7\n",
            "approval.yaml:2:",
            "only a command approver takes a timeout",
        ),
    ];
    for (yaml, at, said) in cases {
        let errors = errors(&dir, "approval.yaml", yaml);
        assert!(
            errors.iter().any(|e| e.contains(at) && e.contains(said)),
            "{yaml}: {errors:#?}"
        );
    }
    let errors = errors(&dir, "approval.txt", "approvers: []\n");
    assert!(errors.iter().any(|e| e.contains("JSON")), "{errors:?}");
}

#[test]
fn a_json_or_yaml_file_beside_a_policy_directory_that_nothing_names_is_refused() {
    let dir = Dir::new("unnamed");
    dir.write(
        "10-tools.toml",
        "[tools.bash]\ntier = \"low\"\ncommand = [\"/bin/true\"]\n",
    );
    dir.write(
        "approvals.yaml",
        "approvers:\n  - name: auto\n    tools: bash\n",
    );
    let errors = match Policy::load(&dir.0) {
        Ok(_) => Vec::new(),
        Err(e) => e.iter().map(ToString::to_string).collect(),
    };
    assert!(
        errors
            .iter()
            .any(|e| e.contains("approvals.yaml") && e.contains("not loaded")),
        "{errors:?}"
    );
    // Named by the directory's policy, it is its approvers.
    dir.write(
        "00-settings.toml",
        "[settings]\napproval_policies = \"approvals.yaml\"\n",
    );
    let loaded = Policy::load(&dir.0).expect("loads");
    assert_eq!(loaded.approvers_of("bash").len(), 1);
}

#[test]
fn a_policy_parsed_alone_cannot_name_one() {
    let err = Policy::parse(std::path::Path::new("p.toml"), &policy("approval.yaml"))
        .expect_err("refused");
    assert!(err.to_string().contains("approval_policies"), "{err}");
}

#[test]
fn only_a_file_of_roots_that_no_one_else_may_write_is_read() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = Dir::new("guarded");
    let yaml = "approvers:\n  - name: auto\n    tools: bash\n";
    let load = |name: &str| {
        let p = dir.write("policy.toml", &policy(name));
        Policy::load(&p).map_err(|e| e.to_string())
    };
    // Writable by others: whoever may write it would answer escalated calls.
    let open = dir.write("open.yaml", yaml);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).expect("chmod");
    assert!(load("open.yaml").is_err_and(|e| e.contains("writable by its group or others")));
    // A FIFO is refused at once rather than waited on (a hang of every load and reload).
    let fifo = dir.0.join("fifo.yaml");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).expect("fifo");
    assert!(load("fifo.yaml").is_err_and(|e| e.contains("not a regular file")));
    // A device through a link, which would be read without end.
    std::os::unix::fs::symlink("/dev/zero", dir.0.join("zero.yaml")).expect("link");
    assert!(load("zero.yaml").is_err_and(|e| e.contains("not a regular file")));
    // Larger than an approval file has any need to be.
    dir.write("huge.yaml", &format!("{yaml}#{}\n", "x".repeat(1 << 20)));
    assert!(load("huge.yaml").is_err_and(|e| e.contains("allowed")));
    // Another user's (root's tests only can give it away).
    if nix::unistd::geteuid().is_root() {
        let theirs = dir.write("theirs.yaml", yaml);
        std::os::unix::fs::chown(&theirs, Some(65534), None).expect("chown");
        assert!(load("theirs.yaml").is_err_and(|e| e.contains("owned by uid 65534")));
    }
}
