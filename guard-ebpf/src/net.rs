//! `cgroup/connect*` and `cgroup/sendmsg*`: a guarded call reaches only its approved destinations.
//!
//! The sendmsg hooks catch unconnected UDP (`sendto`/`sendmsg` with an address), which never
//! passes through connect; a connected socket's sends were checked at its connect.
//!
//! Every refusal is reported. An approved destination is reported the first time only: the
//! daemon installs it as 1, the first use marks it [`REPORTED`], and a call that connects in a
//! loop costs no event (and no wake-up of the daemon) per connect.

use aya_ebpf::{
    helpers::generated::bpf_get_socket_cookie, macros::cgroup_sock_addr, programs::SockAddrContext,
};
use guard_common::{
    call::{FLAG_OWN_NET, FLAG_SHADOW},
    event::{ACTION_ALLOWED, ACTION_DENIED, ACTION_SHADOWED, KIND_BIND, KIND_CONNECT},
    net::{Dest4, Dest6, DnsOrigin, LOOPBACK4, PROTO_UDP, ip4_bytes, ip6_bytes},
};

use crate::maps::{ALLOW4, ALLOW6, DNS_ORIGINS, current_call, in_net4, in_net6, reserve_event};

const DNS_PORT: u16 = 53;

const ALLOW: i32 = 1;
/// Makes the syscall fail with EPERM.
const DENY: i32 = 0;
const AF_INET: u16 = 2;
/// An allow-list value: approved and reported (the daemon installs 1: approved, not used yet).
const REPORTED: u8 = 2;
const AF_INET6: u16 = 10;

#[cgroup_sock_addr(connect4)]
pub fn connect4(ctx: SockAddrContext) -> i32 {
    check4(&ctx)
}

#[cgroup_sock_addr(sendmsg4)]
pub fn sendmsg4(ctx: SockAddrContext) -> i32 {
    check4(&ctx)
}

#[cgroup_sock_addr(connect6)]
pub fn connect6(ctx: SockAddrContext) -> i32 {
    check6(&ctx)
}

#[cgroup_sock_addr(sendmsg6)]
pub fn sendmsg6(ctx: SockAddrContext) -> i32 {
    check6(&ctx)
}

/// A bind of a call's socket to a port of its choosing is refused (landlock already refuses
/// TCP binds; this is UDP's): such a port answers an outside prober differently from a closed
/// one (the ingress program drops the probe, where the kernel would answer "port unreachable"),
/// so which ports a call holds is a message anyone who can reach the host reads. Port 0, the
/// kernel's pick, stays allowed, as every client's implicit bind is.
#[cgroup_sock_addr(bind4)]
pub fn bind4(ctx: SockAddrContext) -> i32 {
    let Some((cgroup_id, config)) = current_call() else {
        return ALLOW;
    };
    if own_net(config.flags) {
        return ALLOW;
    }
    let (addr, port, proto) = dest4(&ctx);
    refuse_bind(cgroup_id, AF_INET, port, proto, ip4_bytes(addr))
}

/// As [`bind4`], for IPv6.
#[cgroup_sock_addr(bind6)]
pub fn bind6(ctx: SockAddrContext) -> i32 {
    let Some((cgroup_id, config)) = current_call() else {
        return ALLOW;
    };
    if own_net(config.flags) {
        return ALLOW;
    }
    let (addr, port, proto) = dest6(&ctx);
    refuse_bind(cgroup_id, AF_INET6, port, proto, ip6_bytes(addr))
}

/// Whether the call has a network namespace of its own (loopback only): what its sockets bind
/// there, and connect and send to on its loopback, is the call itself.
#[inline(always)]
fn own_net(flags: u32) -> bool {
    flags & FLAG_OWN_NET != 0
}

/// `::1`, or an IPv4-mapped loopback address (`::ffff:127.x.y.z`), as `user_ip6` holds them
/// (network order words).
#[inline(always)]
fn loopback6(addr: [u32; 4]) -> bool {
    let mapped = addr[0] == 0 && addr[1] == 0 && u32::from_be(addr[2]) == 0xffff;
    (addr[0] == 0 && addr[1] == 0 && addr[2] == 0 && u32::from_be(addr[3]) == 1)
        || (mapped && u32::from_be(addr[3]) >> 24 == 127)
}

/// Allows a bind to port 0; refuses, and reports, any other.
#[inline(always)]
fn refuse_bind(cgroup_id: u64, family: u16, port: u16, proto: u8, addr: [u8; 16]) -> i32 {
    if port == 0 {
        return ALLOW;
    }
    report(
        KIND_BIND,
        cgroup_id,
        ACTION_DENIED,
        family,
        port,
        proto,
        addr,
    )
}

/// The address (`user_ip4`, network order), port (host order) and protocol of `ctx`.
#[inline(always)]
fn dest4(ctx: &SockAddrContext) -> (u32, u16, u8) {
    // SAFETY: the context pointer is valid for the program's run; the verifier checks field access.
    unsafe {
        let sa = &*ctx.sock_addr;
        (
            sa.user_ip4,
            u16::from_be(sa.user_port as u16),
            sa.protocol as u8,
        )
    }
}

/// As [`dest4`], for IPv6 (`user_ip6`).
#[inline(always)]
fn dest6(ctx: &SockAddrContext) -> ([u32; 4], u16, u8) {
    // SAFETY: as in dest4.
    unsafe {
        let sa = &*ctx.sock_addr;
        (
            sa.user_ip6,
            u16::from_be(sa.user_port as u16),
            sa.protocol as u8,
        )
    }
}

/// A call's answers from guardd's DNS responder come back as from the nameserver it asked:
/// resolvers drop a reply whose source is not the server they sent to.
#[cgroup_sock_addr(recvmsg4)]
pub fn recvmsg4(ctx: SockAddrContext) -> i32 {
    let Some((_, config)) = current_call() else {
        return ALLOW;
    };
    if config.dns_port == 0 {
        return ALLOW;
    }
    // SAFETY: the context pointer is valid for the program's run; the verifier checks field
    // access, and recvmsg4 may write the source address.
    unsafe {
        let sa = &mut *ctx.sock_addr;
        if sa.user_ip4 != LOOPBACK4 || u16::from_be(sa.user_port as u16) != config.dns_port {
            return ALLOW;
        }
        let cookie = bpf_get_socket_cookie(ctx.sock_addr.cast());
        if let Some(origin) = DNS_ORIGINS.get(&cookie) {
            sa.user_ip4 = origin.addr;
            sa.user_port = origin.port;
        }
    }
    ALLOW
}

#[inline(always)]
fn check4(ctx: &SockAddrContext) -> i32 {
    let Some((cgroup_id, config)) = current_call() else {
        return ALLOW;
    };
    let (addr, port, proto) = dest4(ctx);
    // In a network namespace of its own, its loopback is its own; anything else is an
    // attempt to reach out (which has no route there), judged and seen as any other.
    if own_net(config.flags) && u32::from_be(addr) >> 24 == 127 {
        return ALLOW;
    }
    // A DNS query, to any server: it goes to guardd's responder, which answers the call's
    // approved names only, so no name of the call's choosing leaves the host.
    if proto == PROTO_UDP && port == DNS_PORT && config.dns_port != 0 {
        // SAFETY: as in dest4; connect4 and sendmsg4 may rewrite the destination.
        unsafe {
            let cookie = bpf_get_socket_cookie(ctx.sock_addr.cast());
            let sa = &mut *ctx.sock_addr;
            let origin = DnsOrigin {
                addr,
                port: sa.user_port,
            };
            if DNS_ORIGINS.insert(&cookie, &origin, 0).is_err() {
                return DENY;
            }
            sa.user_ip4 = LOOPBACK4;
            sa.user_port = u32::from(config.dns_port.to_be());
        }
        return ALLOW;
    }
    let key = Dest4::new(cgroup_id, addr, port, proto);
    let exact = ALLOW4.get_ptr_mut(&key);
    // Within an approved network: allowed, unreported (a receipt lists exact destinations).
    if exact.is_none() && in_net4(cgroup_id, addr, port, proto) {
        return ALLOW;
    }
    let Some(allowed) = to_report(exact) else {
        return ALLOW;
    };
    let bytes = ip4_bytes(addr);
    report(
        KIND_CONNECT,
        cgroup_id,
        connect_action(allowed, config.flags),
        AF_INET,
        port,
        proto,
        bytes,
    )
}

#[inline(always)]
fn check6(ctx: &SockAddrContext) -> i32 {
    let Some((cgroup_id, config)) = current_call() else {
        return ALLOW;
    };
    let (addr, port, proto) = dest6(ctx);
    if own_net(config.flags) && loopback6(addr) {
        return ALLOW;
    }
    let key = Dest6::new(cgroup_id, addr, port, proto);
    let exact = ALLOW6.get_ptr_mut(&key);
    if exact.is_none() && in_net6(cgroup_id, addr, port, proto) {
        return ALLOW;
    }
    let Some(allowed) = to_report(exact) else {
        return ALLOW;
    };
    let bytes = ip6_bytes(addr);
    report(
        KIND_CONNECT,
        cgroup_id,
        connect_action(allowed, config.flags),
        AF_INET6,
        port,
        proto,
        bytes,
    )
}

/// Whether to report a destination, and as allowed or not: `None` for an approved one already
/// reported, which passes silently; otherwise marks an approved one reported. Two CPUs racing on
/// the first use may both report it, which the receipt tolerates.
#[inline(always)]
fn to_report(seen: Option<*mut u8>) -> Option<bool> {
    let Some(seen) = seen else {
        return Some(false);
    };
    // SAFETY: `seen` points at the destination's value in the allow-list map, valid for the
    // program's run.
    unsafe {
        if *seen == REPORTED {
            return None;
        }
        *seen = REPORTED;
    }
    Some(true)
}

/// What a connect or send is answered: an unapproved one is refused, or, in shadow, let
/// through and reported as such.
#[inline(always)]
fn connect_action(approved: bool, flags: u32) -> u32 {
    if approved {
        ACTION_ALLOWED
    } else if flags & FLAG_SHADOW != 0 {
        ACTION_SHADOWED
    } else {
        ACTION_DENIED
    }
}

/// Reports a `kind` event (connect or bind) of `addr:port` and answers the syscall: EPERM for
/// `ACTION_DENIED`, allowed otherwise.
#[inline(always)]
fn report(
    kind: u32,
    cgroup_id: u64,
    action: u32,
    family: u16,
    port: u16,
    proto: u8,
    addr: [u8; 16],
) -> i32 {
    if let Some(mut entry) = reserve_event(kind, action, cgroup_id) {
        let event = entry.as_mut_ptr();
        // SAFETY: a reserved slot whose header reserve_event initialised.
        unsafe {
            (*event).family = family;
            (*event).port = port;
            (*event).proto = proto;
            (*event).addr = addr;
        }
        entry.submit(0);
    }
    if action == ACTION_DENIED { DENY } else { ALLOW }
}
