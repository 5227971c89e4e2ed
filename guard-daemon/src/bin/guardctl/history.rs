//! What guard did, read back from the audit log: `guardctl events` (without `--follow`) and
//! `guardctl calls`, and the calls `guardctl show` shows.

use std::{path::Path, process::ExitCode, time::Duration};

use guard::{
    audit::{Finished, Record, Row},
    bus::{Event, What},
    call::{
        decision::{Decision, DecisionRow},
        peer::Peer,
    },
    receipt::Verdict,
};
use serde::Serialize;
use serde_json::Value;

use crate::{
    print_json,
    term::{say, say_err},
};

/// Every row of the log, typed, or the exit code after saying what is wrong.
fn records(audit: &Path) -> Result<Vec<Record>, ExitCode> {
    let fail = |e: &dyn std::fmt::Display| {
        say_err!("guardctl: audit log {}: {e}", audit.display());
        ExitCode::from(2)
    };
    let rows = guard::audit::read_rows(audit).map_err(|e| fail(&e))?;
    rows.map(|row| {
        let row = row.map_err(|e| fail(&e))?;
        Record::from_map(row).map_err(|e| fail(&e))
    })
    .collect()
}

/// The events a row stands for, as a subscriber would have seen them.
/// A decision row's event.
fn decided(row: guard::call::decision::DecisionRow, uid: u32) -> What {
    What::Decision {
        agent: row.metadata.agent,
        decision: row.decision,
        reason: row.reason,
        uid,
        would_block: row.metadata.would_block,
    }
}

pub fn events_of(record: Record) -> Vec<Event> {
    let ts = record.ts;
    match record.row {
        Row::Finished(f) => finished_events(&ts, *f),
        Row::Reload {
            by, tools, error, ..
        } => vec![Event {
            ts,
            call_id: None,
            tool: None,
            enforce: None,
            what: What::Reload { tools, error, by },
        }],
        Row::Checked {
            peer,
            tool,
            decision,
            ..
        } => checked(ts, tool, *decision, peer.uid),
        row => answer_events(ts, row),
    }
}

/// The event of a row about a call's decision, hold, answer or judgement.
fn answer_events(ts: String, row: Row) -> Vec<Event> {
    let of = |call_id: String, tool: String, what: What| Event {
        ts: ts.clone(),
        call_id: Some(call_id),
        tool: Some(tool),
        enforce: None,
        what,
    };
    match row {
        Row::Decision {
            call_id,
            peer,
            tool,
            decision,
            ..
        } => {
            let enforce = decision.metadata.enforce;
            let mut event = of(call_id, tool, decided(*decision, peer.uid));
            event.enforce = enforce;
            vec![event]
        }
        Row::Held {
            call_id,
            tool,
            decision,
            reason,
            uid,
            timeout_s,
            ..
        } => {
            let what = What::Held {
                decision,
                reason,
                uid,
                timeout_s,
            };
            vec![of(call_id, tool, what)]
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
        } => {
            let approver = approver.map(|who| match outcome {
                Some(o) => format!("{who} ({o})"),
                None => who,
            });
            let what = What::Approval {
                approved,
                by,
                reason,
                approver,
            };
            vec![of(call_id, tool, what)]
        }
        Row::Judged(j) => {
            let what = What::Judged {
                judge: j.judge,
                allowed: j.allowed,
                reason: j.reason,
            };
            vec![of(j.call_id, j.tool, what)]
        }
        _ => Vec::new(),
    }
}

/// The event of a `check`: none when it allowed, since what it allowed follows; one refused or
/// held is a probe's trace, or an agent stopped before acting.
fn checked(ts: String, tool: String, decision: DecisionRow, uid: u32) -> Vec<Event> {
    if decision.decision == Decision::Allow {
        return Vec::new();
    }
    vec![Event {
        ts,
        call_id: None,
        tool: Some(tool),
        enforce: None,
        what: decided(decision, uid),
    }]
}

/// The events of a call's finished row, written at `ts`: its launch (at the time it started),
/// then, at its end, why guardd killed it, each divergence its receipt records, and its exit.
fn finished_events(ts: &str, f: Finished) -> Vec<Event> {
    let of = |ts: &str, what: What| Event {
        ts: ts.to_owned(),
        call_id: Some(f.call_id.clone()),
        tool: Some(f.tool.clone()),
        enforce: f.enforce,
        what,
    };
    let mut events = Vec::new();
    if let Some(launch) = &f.launch {
        events.push(of(&launch.ts, launch.event()));
    }
    if let Some(reason) = &f.killed {
        let reason = reason.clone();
        events.push(of(ts, What::Kill { reason }));
    }
    let receipt = f.effects_observed.as_ref();
    let divergences = receipt.map_or(&[][..], |r| r.divergences.as_slice());
    for d in divergences {
        events.push(of(ts, What::Divergence(d.clone())));
    }
    let what = What::Exit {
        code: f.exit.as_ref().map(|e| e.exit_code),
        diverged: receipt.is_some_and(|r| r.verdict == Verdict::Diverged),
        divergence: divergences.first().cloned().map(Box::new),
        error: f.error.clone(),
        duration_ms: f.duration_ms,
    };
    events.push(of(ts, what));
    events
}

/// Recent history: events rebuilt from the audit log's rows, those since `since` ago, in the
/// order they happened (a launch is told by the row written when its call ended).
pub fn events(audit: &Path, since: Option<Duration>, print: impl Fn(&Event)) -> ExitCode {
    let cutoff = since.map(|d| guard::audit::ts::format(std::time::SystemTime::now() - d));
    let records = match records(audit) {
        Ok(r) => r,
        Err(code) => return code,
    };
    let mut events: Vec<Event> = records.into_iter().flat_map(events_of).collect();
    // Stable: the events of one time keep the order of their rows. The log's times are all
    // of one width (RFC 3339, six fractional digits, UTC), so they sort as text.
    events.sort_by(|a, b| a.ts.cmp(&b.ts));
    events
        .iter()
        .filter(|e| cutoff.as_deref().is_none_or(|c| e.ts.as_str() >= c))
        .for_each(print);
    ExitCode::SUCCESS
}

/// One call of the log: its decision row and, once it ended, its finished row.
pub struct CallRows {
    pub ts: String,
    pub call_id: String,
    pub tool: String,
    pub peer: Peer,
    pub args: Value,
    pub decision: DecisionRow,
    pub enforced: bool,
    /// The version of the policy that decided it.
    pub policy: Option<String>,
    /// The model's message and history it came with, redacted.
    pub conversation: Option<Value>,
    pub finished: Option<Box<Finished>>,
    /// Its hold, its judges' verdicts, the answers to it and its notifier's run, in order.
    pub review: Vec<Row>,
}

/// Every call in the audit log, in order.
pub fn calls_in(audit: &Path) -> Result<Vec<CallRows>, ExitCode> {
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
                conversation,
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
                        conversation: call.conversation.clone(),
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
                    conversation,
                    finished: None,
                    review: Vec::new(),
                });
            }
            Row::Finished(f) => {
                if let Some(&i) = index.get(&f.call_id) {
                    calls[i].finished = Some(f);
                }
            }
            row @ (Row::Approval { .. }
            | Row::Judged(_)
            | Row::Notified { .. }
            | Row::Held { .. }) => {
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
    /// The policy's agent the caller was (`[agents]`).
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a str>,
    decision: Decision,
    exit_code: Option<i32>,
    verdict: Option<Verdict>,
    /// Its end was never recorded: the guardd that ran it died (the next one said so).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    interrupted: bool,
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
        let status = match crate::ask::ask_status(&socket) {
            Ok(s) => s,
            Err(code) => return code,
        };
        for call in &status.running {
            if as_json {
                print_json(call);
            } else {
                say!(
                    "{:<18} {:<16} pid {:<8} since {}",
                    call.call_id,
                    call.tool,
                    call.pid,
                    call.started
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
            agent: call.decision.metadata.agent.as_deref(),
            decision: call.decision.decision,
            exit_code: finished.and_then(|f| f.exit.as_ref()).map(|e| e.exit_code),
            verdict: finished
                .and_then(|f| f.effects_observed.as_ref())
                .map(|r| r.verdict),
            interrupted: finished.is_some_and(|f| f.interrupted.is_some()),
        };
        if as_json {
            print_json(&summary);
            continue;
        }
        let verdict = match summary.verdict {
            Some(Verdict::Conformed) => "conformed",
            Some(Verdict::Diverged) => "diverged",
            None if summary.interrupted => "interrupted",
            None => "-",
        };
        let who = match summary.agent {
            Some(agent) => format!("{agent} (uid {})", summary.uid),
            None => format!("uid {}", summary.uid),
        };
        say!(
            "{} {:<18} {:<16} {who:<10} {:<10} exit {:<4} {verdict}",
            summary.ts,
            summary.call_id,
            summary.tool,
            summary.decision.as_str(),
            summary.exit_code.map_or("-".to_owned(), |c| c.to_string()),
        );
    }
    ExitCode::SUCCESS
}
