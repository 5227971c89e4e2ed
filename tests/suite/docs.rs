//! The book cannot rot: every policy snippet of it loads with `guardctl policy check` (or fails
//! as its page says), every command block of getting started is run by a test, and the README's
//! five-minute walk-through runs as written against a real guardd, one line after another in
//! one shell, as a person types it. See the book's contributing page for the block kinds.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use super::support::{self, Guardd, TempDir, output};

/// The book's pages, and the README (which holds the walk-through the book includes).
fn pages() -> Vec<PathBuf> {
    let mut out = vec![support::workspace().join("README.md")];
    let mut dirs = vec![support::workspace().join("docs/book/src")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("the book's pages").flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A page's fenced blocks: (info string, body, 1-based line of the fence).
fn blocks(text: &str) -> Vec<(String, String, usize)> {
    let mut out = Vec::new();
    let mut open: Option<(String, String, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let fence = line.strip_prefix("```");
        if let Some((_, body, _)) = &mut open {
            if fence == Some("") {
                out.extend(open.take());
            } else {
                body.push_str(line);
                body.push('\n');
            }
        } else if let Some(info) = fence {
            open = Some((info.trim().to_owned(), String::new(), i + 1));
        }
    }
    assert!(open.is_none(), "an unclosed code block");
    out
}

/// `guardctl policy check ARGS` from `dir`: (exit code, stderr), read as the page shows it:
/// an error's source lines each on a line of their own, not `\u{a}`.
fn policy_check(dir: &Path, args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = Command::new(support::bin("guardctl"));
    cmd.args(["policy", "check"]).args(args).current_dir(dir);
    let out = output(cmd);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), said)
}

/// The default policy, its workspace moved to `ws`, as `dir/default.toml`.
fn default_policy_at(dir: &Path, ws: &Path) -> PathBuf {
    let path = dir.join("default.toml");
    std::fs::write(&path, support::default_policy_in(ws)).expect("default.toml");
    path
}

/// `body` with each secret it reads from a file (`source = "file:/path"`) read from a file of
/// this test's instead, made in `dir` as a page's setup makes it: root's alone.
fn with_secret_files(body: &str, dir: &Path) -> String {
    use std::os::unix::fs::PermissionsExt as _;
    let mut out = body.to_owned();
    for (n, source) in body.split("\"file:").skip(1).enumerate() {
        let path = source.split('"').next().expect("a path");
        let ours = dir.join(format!("secret-{n}"));
        std::fs::write(&ours, "a secret of the docs test\n").expect("the secret's file");
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o600)).expect("mode");
        out = out.replace(&format!("file:{path}"), &format!("file:{}", ours.display()));
    }
    out
}

/// What a `toml` block is, from the words of its info string after `toml` (a word that is no
/// kind is the block's name, for `support::doc_block`).
#[derive(Debug, PartialEq)]
enum Kind {
    Whole,
    Invalid,
    WithDefault,
    Project,
    Fragment,
    NotPolicy,
}

fn kind(info: &str) -> Option<Kind> {
    let mut words = info.split_whitespace();
    if words.next() != Some("toml") {
        return None;
    }
    let kinds: Vec<Kind> = words
        .filter_map(|w| match w {
            "invalid" => Some(Kind::Invalid),
            "with-default" => Some(Kind::WithDefault),
            "project" => Some(Kind::Project),
            "fragment" => Some(Kind::Fragment),
            "not-policy" => Some(Kind::NotPolicy),
            _ => None,
        })
        .collect();
    assert!(kinds.len() <= 1, "one kind a block: {info:?}");
    Some(kinds.into_iter().next().unwrap_or(Kind::Whole))
}

#[test]
fn every_policy_snippet_of_the_book_loads() {
    let mut loaded = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let found = blocks(&text);
        for (i, (info, body, line)) in found.iter().enumerate() {
            let Some(kind) = kind(info) else { continue };
            let at = format!("{}:{line}", page.display());
            let dir = TempDir::new("guard-docs-toml");
            let ws = dir.join("ws");
            std::fs::create_dir_all(ws.join(".guard")).expect("workspace");
            let (code, said) = match kind {
                Kind::Fragment | Kind::NotPolicy => continue,
                Kind::Whole => {
                    std::fs::write(dir.join("docs.toml"), body).expect("write");
                    policy_check(&dir.0, &["docs.toml"])
                }
                Kind::Invalid => {
                    std::fs::write(dir.join("bad.toml"), body).expect("write");
                    let (code, said) = policy_check(&dir.0, &["bad.toml"]);
                    let shown = match found.get(i + 1) {
                        Some((info, shown, _)) if info == "text" => shown,
                        _ => panic!("{at}: no text block with its errors after it"),
                    };
                    assert_eq!(code, Some(1), "{at} loads but is marked invalid: {said}");
                    assert_eq!(&said, shown, "{at}: the errors shown are out of date");
                    loaded += 1;
                    continue;
                }
                Kind::WithDefault => {
                    let policy = dir.join("policy");
                    std::fs::create_dir_all(&policy).expect("policy dir");
                    default_policy_at(&policy, &ws);
                    let body = with_secret_files(body, &dir.0);
                    std::fs::write(policy.join("snippet.toml"), body).expect("write");
                    policy_check(&dir.0, &["policy"])
                }
                Kind::Project => {
                    let default = default_policy_at(&dir.0, &ws);
                    let text = body.replace("/srv/agent/workspace", &ws.display().to_string());
                    std::fs::write(ws.join(".guard/policy.toml"), text).expect("write");
                    let ws = ws.display().to_string();
                    policy_check(
                        &dir.0,
                        &[&default.display().to_string(), "--workspace", &ws],
                    )
                }
            };
            assert_eq!(
                code,
                Some(0),
                "{at} ({kind:?}) does not load:\n{said}\n---\n{body}"
            );
            loaded += 1;
        }
    }
    assert!(loaded >= 8, "only {loaded} policy snippets found");
}

/// The names of the command blocks of getting started (and of the README's walk-through, which
/// getting started includes), each with the test that runs it.
const RUN: &[(&str, &str)] = &[
    ("walk", "docs::the_readme_walk_through_runs_as_written"),
    (
        "approval-caller",
        "approval::the_getting_started_approval_works_as_written",
    ),
    (
        "approval-admin",
        "approval::the_getting_started_approval_works_as_written",
    ),
    (
        "agents-setup",
        "walk_through::the_getting_started_agents_walk_through_works_as_written",
    ),
    (
        "agents-calls",
        "walk_through::the_getting_started_agents_walk_through_works_as_written",
    ),
];

#[test]
fn every_getting_started_block_is_run_by_a_test() {
    let root = support::workspace();
    let mut seen = Vec::new();
    for page in ["README.md", "docs/book/src/getting-started.md"] {
        let text = std::fs::read_to_string(root.join(page)).expect(page);
        for (info, _, line) in blocks(&text) {
            let mut words = info.split_whitespace();
            if words.next() != Some("sh") {
                continue;
            }
            let name = words.next().unwrap_or("");
            // `sh norun`: a command that starts guardd or the whole suite, which no test runs.
            if name == "norun" {
                continue;
            }
            assert!(
                RUN.iter().any(|(n, _)| *n == name),
                "{page}:{line}: the block {name:?} is run by no test (name it and run it, or mark \
                 it `sh norun`)"
            );
            seen.push(name.to_owned());
        }
    }
    for (name, test) in RUN {
        assert!(
            seen.iter().any(|s| s == name),
            "{test} runs {name}, which no page has"
        );
    }
    let book = std::fs::read_to_string(root.join("docs/book/src/getting-started.md"))
        .expect("getting started");
    assert!(
        book.contains("{{#include ../../../README.md:walk-through}}"),
        "getting started shows the README's walk-through, the lines the test runs"
    );
}

/// The exit code a walk-through line says it has (`# blocked: exits 126`), else 0.
fn expected_code(line: &str) -> i32 {
    line.split("exits ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map_or(0, |n| n.parse().expect("an exit code"))
}

#[test]
fn the_readme_walk_through_runs_as_written() {
    if !support::privileged("the_readme_walk_through_runs_as_written") {
        return;
    }
    let ws = TempDir::new("guard-docs-walk");
    std::fs::write(ws.join("hello.txt"), "hello\n").expect("a file to list");
    // As `cargo xtask run` starts it: the default policy, the socket open to `nogroup`.
    let guardd = Guardd::start_with(
        &support::default_policy_in(&ws.0),
        &["--socket-group", "nogroup"],
    );
    let bin_dir = support::bin("guard-exec")
        .parent()
        .expect("bin dir")
        .display()
        .to_string();
    let lines: Vec<String> = support::doc_block("README.md", "walk")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(
        lines[0],
        "export GUARD_SOCKET=/run/guard-dev/guard.sock G=$PWD/target/debug"
    );
    // One shell, as a person's terminal: each line, then a marker with its exit code.
    let mut script = String::new();
    for (i, line) in lines.iter().enumerate() {
        let line = line
            .replace(
                "/run/guard-dev/guard.sock",
                &guardd.socket.display().to_string(),
            )
            .replace("$PWD/target/debug", &bin_dir)
            .replace("/srv/agent/workspace", &ws.0.display().to_string());
        script.push_str(&format!(
            "{line}\necho \"@@ {i} $?\"; echo \"@@ {i}\" >&2\n"
        ));
    }
    let out = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        let mut cmd = Command::new("/bin/sh");
        cmd.arg("-c").arg(&script).current_dir(support::workspace());
        output(cmd)
    };
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let (mut said, mut rest) = (Vec::new(), stdout.as_str());
    for (i, line) in lines.iter().enumerate() {
        let marker = format!("@@ {i} ");
        let at = rest
            .find(&marker)
            .unwrap_or_else(|| panic!("line {i} `{line}` never ended:\n{stdout}\n{stderr}"));
        let after = &rest[at + marker.len()..];
        let (code, next) = after.split_once('\n').unwrap_or((after, ""));
        let code: i32 = code.trim().parse().expect("an exit code");
        assert_eq!(
            code,
            expected_code(line),
            "line {i} `{line}`:\n{}\nstderr:\n{stderr}",
            &rest[..at]
        );
        said.push(rest[..at].to_owned());
        rest = next;
    }
    assert!(out.status.success(), "{out:?}");
    // What each line is said to show.
    assert!(said[1].contains("landlock"), "status: {}", said[1]);
    assert!(said[3].contains("hello.txt"), "list_dir: {}", said[3]);
    // The held call's id went into `$id`; the audit log has it too.
    let id = guardd
        .audit_rows()
        .iter()
        .find(|r| r["tool"] == "send_email")
        .and_then(|r| r["call_id"].as_str())
        .expect("the held call's row")
        .to_owned();
    assert!(
        said[4].is_empty(),
        "a blocked call prints nothing on stdout: {}",
        said[4]
    );
    assert!(
        stderr.contains("blocked"),
        "the blocked line says so: {stderr}"
    );
    assert!(
        said[6].contains(&id),
        "pending shows the held call: {}",
        said[6]
    );
    assert!(
        said[8].contains("alice@example.com") && said[8].contains("The build is green."),
        "the stand-in mailer printed the message: {}",
        said[8]
    );
    assert!(said[9].contains(&id), "events show the call: {}", said[9]);
    assert!(said[10].contains(&id), "show prints the call: {}", said[10]);
    assert!(
        said[10].contains("receipt"),
        "show prints its receipt: {}",
        said[10]
    );
}
