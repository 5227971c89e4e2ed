//! guardd: the daemon through which every tool call of an agent must pass.
mod config;

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use clap::{CommandFactory as _, FromArgMatches as _, Parser, parser::ValueSource};
use guard::{conn, daemon, fair, server};
use tokio::signal::{self, unix::SignalKind};
use tracing_subscriber::EnvFilter;

#[derive(Parser)]
#[command(
    name = "guardd",
    version,
    about = "Decide, confine and watch AI agents' tool calls"
)]
struct Args {
    /// Settings file; each flag given overrides its key [default: /etc/guard/guardd.toml, if present]
    #[arg(long)]
    config: Option<PathBuf>,
    /// Check the settings and the policy, print the settings in force, and exit (0 when fine).
    #[arg(long)]
    check_config: bool,
    /// Ask the guardd serving these settings' socket to load its policy again, print its answer,
    /// and exit 0 only when the new policy is in force (the unit's ExecReload).
    #[arg(long, conflicts_with = "check_config")]
    reload: bool,
    /// Policy file or directory of *.toml files [default: /etc/guard/policy.toml, else /etc/guard/policies/]
    #[arg(long)]
    policy: Option<PathBuf>,
    /// Unix socket to listen on.
    #[arg(long, default_value = "/run/guard/guard.sock")]
    socket: PathBuf,
    /// Append-only audit log.
    #[arg(long, default_value = "/var/lib/guard/audit.jsonl")]
    audit: PathBuf,
    /// The audit log's active file is rotated (FILE.1, FILE.2, ...) once it reaches this size.
    #[arg(long, default_value_t = guard::audit::DEFAULT_ROTATE_BYTES)]
    audit_rotate_bytes: u64,
    /// Rotated audit files to keep; older ones are removed, and a row in the chain says which
    /// rows went, so `guardctl audit verify` still holds [default: all]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    audit_keep_rotated: Option<u64>,
    /// Group owning the socket (mode 0660); its members may submit calls unless the policy lists clients.
    #[arg(long, env = "GUARDD_SOCKET_GROUP")]
    socket_group: Option<String>,
    /// The guard's cgroup, under the cgroup v2 mount [default: `calls` beneath guardd's own
    /// cgroup when systemd delegated it (Delegate=yes), guardd itself moving to `guardd` beside
    /// it; else `guard`]
    #[arg(long)]
    cgroup: Option<String>,
    /// Calls running at once.
    #[arg(long, default_value_t = 64)]
    max_calls: usize,
    /// Calls of one caller uid running at once (0: half of --max-calls); its others wait
    /// behind its own, so one caller's long calls delay no other's.
    #[arg(long, default_value_t = 0)]
    max_calls_per_uid: usize,
    /// Calls waiting for a slot before new ones get a "busy" reply.
    #[arg(long, default_value_t = 1024)]
    max_queue: usize,
    /// Connections open at once beyond each uid's reserve, all uids together (the shared pool).
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Connections one uid may hold at once; its next one is refused as busy, whatever the
    /// pool holds: one uid's flood stops no one but itself.
    #[arg(long, default_value_t = 256)]
    max_connections_per_uid: usize,
    /// Each uid's own connections, admitted whatever the others hold (an admin's status, a
    /// caller's calls); a peer that is no client or admin gets these only.
    #[arg(long, default_value_t = 8)]
    reserved_connections_per_uid: usize,
    /// Streams one uid may follow at once (`tools` with follow: guard-mcp; `subscribe`:
    /// `guardctl events --follow`). A follower never idles out, so this bounds what one uid
    /// can hold for good.
    #[arg(long, default_value_t = 8)]
    max_followers_per_uid: usize,
    /// Seconds a connection may take to send a whole request before it is closed (slow-loris).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86400))]
    idle_timeout: u64,
    /// Seconds a reply may wait for its client to read it before the connection is closed (a
    /// call whose caller stops reading ends as a caller gone).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    write_timeout: u64,
    /// Seconds between keepalives on a quiet followed stream; a follower that has not read the
    /// last one by then, and reads nothing within --write-timeout, is dropped.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    keepalive: u64,
    /// Seconds shutdown waits for running calls before killing them.
    #[arg(long, default_value_t = 10)]
    drain_seconds: u64,
    /// Run even when a kernel layer is missing. Every audit row then says "enforced": false.
    #[arg(long)]
    allow_unenforced: bool,
    /// Record each call's syscall set and opened files (a write outside its effects is a
    /// divergence) and kill exotic socket families in the kernel. While calls run, every syscall
    /// on the host takes the slow (traced) path; with no call running, nothing is attached.
    #[arg(long)]
    trace_syscalls: bool,
    /// Bytes of the kernel's event ring buffer, a power of two of pages. Events the kernel
    /// cannot queue are lost, counted, and make the call's receipt `diverged`; raise it on a
    /// busy host whose receipts report `events_lost`.
    #[arg(long, default_value_t = guard::monitor::DEFAULT_RING_BYTES, value_parser = event_ring_bytes)]
    event_ring_bytes: u32,
    /// How long a call held for approval (escalate, quarantine) waits for an admin's
    /// `guardctl approve` before it is denied.
    #[arg(long, default_value_t = 300)]
    approval_timeout: u64,
    /// Let the policy write on the audit log's file system. Without it such a policy is refused:
    /// a call that fills the file system would starve the log. The rows of running calls are
    /// reserved either way.
    #[arg(long)]
    allow_writes_on_audit_fs: bool,
    /// Threads that serve the socket and start calls [default: one fewer than the CPUs, at
    /// least 1]. The CPU left over is the callers': a woken caller then finds one free, where
    /// behind a busy guardd thread it would wait for the scheduler's next tick.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    worker_threads: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default; say 127.0.0.1:9464):
    /// calls by tool, decision and agent, divergences, launch latency, what guardd holds.
    #[arg(long, value_name = "ADDR")]
    metrics_listen: Option<std::net::SocketAddr>,
    /// Export every audit row and event as OTLP log records over OTLP/HTTP (off by default):
    /// a collector's http://HOST:PORT (its /v1/logs is posted to) or the full URL of its logs.
    #[arg(long, value_name = "URL")]
    otlp_endpoint: Option<guard::export::Endpoint>,
}

impl Args {
    /// Who gets a connection, and the deadlines each one has; settings that contradict each
    /// other (or a file's value out of its flag's range) are an error naming the key.
    fn connections(&self) -> Result<(fair::Limits, conn::Deadlines), String> {
        let limits = fair::Limits {
            shared: self.max_connections,
            per_uid: self.max_connections_per_uid,
            reserved: self.reserved_connections_per_uid,
            followers: self.max_followers_per_uid,
        };
        limits.check()?;
        let seconds = |key: &str, n: u64, max: u64| {
            if (1..=max).contains(&n) {
                Ok(Duration::from_secs(n))
            } else {
                Err(format!("{key} = {n}: must be from 1 to {max} seconds"))
            }
        };
        let deadlines = conn::Deadlines {
            idle: seconds("idle_timeout", self.idle_timeout, 86400)?,
            write: seconds("write_timeout", self.write_timeout, 3600)?,
            keepalive: seconds("keepalive", self.keepalive, 3600)?,
        };
        Ok((limits, deadlines))
    }

    /// The runtime's worker threads: the setting, else one fewer than the CPUs.
    fn workers(&self) -> usize {
        match self.worker_threads {
            Some(n) => usize::try_from(n).unwrap_or(1),
            None => std::thread::available_parallelism()
                .map_or(1, |n| n.get().saturating_sub(1))
                .max(1),
        }
    }
}

fn event_ring_bytes(s: &str) -> Result<u32, String> {
    let n = s.parse::<u64>().map_err(|e| format!("{s}: {e}"))?;
    guard::monitor::ring_bytes(n)
}

/// The flags, with the settings file's keys for those not given on the command line (or in
/// the environment).
fn settings() -> anyhow::Result<Args> {
    let matches = Args::command().get_matches();
    let mut args = Args::from_arg_matches(&matches)?;
    let (path, explicit) = match &args.config {
        Some(p) => (p.clone(), true),
        None => (PathBuf::from(config::DEFAULT_PATH), false),
    };
    let Some(file) = config::load(&path, explicit)? else {
        return Ok(args);
    };
    let given = |id: &str| {
        matches!(
            matches.value_source(id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        )
    };
    // Each key the file sets, unless its flag was given.
    macro_rules! from_file {
        ($($key:ident $(=> $wrap:path)?),*) => {$(
            if let Some(v) = file.$key && !given(stringify!($key)) {
                args.$key = $($wrap)?(v);
            }
        )*};
    }
    from_file!(
        policy => Some, socket, audit, audit_rotate_bytes, audit_keep_rotated => Some,
        socket_group => Some, cgroup => Some,
        max_calls, max_calls_per_uid, max_queue, max_connections, max_connections_per_uid,
        reserved_connections_per_uid, max_followers_per_uid, idle_timeout, write_timeout,
        keepalive, drain_seconds, allow_unenforced, trace_syscalls, event_ring_bytes,
        approval_timeout, allow_writes_on_audit_fs, worker_threads => Some,
        metrics_listen => Some, otlp_endpoint => Some
    );
    args.connections()
        .map_err(|e| anyhow::anyhow!("config {}: {e}", path.display()))?;
    // The file's value did not pass the flag's parser.
    guard::monitor::ring_bytes(u64::from(args.event_ring_bytes))
        .map_err(|e| anyhow::anyhow!("config {}: event_ring_bytes = {e}", path.display()))?;
    if let Some(n) = args.worker_threads
        && !(1..=1024).contains(&n)
    {
        anyhow::bail!(
            "config {}: worker_threads = {n}: must be from 1 to 1024",
            path.display()
        );
    }
    Ok(args)
}

/// `--check-config`: the settings in force and the policy's verdict, without starting.
fn check_config(args: &Args) -> ExitCode {
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    println!("policy = {:?}", policy.display().to_string());
    println!("socket = {:?}", args.socket.display().to_string());
    println!("audit = {:?}", args.audit.display().to_string());
    println!("audit_rotate_bytes = {}", args.audit_rotate_bytes);
    if let Some(k) = args.audit_keep_rotated {
        println!("audit_keep_rotated = {k}");
    }
    if let Some(c) = &args.cgroup {
        println!("cgroup = {c:?}");
    }
    if let Some(g) = &args.socket_group {
        println!("socket_group = {g:?}");
    }
    println!(
        "max_calls = {}\nmax_calls_per_uid = {}\nmax_queue = {}\nmax_connections = {}",
        args.max_calls, args.max_calls_per_uid, args.max_queue, args.max_connections
    );
    println!(
        "max_connections_per_uid = {}\nreserved_connections_per_uid = {}\nmax_followers_per_uid = {}",
        args.max_connections_per_uid, args.reserved_connections_per_uid, args.max_followers_per_uid
    );
    println!(
        "idle_timeout = {}\nwrite_timeout = {}\nkeepalive = {}",
        args.idle_timeout, args.write_timeout, args.keepalive
    );
    if let Some(addr) = args.metrics_listen {
        println!("metrics_listen = \"{addr}\"");
    }
    if let Some(url) = &args.otlp_endpoint {
        println!("otlp_endpoint = \"{url}\"");
    }
    println!(
        "drain_seconds = {}\napproval_timeout = {}",
        args.drain_seconds, args.approval_timeout
    );
    println!(
        "allow_unenforced = {}\ntrace_syscalls = {}\nallow_writes_on_audit_fs = {}",
        args.allow_unenforced, args.trace_syscalls, args.allow_writes_on_audit_fs
    );
    println!("event_ring_bytes = {}", args.event_ring_bytes);
    println!("worker_threads = {}", args.workers());
    match guard::policy::Policy::load(&policy) {
        Ok(p) => {
            // What a start would refuse besides the policy's own errors.
            let allowed = args.allow_writes_on_audit_fs;
            if let Err(e) = guard::daemon::audit_fs_conflict(&p, &args.audit, allowed) {
                eprintln!("guardd: the policy is valid, but guardd would not start: {e}");
                return ExitCode::from(1);
            }
            // The users and groups [settings] names, as a start resolves them.
            if let Err(e) = guard::access::Access::new(p.settings(), None) {
                eprintln!("guardd: the policy is valid, but guardd would not start: {e}");
                return ExitCode::from(1);
            }
            eprintln!(
                "guardd: settings and policy are valid ({} tools)",
                p.tools().count()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("guardd: policy {}: invalid:\n{e}", policy.display());
            ExitCode::from(1)
        }
    }
}

/// `--reload`: what `systemctl reload` runs, so that a reload that changed nothing fails there
/// and not in the journal alone.
fn reload(socket: &std::path::Path) -> ExitCode {
    use guard::protocol::{ReloadRequest, Reply, Request};
    let answer = guard::client::Client::connect(socket)
        .and_then(|mut c| c.request(&Request::Reload(ReloadRequest {})));
    match answer {
        Ok(Reply::Reloaded(r)) => {
            println!("guardd: reloaded {}: {} tools", r.policy.display(), r.tools);
            ExitCode::SUCCESS
        }
        Ok(other) => {
            eprintln!("guardd: {}", guard::client::unexpected(&other));
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("guardd: reload through {}: {e}", socket.display());
            ExitCode::from(1)
        }
    }
}

fn default_policy() -> PathBuf {
    let file = PathBuf::from("/etc/guard/policy.toml");
    if file.exists() {
        file
    } else {
        PathBuf::from("/etc/guard/policies")
    }
}

fn main() -> ExitCode {
    let page = guard::cli::Page {
        sections: &[],
        environment: &[
            (
                "RUST_LOG",
                "what guardd logs to stderr (a tracing filter such as warn or guard=debug; \
                 default info)",
            ),
            (
                "NOTIFY_SOCKET",
                "set by systemd under Type=notify: guardd reports READY=1 there once its \
                 kernel programs are attached, its self-test passed and its socket listens, \
                 and STOPPING=1 when it drains",
            ),
        ],
    };
    guard::cli::generate_with(<Args as clap::CommandFactory>::command, &page);
    // The start-up self-test runs guardd itself as its canary, before anything else happens.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(guard::selftest::CANARY_FLAG) {
        match argv.get(2).and_then(|a| a.parse().ok()) {
            Some(addr) => guard::selftest::canary(addr),
            None => return ExitCode::from(64),
        }
    }
    let args = match settings() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("guardd: {e:#}");
            return ExitCode::from(1);
        }
    };
    if args.check_config {
        return check_config(&args);
    }
    if args.reload {
        return reload(&args.socket);
    }
    // Each running call's write-opens are judged on a blocking thread for the call's life
    // (`sandbox::writes`), and so are a judge's or approver's: the pool must never be full of
    // them, or a call's next write-open would wait for another call to end.
    let blocking = 512 + args.max_calls + args.max_connections;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.workers())
        .max_blocking_threads(blocking)
        .thread_name("guardd-worker")
        .enable_all()
        .build();
    match runtime {
        Ok(rt) => {
            let code = rt.block_on(serve(args));
            // Calls are drained by now; what blocking work is left (a large temporary directory
            // being removed) must not keep a stopped guardd alive: the next start sweeps it.
            rt.shutdown_timeout(Duration::from_secs(2));
            code
        }
        Err(e) => {
            eprintln!("guardd: tokio runtime: {e}");
            ExitCode::from(1)
        }
    }
}

#[expect(
    clippy::too_many_lines,
    reason = "guardd's life read top-down: logging, settings, layers, socket, signals, drain"
)]
async fn serve(args: Args) -> ExitCode {
    let workers = args.workers();
    let metrics_listen = args.metrics_listen;
    let log = tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour for a person at a terminal; none in a file or the journal.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    // The journal stamps each line itself (systemd sets JOURNAL_STREAM for a unit's stderr).
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        log.without_time().init();
    } else {
        log.init();
    }
    if args.trace_syscalls {
        tracing::warn!(
            "--trace-syscalls: while calls run, every syscall on this host takes the traced path"
        );
    }
    if args.allow_unenforced {
        tracing::warn!(
            "--allow-unenforced: calls may run without kernel enforcement; every audit row will say so"
        );
    }
    let (connections, deadlines) = match args.connections() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("guardd: {e}");
            return ExitCode::from(1);
        }
    };
    raise_fd_limit(&connections);
    let options = daemon::Options {
        policy: args.policy.unwrap_or_else(default_policy),
        socket: args.socket,
        audit: args.audit,
        socket_group: args.socket_group,
        cgroup: args.cgroup,
        max_calls: args.max_calls,
        max_calls_per_uid: match args.max_calls_per_uid {
            0 => args.max_calls.div_ceil(2),
            n => n,
        },
        max_queue: args.max_queue,
        connections,
        deadlines,
        drain: Duration::from_secs(args.drain_seconds),
        approval_timeout: Duration::from_secs(args.approval_timeout),
        allow_unenforced: args.allow_unenforced,
        trace_syscalls: args.trace_syscalls,
        event_ring_bytes: args.event_ring_bytes,
        allow_writes_on_audit_fs: args.allow_writes_on_audit_fs,
        audit_rotate_bytes: args.audit_rotate_bytes,
        audit_keep_rotated: args.audit_keep_rotated,
    };
    let daemon = match daemon::Daemon::start(options) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("guardd: {e}");
            return ExitCode::from(1);
        }
    };
    // Before any row, so that every row is exported.
    if let Some(endpoint) = args.otlp_endpoint {
        tracing::info!(%endpoint, "exporting audit rows and events over OTLP/HTTP");
        let export = guard::export::start(&daemon.audit, &daemon.bus, endpoint);
        let _ = daemon.export.set(export);
    }
    // Before any call: the calls a guardd that died here left open get their end recorded.
    daemon.close_left_open().await;
    for layer in &daemon.layers {
        tracing::info!(layer = %layer.name, state = layer.state.as_str(), "{}", layer.detail);
    }
    tracing::info!(policy = %daemon.options.policy.display(), tools = daemon.policy().tools().count(), "policy loaded");
    guard::policy::secrets::warn_if_proc_shows_command_lines(daemon.policy().secrets());
    guard::policy::shadow::warn_if_shadow(&daemon.policy());
    let gid = daemon
        .options
        .socket_group
        .as_ref()
        .and_then(|g| nix::unistd::Group::from_name(g).ok().flatten())
        .map(|g| g.gid.as_raw());
    // Handlers before the socket answers: a caller (a test, a unit's ExecStartPost) may stop
    // guardd as soon as it can connect, and that signal must not kill guardd unrecorded.
    let shutdown = shutdown_signal();
    let hup = signal::unix::signal(SignalKind::hangup());
    let listener = match server::bind(daemon.socket(), gid) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("guardd: socket {}: {e}", daemon.socket().display());
            return ExitCode::from(1);
        }
    };
    tracing::info!(socket = %daemon.socket().display(), workers, "listening");
    if let Some(addr) = metrics_listen {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => {
                tracing::info!(%addr, "serving metrics at /metrics");
                tokio::spawn(guard::metrics::serve(Arc::clone(&daemon), listener));
            }
            Err(e) => {
                eprintln!("guardd: --metrics-listen {addr}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    daemon.spawn_event_pump();
    guard::hold::spawn_sweeper(&daemon);
    match hup {
        Ok(hup) => {
            tokio::spawn(reload_on_sighup(Arc::clone(&daemon), hup));
        }
        Err(e) => {
            tracing::error!("cannot install the SIGHUP handler ({e}); reload with guardctl reload")
        }
    }
    give_back_start_up_memory();
    sd_notify(&format!(
        "READY=1\nSTATUS=enforcing: {} tools, socket {}",
        daemon.policy().tools().count(),
        daemon.socket().display()
    ));
    server::run(daemon, listener, async {
        shutdown.await;
        sd_notify("STOPPING=1\nSTATUS=draining running calls");
    })
    .await;
    tracing::info!("stopped: socket removed, kernel programs detached");
    ExitCode::SUCCESS
}

/// Raises the soft limit on open files to the hard one: outside systemd (whose unit sets
/// `LimitNOFILE=65536`) it is often 1024, below the connections guardd admits, and an accept that
/// fails for want of a descriptor leaves every later caller in the listen queue.
fn raise_fd_limit(limits: &fair::Limits) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid rlimit to fill and then to pass back.
    let raised = unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &raw mut lim) == 0 && {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &raw const lim) == 0
        }
    };
    // The pool and a few uids' reserves, each connection with the three descriptors an exec
    // may pass, and the calls' own.
    let wanted = ((limits.shared + 64 * limits.reserved) * 4 + 1024) as u64;
    if !raised || lim.rlim_cur < wanted {
        tracing::warn!(
            open_files = lim.rlim_cur,
            wanted,
            "the limit on open files is below the connections guardd admits (LimitNOFILE)"
        );
    }
}

/// Returns to the kernel the heap the start-up used and freed: the kernel's BTF read and the
/// programs loaded leave some 20 MiB free in malloc's arenas, which glibc otherwise keeps (an
/// idle guardd at 31 MiB of RSS, 11 MiB after this).
fn give_back_start_up_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only gives back memory malloc holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// SIGHUP loads the policy file again, as `guardctl reload` does; a bad file changes nothing.
async fn reload_on_sighup(daemon: Arc<daemon::Daemon>, mut hup: signal::unix::Signal) {
    while hup.recv().await.is_some() {
        sd_notify("RELOADING=1");
        match daemon.reload(None).await {
            Ok(tools) => tracing::info!(tools, "SIGHUP: policy reloaded"),
            Err(e) => tracing::error!("SIGHUP: policy kept: {e}"),
        }
        sd_notify("READY=1");
    }
}

/// Tells systemd (`Type=notify`) where guardd stands; a failure is logged, never fatal.
fn sd_notify(state: &str) {
    if let Err(e) = guard::notify::notify(state) {
        tracing::warn!("sd_notify {state:?}: {e}");
    }
}

/// SIGTERM or SIGINT. The handlers are installed when this is called, not when it is first
/// awaited.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let handlers = (
        signal::unix::signal(SignalKind::terminate()),
        signal::unix::signal(SignalKind::interrupt()),
    );
    async move {
        let (Ok(mut term), Ok(mut int)) = handlers else {
            tracing::error!("cannot install signal handlers; stop guardd with SIGKILL");
            return std::future::pending().await;
        };
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
            _ = int.recv() => tracing::info!("SIGINT: shutting down"),
        }
    }
}
