//! Loading judges, approvers and the notifier: what they compile to, and the errors of each.

use std::{path::Path, time::Duration};

use super::{
    Policy,
    helpers::{ApproverKind, Outcome},
};

fn load(text: &str) -> Result<Policy, Vec<String>> {
    Policy::parse(Path::new("test.toml"), text)
        .map_err(|e| e.iter().map(|e| e.to_string()).collect())
}

const BASE: &str = r#"
[settings]
judges = ["j1"]
[judges.j1]
command = ["/bin/judge", "--strict"]
criteria = "safe?"
min_score = 0.85
timeout = 30
[judges.j1.effects]
connect = ["judge.example.com:443"]
[judges.j2]
command = ["/bin/judge2"]
[tools.file_read]
tier = "low"
skip_judge = true
[tools.file_write]
tier = "medium"
judges = ["j2", "j1"]
[tools.send_mail]
tier = "medium"
[[approvers]]
tools = ["file_*"]
approver = "auto"
[[approvers]]
tools = ["send_*"]
approver = 'command:["/bin/approve", "-q"]'
timeout = 5
[[approvers]]
tools = ["*"]
approver = "judge:j2"
[approvals]
notify = ["/bin/notify"]
notify_timeout = 3
"#;

#[test]
fn judges_approvers_and_the_notifier_compile_as_written() {
    let p = load(BASE).expect("loads");
    let names =
        |tool: &str| -> Vec<String> { p.judges_of(tool).iter().map(|j| j.name.clone()).collect() };
    assert_eq!(names("send_mail"), ["j1"], "the default judges");
    assert!(names("file_read").is_empty(), "skip_judge");
    assert_eq!(names("file_write"), ["j2", "j1"], "in order");
    let j1 = p.judge("j1").expect("j1");
    assert_eq!((j1.min_score, j1.min_confidence), (0.85, 0.0));
    assert_eq!(j1.helper.timeout, Duration::from_secs(30));
    assert_eq!(j1.helper.connect[0].host, "judge.example.com");
    assert_eq!(p.judge("j2").expect("j2").min_score, 0.7);
    assert_eq!(
        p.judge("j2").expect("j2").helper.timeout,
        Duration::from_secs(300)
    );
    let kinds: Vec<String> = p
        .approvers_of("file_write")
        .iter()
        .map(|a| a.name())
        .collect();
    assert_eq!(kinds, ["auto", "judge:j2"]);
    assert_eq!(
        p.approvers_of("file_write")[0].kind,
        ApproverKind::Auto(Outcome::Approve)
    );
    let send = p.approvers_of("send_mail");
    let ApproverKind::Command(h) = &send[0].kind else {
        panic!("a command approver: {send:?}")
    };
    assert_eq!(
        (h.command.as_slice(), h.timeout),
        (
            &["/bin/approve".to_owned(), "-q".into()][..],
            Duration::from_secs(5)
        )
    );
    let notify = p.settings().notify.as_ref().expect("notify");
    assert_eq!(
        (notify.command[0].as_str(), notify.timeout),
        ("/bin/notify", Duration::from_secs(3))
    );
}

#[test]
fn each_mistake_is_an_error_naming_its_key() {
    let cases = [
        ("[judges.j2]", "[judges.\"j/2\"]", "judge names are letters"),
        (
            "min_score = 0.85",
            "min_score = 1.5",
            "judges.j1.min_score: a number from 0.0 to 1.0",
        ),
        (
            "judges = [\"j2\", \"j1\"]",
            "judges = [\"j3\"]",
            "tools.file_write.judges: no judge 'j3'",
        ),
        (
            "skip_judge = true",
            "skip_judge = true\njudges = [\"j1\"]",
            "say one or the other",
        ),
        (
            "\"/bin/judge\", \"--strict\"",
            "\"judge\"",
            "must be an absolute path",
        ),
        (
            "\"/bin/judge\", \"--strict\"",
            "\"/bin/judge\", \"{path}\"",
            "names no argument",
        ),
        (
            "approver = \"auto\"",
            "approver = \"robot\"",
            "approvers[0].approver: unknown approver",
        ),
        (
            "approver = \"judge:j2\"",
            "approver = \"judge:nope\"",
            "no judge 'nope'",
        ),
        (
            r#"'command:["/bin/approve", "-q"]'"#,
            "'command:/bin/approve'",
            "JSON array",
        ),
        (
            "tools = [\"send_*\"]",
            "tools = [\"mail_*\"]",
            "glob 'mail_*' matches no tool",
        ),
        (
            "timeout = 5",
            "timeout = 0",
            "approvers[1].timeout: timeout is 1 to 86400",
        ),
        (
            "judges = [\"j1\"]\n[judges.j1]",
            "judges = [\"jx\"]\n[judges.j1]",
            "settings.judges: no judge 'jx'",
        ),
    ];
    for (from, to, want) in cases {
        let text = BASE.replacen(from, to, 1);
        assert_ne!(text, BASE, "{from} not in the base policy");
        let errors = load(&text).expect_err(to);
        assert!(errors.iter().any(|e| e.contains(want)), "{to}: {errors:#?}");
    }
}

#[test]
fn the_examples_of_the_reference_texts_use_judges_approvers_and_notify() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/examples");
    let load = |f: &str| Policy::load(&dir.join(f)).expect(f);
    let aegis = load("aegis.toml");
    let judges = |p: &Policy, t: &str| -> Vec<String> {
        p.judges_of(t).iter().map(|j| j.name.clone()).collect()
    };
    assert_eq!(judges(&aegis, "write_file"), ["security-judge", "qa-judge"]);
    assert_eq!(judges(&aegis, "terraform_apply"), ["security-judge"]);
    assert!(judges(&aegis, "read_file").is_empty());
    assert_eq!(
        aegis.judge("security-judge").expect("judge").min_score,
        0.85
    );
    let inspect = load("inspect_ai.toml");
    let names: Vec<String> = inspect
        .approvers_of("bash")
        .iter()
        .map(|a| a.name())
        .collect();
    assert_eq!(names, ["command", "human"]);
    assert_eq!(inspect.approvers_of("file_write")[0].name(), "auto");
    assert!(load("quarantine.toml").settings().notify.is_some());
    assert_eq!(
        load("signet.toml").approvers_of("send_email")[0].name(),
        "human"
    );
    assert_eq!(
        judges(&load("invariant.toml"), "send_email"),
        ["leak-judge"]
    );
}
