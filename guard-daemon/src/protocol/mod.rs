//! The wire protocol between guardd and its clients: newline-delimited JSON, one object per
//! line, versioned by `"v": 1`. Requests are parsed in two steps, the envelope (`v`, `type`)
//! and then the request's own struct, so that an error names the field at fault; then each
//! string a caller chooses is held to its length ([`limits`]). See the book's `reference/protocol.md`. The
//! replies are in [`reply`].

pub mod conn;
pub mod context;
pub mod limits;
pub mod reply;
pub mod status;

use serde::{Deserialize, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

/// The protocol version this build speaks.
pub const VERSION: u64 = 1;
/// Largest frame accepted, newline included.
pub const MAX_FRAME: usize = 1 << 20;

pub use reply::{ErrorReply, ExecReply, Reply, frame, parse_reply};

/// A request, after validation (and, for a client, before sending: see [`frame`]).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    Exec(ExecRequest),
    /// `exec` with its options (serialised as `exec`; guardd parses every `exec` as this).
    #[serde(rename = "exec")]
    ExecWith(ExecWith),
    Check(CheckRequest),
    Status(StatusRequest),
    Subscribe(SubscribeRequest),
    Pending(PendingRequest),
    Approve(ApproveRequest),
    Deny(DenyRequest),
    Reload(ReloadRequest),
    Tools(ToolsRequest),
    Resume(ResumeRequest),
    Sessions(SessionsRequest),
    ClearSession(ClearSessionRequest),
    Agents(AgentsRequest),
    Why(WhyRequest),
}

/// Why a call of the caller's own did not run as asked: its decision's reason, which the call's
/// caller was not told (clients; an admin may ask of any call).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhyRequest {
    pub call_id: String,
}

/// Wait for, and run, a call held earlier (`exec` with `no_wait`, or one whose guardd
/// restarted). The frame carries the caller's stdin, stdout and stderr, as `exec`'s does; the
/// call runs as it was held, whatever the caller would send now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    pub call_id: String,
    /// What to do while the call is still held: wait for its answer (the default), answer at
    /// once, or wait for its answer without running it.
    #[serde(default, skip_serializing_if = "ResumeMode::is_wait")]
    pub mode: ResumeMode,
}

impl ResumeRequest {
    /// Resume `call_id`, waiting for its answer and running it once approved.
    pub fn wait(call_id: &str) -> Self {
        Self {
            call_id: call_id.to_owned(),
            mode: ResumeMode::Wait,
        }
    }
}

/// How a `resume` meets a call that is still held. A caller that leaves never withdraws the
/// call in `release` or `watch`: it is held as `no_wait` is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResumeMode {
    /// Wait for the answer; run the call once approved.
    #[default]
    Wait,
    /// Run the call if it was approved; if it is still held, say so (`pending`) and end: the
    /// release an agent asks for (guard-mcp's `retrieve_quarantined_tool_response`).
    Release,
    /// Wait for the answer and say it (a `decision` of `allow` with `approved_by`, or the
    /// refusal), without running the call: it stays approved for a `release`.
    Watch,
}

impl ResumeMode {
    fn is_wait(&self) -> bool {
        *self == Self::Wait
    }
}

/// The sessions an approver terminated (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionsRequest {}

/// The policy's agents and what each has done (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsRequest {}

/// Let a terminated session submit calls again (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClearSessionRequest {
    pub session: String,
}

/// The tools the caller may call, with their arguments' specs (clients).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct ToolsRequest {
    /// Keep the connection and send the list again after each policy reload.
    #[serde(default)]
    pub follow: bool,
}

/// Load the policy file again (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReloadRequest {}

/// The calls waiting for approval (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingRequest {}

/// Let a held call run (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRequest {
    pub call_id: String,
    /// The digest the admin was shown: the approval is refused unless it is the held call's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Refuse a held call (admins).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DenyRequest {
    pub call_id: String,
    /// Told to the caller and written to the audit log.
    #[serde(default)]
    pub reason: Option<String>,
    /// Terminate the caller's session too (inspect_ai's `terminate`): its later calls are
    /// blocked until an admin clears it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub terminate: bool,
}

/// Run a tool. The frame carries the caller's stdin, stdout and stderr as SCM_RIGHTS.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExecRequest {
    pub tool: String,
    #[serde(default)]
    pub args: Map<String, Value>,
}

/// An `exec` with what its caller brings besides the call; on the wire it is an `exec` frame
/// with these fields beside `tool` and `args` (guardd parses every `exec` as one).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExecWith {
    #[serde(flatten)]
    pub call: ExecRequest,
    #[serde(flatten)]
    pub options: CallOptions,
}

/// The optional fields of `exec` besides the call itself.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CallOptions {
    /// The caller's session (an agent's conversation): an approver may terminate it, and its
    /// later calls are then blocked until an admin clears it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// What the agent is working on, for the judges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<String>,
    /// What the caller says it is within its agent (a subagent, a role): recorded, and it may
    /// only narrow what the agent may call (`[agents.NAME.labels.LABEL]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// A held call does not wait with its caller: guardd answers `pending` and the caller
    /// leaves; `resume` runs the call once approved.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub no_wait: bool,
    /// The caller's working directory: it picks the call's workspace, where the policy's
    /// `[workspaces]` say tools work (`{workspace}`, `{cwd}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
    /// What the stdin descriptor sent with the frame carries (see [`CallerStdin`]).
    #[serde(default, skip_serializing_if = "CallerStdin::is_stream")]
    pub stdin: CallerStdin,
    /// The model's message with the call and the conversation before it, for its judges and
    /// approvers ([`context`]).
    #[serde(flatten)]
    pub context: context::AgentContext,
}

/// `exec`'s `stdin`: whether the caller's stdin descriptor is an input stream a tool may read.
/// A client that cannot give one (an MCP client, a program with no input for the call) says
/// `none`, and a tool that reads its caller's stdin (`stdin = "caller"`) is then refused rather
/// than run on an empty one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CallerStdin {
    /// The descriptor is the caller's input (guard-exec's own stdin).
    #[default]
    Stream,
    /// The descriptor carries nothing meant for the tool.
    None,
}

impl CallerStdin {
    /// The default, left out of a frame.
    pub fn is_stream(&self) -> bool {
        *self == CallerStdin::Stream
    }
}

impl<'de> Deserialize<'de> for CallerStdin {
    /// `"stream"` or `"none"`; anything else is an error that names the field (serde's own
    /// would name the value instead).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        match v.as_str() {
            Some("stream") => Ok(CallerStdin::Stream),
            Some("none") => Ok(CallerStdin::None),
            _ => Err(serde::de::Error::custom(format!(
                "`stdin` must be \"none\" or \"stream\", not {v}"
            ))),
        }
    }
}

/// An `exec` frame as guardd reads it: every field, strictly.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExecFrame {
    tool: String,
    #[serde(default)]
    args: Map<String, Value>,
    #[serde(default)]
    session: Option<String>,
    #[serde(default)]
    task: Option<String>,
    #[serde(default)]
    label: Option<String>,
    #[serde(default)]
    no_wait: bool,
    #[serde(default)]
    cwd: Option<std::path::PathBuf>,
    #[serde(default)]
    stdin: CallerStdin,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    history: Vec<context::Turn>,
}

impl From<ExecFrame> for ExecWith {
    fn from(f: ExecFrame) -> Self {
        Self {
            call: ExecRequest {
                tool: f.tool,
                args: f.args,
            },
            options: CallOptions {
                session: f.session,
                task: f.task,
                label: f.label,
                no_wait: f.no_wait,
                cwd: f.cwd,
                stdin: f.stdin,
                context: context::AgentContext {
                    message: f.message,
                    history: f.history,
                },
            },
        }
    }
}

/// Decide a call without running it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckRequest {
    pub tool: String,
    #[serde(default)]
    pub args: Map<String, Value>,
    /// The caller's working directory, as in `exec`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<std::path::PathBuf>,
}

/// The daemon's state: policy, layers, running calls.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatusRequest {}

/// Stream events as they happen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct SubscribeRequest {
    /// Only events of tools matching this glob.
    #[serde(default)]
    pub tool: Option<String>,
    /// Only events of this call.
    #[serde(default)]
    pub call: Option<String>,
}

/// What is wrong with a frame; `field` names the offending field when there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct ProtocolError {
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl ProtocolError {
    fn new(message: impl Into<String>, field: Option<&str>) -> Self {
        Self {
            message: message.into(),
            field: field.map(str::to_owned),
        }
    }
}

/// Parses one frame (without its newline).
pub fn parse_request(frame: &[u8]) -> Result<Request, ProtocolError> {
    let value = parse_strict(frame).map_err(|e| {
        let message = e.to_string();
        let field = message
            .starts_with("duplicate key")
            .then(|| field_in(&message))
            .flatten();
        ProtocolError {
            message: format!("malformed JSON: {message}"),
            field,
        }
    })?;
    let Value::Object(mut map) = value else {
        return Err(ProtocolError::new("a request must be a JSON object", None));
    };
    match map.remove("v") {
        Some(Value::Number(n)) if n.as_u64() == Some(VERSION) => {}
        Some(other) => {
            return Err(ProtocolError::new(
                format!("unsupported version {other}; this guardd speaks v{VERSION}"),
                Some("v"),
            ));
        }
        None => {
            return Err(ProtocolError::new(
                format!("missing field `v` (use {VERSION})"),
                Some("v"),
            ));
        }
    }
    let kind = match map.remove("type") {
        Some(Value::String(s)) => s,
        Some(_) => return Err(ProtocolError::new("`type` must be a string", Some("type"))),
        None => return Err(ProtocolError::new("missing field `type`", Some("type"))),
    };
    let body = Value::Object(map);
    let request = match kind.as_str() {
        "exec" => Request::ExecWith(body_of::<ExecFrame>(body)?.into()),
        "check" => Request::Check(body_of(body)?),
        "status" => Request::Status(body_of(body)?),
        "subscribe" => Request::Subscribe(body_of(body)?),
        "pending" => Request::Pending(body_of(body)?),
        "approve" => Request::Approve(body_of(body)?),
        "deny" => Request::Deny(body_of(body)?),
        "reload" => Request::Reload(body_of(body)?),
        "tools" => Request::Tools(body_of(body)?),
        "resume" => Request::Resume(body_of(body)?),
        "sessions" => Request::Sessions(body_of(body)?),
        "clear_session" => Request::ClearSession(body_of(body)?),
        "agents" => Request::Agents(body_of(body)?),
        "why" => Request::Why(body_of(body)?),
        other => {
            return Err(ProtocolError::new(
                format!(
                    "unknown request type `{other}`; expected exec, resume, check, status, \
                     tools, subscribe, pending, approve, deny, reload, sessions, clear_session, agents or why"
                ),
                Some("type"),
            ));
        }
    };
    limits::check(&request)?;
    Ok(request)
}

fn body_of<T: DeserializeOwned>(body: Value) -> Result<T, ProtocolError> {
    serde_json::from_value(body).map_err(|e| {
        let message = e.to_string();
        let field = field_in(&message);
        ProtocolError { message, field }
    })
}

/// Parses JSON, refusing a key that appears twice in one object at any depth: serde_json keeps
/// the last, and a frame that means one thing to guardd and another to whatever reads it first
/// (a proxy, a log reader) must not be accepted.
fn parse_strict(frame: &[u8]) -> Result<Value, serde_json::Error> {
    struct Strict(Value);
    struct StrictVisitor;

    impl<'de> serde::Deserialize<'de> for Strict {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            d.deserialize_any(StrictVisitor).map(Strict)
        }
    }

    impl<'de> serde::de::Visitor<'de> for StrictVisitor {
        type Value = Value;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_unit<E>(self) -> Result<Value, E> {
            Ok(Value::Null)
        }
        fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
            Ok(Value::Bool(v))
        }
        fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
            Ok(v.into())
        }
        fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
            Ok(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
        }
        fn visit_str<E>(self, v: &str) -> Result<Value, E> {
            Ok(Value::String(v.to_owned()))
        }
        fn visit_string<E>(self, v: String) -> Result<Value, E> {
            Ok(Value::String(v))
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
            let mut items = Vec::new();
            while let Some(Strict(item)) = seq.next_element()? {
                items.push(item);
            }
            Ok(Value::Array(items))
        }
        fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
            let mut object = Map::new();
            while let Some(key) = map.next_key::<String>()? {
                if object.contains_key(&key) {
                    return Err(serde::de::Error::custom(format!("duplicate key `{key}`")));
                }
                let Strict(value) = map.next_value()?;
                object.insert(key, value);
            }
            Ok(Value::Object(object))
        }
    }

    let mut de = serde_json::Deserializer::from_slice(frame);
    let Strict(value) = serde::Deserialize::deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// Pulls the field name out of serde's "unknown field `x`" / "missing field `x`" messages.
fn field_in(message: &str) -> Option<String> {
    let start = message.find('`')? + 1;
    let len = message[start..].find('`')?;
    Some(message[start..start + len].to_owned())
}

/// An error reply frame.
pub fn error_frame(error: &ProtocolError) -> Vec<u8> {
    frame(&Reply::Error(error.into()))
}

#[cfg(test)]
mod tests;
