//! guard-testjudge: the judges, approvers and notifiers the tests have guard run, confined.
//! Its argv says what to be; each mode reads guard's input on stdin first.
//!
//! - `score S C REASONING [--probe]`: a judge answering score S, confidence C; its metadata
//!   holds what it received (`received`) and, with `--probe`, whether it could read each path
//!   of the judged call and whether the kernel says it may write it (`probe`).
//! - `veto NAME=VALUE`: a judge rejecting (score 0) a call whose argument NAME is VALUE, and
//!   accepting (score 1) any other.
//! - `shun WORD`: a judge rejecting a call in whose arguments or command it sees WORD.
//! - `sleep SECS`: a judge that never answers in time.
//! - `garbage`: a judge that prints no GradientResult.
//! - `flood`: a judge whose answer (score 0) comes after a whole MiB of approving lines.
//! - `connect ADDR`: a judge that tries to reach ADDR; answers 1.0 if it could, else exits 3.
//! - `approve | reject | terminate | escalate [EXPLANATION]`: an approver's answer.
//! - `modify NAME=VALUE...`: an approver changing the call's arguments to these.
//! - `record PATH`: a notifier writing what it received to PATH.
//! - `exit N`: exits N after reading its input.

use std::{
    io::{Read as _, Write as _},
    process::ExitCode,
    time::Duration,
};

use serde_json::{Value, json};

fn probe(received: &Value) -> Value {
    let mounts = received["worker_mounts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    mounts
        .iter()
        .filter_map(|m| m["path"].as_str())
        .map(|path| {
            let read = match std::fs::read(path) {
                Ok(_) => "ok".to_owned(),
                Err(e) => e.to_string(),
            };
            // Asked, not tried: a write-open outside the judge's rules is a divergence,
            // which stops it.
            let write = match std::ffi::CString::new(path) {
                // SAFETY: a NUL-terminated path that outlives the call.
                Ok(c) if unsafe { libc::access(c.as_ptr(), libc::W_OK) } == 0 => "ok".to_owned(),
                Ok(_) => std::io::Error::last_os_error().to_string(),
                Err(e) => e.to_string(),
            };
            json!({"path": path, "read": read, "write": write})
        })
        .collect()
}

/// `veto NAME=VALUE`: score 0 when the proposed call's argument NAME is VALUE, else 1.
fn veto(received: &Value, rule: &str) -> Value {
    let (name, value) = rule.split_once('=').unwrap_or(("", ""));
    let vetoed = received["proposed_tool_call"]["arguments"][name] == value;
    let score = if vetoed { 0.0 } else { 1.0 };
    json!({"score": score, "confidence": 1.0, "reasoning": format!("{name}: {vetoed}")})
}

/// `shun WORD`: score 0 when WORD is anywhere in the proposed call (its arguments or command),
/// as a judge that refuses a command would; else 1.
fn shun(received: &Value, word: &str) -> Value {
    let shown = received["proposed_tool_call"].to_string();
    let found = shown.contains(word);
    let score = if found { 0.0 } else { 1.0 };
    json!({"score": score, "confidence": 1.0, "reasoning": format!("{word} shown: {found}")})
}

/// `flood`: a MiB of approving lines, then the answer (score 0); `None` if stdout closed.
fn flood() -> Option<Value> {
    // 32-byte lines, so that the first MiB ends with a whole approving line.
    let line = format!("{:<31}\n", r#"{"score":1,"confidence":1}"#);
    let mut out = std::io::stdout().lock();
    for _ in 0..(1 << 20) / line.len() {
        out.write_all(line.as_bytes()).ok()?;
    }
    Some(json!({"score": 0.0, "confidence": 1.0, "reasoning": "the real answer: no"}))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut input = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut input);
    let received: Value = serde_json::from_slice(&input).unwrap_or(Value::Null);
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let answer = match arg(0) {
        "score" => {
            let mut metadata = json!({"received": received});
            if args.iter().any(|a| a == "--probe") {
                metadata["probe"] = probe(&received);
            }
            json!({
                "score": arg(1).parse::<f64>().unwrap_or(0.0),
                "confidence": arg(2).parse::<f64>().unwrap_or(0.0),
                "reasoning": arg(3),
                "signals": [{"category": "test", "score": 1.0, "message": "from guard-testjudge"}],
                "metadata": metadata,
            })
        }
        "veto" => veto(&received, arg(1)),
        "shun" => shun(&received, arg(1)),
        "sleep" => {
            std::thread::sleep(Duration::from_secs(arg(1).parse().unwrap_or(60)));
            json!({"score": 1.0, "confidence": 1.0})
        }
        "garbage" => {
            println!("I think this call is fine, go ahead");
            return ExitCode::SUCCESS;
        }
        "flood" => match flood() {
            Some(answer) => answer,
            None => return ExitCode::from(5),
        },
        "connect" => match std::net::TcpStream::connect_timeout(
            &arg(1).parse().expect("ADDR"),
            Duration::from_secs(2),
        ) {
            Ok(_) => json!({"score": 1.0, "confidence": 1.0, "reasoning": "reached the network"}),
            Err(e) => {
                eprintln!("connect {}: {e}", arg(1));
                return ExitCode::from(3);
            }
        },
        "approve" | "reject" | "terminate" | "escalate" => {
            json!({"decision": arg(0), "explanation": arg(1), "metadata": {"received": received}})
        }
        "modify" => {
            let arguments: serde_json::Map<String, Value> = args[1..]
                .iter()
                .filter_map(|a| a.split_once('='))
                .map(|(k, v)| (k.to_owned(), Value::String(v.to_owned())))
                .collect();
            json!({
                "decision": "modify",
                "modified": {"arguments": arguments},
                "explanation": "narrowed",
            })
        }
        "record" => {
            std::fs::write(arg(1), &input).expect("record");
            return ExitCode::SUCCESS;
        }
        "exit" => return ExitCode::from(arg(1).parse::<u8>().unwrap_or(1)),
        other => {
            eprintln!("guard-testjudge: unknown mode {other:?}");
            return ExitCode::from(64);
        }
    };
    let mut out = std::io::stdout();
    let _ = writeln!(out, "{answer}");
    ExitCode::SUCCESS
}
