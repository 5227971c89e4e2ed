//! `guardctl show CALL_ID`: one call as the audit log tells it, for people (the decision, the
//! caller, the program, the sandbox, the receipt's effects and divergences, the review), or
//! with `--json` as one object.

use std::{path::Path, process::ExitCode};

use guard::{
    audit::{Finished, Row},
    call::{decision::DecisionRow, peer::Peer},
    receipt::{Receipt, Verdict},
    sandbox::Applied,
};
use serde::Serialize;
use serde_json::Value;

use crate::{
    history::CallRows,
    term::{printable, say_err},
};

/// `guardctl show CALL_ID`.
pub fn show(audit: &Path, call_id: &str, as_json: bool) -> ExitCode {
    let calls = match crate::history::calls_in(audit) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(call) = calls.into_iter().find(|c| c.call_id == call_id) else {
        say_err!("guardctl: no call {call_id} in {}", audit.display());
        return ExitCode::from(1);
    };
    if as_json {
        json(&call);
    } else {
        for (label, text) in human(&call) {
            // What a call chose (its arguments, paths, host names) and what a judge said are
            // shown escaped: raw, they could rewrite the operator's terminal.
            let line = format!("{label:<11} {}", printable(&text));
            println!("{}", line.trim_end());
        }
    }
    ExitCode::SUCCESS
}

/// The call as one pretty JSON object.
fn json(call: &CallRows) {
    #[derive(Serialize)]
    struct Shown<'a> {
        call_id: &'a str,
        tool: &'a str,
        peer: &'a Peer,
        args: &'a Value,
        /// The model's message and history the call came with, redacted.
        #[serde(skip_serializing_if = "Option::is_none")]
        conversation: Option<&'a Value>,
        decision: &'a DecisionRow,
        enforced: bool,
        /// The version of the policy that decided it.
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        launch: Option<&'a guard::audit::Launch>,
        sandbox: Option<&'a Applied>,
        effects_observed: Option<&'a Receipt>,
        exit: Option<&'a guard::sandbox::Outcome>,
        #[serde(skip_serializing_if = "Option::is_none")]
        killed: Option<&'a str>,
        error: Option<&'a str>,
        duration_ms: Option<f64>,
        /// Its hold, judges' verdicts, answers (and a first decision, when an approver
        /// modified the call).
        review: &'a [Row],
    }
    let f = call.finished.as_deref();
    let shown = Shown {
        call_id: &call.call_id,
        tool: &call.tool,
        peer: &call.peer,
        args: &call.args,
        conversation: call.conversation.as_ref(),
        decision: &call.decision,
        enforced: call.enforced,
        policy: call.policy.as_deref(),
        launch: f.and_then(|f| f.launch.as_ref()),
        sandbox: f.and_then(|f| f.sandbox.as_ref()),
        effects_observed: f.and_then(|f| f.effects_observed.as_ref()),
        exit: f.and_then(|f| f.exit.as_ref()),
        killed: f.and_then(|f| f.killed.as_deref()),
        error: f.and_then(|f| f.error.as_deref()),
        duration_ms: f.map(|f| f.duration_ms),
        review: &call.review,
    };
    match serde_json::to_string_pretty(&shown) {
        Ok(text) => println!("{text}"),
        Err(e) => say_err!("guardctl: {e}"),
    }
}

/// Labelled lines, not yet escaped.
type Lines = Vec<(&'static str, String)>;

/// The call for people: one labelled line per fact, in the order the call went.
fn human(call: &CallRows) -> Lines {
    let d = &call.decision;
    let p = &call.peer;
    let mut out: Lines = vec![
        (
            "call",
            format!("{} (tool {}) at {}", call.call_id, call.tool, call.ts),
        ),
        (
            "caller",
            format!("uid {} gid {} pid {}", p.uid, p.gid, p.pid),
        ),
        (
            "decision",
            format!("{} by {}: {}", d.decision, d.check_name, d.reason),
        ),
        ("args", call.args.to_string()),
    ];
    if let Some(c) = &call.conversation {
        if let Some(m) = c["message"].as_str() {
            out.push(("message", m.to_owned()));
        }
        for turn in c["history"].as_array().into_iter().flatten() {
            let (role, content) = (turn["role"].as_str(), turn["content"].as_str());
            let said = format!("{}: {}", role.unwrap_or("?"), content.unwrap_or_default());
            out.push(("history", said));
        }
    }
    if let Some(policy) = &call.policy {
        out.push(("policy", policy.clone()));
    }
    if !call.enforced {
        out.push(("enforced", "NO: the kernel layers did not hold it".into()));
    }
    match call.finished.as_deref() {
        Some(f) => finished(f, &mut out),
        None if d.decision == guard::call::decision::Decision::Allow => {
            out.push(("exit", "not recorded (running, or guardd stopped)".into()));
        }
        None => {}
    }
    if !call.review.is_empty() {
        out.push(("review", String::new()));
        out.extend(call.review.iter().map(review));
    }
    out
}

/// The program, the sandbox, the end and the receipt of a call that was carried out.
fn finished(f: &Finished, out: &mut Lines) {
    match &f.launch {
        Some(l) => {
            let program = l.program.as_deref().unwrap_or("-");
            let started = format!("{program} ({} args) pid {} at {}", l.args, l.pid, l.ts);
            out.push(("program", started));
        }
        None => out.push(("program", "did not start".into())),
    }
    if let Some(s) = &f.sandbox {
        sandbox(s, out);
    }
    let end = match (&f.exit, &f.error) {
        (Some(e), _) => {
            let signal = e.signal.map_or(String::new(), |s| format!(" (signal {s})"));
            let timed_out = if e.timed_out { ", timed out" } else { "" };
            format!("code {}{signal}{timed_out}", e.exit_code)
        }
        (None, Some(error)) => format!("not carried out: {error}"),
        (None, None) => "-".into(),
    };
    out.push(("exit", format!("{end} in {:.1} ms", f.duration_ms)));
    if let Some(killed) = &f.killed {
        out.push(("killed", killed.clone()));
    }
    if let Some(r) = &f.effects_observed {
        receipt(r, out);
    }
}

fn sandbox(s: &Applied, out: &mut Lines) {
    let landlock = serde_json::to_value(s.landlock_status).unwrap_or(Value::Null);
    out.push((
        "sandbox",
        format!(
            "user {} (uid {} gid {}); landlock ABI {} {}; seccomp {} ({} syscalls denied); \
             limits {}",
            s.user,
            s.uid,
            s.gid,
            s.landlock_abi,
            landlock.as_str().unwrap_or("?"),
            s.seccomp.as_str(),
            s.denied_count,
            s.limits_mode
        ),
    ));
    let skipped: Vec<String> = s
        .landlock_skipped
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    if !skipped.is_empty() {
        out.push(("", format!("no rule (missing): {}", skipped.join(", "))));
    }
    for (target, dir) in &s.landlock_widened {
        let (target, dir) = (target.display(), dir.display());
        out.push((
            "",
            format!("{target} does not exist: {dir} opened up for it"),
        ));
    }
}

/// What the kernel saw the call do, and each divergence with the layer that stopped it.
fn receipt(r: &Receipt, out: &mut Lines) {
    let verdict = match r.verdict {
        Verdict::Conformed => "conformed",
        Verdict::Diverged => "diverged",
    };
    let stopped = if r.stopped { ", stopped by guard" } else { "" };
    let processes = r.processes;
    out.push((
        "receipt",
        format!("{verdict}{stopped}; processes: {processes}"),
    ));
    let list = |label, items: Vec<String>, out: &mut Lines| {
        if !items.is_empty() {
            out.push((label, items.join(", ")));
        }
    };
    list("  execs", r.execs.clone(), out);
    let connects = r.connects.iter().map(|c| {
        let allowed = if c.allowed { "allowed" } else { "denied" };
        format!("{}:{}/{} {allowed}", c.addr, c.port, c.proto.as_str())
    });
    list("  connects", connects.collect(), out);
    let sockets = r.sockets.iter().map(|s| format!("{}/{}", s.family, s.ty));
    list("  sockets", sockets.collect(), out);
    let dns = r.dns.iter().map(|q| {
        let answer = if q.approved { "answered" } else { "refused" };
        format!("{} {} {answer}", q.name, q.qtype)
    });
    list("  dns", dns.collect(), out);
    if let Some(files) = &r.files {
        let paths = files.paths.iter().map(|f| {
            let access = serde_json::to_value(f.access).unwrap_or(Value::Null);
            format!(
                "{} ({} {})",
                f.path,
                access.as_str().unwrap_or("?"),
                f.result
            )
        });
        let paths: Vec<String> = paths.collect();
        out.push((
            "  files",
            format!("{} opened: {}", files.opened, paths.join(", ")),
        ));
    }
    list("  counts", counts(r), out);
    if !r.syscalls.is_empty() {
        out.push((
            "  syscalls",
            format!("{} distinct (--json lists them)", r.syscalls.len()),
        ));
    }
    let v = &r.verified;
    out.push(("  verified", format!("exec: {}", v.exec)));
    out.push(("", format!("connect: {}", v.connect)));
    out.push(("", format!("write: {}", v.write)));
    out.push(("", format!("refusals: {}", v.refusals)));
    if !v.dns.is_empty() {
        out.push(("", format!("dns: {}", v.dns)));
    }
    let all = r.denied + r.let_through;
    if all > 0 {
        let more = all.saturating_sub(r.divergences.len() as u64);
        let more = if more > 0 {
            format!(" ({more} more not listed)")
        } else {
            String::new()
        };
        let shadow = if r.let_through > 0 {
            format!(", {} let through in shadow", r.let_through)
        } else {
            String::new()
        };
        out.push(("divergences", format!("{all}{more}{shadow}")));
        out.extend(r.divergences.iter().map(|d| ("", d.describe())));
    }
}

/// A receipt's counts that are not zero, each as `what N`.
fn counts(r: &Receipt) -> Vec<String> {
    let counts = [
        ("writes outside", r.writes_outside),
        ("packets dropped out", r.outbound_dropped),
        ("packets dropped in", r.inbound_dropped),
        ("seccomp kills", u64::from(r.seccomp_kills)),
        ("connects to guardd", u64::from(r.guardd_connects)),
        ("events lost", r.events_lost),
        ("dns not listed", r.dns_unlisted),
        ("dns refused not listed", r.dns_unlisted_refused),
        ("dns unreadable", r.dns_unreadable),
        ("dns not judged", r.dns_unjudged),
    ];
    counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(what, n)| format!("{what} {n}"))
        .collect()
}

/// One row of a call's review, as a line.
fn review(row: &Row) -> (&'static str, String) {
    match row {
        Row::Held {
            decision,
            timeout_s,
            digest,
            ..
        } => (
            "  held",
            format!("{decision} for {timeout_s} s, digest {digest}"),
        ),
        // As `events` tells them.
        Row::Judged(_) | Row::Approval { .. } => {
            let record = guard::audit::Record {
                seq: 0,
                ts: String::new(),
                row: row.clone(),
            };
            let events = crate::history::events_of(record);
            let text = events.first().map(crate::live::detail).unwrap_or_default();
            let label = if matches!(row, Row::Judged(_)) {
                "  judged"
            } else {
                "  approval"
            };
            (label, text)
        }
        Row::Notified { error, .. } => match error {
            Some(e) => ("  notified", format!("failed: {e}")),
            None => ("  notified", "ok".into()),
        },
        Row::Decision { decision, .. } => (
            "  decided",
            format!(
                "{} by {}: {} (before an approver's modify)",
                decision.decision, decision.check_name, decision.reason
            ),
        ),
        _ => ("", String::new()),
    }
}
