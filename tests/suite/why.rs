//! A block says why, to whom it may (issue 50): the agent hears the generic reply, but what it
//! must change to call at all (its working directory in no workspace, an argument missing); the
//! uid that made a call reads any other reason of it over guardd's socket (`guardctl why ID`),
//! without read access to the audit log; another uid does not.

use std::os::unix::process::CommandExt as _;

use super::support::{self, Guardd, NOBODY, TempDir, output};

/// A client of the socket group that is not [`NOBODY`].
const OTHER: u32 = 40_031;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_refused_calls_reason_is_its_own_callers_to_read() {
    if !support::privileged("a_refused_calls_reason_is_its_own_callers_to_read") {
        return;
    }
    let root = TempDir::new("guard-why");
    let ws = std::fs::canonicalize(&root.0).expect("real").join("ws");
    std::fs::create_dir(&ws).expect("mkdir");
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).expect("chown");
    let guardd = Guardd::start_with(
        &support::default_policy_in(&ws),
        &["--socket-group", "nogroup"],
    );
    let as_uid = |mut c: std::process::Command, uid: u32| {
        c.uid(uid).gid(NOBODY);
        output(c)
    };
    let exec = |dir: &std::path::Path, args: &[&str]| {
        let mut c = guardd.exec(args[0], &args[1..]);
        c.current_dir(dir);
        as_uid(c, NOBODY)
    };

    // A host the policy does not allow: the agent hears the generic reply and the call's id.
    let out = exec(&ws, &["fetch_url", "url=https://evil.example/x"]);
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    let said = text(&out.stderr);
    assert!(
        said.contains("blocked by policy") && !said.contains("host"),
        "{said}"
    );
    let id = said
        .split("(call ")
        .nth(1)
        .and_then(|rest| rest.split(';').next())
        .expect("the call's id")
        .to_owned();
    // Its owner reads why; another client does not.
    let why = as_uid(guardd.ctl(&["why", &id]), NOBODY);
    assert!(why.status.success(), "{why:?}");
    assert!(
        text(&why.stdout).contains("names a host that is not allowed"),
        "{why:?}"
    );
    let other = as_uid(guardd.ctl(&["why", &id]), OTHER);
    assert!(!other.status.success(), "{other:?}");
    assert!(!text(&other.stdout).contains("host"), "{other:?}");

    // Setup mistakes say what to do, to the agent too.
    let out = exec(&root.0, &["list_dir", "dir=."]);
    let said = text(&out.stderr);
    assert!(said.contains("none of the policy's workspaces"), "{said}");
    assert!(
        said.contains(&ws.display().to_string()),
        "names the roots: {said}"
    );
    let out = exec(&ws, &["read_file"]);
    assert!(
        text(&out.stderr).contains("missing required argument 'path'"),
        "{out:?}"
    );
}
