//! Closing the story of the calls a guardd that died left open: at the start, before any call
//! is served, every call whose decision let it run and whose end the log never recorded gets a
//! `finished` row that says it was interrupted, and what is known of its end (the processes
//! its cgroup still had, killed at the sweep). Without it, a crash left `allow` rows with no
//! end, and `guardctl calls` showed those calls running forever. A held call whose record is
//! refused at the start (edited, truncated) or gone gets its answer too: refused, and why.
//!
//! The rows read are those of the log's newest files ([`FILES_READ`]): a call open across more
//! rotations than that is found by its cgroup alone, and its row says its decision was not read.

use std::collections::{HashMap, HashSet};

use super::Daemon;
use crate::{
    audit::{Finished, Interrupted, Row, read_recent},
    call::stages::Stages,
    sandbox::cgroup::Swept,
};

/// The newest files of the log read at the start: the active one and the one rotated last.
const FILES_READ: usize = 2;

/// What a guardd that died here left, as the start found it.
#[derive(Debug, Default)]
pub(crate) struct Left {
    /// The call cgroups it left, swept.
    pub swept: Vec<Swept>,
    /// Held-call records that are no valid record (file name, why), set aside.
    pub refused: Vec<(String, String)>,
}

/// A call the log left open.
#[derive(Debug, PartialEq)]
struct Open {
    call_id: String,
    tool: String,
    enforced: bool,
    /// In shadow, as its decision row says.
    shadow: bool,
}

impl Daemon {
    /// Writes a `finished` row for every call the log left open (see the module); how many.
    pub async fn close_left_open(&self) -> usize {
        let left = std::mem::take(&mut *self.left.lock().unwrap_or_else(|e| e.into_inner()));
        let held: HashSet<String> = self
            .approvals
            .list()
            .into_iter()
            .map(|h| h.call_id)
            .collect();
        // A refused record's call is answered for that reason, not as one gone.
        let refused: Vec<(String, String)> = left
            .refused
            .into_iter()
            .map(|(name, why)| {
                let id = name.strip_suffix(".json").unwrap_or(&name).to_owned();
                (
                    id,
                    format!("its held record {name} was refused at guardd's start: {why}"),
                )
            })
            .collect();
        let mut accounted = held;
        accounted.extend(refused.iter().map(|(id, _)| id.clone()));
        // Read on this thread: nothing is served yet, and a blocking thread started for it
        // would linger in the pool for no other use.
        let found = open_calls(&self.options.audit, &accounted).unwrap_or_else(|e| {
            tracing::error!("reading the audit log for calls left open: {e}");
            Found::default()
        });
        let mut rows: Vec<Row> = ends(found.open, left.swept)
            .into_iter()
            .map(|f| Row::Finished(Box::new(f)))
            .collect();
        let gone = found.gone.into_iter().map(|(id, tool)| {
            let why = "its held record was gone at guardd's start".to_owned();
            (id, tool, why)
        });
        let refused = refused
            .into_iter()
            .map(|(id, why)| (id, "?".to_owned(), why));
        rows.extend(
            gone.chain(refused)
                .map(|(call_id, tool, why)| Row::Approval {
                    call_id,
                    tool,
                    approved: false,
                    by: None,
                    reason: Some(why),
                    digest: None,
                    approver: None,
                    outcome: None,
                    modified_args: None,
                }),
        );
        let mut written = 0;
        for row in &rows {
            match self.audit.record(row).await {
                Ok(_) => written += 1,
                Err(e) => tracing::error!("recording what a guardd that died left: {e}"),
            }
        }
        if written > 0 {
            tracing::warn!(
                rows = written,
                "recorded the calls a guardd that died left open"
            );
        }
        written
    }
}

/// The `finished` rows of the calls left `open` and of those whose cgroups were `swept`.
fn ends(open: Vec<Open>, swept: Vec<Swept>) -> Vec<Finished> {
    let mut killed: HashMap<String, usize> = swept
        .into_iter()
        .filter_map(|s| Some((s.name.strip_prefix("call-")?.to_owned(), s.processes)))
        .collect();
    let mut rows: Vec<Finished> = open
        .into_iter()
        .map(|o| {
            let processes = killed.remove(&o.call_id);
            interrupted(o, processes, false)
        })
        .collect();
    // Cgroups of calls whose decision lies in older files.
    rows.extend(killed.into_iter().map(|(call_id, n)| {
        let call = Open {
            call_id,
            tool: "?".to_owned(),
            enforced: true,
            shadow: false,
        };
        interrupted(call, Some(n), true)
    }));
    rows
}

/// The `finished` row of an interrupted call.
fn interrupted(call: Open, processes: Option<usize>, decision_not_read: bool) -> Finished {
    Finished {
        call_id: call.call_id,
        tool: call.tool,
        sandbox: None,
        effects_observed: None,
        exit: None,
        error: Some(
            "interrupted: the guardd that ran it ended before its end was recorded; what it \
             did is not known"
                .to_owned(),
        ),
        duration_ms: 0.0,
        timings_us: Stages::default(),
        enforced: call.enforced,
        enforce: call.shadow.then_some(crate::call::plan::Enforce::Shadow),
        launch: None,
        killed: processes.map(|n| format!("at the next guardd's start ({n} processes left)")),
        interrupted: Some(Interrupted {
            processes_killed: processes,
            decision_not_read,
        }),
    }
}

/// What the newest files of the log tell of calls left open.
#[derive(Debug, Default)]
struct Found {
    /// Decided to run (allowed, or approved after a hold) and never finished.
    open: Vec<Open>,
    /// Held, never answered, and with no record left (call id, tool).
    gone: Vec<(String, String)>,
}

/// The calls the newest files of the log at `audit` left open, less those `accounted` for
/// otherwise (held still, or their record refused).
fn open_calls(
    audit: &std::path::Path,
    accounted: &HashSet<String>,
) -> Result<Found, crate::audit::VerifyError> {
    let mut decided: Vec<Open> = Vec::new();
    let mut runs: HashMap<String, bool> = HashMap::new();
    let mut ended: HashSet<String> = HashSet::new();
    let mut held: Vec<(String, String)> = Vec::new();
    let mut answered: HashSet<String> = HashSet::new();
    for row in read_recent(audit, FILES_READ)? {
        // Read by its fields alone: a row this build cannot read whole still tells an end.
        let Ok(row) = row else { continue };
        let text = |key: &str| row.get(key).and_then(serde_json::Value::as_str);
        let Some(call_id) = text("call_id").map(str::to_owned) else {
            continue;
        };
        match text("kind") {
            Some("decision") => {
                if !runs.contains_key(&call_id) {
                    decided.push(Open {
                        call_id: call_id.clone(),
                        tool: text("tool").unwrap_or("?").to_owned(),
                        enforced: row.get("enforced").and_then(serde_json::Value::as_bool)
                            != Some(false),
                        shadow: row
                            .get("decision")
                            .and_then(|d| d.pointer("/metadata/enforce"))
                            == Some(&serde_json::Value::from("shadow")),
                    });
                }
                let allowed = row["decision"]["decision"] == "allow";
                runs.insert(call_id, allowed);
            }
            Some("held") => held.push((call_id, text("tool").unwrap_or("?").to_owned())),
            // The last answer to a held call says whether it was to run.
            Some("approval") => {
                let approved = row.get("approved").and_then(serde_json::Value::as_bool);
                runs.insert(call_id.clone(), approved == Some(true));
                answered.insert(call_id);
            }
            Some("finished") => {
                ended.insert(call_id);
            }
            _ => {}
        }
    }
    decided.retain(|c| {
        runs.get(&c.call_id) == Some(&true)
            && !ended.contains(&c.call_id)
            && !accounted.contains(&c.call_id)
    });
    held.retain(|(id, _)| !answered.contains(id) && !accounted.contains(id));
    Ok(Found {
        open: decided,
        gone: held,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::{AuditLog, Options, testdir::TestDir};

    fn decision(call_id: &str, decision: &str) -> serde_json::Map<String, serde_json::Value> {
        let row = serde_json::json!({
            "kind": "decision", "call_id": call_id, "tool": "t", "enforced": true,
            "decision": {"decision": decision},
        });
        row.as_object().cloned().unwrap_or_default()
    }

    #[tokio::test]
    async fn the_calls_left_open_are_those_allowed_or_approved_and_never_finished() {
        let dir = TestDir::new("left-open");
        let path = dir.path().join("audit.jsonl");
        let log = AuditLog::open(Options::new(&path)).expect("open");
        for (id, d) in [("ran", "allow"), ("open", "allow"), ("blocked", "block")] {
            log.append(decision(id, d)).await.expect("append");
        }
        for (id, d) in [
            ("approved", "escalate"),
            ("refused", "escalate"),
            ("held", "escalate"),
        ] {
            log.append(decision(id, d)).await.expect("append");
        }
        let approval = |id: &str, approved: bool| {
            serde_json::json!({"kind": "approval", "call_id": id, "tool": "t",
                "approved": approved, "by": 0, "reason": null})
            .as_object()
            .cloned()
            .unwrap_or_default()
        };
        log.append(approval("approved", true))
            .await
            .expect("append");
        log.append(approval("refused", false))
            .await
            .expect("append");
        let finished = serde_json::json!({"kind": "finished", "call_id": "ran"});
        log.append(finished.as_object().cloned().unwrap_or_default())
            .await
            .expect("append");
        let held_row = |id: &str| {
            serde_json::json!({"kind": "held", "call_id": id, "tool": "t"})
                .as_object()
                .cloned()
                .unwrap_or_default()
        };
        log.append(held_row("held")).await.expect("append");
        log.append(held_row("vanished")).await.expect("append");
        drop(log);
        let held = HashSet::from(["held".to_owned()]);
        let found = open_calls(&path, &held).expect("read");
        let ids: Vec<&str> = found.open.iter().map(|o| o.call_id.as_str()).collect();
        assert_eq!(ids, ["open", "approved"]);
        assert_eq!(found.gone, [("vanished".to_owned(), "t".to_owned())]);
    }
}
