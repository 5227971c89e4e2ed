//! Keys of the per-call destination allow-lists read by the `cgroup/connect*` programs.
//!
//! Addresses and ports are stored exactly as `bpf_sock_addr` holds them: addresses in network
//! byte order, as the raw words read from the context, so the kernel side compares without
//! swapping. Ports are kept in host order.

/// IPPROTO_TCP.
pub const PROTO_TCP: u8 = 6;
/// IPPROTO_UDP.
pub const PROTO_UDP: u8 = 17;

/// One allowed IPv4 destination of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dest4 {
    pub cgroup_id: u64,
    /// `user_ip4`: the address in network byte order.
    pub addr: u32,
    /// Host byte order.
    pub port: u16,
    /// `PROTO_TCP` or `PROTO_UDP`.
    pub proto: u8,
    pub _pad: u8,
}
const _: () = assert!(core::mem::size_of::<Dest4>() == 16);

impl Dest4 {
    /// The key of `addr:port` over `proto` for the call in `cgroup_id`.
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: u32, port: u16, proto: u8) -> Self {
        Self {
            cgroup_id,
            addr,
            port,
            proto,
            _pad: 0,
        }
    }
}

/// One allowed IPv6 destination of one call.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct Dest6 {
    pub cgroup_id: u64,
    /// `user_ip6`: four words in network byte order.
    pub addr: [u32; 4],
    /// Host byte order.
    pub port: u16,
    pub proto: u8,
    pub _pad: [u8; 5],
}
const _: () = assert!(core::mem::size_of::<Dest6>() == 32);

impl Dest6 {
    /// The key of `[addr]:port` over `proto` for the call in `cgroup_id`.
    #[inline(always)]
    pub const fn new(cgroup_id: u64, addr: [u32; 4], port: u16, proto: u8) -> Self {
        Self {
            cgroup_id,
            addr,
            port,
            proto,
            _pad: [0; 5],
        }
    }
}

/// An IPv4 address as `user_ip4` holds it, in the sixteen address bytes events carry.
#[inline(always)]
pub fn ip4_bytes(addr: u32) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..4].copy_from_slice(&addr.to_ne_bytes());
    bytes
}

/// An IPv6 address as `user_ip6` holds it (four network-order words), in the sixteen address
/// bytes events carry.
#[inline(always)]
pub fn ip6_bytes(addr: [u32; 4]) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    for (i, word) in addr.iter().enumerate() {
        bytes[i * 4..i * 4 + 4].copy_from_slice(&word.to_ne_bytes());
    }
    bytes
}

/// Size of each allow-list map.
pub const MAX_DESTS: u32 = 16384;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: repr(C), plain integers, explicit padding fields (sizes asserted above).
    unsafe impl aya::Pod for super::Dest4 {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Dest6 {}
}

/// Where a guarded call's DNS query was addressed before the `connect4`/`sendmsg4` programs sent
/// it to guardd's responder; `recvmsg4` puts it back as the answer's source, which resolvers
/// check. Keyed by socket cookie.
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsOrigin {
    /// `user_ip4`, network byte order.
    pub addr: u32,
    /// `user_port` as the context holds it (network byte order in the low 16 bits).
    pub port: u32,
}
const _: () = assert!(core::mem::size_of::<DnsOrigin>() == 8);

/// 127.0.0.1 as `user_ip4` holds it.
pub const LOOPBACK4: u32 = u32::from_ne_bytes([127, 0, 0, 1]);

/// How many DNS sockets of guarded calls are remembered at once (least recently used go).
pub const MAX_DNS_SOCKETS: u32 = 4096;

#[cfg(feature = "user")]
// SAFETY: repr(C), two u32, no padding (size asserted above).
unsafe impl aya::Pod for DnsOrigin {}
