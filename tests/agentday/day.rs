//! The agent-day suite's day, shared by the suite (`tests/suite/agentday.rs`) and the bench
//! (`tests/bench/agentday.rs`): its commands, the projects it works in (the directories beside
//! this file) and how they are laid out beneath a workspace's root.
#![allow(dead_code, reason = "the suite and the bench each use their part")]

/// `$cmd` with git's dates fixed, so that each way makes the same commits (the same hashes).
macro_rules! dated {
    ($cmd:literal) => {
        concat!(
            "export GIT_AUTHOR_DATE=2026-01-02T00:00:00Z GIT_COMMITTER_DATE=2026-01-02T00:00:00Z; ",
            $cmd
        )
    };
}

/// What [`dated!`] puts before a command.
pub const DATES: &str = dated!("");

/// The day: each command and the directory it runs in, beneath the workspace's root.
pub const DAY: &[(&str, &str)] = &[
    // Python: tests with processes (fork and spawn, a pool, a queue, locks: semaphores in
    // /dev/shm), a server on 127.0.0.1 and its client, temporary directories and files.
    ("pyproj", "python3 -m unittest -v"),
    // A venv (pip and setuptools from ensurepip; wheel from the system's site-packages) and
    // the project installed into it, editable, without an index.
    (
        "pyproj",
        "python3 -m venv --system-site-packages .venv && \
         .venv/bin/pip install -q --disable-pip-version-check --no-index --no-build-isolation -e . && \
         .venv/bin/python -c 'import daytools; print(daytools.square(7), daytools.__file__)'",
    ),
    (
        "pyproj",
        ".venv/bin/pip list --disable-pip-version-check --format=freeze | grep -i daytools",
    ),
    ("pyproj", ".venv/bin/python -m unittest -q"),
    (
        "pyproj",
        "python3 -m compileall -q src tests && find src tests -name '*.pyc' | sort",
    ),
    (
        "pyproj",
        "python3 -c 'from multiprocessing import shared_memory as s; m = s.SharedMemory(create=True, size=8); \
         m.buf[0] = 7; print(m.buf[0]); m.close(); m.unlink()'",
    ),
    // Node: npm without the registry, node's test runner (a process per file) and tests that
    // spawn, execFile and fork.
    ("nodeproj", "npm init -y"),
    (
        "nodeproj",
        "npm pkg set scripts.test='node --test' && npm pkg get scripts",
    ),
    ("nodeproj", "node --test"),
    ("nodeproj", "npm test"),
    (
        "nodeproj",
        "npm pack --silent && tar -tzf nodeproj-1.0.0.tgz | sort",
    ),
    (
        "nodeproj",
        "node -e \"const fs = require('fs'), os = require('os'), path = require('path'); \
         const d = fs.mkdtempSync(path.join(os.tmpdir(), 'day-')); fs.writeFileSync(path.join(d, 'f'), 'x'); \
         console.log(fs.readdirSync(d)); fs.rmSync(d, { recursive: true })\"",
    ),
    // C with make.
    ("cproj", "make"),
    ("cproj", "make test"),
    ("cproj", "./wc < Makefile && make clean && ls"),
    // Archives: times and modes kept on the way back.
    ("", "tar -czf data.tgz data && tar -tzf data.tgz | sort"),
    (
        "",
        "mkdir restored && tar -xzf data.tgz -C restored && \
         find restored/data | sort | xargs stat -c '%n %Y %a'",
    ),
    (
        "",
        "tar -cf data.tar data && mkdir kept && tar -xpf data.tar -C kept && \
         stat -c '%n %Y %a' kept/data kept/data/sub kept/data/run.sh",
    ),
    (
        "",
        "gzip -k data/a.txt && gunzip -c data/a.txt.gz && gzip -df data/a.txt.gz && \
         gzip -9 < data/b.txt > b.gz && gunzip -t b.gz && echo intact && ls data",
    ),
    (
        "",
        "zip -qr data.zip data && unzip -q data.zip -d unzipped && \
         find unzipped -type f | sort | xargs stat -c '%n %Y' && unzip -l data.zip | tail -1",
    ),
    (
        "",
        "python3 -m zipfile -c py.zip data && python3 -m zipfile -e py.zip pyunzipped && \
         find pyunzipped | sort",
    ),
    // git, in a repository whose pre-commit hook is the developer's own.
    ("repo", "git status --short --branch"),
    (
        "repo",
        "echo 'line 3' >> notes.txt && echo new > new.txt && git add -A && git status --short",
    ),
    ("repo", dated!("git commit -m 'more notes'")),
    // The hook refuses this one, as it would the developer's.
    (
        "repo",
        "echo FIXME >> notes.txt && git add notes.txt && git commit -qm fixme",
    ),
    (
        "repo",
        "git restore --staged notes.txt && git restore notes.txt && git status --short",
    ),
    (
        "repo",
        dated!(
            "git branch feature && git switch -q feature && echo feat > feat.txt && \
             git add feat.txt && git commit -qm feature && git switch -q main && \
             echo main2 >> README.md && git commit -qam 'main moves' && git branch --list"
        ),
    ),
    (
        "repo",
        "echo wip >> README.md && git stash && git stash list && git status --short && \
         git stash pop -q && git status --short && git checkout -- README.md",
    ),
    (
        "repo",
        dated!(
            "git switch -q feature && git rebase main && git log --format=%s && git switch -q main"
        ),
    ),
    (
        "repo",
        "git worktree add -q -b topic ../repo-wt && git -C ../repo-wt status --short --branch && \
         git worktree list | awk '{print $1, $3}'",
    ),
    (
        "repo-wt",
        dated!(
            "echo wt > wt.txt && git add wt.txt && git commit -qm 'in the worktree' && \
             git log -1 --format=%s"
        ),
    ),
    ("repo", "git log --graph --format=%s --all"),
    ("repo", "git log -4 --format='%h %an <%ae> %s'"),
    // Everyday commands.
    (
        "",
        "ps -o user=,comm= -p $$ && ps -e > /dev/null && ps aux | head -1 | tr -s ' '",
    ),
    (
        "",
        "free -m | head -1 && free -b | awk 'NR == 2 {print $1, ($2 > 0)}'",
    ),
    (
        "",
        "uptime | grep -o 'load average' && uptime -p | cut -d' ' -f1",
    ),
    (
        "",
        "ls /tmp > /dev/null && f=/tmp/agentday-$$.txt && echo hi > $f && \
         ls /tmp | grep -c \"^agentday-$$.txt$\" && cat $f && rm $f",
    ),
    (
        "",
        "f=/dev/shm/agentday-$$ && echo shm > $f && cat $f && ls /dev/shm | grep -c \"^agentday-$$$\" && rm $f",
    ),
    (
        "",
        "f=$(mktemp) && d=$(mktemp -d) && echo data > \"$f\" && cp \"$f\" \"$d/\" && ls \"$d\" | wc -l && \
         cat \"$f\" && echo \"$f\" && rm -r \"$f\" \"$d\"",
    ),
];

/// The projects beside this file, copied beneath the workspace's root.
pub const PROJECTS: &[&str] = &["pyproj", "nodeproj", "cproj"];

/// The developer's `~/.gitconfig` (HOME is the workspace's root).
pub const GITCONFIG: &str =
    "[user]\n\tname = Dev\n\temail = dev@example.com\n[init]\n\tdefaultBranch = main\n";

/// The developer's `~/.npmrc`: no update check against the registry, the day runs without
/// network.
pub const NPMRC: &str = "update-notifier=false\nfund=false\naudit=false\n";

/// The developer's pre-commit hook, in `.git/hooks` of the repository: refuses a commit whose
/// staged changes hold FIXME.
pub const PRE_COMMIT: &str = "#!/bin/sh\n\
if git diff --cached | grep -q FIXME; then\n\
  echo 'pre-commit: FIXME in the staged changes' >&2\n\
  exit 1\n\
fi\n\
echo 'pre-commit: ok' >&2\n";

/// What the developer runs, in the directory the projects were copied to, to make the rest: a
/// data directory with fixed times and modes, and a git repository with one commit and the
/// developer's hook.
pub fn lay_out_script() -> String {
    format!(
        "set -e\n\
         mkdir -p data/sub\n\
         for f in a b c; do echo \"file $f\" > data/$f.txt; done\n\
         echo deep > data/sub/d.txt\n\
         printf '#!/bin/sh\\necho run\\n' > data/run.sh && chmod 0750 data/run.sh\n\
         chmod 0640 data/c.txt\n\
         touch -d '2025-03-04 05:06:07' data/*.txt data/run.sh data/sub/d.txt data/sub data\n\
         git init -q repo && cd repo\n\
         echo '# repo' > README.md && printf 'line 1\\nline 2\\n' > notes.txt\n\
         git add -A && {DATES}git commit -qm initial\n\
         cat > .git/hooks/pre-commit <<'EOF'\n{PRE_COMMIT}EOF\n\
         chmod +x .git/hooks/pre-commit\n"
    )
}
