//! The agent-day suite (issue 50): a day of an agent's work in the projects of a workspace its
//! developer owns, under the default policy. A Python project (unittest with multiprocessing, a
//! server on loopback, temporary files, a venv and an editable install without network), a Node
//! project (npm, node's test runner, child processes), C with make, archives (tar, gzip, zip),
//! git (status, add, commit, branch, stash, rebase, worktree, and the developer's own pre-commit
//! hook) and everyday commands (ps, free, uptime, /tmp, /dev/shm, mktemp). Each command runs
//! three ways on fresh copies of the same projects: directly as the developer, through
//! `guard-exec shell`, and through Claude Code's hook (its rewritten Bash command, run by bash).
//! Each guarded run must end as the direct one did: the same exit code, the same stdout and
//! stderr (temporary paths and timings aside), no refusal on stderr, and a receipt that
//! conformed. The projects are `tests/agentday/`, copied beneath the workspace's root.
//!
//! Where the policy refuses something a developer's own command does, the refusal must be seen
//! (guard-exec says so, the receipt names it) and explained:
//! [`agentday_what_the_policy_refuses_is_seen_on_stderr_and_the_receipt`]. What fails today is
//! kept, asserting the right behaviour, in the `open:` tests below (`--include-ignored`).

use std::{
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Command, Output},
};

use serde_json::{Value, json};

use super::support::{self, Guardd, NOBODY, output};

#[path = "../agentday/day.rs"]
mod day;

use day::{DATES, DAY, PRE_COMMIT};

/// How a command is run.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Via {
    /// As the developer, by a bash of its own, in the environment the policy gives a call.
    Direct,
    /// Through `guard-exec shell`, as the developer.
    Guard,
    /// Through Claude Code's hook: its answer's command, run by bash as the developer.
    Hook,
}

/// The directory the workspace root lives in: not under /tmp, so that a call gets a /tmp and
/// /dev/shm of its own (a workspace under the host's /tmp keeps the host's). Removed on drop.
struct Root(PathBuf);

impl Root {
    fn new() -> Self {
        use std::os::unix::fs::PermissionsExt as _;
        let path = Path::new("/var/tmp").join(support::unique("guard-agentday"));
        std::fs::create_dir_all(&path).expect("create the root");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        Self(path)
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The environment the default policy gives a `shell` call, for the direct runs: HOME is the
/// workspace.
fn direct_env(cmd: &mut Command, ws: &Path) {
    cmd.env_clear()
        .env("HOME", ws)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("PAGER", "cat")
        .env("LANG", "C.UTF-8");
}

/// `cmd` as the developer (nobody).
fn as_developer(cmd: &mut Command) -> &mut Command {
    cmd.uid(NOBODY).gid(NOBODY)
}

/// Copies the directory `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read the fixtures") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy a fixture");
        }
    }
}

/// Lays the projects out afresh beneath `ws` (the workspace's root), all of it the
/// developer's: the projects of `tests/agentday/`, the developer's `~/.gitconfig` and
/// `~/.npmrc` (HOME is the workspace), and what [`day::lay_out_script`] makes.
fn lay_out(ws: &Path) {
    let _ = std::fs::remove_dir_all(ws);
    for project in day::PROJECTS {
        copy_tree(
            &support::workspace().join("tests/agentday").join(project),
            &ws.join(project),
        );
    }
    std::fs::write(ws.join(".gitconfig"), day::GITCONFIG).expect("~/.gitconfig");
    std::fs::write(ws.join(".npmrc"), day::NPMRC).expect("~/.npmrc");
    let chown = output({
        let mut c = Command::new("chown");
        c.args(["-hR", &format!("{NOBODY}:{NOBODY}")]).arg(ws);
        c
    });
    assert!(chown.status.success(), "{chown:?}");
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", &day::lay_out_script()]).current_dir(ws);
    direct_env(&mut bash, ws);
    as_developer(&mut bash);
    let out = output(bash);
    assert!(out.status.success(), "laying out the projects: {out:?}");
}

/// The input Claude Code gives a PreToolUse hook for a Bash call.
fn bash_input(cwd: &Path, command: &str) -> Value {
    json!({
        "session_id": "agentday",
        "transcript_path": "/home/dev/.claude/projects/agentday/00000000.jsonl",
        "cwd": cwd,
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "an agent's command"},
        "tool_use_id": "toolu_agentday"
    })
}

/// The hook's rewritten command for `command` in `dir`, asked as the developer.
fn hook_rewrite(guardd: &Guardd, dir: &Path, command: &str) -> String {
    use std::io::Write as _;
    let mut hook = Command::new(support::bin("guard-exec"));
    hook.args(["hook", "claude-code", "--socket"])
        .arg(&guardd.socket)
        .current_dir(dir)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    as_developer(&mut hook);
    let mut child = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        hook.spawn().expect("spawn the hook")
    };
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(bash_input(dir, command).to_string().as_bytes())
        .expect("write the hook's input");
    let out = child.wait_with_output().expect("wait for the hook");
    assert!(out.status.success(), "the hook: {out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).expect("the hook answers JSON");
    let specific = &answer["hookSpecificOutput"];
    assert_eq!(
        specific["permissionDecision"], "allow",
        "`{command}`: {answer}"
    );
    specific["updatedInput"]["command"]
        .as_str()
        .unwrap_or_else(|| panic!("no command in {answer}"))
        .to_owned()
}

/// Runs `command` in `dir` as `via` says.
fn run(guardd: &Guardd, ws: &Path, via: Via, command: &str, dir: &Path) -> Output {
    let mut cmd = match via {
        Via::Direct => {
            let mut c = Command::new("/bin/bash");
            c.args(["-c", command]);
            direct_env(&mut c, ws);
            c
        }
        Via::Guard => {
            let args = json!({ "command": command }).to_string();
            let mut c = Command::new(support::bin("guard-exec"));
            c.arg("--socket")
                .arg(&guardd.socket)
                .args(["--args", &args, "shell"]);
            c
        }
        Via::Hook => {
            let rewritten = hook_rewrite(guardd, dir, command);
            let mut c = Command::new("/bin/bash");
            c.args(["-c", &rewritten]);
            direct_env(&mut c, ws);
            c
        }
    };
    cmd.current_dir(dir);
    as_developer(&mut cmd);
    output(cmd)
}

/// Replaces the run of characters `keep` accepts after each `marker` with `with` (the marker
/// stays), when the run is as long as `len` says (any length when `None`).
fn mask(
    text: &str,
    marker: &str,
    keep: fn(char) -> bool,
    len: Option<usize>,
    with: &str,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(marker) {
        let after = &rest[at + marker.len()..];
        let run = after.find(|c: char| !keep(c)).unwrap_or(after.len());
        out.push_str(&rest[..at]);
        out.push_str(marker);
        if run > 0 && len.is_none_or(|l| l == run) {
            out.push_str(with);
            rest = &after[run..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// What legitimately differs between two runs of one command: the temporary directory (a
/// call's TMPDIR, `/run/guard-tmp/call-ID`, is its /tmp), mktemp's random names, and timings.
fn normalise(text: &str) -> String {
    let hex = |c: char| c.is_ascii_hexdigit();
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let number = |c: char| c.is_ascii_digit() || c == '.';
    let t = mask(text, "/run/guard-tmp/call-", hex, None, "\u{0}");
    let t = t.replace("/run/guard-tmp/call-\u{0}", "/tmp");
    let t = mask(&t, "tmp.", alnum, Some(10), "XXXXXXXXXX");
    let t = mask(&t, "duration_ms: ", number, None, "N");
    let t = mask(&t, "duration_ms ", number, None, "N");
    let t = mask(&t, " tests in ", number, None, "N");
    mask(&t, " test in ", number, None, "N")
}

/// One command's end: exit code, stdout and stderr, normalised.
#[derive(Debug, PartialEq)]
struct Ended {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Ended {
    fn of(out: &Output) -> Self {
        Self {
            code: out.status.code(),
            stdout: normalise(&String::from_utf8_lossy(&out.stdout)),
            stderr: normalise(&String::from_utf8_lossy(&out.stderr)),
        }
    }
}

/// The `finished` rows of the `shell` tool written so far.
fn finished_rows(guardd: &Guardd) -> Vec<Value> {
    guardd
        .audit_rows()
        .into_iter()
        .filter(|r| r["kind"] == "finished" && r["tool"] == "shell")
        .collect()
}

/// The finished rows written after the first `before`, once there is at least one.
fn new_finished(guardd: &Guardd, before: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let rows = finished_rows(guardd);
        if rows.len() > before || std::time::Instant::now() > deadline {
            return rows.into_iter().skip(before).collect();
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// What is wrong with one guarded run of a command against its direct run: each line a
/// mismatch, empty when it ended as the direct one did and conformed.
fn judge(command: &str, via: Via, direct: &Ended, guarded: &Ended, rows: &[Value]) -> Vec<String> {
    let mut wrong = Vec::new();
    let say = |what: String| format!("{via:?} `{command}`: {what}");
    if guarded.code != direct.code {
        wrong.push(say(format!(
            "exit {:?}, directly {:?}; stderr {:?}",
            guarded.code, direct.code, guarded.stderr
        )));
    }
    if guarded.stdout != direct.stdout {
        wrong.push(say(format!(
            "stdout {:?}, directly {:?}",
            guarded.stdout, direct.stdout
        )));
    }
    if guarded.stderr.contains("not approved to do") || guarded.stderr.contains("denied") {
        wrong.push(say(format!("a refusal on stderr: {:?}", guarded.stderr)));
    } else if guarded.stderr != direct.stderr {
        wrong.push(say(format!(
            "stderr {:?}, directly {:?}",
            guarded.stderr, direct.stderr
        )));
    }
    match rows {
        [row] if row["effects_observed"]["verdict"] == "conformed" => {}
        [row] => wrong.push(say(format!(
            "verdict {}, divergences {}",
            row["effects_observed"]["verdict"], row["effects_observed"]["divergences"]
        ))),
        rows => wrong.push(say(format!("{} finished rows, not one", rows.len()))),
    }
    wrong
}

/// The day run `via` on fresh projects: each command's end, and each guarded command's
/// finished rows.
fn day(guardd: &Guardd, ws: &Path, via: Via) -> Vec<(Ended, Vec<Value>)> {
    lay_out(ws);
    DAY.iter()
        .map(|(dir, command)| {
            let before = finished_rows(guardd).len();
            let out = run(guardd, ws, via, command, &ws.join(dir));
            let rows = if via == Via::Direct {
                Vec::new()
            } else {
                new_finished(guardd, before)
            };
            (Ended::of(&out), rows)
        })
        .collect()
}

/// What the day left that is wrong whichever way it ran: a file not the developer's, a name
/// moved aside, and the developer's own hook no longer running at the developer's commit.
fn after_the_day(guardd: &Guardd, ws: &Path, via: Via) -> Vec<String> {
    let mut wrong = Vec::new();
    let strangers = output({
        let mut c = Command::new("find");
        c.arg(ws).args(["-not", "-user", &NOBODY.to_string()]);
        c
    });
    if !strangers.stdout.is_empty() {
        wrong.push(format!(
            "{via:?}: files not the developer's: {}",
            String::from_utf8_lossy(&strangers.stdout)
        ));
    }
    let moved = output({
        let mut c = Command::new("find");
        c.arg(ws).args(["-name", "*.guard-planted-*"]);
        c
    });
    if !moved.stdout.is_empty() {
        wrong.push(format!(
            "{via:?}: moved aside: {}",
            String::from_utf8_lossy(&moved.stdout)
        ));
    }
    let hook = std::fs::read_to_string(ws.join("repo/.git/hooks/pre-commit")).unwrap_or_default();
    if hook != PRE_COMMIT {
        wrong.push(format!("{via:?}: the developer's hook is now {hook:?}"));
    }
    let commit = format!("{DATES}echo x >> notes.txt && git commit -qam 'by hand'");
    let by_hand = run(guardd, ws, Via::Direct, &commit, &ws.join("repo"));
    if !by_hand.status.success() || String::from_utf8_lossy(&by_hand.stderr) != "pre-commit: ok\n" {
        wrong.push(format!(
            "{via:?}: the developer's own commit afterwards: {by_hand:?}"
        ));
    }
    wrong
}

/// guardd with the default policy, its workspace's root at `ws`, its socket open to the
/// developer's group.
fn guardd_in(ws: &Path) -> Guardd {
    Guardd::start_with(
        &support::default_policy_in(ws),
        &["--socket-group", "nogroup"],
    )
}

/// The workspace's root beneath a fresh [`Root`], the developer's.
fn workspace(root: &Root) -> PathBuf {
    let ws = root.0.join("ws");
    std::fs::create_dir(&ws).expect("mkdir ws");
    std::os::unix::fs::chown(&ws, Some(NOBODY), Some(NOBODY)).expect("chown ws");
    ws
}

#[test]
fn agentday_each_command_runs_through_guard_and_the_hook_as_it_runs_directly() {
    if !support::privileged("agentday_each_command_runs_through_guard_and_the_hook") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);

    let direct = day(&guardd, &ws, Via::Direct);
    let mut wrong = after_the_day(&guardd, &ws, Via::Direct);
    // The day itself went as it should, directly: only the commit the hook refuses fails.
    let failed: Vec<(&str, &Ended)> = DAY
        .iter()
        .zip(&direct)
        .filter(|(_, (e, _))| e.code != Some(0))
        .map(|((_, c), (e, _))| (*c, e))
        .collect();
    assert_eq!(failed.len(), 1, "directly: {failed:#?}");
    assert!(failed[0].0.contains("FIXME"), "{failed:#?}");
    assert_eq!(
        failed[0].1.stderr, "pre-commit: FIXME in the staged changes\n",
        "{failed:#?}"
    );

    // And it did what it says.
    for (needle, wanted) in [
        ("python3 -m unittest -v", "Ran 6 tests in N"),
        ("import daytools", "49 "),
        ("npm test", "# pass 4\n"),
        ("make test", "2 lines, 3 words\n"),
        ("'more notes'", "pre-commit: ok\n"),
        (
            "git rebase main",
            "feature\nmain moves\nmore notes\ninitial\n",
        ),
        ("git worktree add", "## topic\n"),
        ("'in the worktree'", "pre-commit: ok\n"),
        ("/dev/shm/agentday", "shm\n1\n"),
    ] {
        let (_, (end, _)) = DAY
            .iter()
            .zip(&direct)
            .find(|((_, command), _)| command.contains(needle))
            .unwrap_or_else(|| panic!("no command has {needle}"));
        assert!(
            end.stdout.contains(wanted) || end.stderr.contains(wanted),
            "`{needle}` directly: {end:#?}"
        );
    }

    for via in [Via::Guard, Via::Hook] {
        let guarded = day(&guardd, &ws, via);
        for (((_, command), (d, _)), (g, rows)) in DAY.iter().zip(&direct).zip(&guarded) {
            wrong.extend(judge(command, via, d, g, rows));
        }
        wrong.extend(after_the_day(&guardd, &ws, via));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// What the default policy refuses of a developer's ordinary commands, on their first run in
/// a project: `git init` and `git clone` make a repository, whose `.git` (config and hooks
/// the developer's git would run) is moved aside at the call's end; npm's first run checks the
/// registry for a newer npm (no `~/.npmrc` here), and the shell connects nowhere. Each command
/// still ends as it would directly, and the refusal is seen: guard-exec says so on stderr, and
/// the receipt names it.
#[test]
fn agentday_what_the_policy_refuses_is_seen_on_stderr_and_the_receipt() {
    if !support::privileged("agentday_what_the_policy_refuses_is_seen") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    for via in [Via::Guard, Via::Hook] {
        for r in refusals(&guardd, &ws, via) {
            assert!(
                r.stderr.contains(
                    "guard-exec: the call tried something it was not approved to do; it was denied"
                ),
                "{via:?} `{}`: {r:#?}",
                r.command
            );
            assert_eq!(r.verdict, "diverged", "{via:?}: {r:#?}");
            assert_eq!(r.code, r.direct_code, "{via:?}: {r:#?}");
            match r.expect {
                Refused::Planted(name) => {
                    let d = r
                        .divergences
                        .iter()
                        .find(|d| d["effect"] == "planted")
                        .unwrap_or_else(|| panic!("{via:?}: {r:#?}"));
                    assert_eq!(d["path"], ws.join(name).display().to_string(), "{r:#?}");
                    let moved = d["moved_to"].as_str().unwrap_or_default();
                    assert!(Path::new(moved).exists(), "{r:#?}");
                    assert!(!ws.join(name).exists(), "{name} is still there: {r:#?}");
                }
                Refused::Connect => {
                    assert!(
                        r.divergences
                            .iter()
                            .any(|d| d["effect"] == "connect" && d["action"] == "deny"),
                        "{via:?}: {r:#?}"
                    );
                }
            }
        }
    }
}

/// What a refusal is expected to be.
#[derive(Debug, Clone, Copy)]
enum Refused {
    /// A repository's `.git` made by the call, moved aside: its path beneath the workspace.
    Planted(&'static str),
    /// A connect the shell may not make.
    Connect,
}

/// A refused command's run through guard, beside its direct run's exit code.
#[derive(Debug)]
struct Refusal {
    command: &'static str,
    expect: Refused,
    code: Option<i32>,
    direct_code: Option<i32>,
    stderr: String,
    verdict: Value,
    divergences: Vec<Value>,
}

/// Commands the default policy refuses part of: each with its directory and what is refused.
const REFUSED: &[(&str, &str, Refused)] = &[
    (
        "",
        "git init -q newproj && git -C newproj status --short --branch",
        Refused::Planted("newproj/.git"),
    ),
    (
        "",
        "git clone -q repo repo-copy && git -C repo-copy log --format=%s",
        Refused::Planted("repo-copy/.git"),
    ),
    ("nodeproj", "npm init -y", Refused::Connect),
];

/// Runs [`REFUSED`] `via` guard on fresh projects (with no `~/.npmrc`, as on a first day),
/// each after its direct run on other fresh ones for the exit code (the npm one excepted: it
/// would reach the registry).
fn refusals(guardd: &Guardd, ws: &Path, via: Via) -> Vec<Refusal> {
    let mut direct_codes = Vec::new();
    lay_out(ws);
    for (dir, command, expect) in REFUSED {
        direct_codes.push(match expect {
            Refused::Planted(_) => run(guardd, ws, Via::Direct, command, &ws.join(dir))
                .status
                .code(),
            Refused::Connect => Some(0),
        });
    }
    lay_out(ws);
    std::fs::remove_file(ws.join(".npmrc")).expect("no ~/.npmrc");
    REFUSED
        .iter()
        .zip(direct_codes)
        .filter(|((_, command, expect), _)| {
            // npm asks the host's resolver first: one on loopback answers within the call's
            // own network (nothing refused), and the name does not resolve.
            let off_host = !matches!(expect, Refused::Connect) || resolver_off_host();
            if !off_host {
                eprintln!("`{command}`: not checked, the host's resolver is on loopback");
            }
            off_host
        })
        .map(|((dir, command, expect), direct_code)| {
            let before = finished_rows(guardd).len();
            let out = run(guardd, ws, via, command, &ws.join(dir));
            let rows = new_finished(guardd, before);
            let seen = rows
                .first()
                .map(|r| r["effects_observed"].clone())
                .unwrap_or_default();
            Refusal {
                command,
                expect: *expect,
                code: out.status.code(),
                direct_code,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
                verdict: seen["verdict"].clone(),
                divergences: seen["divergences"].as_array().cloned().unwrap_or_default(),
            }
        })
        .collect()
}

/// Whether /etc/resolv.conf names a resolver off the host (glibc asks 127.0.0.1 when it names
/// none).
fn resolver_off_host() -> bool {
    std::fs::read_to_string("/etc/resolv.conf")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .map(str::trim)
        .any(|ns| !ns.starts_with("127.") && ns != "::1")
}

/// A refusal explained: guard-exec's notice names what was refused (the `.git` moved aside and
/// where to, the connect and its address), as the receipt does: it said only that the call
/// "tried something it was not approved to do; it was denied", and an agent (or its
/// developer) reading it could not tell that the repository it just made was gone, or why
/// npm's check failed.
#[test]
fn agentday_a_refusal_is_explained_on_stderr() {
    if !support::privileged("agentday_a_refusal_is_explained_on_stderr") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    for r in refusals(&guardd, &ws, Via::Guard) {
        let named = match r.expect {
            Refused::Planted(name) => r.stderr.contains(name),
            Refused::Connect => r.stderr.contains("connect"),
        };
        assert!(named, "`{}`: {}", r.command, r.stderr);
    }
}

/// A file named `HEAD` made beneath the workspace, away from any `.git`, is no repository
/// (git takes a directory for a bare one only with `objects/` and `refs/` beside its `HEAD`):
/// an archive that holds one (a copy of a repository's git directory, a `logs/HEAD`) extracts
/// with it, and a note an agent writes to `notes/HEAD` stays, as the developer's own commands
/// keep them (each was taken for a planted repository and moved aside).
#[test]
fn agentday_a_file_named_head_is_not_taken_for_a_repository() {
    if !support::privileged("agentday_a_file_named_head_is_not_taken_for_a_repository") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    let make = "mkdir -p t/proj/logs && echo ref > t/proj/HEAD && echo l > t/proj/logs/HEAD && \
                tar -cf heads.tar -C t proj && rm -r t";
    let command = "mkdir -p x && tar -xf heads.tar -C x && mkdir -p notes && echo n > notes/HEAD";
    let (_, left, wrong) = three_ways(&guardd, &ws, "", make, command, "find x notes | sort");
    assert_eq!(
        left.stdout,
        "notes\nnotes/HEAD\nx\nx/proj\nx/proj/HEAD\nx/proj/logs\nx/proj/logs/HEAD\n"
    );
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A C project's tests built with AddressSanitizer pass through guard as they do directly.
/// Its leak check, on at every exit (LeakSanitizer stops the process's threads with ptrace),
/// died: "LeakSanitizer has encountered a fatal error ... does not work under ptrace", exit 1,
/// where the developer's run exits 0 (the default shell now allows ptrace: see its policy).
#[test]
fn agentday_a_c_test_built_with_addresssanitizer_passes() {
    if !support::privileged("agentday_a_c_test_built_with_addresssanitizer_passes") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    let (direct, _, wrong) = three_ways(&guardd, &ws, "cproj", "true", "make -s test-asan", "true");
    assert_eq!(direct.code, Some(0), "{direct:#?}");
    assert_eq!(direct.stdout, "2 lines, 3 words\n", "{direct:#?}");
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A project's own Unix sockets work through guard as they do directly: Python's
/// `multiprocessing.Manager()`, the `forkserver` start method (the default on Linux from Python
/// 3.14, for every Pool and ProcessPoolExecutor) and a server on a socket file in a temporary
/// directory (`pyproj/unix/`), and Node's `net` server on a socket file in the project. The
/// default shell's seccomp refused `socket(AF_UNIX)` (EPERM), unreported: each failed. Now a
/// call in a network namespace of its own has Unix stream sockets, and guardd makes their
/// connects (`sandbox::writes::unix`).
#[test]
fn agentday_a_projects_own_unix_sockets_work() {
    if !support::privileged("agentday_a_projects_own_unix_sockets_work") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    let python = "python3 -m unittest discover -s unix";
    let node = "node -e \"const s = require('net').createServer().listen('./n.sock', () => \
                { console.log('listening'); s.close(); })\"";
    let mut wrong = Vec::new();
    for (dir, command, said) in [
        ("pyproj", python, "OK\n"),
        ("nodeproj", node, "listening\n"),
    ] {
        let (direct, _, w) = three_ways(&guardd, &ws, dir, "true", command, "true");
        assert_eq!(direct.code, Some(0), "{direct:#?}");
        assert!(
            direct.stdout.ends_with(said) || direct.stderr.ends_with(said),
            "{direct:#?}"
        );
        wrong.extend(w);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// `command` in `dir` three ways, each on fresh projects after the developer ran `setup` at the
/// workspace's root: the direct run's end, what the developer's `look` (at the root) shows
/// after it, and what is wrong with each guarded run against the direct one ([`judge`]) and
/// with what `look` shows after it.
fn three_ways(
    guardd: &Guardd,
    ws: &Path,
    dir: &str,
    setup: &str,
    command: &str,
    look: &str,
) -> (Ended, Ended, Vec<String>) {
    let mut ends = Vec::new();
    for via in [Via::Direct, Via::Guard, Via::Hook] {
        lay_out(ws);
        let made = run(guardd, ws, Via::Direct, setup, ws);
        assert!(made.status.success(), "{made:?}");
        let before = finished_rows(guardd).len();
        let out = run(guardd, ws, via, command, &ws.join(dir));
        let rows = if via == Via::Direct {
            Vec::new()
        } else {
            new_finished(guardd, before)
        };
        let left = run(guardd, ws, Via::Direct, look, ws);
        ends.push((via, Ended::of(&out), Ended::of(&left), rows));
    }
    let mut ends = ends.into_iter();
    let (_, direct, direct_left, _) = ends.next().expect("the direct run");
    let mut wrong = Vec::new();
    for (via, end, left, rows) in ends {
        wrong.extend(judge(command, via, &direct, &end, &rows));
        if left != direct_left {
            wrong.push(format!(
                "{via:?} `{command}`: `{look}` afterwards shows {left:?}, directly {direct_left:?}"
            ));
        }
    }
    (direct, direct_left, wrong)
}

/// A host's service outside every call's places: a Unix socket anyone may connect to, in
/// `root`'s `svc/`, and its listener.
fn host_service(root: &Root) -> (PathBuf, std::os::unix::net::UnixListener) {
    let host = root.0.join("svc");
    std::fs::create_dir(&host).expect("mkdir");
    let path = host.join("svc.sock");
    let served = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o777))
        .expect("chmod");
    (path, served)
}

/// What a call's Unix stream sockets reach: its own (a server it started, whose peer
/// credentials name the call's user, not guardd's root), nothing else. A service's socket
/// outside the call's places, even one every user may connect to, is refused (EACCES) and a
/// divergence, from its main thread or another (an outside pass's second thread went
/// unjudged); through a link the call made, the same; an abstract name of the host's is not in
/// the call's network namespace.
#[test]
fn agentday_a_call_reaches_no_unix_socket_but_its_own() {
    if !support::privileged("agentday_a_call_reaches_no_unix_socket_but_its_own") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    // The host's services: a socket file anyone may connect to, and an abstract name.
    let (path, served) = host_service(&root);
    let name = support::unique("guard-abstract");
    let abstract_addr = {
        use std::os::linux::net::SocketAddrExt as _;
        std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).expect("name")
    };
    let _abstract = std::os::unix::net::UnixListener::bind_addr(&abstract_addr).expect("bind");
    let probe = format!(
        "import os, socket, struct\n\
         def attempt(addr):\n\
         \x20   s = socket.socket(socket.AF_UNIX)\n\
         \x20   try:\n\
         \x20       s.connect(addr)\n\
         \x20       return 'connected'\n\
         \x20   except OSError as e:\n\
         \x20       return type(e).__name__\n\
         print('host', attempt('{host}'))\n\
         import threading\n\
         got = []\n\
         t = threading.Thread(target=lambda: got.append(attempt('{host}')))\n\
         t.start()\n\
         t.join()\n\
         print('thread', got[0])\n\
         os.symlink('{host}', 'l.sock')\n\
         print('link', attempt('l.sock'))\n\
         print('abstract', attempt('\\0{name}'))\n\
         srv = socket.socket(socket.AF_UNIX)\n\
         srv.bind('own.sock')\n\
         srv.listen()\n\
         c = socket.socket(socket.AF_UNIX)\n\
         c.connect('own.sock')\n\
         a, _ = srv.accept()\n\
         pid, uid, gid = struct.unpack('3i', a.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))\n\
         print('peer', uid == os.getuid(), gid == os.getgid())\n",
        host = path.display(),
    );
    std::fs::write(ws.join("probe.py"), probe).expect("probe");
    let before = finished_rows(&guardd).len();
    let out = run(&guardd, &ws, Via::Guard, "python3 probe.py", &ws);
    let said = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        said,
        "host PermissionError\nthread PermissionError\nlink PermissionError\nabstract \
         ConnectionRefusedError\npeer True True\n",
        "{out:?}"
    );
    let rows = new_finished(&guardd, before);
    let refused: Vec<&Value> = rows
        .iter()
        .flat_map(|r| {
            r["effects_observed"]["divergences"]
                .as_array()
                .into_iter()
                .flatten()
        })
        .filter(|d| d["effect"] == "unix_connect")
        .collect();
    assert!(
        refused
            .iter()
            .any(|d| d["path"] == path.display().to_string().as_str()),
        "{rows:#?}"
    );
    drop(served);
}

/// The kernel's backstop holds while the call runs (an outside pass found its link closed at
/// the tool's exec, and won this race at its 13th try): a call that swaps one descriptor number
/// between a TCP socket (its stderr, whose connect guardd lets go on in the kernel) and a Unix
/// socket, while another thread connects that number to a socket outside its places, never
/// connects.
#[test]
fn agentday_a_descriptor_swapped_under_guardds_look_connects_nowhere() {
    if !support::privileged("agentday_a_descriptor_swapped_under_guardds_look_connects_nowhere") {
        return;
    }
    let root = Root::new();
    let ws = workspace(&root);
    let guardd = guardd_in(&ws);
    let (path, _served) = host_service(&root);
    let race = r#"
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static int u;
static void *swap(void *x) { for (;;) { dup2(2, 50); dup2(u, 50); } return x; }
int main(int argc, char **argv) {
    u = socket(AF_UNIX, SOCK_STREAM, 0);
    if (u < 0) { printf("no unix socket\n"); return 1; }
    int d = -1; socklen_t l = sizeof d;
    if (getsockopt(2, SOL_SOCKET, SO_DOMAIN, &d, &l) != 0 || d != AF_INET) { printf("stderr is no inet socket\n"); return 1; }
    pthread_t t;
    pthread_create(&t, 0, swap, 0);
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    strncpy(a.sun_path, argv[1], sizeof a.sun_path - 1);
    for (int i = 0; i < 2000; i++)
        if (connect(50, (struct sockaddr *)&a, sizeof a) == 0) { printf("connected at %d\n", i); return 0; }
    printf("never\n");
    return 0;
}
"#;
    std::fs::write(ws.join("race.c"), race).expect("race.c");
    let built = run(
        &guardd,
        &ws,
        Via::Direct,
        "gcc -O1 -pthread -o race race.c",
        &ws,
    );
    assert!(built.status.success(), "{built:?}");
    // Its stderr: an unconnected TCP socket of the caller's (a caller's stdio reaches the tool).
    // SAFETY: integer arguments; the descriptor is owned at once.
    let tcp = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM, 0) };
    assert!(tcp >= 0, "socket");
    // SAFETY: a descriptor just made, owned by nothing else.
    let tcp = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(tcp) };
    let args = json!({ "command": format!("./race {}", path.display()) }).to_string();
    let mut c = Command::new(support::bin("guard-exec"));
    c.arg("--socket")
        .arg(&guardd.socket)
        .args(["--args", &args, "shell"])
        .current_dir(&ws)
        .stderr(std::process::Stdio::from(tcp));
    as_developer(&mut c);
    c.stdout(std::process::Stdio::piped());
    let child = {
        let _forking = support::FORK_LOCK.read().unwrap_or_else(|e| e.into_inner());
        c.spawn().expect("guard-exec")
    };
    let out = child.wait_with_output().expect("wait");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "never\n", "{out:?}");
}
