//! `guardctl status` and `guardctl events`: what guardd is doing now, and what it did.

use std::{io::IsTerminal as _, path::Path, process::ExitCode, time::Duration};

use guard::{
    bus::{Event, What},
    client,
    protocol::{Reply, Request, SubscribeRequest},
};

use crate::{
    ask::{ask_status, connect, failed},
    print_json,
    term::{printable, say, say_err},
};

/// `guardctl status`.
pub fn status(socket: Option<std::path::PathBuf>, as_json: bool) -> ExitCode {
    let socket = client::socket_path(socket);
    let status = match ask_status(&socket) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if as_json {
        print_json(&status);
        return ExitCode::SUCCESS;
    }
    say!(
        "guardd pid {}  up {}s  socket {}",
        status.pid,
        status.uptime_s,
        socket.display()
    );
    let enforced = match (status.enforced, status.policy.shadow.len()) {
        (false, _) => "UNENFORCED".to_owned(),
        (true, 0) => "enforced".to_owned(),
        (true, n) => format!("enforced, but {n} of its tools in SHADOW"),
    };
    say!(
        "policy {} ({} tools)  {enforced}",
        status.policy.path.display(),
        status.policy.tools
    );
    say!("  version {}", status.policy.version);
    if !status.policy.shadow.is_empty() {
        say!(
            "  SHADOW: {} (what they do outside their effects is let through and recorded)",
            status.policy.shadow.join(" ")
        );
    }
    let admitting = if status.audit.admitting {
        "admitting calls"
    } else {
        "FULL: admitting no call until the reserve for running calls' rows is back"
    };
    say!("audit {}  {admitting}", status.audit.path.display());
    say!(
        "limits {}  dropped kernel events {}",
        status.limits,
        status.dropped_events
    );
    if let Some(e) = &status.export {
        let counts = format!(
            "{} sent, {} dropped, {} failed tries",
            e.sent, e.dropped, e.failed
        );
        say!("export {}  {counts}", e.endpoint);
    }
    say!("layers:");
    for layer in &status.layers {
        let state = layer.state.as_str();
        say!("  {:<22} {state:<10} {}", layer.name, layer.detail);
    }
    let c = &status.connections;
    say!(
        "connections: {} open ({} beyond their uid's reserve) from {} uids, {} following",
        c.open,
        c.shared,
        c.uids,
        c.followers
    );
    say!(
        "running calls: {}  queued: {}",
        status.running.len(),
        status.queued
    );
    for call in &status.running {
        say!(
            "  {:<16} {:<16} pid {:<8} uid {:<6} since {}",
            call.call_id,
            call.tool,
            call.pid,
            call.peer_uid,
            call.started
        );
    }
    ExitCode::SUCCESS
}

/// Filters shared by live and historical events.
pub struct Filter {
    /// Only events of this kind (decision, held, approval, launch, divergence, kill, exit...).
    pub kind: Option<String>,
    pub tool: Option<String>,
    pub decision: Option<String>,
    pub call: Option<String>,
    pub since: Option<Duration>,
}

impl Filter {
    fn keeps(&self, event: &Event) -> bool {
        let kind_ok = self.kind.as_deref().is_none_or(|k| k == event.kind());
        let call_ok = self
            .call
            .as_deref()
            .is_none_or(|c| event.call_id.as_deref() == Some(c));
        let tool_ok = self.tool.as_deref().is_none_or(|glob| {
            event
                .tool
                .as_deref()
                .is_some_and(|t| guard::policy::glob_match(glob, t))
        });
        let decision = match &event.what {
            What::Decision { decision, .. } | What::Held { decision, .. } => {
                Some(decision.as_str())
            }
            _ => None,
        };
        let decision_ok = self.decision.as_deref().is_none_or(|d| decision == Some(d));
        kind_ok && call_ok && tool_ok && decision_ok
    }
}

/// What an event says, in a few words: what ran, for whom, and how it ended, in the manner of
/// `tetra getevents -o compact`.
pub fn detail(event: &Event) -> String {
    let call = event.call_id.as_deref().unwrap_or("-");
    match &event.what {
        What::Decision {
            decision,
            reason,
            uid,
            agent,
            would_block,
        } => {
            let agent = agent
                .as_deref()
                .map_or(String::new(), |a| format!("agent {a} "));
            let would = would_block.map_or(String::new(), |w| format!(" (would {w})"));
            format!("{decision}{would} {agent}uid {uid} {reason}")
        }
        What::Held {
            decision,
            reason,
            uid,
            timeout_s,
        } => format!("{decision} uid {uid}: {reason} (guardctl approve {call}; {timeout_s} s)"),
        What::Approval {
            approver: Some(who),
            reason,
            ..
        } => match reason {
            Some(reason) => format!("{who}: {reason}"),
            None => who.clone(),
        },
        What::Approval {
            approved,
            by,
            reason,
            ..
        } => {
            let answer = if *approved { "approved" } else { "denied" };
            // Nobody: the clock ran out, the caller left, or the call could not be held.
            let who = by.map_or("nobody".to_owned(), |uid| format!("uid {uid}"));
            let why = reason
                .as_deref()
                .map_or(String::new(), |r| format!(": {r}"));
            format!("{answer} by {who}{why}")
        }
        What::Launch {
            pid,
            program,
            args,
            uid,
        } => format!(
            "{} ({args} args) uid {uid} pid {pid}",
            program.as_deref().unwrap_or("-")
        ),
        What::Divergence(d) => d.describe(),
        What::Exit {
            code,
            diverged,
            divergence,
            duration_ms,
            ..
        } => {
            let code = code.map_or("-".to_owned(), |c| c.to_string());
            let how = match (diverged, divergence) {
                (_, Some(d)) => format!(", diverged: {}", d.describe()),
                (true, None) => ", diverged".to_owned(),
                (false, None) => String::new(),
            };
            format!("code {code} in {duration_ms:.1} ms{how}")
        }
        What::Kill { reason } | What::Refused { reason } => reason.clone(),
        What::Judged {
            judge,
            allowed: true,
            ..
        } => format!("allowed by judge {judge}"),
        What::Judged { reason, .. } => reason.clone().unwrap_or_default(),
        What::Reload { error: Some(e), .. } => format!("policy kept: {e}"),
        What::Reload { tools, .. } => format!("{} tools", tools.unwrap_or(0)),
        What::Lagged { missed } => format!("missed {missed} events"),
    }
}

/// One aligned line per event, colored on a terminal unless NO_COLOR is set.
fn human(event: &Event, color: bool) -> String {
    let kind = event.kind();
    let paint = match &event.what {
        What::Divergence(_) | What::Kill { .. } => "31",
        What::Decision { decision, .. } if *decision != guard::call::decision::Decision::Allow => {
            "33"
        }
        What::Decision { .. } | What::Launch { .. } => "32",
        _ => "0",
    };
    let kind_col = format!("{kind:<10}");
    let kind_col = if color {
        format!("\x1b[{paint}m{kind_col}\x1b[0m")
    } else {
        kind_col
    };
    // Every line of a call in shadow says so: what it did was let through.
    let shadow = if event.enforce.is_some_and(|e| !e.enforced()) {
        "SHADOW "
    } else {
        ""
    };
    format!(
        "{} {kind_col} {:<16} {:<16} {shadow}{}",
        printable(&event.ts),
        printable(event.call_id.as_deref().unwrap_or("-")),
        printable(event.tool.as_deref().unwrap_or("-")),
        printable(&detail(event))
    )
}

/// `guardctl events`: history from the audit log, or with `follow` the live stream.
pub fn events(
    socket: Option<std::path::PathBuf>,
    audit: &Path,
    follow: bool,
    as_json: bool,
    filter: Filter,
) -> ExitCode {
    let color =
        !as_json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let print = |event: &Event| {
        if filter.keeps(event) {
            if as_json {
                print_json(event)
            } else {
                // Escaped field by field in `human`: its colours are guardctl's own.
                println!("{}", human(event, color))
            }
        }
    };
    if !follow {
        // Not in the log: a refused call was refused because the log had no room for it, and
        // a lag is the live stream's own.
        if let Some(kind @ ("refused" | "lagged")) = filter.kind.as_deref() {
            say_err!("guardctl: `{kind}` events are live only (--follow): the audit log has none");
            return ExitCode::from(64);
        }
        return crate::history::events(audit, filter.since, print);
    }
    let socket = client::socket_path(socket);
    let mut client = match connect(&socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let subscribe = Request::Subscribe(SubscribeRequest {
        tool: filter.tool.clone(),
        call: filter.call.clone(),
    });
    if let Err(e) = client.request(&subscribe) {
        return failed(&e);
    }
    loop {
        match client.recv::<Reply>() {
            Ok(Some(Reply::Event(event))) => print(&event),
            // guardd is there; nothing happened.
            Ok(Some(Reply::Keepalive(_))) => {}
            Ok(Some(other)) => {
                say_err!("guardctl: {}", client::unexpected(&other));
                return ExitCode::from(1);
            }
            Ok(None) => {
                // A follower that ends quietly looks like a quiet guard: say it, and fail.
                say_err!("guardctl: guardd closed the event stream (stopped or restarted)");
                return ExitCode::from(69);
            }
            // One frame this guardctl cannot read (a newer guardd's event, say) is reported
            // and skipped: a follower that stopped there would hide every later event.
            Err(e) if e.kind() == std::io::ErrorKind::InvalidData => {
                say_err!("guardctl: skipped an event it cannot read: {e}");
            }
            Err(e) => {
                say_err!("guardctl: {e}");
                return ExitCode::from(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use guard::bus::{Action, Divergence, Effect};

    use super::*;

    #[test]
    fn a_follower_skips_a_frame_it_cannot_read_and_goes_on() {
        use std::io::{BufRead as _, Write as _};
        let dir = std::env::temp_dir().join(format!("guardctl-skip-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let socket = dir.join("guard.sock");
        let _ = std::fs::remove_file(&socket);
        let listener = std::os::unix::net::UnixListener::bind(&socket).expect("bind");
        let server = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().expect("accept");
            let mut line = String::new();
            std::io::BufReader::new(&conn)
                .read_line(&mut line)
                .expect("subscribe");
            // The reply, a frame with a key twice, and nothing more: the follower must reach
            // the end of the stream (69), not stop at the frame (1).
            conn.write_all(b"{\"v\":1,\"type\":\"subscribed\"}\n")
                .expect("write");
            conn.write_all(b"{\"v\":1,\"type\":\"event\",\"ts\":\"t\",\"kind\":\"divergence\",\"effect\":\"dns\",\"name\":\"x\",\"type\":\"A\",\"action\":\"deny\"}\n").expect("write");
        });
        let filter = Filter {
            kind: None,
            tool: None,
            decision: None,
            call: None,
            since: None,
        };
        let code = events(Some(socket), &dir.join("audit"), true, true, filter);
        server.join().expect("server");
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(format!("{code:?}"), format!("{:?}", ExitCode::from(69)));
    }

    #[test]
    fn a_name_a_call_chose_reaches_the_terminal_escaped() {
        // Erase the line, go up, and print a harmless one instead: an open a call made, as a
        // divergence names it.
        let path = "/srv/ws/\x1b[2K\x1b[1A\rx";
        let open = Effect::Open {
            path: path.into(),
            flags: 1,
        };
        let what = What::Divergence(Divergence::new(open, Action::Kill, None));
        let line = human(&Event::of(Some("c1"), Some("t"), what), false);
        assert!(!line.contains('\x1b') && !line.contains('\r'), "{line:?}");
        assert!(
            line.contains(r"/srv/ws/\u{1b}[2K\u{1b}[1A\u{d}x"),
            "{line:?}"
        );
    }
}
