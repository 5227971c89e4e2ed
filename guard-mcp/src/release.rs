//! The release of held calls, as the MCP quarantine proposal has it: a held call is answered
//! at once with a generic text and its id, and the model fetches its result later with the
//! `retrieve_quarantined_tool_response` tool, which runs the call once a human approved it
//! (guardd's `resume` in `release` mode). guardd decides and runs; guard-mcp only remembers
//! which calls its session has held, watches for their answers (`resume` in `watch` mode) and
//! tells the client when one is ready (`notifications/tools/list_changed`, the release tool's
//! description naming the calls).
//!
//! The texts the model reads are generic on purpose: a reason tells a model what to change to
//! get past the policy, and an admin's text in a tool result is an injection vector.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use guard::protocol::{
    self, ExecReply, Request, ResumeMode, ResumeRequest,
    reply::{CallDecision, Hold},
};
use rmcp::{
    Peer, RoleServer,
    model::{CallToolResult, ContentBlock, JsonObject, Tool, ToolAnnotations},
};
use serde_json::json;
use tokio::io::{AsyncBufReadExt as _, BufReader};

use crate::call::{self, OnHold, Ran};

/// The release tool's name, the proposal's.
pub const TOOL: &str = "retrieve_quarantined_tool_response";

/// How many ran calls' results are kept for a second retrieval.
const KEPT_RESULTS: usize = 8;
/// How long a watcher waits before trying guardd again.
const RETRY: Duration = Duration::from_secs(1);

/// Where a held call of this session stands, as guard-mcp last heard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Held,
    Approved,
    NotApproved,
    Ran,
}

impl State {
    fn says(self) -> &'static str {
        match self {
            Self::Held => "held for review",
            Self::Approved => "approved: ready to release",
            Self::NotApproved => "not approved",
            Self::Ran => "ran: its result can be retrieved again",
        }
    }
}

/// A held call of this session: its tool, where it stands, and, once it ran, its result.
struct Call {
    tool: String,
    state: State,
    result: Option<CallToolResult>,
}

/// The held calls of one MCP session, and how to reach guardd and the client.
pub struct Releases {
    socket: Arc<PathBuf>,
    calls: Mutex<BTreeMap<String, Call>>,
    client: Mutex<Option<Peer<RoleServer>>>,
}

impl Releases {
    pub fn new(socket: Arc<PathBuf>) -> Self {
        Self {
            socket,
            calls: Mutex::default(),
            client: Mutex::default(),
        }
    }

    /// The client to tell when a held call is answered (known once the session is up).
    pub fn tell(&self, peer: Peer<RoleServer>) {
        *self.client.lock().unwrap_or_else(PoisonError::into_inner) = Some(peer);
    }

    /// The release tool, its description naming this session's held calls as they stand.
    pub fn tool(&self) -> Tool {
        let mut description = String::from(
            "Returns the result of a tool call that guard held for a human's review, given the \
             call_id the held call answered with. Once the call is approved it runs, and its \
             result is returned; while it waits, or once it is refused, this says so and \
             nothing runs. Calling the held tool again makes a new call that is held again: \
             retrieve this one instead.",
        );
        let calls = self.lock();
        if !calls.is_empty() {
            description.push_str(" Calls of this session:");
            for (id, call) in calls.iter() {
                description.push_str(&format!(" {id} ({}): {};", call.tool, call.state.says()));
            }
        }
        let schema = json!({
            "type": "object",
            "properties": {"call_id": {
                "type": "string",
                "description": "the call_id of the held call, as its answer gave it"
            }},
            "required": ["call_id"],
            "additionalProperties": false
        });
        let serde_json::Value::Object(schema) = schema else {
            unreachable!("a JSON object literal")
        };
        let mut tool = Tool::new(TOOL, description, Arc::new(schema));
        tool.output_schema = Some(Arc::new(crate::schema::output_schema()));
        // It runs whatever call was held: nothing it may do is ruled out.
        let hints = ToolAnnotations::new()
            .read_only(false)
            .destructive(true)
            .open_world(true);
        tool.annotations = Some(hints);
        tool
    }

    /// A call of `tool` guardd held: remembered, watched for its answer, and answered now.
    pub fn held(self: &Arc<Self>, tool: String, hold: &Hold) -> CallToolResult {
        let call = Call {
            tool,
            state: State::Held,
            result: None,
        };
        self.lock().insert(hold.call_id.clone(), call);
        tokio::spawn(Arc::clone(self).watch(hold.call_id.clone()));
        waiting(hold, "is held for review")
    }

    /// The release tool's call: the result of the held call its `call_id` names, run now if
    /// it was approved.
    pub async fn retrieve(&self, args: &JsonObject) -> CallToolResult {
        let Some(call_id) = args.get("call_id").and_then(|v| v.as_str()) else {
            return call::malformed(format!("{TOOL} takes call_id, a string"));
        };
        match self.lock().get(call_id) {
            Some(Call {
                result: Some(result),
                ..
            }) => return result.clone(),
            Some(c) if c.state == State::NotApproved => return not_approved(call_id),
            Some(_) | None => {}
        }
        let request = Request::Resume(ResumeRequest {
            call_id: call_id.to_owned(),
            mode: ResumeMode::Release,
        });
        match call::run(
            &self.socket,
            &request,
            OnHold::Answer,
            std::future::pending(),
        )
        .await
        {
            Ran::Held(hold) => waiting(&hold, "is still held for review"),
            Ran::Done(result) => {
                let ran = result
                    .structured_content
                    .as_ref()
                    .is_some_and(|s| !s["exit_code"].is_null());
                let state = if ran { State::Ran } else { State::NotApproved };
                self.settle(call_id, state, ran.then(|| result.clone()));
                result
            }
        }
    }

    /// Waits with guardd for held call `call_id`'s answer (trying again while guardd is away,
    /// until the call is answered or gone), then tells the client.
    async fn watch(self: Arc<Self>, call_id: String) {
        let request = Request::Resume(ResumeRequest {
            call_id: call_id.clone(),
            mode: ResumeMode::Watch,
        });
        loop {
            match answer(&self.socket, &request).await {
                Some(d) => {
                    let approved = d.decision == guard::call::decision::Decision::Allow;
                    let state = if approved {
                        State::Approved
                    } else {
                        State::NotApproved
                    };
                    self.settle(&call_id, state, None);
                    break;
                }
                None if self
                    .lock()
                    .get(&call_id)
                    .is_some_and(|c| c.state == State::Held) =>
                {
                    tokio::time::sleep(RETRY).await;
                }
                // Released meanwhile: nothing left to watch.
                None => return,
            }
        }
        let client = self
            .client
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        if let Some(peer) = client
            && let Err(e) = peer.notify_tool_list_changed().await
        {
            tracing::debug!("list_changed for call {call_id}: {e}");
        }
    }

    /// Records where call `call_id` stands now (unless it already ran), with its result; keeps
    /// at most [`KEPT_RESULTS`] results.
    fn settle(&self, call_id: &str, state: State, result: Option<CallToolResult>) {
        let mut calls = self.lock();
        let Some(call) = calls.get_mut(call_id) else {
            return;
        };
        if call.state == State::Ran {
            return;
        }
        call.state = state;
        call.result = result;
        let kept: Vec<String> = (calls.iter())
            .filter(|(_, c)| c.result.is_some())
            .map(|(id, _)| id.clone())
            .collect();
        for id in kept.iter().take(kept.len().saturating_sub(KEPT_RESULTS)) {
            if let Some(c) = calls.get_mut(id) {
                c.result = None;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Call>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// guardd's answer to a `watch`: its decision, or `None` when guardd could not be asked or
/// gave none.
async fn answer(socket: &std::path::Path, request: &Request) -> Option<CallDecision> {
    let started = call::start(socket, request).await.ok()?;
    let mut lines = BufReader::new(started.stream).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        match protocol::parse_reply::<ExecReply>(line.as_bytes()) {
            Ok(ExecReply::Pending(_)) => {}
            Ok(ExecReply::Decision(d)) => return Some(d),
            Ok(_) | Err(_) => return None,
        }
    }
    None
}

/// The generic answer for held call `call_id` once it was refused (the reason is the admin's
/// and the caller's owner's to read: `guardctl why`).
fn not_approved(call_id: &str) -> CallToolResult {
    let text = format!("guard: call {call_id} was not approved; it did not run.");
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "call_id": call_id,
        "decision": "block",
        "exit_code": null,
        "diverged": false,
        "stopped": false,
        "error": "not approved",
        "receipt": null,
    }));
    r
}

/// The generic answer for held call `hold`: that it `is` held, and how to get its result.
fn waiting(hold: &Hold, is: &str) -> CallToolResult {
    let text = format!(
        "guard: call {id} {is}. Once a human approves it, call {TOOL} with \
         {{\"call_id\": \"{id}\"}} to run it and get its result.",
        id = hold.call_id
    );
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "call_id": hold.call_id,
        "decision": hold.decision,
        "exit_code": null,
        "diverged": false,
        "stopped": false,
        "error": format!("held for review: retrieve it with {TOOL}"),
        "receipt": null,
    }));
    r
}
