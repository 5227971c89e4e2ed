//! guardd's flags, and the settings file's keys for those not given (`--config`); what
//! `--check-config` prints of them.

use std::{path::PathBuf, process::ExitCode, time::Duration};

use clap::{CommandFactory as _, FromArgMatches as _, Parser, parser::ValueSource};
use guard::{
    protocol::conn,
    socket::{self, fair},
};

use super::{config, default_policy};

#[derive(Parser)]
#[command(
    name = "guardd",
    version,
    about = "Decide, confine and watch AI agents' tool calls",
    after_help = guard::client::cli::BOOK_HELP
)]
pub(crate) struct Args {
    /// Settings file; each flag given overrides its key [default: /etc/guard/guardd.toml, if present]
    #[arg(long)]
    pub(crate) config: Option<PathBuf>,
    /// Check the settings and the policy, print the settings in force, and exit (0 when fine).
    #[arg(long)]
    pub(crate) check_config: bool,
    /// Ask the guardd serving these settings' socket to load its policy again, print its answer,
    /// and exit 0 only when the new policy is in force (the unit's ExecReload).
    #[arg(long, conflicts_with = "check_config")]
    pub(crate) reload: bool,
    /// Policy file or directory of *.toml files [default: /etc/guard/policy.toml, else /etc/guard/policies/]
    #[arg(long)]
    pub(crate) policy: Option<PathBuf>,
    /// Unix socket to listen on.
    #[arg(long, default_value = "/run/guard/guard.sock")]
    pub(crate) socket: PathBuf,
    /// Append-only audit log.
    #[arg(long, default_value = "/var/lib/guard/audit.jsonl")]
    pub(crate) audit: PathBuf,
    /// The audit log's active file is rotated (FILE.1, FILE.2, ...) once it reaches this size.
    #[arg(long, default_value_t = guard::audit::DEFAULT_ROTATE_BYTES)]
    pub(crate) audit_rotate_bytes: u64,
    /// Rotated audit files to keep; older ones are removed, and a row in the chain says which
    /// rows went, so `guardctl audit verify` still holds [default: all]
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) audit_keep_rotated: Option<u64>,
    /// Seconds a rotated audit file is kept whatever --audit-keep-rotated says, so that a
    /// caller flooding the log cannot rotate an earlier call's rows out of it (a full disk
    /// refuses calls instead) [default: a week]
    #[arg(long, default_value_t = guard::audit::DEFAULT_KEEP_ROTATED_FOR.as_secs())]
    pub(crate) audit_keep_rotated_seconds: u64,
    /// Bytes of audit rows one uid's calls may write a minute; past it, its new calls are
    /// refused until it is back under (root and admins are not limited; 0: no limit).
    #[arg(long, default_value_t = guard::audit::share::BYTES_PER_UID)]
    pub(crate) audit_bytes_per_uid: u64,
    /// Group owning the socket (mode 0660); its members may submit calls unless the policy lists clients.
    #[arg(long, env = "GUARDD_SOCKET_GROUP")]
    pub(crate) socket_group: Option<String>,
    /// The guard's cgroup, under the cgroup v2 mount [default: `calls` beneath guardd's own
    /// cgroup when systemd delegated it (Delegate=yes), guardd itself moving to `guardd` beside
    /// it; else `guard`]
    #[arg(long)]
    pub(crate) cgroup: Option<String>,
    /// Calls running at once.
    #[arg(long, default_value_t = 64)]
    pub(crate) max_calls: usize,
    /// Calls of one caller uid running at once (0: half of --max-calls); its others wait
    /// behind its own, so one caller's long calls delay no other's.
    #[arg(long, default_value_t = 0)]
    pub(crate) max_calls_per_uid: usize,
    /// Calls waiting for a slot before new ones get a "busy" reply; also the calls held for
    /// approval at once.
    #[arg(long, default_value_t = 1024)]
    pub(crate) max_queue: usize,
    /// Calls of one uid held for approval at once (root and admins: --max-queue alone); the
    /// last of --max-queue's held slots, as many (at most half), are kept for root and admins.
    /// 0: no other uid's call is held (each is refused, with a row, as over its bound).
    #[arg(long, default_value_t = guard::approval::bounds::DEFAULT_PER_UID)]
    pub(crate) max_held_per_uid: usize,
    /// Connections open at once beyond each uid's reserve, all uids together (the shared pool).
    #[arg(long, default_value_t = 4096)]
    pub(crate) max_connections: usize,
    /// Connections one uid may hold at once; its next one is refused as busy, whatever the
    /// pool holds: one uid's flood stops no one but itself.
    #[arg(long, default_value_t = 256)]
    pub(crate) max_connections_per_uid: usize,
    /// Each uid's own connections, admitted whatever the others hold (an admin's status, a
    /// caller's calls); a peer that is no client or admin gets these only.
    #[arg(long, default_value_t = 8)]
    pub(crate) reserved_connections_per_uid: usize,
    /// Streams one uid may follow at once (`tools` with follow: guard-mcp; `subscribe`:
    /// `guardctl events --follow`). A follower never idles out, so this bounds what one uid
    /// can hold for good.
    #[arg(long, default_value_t = 8)]
    pub(crate) max_followers_per_uid: usize,
    /// Seconds a connection may take to send a whole request before it is closed (slow-loris).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(1..=86400))]
    pub(crate) idle_timeout: u64,
    /// Seconds a reply may wait for its client to read it before the connection is closed (a
    /// call whose caller stops reading ends as a caller gone).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) write_timeout: u64,
    /// Seconds between keepalives on a quiet followed stream; a follower that has not read the
    /// last one by then, and reads nothing within --write-timeout, is dropped.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub(crate) keepalive: u64,
    /// Seconds shutdown waits for running calls before killing them.
    #[arg(long, default_value_t = 10)]
    pub(crate) drain_seconds: u64,
    /// Run even when a kernel layer is missing. Every audit row then says "enforced": false.
    #[arg(long)]
    pub(crate) allow_unenforced: bool,
    /// Record each call's syscall set and opened files (a write outside its effects is a
    /// divergence) and kill exotic socket families in the kernel. While calls run, every syscall
    /// on the host takes the slow (traced) path; with no call running, nothing is attached.
    #[arg(long)]
    pub(crate) trace_syscalls: bool,
    /// Bytes of the kernel's event ring buffer, a power of two of pages. Events the kernel
    /// cannot queue are lost, counted, and make the call's receipt `diverged`; raise it on a
    /// busy host whose receipts report `events_lost`.
    #[arg(long, default_value_t = guard::monitor::DEFAULT_RING_BYTES, value_parser = event_ring_bytes)]
    pub(crate) event_ring_bytes: u32,
    /// How long a call held for approval (escalate, quarantine) waits for an admin's
    /// `guardctl approve` before it is denied.
    #[arg(long, default_value_t = 300)]
    pub(crate) approval_timeout: u64,
    /// Let the policy write on the audit log's file system. Without it such a policy is refused:
    /// a call that fills the file system would starve the log. The rows of running calls are
    /// reserved either way.
    #[arg(long)]
    pub(crate) allow_writes_on_audit_fs: bool,
    /// Threads that serve the socket and start calls [default: one fewer than the CPUs, at
    /// least 1]. The CPU left over is the callers': a woken caller then finds one free, where
    /// behind a busy guardd thread it would wait for the scheduler's next tick.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub(crate) worker_threads: Option<u64>,
    /// Serve Prometheus metrics at http://ADDR/metrics (off by default; say 127.0.0.1:9464):
    /// calls by tool, decision and agent, divergences, launch latency, what guardd holds.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_listen: Option<std::net::SocketAddr>,
    /// Export every audit row and event as OTLP log records over OTLP/HTTP (off by default):
    /// a collector's http://HOST:PORT (its /v1/logs is posted to) or the full URL of its logs.
    #[arg(long, value_name = "URL")]
    pub(crate) otlp_endpoint: Option<guard::export::Endpoint>,
}

impl Args {
    /// Who gets a connection, and the deadlines each one has; settings that contradict each
    /// other (or a file's value out of its flag's range) are an error naming the key.
    pub(crate) fn connections(&self) -> Result<socket::Terms, String> {
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
        Ok(socket::Terms { limits, deadlines })
    }

    /// The runtime's worker threads: the setting, else one fewer than the CPUs.
    pub(crate) fn workers(&self) -> usize {
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
pub(crate) fn settings() -> anyhow::Result<Args> {
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
        audit_keep_rotated_seconds, audit_bytes_per_uid,
        socket_group => Some, cgroup => Some,
        max_calls, max_calls_per_uid, max_queue, max_held_per_uid, max_connections,
        max_connections_per_uid,
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
pub(crate) fn check_config(args: &Args) -> ExitCode {
    let policy = args.policy.clone().unwrap_or_else(default_policy);
    println!("policy = {:?}", policy.display().to_string());
    println!("socket = {:?}", args.socket.display().to_string());
    println!("audit = {:?}", args.audit.display().to_string());
    println!("audit_rotate_bytes = {}", args.audit_rotate_bytes);
    if let Some(k) = args.audit_keep_rotated {
        println!("audit_keep_rotated = {k}");
        println!(
            "audit_keep_rotated_seconds = {}",
            args.audit_keep_rotated_seconds
        );
    }
    println!("audit_bytes_per_uid = {}", args.audit_bytes_per_uid);
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
    println!("max_held_per_uid = {}", args.max_held_per_uid);
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
            if let Err(e) = guard::callers::access::Access::new(p.settings(), None) {
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
