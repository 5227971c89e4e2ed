//! `cgroup_skb/ingress`: what reaches a guarded call's sockets comes from its approved
//! destinations, or from guardd's DNS responder for it.
//!
//! The connect and sendmsg hooks see only what a call sends. A call may also listen: on a UDP
//! port it binds (landlock governs TCP binds only), or on a TCP socket that `listen` bound to an
//! ephemeral port without a `bind` (landlock sees explicit binds only), and then anyone who can
//! reach the host could feed it, an inbound channel no effect declares. Here every packet for a
//! call's socket is checked by its source: one from an approved destination (address, port and
//! protocol, as `ALLOW4`/`ALLOW6` hold them) passes, any other is dropped and counted
//! (`CallStats::inbound_dropped`). Anyone may send such a packet, so it is no divergence of the
//! call; what it would have carried never arrives.
//!
//! The program runs for the sockets of processes in the guard's cgroup only (it is attached
//! there), and looks the socket's cgroup up in `CALLS` first: the socket's, not the current
//! task's, which in softirq is whoever the CPU was running.

use aya_ebpf::{
    helpers::generated::bpf_skb_cgroup_id, macros::cgroup_skb, programs::SkBuffContext,
};
use guard_common::net::{Dest4, Dest6, LOOPBACK4, PROTO_TCP, PROTO_UDP};

use crate::maps::{ALLOW4, ALLOW6, CALL_STATS, CALLS, add};

const PASS: i32 = 1;
const DROP: i32 = 0;
/// `skb->protocol`, in network byte order as the context holds it.
const ETH_P_IP: u32 = 0x0800_u16.to_be() as u32;
const ETH_P_IPV6: u32 = 0x86dd_u16.to_be() as u32;

#[cgroup_skb(ingress)]
pub fn ingress(ctx: SkBuffContext) -> i32 {
    // SAFETY: the context's skb pointer is valid for the program's run.
    let cgroup_id = unsafe { bpf_skb_cgroup_id(ctx.skb.skb) };
    // SAFETY: the value is copied out at once.
    let Some(config) = (unsafe { CALLS.get(&cgroup_id) }).copied() else {
        return PASS;
    };
    let from_approved = match ctx.skb.protocol() {
        ETH_P_IP => from4(&ctx, cgroup_id, config.dns_port),
        ETH_P_IPV6 => from6(&ctx, cgroup_id),
        _ => None,
    };
    if from_approved == Some(true) {
        return PASS;
    }
    if let Some(stats) = CALL_STATS.get_ptr_mut(&cgroup_id) {
        // SAFETY: this call's value in the map; other CPUs add to it too, hence atomic.
        unsafe { add(&mut (*stats).inbound_dropped) };
    }
    DROP
}

/// Whether an IPv4 packet comes from one of the call's approved destinations (`None`: not
/// TCP or UDP, or unreadable). The data starts at the IP header.
#[inline(always)]
fn from4(ctx: &SkBuffContext, cgroup_id: u64, dns_port: u16) -> Option<bool> {
    let first: u8 = ctx.load(0).ok()?;
    let header_len = usize::from(first & 0x0f) * 4;
    let proto: u8 = ctx.load(9).ok()?;
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return None;
    }
    let addr: u32 = ctx.load(12).ok()?;
    // The source port: the first two bytes of the TCP or UDP header (reassembled by now).
    let port = u16::from_be(ctx.load::<u16>(header_len).ok()?);
    if proto == PROTO_UDP && dns_port != 0 && addr == LOOPBACK4 && port == dns_port {
        return Some(true);
    }
    let key = Dest4 {
        cgroup_id,
        addr,
        port,
        proto,
        _pad: 0,
    };
    // SAFETY: only whether the key is there is read.
    Some(unsafe { ALLOW4.get(&key) }.is_some())
}

/// As [`from4`] for IPv6: the fixed header, then TCP or UDP right after it (a packet with
/// extension headers is not from an approved destination).
#[inline(always)]
fn from6(ctx: &SkBuffContext, cgroup_id: u64) -> Option<bool> {
    const HEADER_LEN: usize = 40;
    let proto: u8 = ctx.load(6).ok()?;
    if proto != PROTO_TCP && proto != PROTO_UDP {
        return None;
    }
    let addr: [u32; 4] = ctx.load(8).ok()?;
    let port = u16::from_be(ctx.load::<u16>(HEADER_LEN).ok()?);
    let key = Dest6 {
        cgroup_id,
        addr,
        port,
        proto,
        _pad: [0; 5],
    };
    // SAFETY: only whether the key is there is read.
    Some(unsafe { ALLOW6.get(&key) }.is_some())
}
