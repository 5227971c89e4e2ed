//! A guarded call creates only the sockets it needs: AF_INET and AF_INET6 TCP and UDP sockets
//! only for a call with connect effects (`FLAG_NET`) or a network namespace of its own
//! (`FLAG_OWN_NET`, loopback only); never a raw socket, AF_PACKET, AF_NETLINK
//! or any other family, and no other inet protocol of type stream or datagram. The connect and
//! sendmsg programs see TCP's and UDP's destinations only: the kernel runs no cgroup connect
//! program for a UDP-Lite socket (its `proto` has no `pre_connect`), whose sends once connected
//! then go anywhere; ping sockets (`IPPROTO_ICMP`, where `ping_group_range` lets the user have
//! them) have no sendmsg program; and MPTCP's further subflows are connected from a kernel
//! worker, outside the call's cgroup, to addresses its peer announces. AF_UNIX is left to the call's seccomp filter, which refuses
//! it (EPERM, so C libraries fall back quietly) unless the call has the `unix` effect.
//!
//! The kernel runs `cgroup/sock_create` only from `inet_create` and `inet6_create`, so that
//! program refuses (EPERM) the inet sockets a call may not have, and sees no other family.
//! Other families are caught by the `syscalls/sys_enter_socket` tracepoint, which cannot make
//! the syscall fail: it kills the task before socket(2) runs, as the exec program does for an
//! unapproved image. (A confined call's seccomp filter refuses these families with EPERM before
//! the tracepoint fires; the tracepoint is the kernel's own line behind it.)

use aya_ebpf::{
    helpers::generated::bpf_send_signal,
    macros::{cgroup_sock, tracepoint},
    programs::{SockContext, TracePointContext},
};
use guard_common::{
    call::{FLAG_NET, FLAG_OWN_NET, FLAG_SHADOW},
    event::{ACTION_DENIED, ACTION_KILLED, ACTION_SHADOWED, KIND_SOCKET},
};

use crate::maps::{current_call, reserve_event};

const ALLOW: i32 = 1;
/// Makes socket(2) fail with EPERM.
const DENY: i32 = 0;

const AF_UNIX: u32 = 1;
const AF_INET: u32 = 2;
const AF_INET6: u32 = 10;
const SOCK_STREAM: u32 = 1;
const SOCK_DGRAM: u32 = 2;
/// `sk_protocol` as inet_create resolved it: a protocol of 0 is already its type's default.
const IPPROTO_TCP: u32 = 6;
const IPPROTO_UDP: u32 = 17;

#[cgroup_sock(sock_create)]
pub fn sock_create(ctx: SockContext) -> i32 {
    let Some((cgroup_id, config)) = current_call() else {
        return ALLOW;
    };
    // SAFETY: the context pointer is valid for the program's run; the verifier checks field access.
    let (family, ty, protocol) = unsafe {
        let sk = &*ctx.sock;
        (sk.family, sk.type_, sk.protocol)
    };
    if allowed(config.flags, family, ty, protocol) {
        return ALLOW;
    }
    // In shadow, a TCP or UDP socket the call has no connect effect for is let through: its
    // connects are judged (and reported) next. Other inet protocols stay refused.
    if config.flags & FLAG_SHADOW != 0 && allowed(FLAG_NET, family, ty, protocol) {
        report(cgroup_id, ACTION_SHADOWED, family, ty, protocol);
        return ALLOW;
    }
    report(cgroup_id, ACTION_DENIED, family, ty, protocol);
    DENY
}

/// Offset of the `family` argument in the sys_enter_socket record (`type` and `protocol` follow
/// at 8-byte steps); set by the loader from tracefs.
#[unsafe(no_mangle)]
static SOCKET_FAMILY_OFFSET: u32 = 16;

const SIGKILL: u32 = 9;
/// The type's low bits; SOCK_NONBLOCK and SOCK_CLOEXEC live above.
const SOCK_TYPE_MASK: u32 = 0xf;

#[tracepoint(category = "syscalls", name = "sys_enter_socket")]
pub fn sys_enter_socket(ctx: TracePointContext) -> u32 {
    let Some((cgroup_id, _)) = current_call() else {
        return 0;
    };
    // SAFETY: a global the loader may rewrite; volatile so the compiler does not fold the default.
    let offset = unsafe { core::ptr::read_volatile(&SOCKET_FAMILY_OFFSET) } as usize;
    // SAFETY: the three arguments lie within the record, as tracefs describes it.
    let (family, ty, protocol) = unsafe {
        (
            ctx.read_at::<u64>(offset).unwrap_or(0) as u32,
            ctx.read_at::<u64>(offset + 8).unwrap_or(0) as u32,
            ctx.read_at::<u64>(offset + 16).unwrap_or(0) as u32,
        )
    };
    // Inet families are judged, with EPERM, by sock_create.
    if matches!(family, AF_UNIX | AF_INET | AF_INET6) {
        return 0;
    }
    // SAFETY: signals the current task, the one asking for the socket.
    unsafe { bpf_send_signal(SIGKILL) };
    report(
        cgroup_id,
        ACTION_KILLED,
        family,
        ty & SOCK_TYPE_MASK,
        protocol,
    );
    0
}

#[inline(always)]
fn report(cgroup_id: u64, action: u32, family: u32, ty: u32, protocol: u32) {
    if let Some(mut entry) = reserve_event(KIND_SOCKET, action, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot whose header reserve_event initialised.
        unsafe {
            (*event).family = family as u16;
            (*event).sock_type = ty;
            (*event).sock_protocol = protocol;
        }
        entry.submit(0);
    }
}

#[inline(always)]
fn allowed(flags: u32, family: u32, ty: u32, protocol: u32) -> bool {
    match family {
        AF_UNIX => true,
        AF_INET | AF_INET6 => {
            flags & (FLAG_NET | FLAG_OWN_NET) != 0
                && ((ty == SOCK_STREAM && protocol == IPPROTO_TCP)
                    || (ty == SOCK_DGRAM && protocol == IPPROTO_UDP))
        }
        _ => false,
    }
}
