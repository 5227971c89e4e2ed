//! A guest's report, as one line of the matrix: the kernel, the layers guardd found active,
//! whether `bpf` is among the kernel's LSMs, the four calls and the end-to-end tests.

use serde_json::Value;

/// The row's text and whether everything that ran passed.
pub fn summary(r: &Value, quick: bool) -> (String, bool) {
    let mut parts = vec![r["release"].as_str().unwrap_or("?").to_owned()];
    let mut passed = true;
    let g = &r["guardd"];
    if g["started"] == true {
        parts.push(format!(
            "guardd up in {:.1} s",
            g["start_s"].as_f64().unwrap_or(0.0)
        ));
        parts.push(format!("layers: {}", layers(&g["layers"])));
        let (calls, ok) = calls(&g["calls"]);
        parts.push(format!("calls: {calls}"));
        passed &= ok;
    } else {
        passed = false;
        let said = g["stderr"]
            .as_str()
            .unwrap_or("")
            .lines()
            .rev()
            .find(|l| l.starts_with("guardd:"));
        let why = said.or(g["error"].as_str()).unwrap_or("?");
        let why = why.split(" Verifier output").next().unwrap_or(why);
        parts.push(format!("guardd REFUSED TO START: {}", first_line(why, 160)));
        if let Some(v) = verifier(g["stderr"].as_str().unwrap_or("")) {
            parts.push(format!("the verifier: {v}"));
        }
        let u = &g["unenforced"];
        if u["started"] == true {
            parts.push(format!(
                "with --allow-unenforced: layers: {}",
                layers(&u["layers"])
            ));
            parts.push(format!("calls (unenforced): {}", outcomes(&u["calls"])));
        }
    }
    let lsm = r["lsm"].as_str().unwrap_or("");
    let bpf = lsm.split(',').any(|l| l == "bpf");
    parts.push(format!(
        "bpf LSM {}",
        if bpf {
            "in the LSM list"
        } else {
            "not in the LSM list"
        }
    ));
    if !quick {
        let tests = r["tests"].as_array().cloned().unwrap_or_default();
        let ok = tests.iter().filter(|t| t["ok"] == true).count();
        let failed: Vec<&str> = tests
            .iter()
            .filter(|t| t["ok"] != true)
            .filter_map(|t| t["name"].as_str())
            .map(|n| n.rsplit("::").next().unwrap_or(n))
            .collect();
        passed &= failed.is_empty() && !tests.is_empty();
        if tests.is_empty() {
            parts.push("no e2e test ran".into());
        } else {
            let mut text = format!("e2e {ok}/{}", tests.len());
            if !failed.is_empty() {
                text.push_str(&format!(" (FAILED: {})", failed.join(", ")));
            }
            parts.push(text);
        }
    }
    if let Some(m) = r["mount_failures"].as_array().filter(|m| !m.is_empty()) {
        let m: Vec<&str> = m.iter().filter_map(Value::as_str).collect();
        parts.push(format!("not mounted: {}", m.join(", ")));
    }
    (parts.join("; "), passed)
}

/// The active layers, the landlock one with its detail, the kernel programs counted.
fn layers(layers: &Value) -> String {
    let mut out = Vec::new();
    let mut programs = 0;
    for l in layers.as_array().into_iter().flatten() {
        let (name, state) = (
            l["name"].as_str().unwrap_or("?"),
            l["state"].as_str().unwrap_or("?"),
        );
        if name.starts_with("ebpf:") {
            programs += usize::from(state == "active");
            continue;
        }
        let shown = match name {
            "landlock" => format!("landlock {}", l["detail"].as_str().unwrap_or("")),
            _ => name.to_owned(),
        };
        out.push(if state == "active" {
            shown
        } else {
            format!("{shown} ({state})")
        });
    }
    out.push(format!("{programs} kernel programs"));
    out.join(", ")
}

/// The four calls, each with what it met; whether each met what it should.
fn calls(c: &Value) -> (String, bool) {
    let code = |k: &str| c[k]["code"].as_i64();
    let err = |k: &str| c[k]["stderr"].as_str().unwrap_or("").to_owned();
    let exec = code("approved_exec") == Some(0);
    let killed = code("undeclared_exec") == Some(137);
    let connect = code("approved_connect") == Some(0);
    let refused =
        code("undeclared_connect") == Some(1) && err("undeclared_connect").starts_with("ERR EPERM");
    let said = |ok: bool, good: &str, k: &str| {
        if ok {
            good.to_owned()
        } else {
            format!("{k} UNEXPECTED ({:?} {})", code(k), err(k))
        }
    };
    let text = [
        said(exec, "approved exec ran", "approved_exec"),
        said(killed, "undeclared exec killed", "undeclared_exec"),
        said(connect, "approved connect made", "approved_connect"),
        said(refused, "undeclared connect EPERM", "undeclared_connect"),
    ];
    (text.join(", "), exec && killed && connect && refused)
}

/// The first line of `text`, cut at `max` characters.
fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(max) {
        Some((at, _)) => format!("{}...", &line[..at]),
        None => line.to_owned(),
    }
}

/// The verifier's last word before its statistics, when a program was refused.
fn verifier(stderr: &str) -> Option<&str> {
    let lines: Vec<&str> = stderr.lines().collect();
    let at = lines
        .iter()
        .position(|l| l.starts_with("verification time"))?;
    lines.get(at.checked_sub(1)?).copied()
}

/// What each of the four calls met, without expectations (a guardd running unenforced).
fn outcomes(c: &Value) -> String {
    [
        "approved_exec",
        "undeclared_exec",
        "approved_connect",
        "undeclared_connect",
    ]
    .iter()
    .map(|k| {
        let code = c[k]["code"].as_i64().map_or("-".into(), |c| c.to_string());
        let err = c[k]["stderr"].as_str().unwrap_or("");
        let err = err.split(" (").next().unwrap_or(err);
        format!(
            "{} exit {code}{}",
            k.replace('_', " "),
            if err.is_empty() {
                String::new()
            } else {
                format!(" {err}")
            }
        )
    })
    .collect::<Vec<_>>()
    .join(", ")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn call(code: i64, stderr: &str) -> Value {
        json!({"code": code, "stderr": stderr})
    }

    fn report(undeclared_connect: Value) -> Value {
        json!({
            "release": "6.12.0",
            "lsm": "landlock,bpf",
            "guardd": {
                "started": true,
                "start_s": 4.0,
                "layers": [
                    {"name": "landlock", "state": "active", "detail": "ABI 6"},
                    {"name": "seccomp", "state": "active", "detail": ""},
                    {"name": "ebpf:exec", "state": "active", "detail": "attached"},
                    {"name": "ebpf:syscalls", "state": "off", "detail": ""},
                ],
                "calls": {
                    "approved_exec": call(0, ""),
                    "undeclared_exec": call(137, "denied"),
                    "approved_connect": call(0, ""),
                    "undeclared_connect": undeclared_connect,
                },
            },
            "tests": [{"name": "suite::escape::x", "ok": true}],
        })
    }

    #[test]
    fn a_row_passes_only_when_every_call_meets_what_it_should() {
        let (line, passed) = summary(&report(call(1, "ERR EPERM 1 (connect)")), false);
        assert!(passed, "{line}");
        assert!(
            line.contains("landlock ABI 6, seccomp, 1 kernel programs"),
            "{line}"
        );
        assert!(
            line.contains("undeclared connect EPERM") && line.contains("e2e 1/1"),
            "{line}"
        );
        assert!(line.contains("bpf LSM in the LSM list"), "{line}");
        // A connect that went through fails the row, and says what it met.
        let (line, passed) = summary(&report(call(0, "")), false);
        assert!(
            !passed && line.contains("undeclared_connect UNEXPECTED"),
            "{line}"
        );
    }

    #[test]
    fn a_refused_start_fails_the_row_with_guardds_reason_and_the_verifiers_last_word() {
        let stderr = "WARN x\nguardd: kernel layer ebpf unavailable: program egress. Verifier output: 0: r1\n\
                      unknown func bpf_get_current_pid_tgid#14\nverification time 3 usec\n";
        let r = json!({"release": "6.1.0", "lsm": "landlock", "guardd": {
            "started": false, "error": "exited", "stderr": stderr}, "tests": []});
        let (line, passed) = summary(&r, true);
        assert!(!passed);
        assert!(
            line.contains(
                "REFUSED TO START: guardd: kernel layer ebpf unavailable: program egress."
            ),
            "{line}"
        );
        assert!(
            line.contains("the verifier: unknown func bpf_get_current_pid_tgid#14"),
            "{line}"
        );
        assert!(line.contains("bpf LSM not in the LSM list"), "{line}");
    }
}
