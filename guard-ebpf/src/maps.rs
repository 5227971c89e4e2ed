//! Maps shared by all programs, and the helpers that fill in events.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid},
    macros::map,
    maps::{HashMap, LpmTrie, LruHashMap, PerCpuArray, RingBuf, lpm_trie::Key},
};
use guard_common::{
    call::{CallConfig, CallStats, MAX_CALLS, MAX_OPENS_IN_FLIGHT, OpenStash},
    event::{COUNTER_DROPPED, COUNTERS as NUM_COUNTERS, Event, PATH_LEN},
    file::{FileKey, MAX_FILES, NAME_MAX},
    net::{
        Dest4, Dest6, DnsOrigin, MAX_DESTS, MAX_DNS_SOCKETS, MAX_NETS, NET_FIXED_BITS, Net4, Net6,
    },
    syscall::SyscallSet,
};

/// The guarded calls, by cgroup id.
#[map]
pub static CALLS: HashMap<u64, CallConfig> = HashMap::with_max_entries(MAX_CALLS, 0);

/// Allowed IPv4 destinations per call; the value is 1 when installed, 2 once reported.
#[map]
pub static ALLOW4: HashMap<Dest4, u8> = HashMap::with_max_entries(MAX_DESTS, 0);

/// Allowed IPv6 destinations per call; the value as in `ALLOW4`.
#[map]
pub static ALLOW6: HashMap<Dest6, u8> = HashMap::with_max_entries(MAX_DESTS, 0);

/// Allowed IPv4 networks per call (`connect = ["10.0.0.0/8:443"]`), by longest prefix.
#[map]
pub static NETS4: LpmTrie<Net4, u8> = LpmTrie::with_max_entries(MAX_NETS, 0);

/// Allowed IPv6 networks per call.
#[map]
pub static NETS6: LpmTrie<Net6, u8> = LpmTrie::with_max_entries(MAX_NETS, 0);

/// Whether `addr:port` over `proto` is within one of the call's approved IPv4 networks.
#[inline(always)]
pub fn in_net4(cgroup_id: u64, addr: u32, port: u16, proto: u8) -> bool {
    let key = Key::new(NET_FIXED_BITS + 32, Net4::new(cgroup_id, addr, port, proto));
    NETS4.get(&key).is_some()
}

/// Whether `[addr]:port` over `proto` is within one of the call's approved IPv6 networks.
#[inline(always)]
pub fn in_net6(cgroup_id: u64, addr: [u32; 4], port: u16, proto: u8) -> bool {
    let key = Key::new(
        NET_FIXED_BITS + 128,
        Net6::new(cgroup_id, addr, port, proto),
    );
    NETS6.get(&key).is_some()
}

/// Approved programs (`FILE_SELF`) and directories (`FILE_DIR`) per call, by device and inode.
#[map]
pub static EXEC_ALLOW: HashMap<FileKey, u8> = HashMap::with_max_entries(MAX_FILES, 0);

/// Where each DNS socket of a guarded call first addressed its query, by socket cookie.
#[map]
pub static DNS_ORIGINS: LruHashMap<u64, DnsOrigin> =
    LruHashMap::with_max_entries(MAX_DNS_SOCKETS, 0);

/// Approved write targets per call: files, directories, and names of targets that did not
/// exist at launch (`FILE_CHILD`).
#[map]
pub static WRITE_ALLOW: HashMap<FileKey, u8> = HashMap::with_max_entries(MAX_FILES, 0);

/// What each guarded call did that no event may lose, by cgroup id: the daemon inserts zeros
/// with the call, the kernel only adds, and the receipt reads it after the call.
#[map]
pub static CALL_STATS: HashMap<u64, CallStats> = HashMap::with_max_entries(MAX_CALLS, 0);

/// A per-CPU buffer for a file name being hashed.
#[map]
pub static NAME_SCRATCH: PerCpuArray<[u8; NAME_MAX + 1]> = PerCpuArray::with_max_entries(1, 0);

/// The syscalls each guarded call has made, by cgroup id. The daemon inserts a zeroed set with
/// the call and removes it after; the kernel only sets bits.
#[map]
pub static SYSCALL_SETS: HashMap<u64, SyscallSet> = HashMap::with_max_entries(MAX_CALLS, 0);

/// Processes each guarded call has started (forks and clones that are not threads), by cgroup
/// id. The daemon inserts zero with the call and removes it after; the kernel only adds.
#[map]
pub static FORKS: HashMap<u64, u64> = HashMap::with_max_entries(MAX_CALLS, 0);

/// Opens between syscall entry and exit, by thread (pid_tgid).
#[map]
pub static OPENS: LruHashMap<u64, OpenStash> = LruHashMap::with_max_entries(MAX_OPENS_IN_FLIGHT, 0);

/// A per-CPU buffer to build an `OpenStash` in: too large for the BPF stack.
#[map]
pub static OPEN_SCRATCH: PerCpuArray<OpenStash> = PerCpuArray::with_max_entries(1, 0);

/// A per-CPU buffer for a path: too large for the 512-byte BPF stack, and needed even when the
/// ring buffer is full, because enforcement must not depend on reporting.
#[map]
pub static SCRATCH: PerCpuArray<[u8; PATH_LEN]> = PerCpuArray::with_max_entries(1, 0);

/// Events for the daemon. 1 MiB holds about 3,400 events.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(1 << 20, 0);

/// Counters the daemon reads to report loss (`COUNTER_*`).
#[map]
pub static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(NUM_COUNTERS, 0);

/// The current task's call, if the guard watches it.
#[inline(always)]
pub fn current_call() -> Option<(u64, CallConfig)> {
    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    // SAFETY: the value is copied out at once; a concurrent delete at worst yields a stale copy.
    let config = unsafe { CALLS.get(&cgroup_id) }?;
    Some((cgroup_id, *config))
}

/// Reserves an event with its common header filled in, the current task's pid and tid;
/// counts a drop when the buffer is full.
#[inline(always)]
pub fn reserve_event(
    kind: u32,
    action: u32,
    cgroup_id: u64,
) -> Option<aya_ebpf::maps::ring_buf::RingBufEntry<Event>> {
    reserve_event_of(kind, action, cgroup_id, bpf_get_current_pid_tgid())
}

/// [`reserve_event`] for a program that may not ask for the current task (a packet's: 6.1's
/// verifier refuses a cgroup_skb program that calls a helper of the task), its event's pid and
/// tid those of `pid_tgid` (0: not known).
#[inline(always)]
pub fn reserve_event_of(
    kind: u32,
    action: u32,
    cgroup_id: u64,
    pid_tgid: u64,
) -> Option<aya_ebpf::maps::ring_buf::RingBufEntry<Event>> {
    let Some(mut entry) = EVENTS.reserve::<Event>(0) else {
        if let Some(dropped) = COUNTERS.get_ptr_mut(COUNTER_DROPPED) {
            // SAFETY: a per-CPU slot, written only by this CPU with preemption disabled.
            unsafe { *dropped += 1 };
        }
        // The call's own count, which its receipt reports: what it did is still judged from
        // CALL_STATS, but its lists of files and execs are then incomplete.
        if let Some(stats) = CALL_STATS.get_ptr_mut(&cgroup_id) {
            // SAFETY: this call's value in the map; other CPUs add to it too, hence atomic.
            unsafe { add(&mut (*stats).events_lost) };
        }
        return None;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: `event` points at a reserved, writable, correctly sized ring buffer slot.
    unsafe {
        (*event).kind = kind;
        (*event).action = action;
        (*event).pid = (pid_tgid >> 32) as u32;
        (*event).tid = pid_tgid as u32;
        (*event).cgroup_id = cgroup_id;
        (*event).family = 0;
        (*event).port = 0;
        (*event).proto = 0;
        (*event)._pad = [0; 3];
        (*event).sock_type = 0;
        (*event).sock_protocol = 0;
        (*event).open_flags = 0;
        (*event).ret = 0;
        (*event).dirfd = 0;
        (*event)._pad2 = 0;
        (*event).addr = [0; 16];
        (*event).path[0] = 0;
    }
    Some(entry)
}

/// Adds one to a per-call counter shared by all CPUs.
#[inline(always)]
pub fn add(counter: &mut u64) {
    // SAFETY: an atomic add on a map value; core's AtomicU64 has no fetch_add on the BPF target,
    // the intrinsic lowers to the BPF atomic add instruction.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            counter, 1,
        )
    };
}
