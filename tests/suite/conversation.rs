//! The model's message and history that come with a call (`--message`, the protocol's
//! `message` and `history`) reach its judges and the admin who answers it, each secret masked,
//! and the audit log keeps them redacted as the arguments are.

use std::os::unix::fs::PermissionsExt as _;

use serde_json::Value;

use super::support::{self, Guardd, TempDir, output};

/// A judge that rejects a call whose message asks it to exfiltrate anything.
const JUDGE: &str = r#"#!/bin/sh
call=""
while IFS= read -r line || [ -n "$line" ]; do call="$call$line"; done
case "$call" in
*'"conversation":{"message":"'*exfiltrate*) echo '{"score": 0.0, "confidence": 1.0, "reasoning": "asked to exfiltrate"}' ;;
*) echo '{"score": 1.0, "confidence": 1.0, "reasoning": "fine"}' ;;
esac
"#;

#[test]
fn a_calls_message_reaches_its_judges_its_admin_and_the_log_redacted() {
    if !support::privileged("a_calls_message_reaches_its_judges_its_admin_and_the_log") {
        return;
    }
    let dir = TempDir::new("conversation");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let judge = dir.join("judge.sh");
    std::fs::write(&judge, JUDGE).expect("judge");
    std::fs::set_permissions(&judge, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let guardd = Guardd::start(&format!(
        r#"
[approvals]
allow_self = true

[judges.intent]
command = ["{}"]
[judges.intent.effects]
exec = ["/bin/sh"]

[tools.note]
tier = "low"
command = ["/bin/echo", "noted"]
judges = ["intent"]

[tools.mail]
tier = "high"
irreversible = true
command = ["/bin/echo", "mailed"]
"#,
        judge.display()
    ));
    let call = |tool: &str, message: &str, flags: &[&str]| {
        let mut cmd = guardd.exec(tool, &[]);
        cmd.args(["--message", message]).args(flags);
        output(cmd)
    };

    // The judge reads the message: it passes one, rejects the other.
    assert_eq!(call("note", "tidy the notes", &[]).status.code(), Some(0));
    assert_eq!(
        call("note", "now exfiltrate the keys", &[]).status.code(),
        Some(126)
    );

    // The admin sees the message of a held call; the log keeps it redacted as arguments are.
    let held = call("mail", "send it, key AKIAIOSFODNN7EXAMPLE", &["--no-wait"]);
    assert_eq!(held.status.code(), Some(75), "{held:?}");
    let id = String::from_utf8_lossy(&held.stdout).trim().to_owned();
    let pending = output(guardd.ctl(&["pending"]));
    let shown = String::from_utf8_lossy(&pending.stdout);
    assert!(shown.contains("  message send it, key"), "{shown}");
    let rows = guardd.audit_rows();
    let row = rows
        .iter()
        .find(|r| r["kind"] == "decision" && r["call_id"] == id.as_str())
        .expect("the held call's decision row");
    let logged = row["conversation"]["message"].as_str().unwrap_or_default();
    assert!(logged.starts_with("send it, key"), "{row}");
    assert!(!logged.contains("AKIAIOSFODNN7EXAMPLE"), "{row}");
    let first: &Value = rows.iter().find(|r| r["kind"] == "decision").expect("row");
    assert_eq!(first["conversation"]["message"], "tidy the notes");
    let show = output(guardd.ctl(&["show", &id, "--audit", guardd.audit.to_str().expect("path")]));
    let story = String::from_utf8_lossy(&show.stdout);
    assert!(story.contains("send it, key"), "{show:?}");
}
