//! The most bytes each string a caller chooses may hold, checked once a frame is parsed: guardd
//! keeps some of them (a session's blocks, a label on a row, a tool's name on every row of its
//! call), so none may be longer than what a caller needs. The frame itself is at most
//! [`MAX_FRAME`](super::MAX_FRAME); an argument's value is bounded only by it (a tool may take a
//! long one; its audit row holds at most 64 KiB of the arguments, `audit::bound`). An error
//! names the field.

use serde_json::{Map, Value};

use super::{ProtocolError, Request};

/// A tool's name (`exec`, `check`): as long as a policy's may be.
pub const TOOL: usize = crate::policy::MAX_NAME;
/// An argument's name (a key of `args`): a reason may name it, so it is held to a tool's.
pub const ARG_NAME: usize = crate::policy::MAX_NAME;
/// A session (`exec`, `clear_session`) and a label (`exec`).
pub const SESSION: usize = 256;
pub const LABEL: usize = 256;
/// What the agent works on (`exec`'s `task`, for the judges).
pub const TASK: usize = 4096;
/// A working directory (`exec`, `check`): the kernel's PATH_MAX.
pub const CWD: usize = 4096;
/// A call id (`resume`, `approve`, `deny`, `subscribe`'s `call`) and a digest (`approve`):
/// guardd's own, far shorter.
pub const CALL_ID: usize = 128;
pub const DIGEST: usize = 128;
/// A glob of tool names (`subscribe`'s `tool`).
pub const TOOL_GLOB: usize = crate::policy::MAX_NAME;
/// An admin's reason for a denial (`deny`).
pub const REASON: usize = 4096;

/// Refuses a request with a string longer than its field's limit.
pub(super) fn check(request: &Request) -> Result<(), ProtocolError> {
    match request {
        Request::Exec(e) => call(&e.tool, &e.args, None),
        Request::ExecWith(w) => {
            let o = &w.options;
            call(&w.call.tool, &w.call.args, o.cwd.as_deref())?;
            at_most("session", o.session.as_deref(), SESSION)?;
            at_most("label", o.label.as_deref(), LABEL)?;
            at_most("task", o.task.as_deref(), TASK)?;
            match o.context.oversized() {
                Some((field, message)) => Err(ProtocolError {
                    message,
                    field: Some(field.into()),
                }),
                None => Ok(()),
            }
        }
        Request::Check(c) => call(&c.tool, &c.args, c.cwd.as_deref()),
        Request::Resume(r) => at_most("call_id", Some(&r.call_id), CALL_ID),
        Request::Why(r) => at_most("call_id", Some(&r.call_id), CALL_ID),
        Request::Approve(a) => {
            at_most("call_id", Some(&a.call_id), CALL_ID)?;
            at_most("digest", a.digest.as_deref(), DIGEST)
        }
        Request::Deny(d) => {
            at_most("call_id", Some(&d.call_id), CALL_ID)?;
            at_most("reason", d.reason.as_deref(), REASON)
        }
        Request::ClearSession(c) => at_most("session", Some(&c.session), SESSION),
        Request::Subscribe(s) => {
            at_most("tool", s.tool.as_deref(), TOOL_GLOB)?;
            at_most("call", s.call.as_deref(), CALL_ID)
        }
        Request::Status(_)
        | Request::Pending(_)
        | Request::Reload(_)
        | Request::Tools(_)
        | Request::Sessions(_)
        | Request::Agents(_) => Ok(()),
    }
}

/// A call's tool, its arguments' names and its working directory.
fn call(
    tool: &str,
    args: &Map<String, Value>,
    cwd: Option<&std::path::Path>,
) -> Result<(), ProtocolError> {
    at_most("tool", Some(tool), TOOL)?;
    if let Some(long) = args.keys().find(|k| k.len() > ARG_NAME) {
        return Err(ProtocolError::new(
            format!(
                "an argument's name is {} bytes; at most {ARG_NAME} are accepted",
                long.len()
            ),
            Some("args"),
        ));
    }
    let cwd = cwd.map(|p| p.as_os_str().len()).unwrap_or_default();
    if cwd > CWD {
        return Err(too_long("cwd", cwd, CWD));
    }
    Ok(())
}

fn at_most(field: &str, value: Option<&str>, limit: usize) -> Result<(), ProtocolError> {
    match value {
        Some(v) if v.len() > limit => Err(too_long(field, v.len(), limit)),
        _ => Ok(()),
    }
}

fn too_long(field: &str, len: usize, limit: usize) -> ProtocolError {
    ProtocolError::new(
        format!("`{field}` is {len} bytes; at most {limit} are accepted"),
        Some(field),
    )
}

#[cfg(test)]
mod tests {
    use super::super::parse_request;

    fn field_of(frame: &serde_json::Value) -> Option<String> {
        let text = frame.to_string();
        parse_request(text.as_bytes()).err().and_then(|e| e.field)
    }

    #[test]
    fn each_long_field_is_refused_by_name_and_one_at_the_limit_is_not() {
        let long = "x".repeat(5000);
        let longer = "x".repeat(super::super::context::TEXT_BYTES + 1);
        let at = |n: usize| "x".repeat(n);
        let cases = [
            (serde_json::json!({"v":1,"type":"exec","tool":long}), "tool"),
            (
                serde_json::json!({"v":1,"type":"check","tool":long}),
                "tool",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t","args":{long.clone(): 1}}),
                "args",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t","session":long}),
                "session",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t","label":long}),
                "label",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t","task":long}),
                "task",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t","message":longer}),
                "message",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t",
                    "history":vec![serde_json::json!({"role":"user","content":"hi"}); 17]}),
                "history",
            ),
            (
                serde_json::json!({"v":1,"type":"exec","tool":"t",
                    "history":[{"role":"user","content":longer}]}),
                "history",
            ),
            (
                serde_json::json!({"v":1,"type":"check","tool":"t","cwd":format!("/{long}")}),
                "cwd",
            ),
            (
                serde_json::json!({"v":1,"type":"resume","call_id":long}),
                "call_id",
            ),
            (
                serde_json::json!({"v":1,"type":"approve","call_id":"c","digest":long}),
                "digest",
            ),
            (
                serde_json::json!({"v":1,"type":"deny","call_id":"c","reason":long}),
                "reason",
            ),
            (
                serde_json::json!({"v":1,"type":"clear_session","session":long}),
                "session",
            ),
            (
                serde_json::json!({"v":1,"type":"subscribe","tool":long}),
                "tool",
            ),
        ];
        for (frame, field) in cases {
            assert_eq!(field_of(&frame).as_deref(), Some(field), "{frame:.80}");
        }
        let fits = serde_json::json!({
            "v": 1, "type": "exec", "tool": at(super::TOOL), "args": {at(super::ARG_NAME): 1},
            "session": at(super::SESSION), "label": at(super::LABEL), "task": at(super::TASK),
            "message": at(super::super::context::TEXT_BYTES),
            "history": vec![serde_json::json!({"role": "user", "content": "hi"}); 16],
        });
        let text = fits.to_string();
        assert!(parse_request(text.as_bytes()).is_ok());
    }
}
