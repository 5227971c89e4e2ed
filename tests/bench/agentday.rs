//! The agent-day suite's rows (issue 50): two bulk operations of an agent's day, a git add and
//! commit of 3,000 files and a tar -x of 3,000 files, and the suite's whole day
//! (`tests/agentday/day.rs`: Python with a venv, Node, C, archives, git, everyday commands) in
//! its projects, each command through guard-exec as the default policy's `shell` tool against
//! the same command spawned directly by a process of the workspace's owner
//! (`session::Runner`), side by side, alternating which goes first. The workspace's root is
//! outside /tmp, as in the suite, so each call has a /tmp and /dev/shm of its own. Every guarded
//! call must end as its direct twin did and conform: the others are counted in a row of their
//! own, whose goal is none.

#[path = "../agentday/day.rs"]
mod day;

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{Context as _, Result, bail};
use serde_json::json;

use crate::{
    daemon::{Guardd, unique},
    report::{Goal, Report, Row, median},
    session::{self, OWNER, Runner, as_owner, timed},
};

/// Files in the bulk rows: 30 directories of 100 (`make_tree`).
const FILES: &str = "3,000";

/// What the owner runs (untimed) to make `FILES` small files beneath `tree`.
fn make_tree(tree: &str) -> String {
    format!(
        "rm -rf {tree} && mkdir {tree} && (cd {tree} && for d in $(seq 30); do mkdir d$d; \
         for f in $(seq 100); do echo \"file $d/$f\" > d$d/f$f.txt; done; done)"
    )
}

/// The directory the workspace's root lives in, under /var/tmp: removed on drop.
struct Root(PathBuf);

impl Root {
    fn new() -> Result<Self> {
        use std::os::unix::fs::PermissionsExt as _;
        let path = Path::new("/var/tmp").join(unique("guard-bench-agentday"));
        std::fs::create_dir_all(&path).with_context(|| format!("creating {}", path.display()))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        Ok(Self(path))
    }
}

impl Drop for Root {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// One run of a command, untimed, as the owner in `dir` of the workspace `ws`: the
/// preparations between the timed commands.
fn prepare(script: &str, dir: &Path, ws: &Path) -> Result<()> {
    let mut bash = Command::new("/bin/bash");
    bash.args(["-c", script])
        .current_dir(dir)
        .env_clear()
        .env("HOME", ws)
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .env("LANG", "C.UTF-8");
    as_owner(&mut bash);
    let out = bash.output()?;
    if !out.status.success() {
        bail!(
            "preparing in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// The owner's `chown -R` of `paths`.
fn give_to_owner(paths: &[&Path]) -> Result<()> {
    let owner = format!("{OWNER}:{OWNER}");
    if !Command::new("chown")
        .args(["-hR", &owner])
        .args(paths)
        .status()?
        .success()
    {
        bail!("chown {paths:?}");
    }
    Ok(())
}

/// The suite's projects laid out afresh beneath `base`, a directory of the workspace `ws`
/// (HOME, with the owner's `~/.gitconfig` and `~/.npmrc`), as the suite lays them out.
fn lay_out(ws: &Path, base: &Path) -> Result<()> {
    let _ = std::fs::remove_dir_all(base);
    std::fs::create_dir_all(base)?;
    let fixtures = session::repository()?.join("tests/agentday");
    for project in day::PROJECTS {
        let copied = Command::new("cp")
            .arg("-r")
            .arg(fixtures.join(project))
            .arg(base)
            .status()?;
        if !copied.success() {
            bail!("cp {project}");
        }
    }
    std::fs::write(ws.join(".gitconfig"), day::GITCONFIG)?;
    std::fs::write(ws.join(".npmrc"), day::NPMRC)?;
    give_to_owner(&[base, &ws.join(".gitconfig"), &ws.join(".npmrc")])?;
    prepare(&day::lay_out_script(), base, ws)
}

/// The times of each pair of runs, and what did not end alike.
#[derive(Default)]
struct Pairs {
    guarded: Vec<f64>,
    direct: Vec<f64>,
    wrong: Vec<String>,
}

/// What the pairs run against: guardd, the direct runner, the workspace.
struct Bench<'a> {
    bin_dir: &'a Path,
    guardd: &'a Guardd,
    runner: Runner,
    ws: &'a Path,
}

impl Bench<'_> {
    /// `command` through guard-exec in `g_dir` and directly in `d_dir`, the first first when
    /// `turn` is even: their times in ms.
    fn pair(
        &mut self,
        command: &str,
        g_dir: &Path,
        d_dir: &Path,
        turn: usize,
        wrong: &mut Vec<String>,
    ) -> Result<(f64, f64)> {
        let mut exec = Command::new(self.bin_dir.join("guard-exec"));
        exec.arg("--socket")
            .arg(&self.guardd.socket)
            .args([
                "--args",
                &json!({ "command": command }).to_string(),
                "shell",
            ])
            .current_dir(g_dir);
        let ((g, g_ok), (d, d_ok)) = if turn.is_multiple_of(2) {
            let g = timed(exec)?;
            (g, self.runner.run_in(command, d_dir, self.ws)?)
        } else {
            let d = self.runner.run_in(command, d_dir, self.ws)?;
            (timed(exec)?, d)
        };
        if g_ok != d_ok {
            wrong.push(format!("{command:?}: guarded ok={g_ok}, direct ok={d_ok}"));
        }
        Ok((g, d))
    }
}

/// `git add -A && git commit` of `FILES` new files in a repository the owner made, each round
/// on a fresh tree each way.
fn commit_many(b: &mut Bench, rounds: usize) -> Result<Pairs> {
    let mut p = Pairs::default();
    let command = format!("{}git add -A && git commit -qm many", day::DATES);
    for round in 0..rounds {
        let mut dirs = Vec::new();
        for tree in ["many-g", "many-d"] {
            prepare(
                &format!("{} && git -C {tree} init -q", make_tree(tree)),
                b.ws,
                b.ws,
            )?;
            dirs.push(b.ws.join(tree));
        }
        let (g, d) = b.pair(&command, &dirs[0], &dirs[1], round, &mut p.wrong)?;
        p.guarded.push(g);
        p.direct.push(d);
    }
    Ok(p)
}

/// `tar -xf` of an archive of `FILES` files into an empty directory, each round.
fn extract_many(b: &mut Bench, rounds: usize) -> Result<Pairs> {
    let mut p = Pairs::default();
    prepare(
        &format!(
            "{} && tar -cf files.tar tree && rm -r tree",
            make_tree("tree")
        ),
        b.ws,
        b.ws,
    )?;
    for round in 0..rounds {
        prepare("rm -rf out-g out-d && mkdir out-g out-d", b.ws, b.ws)?;
        let (g, d) = b.pair(
            "tar -xf ../files.tar",
            &b.ws.join("out-g"),
            &b.ws.join("out-d"),
            round,
            &mut p.wrong,
        )?;
        p.guarded.push(g);
        p.direct.push(d);
    }
    Ok(p)
}

/// The suite's whole day, each round in fresh projects each way: each round's total.
fn whole_day(b: &mut Bench, rounds: usize) -> Result<Pairs> {
    let mut p = Pairs::default();
    let (g_base, d_base) = (b.ws.join("day-g"), b.ws.join("day-d"));
    for round in 0..rounds {
        lay_out(b.ws, &g_base)?;
        lay_out(b.ws, &d_base)?;
        let (mut guarded, mut direct) = (0.0, 0.0);
        for (i, (dir, command)) in day::DAY.iter().enumerate() {
            let (g, d) = b.pair(
                command,
                &g_base.join(dir),
                &d_base.join(dir),
                round + i,
                &mut p.wrong,
            )?;
            guarded += g;
            direct += d;
        }
        p.guarded.push(guarded);
        p.direct.push(direct);
    }
    Ok(p)
}

/// The rows `agent day: ...`.
pub fn agent_day(bin_dir: &Path, rounds: usize, report: &mut Report) -> Result<()> {
    let root = Root::new()?;
    let ws = root.0.join("ws");
    std::fs::create_dir(&ws)?;
    give_to_owner(&[&ws])?;
    let policy = std::fs::read_to_string(session::repository()?.join("policies/default.toml"))?
        .replace("/srv/agent/workspace", &ws.display().to_string());
    let mut guardd = Guardd::start(bin_dir, &policy, &[])?;
    let mut b = Bench {
        bin_dir,
        guardd: &guardd,
        runner: Runner::start()?,
        ws: &ws,
    };
    let bulk_rounds = 3 * rounds;
    let mut wrong = Vec::new();
    let spread = "through guard-exec as the default policy's shell tool, against the same \
                  command spawned directly by a process of the workspace's owner";
    let mut rows = Vec::new();
    let mut p = commit_many(&mut b, bulk_rounds)?;
    rows.push(
        Row::new(
            format!("agent day: git add and commit of {FILES} files"),
            "ms",
            median(&mut p.guarded),
        )
        .baseline("the same, run directly", median(&mut p.direct))
        .goal(Goal::RatioAtMost(1.2))
        .note(format!(
            "`git add -A && git commit` of {FILES} new files in 30 directories of a repository \
             the owner made, {spread}; the median of {bulk_rounds} rounds, alternating"
        )),
    );
    wrong.append(&mut p.wrong);
    let mut p = extract_many(&mut b, bulk_rounds)?;
    rows.push(
        Row::new(
            format!("agent day: tar -x of {FILES} files"),
            "ms",
            median(&mut p.guarded),
        )
        .baseline("the same, run directly", median(&mut p.direct))
        .goal(Goal::RatioAtMost(1.1))
        .note(format!(
            "`tar -xf` of an archive of {FILES} files in 30 directories into an empty one, \
             {spread}; the median of {bulk_rounds} rounds, alternating"
        )),
    );
    wrong.append(&mut p.wrong);
    let mut p = whole_day(&mut b, rounds)?;
    rows.push(
        Row::new("agent day: whole suite", "ms", median(&mut p.guarded))
            .baseline("the same commands, run directly", median(&mut p.direct))
            .goal(Goal::RatioAtMost(1.2))
            .note(format!(
                "the agent-day suite's {} commands (Python's unittest with processes and a \
                 server, a venv and an editable install, npm and node --test, make, tar, gzip, \
                 zip, git with the developer's hook, ps, /tmp, /dev/shm) in fresh projects, \
                 {spread}; the median of {rounds} rounds' totals, alternating",
                day::DAY.len()
            )),
    );
    wrong.append(&mut p.wrong);
    drop(b);
    wrong.extend(session::not_conformed(&guardd.audit)?);
    let mut row = Row::new(
        "agent day: calls blocked, diverged or ending otherwise",
        "calls",
        wrong.len() as f64,
    )
    .goal(Goal::Exactly(0.0));
    if let Some(first) = wrong.first() {
        row = row.note(format!("first: {first}"));
    }
    rows.push(row);
    report.rows.append(&mut rows);
    guardd.stop()?;
    Ok(())
}
