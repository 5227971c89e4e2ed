//! Shadow (issue 34, part 1): a tool with `enforce = "shadow"` runs what the policy would block
//! and what its effects do not allow, and every row, event and status line says so; the same
//! policy enforced refuses both. Its receipts then feed `guardctl policy suggest`, whose
//! output, enforced, lets the same calls conform.

use std::{net::TcpListener, process::Command};

use super::support::{self, Guardd, output};

/// The policy of `escape::Setup` with `tt` in shadow, reading nothing but its own program, and a
/// rule that blocks the word `forbidden` in its third argument.
fn shadow_policy(s: &super::escape::Setup) -> String {
    let rule = "[[rules]]\nid = \"no-forbidden\"\ntools = [\"tt\"]\narg = \"a2\"\n\
                regex = \"forbidden\"\naction = \"block\"\n";
    let policy = s.policy("on_divergence = \"deny\"", rule);
    policy.replacen("[tools.tt]\n", "[tools.tt]\nenforce = \"shadow\"\n", 1)
}

/// A port on 127.0.0.1 that takes every connection.
fn listening() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    port
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn a_tool_in_shadow_runs_what_enforcing_refuses_and_says_so_everywhere() {
    if !support::privileged("a_tool_in_shadow_runs_what_enforcing_refuses_and_says_so_everywhere") {
        return;
    }
    let port = listening();
    let s = super::escape::Setup::new();
    let out_dir = s.subdir("out", 0o777);
    let written = out_dir.join("note");
    let mut guardd = Guardd::start_with(&shadow_policy(&s), &[]);

    // Blocked by the rule when enforced; in shadow it runs, and writes outside its effects.
    let note = written.to_str().expect("utf-8");
    let blocked = super::escape::call(&guardd, &["write", note, "forbidden"]);
    assert_eq!(blocked.status.code(), Some(0), "{blocked:?}");
    assert_eq!(
        std::fs::read_to_string(&written).expect("written"),
        "forbidden"
    );
    // Outside its effects: a connect, a name from its resolver, an exec.
    let to = format!("127.0.0.1:{port}");
    let actions = [
        "connect",
        &to,
        "--",
        "dns-query",
        "192.0.2.1:53",
        "localhost",
        "--",
        "exec",
        "/usr/bin/true",
    ];
    let reached = super::escape::call(&guardd, &actions);
    assert_eq!(reached.status.code(), Some(0), "{reached:?}");
    let stdout = text(&reached.stdout);
    assert!(stdout.contains(&format!("connected {to}")), "{stdout}");
    assert!(stdout.contains("answer 127.0.0.1"), "{stdout}");

    let rows = guardd.audit_rows();
    let decisions: Vec<_> = rows.iter().filter(|r| r["kind"] == "decision").collect();
    let would = &decisions[0]["decision"];
    assert_eq!(would["decision"], "allow", "{would}");
    assert_eq!(would["check_name"], "rule:no-forbidden", "{would}");
    assert_eq!(would["metadata"]["would_block"], "block", "{would}");
    assert!(
        decisions
            .iter()
            .all(|d| d["decision"]["metadata"]["enforce"] == "shadow"),
        "{decisions:?}"
    );
    let finished: Vec<_> = rows.iter().filter(|r| r["kind"] == "finished").collect();
    assert!(
        finished.iter().all(|f| f["enforce"] == "shadow"),
        "{finished:?}"
    );
    assert_eq!(finished[0]["sandbox"]["landlock_status"], "shadow");
    let divergences = |f: &serde_json::Value| -> Vec<(String, String, String)> {
        let list = f["effects_observed"]["divergences"].as_array().cloned();
        list.unwrap_or_default()
            .iter()
            .map(|d| {
                let s = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
                (s("effect"), s("action"), s("would"))
            })
            .collect()
    };
    let wrote = divergences(finished[0]);
    assert!(
        wrote
            .iter()
            .any(|(e, a, w)| e == "open" && a == "allowed" && w == "deny"),
        "the write outside its effects: {wrote:?}"
    );
    let did = divergences(finished[1]);
    for effect in ["connect", "dns", "exec"] {
        assert!(
            did.iter()
                .any(|(e, a, w)| e == effect && a == "allowed" && w == "deny"),
            "{effect} let through, would deny: {did:?}"
        );
    }
    assert_eq!(finished[1]["effects_observed"]["verdict"], "diverged");

    // Loud: the status names the tools, every event line of the calls is marked.
    let status = output(guardd.ctl(&["status"]));
    assert!(text(&status.stdout).contains("SHADOW: tt"), "{status:?}");
    let events = output({
        let mut c = Command::new(support::bin("guardctl"));
        c.args(["events", "--audit"]).arg(&guardd.audit);
        c
    });
    let lines = text(&events.stdout);
    let of_calls: Vec<&str> = lines.lines().filter(|l| l.contains(" tt ")).collect();
    assert!(of_calls.len() >= 6, "{lines}");
    assert!(
        of_calls.iter().all(|l| l.contains("SHADOW")),
        "every line of a call in shadow says so:\n{lines}"
    );

    // The same policy enforced: the rule blocks, the connect is refused.
    let enforced = shadow_policy(&s).replacen("enforce = \"shadow\"\n", "", 1);
    std::fs::write(guardd.dir.join("policy.toml"), enforced).expect("policy");
    guardd.restart();
    std::fs::remove_file(&written).expect("rm");
    let blocked = super::escape::call(&guardd, &["write", note, "forbidden"]);
    assert_ne!(blocked.status.code(), Some(0), "{blocked:?}");
    assert!(!written.exists(), "an enforced block ran");
    let refused = super::escape::call(&guardd, &["connect", &to]);
    assert_ne!(refused.status.code(), Some(0), "{refused:?}");
    let status = output(guardd.ctl(&["status"]));
    assert!(!text(&status.stdout).contains("SHADOW"), "{status:?}");
}

#[test]
fn what_calls_did_in_shadow_suggests_a_policy_under_which_they_conform() {
    if !support::privileged("what_calls_did_in_shadow_suggests_a_policy_under_which_they_conform") {
        return;
    }
    let port = listening();
    let s = super::escape::Setup::new();
    let out_dir = s.subdir("out", 0o777);
    let note = out_dir.join("note");
    let note = note.to_str().expect("utf-8").to_owned();
    let mut guardd = Guardd::start_with(&shadow_policy(&s), &[]);
    let to = format!("127.0.0.1:{port}");
    let calls: [&[&str]; 3] = [
        &["write", &note, "hello"],
        &["read", "/etc/hostname"],
        &["connect", &to, "--", "exec", "/usr/bin/true"],
    ];
    for c in calls {
        let out = super::escape::call(&guardd, c);
        assert_eq!(out.status.code(), Some(0), "{c:?}: {out:?}");
    }
    let suggest = output({
        let mut c = Command::new(support::bin("guardctl"));
        c.args(["policy", "suggest", "--tool", "tt", "--audit"])
            .arg(&guardd.audit);
        c
    });
    let suggested = text(&suggest.stdout);
    assert!(suggest.status.success(), "{suggest:?}");
    for want in [&note, "/etc/hostname", "/usr/bin/true", &to] {
        assert!(
            suggested.contains(&format!("\"{want}\"")),
            "{want}: {suggested}"
        );
    }

    // Enforced, as printed: the same calls conform; a new one is refused.
    let policy = shadow_policy(&s)
        .replacen("enforce = \"shadow\"\n", "", 1)
        .replace("[tools.tt.effects]\non_divergence = \"deny\"\n", "");
    super::suggest::in_force_the_same_calls_conform(&mut guardd, &(policy + &suggested), &calls);
}
