//! `guardctl status` and `guardctl events`: what guardd is doing now, and what it did.

use std::{io::IsTerminal as _, path::Path, process::ExitCode, time::Duration};

use guard::client::{self, Client};
use serde_json::{Value, json};

/// Connects or explains, in one line, why not.
fn connect(socket: &Path) -> Result<Client, ExitCode> {
    Client::connect(socket).map_err(|e| {
        eprintln!("guardctl: guardd unreachable at {}: {e}", socket.display());
        ExitCode::from(69)
    })
}

/// The audit log to read: `given`, else the one the running guardd writes (its status says),
/// else the default path, saying so: history from a log guardd does not write would mislead.
pub fn audit_path(
    socket: Option<std::path::PathBuf>,
    given: Option<std::path::PathBuf>,
) -> std::path::PathBuf {
    if let Some(path) = given {
        return path;
    }
    let socket = client::socket_path(socket);
    let asked = Client::connect(&socket)
        .ok()
        .and_then(|mut c| c.request("status", json!({})).ok())
        .and_then(|s| s["audit"]["path"].as_str().map(std::path::PathBuf::from));
    asked.unwrap_or_else(|| {
        eprintln!(
            "guardctl: guardd unreachable at {}; reading {} (--audit to choose)",
            socket.display(),
            guard::audit::DEFAULT_PATH
        );
        guard::audit::DEFAULT_PATH.into()
    })
}

pub fn status(socket: Option<std::path::PathBuf>, as_json: bool) -> ExitCode {
    let socket = client::socket_path(socket);
    let mut client = match connect(&socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let status = match client.request("status", json!({})) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("guardctl: {e}");
            return ExitCode::from(1);
        }
    };
    if as_json {
        println!("{status}");
        return ExitCode::SUCCESS;
    }
    println!(
        "guardd pid {}  up {}s  socket {}",
        status["pid"],
        status["uptime_s"],
        socket.display()
    );
    let enforced = if status["enforced"] == true {
        "enforced"
    } else {
        "UNENFORCED"
    };
    println!(
        "policy {} ({} tools)  {enforced}",
        str_of(&status["policy"]["path"]),
        status["policy"]["tools"]
    );
    let admitting = if status["audit"]["admitting"] == false {
        "FULL: admitting no call until the reserve for running calls' rows is back"
    } else {
        "admitting calls"
    };
    println!("audit {}  {admitting}", str_of(&status["audit"]["path"]));
    println!(
        "limits {}  dropped kernel events {}",
        str_of(&status["limits"]),
        status["dropped_events"]
    );
    println!("layers:");
    for layer in status["layers"].as_array().into_iter().flatten() {
        println!(
            "  {:<22} {:<10} {}",
            str_of(&layer["name"]),
            str_of(&layer["state"]),
            str_of(&layer["detail"])
        );
    }
    let running = status["running"].as_array().cloned().unwrap_or_default();
    println!(
        "running calls: {}  queued: {}",
        running.len(),
        status["queued"]
    );
    for call in running {
        println!(
            "  {:<16} {:<16} pid {:<8} uid {:<6} since {}",
            str_of(&call["call_id"]),
            str_of(&call["tool"]),
            call["pid"],
            call["peer_uid"],
            str_of(&call["started"])
        );
    }
    ExitCode::SUCCESS
}

fn str_of(v: &Value) -> &str {
    v.as_str().unwrap_or("-")
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
    fn keeps(&self, event: &Value) -> bool {
        if let Some(kind) = &self.kind
            && event["kind"].as_str() != Some(kind.as_str())
        {
            return false;
        }
        if let Some(call) = &self.call
            && event["call_id"].as_str() != Some(call)
        {
            return false;
        }
        if let Some(tool) = &self.tool
            && !event["tool"]
                .as_str()
                .is_some_and(|t| guard::policy::glob_match(tool, t))
        {
            return false;
        }
        if let Some(d) = &self.decision {
            let decision = event["decision"]
                .as_str()
                .or_else(|| event["decision"]["decision"].as_str());
            if decision != Some(d.as_str()) {
                return false;
            }
        }
        true
    }
}

/// One aligned line per event, colored on a terminal unless NO_COLOR is set.
fn human(event: &Value, color: bool) -> String {
    let kind = event["kind"].as_str().unwrap_or("?");
    let paint = match kind {
        "divergence" | "kill" => "31",
        "decision" if event["decision"] != "allow" => "33",
        "decision" | "launch" => "32",
        _ => "0",
    };
    // In the manner of `tetra getevents -o compact`: what ran, for whom, and how it ended.
    let detail = match kind {
        "decision" => format!(
            "{} uid {} {}",
            str_of(&event["decision"]),
            event["uid"],
            str_of(&event["reason"])
        ),
        "held" => format!(
            "{} uid {}: {} (guardctl approve {}; {} s)",
            str_of(&event["decision"]),
            event["uid"],
            str_of(&event["reason"]),
            str_of(&event["call_id"]),
            event["timeout_s"]
        ),
        "approval" => match (event["approved"].as_bool(), event["reason"].as_str()) {
            (Some(true), _) => format!("approved by uid {}", event["by"]),
            (_, Some(reason)) => format!("denied by uid {}: {reason}", event["by"]),
            _ => format!("denied by uid {}", event["by"]),
        },
        "launch" => format!(
            "{} ({} args) uid {} pid {}",
            str_of(&event["program"]),
            event["args"],
            event["uid"],
            event["pid"]
        ),
        "divergence" => format!(
            "{} {} pid {} -> {}",
            str_of(&event["effect"]),
            event["path"]
                .as_str()
                .or_else(|| event["name"].as_str())
                .or_else(|| event["syscall"].as_str())
                .map_or_else(
                    || format!("{}:{}", str_of(&event["addr"]), event["port"]),
                    str::to_owned
                ),
            event["pid"],
            str_of(&event["action"])
        ),
        "exit" => format!(
            "code {} in {} ms{}",
            event["code"],
            event["duration_ms"]
                .as_f64()
                .map_or("-".into(), |d| format!("{d:.1}")),
            if event["diverged"] == true {
                ", diverged"
            } else {
                ""
            }
        ),
        "kill" | "refused" => str_of(&event["reason"]).to_owned(),
        "reload" => match event["error"].as_str() {
            Some(e) => format!("policy kept: {e}"),
            None => format!("{} tools", event["tools"]),
        },
        _ => String::new(),
    };
    let kind_col = format!("{kind:<10}");
    let kind_col = if color {
        format!("\x1b[{paint}m{kind_col}\x1b[0m")
    } else {
        kind_col
    };
    format!(
        "{} {kind_col} {:<16} {:<16} {detail}",
        str_of(&event["ts"]),
        str_of(&event["call_id"]),
        str_of(&event["tool"])
    )
}

pub fn events(
    socket: Option<std::path::PathBuf>,
    audit: &Path,
    follow: bool,
    as_json: bool,
    filter: Filter,
) -> ExitCode {
    let color =
        !as_json && std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    let print = |event: &Value| {
        if filter.keeps(event) {
            if as_json {
                println!("{event}")
            } else {
                println!("{}", human(event, color))
            }
        }
    };
    if !follow {
        return history(audit, &filter, print);
    }
    let socket = client::socket_path(socket);
    let mut client = match connect(&socket) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if let Err(e) = client.request(
        "subscribe",
        json!({ "tool": filter.tool, "call": filter.call }),
    ) {
        eprintln!("guardctl: {e}");
        return ExitCode::from(1);
    }
    loop {
        match client.recv() {
            Ok(Some(mut frame)) => {
                if let Some(map) = frame.as_object_mut() {
                    map.remove("v");
                    map.remove("type");
                }
                print(&frame);
            }
            Ok(None) => {
                // A follower that ends quietly looks like a quiet guard: say it, and fail.
                eprintln!("guardctl: guardd closed the event stream (stopped or restarted)");
                return ExitCode::from(69);
            }
            Err(e) => {
                eprintln!("guardctl: {e}");
                return ExitCode::from(1);
            }
        }
    }
}

/// Recent history: events rebuilt from the audit log's rows.
fn history(audit: &Path, filter: &Filter, print: impl Fn(&Value)) -> ExitCode {
    let cutoff = filter.since.map(|d| std::time::SystemTime::now() - d);
    let rows = match guard::audit::read_rows(audit) {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("guardctl: audit log {}: {e}", audit.display());
            return ExitCode::from(2);
        }
    };
    for row in rows {
        let row = match row {
            Ok(r) => r,
            Err(e) => {
                eprintln!("guardctl: audit log {}: {e}", audit.display());
                return ExitCode::from(2);
            }
        };
        if let Some(cutoff) = cutoff {
            let ts = row["ts"].as_str().unwrap_or_default();
            if ts < guard::audit::ts::format(cutoff).as_str() {
                continue;
            }
        }
        let event = match row["kind"].as_str() {
            Some("decision") => json!({
                "ts": row["ts"], "kind": "decision", "call_id": row["call_id"], "tool": row["tool"],
                "decision": row["decision"]["decision"], "reason": row["decision"]["reason"],
                "uid": row["peer"]["uid"],
            }),
            Some("approval") => json!({
                "ts": row["ts"], "kind": "approval", "call_id": row["call_id"], "tool": row["tool"],
                "approved": row["approved"], "by": row["by"], "reason": row["reason"],
            }),
            Some("finished") => json!({
                "ts": row["ts"], "kind": "exit", "call_id": row["call_id"], "tool": row["tool"],
                "code": row["exit"]["exit_code"], "diverged": row["effects_observed"]["verdict"] == "diverged",
                "duration_ms": row["duration_ms"],
            }),
            _ => continue,
        };
        print(&event);
    }
    ExitCode::SUCCESS
}

/// Every call in the audit log, in order: its decision row and, once it ended, its finished row.
fn calls_in(audit: &Path) -> Result<Vec<(Value, Option<Value>)>, String> {
    let rows = guard::audit::read_rows(audit)
        .map_err(|e| format!("audit log {}: {e}", audit.display()))?;
    let mut calls: Vec<(Value, Option<Value>)> = Vec::new();
    let mut index = std::collections::HashMap::new();
    for row in rows {
        let row = Value::Object(row.map_err(|e| format!("audit log {}: {e}", audit.display()))?);
        let Some(id) = row["call_id"].as_str().map(str::to_owned) else {
            continue;
        };
        match row["kind"].as_str() {
            Some("decision") => {
                index.insert(id, calls.len());
                calls.push((row, None));
            }
            Some("finished") => {
                if let Some(&i) = index.get(&id) {
                    calls[i].1 = Some(row);
                }
            }
            _ => {}
        }
    }
    Ok(calls)
}

/// `guardctl calls`: recent calls from the audit log, or with `--running` those running now.
pub fn calls(
    socket: Option<std::path::PathBuf>,
    audit: &Path,
    running: bool,
    as_json: bool,
) -> ExitCode {
    if running {
        let socket = client::socket_path(socket);
        let mut client = match connect(&socket) {
            Ok(c) => c,
            Err(code) => return code,
        };
        return match client.request("status", json!({})) {
            Ok(status) => {
                for call in status["running"].as_array().into_iter().flatten() {
                    if as_json {
                        println!("{call}");
                    } else {
                        println!(
                            "{:<18} {:<16} pid {:<8} since {}",
                            str_of(&call["call_id"]),
                            str_of(&call["tool"]),
                            call["pid"],
                            str_of(&call["started"])
                        );
                    }
                }
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("guardctl: {e}");
                ExitCode::from(1)
            }
        };
    }
    let calls = match calls_in(audit) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("guardctl: {e}");
            return ExitCode::from(2);
        }
    };
    for (decision, finished) in calls {
        let summary = json!({
            "call_id": decision["call_id"],
            "ts": decision["ts"],
            "tool": decision["tool"],
            "uid": decision["peer"]["uid"],
            "decision": decision["decision"]["decision"],
            "exit_code": finished.as_ref().map(|f| f["exit"]["exit_code"].clone()),
            "verdict": finished.as_ref().map(|f| f["effects_observed"]["verdict"].clone()),
        });
        if as_json {
            println!("{summary}");
        } else {
            let exit = summary["exit_code"]
                .as_i64()
                .map_or("-".to_owned(), |c| c.to_string());
            println!(
                "{} {:<18} {:<16} uid {:<6} {:<10} exit {:<4} {}",
                str_of(&summary["ts"]),
                str_of(&summary["call_id"]),
                str_of(&summary["tool"]),
                summary["uid"],
                str_of(&summary["decision"]),
                exit,
                str_of(&summary["verdict"])
            );
        }
    }
    ExitCode::SUCCESS
}

/// `guardctl show CALL_ID`: one call's decision, sandbox and receipt.
pub fn show(audit: &Path, call_id: &str) -> ExitCode {
    let calls = match calls_in(audit) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("guardctl: {e}");
            return ExitCode::from(2);
        }
    };
    let Some((decision, finished)) = calls.into_iter().find(|(d, _)| d["call_id"] == call_id)
    else {
        eprintln!("guardctl: no call {call_id} in {}", audit.display());
        return ExitCode::from(1);
    };
    let shown = json!({
        "call_id": call_id,
        "tool": decision["tool"],
        "peer": decision["peer"],
        "args": decision["args"],
        "decision": decision["decision"],
        "enforced": decision["enforced"],
        "sandbox": finished.as_ref().map(|f| f["sandbox"].clone()),
        "effects_observed": finished.as_ref().map(|f| f["effects_observed"].clone()),
        "exit": finished.as_ref().map(|f| f["exit"].clone()),
        "error": finished.as_ref().map(|f| f["error"].clone()),
        "duration_ms": finished.as_ref().map(|f| f["duration_ms"].clone()),
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&shown).unwrap_or_default()
    );
    ExitCode::SUCCESS
}
