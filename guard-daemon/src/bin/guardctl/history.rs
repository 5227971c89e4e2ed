//! What guard did, read back from the audit log: `guardctl events` (without `--follow`),
//! `guardctl calls` and `guardctl show`.

use std::{path::Path, process::ExitCode, time::Duration};

use guard::{
    access::Peer,
    audit::{Finished, Record, Row},
    bus::{Event, What},
    decision::{Decision, DecisionRow},
    receipt::Verdict,
};
use serde::Serialize;
use serde_json::Value;

use crate::print_json;

/// Every row of the log, typed, or the exit code after saying what is wrong.
fn records(audit: &Path) -> Result<Vec<Record>, ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        eprintln!("guardctl: audit log {}: {e}", audit.display());
        ExitCode::from(2)
    };
    let rows = guard::audit::read_rows(audit).map_err(|e| fail(&e))?;
    rows.map(|row| {
        let row = row.map_err(|e| fail(&e))?;
        Record::from_map(row).map_err(|e| fail(&e))
    })
    .collect()
}

/// The event a row stands for, as a subscriber would have seen it.
fn event_of(record: Record) -> Option<Event> {
    let (call_id, tool, what) = match record.row {
        Row::Decision {
            call_id,
            peer,
            tool,
            decision,
            ..
        } => {
            let what = What::Decision {
                decision: decision.decision,
                reason: decision.reason,
                uid: peer.uid,
            };
            (call_id, tool, what)
        }
        Row::Approval {
            call_id,
            tool,
            approved,
            by,
            reason,
            approver,
            outcome,
            ..
        } => (
            call_id,
            tool,
            What::Approval {
                approved,
                by,
                reason,
                approver: approver.map(|who| match outcome {
                    Some(o) => format!("{who} ({o})"),
                    None => who,
                }),
            },
        ),
        Row::Finished(f) => {
            let what = What::Exit {
                code: f.exit.as_ref().map(|e| e.exit_code),
                diverged: diverged(&f),
                divergence: None,
                error: f.error,
                duration_ms: f.duration_ms,
            };
            (f.call_id, f.tool, what)
        }
        Row::Judged(j) => {
            let what = What::Judged {
                judge: j.judge,
                allowed: j.allowed,
                reason: j.reason,
            };
            (j.call_id, j.tool, what)
        }
        Row::Notified { .. }
        | Row::Held { .. }
        | Row::Session { .. }
        | Row::Reload { .. }
        | Row::Pruned { .. }
        | Row::Other => return None,
    };
    Some(Event {
        ts: record.ts,
        call_id: Some(call_id),
        tool: Some(tool),
        what,
    })
}

fn diverged(f: &Finished) -> bool {
    f.effects_observed
        .as_ref()
        .is_some_and(|r| r.verdict == Verdict::Diverged)
}

/// Recent history: events rebuilt from the audit log's rows, those since `since` ago.
pub fn events(audit: &Path, since: Option<Duration>, print: impl Fn(&Event)) -> ExitCode {
    let cutoff = since.map(|d| guard::audit::ts::format(std::time::SystemTime::now() - d));
    let records = match records(audit) {
        Ok(r) => r,
        Err(code) => return code,
    };
    records
        .into_iter()
        .filter(|r| cutoff.as_deref().is_none_or(|c| r.ts.as_str() >= c))
        .filter_map(event_of)
        .for_each(|event| print(&event));
    ExitCode::SUCCESS
}

/// One call of the log: its decision row and, once it ended, its finished row.
struct CallRows {
    ts: String,
    call_id: String,
    tool: String,
    peer: Peer,
    args: Value,
    decision: DecisionRow,
    enforced: bool,
    /// The version of the policy that decided it.
    policy: Option<String>,
    finished: Option<Box<Finished>>,
    /// Its judges' verdicts, the answers to it and its notifier's run, in order.
    review: Vec<Row>,
}

/// Every call in the audit log, in order.
fn calls_in(audit: &Path) -> Result<Vec<CallRows>, ExitCode> {
    let mut calls: Vec<CallRows> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for record in records(audit)? {
        match record.row {
            Row::Decision {
                call_id,
                peer,
                tool,
                args,
                decision,
                enforced,
                policy,
            } => {
                if let Some(&i) = index.get(&call_id) {
                    // Its arguments decided again (an approver's modify): the later decision is
                    // the one the call ran under; the first stays in its review.
                    let call: &mut CallRows = &mut calls[i];
                    let first = Row::Decision {
                        call_id,
                        peer: call.peer.clone(),
                        tool: call.tool.clone(),
                        args: std::mem::replace(&mut call.args, args),
                        decision: Box::new(std::mem::replace(&mut call.decision, *decision)),
                        enforced: call.enforced,
                        policy: std::mem::replace(&mut call.policy, policy),
                    };
                    call.review.push(first);
                    continue;
                }
                index.insert(call_id.clone(), calls.len());
                calls.push(CallRows {
                    ts: record.ts,
                    call_id,
                    tool,
                    peer,
                    args,
                    decision: *decision,
                    enforced,
                    policy,
                    finished: None,
                    review: Vec::new(),
                });
            }
            Row::Finished(f) => {
                if let Some(&i) = index.get(&f.call_id) {
                    calls[i].finished = Some(f);
                }
            }
            row @ (Row::Approval { .. } | Row::Judged(_) | Row::Notified { .. }) => {
                if let Some(&i) = row.call_id().and_then(|id| index.get(id)) {
                    calls[i].review.push(row);
                }
            }
            _ => {}
        }
    }
    Ok(calls)
}

/// A line of `guardctl calls`.
#[derive(Serialize)]
struct Summary<'a> {
    call_id: &'a str,
    ts: &'a str,
    tool: &'a str,
    uid: u32,
    decision: Decision,
    exit_code: Option<i32>,
    verdict: Option<Verdict>,
}

/// `guardctl calls`: recent calls from the audit log, or with `--running` those running now.
pub fn calls(
    socket: Option<std::path::PathBuf>,
    audit: &Path,
    running: bool,
    as_json: bool,
) -> ExitCode {
    if running {
        let socket = guard::client::socket_path(socket);
        let status = match crate::live::ask_status(&socket) {
            Ok(s) => s,
            Err(code) => return code,
        };
        for call in &status.running {
            if as_json {
                print_json(call);
            } else {
                println!(
                    "{:<18} {:<16} pid {:<8} since {}",
                    call.call_id, call.tool, call.pid, call.started
                );
            }
        }
        return ExitCode::SUCCESS;
    }
    let calls = match calls_in(audit) {
        Ok(c) => c,
        Err(code) => return code,
    };
    for call in &calls {
        let finished = call.finished.as_deref();
        let summary = Summary {
            call_id: &call.call_id,
            ts: &call.ts,
            tool: &call.tool,
            uid: call.peer.uid,
            decision: call.decision.decision,
            exit_code: finished.and_then(|f| f.exit.as_ref()).map(|e| e.exit_code),
            verdict: finished
                .and_then(|f| f.effects_observed.as_ref())
                .map(|r| r.verdict),
        };
        if as_json {
            print_json(&summary);
            continue;
        }
        let verdict = match summary.verdict {
            Some(Verdict::Conformed) => "conformed",
            Some(Verdict::Diverged) => "diverged",
            None => "-",
        };
        println!(
            "{} {:<18} {:<16} uid {:<6} {:<10} exit {:<4} {verdict}",
            summary.ts,
            summary.call_id,
            summary.tool,
            summary.uid,
            summary.decision,
            summary.exit_code.map_or("-".to_owned(), |c| c.to_string()),
        );
    }
    ExitCode::SUCCESS
}

/// `guardctl show CALL_ID`: one call's decision, sandbox and receipt.
pub fn show(audit: &Path, call_id: &str) -> ExitCode {
    let calls = match calls_in(audit) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(call) = calls.into_iter().find(|c| c.call_id == call_id) else {
        eprintln!("guardctl: no call {call_id} in {}", audit.display());
        return ExitCode::from(1);
    };
    #[derive(Serialize)]
    struct Shown<'a> {
        call_id: &'a str,
        tool: &'a str,
        peer: &'a Peer,
        args: &'a Value,
        decision: &'a DecisionRow,
        enforced: bool,
        /// The version of the policy that decided it.
        #[serde(skip_serializing_if = "Option::is_none")]
        policy: Option<&'a str>,
        sandbox: Option<&'a guard::sandbox::Applied>,
        effects_observed: Option<&'a guard::receipt::Receipt>,
        exit: Option<&'a guard::sandbox::Outcome>,
        error: Option<&'a str>,
        duration_ms: Option<f64>,
        /// Judges' verdicts, answers (and a first decision, when an approver modified the call).
        review: &'a [Row],
    }
    let f = call.finished.as_deref();
    let shown = Shown {
        call_id,
        tool: &call.tool,
        peer: &call.peer,
        args: &call.args,
        decision: &call.decision,
        enforced: call.enforced,
        policy: call.policy.as_deref(),
        sandbox: f.and_then(|f| f.sandbox.as_ref()),
        effects_observed: f.and_then(|f| f.effects_observed.as_ref()),
        exit: f.and_then(|f| f.exit.as_ref()),
        error: f.and_then(|f| f.error.as_deref()),
        duration_ms: f.map(|f| f.duration_ms),
        review: &call.review,
    };
    match serde_json::to_string_pretty(&shown) {
        Ok(text) => println!("{text}"),
        Err(e) => eprintln!("guardctl: {e}"),
    }
    ExitCode::SUCCESS
}
