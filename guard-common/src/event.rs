//! Events the kernel programs report through the `EVENTS` ring buffer.

/// A process of a guarded call executed a new image.
pub const KIND_EXEC: u32 = 1;
/// A process of a guarded call connected, or tried to.
pub const KIND_CONNECT: u32 = 2;
/// A process of a guarded call tried to create a socket of a family or type outside its needs.
pub const KIND_SOCKET: u32 = 3;
/// A process of a guarded call opened a file, or tried to (`--trace-syscalls` only).
pub const KIND_OPEN: u32 = 4;
/// seccomp killed a process of a guarded call for a syscall outside its filter.
pub const KIND_SECCOMP: u32 = 5;
/// Another layer refused a syscall of a guarded call that asks for an effect: EPERM (seccomp,
/// or an eBPF cgroup program) or EACCES (landlock), seen at the syscall's exit
/// (`--trace-syscalls` only). The syscall's number is in `sock_type`, the result in `ret`.
pub const KIND_REFUSED: u32 = 6;
/// A packet a guarded call's socket sent, dropped: it carried IP options or an IPv6 extension
/// header (`sock_type` 1), or went to no approved destination (`sock_type` 0). Reported for a
/// call's first such packet only; `CallStats::outbound_dropped` counts them all.
pub const KIND_PACKET: u32 = 7;
/// A process of a guarded call tried to bind a socket to a port of its choosing (refused,
/// EPERM): the address and port are the ones it asked for.
pub const KIND_BIND: u32 = 8;
/// A record lock (`fcntl` POSIX or OFD, `flock`) on a file outside the call's write effects.
pub const KIND_LOCK: u32 = 9;

/// A lock event's `sock_type`: the kind of lock.
pub const LOCK_POSIX: u32 = 1;
pub const LOCK_OFD: u32 = 2;
pub const LOCK_FLOCK: u32 = 3;

/// The operation went ahead.
pub const ACTION_ALLOWED: u32 = 0;
/// The kernel refused the operation (EPERM).
pub const ACTION_DENIED: u32 = 1;
/// The kernel refused the operation and killed the task.
pub const ACTION_KILLED: u32 = 2;
/// Open: a successful write-open of a file outside the call's write effects (seen at the
/// syscall's exit, too late to refuse; the call is diverged, and killed when it kills on
/// divergence, then with [`ACTION_KILLED`]).
pub const ACTION_OUTSIDE: u32 = 3;
/// Outside the call's effects, and let through because the call runs in shadow
/// (`FLAG_SHADOW`): enforced, it would have been refused (or its task killed).
pub const ACTION_SHADOWED: u32 = 4;

/// Length of the path buffer of an exec event, NUL included.
pub const PATH_LEN: usize = 256;

/// One observation of a guarded call, as written by the kernel.
#[repr(C)]
#[derive(Copy, Clone)]
pub struct Event {
    /// `KIND_*`.
    pub kind: u32,
    /// `ACTION_*`.
    pub action: u32,
    /// Thread group id (the user-space pid) of the task.
    pub pid: u32,
    /// Thread id of the task.
    pub tid: u32,
    /// The task's cgroup v2 id: names the call.
    pub cgroup_id: u64,
    /// Connect: AF_INET or AF_INET6. Socket: the address family.
    pub family: u16,
    /// Connect: destination port, host byte order.
    pub port: u16,
    /// Connect: `PROTO_*`.
    pub proto: u8,
    pub _pad: [u8; 3],
    /// Connect: destination address in network byte order (IPv4 in the first four bytes).
    pub addr: [u8; 16],
    /// Socket: the type (`SOCK_STREAM`, `SOCK_DGRAM`, `SOCK_RAW`...).
    pub sock_type: u32,
    /// Socket: the protocol as passed to socket(2) (for AF_PACKET, an ethertype in network order).
    pub sock_protocol: u32,
    /// Open: the flags (`O_*`) as passed, `O_CREAT | O_WRONLY | O_TRUNC` for creat(2).
    pub open_flags: u32,
    /// Open: the result, a file descriptor or a negative errno.
    pub ret: i32,
    /// Open: the directory fd a relative path is resolved against (`AT_FDCWD` = -100).
    pub dirfd: i32,
    pub _pad2: u32,
    /// Exec, open: the path as passed to execve or open, NUL-terminated.
    pub path: [u8; PATH_LEN],
}
const _: () = assert!(core::mem::size_of::<Event>() == 328);

/// Index into the per-CPU `COUNTERS` array: events lost because the ring buffer was full.
pub const COUNTER_DROPPED: u32 = 0;
/// Number of counters.
pub const COUNTERS: u32 = 1;

#[cfg(feature = "user")]
// SAFETY: repr(C), plain integers and byte arrays, explicit padding (size asserted above).
unsafe impl aya::Pod for Event {}
