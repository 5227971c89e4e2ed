//! The Python client (`clients/python`, standard library only) against a real guardd: its unit
//! tests (`clients/python/tests`) run here, in setup's venv, on the source tree, so
//! `cargo xtask test` runs them. The example of `examples/` is checked to load the client.

use std::path::Path;

use super::support::{self, Guardd, ToolDir, output};

fn policy(tool: &Path) -> String {
    let tool = tool.display();
    format!(
        r#"
[approvals]
allow_self = true

[tools.echo]
tier = "low"
command = ["/bin/echo", "{{words}}"]
[tools.echo.args.words]
type = "string"
pattern = '[a-z ]+'

[tools.cat]
tier = "low"
command = ["/bin/cat"]
stdin = "caller"

[tools.say]
tier = "low"
command = ["/bin/cat"]
stdin = {{ arg = "text" }}
[tools.say.args.text]
type = "string"

[tools.net]
tier = "low"
command = ["{tool}", "sendto", "{{addr}}"]
[tools.net.args.addr]
type = "string"
[tools.net.effects]
connect = ["127.0.0.1:9"]

[tools.netdeny]
tier = "low"
command = ["/bin/sh", "-c", "{tool} sendto 127.0.0.1:10; echo done"]
[tools.netdeny.effects]
exec = ["{tool}"]
connect = ["127.0.0.1:9"]
on_divergence = "deny"

[tools.mail]
tier = "high"
irreversible = true
command = ["/bin/echo", "{{to}}"]
[tools.mail.args.to]
type = "string"
"#
    )
}

#[test]
fn python_client_tests_pass_against_a_real_guardd() {
    if !support::privileged("python_client_tests_pass_against_a_real_guardd") {
        return;
    }
    let Some(python) = support::python("python_client_tests") else {
        return;
    };
    let tools = ToolDir::new("pyclient");
    let guardd = Guardd::start(&policy(&tools.tool));
    let client = support::workspace().join("clients/python");
    let mut cmd = std::process::Command::new(python);
    cmd.args(["-m", "unittest", "discover", "-v", "-s"])
        .arg(client.join("tests"))
        .env("PYTHONPATH", client.join("src"))
        .env("GUARD_SOCKET", &guardd.socket)
        .env("GUARD_CTL", support::bin("guardctl"))
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = output(cmd);
    let report = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{report}");
    assert!(
        report.contains("OK") && !report.contains("Ran 0 tests"),
        "{report}"
    );
    for test in [
        "test_run_returns_exit_code_output_and_receipt",
        "test_a_held_call_not_waited_for_is_released_once_approved",
    ] {
        assert!(
            report
                .lines()
                .any(|l| l.starts_with(&format!("{test} ")) && l.ends_with("... ok")),
            "{test}: {report}"
        );
    }
    // The calls were guardd's: decided, recorded, and the ones that ran finished with receipts.
    let rows = guardd.audit_rows();
    let finished: Vec<_> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert!(
        finished
            .iter()
            .any(|r| r["tool"] == "net" && r["effects_observed"]["verdict"] == "diverged"),
        "{rows:?}"
    );
    assert!(rows.iter().any(|r| r["kind"] == "approval"), "{rows:?}");
    // `cat` without input: refused by guardd itself, recorded, and never run.
    let refused = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["decision"]["check_name"] == "stdin")
        .unwrap_or_else(|| panic!("no stdin refusal: {rows:?}"));
    assert_eq!(refused["tool"], "cat");
    assert!(
        !rows
            .iter()
            .any(|r| r["kind"] == "finished" && r["call_id"] == refused["call_id"]),
        "the refused call ran"
    );
}

#[test]
fn python_client_is_installed_in_the_venv_by_pip() {
    let Some(python) = support::python("python_client_is_installed_in_the_venv_by_pip") else {
        return;
    };
    // Run from / so that only the installed package can be imported, not the source tree.
    let mut cmd = std::process::Command::new(python);
    cmd.current_dir("/").args([
        "-c",
        "import guard_client, sys; print(guard_client.__file__); \
         sys.exit(0 if 'site-packages' in guard_client.__file__ else 1)",
    ]);
    let out = output(cmd);
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The book's Python recipe (docs/book/src/agents/python.md), as written, on guardd with the default policy.
#[test]
fn integrations_md_python_recipe_works_as_written() {
    if !support::privileged("integrations_md_python_recipe_works_as_written") {
        return;
    }
    let Some(python) = support::python("integrations_md_python_recipe_works_as_written") else {
        return;
    };
    support::default_workspace();
    let default = support::workspace().join("policies/default.toml");
    let guardd = Guardd::start(&std::fs::read_to_string(default).expect("default policy"));
    let recipe = support::doc_block("docs/book/src/agents/python.md", "python-client");
    let mut cmd = std::process::Command::new(python);
    // An agent in its workspace, where the default policy's tools work.
    cmd.current_dir(support::default_workspace())
        .args(["-c", &recipe])
        .env(
            "PYTHONPATH",
            support::workspace().join("clients/python/src"),
        )
        .env("GUARD_SOCKET", &guardd.socket)
        .env("PYTHONDONTWRITEBYTECODE", "1");
    let out = output(cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    assert_eq!(lines.next(), Some("allow"), "{stdout}");
    assert!(
        lines.next().is_some_and(|l| l.starts_with("0 ")),
        "{stdout}"
    );
    assert!(
        stdout.contains("['/bin/ls']") || stdout.contains("['/usr/bin/ls']"),
        "{stdout}"
    );
}
