//! Getting started's walk-through of agents, projects and secrets, run as written: its setup lines,
//! its policy file, then its calls, each line in a shell as a person would type it, against a
//! guardd started as `cargo xtask run --policy DIR` would start it. Paths the page names on
//! the host (`/etc/guard-walk`, `/srv/agent/workspace`) are this test's own directories.

use std::path::Path;

use super::support::{self, Guardd, TempDir, output};

/// The page whose lines this test runs.
const PAGE: &str = "docs/book/src/getting-started.md";

/// One line of the page, its host paths made this test's, run by `sh` from `dir`.
fn line(text: &str, paths: &[(&str, String)], socket: &Path, bin: &str) -> std::process::Output {
    let mut text = text.to_owned();
    for (from, to) in paths {
        text = text.replace(from, to);
    }
    let mut cmd = std::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(&text)
        .current_dir(support::workspace())
        .env("GUARD_SOCKET", socket)
        .env("G", bin);
    output(cmd)
}

#[test]
fn the_getting_started_agents_walk_through_works_as_written() {
    if !support::privileged("the_getting_started_agents_walk_through_works_as_written") {
        return;
    }
    let root = TempDir::new("guard-walk");
    let etc = root.join("etc");
    let ws = root.join("ws");
    std::fs::create_dir_all(&ws).expect("workspace");
    let bin = support::bin("guard-exec");
    let bin_dir = bin.parent().expect("bin dir").display().to_string();
    // The setup copies policies/default.toml from the checkout, as a person in it would.
    let paths = [
        ("/etc/guard-walk", etc.display().to_string()),
        ("/srv/agent/workspace", ws.display().to_string()),
    ];
    let socket_placeholder = Path::new("/nonexistent");
    for l in support::doc_block(PAGE, "agents-setup").lines() {
        let out = line(l, &paths, socket_placeholder, &bin_dir);
        assert!(out.status.success(), "`{l}`: {out:?}");
    }
    let added = support::doc_block(PAGE, "agents-policy")
        .replace("/etc/guard-walk", &etc.display().to_string());
    std::fs::write(etc.join("agents.toml"), &added).expect("agents.toml");
    // The directory as guardd loads it, in one text (the files merge as one policy).
    let default = std::fs::read_to_string(etc.join("default.toml")).expect("default.toml");
    let default = default.replace("/srv/agent/workspace", &ws.display().to_string());
    std::fs::write(etc.join("default.toml"), &default).expect("default.toml");
    let policy = default + &added;
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);

    let calls: Vec<String> = support::doc_block(PAGE, "agents-calls")
        .lines()
        .map(str::to_owned)
        .collect();
    // The first line says where guardd and the binaries are: here, this test's.
    assert_eq!(
        calls[0],
        "export GUARD_SOCKET=/run/guard-dev/guard.sock G=$PWD/target/debug"
    );
    let run = |i: usize| line(&calls[i], &paths, &guardd.socket, &bin_dir);
    let shown = run(1);
    assert_eq!(shown.status.code(), Some(0), "{shown:?}");
    assert_eq!(String::from_utf8_lossy(&shown.stdout), "[secret:status]\n");
    let as_root = run(2);
    assert_eq!(
        as_root.status.code(),
        Some(126),
        "root is no agent: {as_root:?}"
    );
    let project = run(3);
    assert!(project.status.success(), "{project:?}");
    let shell = run(4);
    assert_eq!(
        shell.status.code(),
        Some(126),
        "removed in this project: {shell:?}"
    );
    let check = run(5);
    let said = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && said.contains("shell"),
        "{check:?}"
    );
    let agents = run(6);
    let listed = String::from_utf8_lossy(&agents.stdout);
    assert!(
        agents.status.success() && listed.contains("coder"),
        "{agents:?}"
    );
    assert_eq!(calls.len(), 7, "a line the test does not run: {calls:?}");

    // What the audit log kept: the receipt names the secret, no row holds its value.
    let audit = std::fs::read_to_string(&guardd.audit).expect("audit");
    assert!(
        !audit.contains("tok-walk-through-31337"),
        "the value in the log"
    );
    let exposed = guardd
        .audit_rows()
        .iter()
        .any(|r| r["effects_observed"]["secret_exposed"] == serde_json::json!(["status"]));
    assert!(exposed, "{audit}");
}
