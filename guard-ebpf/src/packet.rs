//! `cgroup_skb/ingress` and `cgroup_skb/egress`: the packets a guarded call's sockets exchange
//! are with its approved destinations, or with guardd's DNS responder for it, and nothing else.
//!
//! Ingress. The connect and sendmsg hooks see only what a call sends. A call may also listen: on
//! a UDP port it binds (landlock governs TCP binds only), or on a TCP socket that `listen` bound
//! to an ephemeral port without a `bind` (landlock sees explicit binds only), and then anyone who
//! can reach the host could feed it, an inbound channel no effect declares. Every packet for a
//! call's socket is checked by its source: one from an approved destination (address, port and
//! protocol, as `ALLOW4`/`ALLOW6` hold them) passes, any other is dropped and counted
//! (`CallStats::inbound_dropped`). Anyone may send such a packet, so it is no divergence of the
//! call; what it would have carried never arrives.
//!
//! Egress. The connect and sendmsg hooks judge the address a call names, and the packet can still
//! go elsewhere: an IPv6 routing header (`IPV6_RTHDR`, a segment routing header any user may set)
//! sends it to its next segment, and a loose or strict source route in the IP options
//! (`IP_OPTIONS`, or `IP_RETOPTS` in one sendmsg's control data; the kernel wants `CAP_NET_RAW`
//! for those) to the route's first hop: addresses of the call's choosing that no hook judged.
//! So every packet a call's socket sends is checked as the kernel is about to
//! send it: an IPv4 header without options, or an IPv6 header followed at once by TCP or UDP, to
//! an approved destination. Any other is dropped (the send fails with EPERM), counted
//! (`CallStats::outbound_dropped`) and, the first time, reported (`KIND_PACKET`): the call did it,
//! so it is a divergence.
//!
//! The programs run for the sockets of processes in the guard's cgroup only (they are attached
//! there), and look the socket's cgroup up in `CALLS` first: the socket's, not the current
//! task's, which in softirq (a TCP retransmit, a packet arriving) is whoever the CPU was running.

use aya_ebpf::{
    helpers::generated::bpf_skb_cgroup_id, macros::cgroup_skb, programs::SkBuffContext,
};
use guard_common::{
    call::{FLAG_OWN_NET, FLAG_SHADOW},
    event::{ACTION_DENIED, KIND_PACKET},
    net::{Dest4, Dest6, LOOPBACK4, PROTO_TCP, PROTO_UDP, ip4_bytes, ip6_bytes},
};

use crate::maps::{ALLOW4, ALLOW6, CALL_STATS, CALLS, add, in_net4, in_net6, reserve_event_of};

const PASS: i32 = 1;
const DROP: i32 = 0;
/// `skb->protocol`, in network byte order as the context holds it.
const ETH_P_IP: u32 = 0x0800_u16.to_be() as u32;
const ETH_P_IPV6: u32 = 0x86dd_u16.to_be() as u32;
const AF_INET: u16 = 2;
const AF_INET6: u16 = 10;
/// The length of an IPv4 header without options, and of the fixed IPv6 header.
const IPV4_HEADER_LEN: usize = 20;
const IPV6_HEADER_LEN: usize = 40;

/// The end of a packet that must be an approved destination.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Peer {
    /// Ingress: who sent it.
    Source,
    /// Egress: where it goes.
    Destination,
}

/// A packet's peer as read from its headers.
struct Seen {
    family: u16,
    addr: [u8; 16],
    port: u16,
    proto: u8,
    /// It carried IP options or an IPv6 extension header.
    options: bool,
    approved: bool,
}

#[cgroup_skb(ingress)]
pub fn ingress(ctx: SkBuffContext) -> i32 {
    // SAFETY: the context's skb pointer is valid for the program's run.
    let cgroup_id = unsafe { bpf_skb_cgroup_id(ctx.skb.skb) };
    // SAFETY: the value is copied out at once.
    let Some(config) = (unsafe { CALLS.get(&cgroup_id) }).copied() else {
        return PASS;
    };
    // A network namespace of its own: its loopback's packets are its own.
    if config.flags & FLAG_OWN_NET != 0 {
        return PASS;
    }
    if seen(&ctx, cgroup_id, config.dns_port, Peer::Source).is_some_and(|s| s.approved) {
        return PASS;
    }
    if let Some(stats) = CALL_STATS.get_ptr_mut(&cgroup_id) {
        // SAFETY: this call's value in the map; other CPUs add to it too, hence atomic.
        unsafe { add(&mut (*stats).inbound_dropped) };
    }
    // In shadow it is counted, as enforcing would count its drop, and let through.
    if config.flags & FLAG_SHADOW != 0 {
        return PASS;
    }
    DROP
}

#[cgroup_skb(egress)]
pub fn egress(ctx: SkBuffContext) -> i32 {
    // SAFETY: the context's skb pointer is valid for the program's run.
    let cgroup_id = unsafe { bpf_skb_cgroup_id(ctx.skb.skb) };
    // SAFETY: the value is copied out at once.
    let Some(config) = (unsafe { CALLS.get(&cgroup_id) }).copied() else {
        return PASS;
    };
    if config.flags & FLAG_OWN_NET != 0 {
        return PASS;
    }
    let seen = seen(&ctx, cgroup_id, config.dns_port, Peer::Destination);
    let shadow = config.flags & FLAG_SHADOW != 0;
    if seen
        .as_ref()
        .is_some_and(|s| (s.approved || shadow) && !s.options)
    {
        return PASS;
    }
    let mut first = true;
    if let Some(stats) = CALL_STATS.get_ptr_mut(&cgroup_id) {
        // SAFETY: this call's value in the map; other CPUs add to it too, hence atomic. Two CPUs
        // may both see zero and both report, which the receipt tolerates.
        unsafe {
            first = (*stats).outbound_dropped == 0;
            add(&mut (*stats).outbound_dropped);
        }
    }
    if first {
        report(cgroup_id, seen);
    }
    DROP
}

/// Reports a call's dropped packet: its destination when it could be read.
#[inline(always)]
fn report(cgroup_id: u64, seen: Option<Seen>) {
    // No pid: a packet program may not ask for the current task on every kernel (6.1's
    // verifier refuses the helpers), and a retransmit runs in softirq on behalf of whichever
    // task the CPU was running anyway. The call is known by its cgroup.
    let Some(mut entry) = reserve_event_of(KIND_PACKET, ACTION_DENIED, cgroup_id, 0) else {
        return;
    };
    let event = entry.as_mut_ptr();
    // SAFETY: a reserved slot whose header reserve_event_of initialised.
    unsafe {
        if let Some(s) = seen {
            (*event).family = s.family;
            (*event).port = s.port;
            (*event).proto = s.proto;
            (*event).addr = s.addr;
            (*event).sock_type = u32::from(s.options);
        }
    }
    entry.submit(0);
}

/// The packet's peer (`None`: neither IPv4 nor IPv6, or unreadable). The data starts at the IP
/// header.
#[inline(always)]
fn seen(ctx: &SkBuffContext, cgroup_id: u64, dns_port: u16, peer: Peer) -> Option<Seen> {
    match ctx.skb.protocol() {
        ETH_P_IP => seen4(ctx, cgroup_id, dns_port, peer),
        ETH_P_IPV6 => seen6(ctx, cgroup_id, peer),
        _ => None,
    }
}

#[inline(always)]
fn seen4(ctx: &SkBuffContext, cgroup_id: u64, dns_port: u16, peer: Peer) -> Option<Seen> {
    let first: u8 = ctx.load(0).ok()?;
    let header_len = usize::from(first & 0x0f) * 4;
    let proto: u8 = ctx.load(9).ok()?;
    let (addr_at, port_at) = match peer {
        Peer::Source => (12, header_len),
        Peer::Destination => (16, header_len + 2),
    };
    let addr: u32 = ctx.load(addr_at).ok()?;
    let bytes = ip4_bytes(addr);
    let mut seen = Seen {
        family: AF_INET,
        addr: bytes,
        port: 0,
        proto,
        options: header_len != IPV4_HEADER_LEN,
        approved: false,
    };
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return Some(seen);
    }
    // The port: in the first four bytes of the TCP or UDP header (reassembled by now).
    let port = u16::from_be(ctx.load::<u16>(port_at).ok()?);
    seen.port = port;
    let key = Dest4::new(cgroup_id, addr, port, proto);
    let responder = proto == PROTO_UDP && dns_port != 0 && addr == LOOPBACK4 && port == dns_port;
    // SAFETY: only whether the key is there is read.
    seen.approved =
        responder || unsafe { ALLOW4.get(&key) }.is_some() || in_net4(cgroup_id, addr, port, proto);
    Some(seen)
}

/// As [`seen4`] for IPv6: the fixed header, then TCP or UDP right after it (a packet with
/// extension headers is not from or to an approved destination).
#[inline(always)]
fn seen6(ctx: &SkBuffContext, cgroup_id: u64, peer: Peer) -> Option<Seen> {
    let proto: u8 = ctx.load(6).ok()?;
    let (addr_at, port_at) = match peer {
        Peer::Source => (8, IPV6_HEADER_LEN),
        Peer::Destination => (24, IPV6_HEADER_LEN + 2),
    };
    let addr: [u32; 4] = ctx.load(addr_at).ok()?;
    let bytes = ip6_bytes(addr);
    let mut seen = Seen {
        family: AF_INET6,
        addr: bytes,
        port: 0,
        proto,
        options: proto != PROTO_TCP && proto != PROTO_UDP,
        approved: false,
    };
    if seen.options {
        return Some(seen);
    }
    let port = u16::from_be(ctx.load::<u16>(port_at).ok()?);
    seen.port = port;
    let key = Dest6::new(cgroup_id, addr, port, proto);
    // SAFETY: only whether the key is there is read.
    seen.approved = unsafe { ALLOW6.get(&key) }.is_some() || in_net6(cgroup_id, addr, port, proto);
    Some(seen)
}
