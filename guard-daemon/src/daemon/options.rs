//! How guardd was asked to run: its flags and `guardd.toml`, as one set of options.

use std::{path::PathBuf, time::Duration};

/// How guardd was asked to run.
#[derive(Clone, Debug)]
pub struct Options {
    pub policy: PathBuf,
    pub socket: PathBuf,
    pub audit: PathBuf,
    /// Group owning the socket (mode 0660); its members may submit calls by default.
    pub socket_group: Option<String>,
    /// The guard's cgroup under the cgroup v2 mount; `None`: beneath guardd's own when systemd
    /// delegated it, else `guard` at the root ([`crate::sandbox::cgroup::place`]).
    pub cgroup: Option<String>,
    /// Calls running at once; more wait in the queue.
    pub max_calls: usize,
    /// Of those, calls of one caller uid at once; its others wait behind its own.
    pub max_calls_per_uid: usize,
    /// Calls waiting for a slot before new ones are refused as busy; and calls held for
    /// approval at once.
    pub max_queue: usize,
    /// Calls of one uid (not root or an admin) held for approval at once.
    pub max_held_per_uid: usize,
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
    /// How long a rotated audit file is kept whatever `audit_keep_rotated` says.
    pub audit_keep_rotated_for: Duration,
    /// Bytes of audit rows a uid's calls may write a minute (`audit::share`; 0: no limit).
    pub audit_bytes_per_uid: u64,
}
