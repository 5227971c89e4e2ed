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

use guard::{
    call::decision::Decision,
    protocol::{
        self, ExecReply, Request, ResumeMode, ResumeRequest,
        reply::{CallDecision, Hold},
    },
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
/// How many of the session's held calls the release tool's description names.
const LISTED: usize = 16;
/// How long a watcher waits before trying guardd again.
const RETRY: Duration = Duration::from_secs(1);

/// Where a held call of this session stands, as guard-mcp last heard. Only what guardd said
/// moves it: a release that failed for another reason (guardd away, busy) leaves it as it was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Held,
    Approved,
    /// Denied, or its wait ran out.
    NotApproved,
    /// No longer held, and guard-mcp did not see how (another caller ran it, or it was
    /// withdrawn).
    Gone,
    Ran,
    /// Released and started, and its end was not seen (guardd went away meanwhile).
    Started,
    /// Ran, and its result is no longer kept.
    Forgotten,
}

impl State {
    fn says(self) -> &'static str {
        match self {
            Self::Held => "held for review",
            Self::Approved => "approved: ready to release",
            Self::NotApproved => "not approved",
            Self::Gone => "no longer held",
            Self::Ran => "ran: its result can be retrieved again",
            Self::Started => "started: its end was not seen",
            Self::Forgotten => "ran: its result is no longer kept",
        }
    }
}

/// A held call of this session: its tool, where it stands, and, once it ran, its result.
struct Call {
    tool: String,
    state: State,
    result: Option<CallToolResult>,
    /// Its place in the session's order: the newest are listed, the oldest results dropped.
    seq: u64,
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

    /// The release tool, its description naming this session's latest held calls as they
    /// stand.
    pub fn tool(&self) -> Tool {
        let mut description = String::from(
            "Returns the result of a tool call that guard held for a human's review, given the \
             call_id the held call answered with. Once the call is approved it runs, and its \
             result is returned; while it waits, or once it is refused, this says so and \
             nothing runs. Calling the held tool again makes a new call that is held again: \
             retrieve this one instead.",
        );
        let calls = self.lock();
        let mut latest: Vec<(&String, &Call)> = calls.iter().collect();
        latest.sort_by_key(|(_, c)| std::cmp::Reverse(c.seq));
        if !latest.is_empty() {
            description.push_str(" Calls of this session, the latest first:");
            for (id, call) in latest.iter().take(LISTED) {
                description.push_str(&format!(" {id} ({}): {};", call.tool, call.state.says()));
            }
            if latest.len() > LISTED {
                description.push_str(&format!(" and {} earlier.", latest.len() - LISTED));
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
        let mut calls = self.lock();
        let seq = calls.values().map(|c| c.seq + 1).max().unwrap_or(0);
        let call = Call {
            tool,
            state: State::Held,
            result: None,
            seq,
        };
        calls.insert(hold.call_id.clone(), call);
        drop(calls);
        tokio::spawn(Arc::clone(self).watch(hold.call_id.clone()));
        waiting(hold, "is held for review")
    }

    /// The release tool's call: the result of the held call its `call_id` names, run now if
    /// it was approved; `cancel` withdraws the release (a run it started is stopped).
    pub async fn retrieve(
        &self,
        args: &JsonObject,
        cancel: impl std::future::Future<Output = ()>,
    ) -> CallToolResult {
        let Some(call_id) = args.get("call_id").and_then(|v| v.as_str()) else {
            return call::malformed(format!("{TOOL} takes call_id, a string"));
        };
        match self.lock().get(call_id) {
            Some(Call {
                result: Some(result),
                ..
            }) => return result.clone(),
            Some(c) if c.state == State::NotApproved => return not_approved(call_id),
            Some(c) if c.state == State::Forgotten => return forgotten(call_id),
            Some(_) | None => {}
        }
        let request = Request::Resume(ResumeRequest {
            call_id: call_id.to_owned(),
            mode: ResumeMode::Release,
        });
        match call::run(&self.socket, &request, OnHold::Answer, cancel).await {
            Ran::Held(hold) => waiting(&hold, "is still held for review"),
            Ran::Done(result) => match learnt(&result) {
                Some(State::NotApproved) => {
                    self.settle(call_id, State::NotApproved, None);
                    not_approved(call_id)
                }
                Some(state @ (State::Ran | State::Started)) => {
                    self.settle(call_id, state, Some(result.clone()));
                    result
                }
                Some(state) => {
                    self.settle(call_id, state, None);
                    result
                }
                None => result,
            },
        }
    }

    /// Waits with guardd for held call `call_id`'s answer (trying again while guardd is away
    /// or another caller waits for it, until the call is answered or gone), then tells the
    /// client.
    async fn watch(self: Arc<Self>, call_id: String) {
        let request = Request::Resume(ResumeRequest {
            call_id: call_id.clone(),
            mode: ResumeMode::Watch,
        });
        loop {
            let state = match answer(&self.socket, &request).await {
                Some(d) if d.decision == Decision::Allow => Some(State::Approved),
                // The held call's own decision comes back when it is denied or expires.
                Some(d) if d.decision != Decision::Block => Some(State::NotApproved),
                Some(d)
                    if d.message
                        .as_deref()
                        .is_some_and(|m| m.contains("waiting for it")) =>
                {
                    None
                }
                Some(_) => Some(State::Gone),
                None => None,
            };
            if let Some(state) = state {
                self.settle(&call_id, state, None);
                break;
            }
            if !self
                .lock()
                .get(&call_id)
                .is_some_and(|c| c.state == State::Held)
            {
                // Released or answered meanwhile: nothing left to watch.
                return;
            }
            tokio::time::sleep(RETRY).await;
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

    /// Records where call `call_id` stands now, with its result; a call that ran or started
    /// stays so. Keeps at most [`KEPT_RESULTS`] results, the latest.
    fn settle(&self, call_id: &str, state: State, result: Option<CallToolResult>) {
        let mut calls = self.lock();
        let Some(call) = calls.get_mut(call_id) else {
            return;
        };
        if matches!(call.state, State::Ran | State::Started | State::Forgotten) {
            return;
        }
        call.state = state;
        call.result = result;
        let mut kept: Vec<(u64, String)> = (calls.iter())
            .filter(|(_, c)| c.result.is_some())
            .map(|(id, c)| (c.seq, id.clone()))
            .collect();
        kept.sort();
        let over = kept.len().saturating_sub(KEPT_RESULTS);
        for (_, id) in kept.into_iter().take(over) {
            if let Some(c) = calls.get_mut(&id) {
                c.result = None;
                c.state = State::Forgotten;
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Call>> {
        self.calls.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// What a release's `result` says of its call: it ran (an exit code), it started and its end
/// was not seen (allowed, no exit code), it was not approved (the held call's own decision:
/// denied, expired, or barred at its run), guardd holds it no more (`block`); `None` when
/// guardd never answered for the call (away, busy), which says nothing of it.
fn learnt(result: &CallToolResult) -> Option<State> {
    let said = result.structured_content.as_ref()?;
    if !said["exit_code"].is_null() {
        return Some(State::Ran);
    }
    match said["decision"].as_str()? {
        "allow" => Some(State::Started),
        "block" => Some(State::Gone),
        _ => Some(State::NotApproved),
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
    said(call_id, json!("block"), "not approved", text)
}

/// The answer for a call that ran, once its result is no longer kept.
fn forgotten(call_id: &str) -> CallToolResult {
    let text = format!(
        "guard: call {call_id} ran; its result is no longer kept (guardctl show {call_id})."
    );
    said(
        call_id,
        json!("allow"),
        "its result is no longer kept",
        text,
    )
}

/// The generic answer for held call `hold`: that it `is` held, and how to get its result.
fn waiting(hold: &Hold, is: &str) -> CallToolResult {
    let text = format!(
        "guard: call {id} {is}. Once a human approves it, call {TOOL} with \
         {{\"call_id\": \"{id}\"}} to run it and get its result.",
        id = hold.call_id
    );
    let error = format!("held for review: retrieve it with {TOOL}");
    said(&hold.call_id, json!(hold.decision), &error, text)
}

/// An error result of call `call_id` that did not run now: `text` for the model, and the
/// structured content every result has (`schema::output_schema`), with `decision` and `error`.
fn said(call_id: &str, decision: serde_json::Value, error: &str, text: String) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text)]);
    r.structured_content = Some(json!({
        "call_id": call_id,
        "decision": decision,
        "exit_code": null,
        "diverged": false,
        "stopped": false,
        "error": error,
        "receipt": null,
    }));
    r
}

#[cfg(test)]
mod tests;
