//! guardd: the daemon through which every tool call of an agent must pass.
mod args;
mod config;

use std::{path::PathBuf, process::ExitCode, sync::Arc, time::Duration};

use args::{Args, check_config, settings};
use guard::{
    daemon,
    socket::{self, fair},
};
use tokio::signal::{self, unix::SignalKind};
use tracing_subscriber::EnvFilter;

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
    let page = guard::client::cli::Page {
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
    guard::client::cli::generate_with(<Args as clap::CommandFactory>::command, &page);
    // The start-up self-test runs guardd itself as its canary, before anything else happens.
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(guard::daemon::selftest::CANARY_FLAG) {
        match argv.get(2).and_then(|a| a.parse().ok()) {
            Some(addr) => guard::daemon::selftest::canary(addr),
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
    let terms = match args.connections() {
        Ok(terms) => terms,
        Err(e) => {
            eprintln!("guardd: {e}");
            return ExitCode::from(1);
        }
    };
    raise_fd_limit(&terms.limits);
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
        max_held_per_uid: args.max_held_per_uid,
        drain: Duration::from_secs(args.drain_seconds),
        approval_timeout: Duration::from_secs(args.approval_timeout),
        allow_unenforced: args.allow_unenforced,
        trace_syscalls: args.trace_syscalls,
        event_ring_bytes: args.event_ring_bytes,
        allow_writes_on_audit_fs: args.allow_writes_on_audit_fs,
        audit_rotate_bytes: args.audit_rotate_bytes,
        audit_keep_rotated: args.audit_keep_rotated,
        audit_keep_rotated_for: Duration::from_secs(args.audit_keep_rotated_seconds),
        audit_bytes_per_uid: args.audit_bytes_per_uid,
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
    let listener = match socket::bind(daemon.socket(), gid, terms) {
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
                tokio::spawn(guard::socket::metrics::serve(Arc::clone(&daemon), listener));
            }
            Err(e) => {
                eprintln!("guardd: --metrics-listen {addr}: {e}");
                return ExitCode::from(1);
            }
        }
    }
    daemon.spawn_event_pump();
    guard::review::answer::spawn_sweeper(&daemon);
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
    socket::run(daemon, listener, async {
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
    if let Err(e) = guard::daemon::systemd::notify(state) {
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
