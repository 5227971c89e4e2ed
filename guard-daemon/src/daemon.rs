//! guardd's shared state and its start: every layer is brought up and proven before the socket
//! opens, and a layer that is missing stops the start (fail closed) unless the operator opted
//! out with `--allow-unenforced`, which every audit row then records.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, RwLock},
    time::{Duration, Instant},
};

mod interrupted;
mod project;
mod reload;
use tokio::sync::{mpsc, oneshot};

use crate::{
    access::Access,
    approval::{Approvals, sessions::Sessions, store::Store},
    audit::{self, AuditLog},
    bus::Bus,
    calls::Calls,
    cgroup::{self, Cgroup, Swept},
    lock::{self, LockError, StateLock},
    monitor::Monitor,
    policy::Policy,
    receipt::Receipts,
    sandbox, selftest,
    violations::Violations,
};

/// How guardd was asked to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub policy: PathBuf,
    pub socket: PathBuf,
    pub audit: PathBuf,
    /// Group owning the socket (mode 0660); its members may submit calls by default.
    pub socket_group: Option<String>,
    /// The guard's cgroup under the cgroup v2 mount; `None`: beneath guardd's own when systemd
    /// delegated it, else `guard` at the root ([`cgroup::place`]).
    pub cgroup: Option<String>,
    /// Calls running at once; more wait in the queue.
    pub max_calls: usize,
    /// Of those, calls of one caller uid at once; its others wait behind its own.
    pub max_calls_per_uid: usize,
    /// Calls waiting for a slot before new ones are refused as busy.
    pub max_queue: usize,
    /// Connections admitted, per uid and in all (`fair`).
    pub connections: crate::fair::Limits,
    /// How long a connection may keep guardd waiting, reading or writing.
    pub deadlines: crate::conn::Deadlines,
    /// How long shutdown waits for running calls before killing them.
    pub drain: Duration,
    /// Run without the kernel layers (logged, and recorded in every audit row).
    pub allow_unenforced: bool,
    /// Attach the syscall tracepoints: per-call syscall sets in receipts and the kernel's
    /// socket-family kill behind seccomp, at a cost to every syscall on the host.
    pub trace_syscalls: bool,
    /// Bytes of the kernel's event ring buffer (a power of two of pages): what the kernel can
    /// report before guardd drains it. Events beyond it are lost, counted, and a divergence.
    pub event_ring_bytes: u32,
    /// How long a call held for approval waits for an admin before it is denied.
    pub approval_timeout: Duration,
    /// Let a policy write on the audit log's file system (the operator's opt-in; the rows of
    /// running calls are still reserved, see `audit::reserve`).
    pub allow_writes_on_audit_fs: bool,
    /// Size at which the audit log's active file is rotated.
    pub audit_rotate_bytes: u64,
    /// Rotated audit files kept (`None`: all).
    pub audit_keep_rotated: Option<u64>,
}

/// The gid of `--socket-group`; an unknown name is an error, never a silent "no group".
fn socket_gid(options: &Options) -> Result<Option<u32>, String> {
    let Some(name) = &options.socket_group else {
        return Ok(None);
    };
    nix::unistd::Group::from_name(name)
        .ok()
        .flatten()
        .map(|g| Some(g.gid.as_raw()))
        .ok_or_else(|| format!("unknown socket group `{name}`"))
}

/// The socket's group: `in_force` (`--socket-group`, or what guardd started with), else the
/// policy's `[settings] socket_group`. The socket is bound once, so a policy that names another
/// group than the one in force is refused, never silently ignored.
fn socket_group(
    in_force: Option<&str>,
    settings: &crate::policy::Settings,
) -> Result<Option<String>, String> {
    match (in_force, settings.socket_group.as_deref()) {
        (Some(a), Some(b)) if a != b => Err(format!(
            "the policy's socket_group `{b}` is not the socket's group `{a}` (--socket-group, or \
             the group guardd started with): the socket is bound once; restart guardd to change it"
        )),
        (Some(a), _) => Ok(Some(a.to_owned())),
        (None, b) => Ok(b.map(str::to_owned)),
    }
}

/// The tools of `policy` that may write on the file system holding `audit`: a call that fills
/// it would starve the audit log of the rows that record it. Each is "tool: root".
fn writes_on_audit_fs(policy: &Policy, audit: &Path) -> Vec<String> {
    use std::os::unix::fs::MetadataExt as _;
    let dev_of = |p: &Path| {
        p.ancestors()
            .find_map(|a| std::fs::metadata(a).ok())
            .map(|m| m.dev())
    };
    let audit_dir = audit.parent().unwrap_or(Path::new("/"));
    let audit_dev = dev_of(audit_dir);
    policy
        .write_roots()
        .into_iter()
        .filter(|(_, root)| match root {
            None => true,
            Some(r) => audit_dir.starts_with(r) || dev_of(r) == audit_dev,
        })
        .map(|(tool, root)| match root {
            Some(r) => format!("{tool}: {}", r.display()),
            None => format!("{tool}: any path (an argument without `within`)"),
        })
        .collect()
}

/// Refuses a policy that may write on the audit log's file system, unless the operator opted in.
fn check_audit_fs(policy: &Policy, options: &Options) -> Result<(), String> {
    audit_fs_conflict(policy, &options.audit, options.allow_writes_on_audit_fs)
}

/// Why guardd would refuse `policy` with its audit log at `audit` (see `check_audit_fs`);
/// `guardd --check-config` says it before a start does.
pub fn audit_fs_conflict(policy: &Policy, audit: &Path, allowed: bool) -> Result<(), String> {
    let shared = writes_on_audit_fs(policy, audit);
    if shared.is_empty() || allowed {
        return Ok(());
    }
    Err(format!(
        "these write effects lie on the file system of the audit log {}: {}; a call that fills \
         it would leave no room for the rows that record it. Put the audit log on a file system \
         of its own, or opt in with --allow-writes-on-audit-fs (rows of running calls are \
         reserved either way)",
        audit.display(),
        shared.join(", ")
    ))
}

/// Why guardd did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("policy {path}: invalid:\n{errors}")]
    Policy { path: PathBuf, errors: String },
    #[error(
        "kernel layer {layer} unavailable: {reason} (refusing to run unenforced; see --allow-unenforced)"
    )]
    Layer { layer: &'static str, reason: String },
    #[error("audit log {path}: {reason}")]
    Audit { path: PathBuf, reason: String },
    #[error("settings: {0}")]
    Settings(String),
    #[error(transparent)]
    InUse(#[from] LockError),
}

pub use crate::protocol::reply::{Layer, LayerState};

impl Layer {
    fn new(name: impl Into<String>, state: LayerState, detail: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            state,
            detail: detail.into(),
        }
    }
}

/// Says so when opening the audit log cut a torn tail a crash left.
fn warn_if_torn(audit: &AuditLog) {
    let recovery = audit.recovery();
    if recovery.truncated_bytes > 0 {
        tracing::warn!(
            bytes = recovery.truncated_bytes,
            "audit log: truncated a torn tail left by a crash"
        );
    }
}

/// Everything the connection handlers share.
pub struct Daemon {
    pub options: Options,
    policy: RwLock<Arc<Policy>>,
    /// Each workspace's own policy merged with it (`.guard/policy.toml`).
    projects: crate::policy::project::Projects,
    /// Taken for a whole reload: two at once put their files in force in the order read.
    reloading: tokio::sync::Mutex<()>,
    pub access: RwLock<Access>,
    /// `None` only when running unenforced by the operator's choice.
    pub monitor: Option<Mutex<Monitor>>,
    pub audit: AuditLog,
    pub bus: Bus,
    /// The OTLP export of the log's rows and the bus's events, once started (`export::start`).
    pub export: OnceLock<crate::export::Export>,
    /// The receipts of the running calls, written from kernel events.
    pub receipts: Receipts,
    /// Calls waiting for an admin's approval.
    pub approvals: Approvals,
    /// Sessions an approver terminated.
    pub sessions: Sessions,
    /// The tools each caller had blocked recently (the judges' `policy_violations`).
    pub violations: Violations,
    /// The guard's cgroup; each call gets a child.
    pub root: Cgroup,
    /// The same, relative to the v2 mount (as /proc/PID/cgroup shows it), e.g. `/guard`.
    pub cgroup_path: String,
    /// The same without the leading `/`: where the calls' v1 limit directories go too.
    cgroup_name: String,
    pub layers: Vec<Layer>,
    /// How calls are launched on this host (limits mode, landlock opt-out).
    pub launch: sandbox::LaunchOptions,
    /// Admission: slots, the queue, the running calls and their ids.
    pub calls: Calls,
    /// The policy's agents at work: their counts and rates.
    pub agents: Arc<crate::agents::Agents>,
    pub started: Instant,
    /// Asks the event pump to read everything the kernel has written so far (see `flush_events`).
    flush: OnceLock<mpsc::Sender<oneshot::Sender<()>>>,
    /// What a guardd that died here left (its calls' cgroups, held records refused), until
    /// the log says so (`close_left_open`).
    left: std::sync::Mutex<interrupted::Left>,
    /// This guardd's hold on its cgroup, socket and audit log; declared last, so released after
    /// everything else is gone.
    _lock: StateLock,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // The v2 root cgroup removes itself (a field); the v1 limit directories are named after
        // it and go with it, so nothing piles up under the v1 hierarchies.
        sandbox::limits::sweep_v1(&self.cgroup_name, true);
    }
}

impl Daemon {
    /// Brings every layer up, or says which one is missing.
    pub fn start(mut options: Options) -> Result<Arc<Self>, StartError> {
        let policy = Policy::load(&options.policy).map_err(|e| StartError::Policy {
            path: options.policy.clone(),
            errors: e.to_string(),
        })?;
        options.socket_group = socket_group(options.socket_group.as_deref(), policy.settings())
            .map_err(StartError::Settings)?;
        sandbox::tmp::prepare_root()
            .map_err(|e| StartError::Settings(format!("{}: {e}", sandbox::tmp::ROOT)))?;
        check_audit_fs(&policy, &options).map_err(StartError::Settings)?;
        let access = socket_gid(&options)
            .and_then(|gid| Access::new(policy.settings(), gid))
            .map_err(StartError::Settings)?;

        let enforced = !options.allow_unenforced;
        let mut layers = Vec::new();

        let (held, root, cgroup_name, swept) = claim(&options)?;
        let cgroup_path = format!("/{cgroup_name}");
        let audit = AuditLog::open(audit::Options {
            rotate_bytes: options.audit_rotate_bytes,
            ..audit::Options::new(&options.audit)
        })
        .map_err(|e| StartError::Audit {
            path: options.audit.clone(),
            reason: e.to_string(),
        })?;
        layers.push(Layer::new(
            "cgroup v2",
            LayerState::Active,
            root.path().display().to_string(),
        ));

        layers.push(landlock_layer(enforced)?);
        layers.push(Layer::new(
            "seccomp",
            LayerState::Active,
            "deny-list, EPERM",
        ));

        let monitor = kernel_programs(&root, &options, &mut layers)?;
        let launch = sandbox::LaunchOptions {
            limits: sandbox::detect_limits(root.path()),
            allow_without_landlock: options.allow_unenforced,
            instance: cgroup_name.clone(),
            kernel_watches: monitor.is_some(),
            ..sandbox::LaunchOptions::default()
        };

        let (approvals, refused) = held_calls(&options)?;
        let sessions = Sessions::beside(&options.audit).map_err(|e| StartError::Audit {
            path: options.audit.clone(),
            reason: format!("terminated sessions: {e}"),
        })?;
        warn_if_torn(&audit);

        Ok(Arc::new(Self {
            policy: RwLock::new(Arc::new(policy)),
            projects: crate::policy::project::Projects::default(),
            reloading: tokio::sync::Mutex::new(()),
            access: RwLock::new(access),
            monitor,
            audit,
            bus: Bus::default(),
            export: OnceLock::new(),
            receipts: Receipts::default(),
            approvals,
            sessions,
            violations: Violations::default(),
            root,
            cgroup_path,
            cgroup_name,
            layers,
            launch,
            calls: Calls::new(
                options.max_calls,
                options.max_calls_per_uid,
                options.max_queue,
            ),
            agents: Arc::default(),
            started: Instant::now(),
            flush: OnceLock::new(),
            options,
            left: std::sync::Mutex::new(interrupted::Left { swept, refused }),
            _lock: held,
        }))
    }

    /// Whether the kernel layers hold the calls this daemon runs.
    pub fn enforced(&self) -> bool {
        self.monitor.is_some() && !self.options.allow_unenforced
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Applies `f` to the monitor, if the kernel layer is up.
    pub fn with_monitor<T>(&self, f: impl FnOnce(&mut Monitor) -> T) -> Option<T> {
        self.monitor
            .as_ref()
            .map(|m| f(&mut m.lock().unwrap_or_else(|p| p.into_inner())))
    }

    /// The socket path.
    pub fn socket(&self) -> &Path {
        &self.options.socket
    }

    /// Starts the task that reads kernel events into receipts and onto the bus.
    pub fn spawn_event_pump(self: &Arc<Self>) {
        let Some(stream) = self.with_monitor(|m| m.take_events()).flatten() else {
            return;
        };
        let (flush_tx, mut flush_rx) = mpsc::channel::<oneshot::Sender<()>>(64);
        let _ = self.flush.set(flush_tx);
        let daemon = Arc::clone(self);
        tokio::spawn(async move {
            let mut stream = match stream {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("kernel events unavailable: {e}");
                    return;
                }
            };
            let mut batch = Vec::new();
            loop {
                batch.clear();
                let flushed = tokio::select! {
                    read = stream.next_batch(&mut batch) => {
                        if let Err(e) = read {
                            tracing::error!("reading kernel events: {e}");
                            return;
                        }
                        None
                    }
                    Some(ack) = flush_rx.recv() => {
                        stream.drain_now(&mut batch);
                        Some(ack)
                    }
                };
                for event in &batch {
                    daemon.receipts.record(event, &daemon.bus);
                }
                if let Some(ack) = flushed {
                    let _ = ack.send(());
                }
            }
        });
    }

    /// Returns once every kernel event written before this call has been folded into its
    /// receipt. A call's events are in the ring buffer before its last task is reaped, so a
    /// receipt finished after this misses none of them.
    pub async fn flush_events(&self) {
        let Some(tx) = self.flush.get() else {
            return;
        };
        let (ack, done) = oneshot::channel();
        if tx.send(ack).await.is_ok() {
            let _ = done.await;
        }
    }

    /// Events the kernel could not report (ring buffer full).
    pub fn dropped_events(&self) -> u64 {
        self.with_monitor(|m| m.dropped().unwrap_or(0)).unwrap_or(0)
    }
}

/// The held calls a previous guardd left beside the audit log, taken in as they were: still
/// waiting, or approved and waiting for their caller; and the files that are no valid record
/// (name, why), set aside: they never run, and the log says so once (`close_left_open`).
fn held_calls(options: &Options) -> Result<(Approvals, Vec<(String, String)>), StartError> {
    let fail = |reason: String| StartError::Audit {
        path: options.audit.clone(),
        reason,
    };
    let store = Store::beside(&options.audit).map_err(|e| fail(format!("held calls: {e}")))?;
    let approvals = Approvals::new(options.max_queue, options.approval_timeout, Some(store));
    let bad = approvals.load().map_err(|e| fail(e.to_string()))?;
    for (file, why) in &bad {
        tracing::error!(
            file,
            "a held call's record is not valid and will not run: {why}"
        );
    }
    let n = approvals.list().len();
    if n > 0 {
        tracing::info!(held = n, "held calls taken in from before the restart");
    }
    Ok((approvals, bad))
}

/// A missing layer, as a reason not to start.
fn layer_err(layer: &'static str, reason: String) -> StartError {
    StartError::Layer { layer, reason }
}

/// Locks guardd's state and adopts its cgroup, removing the call cgroups a guardd that died
/// here left. Locked before anything is created, adopted or removed: a second guardd on the
/// same state stops here and leaves the first one's alone. The audit log locks itself, later,
/// once those cgroups are gone (with any child of the dead guardd that still held its
/// descriptors).
fn claim(options: &Options) -> Result<(StateLock, Cgroup, String, Vec<Swept>), StartError> {
    let unified = cgroup::unified_mount().map_err(|e| layer_err("cgroup v2", e.to_string()))?;
    let mut held = StateLock::default();
    held.lock_file("socket", &lock::lock_path(&options.socket))?;
    let name = cgroup::place(&unified, options.cgroup.as_deref())
        .map_err(|e| layer_err("cgroup v2", e.to_string()))?;
    let dir = unified.join(&name);
    if let Err(e) = std::fs::create_dir(&dir)
        && e.kind() != std::io::ErrorKind::AlreadyExists
    {
        return Err(layer_err(
            "cgroup v2",
            format!("create {}: {e}", dir.display()),
        ));
    }
    held.lock_dir("cgroup", &dir)?;
    let root =
        Cgroup::create(&unified, &name).map_err(|e| layer_err("cgroup v2", e.to_string()))?;
    let swept = root.sweep_children();
    sandbox::limits::sweep_v1(&name, false);
    if !swept.is_empty() {
        let swept = swept.len();
        tracing::warn!(swept, "removed the call cgroups of a guardd that died here");
    }
    Ok((held, root, name, swept))
}

/// landlock, ABI 4 at least (TCP rules), or unenforced by the operator's choice.
fn landlock_layer(enforced: bool) -> Result<Layer, StartError> {
    let abi = sandbox::landlock::kernel_abi();
    if abi >= 4 {
        return Ok(Layer::new(
            "landlock",
            LayerState::Active,
            format!("ABI {abi}"),
        ));
    }
    if enforced {
        let found = if abi < 0 {
            "not enabled".to_owned()
        } else {
            format!("ABI {abi} < 4")
        };
        return Err(layer_err("landlock", found));
    }
    Ok(Layer::new(
        "landlock",
        LayerState::Unenforced,
        format!("ABI {abi}"),
    ))
}

/// The kernel programs, loaded and proven by the self-test; `None` only when running
/// unenforced by the operator's choice.
fn kernel_programs(
    root: &Cgroup,
    options: &Options,
    layers: &mut Vec<Layer>,
) -> Result<Option<Mutex<Monitor>>, StartError> {
    let loaded = Monitor::load(
        root.path(),
        options.trace_syscalls,
        options.event_ring_bytes,
    )
    .map_err(|e| e.to_string())
    .and_then(|mut monitor| {
        selftest::run(&mut monitor, root)
            .map(|()| monitor)
            .map_err(|e| format!("self-test failed: {e}"))
    });
    let monitor = match loaded {
        Ok(monitor) => monitor,
        Err(e) if !options.allow_unenforced => return Err(layer_err("ebpf", e)),
        Err(e) => {
            tracing::error!("RUNNING UNENFORCED: kernel programs not loaded: {e}");
            layers.push(Layer::new("ebpf", LayerState::Unenforced, e));
            return Ok(None);
        }
    };
    for p in monitor.programs() {
        layers.push(Layer::new(
            format!("ebpf:{p}"),
            LayerState::Active,
            "attached",
        ));
    }
    for p in monitor.on_demand() {
        let detail = "attached while calls run (--trace-syscalls)";
        layers.push(Layer::new(format!("ebpf:{p}"), LayerState::Active, detail));
    }
    if !options.trace_syscalls {
        let detail = "off but for calls in shadow: no per-call syscall sets or opens \
                      (--trace-syscalls; while calls run, costs every syscall on the host)";
        layers.push(Layer::new("ebpf:syscalls", LayerState::Off, detail));
    }
    let proof = "canary: connect denied (EPERM), unapproved exec killed";
    layers.push(Layer::new("ebpf self-test", LayerState::Active, proof));
    Ok(Some(Mutex::new(monitor)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_socket_group_comes_from_the_flag_or_the_policy_and_never_both_differing() {
        let mut settings = crate::policy::Settings::default();
        assert_eq!(socket_group(None, &settings), Ok(None));
        assert_eq!(socket_group(Some("a"), &settings), Ok(Some("a".into())));
        settings.socket_group = Some("b".into());
        assert_eq!(socket_group(None, &settings), Ok(Some("b".into())));
        assert_eq!(socket_group(Some("b"), &settings), Ok(Some("b".into())));
        let err = socket_group(Some("a"), &settings).expect_err("a conflict");
        assert!(err.contains("`b`") && err.contains("`a`"), "{err}");
    }
}
