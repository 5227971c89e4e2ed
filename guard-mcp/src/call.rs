//! One `tools/call`, carried to guardd as an `exec` like any other call: guardd decides it,
//! records it, and runs it confined with its stdout and stderr on pipes of ours, which become
//! the result's content. Whatever does not end in an exit of the tool is an error result, and
//! nothing runs without guardd (fail closed).

use std::{
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use guard::{
    call::decision::Decision,
    protocol::{
        self, CallOptions, CallerStdin, ExecReply, ExecRequest, ExecWith, Request, ResumeRequest,
        reply::{CallDecision, Exit, Hold, Started as StartedReply},
    },
    receipt::Receipt,
};
use rmcp::{
    Peer, RoleServer,
    model::{CallToolResult, ContentBlock, JsonObject, ProgressNotificationParam, ProgressToken},
};
use serde::Serialize;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

pub(crate) use connect::{Started, start};

/// The most of each of stdout and stderr a result carries; the rest is counted, not kept.
const MAX_OUTPUT: usize = 1 << 20;
/// How often a held call tells the client it still waits.
const PROGRESS_EVERY: Duration = Duration::from_secs(2);
/// How often to try guardd again for a held call while it is away.
const RESUME_EVERY: Duration = Duration::from_millis(200);
/// How long the output of an ended call may take to drain (a child the tool left behind may
/// hold the pipe; guardd kills the call's cgroup, so this is a bound, not a wait).
const DRAIN: Duration = Duration::from_secs(5);

/// What a call's `structuredContent` says: the same keys in every result, `null` where one
/// does not apply (the `outputSchema` of `schema::output_schema`).
#[derive(Debug, Serialize)]
pub struct Outcome {
    /// The call's id in guardd's audit log (`guardctl show ID`).
    pub call_id: Option<String>,
    /// `allow`, or why it did not run.
    pub decision: Option<Decision>,
    /// The tool's exit code (128+N for signal N, 137 when guard stopped it).
    pub exit_code: Option<i32>,
    /// It did or tried something it was not approved to do.
    pub diverged: bool,
    /// guard killed it for that.
    pub stopped: bool,
    /// What went wrong outside the tool (guardd unreachable, a refused request...).
    pub error: Option<String>,
    /// What the call was seen doing, as the audit log records it.
    pub receipt: Option<Box<Receipt>>,
}

impl Outcome {
    fn failed(error: impl Into<String>) -> Self {
        Self {
            call_id: None,
            decision: None,
            exit_code: None,
            diverged: false,
            stopped: false,
            error: Some(error.into()),
            receipt: None,
        }
    }
}

/// How the client follows a call: its progress token, and the peer to notify.
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: Option<ProgressToken>,
}

/// What a held call does to [`run`]: it waits with the client, telling it so (progress), or
/// it is answered at once ([`Ran::Held`]) for the client to release later (`release`).
pub enum OnHold {
    Wait(Progress),
    Answer,
}

/// How a call through [`run`] ended for the client.
pub enum Ran {
    /// The result the client gets.
    Done(CallToolResult),
    /// Held for a human, and [`OnHold::Answer`] said not to wait.
    Held(Hold),
}

/// Sends `request` (an exec or a resume) to guardd at `socket`; returns when the call ended,
/// when it was held and `on_hold` says not to wait, or when `cancel` fired (the connection is
/// closed, which makes guardd kill the call or withdraw a held one it waits with).
/// A call held when guardd goes away stays held on guardd's disk: it is resumed once guardd is
/// back, as guard-exec does.
pub async fn run(
    socket: &Path,
    request: &Request,
    on_hold: OnHold,
    cancel: impl std::future::Future<Output = ()>,
) -> Ran {
    match follow(socket, request, on_hold, cancel).await {
        Ok(held) => Ran::Held(held),
        Err(done) => Ran::Done(done),
    }
}

/// [`run`]'s replies, followed: `Ok` with the hold when it returns at one, `Err` with the
/// result otherwise (so that `?` ends the call wherever it ends).
async fn follow(
    socket: &Path,
    request: &Request,
    on_hold: OnHold,
    cancel: impl std::future::Future<Output = ()>,
) -> Result<Hold, CallToolResult> {
    tokio::pin!(cancel);
    let failed = |e: String| result(Vec::new(), Outcome::failed(e), None);
    let Started {
        stream,
        mut stdout,
        mut stderr,
    } = start(socket, request).await.map_err(failed)?;
    let mut lines = BufReader::new(stream).lines();
    // The call's start, and its cgroup: what tells a stopped call from a running one.
    let mut begun: Option<StartedReply> = None;
    // The hold, and until when guardd may come back for it.
    let mut hold: Option<(Hold, Instant)> = None;
    let mut waited = 0.0;
    let mut tick = tokio::time::interval(PROGRESS_EVERY);
    loop {
        let line = tokio::select! {
            () = &mut cancel => {
                return Err(failed("cancelled: guardd withdrew the call, or stopped it".into()));
            }
            _ = tick.tick(), if hold.is_some() => {
                waited += PROGRESS_EVERY.as_secs_f64();
                if let (Some((h, _)), OnHold::Wait(progress)) = (&hold, &on_hold) {
                    notify(progress, h, waited).await;
                }
                continue;
            }
            line = lines.next_line() => line,
        };
        let line = match line {
            Ok(Some(line)) => line,
            Ok(None) | Err(_) if hold.is_some() => {
                let Some((h, until)) = &hold else { continue };
                let s = comeback(socket, &h.call_id, *until, cancel.as_mut())
                    .await
                    .map_err(failed)?;
                lines = BufReader::new(s.stream).lines();
                (stdout, stderr) = (s.stdout, s.stderr);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                return Err(failed(format!("guardd: {e}")));
            }
            Ok(None) | Err(_) => return Err(lost(begun).await),
        };
        match protocol::parse_reply::<ExecReply>(line.as_bytes()).map_err(failed)? {
            ExecReply::Decision(d) if d.decision == Decision::Allow => {
                // Answered: no longer held, and a guardd that goes away now takes it along.
                hold = None;
            }
            ExecReply::Decision(d) => return Err(refused(d)),
            ExecReply::Pending(h) => {
                let OnHold::Wait(progress) = &on_hold else {
                    return Ok(h);
                };
                notify(progress, &h, waited).await;
                let until = Instant::now() + Duration::from_secs(h.timeout_s.saturating_add(60));
                hold = Some((h, until));
                tick.reset();
            }
            ExecReply::Started(s) => begun = Some(s),
            ExecReply::Error(e) => return Err(failed(e.error)),
            ExecReply::Exit(exit) => {
                let out = stdout.finish().await;
                let err = stderr.finish().await;
                return Err(ended(exit, out, err));
            }
        }
    }
}

/// The result of a call whose guardd went away before its end: what became of it, once its
/// processes were seen gone (waited for off this thread).
/// One that started says so (`decision` allow, its id, no exit code): it may have done what
/// it does, and is never to be taken for a call that did not run.
async fn lost(begun: Option<StartedReply>) -> CallToolResult {
    let call_id = begun.as_ref().map(|b| b.call_id.clone());
    let said = tokio::task::spawn_blocking(move || guard::client::lost(begun.as_ref()))
        .await
        .unwrap_or_else(|e| format!("guardd closed the connection: {e}"));
    let outcome = Outcome {
        decision: call_id.is_some().then_some(Decision::Allow),
        call_id,
        ..Outcome::failed(said)
    };
    result(Vec::new(), outcome, None)
}

/// The `exec` of a call. An MCP client has no input stream to give: it says so, and guardd
/// refuses a tool that would read one rather than run it on the /dev/null sent as its stdin.
/// `cwd` picks the call's workspace (`roots`); `no_wait`: a held call stays held when we leave.
pub fn exec(tool: String, args: JsonObject, cwd: Option<PathBuf>, no_wait: bool) -> Request {
    Request::ExecWith(ExecWith {
        call: ExecRequest { tool, args },
        options: CallOptions {
            stdin: CallerStdin::None,
            cwd,
            no_wait,
            ..CallOptions::default()
        },
    })
}

/// guardd went away while call `call_id` was held: connects again and resumes it, trying until
/// `until`. Cancelled meanwhile, the call stays held on guardd's disk until it expires.
async fn comeback(
    socket: &Path,
    call_id: &str,
    until: Instant,
    mut cancel: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Result<Started, String> {
    let request = Request::Resume(ResumeRequest::wait(call_id));
    while Instant::now() < until {
        tokio::select! {
            () = &mut cancel => {
                return Err(format!(
                    "cancelled while guardd was away; call {call_id} stays held until it expires"
                ));
            }
            () = tokio::time::sleep(RESUME_EVERY) => {}
        }
        if let Ok(s) = start(socket, &request).await {
            return Ok(s);
        }
    }
    Err(format!(
        "guardd went away while call {call_id} was held and did not come back; the call did not run"
    ))
}

/// One output pipe, read to its end on the runtime (a task, not a thread: a call's start does
/// not wait for two threads to be made), keeping the first [`MAX_OUTPUT`] bytes.
pub(crate) struct Capture {
    kept: Arc<Mutex<(Vec<u8>, u64)>>,
    done: tokio::sync::oneshot::Receiver<()>,
    reading: tokio::task::JoinHandle<()>,
}

impl Capture {
    fn start(fd: OwnedFd) -> Result<Self, String> {
        let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .map_err(|e| format!("the tool's output pipe: {e}"))?;
        let kept = Arc::new(Mutex::new((Vec::new(), 0u64)));
        let (tx, done) = tokio::sync::oneshot::channel();
        let shared = Arc::clone(&kept);
        let reading = tokio::spawn(async move {
            let mut buf = vec![0u8; 16384];
            while let Ok(n) = pipe.read(&mut buf).await {
                if n == 0 {
                    break;
                }
                let mut k = shared.lock().unwrap_or_else(|p| p.into_inner());
                let room = MAX_OUTPUT.saturating_sub(k.0.len()).min(n);
                k.0.extend_from_slice(&buf[..room]);
                k.1 += (n - room) as u64;
            }
            let _ = tx.send(());
        });
        Ok(Self {
            kept,
            done,
            reading,
        })
    }

    /// What was read, once the pipe ended or [`DRAIN`] passed; with the bytes dropped. A pipe
    /// still open then (a process the call left holds it) is read no further.
    async fn finish(self) -> (String, u64) {
        let _ = tokio::time::timeout(DRAIN, self.done).await;
        self.reading.abort();
        let k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        (String::from_utf8_lossy(&k.0).into_owned(), k.1)
    }
}

async fn notify(progress: &Progress, hold: &Hold, waited: f64) {
    let Some(token) = progress.token.clone() else {
        return;
    };
    let mut p = ProgressNotificationParam::new(token, waited);
    p.total = Some(hold.timeout_s as f64);
    p.message = Some(format!(
        "call {} {}: waiting for an admin (guardctl approve {})",
        hold.call_id, hold.message, hold.call_id
    ));
    if let Err(e) = progress.peer.notify_progress(p).await {
        tracing::debug!("progress notification: {e}");
    }
}

/// A call guardd did not run: the message the policy lets the caller hear.
pub fn refused(d: CallDecision) -> CallToolResult {
    let message = d.message.unwrap_or_else(|| "blocked by policy".to_owned());
    let text = format!("guard: {message} (call {})", d.call_id);
    let outcome = Outcome {
        call_id: Some(d.call_id),
        decision: Some(d.decision),
        ..Outcome::failed(message)
    };
    result(Vec::new(), outcome, Some(text))
}

/// A call that ran: its output, and how it ended.
fn ended(exit: Exit, out: (String, u64), err: (String, u64)) -> CallToolResult {
    let mut content = Vec::new();
    for (text, dropped, name) in [(out.0, out.1, "stdout"), (err.0, err.1, "stderr")] {
        if text.is_empty() && dropped == 0 {
            continue;
        }
        let mut text = if name == "stderr" {
            format!("[stderr]\n{text}")
        } else {
            text
        };
        if dropped > 0 {
            text.push_str(&format!(
                "\n[guard-mcp: {dropped} more bytes of {name} dropped]"
            ));
        }
        content.push(ContentBlock::text(text));
    }
    // An end the audit log could not record is no success (`result`), whatever the code.
    let error = exit.error.clone().or_else(|| exit.unrecorded_message());
    let note = if let Some(why) = &exit.killed {
        Some(format!(
            "guard: the call was killed: {why} (call {})",
            exit.call_id
        ))
    } else if exit.stopped {
        Some(format!(
            "guard: the call did something it was not approved to do and was killed (call {})",
            exit.call_id
        ))
    } else if exit.diverged {
        Some(format!(
            "guard: the call tried something it was not approved to do; it was denied (call {})",
            exit.call_id
        ))
    } else {
        error
            .as_ref()
            .map(|e| format!("guard: {e} (call {})", exit.call_id))
    };
    let outcome = Outcome {
        call_id: Some(exit.call_id),
        decision: Some(Decision::Allow),
        exit_code: exit.code,
        diverged: exit.diverged,
        stopped: exit.stopped,
        error,
        receipt: exit.receipt,
    };
    result(content, outcome, note)
}

/// The result: `isError` unless the tool ran and exited 0 within its approval.
/// The result of a call whose arguments do not fit its tool (`params`), saying why; nothing
/// reached guardd.
pub fn malformed(why: String) -> CallToolResult {
    result(Vec::new(), Outcome::failed(why), None)
}

fn result(
    mut content: Vec<ContentBlock>,
    outcome: Outcome,
    note: Option<String>,
) -> CallToolResult {
    let ok = outcome.exit_code == Some(0)
        && !outcome.diverged
        && outcome.error.is_none()
        && outcome.decision == Some(Decision::Allow);
    match (note, &outcome.error) {
        (Some(note), _) => content.push(ContentBlock::text(note)),
        (None, Some(e)) => content.push(ContentBlock::text(format!("guard: {e}"))),
        (None, None) => {}
    }
    let structured = serde_json::to_value(&outcome).ok();
    let mut r = if ok {
        CallToolResult::success(content)
    } else {
        CallToolResult::error(content)
    };
    r.structured_content = structured;
    r
}

mod connect;

#[cfg(test)]
mod tests;
