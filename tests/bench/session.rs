//! A real agent session as the headline number: the commands a coding agent runs in a
//! repository (this one's own checkout, cloned into a workspace its developer owns), replayed
//! through guard-mcp (the official MCP SDK keeping one session, as an agent does) and through
//! guard-exec, as the default policy's `shell` tool, each against the same commands run directly
//! as an agent running as the workspace's owner runs them (spawned by a process of the owner's,
//! `tests/python/direct_runner.py`), round-robin. Every guarded call must conform: a false block
//! or a divergence is counted in its own row, whose goal is none.

use std::{
    io::{BufRead as _, BufReader, Write as _},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, ChildStdout, Command, Stdio},
    time::Instant,
};

use anyhow::{Context as _, Result, bail};
use serde_json::{Value, json};

use crate::{
    daemon::{Guardd, TempDir},
    report::{Goal, Report, Row, median},
};

/// The workspace's owner, the developer (nobody): calls of the `shell` tool run as it.
pub(crate) const OWNER: u32 = 65534;

/// The session, each command run from the repository's root: what an agent reads, searches,
/// writes and runs. Repeatable: a round leaves the workspace as the next one needs it.
const TRACE: &[&str] = &[
    "git status --short --branch",
    "git log -5 --format='%h %s'",
    "git log --oneline -- README.md | head -3",
    "git show --stat --format=%s HEAD | tail -3",
    "git diff --stat HEAD~1 | tail -1",
    "git branch --show-current",
    "git rev-parse --show-toplevel",
    "ls",
    "ls -la docs",
    "ls guard-daemon/src | head -20",
    "cat Cargo.toml",
    "head -40 README.md",
    "sed -n '1,30p' guard-daemon/src/lib.rs",
    "sed -n '100,140p' guard-daemon/src/socket/mod.rs",
    "tail -20 docs/book/src/policy/tools.md",
    "wc -l guard-daemon/src/*/*.rs | tail -1",
    "grep -rn 'fn main' --include=*.rs . | head -10",
    "grep -rn 'TODO' --include=*.rs guard-daemon/src | head -5; true",
    "grep -c 'pub fn' guard-daemon/src/client/mod.rs",
    "grep -rln 'tokio::spawn' guard-daemon/src | head",
    "find . -name '*.toml' -not -path './.git/*' | sort | head -20",
    "find guard-daemon/src -type d | sort",
    "find . -name '*.py' -not -path './.git/*' | head",
    "python3 -c 'import sys; print(sys.version_info[:2])'",
    "python3 -c 'import json; print(json.dumps({\"files\": 3}))'",
    "echo '# notes' > NOTES.md && cat NOTES.md",
    "printf 'first\\nsecond\\n' >> NOTES.md && wc -l NOTES.md",
    "sed -i 's/first/1st/' NOTES.md && cat NOTES.md",
    "python3 -c \"import os; open('v.tmp','w').write('v2\\n'); os.replace('v.tmp','VERSION')\" && cat VERSION",
    "git status --short",
    "git diff --stat",
    "git add NOTES.md VERSION && git status --short",
    "git reset -q NOTES.md VERSION && git status --short",
    "mkdir -p scratch && printf 'import unittest\\n\\nclass T(unittest.TestCase):\\n    def test_sum(self):\\n        self.assertEqual(sum([1, 2]), 3)\\n' > scratch/test_sum.py && ls scratch",
    "cd scratch && python3 -m unittest -q test_sum 2>&1 | tail -1",
    "cd scratch && printf 'all:\\n\\tpython3 -m py_compile test_sum.py && echo built\\n' > Makefile && make -s",
    "cat scratch/Makefile",
    "sort README.md | uniq -c | sort -rn | head -3",
    "awk 'NR<=5' docs/book/src/reference/protocol.md",
    "cut -c1-40 Cargo.toml | head",
    "diff <(head -5 README.md) <(head -6 README.md); true",
    "git blame -L 1,5 README.md | cut -c1-60",
    "git log -1 --format=%an",
    "git ls-files | wc -l",
    "git grep -n 'fn lost' | head -3",
    "ls does-not-exist",
    "git checkout no-such-branch",
    "cat NOTES.md | tr a-z A-Z",
    "rm -rf scratch NOTES.md VERSION && git status --short",
    "true",
];

/// The environment the default policy gives a `shell` call, for the direct runs too.
pub(crate) fn env(ws: &Path) -> Value {
    json!({
        "HOME": ws,
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PAGER": "cat",
        "LANG": "C.UTF-8",
    })
}

/// A fresh clone of this repository at `ws`, the owner's, with its identity.
fn clone_into(root: &Path, ws: &Path) -> Result<()> {
    let status = Command::new("git")
        .args(["clone", "-q", "--no-hardlinks"])
        .arg(format!("file://{}", root.display()))
        .arg(ws)
        .status()?;
    if !status.success() {
        bail!("git clone: {status}");
    }
    let owner = format!("{OWNER}:{OWNER}");
    if !Command::new("chown")
        .args(["-R", &owner])
        .arg(ws)
        .status()?
        .success()
    {
        bail!("chown {}", ws.display());
    }
    for (k, v) in [("user.name", "Dev"), ("user.email", "dev@example.com")] {
        let mut git = Command::new("git");
        git.arg("-C").arg(ws).args(["config", k, v]);
        as_owner(&mut git);
        if !git.status()?.success() {
            bail!("git config {k}");
        }
    }
    Ok(())
}

pub(crate) fn as_owner(cmd: &mut Command) -> &mut Command {
    // SAFETY: setgroups, setgid and setuid between fork and exec are async-signal-safe (std
    // sets its uid before the hooks run, after which setgroups is refused).
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgroups(0, std::ptr::null()) < 0
                || libc::setgid(OWNER) < 0
                || libc::setuid(OWNER) < 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    }
}

/// One command run as `cmd` says, its output read and dropped; its wall time in ms and whether
/// it exited 0.
pub(crate) fn timed(mut cmd: Command) -> Result<(f64, bool)> {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let t = Instant::now();
    let out = cmd.output()?;
    Ok((t.elapsed().as_secs_f64() * 1e3, out.status.success()))
}

/// Runs the direct twins as an agent running as the workspace's owner runs a command: through
/// `tests/python/direct_runner.py`, started once as the owner, which spawns each one itself
/// (vfork and exec). This driver, as root, would fork itself for each (to change identity), a
/// spawn some milliseconds slower than an agent's that made the baseline look slower than it is.
pub(crate) struct Runner {
    child: Child,
    reply: BufReader<ChildStdout>,
}

impl Runner {
    pub(crate) fn start() -> Result<Self> {
        let source = std::fs::read_to_string(repository()?.join("tests/python/direct_runner.py"))?;
        let mut cmd = Command::new("/usr/bin/python3");
        cmd.arg("-c")
            .arg(source)
            .current_dir("/")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped());
        as_owner(&mut cmd);
        let mut child = cmd.spawn().context("the direct runner")?;
        let reply = BufReader::new(child.stdout.take().context("its stdout")?);
        Ok(Self { child, reply })
    }

    /// `command` run by bash in `ws`: its time in ms, measured by the runner, and whether it
    /// exited 0.
    fn run(&mut self, command: &str, ws: &Path) -> Result<(f64, bool)> {
        self.run_in(command, ws, ws)
    }

    /// `command` run by bash in `dir` of the workspace `ws` (HOME): as [`Runner::run`].
    pub(crate) fn run_in(&mut self, command: &str, dir: &Path, ws: &Path) -> Result<(f64, bool)> {
        let step = json!({"run": ["/bin/bash", "-c", command], "cwd": dir, "env": env(ws)});
        let stdin = self.child.stdin.as_mut().context("the runner's stdin")?;
        writeln!(stdin, "{step}")?;
        stdin.flush()?;
        let mut line = String::new();
        if self.reply.read_line(&mut line)? == 0 {
            bail!("the direct runner ended");
        }
        let done: Value = serde_json::from_str(&line)?;
        let ms = done["ms"].as_f64().context("the runner's ms")?;
        Ok((ms, done["code"] == 0))
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// What one way of calling measured: each round's total, guarded and direct, and the calls
/// that did not conform or did not end as their direct twin did.
#[derive(Default)]
struct Rounds {
    guarded: Vec<f64>,
    direct: Vec<f64>,
    wrong: Vec<String>,
}

impl Rounds {
    fn rows(mut self, how: &str, goal: f64, note: String, report: &mut Report) {
        let (g, d) = (median(&mut self.guarded), median(&mut self.direct));
        report.rows.push(
            Row::new(format!("agent session via {how}"), "ms", g)
                .baseline("the same commands, run directly", d)
                .goal(Goal::RatioAtMost(goal))
                .note(note),
        );
        let wrong = self.wrong.len() as f64;
        let mut row = Row::new(
            format!("agent session via {how}: calls blocked, diverged or ending otherwise"),
            "calls",
            wrong,
        )
        .goal(Goal::Exactly(0.0));
        if let Some(first) = self.wrong.first() {
            row = row.note(format!("first: {first}"));
        }
        report.rows.push(row);
    }
}

/// Through guard-exec, as a shell user (or Claude Code's hook) calls the `shell` tool.
fn via_guard_exec(bin_dir: &Path, guardd: &Guardd, ws: &Path, rounds: usize) -> Result<Rounds> {
    let mut r = Rounds::default();
    let mut runner = Runner::start()?;
    for round in 0..rounds {
        let (mut guarded, mut direct) = (0.0, 0.0);
        for (i, command) in TRACE.iter().enumerate() {
            let mut exec = Command::new(bin_dir.join("guard-exec"));
            exec.arg("--socket")
                .arg(&guardd.socket)
                .args([
                    "--args",
                    &json!({ "command": command }).to_string(),
                    "shell",
                ])
                .current_dir(ws);
            // Alternating which goes first, so neither always finds the caches warm.
            let ((g, g_ok), (d, d_ok)) = if (round + i) % 2 == 0 {
                let g = timed(exec)?;
                (g, runner.run(command, ws)?)
            } else {
                let d = runner.run(command, ws)?;
                (timed(exec)?, d)
            };
            if g_ok != d_ok {
                r.wrong
                    .push(format!("{command:?}: guarded ok={g_ok}, direct ok={d_ok}"));
            }
            guarded += g;
            direct += d;
        }
        r.guarded.push(guarded);
        r.direct.push(direct);
    }
    r.wrong.extend(not_conformed(&guardd.audit)?);
    Ok(r)
}

/// The calls whose finished row in the audit log at `path` says other than `conformed`.
pub(crate) fn not_conformed(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)?;
    let mut wrong = Vec::new();
    for line in text.lines() {
        let row: Value = serde_json::from_str(line)?;
        if row["kind"] == "finished" && row["effects_observed"]["verdict"] != "conformed" {
            wrong.push(format!(
                "call {}: {}",
                row["call_id"], row["effects_observed"]["divergences"]
            ));
        }
    }
    Ok(wrong)
}

/// Through guard-mcp, one MCP session of the official SDK (tests/python/mcp_session.py), which
/// also has the direct twin of each call run (through its own runner as the owner).
fn via_mcp(
    python: &Path,
    bin_dir: &Path,
    guardd: &Guardd,
    ws: &Path,
    rounds: usize,
) -> Result<Rounds> {
    let env = env(ws);
    let mut plan = Vec::new();
    for round in 0..rounds {
        for (i, command) in TRACE.iter().enumerate() {
            let call = json!({"call": "shell", "arguments": {"command": command}});
            let run = json!({"direct": ["/bin/bash", "-c", command], "cwd": ws, "env": env, "uid": OWNER});
            if (round + i) % 2 == 0 {
                plan.extend([call, run]);
            } else {
                plan.extend([run, call]);
            }
        }
    }
    let server = json!({
        "command": bin_dir.join("guard-mcp"),
        "args": ["--socket", guardd.socket],
    });
    let script = repository()?.join("tests/python/mcp_session.py");
    let out = Command::new(python)
        .arg(script)
        .arg(server.to_string())
        .arg(Value::Array(plan).to_string())
        // guard-mcp's directory is where its client started it: the calls' workspace.
        .current_dir(ws)
        .output()?;
    if !out.status.success() {
        bail!(
            "the MCP session failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let steps: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    let mut r = Rounds::default();
    for round in steps.chunks(2 * TRACE.len()) {
        let (mut guarded, mut direct) = (0.0, 0.0);
        for (pair, command) in round.chunks(2).zip(TRACE) {
            let (call, run) = if pair[0].get("code").is_some() {
                (&pair[1], &pair[0])
            } else {
                (&pair[0], &pair[1])
            };
            let conformed = call["structured"]["receipt"]["verdict"] == "conformed";
            let g_ok = call["structured"]["exit_code"] == 0;
            let d_ok = run["code"] == 0;
            if !conformed || g_ok != d_ok {
                r.wrong.push(format!(
                    "{command:?}: guarded exit {} ({}), direct exit {}",
                    call["structured"]["exit_code"],
                    call["structured"]["receipt"]["verdict"],
                    run["code"]
                ));
            }
            guarded += call["ms"].as_f64().context("a call's ms")?;
            direct += run["ms"].as_f64().context("a run's ms")?;
        }
        r.guarded.push(guarded);
        r.direct.push(direct);
    }
    Ok(r)
}

/// This repository's root (the bench is its `tests/` crate).
pub(crate) fn repository() -> Result<PathBuf> {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_owned)
        .context("the repository's root")
}

/// The rows `agent session via guard-mcp` and `agent session via guard-exec`.
pub fn agent_session(bin_dir: &Path, rounds: usize, report: &mut Report) -> Result<()> {
    let root = repository()?;
    let python = root.join("target/venv/bin/python");
    let dir = TempDir::new("guard-bench-session")?;
    let ws = dir.join("ws");
    clone_into(&root, &ws)?;
    let policy = std::fs::read_to_string(root.join("policies/default.toml"))?
        .replace("/srv/agent/workspace", &ws.display().to_string());
    let mut guardd = Guardd::start(bin_dir, &policy, &[])?;
    let note = |how: &str| {
        format!(
            "{} commands of a coding agent (git, ls, cat, sed, grep, find, python3, make, a file \
             written, failing commands) in a clone of this repository, through {how} as the \
             default policy's shell tool, against the same commands spawned directly by a \
             process of the workspace's owner, as its agent would; the median of {rounds} \
             rounds' totals, alternating",
            TRACE.len()
        )
    };
    via_guard_exec(bin_dir, &guardd, &ws, rounds)?.rows(
        "guard-exec",
        1.3,
        note("guard-exec"),
        report,
    );
    if python.exists() {
        via_mcp(&python, bin_dir, &guardd, &ws, rounds)?.rows(
            "guard-mcp",
            1.3,
            note("guard-mcp, one MCP session of the official SDK,"),
            report,
        );
    } else {
        report.skipped.push(format!(
            "agent session via guard-mcp: {} is missing (cargo xtask setup)",
            python.display()
        ));
    }
    crate::stage_medians(&guardd, "shell", "session stage", report)?;
    guardd.stop()?;
    Ok(())
}
