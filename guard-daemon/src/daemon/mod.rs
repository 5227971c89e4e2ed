//! guardd's shared state: what every connection handler reads (the policy in force, the
//! kernel's watch, the audit log, the bus, the running calls). Its options are in `options`,
//! its start in `start`, proven by [`selftest`] and guarded by [`lock`], the event pump in
//! `pump`, a reload in `reload`, the calls a guardd that died left open in `interrupted`.

use std::{
    path::Path,
    sync::{Arc, Mutex, OnceLock, RwLock},
    time::Instant,
};

mod interrupted;
pub mod lock;
mod options;
mod project;
mod pump;
mod reload;
pub mod selftest;
mod start;
pub mod systemd;

pub use crate::protocol::status::{Layer, LayerState};
pub use options::Options;
pub use reload::ReloadError;
pub use start::{StartError, audit_fs_conflict};
pub(crate) use start::{check_audit_fs, socket_gid, socket_group};
use tokio::sync::{mpsc, oneshot};

use crate::{
    approval::{Approvals, sessions::Sessions},
    audit::AuditLog,
    bus::Bus,
    call::calls::Calls,
    callers::{access::Access, violations::Violations},
    daemon::lock::StateLock,
    monitor::Monitor,
    policy::Policy,
    receipt::Receipts,
    sandbox::{self, cgroup::Cgroup},
};

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
    /// Callers whose arguments held secrets' values, barred at a limit.
    pub probes: crate::callers::probes::Probes,
    /// Why recent calls did not run as asked, for their callers (`why`).
    pub reasons: crate::callers::reasons::Reasons,
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
    pub agents: Arc<crate::callers::agents::Agents>,
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
}
