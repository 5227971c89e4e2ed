//! attack39's findings against shadow mode, kept as regressions: a workspace's own policy holds
//! for a tool the base runs in shadow; an inbound connection enforcing would drop is counted;
//! an enforced call's receipt does not depend on a call in shadow beside it; and a call in
//! shadow asking ever new names grows nothing of guardd's.

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::Output,
    time::Duration,
};

use super::{
    escape::{self, Setup},
    support::{self, Guardd, NOBODY, TempDir, output},
};

/// `escape::Setup`'s policy with `tt` in shadow.
fn shadow_policy(s: &Setup, effects: &str, extra: &str) -> String {
    s.policy(effects, extra)
        .replacen("[tools.tt]\n", "[tools.tt]\nenforce = \"shadow\"\n", 1)
}

/// A workspace of `nobody`'s under `[workspaces]`, and a shell in shadow that runs as
/// guard-tool and may write the workspace.
struct Ws {
    _root: TempDir,
    a: PathBuf,
    guardd: Guardd,
}

fn workspace() -> Ws {
    let root = TempDir::new("guard-shadow-ws");
    let projects = std::fs::canonicalize(&root.0)
        .expect("real path")
        .join("projects");
    let a = projects.join("a");
    std::fs::create_dir_all(a.join(".guard")).expect("mkdir");
    for p in [&projects, &a] {
        std::os::unix::fs::chown(p, Some(NOBODY), Some(NOBODY)).expect("chown");
        let mode = std::os::unix::fs::PermissionsExt::from_mode(0o777);
        std::fs::set_permissions(p, mode).expect("chmod");
    }
    let policy = format!(
        r#"
[workspaces]
roots = ["{}/*"]
[settings]
clients = [{NOBODY}]
enforce = "shadow"

[tools.shell]
tier = "medium"
command = ["/bin/sh", "-c", "{{command}}"]
cwd = "{{cwd}}"
timeout = 30
env = {{ PATH = "/usr/bin:/bin" }}
[tools.shell.args.command]
type = "string"
[tools.shell.effects]
read = ["{{workspace}}", "/usr", "/etc", "/dev/null"]
write = ["{{workspace}}", "/dev/null"]
exec = ["/usr/bin", "/bin"]
on_divergence = "deny"
"#,
        projects.display()
    );
    let guardd = Guardd::start_with(&policy, &["--socket-group", "nogroup"]);
    Ws {
        _root: root,
        a,
        guardd,
    }
}

impl Ws {
    fn shell(&self, dir: &Path, command: &str) -> Output {
        let args = serde_json::json!({ "command": command }).to_string();
        let mut c = self.guardd.exec("shell", &["--args", &args]);
        c.current_dir(dir).uid(NOBODY).gid(NOBODY);
        output(c)
    }
}

#[test]
fn a_project_policys_refusal_holds_for_a_tool_the_base_runs_in_shadow() {
    if !support::privileged("a_project_policys_refusal_holds_for_a_tool_the_base_runs_in_shadow") {
        return;
    }
    let w = workspace();
    // Without a project policy: in shadow, as the base says.
    let ran = w.shell(&w.a, "echo one > first");
    assert_eq!(ran.status.code(), Some(0), "{ran:?}");
    let rows = w.guardd.audit_rows();
    let decision = rows.iter().rev().find(|r| r["kind"] == "decision");
    assert_eq!(
        decision.map(|d| &d["decision"]["metadata"]["enforce"]),
        Some(&serde_json::json!("shadow")),
        "{rows:?}"
    );
    std::fs::write(
        w.a.join(".guard/policy.toml"),
        "[[rules]]\nid = \"no-marker\"\ntools = [\"shell\"]\narg = \"command\"\n\
         regex = \".*marker.*\"\naction = \"block\"\n",
    )
    .expect("project policy");
    let out = w.shell(&w.a, "echo pwned > marker");
    assert_eq!(out.status.code(), Some(126), "{out:?}");
    assert!(
        !w.a.join("marker").exists(),
        "a project's block ran in shadow"
    );
    // What the project allows runs enforced: its row is not marked.
    let ok = w.shell(&w.a, "echo two > second");
    assert_eq!(ok.status.code(), Some(0), "{ok:?}");
    let rows = w.guardd.audit_rows();
    let last = rows
        .iter()
        .rev()
        .find(|r| r["kind"] == "finished")
        .expect("row");
    assert!(last.get("enforce").is_none(), "{last}");
}

#[test]
fn an_inbound_connection_enforcing_would_drop_is_counted_in_shadow() {
    if !support::privileged("an_inbound_connection_enforcing_would_drop_is_counted_in_shadow") {
        return;
    }
    let s = Setup::new();
    let effects = "connect = [\"127.0.0.1:9\"]\non_divergence = \"deny\"";
    let guardd = Guardd::start(&shadow_policy(&s, effects, ""));
    let (caller, mut lines, first) = escape::started(&guardd, &["tcp-listen", "5"]);
    let port: u16 = first
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("listening <port>: {first:?}"));
    let reached = escape::tcp_from(0, port);
    let rest: Vec<String> = lines.by_ref().map_while(Result::ok).collect();
    let out = caller.wait_with_output().expect("guard-exec");
    let seen = &escape::last_receipt(&guardd)["effects_observed"];
    assert_eq!(reached, Ok(()), "let through in shadow: {rest:?} {out:?}");
    assert!(seen["inbound_dropped"].as_u64() > Some(0), "{seen:#}");
}

#[test]
fn an_enforced_calls_receipt_is_the_same_beside_a_call_in_shadow() {
    if !support::privileged("an_enforced_calls_receipt_is_the_same_beside_a_call_in_shadow") {
        return;
    }
    let s = Setup::new();
    let sleeper = format!(
        "[tools.sl]\ntier = \"low\"\nenforce = \"shadow\"\ncommand = [\"{}\", \"sleep\", \"6\"]\n",
        s.tool.display()
    );
    let guardd = Guardd::start(&s.policy("on_divergence = \"deny\"", &sleeper));
    let verdict = |guardd: &Guardd| {
        let out = escape::call(guardd, &["unshare-user"]);
        let row = escape::last_receipt(guardd);
        let seen = &row["effects_observed"];
        (
            out.status.code(),
            seen["verdict"].clone(),
            seen["refused"].clone(),
        )
    };
    let alone = verdict(&guardd);
    let mut sl = guardd.exec("sl", &[]);
    sl.stdout(std::process::Stdio::null());
    let mut running = sl.spawn().expect("sl");
    std::thread::sleep(Duration::from_millis(1500));
    let beside = verdict(&guardd);
    let _ = running.wait();
    assert_eq!(alone, beside, "alone, and beside a call in shadow");
}

#[test]
fn a_call_in_shadow_asking_ever_new_names_grows_nothing_of_guardds() {
    if !support::privileged("a_call_in_shadow_asking_ever_new_names_grows_nothing_of_guardds") {
        return;
    }
    let s = Setup::new();
    let policy =
        shadow_policy(&s, "on_divergence = \"deny\"", "").replace("timeout = 20", "timeout = 120");
    let guardd = Guardd::start(&policy);
    let peak = |pid: u32| -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    let before = peak(guardd.child.id());
    // 60,000 names of 140 bytes each, 128 in flight: kept whole, about 20 MB.
    let script = r#"
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.settimeout(3)
def q(i, name):
    out = struct.pack('>HHHHHH', i & 0xffff, 0x0100, 1, 0, 0, 0)
    for label in name.split('.'):
        out += bytes([len(label)]) + label.encode()
    return out + b'\x00' + struct.pack('>HH', 1, 1)
pad = 'a' * 60
got = 0
for i in range(0, 60000, 128):
    for j in range(i, i + 128):
        s.sendto(q(j, 'x%d.%s.%s.example' % (j, pad, pad)), ('192.0.2.1', 53))
    for _ in range(128):
        try:
            s.recv(512); got += 1
        except Exception:
            break
print('answered', got)
"#;
    let out = escape::call(&guardd, &["exec", "/usr/bin/python3", "-c", script]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("answered 60"),
        "{out:?}"
    );
    let after = peak(guardd.child.id());
    assert!(
        after < before + 8 * 1024,
        "guardd's peak grew by {} kB from one call's names",
        after - before
    );
}
