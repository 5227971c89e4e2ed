//! Per-call state, keyed by the call's cgroup id (the cgroup directory's inode number).

/// What the kernel programs know about one guarded call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CallConfig {
    /// `FLAG_*` bits.
    pub flags: u32,
    /// The loopback UDP port of guardd's DNS responder for this call, or 0: the call's DNS
    /// queries (UDP to any port 53) go there, and are answered for its approved names only.
    pub dns_port: u16,
    pub _pad: u16,
    /// The call's secret key of [`crate::file::name_hash`], random per call (set by the
    /// monitor when it starts watching): a name of a call's choosing in a widened directory
    /// cannot be made to hash like the approved one.
    pub name_key: u64,
}
const _: () = assert!(core::mem::size_of::<CallConfig>() == 16);

/// Kill the whole call when it diverges, instead of only denying the operation. (The daemon acts
/// on it; the kernel reports the divergence either way.)
pub const FLAG_KILL_ON_DIVERGENCE: u32 = 1 << 0;
/// Enforce the exec allow-list: a task that executes an image not on it is killed before the
/// image runs. Without it the exec program only observes.
pub const FLAG_ENFORCE_EXEC: u32 = 1 << 1;
/// The call has connect effects: it may create AF_INET and AF_INET6 stream and datagram sockets.
/// Without it, the `sock_create` program allows it AF_UNIX sockets only.
pub const FLAG_NET: u32 = 1 << 2;
/// The call runs in shadow (`enforce = "shadow"`): what its effects do not allow (a connect, a
/// socket, an exec, a lock, a packet) is let through and reported as [`ACTION_SHADOWED`]
/// instead of refused. What no call may do (other socket families, binds, IP options) stays
/// refused.
///
/// [`ACTION_SHADOWED`]: crate::event::ACTION_SHADOWED
pub const FLAG_SHADOW: u32 = 1 << 3;
/// The call's syscalls are traced (`--trace-syscalls`, or shadow): its syscall set, its opens
/// and the refusals of other layers are reported. Other calls pass the syscall tracepoints by.
pub const FLAG_TRACED: u32 = 1 << 4;
/// The call runs in a network namespace of its own, with loopback only (guardd clones it so
/// when it connects nowhere): its TCP and UDP sockets, binds, connects, sends and packets
/// reach nothing but the call itself, and are let through. Its other socket families stay
/// refused.
pub const FLAG_OWN_NET: u32 = 1 << 5;

/// What a guarded call did that the receipt must learn even when events are lost: counted in
/// the kernel, per call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct CallStats {
    /// Successful write-opens of files outside the call's write effects (`--trace-syscalls`).
    pub writes_outside: u64,
    /// The call's events the ring buffer had no room for.
    pub events_lost: u64,
    /// Syscalls asking for an effect that another layer refused (`KIND_REFUSED`;
    /// `--trace-syscalls`).
    pub refused: u64,
    /// Packets for the call's sockets from no approved destination, dropped (`ingress`).
    pub inbound_dropped: u64,
    /// Packets from the call's sockets with IP options or to no approved destination, dropped
    /// (`egress`).
    pub outbound_dropped: u64,
}
const _: () = assert!(core::mem::size_of::<CallStats>() == 40);

/// What the open observer keeps of an open(2) between syscall entry and exit (kernel only; here
/// so its size is checked next to the event's).
#[repr(C)]
#[derive(Copy, Clone)]
pub struct OpenStash {
    pub cgroup_id: u64,
    pub flags: u32,
    pub dirfd: i32,
    pub path: [u8; crate::event::PATH_LEN],
}

/// Opens in flight at once, over all guarded threads; least recently used entries go first (a
/// thread killed inside open(2) never reaches its exit).
pub const MAX_OPENS_IN_FLIGHT: u32 = 8192;

/// Size of the map of guarded calls: the daemon never runs more calls than this at once.
pub const MAX_CALLS: u32 = 4096;

#[cfg(feature = "user")]
// SAFETY: repr(C), plain integers, no padding (asserted above).
unsafe impl aya::Pod for CallConfig {}

#[cfg(feature = "user")]
// SAFETY: repr(C), four u64, no padding (asserted above).
unsafe impl aya::Pod for CallStats {}
