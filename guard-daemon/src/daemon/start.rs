//! guardd's start: every layer is brought up and proven before the socket opens, and a layer
//! that is missing stops the start (fail closed) unless the operator opted out with
//! `--allow-unenforced`, which every audit row then records.

use std::{
    path::{Path, PathBuf},
    sync::{Arc, Mutex, OnceLock, RwLock},
    time::Instant,
};

use super::{Daemon, Layer, LayerState, Options, interrupted};
use crate::{
    approval::{Approvals, sessions::Sessions, store::Store},
    audit::{self, AuditLog},
    bus::Bus,
    call::calls::Calls,
    callers::{access::Access, violations::Violations},
    daemon::{
        lock::{self, LockError, StateLock},
        selftest,
    },
    monitor::Monitor,
    policy::Policy,
    receipt::Receipts,
    sandbox::{
        self,
        cgroup::{self, Cgroup, Swept},
    },
};

/// The gid of `--socket-group`; an unknown name is an error, never a silent "no group".
pub(crate) fn socket_gid(options: &Options) -> Result<Option<u32>, String> {
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
pub(crate) fn socket_group(
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
pub(crate) fn check_audit_fs(policy: &Policy, options: &Options) -> Result<(), String> {
    audit_fs_conflict(policy, &options.audit, options.allow_writes_on_audit_fs)
}

/// Why guardd would refuse `policy` with its audit log at `audit` (see `check_audit_fs`);
/// `guardd --check-config` says it before a start does.
pub fn audit_fs_conflict(policy: &Policy, audit: &Path, allowed: bool) -> Result<(), String> {
    let shared = writes_on_audit_fs(policy, audit);
    if shared.is_empty() {
        return Ok(());
    }
    if allowed {
        tracing::warn!(
            audit = %audit.display(),
            writes = %shared.join(", "),
            "allow_writes_on_audit_fs: these write effects share the audit log's file system; \
             a call that fills it leaves no room for later rows (running calls' rows are reserved)"
        );
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

/// The audit log, as the options say it rotates, what it keeps and each uid's share of it.
fn open_audit(options: &Options) -> Result<AuditLog, StartError> {
    AuditLog::open(audit::Options {
        rotate_bytes: options.audit_rotate_bytes,
        keep_rotated: options.audit_keep_rotated,
        keep_rotated_for: options.audit_keep_rotated_for,
        bytes_per_uid: options.audit_bytes_per_uid,
        ..audit::Options::new(&options.audit)
    })
    .map_err(|e| StartError::Audit {
        path: options.audit.clone(),
        reason: e.to_string(),
    })
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
        let audit = open_audit(&options)?;
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
        let unix_backstop = monitor.as_ref().and_then(|_| unix_backstop());
        let launch = sandbox::LaunchOptions {
            unix_backstop,
            limits: sandbox::detect_limits(root.path()),
            allow_without_landlock: options.allow_unenforced,
            spares: sandbox::limits::Spares::new(&cgroup_name),
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
            probes: Default::default(),
            reasons: Default::default(),
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
    let approvals = Approvals::new(options.max_queue, options.approval_timeout, Some(store))
        .per_uid(options.max_held_per_uid);
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

/// landlock at any ABI, with the rights that ABI has: each one it lacks is said once, with
/// what stands in for it (`landlock::abi`), and the launches that would need one are refused
/// then. No landlock at all: refused, or unenforced by the operator's choice.
fn landlock_layer(enforced: bool) -> Result<Layer, StartError> {
    use sandbox::landlock::abi;
    let found = sandbox::landlock::kernel_abi();
    if found >= 1 {
        for m in abi::missing(found) {
            tracing::warn!(
                "landlock ABI {found} has no {} right (ABI {}): {}",
                m.right,
                m.since,
                m.meaning
            );
        }
        let detail = abi::describe(found);
        return Ok(Layer::new("landlock", LayerState::Active, detail));
    }
    if enforced {
        return Err(layer_err("landlock", "not enabled".to_owned()));
    }
    Ok(Layer::new(
        "landlock",
        LayerState::Unenforced,
        format!("not enabled (errno {})", -found),
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

/// The kernel's refusal of a call's own Unix connects (`sandbox::writes::backstop`), where the
/// kernel has the hook (6.7) and guardd's own cgroup can be named: a call in a network
/// namespace of its own then gets Unix stream sockets, whose connects guardd makes for it.
/// Elsewhere it gets none, as before, and guardd says so once.
fn unix_backstop() -> Option<std::sync::Arc<sandbox::writes::backstop::UnixBackstop>> {
    use sandbox::writes::backstop::{UnixBackstop, own_cgroup_id};
    let loaded = cgroup::unified_mount()
        .map_err(|e| e.to_string())
        .and_then(|mount| own_cgroup_id(&mount).ok_or_else(|| "no cgroup v2 of guardd's".into()))
        .and_then(|id| UnixBackstop::load(id).map_err(|e| e.to_string()));
    match loaded {
        Ok(b) => Some(std::sync::Arc::new(b)),
        Err(e) => {
            tracing::warn!("{e}: calls get no Unix sockets unless their policy says `unix`");
            None
        }
    }
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
