//! guard-bench: measures guard against baselines run side by side in the same process and the
//! same minute, and reports ratios (absolute times vary from run to run on a shared machine;
//! ratios within one run hold). `cargo xtask bench` builds and runs it; see `--help`.
//!
//! 1. a decision in process (the divan `decide` workload), 2. `check` over the socket from 1, 8
//!    and 64 clients against a bare Unix-socket echo server, 3. launching /bin/true through guard
//!    against fork+exec, bwrap and firejail, 4. syscall loops of a process guard does not watch,
//!    guardd running or not, 5. the same loops inside a guarded call against the same binary
//!    bare, 6. many calls in flight at once, 7. a coding agent's session, 8. the agent-day
//!    suite's commands (`agentday`).
//!
//! Every loop is bounded by a count or a deadline; only loopback traffic.
#![allow(
    clippy::too_many_lines,
    reason = "each benchmark reads as its protocol, baseline beside guard"
)]

mod agentday;
mod client;
mod daemon;
mod export;
mod report;
mod session;

use std::{
    io::{BufRead as _, BufReader, Write as _},
    net::{Ipv4Addr, TcpListener, TcpStream},
    os::{
        fd::AsRawFd as _,
        unix::net::{UnixListener, UnixStream},
    },
    path::{Path, PathBuf},
    process::{Command, Stdio},
    sync::{
        Arc, Barrier,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use daemon::{Guardd, RssSampler, TempDir, rss_kib};
use guard::{
    call::intent::Intent,
    policy::Policy,
    protocol::{CheckRequest, ExecRequest, Request},
};
use report::{Goal, Report, Row, median, p50_p99};

// The divan bench's workload, shared so both measure the same thing.
#[path = "../../guard-daemon/benches/support/policy100.rs"]
mod policy100;

/// How much of everything a run does.
pub(crate) struct Scale {
    decide_iters: usize,
    check_secs: f64,
    pub(crate) launch_runs: usize,
    /// firejail takes tens of milliseconds per launch: fewer runs.
    slow_launch_runs: usize,
    loop_runs: usize,
    /// guardd off/on cycles for the unwatched loops.
    cycles: usize,
    open_n: u64,
    write_open_n: u64,
    connect_n: u64,
    flight_calls: usize,
    /// Rounds of the agent session, each way.
    session_rounds: usize,
    /// Rounds of the agent-day suite's whole day, each way (three times as many of its bulk
    /// rows).
    day_rounds: usize,
}

const FULL: Scale = Scale {
    decide_iters: 200_000,
    check_secs: 2.0,
    // 1000: the p99 of 200 runs was their second-slowest, and moved by half from run to run.
    launch_runs: 1000,
    slow_launch_runs: 40,
    loop_runs: 9,
    cycles: 4,
    open_n: 20_000,
    write_open_n: 5_000,
    connect_n: 2_000,
    flight_calls: 1000,
    session_rounds: 5,
    day_rounds: 3,
};

const QUICK: Scale = Scale {
    decide_iters: 20_000,
    check_secs: 0.5,
    launch_runs: 30,
    slow_launch_runs: 8,
    loop_runs: 3,
    cycles: 2,
    open_n: 5_000,
    write_open_n: 1_000,
    connect_n: 500,
    flight_calls: 200,
    session_rounds: 2,
    day_rounds: 1,
};

const USAGE: &str = "usage: guard-bench [--quick] [--only PHASE] [--bin-dir DIR] [--out FILE]
  --quick     a smaller, faster run
  --only      one phase: decide, check, launch, export, flight, session or agentday (its goals
              alone are counted; launch includes export)
  --bin-dir   where guardd, guard-exec and guard-testtool are [default: this binary's directory]
  --out       the JSON report [default: target/bench/report.json]";

/// The phases `--only` can pick, in the order a whole run takes them.
const PHASES: &[&str] = &[
    "decide", "check", "launch", "export", "flight", "session", "agentday",
];

struct Opts {
    quick: bool,
    only: Option<String>,
    bin_dir: PathBuf,
    out: PathBuf,
}

fn opts() -> Result<Opts> {
    let exe = std::env::current_exe()?;
    let bin_dir = exe.parent().context("binary directory")?.to_owned();
    // target/<profile>/guard-bench -> target/bench/report.json
    let out = bin_dir.parent().map_or_else(
        || PathBuf::from("report.json"),
        |t| t.join("bench/report.json"),
    );
    let mut o = Opts {
        quick: false,
        only: None,
        bin_dir,
        out,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => o.quick = true,
            "--only" => {
                let phase = args.next().context(USAGE)?;
                if !PHASES.contains(&phase.as_str()) {
                    bail!("unknown phase {phase}\n{USAGE}");
                }
                o.only = Some(phase);
            }
            "--bin-dir" => o.bin_dir = args.next().context(USAGE)?.into(),
            "--out" => o.out = args.next().context(USAGE)?.into(),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other}\n{USAGE}"),
        }
    }
    Ok(o)
}

fn main() -> Result<()> {
    let o = opts()?;
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("guard-bench needs root: guardd loads kernel programs and makes cgroups");
    }
    raise_fd_limit();
    let scale = if o.quick { &QUICK } else { &FULL };
    let mut report = Report {
        rows: Vec::new(),
        skipped: Vec::new(),
    };
    let started = Instant::now();
    let phase = |name: &str| eprintln!("bench: {name} ({:.0} s)", started.elapsed().as_secs_f64());

    let runs = |name: &str| o.only.as_deref().is_none_or(|only| only == name);
    if runs("decide") {
        phase("1/8 decision in process");
        decide_in_process(scale, &mut report)?;
    }
    if runs("check") {
        phase("2/8 check over the socket");
        check_over_socket(&o, scale, &mut report)?;
    }
    if runs("launch") {
        phase("3-5/8 launch and syscall loops");
        launch_and_loops(&o, scale, &mut report)?;
        phase("3/8 launch from a client");
        client::launch_from_a_client(&o.bin_dir, scale, &mut report)?;
        client::latency_under_a_flood(&o.bin_dir, scale, &mut report)?;
    }
    if runs("launch") || runs("export") {
        phase("3/8 launch with OTLP export");
        export::launch_with_export(&o.bin_dir, scale, &mut report)?;
    }
    if runs("flight") {
        phase("6/8 calls in flight");
        in_flight(&o, scale, &mut report)?;
    }
    if runs("session") {
        phase("7/8 an agent session");
        session::agent_session(&o.bin_dir, scale.session_rounds, &mut report)?;
    }
    if runs("agentday") {
        phase("8/8 the agent-day suite");
        agentday::agent_day(&o.bin_dir, scale.day_rounds, &mut report)?;
    }
    phase("done");

    print!("{}", report.table());
    report.write(&o.out, o.quick)?;
    println!("report: {}", o.out.display());
    Ok(())
}

/// 1000 connections, each with stdio, need more than the usual 1024 descriptors; guardd, our
/// child, inherits the limit.
fn raise_fd_limit() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: lim is a valid rlimit to fill and then to pass back.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Decision in process

fn decide_in_process(scale: &Scale, report: &mut Report) -> Result<()> {
    let policy = Policy::parse(Path::new("policy100.toml"), &policy100::policy_text())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let intents: Vec<Intent> = policy100::calls()
        .into_iter()
        .map(|(tool, args)| Intent::new(tool, args))
        .collect();
    let mut allowed = 0;
    for i in &intents {
        allowed += usize::from(policy.decide(i).plan.is_some());
    }
    for i in 0..scale.decide_iters / 10 {
        std::hint::black_box(policy.decide(&intents[i % intents.len()]));
    }
    let mut ns = Vec::with_capacity(scale.decide_iters);
    for i in 0..scale.decide_iters {
        let intent = std::hint::black_box(&intents[i % intents.len()]);
        let t = Instant::now();
        std::hint::black_box(policy.decide(intent));
        ns.push(t.elapsed().as_nanos() as f64 / 1e3);
    }
    let (p50, p99) = p50_p99(&mut ns);
    let what = format!(
        "100 tools, {} rules; {} calls, {allowed} allowed",
        policy.rule_count(),
        intents.len()
    );
    report.rows.push(
        Row::new("decide in process p50", "µs", p50)
            .goal(Goal::AtMost(5.0))
            .note(format!(
                "{what}; scale: Invariant's local engine ≈ 311 µs per regex rule (published, not run here)"
            )),
    );
    report
        .rows
        .push(Row::new("decide in process p99", "µs", p99).goal(Goal::AtMost(10.0)));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 2. check over the socket

struct Load {
    latencies_us: Vec<f64>,
    per_sec: f64,
    errors: usize,
}

/// `clients` threads, each on its own connection, send `frames` in turn and wait for each reply
/// until `secs` have passed.
fn load(socket: &Path, frames: &Arc<Vec<Vec<u8>>>, clients: usize, secs: f64) -> Result<Load> {
    let barrier = Arc::new(Barrier::new(clients + 1));
    let mut threads = Vec::new();
    for c in 0..clients {
        let stream = UnixStream::connect(socket).context("connecting")?;
        let (barrier, frames) = (barrier.clone(), frames.clone());
        threads.push(std::thread::spawn(move || -> (Vec<f64>, usize) {
            let mut writer = stream.try_clone().expect("clone stream");
            let mut reader = BufReader::new(stream);
            let mut line = Vec::with_capacity(1024);
            let (mut lat, mut errors) = (Vec::new(), 0);
            barrier.wait();
            let deadline = Instant::now() + Duration::from_secs_f64(secs);
            let mut i = c;
            while Instant::now() < deadline {
                let t = Instant::now();
                line.clear();
                if writer.write_all(&frames[i % frames.len()]).is_err()
                    || reader.read_until(b'\n', &mut line).unwrap_or(0) == 0
                {
                    errors += 1;
                    break;
                }
                lat.push(t.elapsed().as_nanos() as f64 / 1e3);
                if !line.windows(17).any(|w| w == br#""type":"decision""#) {
                    errors += 1;
                }
                i += 1;
            }
            (lat, errors)
        }));
    }
    barrier.wait();
    let t = Instant::now();
    let mut out = Load {
        latencies_us: Vec::new(),
        per_sec: 0.0,
        errors: 0,
    };
    for th in threads {
        let (lat, errors) = th.join().map_err(|_| anyhow::anyhow!("client panicked"))?;
        out.latencies_us.extend(lat);
        out.errors += errors;
    }
    out.per_sec = out.latencies_us.len() as f64 / t.elapsed().as_secs_f64();
    Ok(out)
}

/// The baseline: a Unix-socket server that answers each line with the reply guardd gave to the
/// same request, on a thread per connection. It accepts `clients` connections, and each thread
/// ends when its client goes.
fn echo_server(
    path: &Path,
    clients: usize,
    replies: Arc<Vec<Vec<u8>>>,
) -> Result<std::thread::JoinHandle<()>> {
    let listener = UnixListener::bind(path)?;
    Ok(std::thread::spawn(move || {
        let mut conns = Vec::new();
        for c in 0..clients {
            let Ok((stream, _)) = listener.accept() else {
                break;
            };
            let replies = replies.clone();
            conns.push(std::thread::spawn(move || {
                let mut writer = stream.try_clone().expect("clone stream");
                let mut reader = BufReader::new(stream);
                let mut line = Vec::with_capacity(1024);
                let mut i = c;
                loop {
                    line.clear();
                    if reader.read_until(b'\n', &mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if writer.write_all(&replies[i % replies.len()]).is_err() {
                        return;
                    }
                    i += 1;
                }
            }));
        }
        for c in conns {
            let _ = c.join();
        }
    }))
}

fn check_over_socket(o: &Opts, scale: &Scale, report: &mut Report) -> Result<()> {
    let mut guardd = Guardd::start(&o.bin_dir, &policy100::policy_text(), &[])?;
    let frames: Vec<Vec<u8>> = policy100::calls()
        .into_iter()
        .map(|(tool, args)| {
            let request = Request::Check(CheckRequest {
                tool: tool.to_string(),
                args,
                cwd: None,
            });
            guard::protocol::frame(&request)
        })
        .collect();
    // Warm up, and keep each request's reply for the echo baseline.
    let mut replies = Vec::new();
    {
        let stream = UnixStream::connect(&guardd.socket)?;
        let mut writer = stream.try_clone()?;
        let mut reader = BufReader::new(stream);
        for round in 0..200 {
            for f in &frames {
                writer.write_all(f)?;
                let mut line = Vec::new();
                reader.read_until(b'\n', &mut line)?;
                if round == 0 {
                    let v: serde_json::Value = serde_json::from_slice(&line)?;
                    if v["type"] != "decision" {
                        bail!("check got {v}");
                    }
                    replies.push(line);
                }
            }
        }
    }
    let (frames, replies) = (Arc::new(frames), Arc::new(replies));
    let idle_kib = rss_kib(guardd.pid());
    let sampler = RssSampler::start(guardd.pid());
    let dir = TempDir::new("guard-bench-echo")?;
    let mut errors = 0;
    for clients in [1, 8, 64] {
        let g = load(&guardd.socket, &frames, clients, scale.check_secs)?;
        let echo_path = dir.join(&format!("echo-{clients}.sock"));
        let server = echo_server(&echo_path, clients, replies.clone())?;
        let b = load(&echo_path, &frames, clients, scale.check_secs)?;
        let _ = server.join();
        errors += g.errors + b.errors;
        let (mut gl, mut bl) = (g.latencies_us, b.latencies_us);
        let ((g50, g99), (b50, b99)) = (p50_p99(&mut gl), p50_p99(&mut bl));
        let base = "echo server";
        // With N clients in a closed loop, latency is N / throughput: the latency goals are
        // for one client, the throughput goal for many.
        // The tail is held to the echo server's, which has the same kernel, scheduler and
        // client threads but does no work.
        let (lat50, lat99, tput) = match clients {
            1 => (Goal::AtMost(50.0), Goal::RatioAtMost(4.0), Goal::Info),
            8 => (Goal::Info, Goal::RatioAtMost(4.0), Goal::AtLeast(20_000.0)),
            _ => (Goal::Info, Goal::RatioAtMost(4.0), Goal::Info),
        };
        report.rows.push(
            Row::new(format!("check, {clients} clients, p50"), "µs", g50)
                .baseline(base, b50)
                .goal(lat50),
        );
        report.rows.push(
            Row::new(format!("check, {clients} clients, p99"), "µs", g99)
                .baseline(base, b99)
                .goal(lat99),
        );
        report.rows.push(
            Row::new(
                format!("check, {clients} clients, throughput"),
                "req/s",
                g.per_sec,
            )
            .baseline(base, b.per_sec)
            .goal(tput),
        );
    }
    let load_kib = sampler.finish();
    report.rows.push(
        Row::new("guardd RSS idle", "MiB", idle_kib as f64 / 1024.0)
            .goal(Goal::AtMost(20.0))
            .note("after its start: kernel programs loaded, self-test passed, nothing served yet"),
    );
    report.rows.push(
        Row::new(
            "guardd RSS under check load (peak)",
            "MiB",
            load_kib as f64 / 1024.0,
        )
        .baseline("idle", idle_kib as f64 / 1024.0),
    );
    report
        .rows
        .push(Row::new("check errors", "", errors as f64).goal(Goal::Exactly(0.0)));
    guardd.stop()?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 3-5. Launch, and syscall loops outside and inside a call

/// The policy for launches and loops: `true`, and the test tool's two loops.
fn launch_policy(tool: &Path, dir: &Path, port: u16) -> String {
    let (tool, dir) = (tool.display(), dir.display());
    format!(
        r#"
[tools.true]
tier = "low"
command = ["/bin/true"]

[tools.loop_open]
tier = "low"
command = ["{tool}", "loop-open", "{{path}}", "{{n}}"]
timeout = 60
[tools.loop_open.args.path]
type = "path"
required = true
within = ["{dir}"]
[tools.loop_open.args.n]
type = "integer"
required = true
min = 1
max = 10000000
[tools.loop_open.effects]
read = ["{{path}}"]

[tools.loop_write_open]
tier = "low"
command = ["{tool}", "loop-write-open", "{{path}}", "{{n}}"]
timeout = 60
[tools.loop_write_open.args.path]
type = "path"
required = true
within = ["{dir}/w"]
[tools.loop_write_open.args.n]
type = "integer"
required = true
min = 1
max = 10000000
[tools.loop_write_open.effects]
write = ["{{path}}"]

[tools.loop_connect]
tier = "low"
command = ["{tool}", "loop-connect", "127.0.0.1:{port}", "{{n}}"]
timeout = 60
[tools.loop_connect.args.n]
type = "integer"
required = true
min = 1
max = 10000000
[tools.loop_connect.effects]
connect = ["127.0.0.1:{port}"]
"#
    )
}

/// A loopback TCP listener that accepts and drops connections until dropped.
struct Sink {
    port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sink {
    fn start() -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        // A deep backlog: a full one drops SYNs, and a dropped SYN costs a 1 s retransmit.
        // SAFETY: listen(2) on a bound socket we own; it only changes the backlog.
        unsafe { libc::listen(listener.as_raw_fd(), 4096) };
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = listener.accept();
                }
            })
        };
        Ok(Self {
            port,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accept so the thread sees the flag.
        let _ = TcpStream::connect((Ipv4Addr::LOCALHOST, self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `cmd` to completion with null stdio; its wall time in µs.
fn time_run(cmd: &mut Command) -> Result<f64> {
    let t = Instant::now();
    let status = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()?;
    let us = t.elapsed().as_nanos() as f64 / 1e3;
    if !status.success() {
        bail!("{cmd:?}: {status}");
    }
    Ok(us)
}

/// Runs a loop action and returns the ns per iteration the tool reports.
fn loop_ns(cmd: &mut Command) -> Result<f64> {
    let out = cmd.stdin(Stdio::null()).output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        bail!(
            "{cmd:?}: {}: {}{}",
            out.status,
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let field = |name: &str| -> Option<f64> {
        text.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .and_then(|v| v.parse().ok())
    };
    match (field("n="), field("ns=")) {
        (Some(n), Some(ns)) if n > 0.0 => Ok(ns / n),
        _ => bail!("unexpected loop output: {text}"),
    }
}

/// A launch candidate: a name and how to build its command, or why it is not available.
struct Candidate<'a> {
    name: &'static str,
    make: Box<dyn Fn() -> Command + 'a>,
    runs: usize,
    samples: Vec<f64>,
    failed: Option<String>,
}

fn launch_and_loops(o: &Opts, scale: &Scale, report: &mut Report) -> Result<()> {
    let dir = TempDir::new("guard-bench-tool")?;
    // The target directory may not be traversable by guard-tool: run a copy.
    let tool = dir.join("guard-testtool");
    std::fs::copy(o.bin_dir.join("guard-testtool"), &tool).context("copying guard-testtool")?;
    let file = dir.join("file");
    std::fs::write(&file, b"guard")?;
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755))?;
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644))?;
    // Written by the write-open loop, as guard-tool, in a directory of its own: a tool that
    // may write where the test tool lies could replace it (the policy refuses that).
    let wdir = dir.join("w");
    std::fs::create_dir_all(&wdir)?;
    let wfile = wdir.join("file");
    std::fs::write(&wfile, b"")?;
    std::fs::set_permissions(&wfile, std::fs::Permissions::from_mode(0o666))?;
    let sink = Sink::start()?;
    let addr = format!("127.0.0.1:{}", sink.port);
    let bare_open = || {
        let mut c = Command::new(&tool);
        c.arg("loop-open").arg(&file).arg(scale.open_n.to_string());
        c
    };
    let bare_write_open = || {
        let mut c = Command::new(&tool);
        c.arg("loop-write-open")
            .arg(&wfile)
            .arg(scale.write_open_n.to_string());
        c
    };
    let bare_connect = || {
        let mut c = Command::new(&tool);
        c.arg("loop-connect")
            .arg(&addr)
            .arg(scale.connect_n.to_string());
        c
    };

    let mut guardd = Guardd::start(&o.bin_dir, &launch_policy(&tool, &dir.0, sink.port), &[])?;
    let socket = guardd.socket.clone();
    let exec = |tool_name: &str, args: &[String]| {
        let mut c = Command::new(o.bin_dir.join("guard-exec"));
        c.arg("--socket").arg(&socket).arg(tool_name).args(args);
        c
    };

    // 3. Launch: round-robin, so every candidate sees the same noise.
    let mut candidates = vec![
        Candidate {
            name: "guard-exec true",
            make: Box::new(|| exec("true", &[])),
            runs: scale.launch_runs,
            samples: Vec::new(),
            failed: None,
        },
        Candidate {
            name: "fork+exec",
            make: Box::new(|| Command::new("/bin/true")),
            runs: scale.launch_runs,
            samples: Vec::new(),
            failed: None,
        },
        Candidate {
            name: "bwrap",
            make: Box::new(|| {
                let mut c = Command::new("bwrap");
                c.args(["--unshare-all", "--ro-bind", "/", "/", "/bin/true"]);
                c
            }),
            runs: scale.launch_runs,
            samples: Vec::new(),
            failed: None,
        },
        Candidate {
            name: "firejail",
            make: Box::new(|| {
                let mut c = Command::new("firejail");
                c.args(["--quiet", "--noprofile", "/bin/true"]);
                c
            }),
            runs: scale.slow_launch_runs,
            samples: Vec::new(),
            failed: None,
        },
        Candidate {
            name: "guard-exec --version",
            make: Box::new(|| {
                let mut c = Command::new(o.bin_dir.join("guard-exec"));
                c.arg("--version");
                c
            }),
            runs: scale.launch_runs,
            samples: Vec::new(),
            failed: None,
        },
    ];
    for c in &mut candidates {
        // One unmeasured run: warms caches and tells whether the candidate works here.
        if let Err(e) = time_run(&mut (c.make)()) {
            c.failed = Some(format!("{e:#}"));
        }
    }
    let n = candidates.len();
    for round in 0..scale.launch_runs {
        // Each round starts at the next candidate, so none always runs right after another
        // (firejail leaves work behind it for the run after).
        for k in 0..n {
            let c = &mut candidates[(round + k) % n];
            if c.failed.is_some() {
                continue;
            }
            if round * c.runs / scale.launch_runs == c.samples.len() && c.samples.len() < c.runs {
                match time_run(&mut (c.make)()) {
                    Ok(us) => c.samples.push(us),
                    Err(e) => c.failed = Some(format!("{e:#}")),
                }
            }
        }
    }
    let ms = |c: &mut Candidate| {
        let (p50, p99) = p50_p99(&mut c.samples);
        (p50 / 1e3, p99 / 1e3)
    };
    let mut stats = Vec::new();
    for c in &mut candidates {
        if let Some(why) = &c.failed {
            report.skipped.push(format!("launch {}: {why}", c.name));
            stats.push(None);
        } else {
            stats.push(Some(ms(c)));
        }
    }
    if let Some((g50, g99)) = stats[0] {
        if let Some((b50, b99)) = stats[1] {
            report.rows.push(
                // Informational: guard-exec's own start is a shell user's convenience; the goal
                // of a launch against fork+exec is the persistent client's (`launch from a
                // client`), and guard-exec's is to be below bwrap.
                Row::new("launch /bin/true p50 vs fork+exec", "ms", g50)
                    .baseline("fork+exec", b50)
                    .note("guard-exec end to end: connect, decide, audit (fsync), cgroup, confine, exec, wait, audit"),
            );
            report.rows.push(
                Row::new("launch /bin/true p99 vs fork+exec", "ms", g99).baseline("fork+exec", b99),
            );
        }
        if let Some((b50, b99)) = stats[2] {
            report.rows.push(
                Row::new("launch /bin/true p50 vs bwrap", "ms", g50)
                    .baseline("bwrap --unshare-all", b50)
                    .goal(Goal::RatioAtMost(1.0)),
            );
            report.rows.push(
                Row::new("launch /bin/true p99 vs bwrap", "ms", g99)
                    .baseline("bwrap --unshare-all", b99)
                    .goal(Goal::RatioAtMost(1.0)),
            );
        }
        if let Some((b50, _)) = stats[3] {
            report.rows.push(
                Row::new("launch /bin/true p50 vs firejail", "ms", g50)
                    .baseline("firejail --noprofile", b50),
            );
        }
    }
    // What no design with a shim and a daemon can go below: the shim's start and the tool's.
    if let (Some((shim50, _)), Some((fork50, _))) = (stats[4], stats[1]) {
        report.rows.push(
            Row::new("launch floor: guard-exec start + fork+exec", "ms", shim50 + fork50)
                .baseline("fork+exec", fork50)
                .note("two process starts, the shim's (guard-exec --version) and the tool's, before any decision, fdatasync or confinement: the least a guarded launch costs"),
        );
    }

    // 5: inside a call vs the same binary bare, interleaved.
    let (mut bare5_open, mut bare5_connect) = (Vec::new(), Vec::new());
    let (mut in_open, mut in_connect) = (Vec::new(), Vec::new());
    let open_args = [
        format!("path={}", file.display()),
        format!("n:={}", scale.open_n),
    ];
    let connect_args = [format!("n:={}", scale.connect_n)];
    let write_open_args = [
        format!("path={}", wfile.display()),
        format!("n:={}", scale.write_open_n),
    ];
    let (mut bare5_write, mut in_write) = (Vec::new(), Vec::new());
    for _ in 0..scale.loop_runs {
        bare5_open.push(loop_ns(&mut bare_open())?);
        in_open.push(loop_ns(&mut exec("loop_open", &open_args))?);
        bare5_write.push(loop_ns(&mut bare_write_open())?);
        in_write.push(loop_ns(&mut exec("loop_write_open", &write_open_args))?);
        bare5_connect.push(loop_ns(&mut bare_connect())?);
        in_connect.push(loop_ns(&mut exec("loop_connect", &connect_args))?);
    }
    report.rows.push(
        Row::new(
            "write-open+close, inside a guarded call",
            "ns/op",
            median(&mut in_write),
        )
        .baseline("same binary bare", median(&mut bare5_write))
        .note(format!(
            "a write-open stops until guardd has judged it (seccomp user notification, a round \
             trip to guardd); medians of {} runs, interleaved with the bare ones",
            scale.loop_runs
        )),
    );
    drop(candidates);
    guardd.stop()?;
    stage_medians(&guardd, "true", "launch stage", report)?;
    drop(guardd);

    // 4: a process guard does not watch, guardd stopped and running, in alternating cycles
    // (one guardd per cycle) so drift over the run falls on both sides alike. Cycle parity
    // splits the guardd-off runs in two halves whose difference shows the noise floor.
    let (mut off_open, mut off_connect) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let (mut on_open, mut on_connect) = (Vec::new(), Vec::new());
    for cycle in 0..scale.cycles {
        for _ in 0..scale.loop_runs {
            off_open[cycle % 2].push(loop_ns(&mut bare_open())?);
            off_connect[cycle % 2].push(loop_ns(&mut bare_connect())?);
        }
        let guardd = Guardd::start(&o.bin_dir, &launch_policy(&tool, &dir.0, sink.port), &[])?;
        for _ in 0..scale.loop_runs {
            on_open.push(loop_ns(&mut bare_open())?);
            on_connect.push(loop_ns(&mut bare_connect())?);
        }
        drop(guardd);
    }
    let [off_open, off2_open] = off_open;
    let [off_connect, off2_connect] = off_connect;

    for (name, off1, off2, on, inside, bare) in [
        (
            "open+close",
            off_open,
            off2_open,
            on_open,
            in_open,
            bare5_open,
        ),
        (
            "connect+close",
            off_connect,
            off2_connect,
            on_connect,
            in_connect,
            bare5_connect,
        ),
    ] {
        let (mut a, mut b) = (off1.clone(), off2.clone());
        let spread = (median(&mut a) / median(&mut b) - 1.0).abs() * 100.0;
        let mut off: Vec<f64> = off1.into_iter().chain(off2).collect();
        let (mut on, mut inside, mut bare) = (on, inside, bare);
        let (off, on_m) = (median(&mut off), median(&mut on));
        report.rows.push(
            Row::new(
                format!("{name}, unwatched process, guardd on"),
                "ns/op",
                on_m,
            )
            .baseline("guardd off", off)
            .goal(Goal::RatioAtMost(1.01))
            .note(format!(
                "medians of {} runs each side, {} off/on cycles; the guardd-off halves differ \
                 by {spread:.1}% (noise floor)",
                scale.loop_runs * scale.cycles,
                scale.cycles
            )),
        );
        report.rows.push(
            Row::new(
                format!("{name}, inside a guarded call"),
                "ns/op",
                median(&mut inside),
            )
            .baseline("same binary bare", median(&mut bare))
            .goal(Goal::RatioAtMost(1.5))
            .note(format!(
                "medians of {} runs, interleaved with the bare ones",
                scale.loop_runs
            )),
        );
    }
    drop(sink);
    Ok(())
}

/// Where the calls of `tool` spent their time: the median of each stage guardd timed (the
/// `finished` rows' `timings_us`), as rows named `{prefix}: {stage}`, so that a change shows
/// which stage it moved.
pub(crate) fn stage_medians(
    guardd: &Guardd,
    tool: &str,
    prefix: &str,
    report: &mut Report,
) -> Result<()> {
    let timings = guardd.stage_timings(tool)?;
    let mut order: Vec<String> = Vec::new();
    let mut samples: std::collections::HashMap<String, Vec<f64>> = Default::default();
    for stages in &timings {
        for (name, d) in stages.laps() {
            if !order.iter().any(|n| n == name) {
                order.push(name.to_owned());
            }
            samples
                .entry(name.to_owned())
                .or_default()
                .push(d.as_secs_f64() * 1e6);
        }
    }
    for name in order {
        let mut s = samples.remove(&name).unwrap_or_default();
        let note = format!("median of {} calls, as guardd timed it", s.len());
        report
            .rows
            .push(Row::new(format!("{prefix}: {name}"), "µs", median(&mut s)).note(note));
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// 6. Calls in flight at once

/// How long each call sleeps: long enough that calls overlap while the rest are launched.
const NAP_SECONDS: u32 = 2;

fn in_flight(o: &Opts, scale: &Scale, report: &mut Report) -> Result<()> {
    let n = scale.flight_calls;
    let policy = format!(
        "[tools.nap]\ntier = \"low\"\ncommand = [\"/bin/sleep\", \"{NAP_SECONDS}\"]\ntimeout = 120\n"
    );
    let max = (n + 64).to_string();
    let queue = (2 * n).to_string();
    let mut guardd = Guardd::start(
        &o.bin_dir,
        &policy,
        &[
            "--max-calls",
            &max,
            "--max-queue",
            &queue,
            "--max-connections",
            "8192",
            // Every call of the flight is one connection of this uid.
            "--max-connections-per-uid",
            &max,
        ],
    )?;
    let idle_kib = rss_kib(guardd.pid());
    let sampler = RssSampler::start(guardd.pid());
    let null = std::fs::File::options()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    let fd = null.as_raw_fd();
    let frame = guard::protocol::frame(&Request::Exec(ExecRequest {
        tool: "nap".into(),
        args: Default::default(),
    }));
    let barrier = Arc::new(Barrier::new(n + 1));
    let mut threads = Vec::with_capacity(n);
    let t0 = Instant::now();
    for _ in 0..n {
        let (barrier, socket, frame) = (barrier.clone(), guardd.socket.clone(), frame.clone());
        // Returns (decision at, exit at) in seconds since t0, or what went wrong.
        let th = std::thread::Builder::new().stack_size(256 * 1024).spawn(
            move || -> Result<(f64, f64), String> {
                let stream = UnixStream::connect(&socket).map_err(|e| format!("connect: {e}"))?;
                barrier.wait();
                guard::protocol::conn::send_with_fds(&stream, &frame, &[fd, fd, fd])
                    .map_err(|e| format!("send: {e}"))?;
                let mut reader = BufReader::new(stream);
                let mut next = || -> Result<serde_json::Value, String> {
                    let mut line = Vec::new();
                    match reader.read_until(b'\n', &mut line) {
                        Ok(0) => Err("guardd closed the connection".into()),
                        Ok(_) => serde_json::from_slice(&line).map_err(|e| e.to_string()),
                        Err(e) => Err(e.to_string()),
                    }
                };
                let d = next()?;
                if d["decision"] != "allow" {
                    return Err(format!("decision: {d}"));
                }
                let started = t0.elapsed().as_secs_f64();
                // The `started` frame (where the call's processes are) comes before its end.
                let mut e = next()?;
                while e["type"] == "started" {
                    e = next()?;
                }
                if e["type"] != "exit" || e["code"] != 0 || !e["error"].is_null() {
                    return Err(format!("exit: {e}"));
                }
                Ok((started, t0.elapsed().as_secs_f64()))
            },
        )?;
        threads.push(th);
    }
    barrier.wait();
    let sent = t0.elapsed().as_secs_f64();
    let mut spans = Vec::new();
    let mut errors = Vec::new();
    for th in threads {
        match th.join() {
            Ok(Ok(span)) => spans.push(span),
            Ok(Err(e)) => errors.push(e),
            Err(_) => errors.push("client thread panicked".into()),
        }
    }
    let wall = t0.elapsed().as_secs_f64() - sent;
    let peak_kib = sampler.finish();
    guardd.stop()?;
    let rows = guardd.audit_rows("decision")? + guardd.audit_rows("finished")?;
    // Peak number of calls running at once, from the clients' view (allowed .. exited).
    let mut edges: Vec<(f64, i32)> = spans.iter().flat_map(|&(a, b)| [(a, 1), (b, -1)]).collect();
    edges.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
    let (mut running, mut peak) = (0, 0);
    for (_, d) in edges {
        running += d;
        peak = peak.max(running);
    }
    if let Some(first) = errors.first() {
        report.skipped.push(format!(
            "in flight: {} errors, first: {first}",
            errors.len()
        ));
    }
    report.rows.push(
        Row::new(
            format!("{n} calls at once: completed"),
            "",
            spans.len() as f64,
        )
        .goal(Goal::Exactly(n as f64))
        .note(format!(
            "each call sleeps {NAP_SECONDS} s; all done {wall:.1} s after submission; \
                 peak {peak} allowed and not yet exited at once (client view)"
        )),
    );
    report.rows.push(
        Row::new(
            format!("{n} calls at once: errors"),
            "",
            errors.len() as f64,
        )
        .goal(Goal::Exactly(0.0)),
    );
    report.rows.push(
        Row::new(format!("{n} calls at once: audit rows"), "", rows as f64)
            .goal(Goal::Exactly(2.0 * n as f64))
            .note("decision + finished rows in the audit log"),
    );
    report.rows.push(
        Row::new(
            format!("{n} calls at once: guardd RSS peak"),
            "MiB",
            peak_kib as f64 / 1024.0,
        )
        .baseline("idle", idle_kib as f64 / 1024.0)
        // The whole run's (1,000 calls); a quick run's 200 are held to it too.
        .goal(Goal::AtMost(64.0))
        .note(format!(
            "{:.0} KiB per call in flight",
            (peak_kib.saturating_sub(idle_kib)) as f64 / n as f64
        )),
    );
    Ok(())
}
