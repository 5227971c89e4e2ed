//! `guardctl policy suggest` (issue 34, part 2): the narrowest effects from what calls did,
//! put in force as printed; the same calls conform under it, a new one does not, and what
//! was refused is shown commented out, not granted.

use std::{net::TcpListener, process::Command};

use super::support::{self, Guardd, output};

#[test]
fn a_suggested_policy_lets_the_same_calls_conform_and_nothing_new() {
    if !support::privileged("a_suggested_policy_lets_the_same_calls_conform_and_nothing_new") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || listener.incoming().for_each(drop));
    let unused = TcpListener::bind("127.0.0.1:0").expect("bind");
    let unused_port = unused.local_addr().expect("addr").port();
    let s = super::escape::Setup::new();
    let wide = format!(
        "read = [\"/etc\"]\nexec = [\"/usr/bin\"]\n\
         connect = [\"127.0.0.1:{port}\", \"127.0.0.1:{unused_port}\"]\non_divergence = \"deny\""
    );
    let mut guardd = Guardd::start_with(&s.policy(&wide, ""), &["--trace-syscalls"]);
    let calls: [&[&str]; 3] = [
        &["read", "/etc/hostname"],
        &["exec", "/usr/bin/true"],
        &["connect", &format!("127.0.0.1:{port}")],
    ];
    for c in calls {
        let out = super::escape::call(&guardd, c);
        assert_eq!(out.status.code(), Some(0), "{c:?}: {out:?}");
    }
    // Refused: not in the wide policy either.
    let refused = super::escape::call(&guardd, &["read", "/root/.bashrc"]);
    assert_ne!(refused.status.code(), Some(0), "{refused:?}");

    let suggest = output({
        let mut c = Command::new(support::bin("guardctl"));
        c.args(["policy", "suggest", "--tool", "tt", "--audit"])
            .arg(&guardd.audit);
        c
    });
    let text = String::from_utf8_lossy(&suggest.stdout).into_owned();
    assert!(suggest.status.success(), "{suggest:?}");
    assert!(text.contains("\"/etc/hostname\""), "{text}");
    assert!(text.contains("\"/usr/bin/true\""), "{text}");
    assert!(text.contains(&format!("\"127.0.0.1:{port}\"")), "{text}");
    assert!(
        !text.contains(&unused_port.to_string()),
        "what no call used: {text}"
    );
    assert!(text.contains("# refused, not granted:"), "{text}");
    assert!(
        !text.contains("\"/root/.bashrc\""),
        "a refused attempt granted: {text}"
    );

    // Against the wide policy: only what changes, the unused port and directories dropped.
    let diff = output({
        let mut c = Command::new(support::bin("guardctl"));
        c.args(["policy", "suggest", "--tool", "tt", "--audit"])
            .arg(&guardd.audit)
            .arg("--diff")
            .arg(guardd.dir.join("policy.toml"));
        c
    });
    let changes = String::from_utf8_lossy(&diff.stdout).into_owned();
    assert!(diff.status.success(), "{diff:?}");
    for want in [
        "tools.tt.effects.connect".to_owned(),
        format!("- \"127.0.0.1:{unused_port}\""),
        "- \"/etc\"".to_owned(),
        "+ \"/etc/hostname\"".to_owned(),
        "- \"/usr/bin\"".to_owned(),
    ] {
        assert!(changes.contains(&want), "{want} not in:\n{changes}");
    }
    assert!(
        !changes.contains(&format!("+ \"127.0.0.1:{port}\"")),
        "{changes}"
    );

    // In force as printed (with the tool's own keys kept): the same calls conform, a new
    // one does not.
    let narrow = s.policy("", "").replace("[tools.tt.effects]\n", "") + &text;
    in_force_the_same_calls_conform(&mut guardd, &narrow, &calls);
}

/// Puts `policy` (a suggestion, printed into a policy) in force, and asserts that `calls`
/// conform under it and a read no call made is refused.
pub(super) fn in_force_the_same_calls_conform(
    guardd: &mut Guardd,
    policy: &str,
    calls: &[&[&str]],
) {
    std::fs::write(guardd.dir.join("policy.toml"), policy).expect("policy");
    guardd.restart();
    for c in calls {
        let out = super::escape::call(guardd, c);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{c:?} under the suggestion: {out:?}\n{policy}"
        );
    }
    let rows = guardd.audit_rows();
    let verdicts: Vec<&str> = rows
        .iter()
        .filter(|r| r["kind"] == "finished")
        .rev()
        .take(calls.len())
        .filter_map(|r| r["effects_observed"]["verdict"].as_str())
        .collect();
    assert_eq!(verdicts, vec!["conformed"; calls.len()], "{policy}");
    let new = super::escape::call(guardd, &["read", "/etc/passwd"]);
    assert_ne!(
        new.status.code(),
        Some(0),
        "a new read under the suggestion: {new:?}"
    );
}

/// Issue 49, point 10: one call in shadow of `ls /home` made `policy suggest` propose
/// `read = ["/home"]`, every home. What a call opened beneath a broad directory is proposed as
/// itself (`/etc/hostname`, not `/etc`); a directory a call only listed (`ls /usr/share`, an
/// outside pass's L4) is said in a comment, not proposed: a `read` of it would grant all
/// beneath it. Enforced as printed, the suggestion lets the narrow call conform and the
/// listing is refused.
#[test]
fn a_suggestion_never_widens_to_the_homes_a_top_directory_or_guards_own() {
    if !support::privileged("a_suggestion_never_widens_to_the_homes_a_top_directory_or_guards_own")
    {
        return;
    }
    assert!(
        std::path::Path::new("/home").is_dir(),
        "this host has no /home"
    );
    let tools = r#"
[tools.ls]
tier = "low"
enforce = "shadow"
command = ["/usr/bin/ls", "{dir}"]
[tools.ls.args.dir]
type = "string"

[tools.cat]
tier = "low"
enforce = "shadow"
command = ["/usr/bin/cat", "{file}"]
[tools.cat.args.file]
type = "string"
"#;
    let mut guardd = Guardd::start(tools);
    let own = guardd.dir.0.display().to_string();
    for (tool, arg) in [
        ("ls", "dir=/home".to_owned()),
        ("ls", "dir=/etc".to_owned()),
        ("ls", format!("dir={own}")),
        ("ls", "dir=/usr/share".to_owned()),
        ("cat", "file=/etc/hostname".to_owned()),
    ] {
        let out = output(guardd.exec(tool, &[&arg]));
        assert_eq!(out.status.code(), Some(0), "{tool} {arg}: {out:?}");
    }
    let suggest = output({
        let mut c = guardd.ctl(&["policy", "suggest", "--audit"]);
        c.arg(&guardd.audit);
        c
    });
    let text = String::from_utf8_lossy(&suggest.stdout).into_owned();
    assert!(suggest.status.success(), "{suggest:?}");
    let parsed: toml::Table = toml::from_str(&text).expect("the suggestion is TOML");
    let reads = |tool: &str| -> Vec<String> {
        parsed["tools"][tool]["effects"]
            .get("read")
            .and_then(toml::Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (ls, cat) = (reads("ls"), reads("cat"));
    assert!(cat.contains(&"/etc/hostname".to_owned()), "{text}");
    for broad in ["/", "/home", "/etc", "/usr/share", own.as_str()] {
        assert!(
            !ls.iter().chain(&cat).any(|p| p == broad),
            "{broad} proposed:\n{text}"
        );
    }
    for dir in ["/home", "/etc", "/usr/share", own.as_str()] {
        let said = format!(
            "# listed, not proposed (a read of a directory grants all beneath it): {dir}  #"
        );
        assert!(text.contains(&said), "{said} not in:\n{text}");
    }

    // Enforced as printed: `cat /etc/hostname` conforms, `ls /home` is refused.
    let enforced = tools.replace("enforce = \"shadow\"\n", "") + &text;
    std::fs::write(guardd.dir.join("policy.toml"), &enforced).expect("policy");
    guardd.restart();
    let out = output(guardd.exec("cat", &["file=/etc/hostname"]));
    assert_eq!(out.status.code(), Some(0), "{out:?}\n{enforced}");
    assert_eq!(
        out.stdout,
        std::fs::read("/etc/hostname").expect("hostname"),
        "{out:?}"
    );
    let row = super::escape::last_receipt(&guardd);
    assert_eq!(row["effects_observed"]["verdict"], "conformed", "{row:#}");
    for dir in ["/home", "/usr/share"] {
        let out = output(guardd.exec("ls", &[&format!("dir={dir}")]));
        assert_ne!(out.status.code(), Some(0), "{dir} read: {out:?}");
    }
}
