//! `[agents]` (issue 33, part 1): who a caller is comes from the kernel (its uid, its cgroup),
//! and its agent bounds what it may call (tools, tier), how many at once and how often. Real
//! callers under several uids, one of them in a cgroup of its own, through guard-exec.

use std::{
    fs,
    os::unix::{fs::PermissionsExt as _, process::CommandExt as _},
    path::Path,
    process::{Child, Command, Output, Stdio},
    time::{Duration, Instant},
};

use serde_json::Value;

use super::{
    fair::{as_uid, runnable, timed},
    support::{self, FORK_LOCK, Guardd, ToolDir},
};

/// Ids of no user: the builder, the reader, a client no agent names, the rate-bound agent,
/// and the uid whose agent is its cgroup.
const BUILDER: u32 = 40_011;
const READER: u32 = 40_012;
const NOBODYS: u32 = 40_013;
const RATED: u32 = 40_014;
const SCOPED: u32 = 40_015;
const TWICE: u32 = 40_016;

fn policy(cgroup: &str, judge: &Path) -> String {
    let j = judge.display();
    format!(
        r#"
[settings]
clients = [{BUILDER}, {READER}, {NOBODYS}, {RATED}, {SCOPED}, {TWICE}]
disclose_reasons = false

[agents.twice_a]
uids = [{TWICE}]
[agents.twice_b]
uids = [{TWICE}]

[[rules]]
id = "gate"
tools = ["t_term"]
action = "escalate"
message = "needs an approver"
[[approvers]]
tools = ["t_term"]
approver = '''command:["{j}", "terminate", "destructive"]'''

[agents.builder]
uids = [{BUILDER}]
tools = ["exit_with", "pause", "deploy", "t_term"]
max_tier = "medium"
max_running = 1

[agents.reader]
uids = [{READER}]
tools = ["exit_*", "pause"]
[agents.reader.labels.quick]
tools = ["exit_*"]

[agents.rated]
uids = [{RATED}]
rate = "2/min"

[agents.scoped]
uids = [{SCOPED}]
cgroups = ["{cgroup}/claude-*"]

[tools.exit_with]
tier = "low"
command = ["/bin/sh", "-c", "exit \"$0\"", "{{code}}"]
[tools.exit_with.args.code]
type = "integer"
min = 0
max = 255
[tools.exit_with.effects]
exec = ["/bin/sh"]

[tools.pause]
tier = "low"
command = ["/bin/sleep", "30"]

[tools.deploy]
tier = "high"
command = ["/bin/true"]

[tools.t_term]
tier = "low"
command = ["/bin/true"]
"#
    )
}

/// The tools `uid` is offered (a `tools` request, over the socket, as that uid).
fn offered(guardd: &Guardd, uid: u32) -> Vec<String> {
    let ask = "import socket, sys\n\
               s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
               s.sendall(b'{\"v\":1,\"type\":\"tools\"}\\n')\n\
               print(s.makefile().readline(), end='')\n";
    let mut cmd = Command::new("python3");
    cmd.args(["-c", ask]).arg(&guardd.socket);
    as_uid(&mut cmd, uid);
    let (out, _) = timed(cmd, Duration::from_secs(20)).expect("python3 ended");
    let reply: Value = serde_json::from_slice(&out.stdout).expect("a tools reply");
    let tools = reply["tools"].as_array().cloned().unwrap_or_default();
    tools
        .iter()
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// guard-exec as `uid`, its output (within 20 s).
fn call(guardd: &Guardd, exec: &Path, uid: u32, args: &[&str]) -> Output {
    let mut cmd = Command::new(exec);
    cmd.arg("--socket").arg(&guardd.socket).args(args);
    as_uid(&mut cmd, uid);
    let (out, _) = timed(cmd, Duration::from_secs(20)).expect("guard-exec ended");
    out
}

#[track_caller]
fn refused(out: &Output, code: i32, says: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{out:?}");
    assert!(stderr.contains(says), "{stderr}");
}

/// The decision rows of the audit log, by call: (agent, decision, check).
fn decisions(guardd: &Guardd) -> Vec<(Value, Value, Value)> {
    guardd
        .audit_rows()
        .iter()
        .filter(|r| r["kind"] == "decision")
        .map(|r| {
            let row = &r["decision"];
            (
                row["metadata"]["agent"].clone(),
                row["decision"].clone(),
                row["check_name"].clone(),
            )
        })
        .collect()
}

#[test]
fn agents_bound_what_each_caller_may_call_by_its_uid_and_cgroup() {
    if !support::privileged("agents_bound_what_each_caller_may_call_by_its_uid_and_cgroup") {
        return;
    }
    let tools = ToolDir::new("guard-agents");
    let exec = runnable(&tools.dir, "guard-exec");
    // A cgroup of the test's, with a child the scoped caller runs in.
    let name = support::unique("guard-agents");
    let mount = guard::sandbox::cgroup::unified_mount().expect("cgroup v2");
    let scope = mount.join(&name).join("claude-1");
    fs::create_dir_all(&scope).expect("the caller's cgroup");
    let judge = super::judges::testjudge(&tools);
    let guardd = Guardd::start(&policy(&format!("/{name}"), &judge));
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");

    // What each is offered is its agent's: none for a caller that is no agent.
    assert_eq!(offered(&guardd, READER), ["exit_with", "pause"]);
    assert!(offered(&guardd, NOBODYS).is_empty());
    // A caller two agents match is neither: the policy must say which it is.
    refused(
        &call(&guardd, &exec, TWICE, &["exit_with", "code:=0"]),
        126,
        "at once",
    );

    // The builder calls its tools; its row names it.
    let out = call(&guardd, &exec, BUILDER, &["exit_with", "code:=5"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    // Not above its tier, and a tool it is not given is not its, whatever the policy has.
    refused(&call(&guardd, &exec, BUILDER, &["deploy"]), 126, "tier");
    refused(
        &call(&guardd, &exec, READER, &["deploy"]),
        126,
        "may not call tool 'deploy'",
    );
    // A label the caller gives narrows what its agent may call, and never widens it.
    let quick = ["--label", "quick", "pause"];
    refused(
        &call(&guardd, &exec, READER, &quick),
        126,
        "as 'quick' may not call",
    );
    let widen = ["--label", "builder", "deploy"];
    refused(
        &call(&guardd, &exec, READER, &widen),
        126,
        "may not call tool 'deploy'",
    );
    // A client that no agent names is refused, and told why.
    refused(
        &call(&guardd, &exec, NOBODYS, &["exit_with", "code:=0"]),
        126,
        "no agent",
    );

    // max_running: the builder's second call while its first runs is busy (75), unrun.
    let mut first: Child = {
        let mut cmd = Command::new(&exec);
        cmd.arg("--socket")
            .arg(&guardd.socket)
            .arg("pause")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        as_uid(&mut cmd, BUILDER);
        let _forking = FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        cmd.spawn().expect("guard-exec")
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while support::output(guardd.ctl(&["calls", "--running", "--json"]))
        .stdout
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the first call never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    refused(
        &call(&guardd, &exec, BUILDER, &["exit_with", "code:=0"]),
        75,
        "max_running",
    );
    let _ = first.kill();
    let _ = first.wait();

    // rate: two calls a minute, the third is busy and says when to come back.
    for _ in 0..2 {
        let out = call(&guardd, &exec, RATED, &["exit_with", "code:=0"]);
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    refused(
        &call(&guardd, &exec, RATED, &["exit_with", "code:=0"]),
        75,
        "try again in",
    );

    // The same uid is its agent inside its cgroup, and no agent outside it.
    let mut inside = Command::new(&exec);
    inside
        .arg("--socket")
        .arg(&guardd.socket)
        .args(["exit_with", "code:=7"]);
    let procs = scope.join("cgroup.procs");
    // SAFETY: a write of "0" (this process) to cgroup.procs, then setgroups/setgid/setuid,
    // between fork and exec: async-signal-safe syscalls only.
    unsafe {
        inside.pre_exec(move || {
            let path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes())
                .map_err(|_| std::io::Error::other("path"))?;
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(SCOPED) < 0
                || libc::setuid(SCOPED) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (out, _) = timed(inside, Duration::from_secs(20)).expect("guard-exec ended");
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    refused(
        &call(&guardd, &exec, SCOPED, &["exit_with", "code:=7"]),
        126,
        "no agent",
    );

    // Every decision row names the agent, or says none matched.
    let rows = decisions(&guardd);
    let agent_of = |a: &str| rows.iter().filter(|(agent, ..)| agent == a).count();
    assert!(
        agent_of("builder") >= 2 && agent_of("reader") == 3,
        "{rows:?}"
    );
    assert_eq!(agent_of("scoped"), 1, "{rows:?}");
    let unmatched: Vec<_> = rows.iter().filter(|(agent, ..)| agent.is_null()).collect();
    assert_eq!(unmatched.len(), 3, "{rows:?}");
    assert!(
        unmatched
            .iter()
            .all(|(_, d, check)| d == "block" && check == "agent"),
        "{rows:?}"
    );
    // The label is recorded on the row, as the caller said it.
    let labelled = guardd
        .audit_rows()
        .iter()
        .filter(|r| r["kind"] == "decision" && r["decision"]["metadata"]["label"] == "quick")
        .count();
    assert_eq!(labelled, 1);
    // guardctl agents counts what each did; guardctl calls names them.
    let listed = support::output(guardd.ctl(&["agents", "--json"]));
    let agents: Vec<Value> = String::from_utf8_lossy(&listed.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let builder = agents
        .iter()
        .find(|a| a["name"] == "builder")
        .expect("builder");
    assert_eq!(builder["blocked"], 1, "{builder}");
    assert_eq!(builder["running"], 0, "{builder}");
    let audit = guardd.audit.to_str().expect("utf-8").to_owned();
    let calls = support::output(guardd.ctl(&["calls", "--audit", &audit]));
    assert!(
        String::from_utf8_lossy(&calls.stdout).contains(&format!("reader (uid {READER})")),
        "{calls:?}"
    );
    // A terminate blocks the builder's agent, and no other, whatever session it names.
    let terminate = ["--session", "agent:reader", "t_term"];
    refused(&call(&guardd, &exec, BUILDER, &terminate), 77, "");
    refused(
        &call(&guardd, &exec, BUILDER, &["exit_with", "code:=0"]),
        77,
        "",
    );
    let out = call(&guardd, &exec, READER, &["exit_with", "code:=3"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    drop(guardd);
    let _ = fs::remove_dir(&scope);
    let _ = fs::remove_dir(mount.join(&name));
}

/// The uid two agents share, told apart by their cgroups.
const SHARED: u32 = 40_017;

/// guard-exec as [`SHARED`] in `cgroup` (its `cgroup.procs`), its output (within 20 s).
fn call_in(guardd: &Guardd, exec: &Path, cgroup: &Path, args: &[&str]) -> Output {
    let mut cmd = Command::new(exec);
    cmd.arg("--socket").arg(&guardd.socket).args(args);
    let procs = cgroup.join("cgroup.procs");
    // SAFETY: a write of "0" (this process) to cgroup.procs, then setgroups/setgid/setuid,
    // between fork and exec: async-signal-safe syscalls only.
    unsafe {
        cmd.pre_exec(move || {
            let path = std::ffi::CString::new(procs.as_os_str().as_encoded_bytes())
                .map_err(|_| std::io::Error::other("path"))?;
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::write(fd, c"0".as_ptr().cast(), 1) != 1 {
                return Err(std::io::Error::last_os_error());
            }
            libc::close(fd);
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(SHARED) < 0
                || libc::setuid(SHARED) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let (out, _) = timed(cmd, Duration::from_secs(20)).expect("guard-exec ended");
    out
}

/// A held call is its agent's (issue 49): another agent of the same uid could resume it and
/// take its output (agent `reader` resumed agent `deployer`'s approved `deploy`), and a held
/// call that named no session still ran after an approver terminated its agent.
#[test]
fn a_held_call_is_its_agents_alone_and_ends_with_its_agent() {
    if !support::privileged("a_held_call_is_its_agents_alone_and_ends_with_its_agent") {
        return;
    }
    let tools = ToolDir::new("guard-agents");
    let exec = runnable(&tools.dir, "guard-exec");
    let ws = tools.subdir("ws", 0o777);
    let judge = super::judges::testjudge(&tools);
    let name = support::unique("guard-agents");
    let mount = guard::sandbox::cgroup::unified_mount().expect("cgroup v2");
    let (deployer, reader) = (
        mount.join(&name).join("deployer-1"),
        mount.join(&name).join("reader-1"),
    );
    for cg in [&deployer, &reader] {
        fs::create_dir_all(cg).expect("the caller's cgroup");
    }
    let policy = format!(
        r#"
[settings]
clients = [{SHARED}]
max_allowed_tier = "high"
escalation_threshold = "high"

[agents.deployer]
uids = [{SHARED}]
cgroups = ["/{name}/deployer-*"]
[agents.reader]
uids = [{SHARED}]
cgroups = ["/{name}/reader-*"]
tools = ["t_term"]

[tools.deploy]
tier = "high"
irreversible = true
command = ["/usr/bin/touch", "{ws}/deployed"]
[tools.deploy.effects]
write = ["{ws}/deployed"]

[tools.t_term]
tier = "low"
command = ["/bin/true"]
[[rules]]
id = "gate"
tools = ["t_term"]
action = "escalate"
message = "needs an approver"
[[approvers]]
tools = ["t_term"]
approver = '''command:["{j}", "terminate", "destructive"]'''
"#,
        ws = ws.display(),
        j = judge.display(),
    );
    let guardd = Guardd::start(&policy);
    fs::set_permissions(&guardd.socket, fs::Permissions::from_mode(0o666)).expect("chmod");
    let deployed = ws.join("deployed");
    let hold = |g: &Guardd| {
        let out = call_in(g, &exec, &deployer, &["--no-wait", "deploy"]);
        assert_eq!(out.status.code(), Some(75), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };

    // Held by the deployer, approved by root: the reader, same uid, may not have it run.
    let id = hold(&guardd);
    let approve = support::output(guardd.ctl(&["approve", &id]));
    assert!(approve.status.success(), "{approve:?}");
    refused(
        &call_in(&guardd, &exec, &reader, &["--resume", &id]),
        126,
        "only it may resume it",
    );
    assert!(!deployed.exists(), "the reader ran the deployer's call");
    // Its own agent still may.
    let out = call_in(&guardd, &exec, &deployer, &["--resume", &id]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(deployed.exists());
    fs::remove_file(&deployed).expect("rm");

    // A call held with no session, then its agent terminated by an approver: no approval
    // runs it.
    let id = hold(&guardd);
    refused(&call_in(&guardd, &exec, &deployer, &["t_term"]), 77, "");
    let approve = support::output(guardd.ctl(&["approve", &id]));
    assert!(!approve.status.success(), "{approve:?}");
    assert!(
        String::from_utf8_lossy(&approve.stderr).contains("its agent 'deployer' was terminated"),
        "{approve:?}"
    );
    assert!(!deployed.exists());
    drop(guardd);
    for cg in [&deployer, &reader] {
        let _ = fs::remove_dir(cg);
    }
    let _ = fs::remove_dir(mount.join(&name));
}
