//! Telling the operator a call is held: `[approvals] notify` runs, confined, with the held
//! call's summary and digest on its stdin (the [`Held`] that `guardctl pending` shows, its
//! arguments redacted as the audit log keeps them: what the notifier is given leaves the host,
//! to chat or a pager, and a credential must not go with it), so it can be wired to chat or a
//! pager. The approver then decides on the call as it will run (`guardctl pending`). A
//! redaction can hide a recognised value only, never the shape of a command (`detect`). It runs
//! beside the hold, never instead of it: whatever becomes of the notifier is a `notified` audit
//! row, a failing one is also a log line, and the call stays held either way.

use std::sync::Arc;

use crate::{
    approval::{Held, input::Shown},
    audit::Row,
    daemon::Daemon,
    review::confined,
};

/// Runs the policy's notifier for `held`, whose arguments the log keeps as `redacted`, if it has
/// one, in the background.
pub fn spawn(daemon: &Arc<Daemon>, held: &Held, redacted: serde_json::Value) {
    let Some(helper) = daemon.policy().settings().notify.clone() else {
        return;
    };
    let daemon = Arc::clone(daemon);
    // A held input's text goes through no detector's redaction (an approver sees what runs):
    // the notifier, whose message leaves the host, is given its size and digest alone.
    let input = held.input.clone().map(|i| Shown {
        text: String::new(),
        truncated: i.bytes > 0,
        ..i
    });
    let held = Held {
        args: redacted,
        input,
        ..held.clone()
    };
    tokio::spawn(async move {
        let error = match serde_json::to_vec(&held) {
            Err(e) => Some(format!("serialising the summary: {e}")),
            Ok(input) => {
                let plan = helper.plan("notify", &[], &[]);
                let id = format!("{}-notify", held.call_id);
                match confined::run(&daemon, &id, &plan, input).await {
                    Ok(ran) => confined::failure(&ran, helper.timeout),
                    Err(e) => Some(format!("could not run: {e}")),
                }
            }
        };
        if let Some(e) = &error {
            tracing::warn!(call = %held.call_id, "the notifier of a held call failed: {e}");
        }
        let row = Row::Notified {
            call_id: held.call_id.clone(),
            tool: held.tool.clone(),
            error,
        };
        if let Err(e) = daemon.audit.record(&row).await {
            tracing::error!(call = %held.call_id, "audit log unavailable for the notified row: {e}");
        }
    });
}
